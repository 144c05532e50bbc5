"""No later request delays an earlier one (conservative backfill), on real ledgers: a newcomer that would
move a waiting request's planned start later is deferred with the reason `queue` (naming how many wait
ahead and its own planned start), one that ends before the next planned start is admitted (backfill),
`check` on the command line answers as `submit` does, a waiting request keeps its place and starts at
its turn through `queue admit` without a resubmission, and scheduled retraining is served first."""
from __future__ import annotations

import json
from datetime import datetime, timedelta

import pytest

from lib.gate.terms import minute_up, utcnow
from lib.ledger.deciding import check_request, planned_iso, submit_request
from lib.ledger.finishing import finish_run
from lib.ledger.plan import plan_ledger
from tests.fixtures_ledger import demo_request, query, run_cli, teams_ledger, write_json
from tests.fixtures_slurm import GateServerProcess

H = timedelta(hours=1)

TEAMS = """
[defaults]
max_gpu_mem_gb = 80
max_runtime_hours = 48
pilot_required_above_gpu_hours = 100000

[teams.quad]
reserved_gpus = 16
retraining_reserved_gpus = 0
max_gpus_per_job = 16
monthly_budget_gpu_hours = 1000000
budget_basis_exploratory = "median"
budget_basis_retraining = "median"

[[snapshots]]
snapshot = "quad-data-v1"
team = "quad"
"""


def req(run_id: str, gpus: int, hours: float, **changes) -> dict:
    """A request of team quad for `gpus` accelerators running about `hours` hours of wall clock."""
    return demo_request(run_id=run_id, team="quad", gpus=gpus, data_snapshot="quad-data-v1",
                        estimated_gpu_hours=gpus * hours, budget_gpu_hours=gpus * hours * 2,
                        max_runtime_hours=min(48, hours * 1.2), **changes)


def codes(d) -> list[str]:
    return [r["code"] for r in d["reasons"]]


def c_start(path, now) -> datetime:
    (row,) = [r for r in plan_ledger(path, as_of=now)["queue"] if r["run_id"] == "C"]
    return row["planned_start"]


@pytest.fixture
def jumped_line(tmp_path):
    """Team quad (quota 16): A (8, 2 h) and B (8, 6 h) admitted, C (16) deferred for capacity; then A
    finishes early. (path, now, C's planned start: when B's reservation ends)."""
    path, now = teams_ledger(tmp_path, TEAMS, "quad"), utcnow()
    assert submit_request(req("A", 8, 2), db=path, now=now)["state"] == "admit"
    assert submit_request(req("B", 8, 6), db=path, now=now)["state"] == "admit"
    c = submit_request(req("C", 16, 10), db=path, now=now)
    assert c["state"] == "defer" and codes(c) == ["capacity"]
    # its GPU-hours as estimated (a calibration factor of 1): the scenario is about time, not estimates
    proc = run_cli("finish", "A", "--actual-gpu-hours", "16", "--stop-reason", "completed", db=path)
    assert proc.returncode == 0, proc.stderr
    start = c_start(path, now)
    (b_end,) = query(path, "SELECT reserved_until FROM runs WHERE run_id = 'B'")[0]
    assert start == b_end and b_end - now > 5 * H
    return path, now, start


def test_a_long_newcomer_waits_for_its_turn_and_c_does_not_move(jumped_line):
    path, now, start = jumped_line
    d = submit_request(req("D", 8, 39), db=path, now=now)
    assert d["state"] == "defer" and codes(d) == ["queue"], d
    (why,) = d["reasons"]
    assert why["in_use"] == 1 and why["unit"] == "requests" and "1 request(s) wait" in why["message"]
    # queued behind C: D starts after C (C holds all 16 from B's end for about 10 h)
    planned = datetime.fromisoformat(d["planned_start"])
    assert planned >= start + 9 * H and minute_up(planned) in why["message"]
    assert d["reserved_gpu_hours"] is None
    assert query(path, "SELECT count(*) FROM runs WHERE run_id = 'D'") == [(0,)]
    assert c_start(path, now) == start
    # D now waits in the line behind C, and C is still served first, at the same start
    rows = plan_ledger(path, as_of=now)["queue"]
    assert [r["run_id"] for r in rows] == ["C", "D"] and rows[0]["planned_start"] == start
    assert rows[1]["planned_start"] == planned.replace(microsecond=0) or abs(
        rows[1]["planned_start"] - planned) < timedelta(seconds=1)


def test_c_starts_at_its_turn_through_queue_admit_without_a_resubmission(jumped_line):
    path, now, start = jumped_line
    assert codes(submit_request(req("D", 8, 39), db=path, now=now)) == ["queue"]
    before = query(path, "SELECT count(*) FROM decisions WHERE run_id = 'C'")
    # nothing is admitted before C's turn
    out = run_cli("queue", "admit", "--now", now.isoformat(), db=path)
    assert out.returncode == 0, out.stderr and json.loads(out.stdout)["admitted"] == []
    # B ends (its epilog or finish): room for C, whose turn comes now; D stays behind it
    proc = run_cli("finish", "B", "--actual-gpu-hours", "10", "--stop-reason", "completed", db=path)
    assert proc.returncode == 0, proc.stderr
    out = run_cli("queue", "admit", db=path)
    assert out.returncode == 0, out.stderr
    assert [r["run_id"] for r in json.loads(out.stdout)["admitted"]] == ["C"]
    assert query(path, "SELECT count(*) FROM decisions WHERE run_id = 'C' AND state = 'admit'") == [(1,)]
    assert query(path, "SELECT count(*) FROM decisions WHERE run_id = 'C'")[0][0] == before[0][0] + 1
    assert query(path, "SELECT actor FROM decisions WHERE run_id = 'C' AND state = 'admit'") == [("gate-queue",)]
    # a second run admits nothing more
    again = run_cli("queue", "admit", db=path)
    assert json.loads(again.stdout)["admitted"] == []
    assert query(path, "SELECT count(*) FROM decisions WHERE run_id = 'C' AND state = 'admit'") == [(1,)]


def test_a_short_newcomer_that_ends_before_c_starts_is_admitted(jumped_line):
    path, now, start = jumped_line
    d = submit_request(req("D", 8, 2), db=path, now=now)
    assert d["state"] == "admit" and d["reasons"] == [], d
    (end,) = query(path, "SELECT reserved_until FROM runs WHERE run_id = 'D'")[0]
    assert end <= start
    assert c_start(path, now) == start


def test_check_on_the_command_line_gives_submits_answer(jumped_line, tmp_path):
    path, now, _ = jumped_line
    for run_id, hours, state in (("D-long", 39, "defer"), ("D-short", 2, "admit")):
        request = req(run_id, 8, hours)
        f = write_json(tmp_path / f"{run_id}.json", request)
        proc = run_cli("check", f, "--now", now.isoformat(), db=path)
        assert proc.returncode in (0, 1), proc.stderr
        checked = json.loads(proc.stdout)
        assert checked["state"] == state and check_request(request, db=path, now=now)["state"] == state
        assert codes(checked) == (["queue"] if state == "defer" else [])
    before = query(path, "SELECT count(*) FROM decisions")
    assert query(path, "SELECT count(*) FROM decisions") == before
    submitted = submit_request(req("D-long", 8, 39), db=path, now=now)
    assert submitted["state"] == "defer" and codes(submitted) == ["queue"]
    assert submitted["planned_start"] == checked_start(path, now, "D-long")


def checked_start(path, now, run_id) -> str:
    (row,) = [r for r in plan_ledger(path, as_of=now)["queue"] if r["run_id"] == run_id]
    return planned_iso(row["planned_start"])


def test_a_waiting_request_keeps_its_place_and_is_admitted_at_its_turn(jumped_line):
    path, now, start = jumped_line
    d = submit_request(req("D", 8, 39), db=path, now=now)
    assert codes(d) == ["queue"]
    # resubmitted before its turn: still deferred with `queue`, its wait unchanged
    again = submit_request(req("D", 8, 39), db=path, now=now + H)
    assert again["state"] == "defer" and codes(again) == ["queue"]
    assert again["planned_start"] == d["planned_start"]
    (since,) = query(path, "SELECT min(decided_at) FROM decisions WHERE run_id = 'D'")[0]
    assert since == now
    # C resubmitted at its turn, once B's end is recorded (a run holds until then), is admitted
    finish_run("B", actual_gpu_hours=48, stop_reason="completed", ended_at=start, db=path)
    assert submit_request(req("C", 16, 10), db=path, now=start + timedelta(seconds=1))["state"] == "admit"


def test_scheduled_retraining_is_served_first(jumped_line):
    path, now, start = jumped_line
    d = submit_request(req("R", 8, 39, kind="retraining"), db=path, now=now)
    assert d["state"] == "admit", d
    assert c_start(path, now) > start     # it moved C: retraining keeps the priority it has


def test_an_empty_line_decides_as_before(tmp_path):
    path, now = teams_ledger(tmp_path, TEAMS, "quad"), utcnow()
    assert submit_request(req("A", 8, 39), db=path, now=now)["state"] == "admit"
    assert submit_request(req("B", 8, 39), db=path, now=now)["state"] == "admit"
    assert codes(submit_request(req("C", 8, 2), db=path, now=now)) == ["capacity"]


def test_the_gate_server_keeps_the_same_line(jumped_line, tmp_path):
    """The warm gate server (a real process, the command line sending it submit and check) hears the
    line as the in-process deciders do: D waits behind C with `queue` at the planned start check
    gives, a run that ends before C's start is admitted, and C's start never moves."""
    path, now, start = jumped_line
    server = GateServerProcess(path, tmp_path / "gate.sock")
    try:
        env = {"TG_GATE_SOCKET": str(tmp_path / "gate.sock")}

        def through_server(op: str, request: dict) -> dict:
            f = write_json(tmp_path / f"{request['run_id']}-{op}.json", request)
            proc = run_cli(op, f, db=path, env=env)
            assert proc.returncode in (0, 1), proc.stderr
            return json.loads(proc.stdout)

        checked = through_server("check", req("D", 8, 39))
        d = through_server("submit", req("D", 8, 39))
        assert d["state"] == checked["state"] == "defer" and codes(d) == codes(checked) == ["queue"], d
        assert datetime.fromisoformat(d["planned_start"]) >= start + 9 * H
        short = through_server("submit", req("E", 8, 1))
        assert short["state"] == "admit", short
        server.flush()
        assert c_start(path, utcnow()) == start
        assert query(path, "SELECT state FROM decisions WHERE run_id IN ('D', 'E') ORDER BY run_id") == [
            ("defer",), ("admit",)]
    finally:
        server.stop()


def test_reservations_show_the_start_the_line_planned_beside_the_admit_and_the_run(jumped_line, monkeypatch,
                                                                                   fresh_caches):
    """C waited first in the line: its deferral named its planned start (B's end). B ends early, C is
    admitted at its turn: the Reservations page lists it with the planned start, the admit (before it,
    so negative late hours), and its run's start once the run starts."""
    from lib.dashboard import reservation_queries
    from lib.dashboard.filters import Filters
    from tests.fixtures_app import open_app
    path, now, start = jumped_line
    (planned,) = query(path, "SELECT decision_json->>'planned_start' FROM decisions WHERE run_id = 'C'")[0]
    assert planned == planned_iso(start)
    assert run_cli("finish", "B", "--actual-gpu-hours", "10", "--stop-reason", "completed", db=path).returncode == 0
    out = run_cli("queue", "admit", db=path)
    assert [r["run_id"] for r in json.loads(out.stdout)["admitted"]] == ["C"], out.stderr
    day = utcnow().date()
    rows = reservation_queries.reservations(Filters(day - timedelta(days=1), day), path)["line_starts"]
    (row,) = rows.to_dict("records")
    assert row["run_id"] == "C" and row["gpus"] == 16 and row["planned_start"] == datetime.fromisoformat(planned)
    assert row["admitted_at"] < row["planned_start"] and row["late_hours"] < -4
    assert row["waiting_since"] == now.replace(microsecond=0) or abs(row["waiting_since"] - now) < timedelta(seconds=1)
    monkeypatch.setenv("GATE_DB", str(path))
    monkeypatch.setenv("GATE_DEMO", "0")
    at = open_app("reservations")
    assert not at.exception, [e.value for e in at.exception]
    assert any("Started from the line" in c.value for c in at.caption)
