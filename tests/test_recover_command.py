"""`python -m lib recover` and `checkpoint`: an interruption of a started run is recorded with the
recovery decision; the same call again returns it and writes nothing; input that does not apply
exits 2 and writes nothing."""
from __future__ import annotations

import json
from datetime import datetime, timedelta

import duckdb
import pytest

from lib.gate.promotion import promotion_status
from lib.gate.terms import utcnow
from lib.ledger.deciding import submit_request
from lib.ledger.state import held_reservations
from tests.fixtures_ledger import query, run_cli, tiny_request

TABLES = ("runs", "interruptions", "checkpoints", "audit", "decisions")


def _started(db, run_id: str, hours_ago: float) -> datetime:
    """Submit `run_id` (admitted) and date its start `hours_ago` hours back, as the scheduler
    reporting its start would (the gate books a reservation from the submit time)."""
    d = submit_request(tiny_request(int(run_id[-3:]), run_id=run_id), db=db)
    assert d["state"] == "admit", d
    start = utcnow().replace(microsecond=0) - timedelta(hours=hours_ago)
    con = duckdb.connect(str(db))
    try:
        con.execute("UPDATE runs SET started_at = ? WHERE run_id = ?", [start, run_id])
    finally:
        con.close()
    return start


def _snapshot(db) -> dict:
    return {t: query(db, f"SELECT * FROM {t} ORDER BY ALL") for t in TABLES}


def _iso(t: datetime) -> str:
    return t.isoformat(timespec="seconds")


def test_a_preemption_after_a_checkpoint_resumes_and_loses_only_the_work_since(tiny_ledger):
    start = _started(tiny_ledger, "tiny-001", hours_ago=3)
    ckpt, preempted = start + timedelta(hours=1.5), start + timedelta(hours=2)
    p = run_cli("checkpoint", "tiny-001", "ckpt/step-900", "--at", _iso(ckpt), db=tiny_ledger)
    assert p.returncode == 0, p.stderr
    p = run_cli("recover", "tiny-001", "--event", "preempted", "--at", _iso(preempted), db=tiny_ledger)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    # 2 GPUs: the attempt billed 2 h x 2, of which the half hour after the checkpoint is lost
    assert out["attempt"] == 1 and out["attempt_gpu_hours"] == pytest.approx(4.0)
    assert out["lost_gpu_hours"] == pytest.approx(1.0) and out["lost_source"] == "checkpoint"
    assert out["action"] == "resume" and out["resume_from"] == "ckpt/step-900"
    assert "-> resume" in p.stderr
    assert query(tiny_ledger, "SELECT interruptions, restarts, act_lost_work_gpu_hours, ended_at, "
                              "last_valid_checkpoint FROM runs WHERE run_id = 'tiny-001'") == \
        [(1, 1, pytest.approx(1.0), None, "ckpt/step-900")]
    assert query(tiny_ledger, "SELECT event, attempt, action, source FROM interruptions") == \
        [("preempted", 1, "resume", "cli")]
    assert query(tiny_ledger, "SELECT action FROM audit WHERE action IN ('recover', 'checkpoint') "
                              "ORDER BY audit_id") == [("checkpoint",), ("recover",)]


def test_the_same_event_again_returns_the_recorded_decision_and_writes_nothing(tiny_ledger):
    start = _started(tiny_ledger, "tiny-002", hours_ago=2)
    args = ("recover", "tiny-002", "--event", "requeued", "--at", _iso(start + timedelta(hours=1)),
            "--lost-gpu-hours", "0.5")
    first = run_cli(*args, db=tiny_ledger)
    assert first.returncode == 0, first.stderr
    before = _snapshot(tiny_ledger)
    again = run_cli(*args, db=tiny_ledger)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout) == json.loads(first.stdout)
    assert _snapshot(tiny_ledger) == before
    # the same event with another lost-work figure is a contradiction, not a new event
    other = run_cli(*args[:-1], "0.75", db=tiny_ledger)
    assert other.returncode == 2 and "already recorded" in other.stderr
    assert _snapshot(tiny_ledger) == before


def test_a_later_attempt_starts_at_the_previous_interruption(tiny_ledger):
    start = _started(tiny_ledger, "tiny-003", hours_ago=3)
    for hours, attempt in ((1, 1), (2.5, 2)):
        p = run_cli("recover", "tiny-003", "--event", "preempted", "--at", _iso(start + timedelta(hours=hours)),
                    db=tiny_ledger)
        assert p.returncode == 0, p.stderr
        out = json.loads(p.stdout)
        assert out["attempt"] == attempt
    # no checkpoint: each attempt is lost whole (1 h, then 1.5 h, on 2 GPUs), and restarted
    assert out["attempt_gpu_hours"] == pytest.approx(3.0) and out["lost_source"] == "whole-attempt"
    assert out["spent_gpu_hours"] == pytest.approx(5.0) and out["action"] == "restart"
    assert query(tiny_ledger, "SELECT sum(lost_gpu_hours) FROM interruptions") == [(pytest.approx(5.0),)]


def test_a_budget_breach_ends_the_run_incomplete_unpromotable_checkpoint_kept(tiny_ledger):
    start = _started(tiny_ledger, "tiny-004", hours_ago=5)
    assert run_cli("checkpoint", "tiny-004", "ckpt/last", "--at", _iso(start + timedelta(hours=4)),
                   db=tiny_ledger).returncode == 0
    at = start + timedelta(hours=4.5)
    p = run_cli("recover", "tiny-004", "--event", "budget", "--at", _iso(at), db=tiny_ledger)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["action"] == "end" and out["code"] == "budget-breach" and out["stop_reason"] == "budget"
    cur = duckdb.connect(str(tiny_ledger), read_only=True)
    try:
        row = cur.execute("SELECT * FROM runs WHERE run_id = 'tiny-004'")
        run = dict(zip([c[0] for c in row.description], row.fetchone()))
        held = held_reservations(cur, utcnow())
    finally:
        cur.close()
    assert (run["stop_reason"], run["artifact_status"], run["last_valid_checkpoint"]) == \
        ("budget", "incomplete", "ckpt/last")
    assert run["ended_at"] == at and run["actual_gpu_hours"] == pytest.approx(9.0)
    assert not promotion_status(run)["promotable"]
    assert "tiny-004" not in {r["run_id"] for r in held}   # the end released its hold


@pytest.mark.parametrize("case", ["unknown-run", "never-started", "ended", "not-a-time", "future",
                                  "before-start", "lost-too-much", "bad-event", "not-after-last"])
def test_input_that_does_not_apply_exits_2_and_writes_nothing(tiny_ledger, tmp_path, case):
    start = _started(tiny_ledger, "tiny-005", hours_ago=2)
    deferred = tiny_request(6, gpus=8, run_id="tiny-006")          # 2 held + 8 > 8: deferred, never starts
    assert submit_request(deferred, db=tiny_ledger)["state"] == "defer"
    assert run_cli("recover", "tiny-005", "--event", "preempted", "--at", _iso(start + timedelta(hours=1)),
                   db=tiny_ledger).returncode == 0
    if case == "ended":
        assert run_cli("finish", "tiny-005", "--actual-gpu-hours", "3", "--stop-reason", "completed",
                       db=tiny_ledger).returncode == 0
    at = _iso(start + timedelta(hours=1.5))
    args = {
        "unknown-run": ("nope", "--event", "preempted"),
        "never-started": ("tiny-006", "--event", "preempted"),
        "ended": ("tiny-005", "--event", "preempted"),
        "not-a-time": ("tiny-005", "--event", "preempted", "--at", "yesterday"),
        "future": ("tiny-005", "--event", "preempted", "--at", _iso(utcnow() + timedelta(hours=2))),
        "before-start": ("tiny-005", "--event", "preempted", "--at", _iso(start - timedelta(hours=1))),
        "lost-too-much": ("tiny-005", "--event", "preempted", "--at", at, "--lost-gpu-hours", "50"),
        "bad-event": ("tiny-005", "--event", "exploded", "--at", at),
        "not-after-last": ("tiny-005", "--event", "node-fail", "--at", _iso(start + timedelta(minutes=30))),
    }[case]
    before = _snapshot(tiny_ledger)
    p = run_cli("recover", *args, db=tiny_ledger)
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert "recover" in p.stderr.splitlines()[0] and "Traceback" not in p.stderr
    assert _snapshot(tiny_ledger) == before


def test_a_checkpoint_of_a_run_that_never_started_exits_2(tiny_ledger):
    assert submit_request(tiny_request(7, gpus=10), db=tiny_ledger)["state"] != "admit"
    before = _snapshot(tiny_ledger)
    p = run_cli("checkpoint", "tiny-007", "ckpt/x", db=tiny_ledger)
    assert p.returncode == 2 and "never started" in p.stderr
    assert _snapshot(tiny_ledger) == before


def test_a_lost_work_of_minus_zero_is_stored_as_zero(tiny_ledger):
    start = _started(tiny_ledger, "tiny-001", hours_ago=3)
    p = run_cli("recover", "tiny-001", "--event", "preempted", "--at", _iso(start + timedelta(hours=1)),
                "--lost-gpu-hours", "-0", db=tiny_ledger)
    assert p.returncode == 0, p.stderr
    [(lost, given)] = query(tiny_ledger, "SELECT lost_gpu_hours, lost_given_gpu_hours FROM interruptions")
    assert str(lost) == str(given) == "0.0" and str(json.loads(p.stdout)["lost_gpu_hours"]) == "0.0"


def test_a_node_failure_is_reported_as_a_node_failure(tiny_ledger):
    start = _started(tiny_ledger, "tiny-001", hours_ago=3)
    p = run_cli("recover", "tiny-001", "--event", "node-fail", "--at", _iso(start + timedelta(hours=1)),
                db=tiny_ledger)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["event"] == "node-fail" and "node-fail (attempt 1" in p.stderr
    assert query(tiny_ledger, "SELECT event FROM interruptions") == [("node-fail",)]
