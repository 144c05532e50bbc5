"""After a run started: its checkpoints and its interruptions, recorded, and the recovery decision
(lib.planning.recovery.decide_recovery, the Recovery planner's function) taken from what the ledger
knows of the run (`recover_run`, what `python -m lib recover` and the Slurm integration call).

An interruption ends one *attempt* of a run: the first attempt starts when the run started (its
`started_at`, else its reservation start), each later one at the previous interruption. Units:
GPU-hours (`_gpu_hours`), hours (`_h`).

- **attempt_gpu_hours** = (event time − attempt start) × the run's GPUs: what the attempt billed.
  Time spent waiting to be started again counts as billed (the ledger has no start time per attempt
  unless the caller gives one: `attempt_started_at`, e.g. sacct's Start for the Slurm epilog), so
  spend is never under-counted.
- **lost_gpu_hours**: the work of the attempt not kept at a checkpoint. Given by the caller
  (`lost_gpu_hours`), else from the run's checkpoint record (`checkpoints`): (event time − the last
  checkpoint saved during the attempt) × GPUs; without one, the whole attempt.
- **spent_gpu_hours** = the attempts' GPU-hours so far; **kept work** = spent − lost, which sets the
  progress saved at the last valid checkpoint.

The same (run, event, time) recorded again returns the decision recorded the first time and writes
nothing. A run that never started, or has ended, has nothing to recover: `RecoverInputError`.
"""
from __future__ import annotations

import json
from datetime import datetime, timedelta

from lib.gate.contracts import RecoverySituation
from lib.gate.terms import ATTEMPT_MATCH_TOLERANCE as MATCH_TOLERANCE, INTERRUPTING_EVENTS, InputError, json_text, naive_utc, utcnow
from lib.ledger import team_weeks
from lib.ledger.audit import Who, command_line, record
from lib.ledger.connection import transaction
from lib.ledger.finishing import UnknownRun
from lib.ledger.state import interruption_rate
from lib.ledger.writer import write_ledger
from lib.planning.recovery import decide_recovery

# event -> (the recovery function's event, the run's stop reason when the decision ends it)
EVENTS = {"preempted": ("preemption", "preempted"), "requeued": ("preemption", "requeued"),
          "node-fail": ("preemption", "node-fail"), "budget": ("budget-breach", "budget")}
FUTURE_SKEW = timedelta(minutes=5)   # an event time this far ahead of the clock is a bad time


class RecoverInputError(InputError):
    """recover_run or checkpoint_run cannot take this input (exit 2 on the command line)."""


def _time(name: str, value, now: datetime) -> datetime:
    try:
        t = naive_utc(value) if value is not None else now
    except ValueError as exc:
        raise RecoverInputError(f"{name} must be an ISO-8601 time: {exc}") from None
    if t > now + FUTURE_SKEW:
        raise RecoverInputError(f"{name} {t.isoformat()} is in the future (now {now.isoformat(timespec='seconds')})")
    return t


def _run(con, run_id: str) -> dict:
    cur = con.execute(
        "SELECT run_id, team, kind, capacity, gpus, budget_gpu_hours, estimated_gpu_hours, "
        "est_restart_gpu_hours, est_checkpoint_gpu_hours, coalesce(started_at, reserved_from) AS started, "
        "ended_at, stop_reason, last_valid_checkpoint, interruptions, restarts FROM runs WHERE run_id = ?",
        [run_id])
    row = cur.fetchone()
    if row is None:
        latest = con.execute("SELECT state FROM decisions WHERE run_id = ? ORDER BY decided_at DESC, "
                             "decision_id DESC LIMIT 1", [run_id]).fetchone()
        if latest is not None:
            raise RecoverInputError(f"run {run_id!r} never started: the gate did not admit it (its latest "
                                    f"decision: {latest[0]})")
        raise UnknownRun(f"run {run_id!r} is not in the ledger (submit or import it first)")
    return dict(zip([d[0] for d in cur.description], row))


def admitted_request(con, run_id: str) -> dict:
    """The request the gate admitted for the run ({} for an imported run): its stop policy and pilot."""
    row = con.execute("SELECT request_json FROM decisions WHERE run_id = ? AND state = 'admit' "
                      "ORDER BY decided_at DESC, decision_id DESC LIMIT 1", [run_id]).fetchone()
    try:
        request = json.loads(row[0]) if row else {}
    except ValueError:
        return {}
    return request if isinstance(request, dict) else {}


def _started(run: dict, at: datetime) -> datetime:
    if run["started"] is None:
        raise RecoverInputError(f"run {run['run_id']!r} never started (it holds no reservation): "
                                "nothing to recover")
    if run["ended_at"] is not None:
        raise RecoverInputError(f"run {run['run_id']!r} already ended ({run['stop_reason'] or 'unknown'} at "
                                f"{run['ended_at'].isoformat(timespec='seconds')}): nothing to recover")
    if at < run["started"]:
        raise RecoverInputError(f"--at {at.isoformat()} is before the run started "
                                f"({run['started'].isoformat(timespec='seconds')})")
    return run["started"]


def _situation(con, run: dict, request: dict, event: str, spent: float, kept: float,
               relaunches: int, at: datetime) -> RecoverySituation:
    gpus = run["gpus"]
    estimate = run["estimated_gpu_hours"] or 0.0
    total = max(estimate - (run["est_restart_gpu_hours"] or 0.0) - (run["est_checkpoint_gpu_hours"] or 0.0),
                kept, 1e-9)
    stop = request.get("stop_policy") or {}
    limit = stop.get("spend_limit_gpu_hours")
    pilot = request.get("pilot") or {}
    s: RecoverySituation = {
        "event": EVENTS[event][0], "run_id": run["run_id"], "gpus": gpus,
        # the admitted spend limit: the frozen stop policy's when it names one, else the run's budget
        "budget_gpu_hours": limit if limit is not None else (run["budget_gpu_hours"] or 0.0),
        "spent_gpu_hours": spent, "total_work_gpu_hours": total, "restarts_so_far": relaunches,
        "last_valid_checkpoint": run["last_valid_checkpoint"],
        "checkpoint_progress_fraction": min(1.0, kept / total) if run["last_valid_checkpoint"] else 0.0,
        "max_failed_steps": stop.get("max_failed_steps"),
    }
    if pilot.get("restart_minutes") is not None:
        s["restart_h"] = pilot["restart_minutes"] / 60.0
    if pilot.get("steps_per_second") and pilot.get("checkpoint_interval_steps"):
        s["checkpoint_interval_h"] = pilot["checkpoint_interval_steps"] / pilot["steps_per_second"] / 3600.0
        s["checkpoint_h"] = (pilot.get("checkpoint_write_s") or 0.0) / 3600.0
    if run["capacity"] == "preemptible":
        rate = interruption_rate(con, run["team"], at)
        if rate and rate["per_gpu_hour"] > 0:
            s["mtbf_h"] = 1.0 / (rate["per_gpu_hour"] * gpus)
    return s


def _recorded(con, run_id: str, event: str, at: datetime, lost) -> dict | None:
    sacct = con.execute(
        "SELECT occurred_at FROM interruptions WHERE run_id = ? AND decision_json IS NULL AND event IN "
        "(SELECT unnest(?::VARCHAR[])) AND occurred_at BETWEEN ? AND ? ORDER BY occurred_at LIMIT 1",
        [run_id, list(INTERRUPTING_EVENTS), at - MATCH_TOLERANCE, at + MATCH_TOLERANCE]).fetchone()
    if sacct is not None and event in INTERRUPTING_EVENTS:
        # the attempt a sacct import recorded (its End within a minute of `at`): Slurm relaunched it
        # without the gate; deciding now would count the attempt twice
        raise RecoverInputError(f"run {run_id!r}: the attempt that ended at {sacct[0].isoformat()} is already "
                                "recorded from sacct (the job was requeued without a decision of the gate)")
    row = con.execute("SELECT decision_json, lost_given_gpu_hours FROM interruptions "
                      "WHERE run_id = ? AND event = ? AND occurred_at = ?", [run_id, event, at]).fetchone()
    if row is None:
        return None
    if lost is not None and (row[1] is None or abs(row[1] - lost) > 1e-9):
        raise RecoverInputError(f"run {run_id!r}: {event} at {at.isoformat()} is already recorded "
                                f"with lost GPU-hours {row[1]!r}, not {lost!r}")
    return json.loads(row[0])


def recover_run(run_id: str, *, event: str, at=None, lost_gpu_hours: float | None = None, db=None,
                timeout_s: float = 10.0, who: Who | None = None, source: str = "cli", authority=None,
                attempt_started_at=None) -> dict:
    """Record an interruption (`event` in EVENTS) of a started, unfinished run at `at` (default now)
    and the recovery decision for it; returns that decision with the attempt's numbers. The same
    run, event and time again returns what was recorded and writes nothing. An **end** decision
    finishes the run: stopped for the event (or for budget), artifact incomplete, last valid
    checkpoint kept (with an `authority`, lib.ledger.deciding.SharedAuthority, its hold there is
    released and its spend added before the ledger commits). `attempt_started_at`: when the attempt
    began, where the caller knows it (no earlier than the run's start or its last interruption, no
    later than `at`). Raises UnknownRun, or RecoverInputError for input that does not apply."""
    if event not in EVENTS:
        raise RecoverInputError(f"event must be one of {', '.join(EVENTS)}; got {event!r}")
    if lost_gpu_hours is not None and not (0 <= lost_gpu_hours < float("inf")):
        raise RecoverInputError(f"--lost-gpu-hours must be a finite number >= 0; got {lost_gpu_hours!r}")
    if lost_gpu_hours is not None:
        lost_gpu_hours += 0.0   # -0.0 is stored as 0.0
    now = utcnow()
    at = _time("--at", at, now)
    who = who or command_line()
    with write_ledger(db, timeout_s) as con, transaction(con):
        run = _run(con, run_id)
        done = _recorded(con, run_id, event, at, lost_gpu_hours)
        if done is not None:
            return done
        started = _started(run, at)
        n, last_at, spent_before, lost_before, relaunches = con.execute(
            "SELECT count(*), max(occurred_at), coalesce(sum(attempt_gpu_hours), 0), "
            "coalesce(sum(lost_gpu_hours), 0), count(*) FILTER (WHERE action IN ('resume', 'restart')) "
            "FROM interruptions WHERE run_id = ?", [run_id]).fetchone()
        if last_at is not None and at <= last_at:
            raise RecoverInputError(f"--at {at.isoformat()} is not after the run's last recorded "
                                    f"interruption ({last_at.isoformat(timespec='seconds')})")
        attempt_start = max(started, last_at) if last_at else started
        if attempt_started_at is not None:
            begun = _time("attempt start", attempt_started_at, now)
            if begun > at:
                raise RecoverInputError(f"the attempt start {begun.isoformat()} is after --at {at.isoformat()}")
            attempt_start = max(attempt_start, begun)
        gpus = run["gpus"]
        attempt = (at - attempt_start).total_seconds() / 3600.0 * gpus
        if lost_gpu_hours is not None:
            if lost_gpu_hours > attempt * (1 + 1e-9) + 1e-9:
                raise RecoverInputError(f"--lost-gpu-hours {lost_gpu_hours:g} is more than the attempt billed "
                                        f"({attempt:.3f} GPU-h since {attempt_start.isoformat(timespec='seconds')})")
            lost, lost_source = lost_gpu_hours, "given"
        else:
            saved = con.execute("SELECT max(saved_at) FROM checkpoints WHERE run_id = ? AND saved_at >= ? "
                                "AND saved_at <= ?", [run_id, attempt_start, at]).fetchone()[0]
            if saved is not None:
                lost, lost_source = (at - saved).total_seconds() / 3600.0 * gpus, "checkpoint"
            else:
                lost, lost_source = attempt, "whole-attempt"
        spent = spent_before + attempt
        kept = max(0.0, spent - lost_before - lost)
        situation = _situation(con, run, admitted_request(con, run_id), event, spent, kept, relaunches, at)
        decision = decide_recovery(situation)
        out = {"run_id": run_id, "team": run["team"], "event": event, "at": at.isoformat(), "attempt": n + 1,
               "attempt_started_at": attempt_start.isoformat(), "attempt_gpu_hours": attempt,
               "lost_gpu_hours": lost, "lost_source": lost_source, **decision,
               "event": event}   # the event as the caller named it (node-fail, not the decision's "preemption")
        if decision["action"] == "end":
            out["stop_reason"] = "budget" if event == "budget" or decision["stop_reason"] == "budget" \
                else decision["stop_reason"] if decision["stop_reason"] == "failed-steps" else EVENTS[event][1]
        con.execute(
            "INSERT INTO interruptions (run_id, event, occurred_at, attempt, attempt_started_at, "
            "attempt_gpu_hours, lost_gpu_hours, lost_given_gpu_hours, action, decision_json, source, "
            "recorded_at, actor) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [run_id, event, at, n + 1, attempt_start, attempt, lost, lost_gpu_hours, decision["action"],
             json_text(out), source, now, who["actor"]])
        _apply(con, run, out, event, spent, lost, at, now)
        record(con, who, "recover", updated=1,
               detail=f"run {run_id}: {event} at {at.isoformat(timespec='seconds')} -> {decision['action']}")
        if authority is not None and out["action"] == "end":
            authority.finished(run_id, run["team"], at, spent, "recover-end", now)
    return out


def _apply(con, run: dict, out: dict, event: str, spent: float, lost: float, at: datetime,
           now: datetime) -> None:
    """The run row after the decision: interruption and relaunch counts, lost work; an end finishes it."""
    interrupted = 1 if event in INTERRUPTING_EVENTS else 0
    relaunched = 1 if out["action"] in ("resume", "restart") else 0
    weeks = team_weeks.weeks_of(con, "SELECT ?", [run["run_id"]])
    con.execute("UPDATE runs SET interruptions = coalesce(interruptions, 0) + ?, restarts = coalesce(restarts, 0) + ?, "
                "act_lost_work_gpu_hours = coalesce(act_lost_work_gpu_hours, 0) + ?, updated_at = ? WHERE run_id = ?",
                [interrupted, relaunched, lost, now, run["run_id"]])
    if out["action"] == "end":
        con.execute("UPDATE runs SET stop_reason = ?, ended_at = ?, actual_gpu_hours = ?, artifact_status = "
                    "'incomplete', started_at = coalesce(started_at, reserved_from) WHERE run_id = ?",
                    [out["stop_reason"], at, spent, run["run_id"]])
        team_weeks.refresh(con, weeks | team_weeks.weeks_of(con, "SELECT ?", [run["run_id"]]))


def checkpoint_run(run_id: str, name: str, *, at=None, db=None, timeout_s: float = 10.0,
                   who: Who | None = None) -> dict:
    """Record that a started, unfinished run saved a valid checkpoint `name` at `at` (default now):
    it becomes the run's last valid checkpoint, and work before it is kept if the run is interrupted
    later. The same checkpoint at the same time again writes nothing."""
    if type(name) is not str or not name.strip() or len(name) > 2000:
        raise RecoverInputError("the checkpoint name must be a non-empty string of at most 2000 characters")
    now = utcnow()
    at = _time("--at", at, now)
    who = who or command_line()
    with write_ledger(db, timeout_s) as con, transaction(con):
        run = _run(con, run_id)
        _started(run, at)
        seen = con.execute("SELECT 1 FROM checkpoints WHERE run_id = ? AND name = ? AND saved_at = ?",
                           [run_id, name, at]).fetchone()
        if seen is None:
            con.execute("INSERT INTO checkpoints (run_id, name, saved_at, recorded_at) VALUES (?, ?, ?, ?)",
                        [run_id, name, at, now])
            latest = con.execute("SELECT max(saved_at) FROM checkpoints WHERE run_id = ?", [run_id]).fetchone()[0]
            if latest == at:
                con.execute("UPDATE runs SET last_valid_checkpoint = ?, updated_at = ? WHERE run_id = ?",
                            [name, now, run_id])
            record(con, who, "checkpoint", inserted=1, detail=f"run {run_id}: checkpoint at {at.isoformat()}")
    return {"run_id": run_id, "checkpoint": name, "saved_at": at.isoformat(), "recorded": seen is None}
