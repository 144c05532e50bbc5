"""A started run holds its accelerators until the ledger knows its end, not until its reservation's
planned end: the gate (command line, in process, the warm gate server) defers a request its overrun
leaves no room for, admits it once the run is finished, and expects the overrun to end at its
calibrated bound, else its time limit, else never; past its limit + a grace it is listed for the
operator. Real ledgers and processes throughout (docs/rules.md, Held reservations)."""
from __future__ import annotations

import json
from datetime import datetime, timedelta

import pytest

from lib.dashboard.reservation_queries import OVERRUNNING, PAST_LIMIT, with_hold_status
from lib.gate.terms import utcnow
from lib.ledger.connection import open_ledger
from lib.ledger.deciding import check_request
from lib.ledger.state import (OVERDUE_GRACE_HOURS, held_reservation, held_reservations, overrun_end, team_state,
                              unended_past_limit)
from tests.fixtures_ledger import run_cli
from tests.fixtures_slurm import GateServerProcess, quota_teams
from tests.test_gate_server_stale_state import probe_job

START = datetime(2026, 3, 2, 8, 0)


def overrun_ledger(tmp_path, now: datetime, *, limit_h: float = 12.0, started_h: float = 10.0) -> object:
    """A ledger whose team qa (quota 16) has one 16-GPU run started `started_h` hours before `now`
    whose 8-hour reservation ended and that has no end recorded (its time limit: `limit_h` hours)."""
    db = tmp_path / "gate.duckdb"
    teams = tmp_path / "teams.toml"
    teams.write_text(quota_teams(16))
    assert run_cli("teams", "--file", teams, db=db).returncode == 0
    start = (now - timedelta(hours=started_h)).replace(microsecond=0)
    csv = tmp_path / "run.csv"
    csv.write_text("run_id,team,kind,gpus,reserved_from,reserved_until,reserved_gpu_hours,started_at,"
                   "estimated_gpu_hours,max_runtime_hours\n"
                   f"long-1,qa,exploratory,16,{start.isoformat()},{(start + timedelta(hours=8)).isoformat()},"
                   f"128,{start.isoformat()},128,{limit_h}\n")
    p = run_cli("import", csv, db=db)
    assert p.returncode == 0, p.stderr
    return db


def qa_request(run_id: str = "probe-1", gpus: int = 8) -> dict:
    return {"run_id": run_id, "team": "qa", "kind": "exploratory", "gpus": gpus, "gpu_mem_gb": 40,
            "max_runtime_hours": 2, "budget_gpu_hours": 10, "estimated_gpu_hours": 4,
            "checkpoint_supported": True, "expected_interruptions": 0, "data_snapshot": "snap",
            "capacity": "stable"}


def codes(decision) -> list[str]:
    return [r["code"] for r in decision["reasons"]]


def test_an_overrunning_run_holds_its_quota_until_it_is_finished(tmp_path):
    now = utcnow()
    db = overrun_ledger(tmp_path, now)
    req = tmp_path / "req.json"
    req.write_text(json.dumps(qa_request()))
    p = run_cli("check", req, db=db)
    out = json.loads(p.stdout)
    assert out["state"] == "defer" and "capacity" in codes(out), p.stdout
    decision = check_request(qa_request(), db=db)
    assert decision["state"] == "defer" and "capacity" in codes(decision)

    with open_ledger(db, read_only=True) as con:
        (held,) = held_reservations(con, utcnow())
    assert held["overrun"] is True and held["planned_until"] < now
    # no calibration history: its expected end is its time limit, 12 h from its start (2 h from now)
    assert held["reserved_until"] == held["reserved_from"] + timedelta(hours=12)

    p = run_cli("finish", "long-1", "--actual-gpu-hours", "160", "--stop-reason", "completed", db=db)
    assert p.returncode == 0, p.stderr
    p = run_cli("check", req, db=db)
    assert json.loads(p.stdout)["state"] == "admit", p.stdout
    assert check_request(qa_request(), db=db)["state"] == "admit"


def test_a_reservation_starting_later_holds_now_and_an_admitted_one_without_start_is_taken_as_started(tmp_path):
    now = utcnow()
    db = overrun_ledger(tmp_path, now, started_h=-1.0)   # starts in an hour: an upcoming reservation
    with open_ledger(db, read_only=True) as con:
        (upcoming,) = held_reservations(con, now)
        assert "overrun" not in upcoming and upcoming["reserved_until"] > now
        # its window long passed with no end recorded: its start is known (started_at), so it holds
        (later,) = held_reservations(con, now + timedelta(hours=10))
        assert later["overrun"] is True


def test_the_expected_end_of_an_overrun():
    now = START + timedelta(hours=10)
    # the calibrated bound first: 128 GPU-h x 1.5 on 16 GPUs = 12 h from the start
    assert overrun_end(START, 16, 128.0, 1.5, 24.0, now) == START + timedelta(hours=12)
    # the bound is past (1.1 -> 8.8 h): the time limit
    assert overrun_end(START, 16, 128.0, 1.1, 24.0, now) == START + timedelta(hours=24)
    # an unknown bound or estimate: the time limit
    assert overrun_end(START, 16, 128.0, None, 24.0, now) == START + timedelta(hours=24)
    assert overrun_end(START, 16, None, 1.5, 24.0, now) == START + timedelta(hours=24)
    # both past, or the limit unknown: no known end
    assert overrun_end(START, 16, 128.0, 1.1, 9.0, now) is None
    assert overrun_end(START, 16, 128.0, None, None, now) is None
    # an end exactly at now is past
    assert overrun_end(START, 16, 128.0, 1.25, None, now) is None


def test_the_calibrated_bound_the_gate_reads_sets_the_expected_end(tmp_path):
    now = utcnow()
    db = overrun_ledger(tmp_path, now, limit_h=30.0)
    with open_ledger(db, read_only=True) as con:
        (held,) = held_reservations(con, now)
        upper = team_state(con, "qa", now, kind="exploratory")["calibration"]["upper_factor"]
    start = held["reserved_from"]
    assert held["reserved_until"] == overrun_end(start, 16, 128.0, upper, 30.0, now)


def test_a_run_past_its_limit_and_the_grace_is_listed_not_freed(tmp_path):
    now = utcnow()
    db = overrun_ledger(tmp_path, now, limit_h=12.0, started_h=12.0 + OVERDUE_GRACE_HOURS + 1)
    with open_ledger(db, read_only=True) as con:
        held = held_reservations(con, now)
        listed = unended_past_limit(con, now)
        # an hour before the grace ran out: overrunning, not listed
        earlier = now - timedelta(hours=2)
        assert unended_past_limit(con, earlier) == []
        (before,) = held_reservations(con, earlier)
    assert [h["run_id"] for h in listed] == ["long-1"] and listed[0]["past_limit"] is True
    assert [h["run_id"] for h in held] == ["long-1"] and held[0]["reserved_until"] is None   # no known end
    assert before["overrun"] and not before["past_limit"]
    import pandas as pd
    shown = with_hold_status(pd.DataFrame({"run_id": ["long-1", "other"]}), held)
    assert shown["hold_status"].tolist() == [PAST_LIMIT, ""]
    assert with_hold_status(pd.DataFrame({"run_id": ["long-1"]}), [before])["hold_status"].tolist() == [OVERRUNNING]
    assert check_request(qa_request(), db=db)["state"] == "defer"


@pytest.mark.slow
def test_the_gate_server_holds_an_overrunning_run_too(tmp_path):
    now = utcnow()
    db = overrun_ledger(tmp_path, now)
    server = GateServerProcess(db, tmp_path / "gate.sock")
    try:
        out = server.ask(probe_job("probe-server-1", "qa", 8))
        assert out is not None and out.code == 1, out and out.lines()
        p = run_cli("finish", "long-1", "--actual-gpu-hours", "160", "--stop-reason", "completed", db=db)
        assert p.returncode == 0, p.stderr
        out = server.ask(probe_job("probe-server-2", "qa", 8))
        assert out is not None and out.code == 0, out and out.lines()
    finally:
        server.flush()
        log = server.stop()
    assert "Traceback" not in log, log


def test_a_run_without_a_time_limit_is_flagged_a_grace_past_its_planned_end():
    now = datetime(2026, 12, 7, 12, 0)
    planned = now - timedelta(hours=OVERDUE_GRACE_HOURS + 1)
    row = ("r1", "t", "exploratory", 4, 8.0, planned - timedelta(hours=2), planned, "stable",
           planned - timedelta(hours=2), 8.0, None)
    held = held_reservation(row, now, lambda team, kind: None)
    assert held["overrun"] and held["past_limit"] and held["reserved_until"] is None
    later = held_reservation(row, planned + timedelta(hours=1), lambda team, kind: None)
    assert later["overrun"] and not later["past_limit"]
