"""Finishing a run: its actuals and how it stopped, recorded against its run ID with the audit of
who wrote it, in one write transaction (`finish_run`, what `python -m lib finish` calls).
"""
from __future__ import annotations

from lib.gate.stopping import artifact_status_for
from lib.gate.terms import (ARTIFACT_STATUSES, INCOMPLETE_STOPS, STOP_REASONS, InputError, checked_count,
                            checked_number, naive_utc, utcnow)
from lib.ledger import team_weeks
from lib.ledger.audit import command_line, record
from lib.ledger.connection import LedgerError, transaction
from lib.ledger.writer import write_ledger


class UnknownRun(LedgerError):
    """finish_run was given a run ID the ledger does not know."""


class FinishInputError(InputError):
    """finish_run was given a value it cannot record (the caller's input, not a gate failure)."""


def _check_hours(name, value, *, required=False) -> float | None:
    if value is None:
        if required:
            raise FinishInputError(f"{name} is required")
        return None
    try:
        return checked_number(name, value)
    except InputError as exc:
        raise FinishInputError(str(exc)) from None


def _check_count(name, value) -> int | None:
    if value is None:
        return None
    if type(value) is not int:
        raise FinishInputError(f"{name} must be a whole number >= 0, got {value!r}")
    try:
        return checked_count(name, value, minimum=0)
    except InputError as exc:
        raise FinishInputError(str(exc)) from None


def finish_run(run_id, *, actual_gpu_hours, stop_reason, ended_at=None, started_at=None,
               last_valid_checkpoint=None, interruptions=None, restarts=None, artifact_status=None,
               full_evaluation=None, holdout_reads=None, act_checkpoint_gpu_hours=None,
               act_retry_gpu_hours=None, act_eval_gpu_hours=None, act_lost_work_gpu_hours=None,
               db=None, timeout_s: float = 10.0, who=None, authority=None) -> dict:
    """Record a run's actuals and how it stopped against its run ID; returns the updated run row.
    The write is recorded in the audit in the same transaction (action "finish": the run ID and stop
    reason) as `who` (a lib.ledger.audit.Who; default: the OS user on the command line).

    ended_at defaults to now, started_at to what the ledger has (else the reservation start).
    artifact_status defaults from the stop reason: budget / wall-clock / failed-steps -> incomplete,
    completed / early-stop -> complete, anything else -> none. The act_* items are parts of
    actual_gpu_hours (the rest is useful compute), so they may not sum to more than it.
    Raises UnknownRun for a run ID not in the ledger, FinishInputError (an InputError) for bad values.
    With an `authority` (lib.ledger.deciding.SharedAuthority) the run's hold there is released and its
    spend added, committed before the ledger's transaction: a failure there leaves the ledger unchanged.
    """
    actual = _check_hours("actual_gpu_hours", actual_gpu_hours, required=True)
    if stop_reason not in STOP_REASONS:
        raise FinishInputError(f"stop_reason must be one of {', '.join(STOP_REASONS)}; got {stop_reason!r}")
    items = {
        "act_checkpoint_gpu_hours": _check_hours("act_checkpoint_gpu_hours", act_checkpoint_gpu_hours),
        "act_retry_gpu_hours": _check_hours("act_retry_gpu_hours", act_retry_gpu_hours),
        "act_eval_gpu_hours": _check_hours("act_eval_gpu_hours", act_eval_gpu_hours),
        "act_lost_work_gpu_hours": _check_hours("act_lost_work_gpu_hours", act_lost_work_gpu_hours),
    }
    parts = sum(v for v in items.values() if v is not None)
    if parts > actual * (1 + 1e-9) + 1e-9:
        raise FinishInputError(f"the act_* items sum to {parts:g} GPU-h, more than actual_gpu_hours {actual:g}")
    if artifact_status is None:
        artifact_status = artifact_status_for(stop_reason)
    elif artifact_status not in ARTIFACT_STATUSES:
        raise FinishInputError(f"artifact_status must be one of {', '.join(ARTIFACT_STATUSES)}")
    if stop_reason in INCOMPLETE_STOPS and artifact_status == "complete":
        raise FinishInputError(f"a run stopped for {stop_reason} cannot have a complete artifact")
    interruptions = _check_count("interruptions", interruptions)
    restarts = _check_count("restarts", restarts)
    holdout_reads = _check_count("holdout_reads", holdout_reads)
    if full_evaluation is not None and type(full_evaluation) is not bool:
        raise FinishInputError("full_evaluation must be true or false")
    if last_valid_checkpoint is not None and (type(last_valid_checkpoint) is not str or
                                              len(last_valid_checkpoint) > 2000):
        raise FinishInputError("last_valid_checkpoint must be a string of at most 2000 characters")
    who = who or command_line()
    now = utcnow()
    try:
        ended = naive_utc(ended_at) or now
        started = naive_utc(started_at)
    except ValueError as exc:
        raise FinishInputError(f"ended_at / started_at must be ISO-8601 times: {exc}") from None
    with write_ledger(db, timeout_s) as con:
        with transaction(con):
            row = con.execute(
                "SELECT started_at, reserved_from FROM runs WHERE run_id = ?", [run_id]).fetchone()
            if row is None:
                raise UnknownRun(f"run {run_id!r} is not in the ledger (submit or import it first)")
            started = started or row[0] or row[1]
            if started is not None and ended < started:
                raise FinishInputError(f"ended_at {ended.isoformat()} is before started_at {started.isoformat()}")
            sets = {
                "actual_gpu_hours": actual, "stop_reason": stop_reason, "ended_at": ended,
                "started_at": started, "artifact_status": artifact_status,
                "last_valid_checkpoint": last_valid_checkpoint, "interruptions": interruptions,
                "restarts": restarts, "full_evaluation": full_evaluation,
                "holdout_reads": holdout_reads, **items, "updated_at": now,
            }
            # keep what the ledger already has for optional fields left unset
            keep = {"last_valid_checkpoint", "interruptions", "restarts", "full_evaluation",
                    "holdout_reads", *items}
            assignments = ", ".join(
                f"{c} = coalesce(?, {c})" if c in keep else f"{c} = ?" for c in sets)
            weeks = team_weeks.weeks_of(con, "SELECT ?", [run_id])
            con.execute(f"UPDATE runs SET {assignments} WHERE run_id = ?", [*sets.values(), run_id])
            team_weeks.refresh(con, weeks | team_weeks.weeks_of(con, "SELECT ?", [run_id]))
            cur = con.execute("SELECT * FROM runs WHERE run_id = ?", [run_id])
            names = [d[0] for d in cur.description]
            out = dict(zip(names, cur.fetchone()))
            record(con, who, "finish", updated=1, detail=f"run {run_id}: stopped {stop_reason}")
            if authority is not None:
                authority.finished(run_id, out["team"], ended, actual, "finish", now)
    return out
