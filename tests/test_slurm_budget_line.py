"""The admit's budget line: an accepted job's message carries the team's budget left this month and
the burn-down's projected run-out days, from the warm gate server (kept warm there, never computed on
the sbatch path); on the real cluster, sbatch shows it."""
from __future__ import annotations

import datetime as dt
import time
from dataclasses import replace

import pytest

from lib.dashboard.filters import Filters
from lib.dashboard.forecasts import budget_outlook
from lib.ledger.connection import open_ledger
from lib.ledger.deciding import submit_request
from lib.ledger.finishing import finish_run
from lib.gate.terms import utcnow
from lib.slurm.judge import judged_for
from lib.slurm.live import LiveGate
from lib.slurm.runouts import RunOuts, budget_text, month_budget
from lib.slurm.wire import EXIT_ACCEPTED, EXIT_REFUSED
from tests.fixtures_slurm import COMMENT_REQUEST, GateServerProcess, comment, hook_request, make_slurm_ledger
from tests.fixtures_ledger import query

DAY = dt.date(2026, 12, 21)


def test_the_line_says_what_is_left_of_what_and_the_days_at_p50_and_p90():
    line = budget_text("vision", 5000.0, 1234.56, (DAY, dt.date(2026, 12, 18)))
    assert line == ("training-gate: team vision budget this month: 1,234.6 of 5,000.0 GPU-h left; "
                    "projected to run out Dec 21 at P50, Dec 18 at P90")
    assert budget_text("nlp", 100.0, 40.0, (None, DAY)).endswith("run out Dec 21 at P90 (not at P50)")
    assert budget_text("nlp", 100.0, 40.0, (None, None)).endswith("not projected to run out this month (P50 and P90)")
    assert "not known yet" in budget_text("nlp", 100.0, 40.0, None)
    over = budget_text("nlp", 100.0, -12.5, (DAY, DAY))
    assert "0.0 of 100.0 GPU-h left (12.5 GPU-h over)" in over


def test_the_budget_line_follows_the_decision_on_its_own_msg_line():
    decision = {"state": "admit", "run_id": "r1", "team": "vision", "reserved_gpu_hours": 2.0,
                "estimate": {"judged_gpu_hours": 2.0}}
    out = replace(judged_for(decision), budget="training-gate: team vision budget this month: 1.0 of 2.0 GPU-h left")
    lines = out.lines()
    assert lines[0].startswith("MSG training-gate: admitted run r1")
    assert lines[1] == "MSG " + out.budget
    assert lines[2] == "NAME r1"


@pytest.fixture
def nearly_spent(slurm_ledger):
    """A ledger whose team vision (budget set to 10 GPU-h) ended a 9 GPU-h run this month: (path, now).
    `now` is today's noon, so the run held from it ends today whatever the hour the test runs at."""
    db = slurm_ledger
    now = utcnow().replace(hour=12, minute=0, second=0, microsecond=0)
    with open_ledger(db) as con:
        con.execute("UPDATE teams SET monthly_budget_gpu_hours = 10 WHERE team = 'vision'")
    start = max(now - dt.timedelta(hours=2), now.replace(day=1, hour=0, minute=0, second=0))
    req = {**COMMENT_REQUEST, "run_id": "vision-spent", "team": "vision", "gpus": 2, "max_runtime_hours": 1,
           "capacity": "stable", "estimated_gpu_hours": 9, "budget_gpu_hours": 20}   # as estimated: factor 1
    assert submit_request(req, db=db, now=start)["state"] == "admit"
    finish_run("vision-spent", actual_gpu_hours=9, stop_reason="completed", ended_at=start + dt.timedelta(minutes=30),
               started_at=start, db=db)
    return db, now


def test_the_server_counts_the_admit_and_keeps_the_one_burn_downs_days_warm(nearly_spent):
    db, now = nearly_spent
    live = LiveGate(db, flusher=False)
    try:
        req = {**COMMENT_REQUEST, "run_id": "vision-last", "team": "vision", "gpus": 2, "max_runtime_hours": 0.5,
               "capacity": "stable", "estimated_gpu_hours": 1.0}
        decision, seq = live.decide(req, now=now, origin="slurm", write=True)
        assert decision["state"] == "admit"   # 9 spent + 1 = the budget of 10
        live.settle(seq, answered=True)
        assert month_budget(live, "vision", "exploratory", now) == (10.0, 9.0, 1.0)   # nothing left
        live.flush()
        runouts = RunOuts(live.db, max_age_s=0)
        assert runouts.get(now) is None       # not computed yet: the caller never waits
        runouts.wait()
        days = runouts.get(now)
        runouts.wait()
    finally:
        live.close()
    # 9 ended + 1 held until this afternoon reach the budget of 10 today, at P50 and P90
    assert days["vision"] == (now.date(), now.date())
    burn = budget_outlook(Filters(now.date(), now.date()), db, now)["burn"].set_index("team")
    assert days["vision"] == (burn.loc["vision", "exhausts_p50"], burn.loc["vision", "exhausts_p90"])


def test_the_gate_servers_answer_to_an_admit_carries_the_budget_line(tmp_path):
    db = make_slurm_ledger(tmp_path / "gate.duckdb")
    (budget,) = query(db, "SELECT monthly_budget_gpu_hours FROM teams WHERE team = 'vision'")[0]
    server = GateServerProcess(db, tmp_path / "gate.sock")
    try:
        got = server.ask(hook_request("vision-line-1", estimated_gpu_hours=0.5))
        deadline = time.monotonic() + 120   # the run-out days are computed in the background from the start
        i = 1
        while "not known yet" in got.lines()[1] and time.monotonic() < deadline:
            time.sleep(1)
            i += 1
            got = server.ask(hook_request(f"vision-line-{i}", estimated_gpu_hours=0.5))
        refused = server.ask(hook_request("vision-line-big", estimated_gpu_hours=budget * 2))
    finally:
        server.stop()
    assert got.code == EXIT_ACCEPTED
    msgs = [ln for ln in got.lines() if ln.startswith("MSG ")]
    assert msgs[0].startswith(f"MSG training-gate: admitted run vision-line-{i}")
    assert msgs[1] == ("MSG training-gate: team vision budget this month: "
                       f"{budget - 0.5 * i:,.1f} of {budget:,.1f} GPU-h left; "
                       "not projected to run out this month (P50 and P90)")
    assert refused.code == EXIT_REFUSED
    assert [ln for ln in refused.lines() if ln.startswith("MSG ")] == [refused.lines()[0]]   # no budget line


@pytest.mark.slurm
def test_sbatch_shows_the_budget_line_on_an_accepted_job(cluster):
    (budget,) = query(cluster.db, "SELECT monthly_budget_gpu_hours FROM teams WHERE team = 'vision'")[0]
    run_id = f"budget-line-{int(time.time())}"
    r = cluster.sbatch("--account=vision", "--gres=gpu:2", "--time=5", "--hold",
                       f"--comment={comment(run_id=run_id, estimated_gpu_hours=0.5)}")
    assert r.returncode == 0, r.stderr
    jobid = r.stdout.strip().split(";")[0]
    cluster.slurm("scancel", jobid)
    said = [ln for ln in r.stderr.splitlines() if "training-gate" in ln]
    assert f"training-gate: admitted run {run_id}" in said[0]
    assert f"training-gate: team vision budget this month: {budget - 0.5:,.1f} of {budget:,.1f} GPU-h left" in said[1]
