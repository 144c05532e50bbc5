"""The gate's own commands for its line of waiting requests, on real ledgers: `queue` lists it in serve
order with each request's place and planned start (the forward plan's), `queue admit` admits a request
at its turn exactly once (and writes nothing for one that does not fit, nor on a second run), records an
expiry once, and `cancel` takes a request out of the line for its team's members only, audited."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timedelta

import pytest

from lib.gate.terms import utcnow
from lib.ledger.audit import os_user
from lib.ledger.connection import open_ledger, transaction
from lib.ledger.deciding import submit_request
from lib.ledger.plan import plan_ledger
from lib.ledger.recording import canonical_json
from tests.fixtures_ledger import REPO, demo_request, query, run_cli, teams_ledger

TEAMS = """
[defaults]
max_gpu_mem_gb = 80
max_runtime_hours = 48
pilot_required_above_gpu_hours = 1000

[teams.quad]
reserved_gpus = 16
retraining_reserved_gpus = 0
max_gpus_per_job = 16
monthly_budget_gpu_hours = 100000
queue_max_age_days = 2

[[snapshots]]
snapshot = "quad-data-v1"
team = "quad"
"""


def req(run_id: str, gpus: int, **changes) -> dict:
    return demo_request(run_id=run_id, team="quad", gpus=gpus, data_snapshot="quad-data-v1", **changes)


@pytest.fixture
def line(tmp_path):
    """Team quad (quota 16): A (8) and B (8) admitted now, C (16) deferred for capacity. (path, now)."""
    path, now = teams_ledger(tmp_path, TEAMS, "quad"), utcnow()
    assert submit_request(req("A", 8), db=path, now=now)["state"] == "admit"
    assert submit_request(req("B", 8), db=path, now=now)["state"] == "admit"
    c = submit_request(req("C", 16), db=path, now=now)
    assert c["state"] == "defer" and [r["code"] for r in c["reasons"]] == ["capacity"]
    return path, now


def table_counts(db) -> tuple:
    return query(db, "SELECT (SELECT count(*) FROM decisions), (SELECT count(*) FROM runs), "
                     "(SELECT count(*) FROM audit)")[0]


def decisions_of(db, run_id) -> list[tuple]:
    return query(db, "SELECT state, reason_codes, actor, decision_json FROM decisions WHERE run_id = ? "
                     "ORDER BY decision_id", [run_id])


def ok(proc) -> dict:
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def access_file(tmp_path, users) -> str:
    path = tmp_path / "access.toml"
    path.write_text("[access]\ncheck_command_line = true\n\n[teams.quad]\nusers = "
                    + json.dumps(users) + "\n", encoding="utf-8")
    return str(path)


def test_queue_lists_the_line_in_serve_order_with_the_plans_start(line):
    path, now = line
    out = ok(run_cli("queue", db=path))
    (c,) = out["queue"]
    assert (c["place"], c["team_place"], c["run_id"], c["team"], c["kind"], c["gpus"]) == (1, 1, "C", "quad",
                                                                                          "exploratory", 16)
    assert c["reasons"] == ["capacity"] and out["waiting"] == 1
    ends = query(path, "SELECT max(reserved_until) FROM runs WHERE run_id IN ('A', 'B')")[0][0]
    planned = datetime.fromisoformat(c["planned_start"])
    # ISO seconds, never earlier than the moment it fits: the reservations' end rounded up to the second
    assert ends <= planned < ends + timedelta(seconds=1) and len(c["planned_start"]) == 19
    # one plan: the same start as `plan` gives, and the same place
    (row,) = plan_ledger(path)["queue"]
    assert row["run_id"] == "C" and row["planned_start"] == ends
    assert ok(run_cli("queue", "--team", "other", db=path))["queue"] == []


def test_admit_before_the_turn_writes_nothing_and_after_it_admits_once(line):
    path, now = line
    before = table_counts(path)
    out = ok(run_cli("queue", "admit", "--now", now.isoformat(), db=path))
    assert out["admitted"] == [] and out["expired"] == [] and table_counts(path) == before
    for run in ("A", "B"):
        ok(run_cli("finish", run, "--actual-gpu-hours", "5", "--stop-reason", "completed", db=path))
    proc = run_cli("queue", "admit", db=path)
    out = ok(proc)
    assert [r["run_id"] for r in out["admitted"]] == ["C"], proc.stderr
    (admit,) = [d for d in decisions_of(path, "C") if d[0] == "admit"]
    assert admit[2] == "gate-queue"
    (since,) = query(path, "SELECT min(decided_at) FROM decisions WHERE run_id = 'C' AND state = 'defer'")[0]
    assert datetime.fromisoformat(json.loads(admit[3])["waiting_since"]) == since
    assert query(path, "SELECT reserved_gpu_hours IS NOT NULL FROM runs WHERE run_id = 'C'") == [(True,)]
    after = table_counts(path)
    again = run_cli("queue", "admit", db=path)
    assert ok(again)["admitted"] == [] and table_counts(path) == after and "nothing written" in again.stderr
    assert ok(run_cli("queue", db=path))["queue"] == []


def test_a_request_that_waited_too_long_expires_once_and_is_still_counted_expired(line):
    path, now = line
    old = req("OLD", 4)
    with open_ledger(path) as con, transaction(con):
        con.execute("INSERT INTO decisions (decided_at, run_id, team, kind, state, reason_codes, origin, request_json, "
                    "decision_json) VALUES (?, 'OLD', 'quad', 'exploratory', 'defer', ['capacity'], 'cli', ?, '{}')",
                    [now - timedelta(days=3), canonical_json(old)])
    assert plan_ledger(path)["expired"]["count"] == 1
    out = ok(run_cli("queue", "admit", db=path))
    assert [r["run_id"] for r in out["expired"]] == ["OLD"]
    ((state, codes, actor, text),) = [d for d in decisions_of(path, "OLD") if d[0] != "defer"]
    assert (state, codes, actor) == ("reject", ["queue-expired"], "gate-queue")
    assert json.loads(text)["waiting_since"].startswith((now - timedelta(days=3)).isoformat()[:19])
    before = table_counts(path)
    assert ok(run_cli("queue", "admit", db=path))["expired"] == [] and table_counts(path) == before
    expired = plan_ledger(path)["expired"]
    assert expired["count"] == 1 and [r["run_id"] for r in expired["rows"]] == ["OLD"]
    assert [r["run_id"] for r in ok(run_cli("queue", db=path))["queue"]] == ["C"]


def test_a_resubmitted_expired_request_waits_anew(line):
    path, now = line
    with open_ledger(path) as con, transaction(con):
        con.execute("INSERT INTO decisions (decided_at, run_id, team, kind, state, reason_codes, origin, request_json, "
                    "decision_json) VALUES (?, 'BIG', 'quad', 'exploratory', 'defer', ['capacity'], 'cli', ?, '{}')",
                    [now - timedelta(days=3), canonical_json(req("BIG", 16))])
    ok(run_cli("queue", "admit", db=path))
    assert submit_request(req("BIG", 16), db=path)["state"] == "defer"
    rows = {r["run_id"]: r for r in ok(run_cli("queue", db=path))["queue"]}
    assert set(rows) == {"C", "BIG"} and rows["C"]["place"] == 1 and rows["BIG"]["place"] == 2
    assert datetime.fromisoformat(rows["BIG"]["waiting_since"]) > now


def test_cancel_by_a_member_takes_the_request_out_of_the_line(line, tmp_path):
    path, _ = line
    env = {"GATE_ACCESS": access_file(tmp_path, [os_user()])}
    proc = run_cli("cancel", "C", db=path, env=env)
    assert ok(proc)["run_id"] == "C" and "left the queue" in proc.stderr
    ((state, codes, actor, _),) = [d for d in decisions_of(path, "C") if d[0] != "defer"]
    assert (state, codes) == ("reject", ["cancelled"]) and actor.startswith(os_user())
    assert query(path, "SELECT action, detail FROM audit WHERE action = 'cancel'")[0][1].startswith("cancelled C")
    assert ok(run_cli("queue", db=path))["queue"] == []
    assert plan_ledger(path)["expired"]["count"] == 0
    again = run_cli("cancel", "C", db=path, env=env)     # no longer waiting
    assert again.returncode == 2 and "does not wait" in again.stderr


def test_cancel_by_an_outsider_is_refused_and_audited(line, tmp_path):
    path, _ = line
    before = query(path, "SELECT count(*) FROM decisions")[0][0]
    proc = run_cli("cancel", "C", db=path, env={"GATE_ACCESS": access_file(tmp_path, ["someone-else"])})
    assert proc.returncode == 2 and "may not cancel" in proc.stderr, proc.stderr
    assert query(path, "SELECT count(*) FROM decisions")[0][0] == before
    ((actor, detail),) = query(path, "SELECT actor, detail FROM audit WHERE action = 'cancel'")
    assert actor.startswith(os_user()) and detail.startswith("refused to cancel C")
    assert [r["run_id"] for r in ok(run_cli("queue", db=path))["queue"]] == ["C"]


@pytest.mark.parametrize("args", [("cancel", "NOBODY"), ("cancel", "A"), ("queue", "--now", "1999-12-31T00:00"),
                                  ("queue", "admit", "--now", "2100-01-01T00:00"), ("queue", "admit", "--now", "soon")])
def test_bad_input_exits_2_and_writes_nothing(line, args):
    path, _ = line
    before = table_counts(path)
    proc = run_cli(*args, db=path)
    assert proc.returncode == 2 and proc.stderr.strip() and proc.stdout == "", proc.stderr
    assert table_counts(path) == before


def test_two_admits_at_once_admit_c_exactly_once(line):
    path, _ = line
    for run in ("A", "B"):
        ok(run_cli("finish", run, "--actual-gpu-hours", "5", "--stop-reason", "completed", db=path))
    env = {**os.environ, "GATE_DB": str(path)}
    procs = [subprocess.Popen([sys.executable, "-m", "lib", "queue", "admit"], cwd=REPO, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    admitted = [r["run_id"] for out, _ in outs for r in json.loads(out)["admitted"]]
    assert admitted == ["C"]
    assert query(path, "SELECT count(*) FROM decisions WHERE run_id = 'C' AND state = 'admit'") == [(1,)]
    assert query(path, "SELECT count(*) FROM decisions WHERE run_id = 'C'") == [(2,)]
