"""A Slurm job's attempts as sacct lists them, and the events the gate records from them.

A requeued job keeps its JobID; `sacct --duplicates --allocations` lists each attempt on its own
line. ATTEMPT_FIELDS is the field list read here (`--parsable2 --noheader`, run with TZ=UTC so times
are UTC: lib.slurm.reservations.SLURM_ENV). Pure functions: what runs the commands is lib.slurm.slurm_jobs.

- `parse_attempts(text)`: {job ID: [Attempt, ...]} in attempt order (by Start, else End; an
  attempt not started yet is the latest), each with its state, Start, End, Elapsed, time limit and
  GPUs (AllocTRES, else ReqTRES). A line that cannot be read is skipped and named in the problems.
- `job_events(attempts, requeued_through)`: what the gate records. Each attempt that ended
  PREEMPTED, REQUEUED or NODE_FAIL and was followed by another (a later line, or the job's restart
  count says it was requeued) is an interruption (events preempted, requeued, node-fail) at its End;
  the latest attempt ending TIMEOUT is a time-out the epilog may take as the run's spend limit
  (lib.slurm.limits.timeout_was_spend_limit). Each event carries the attempt's Start and the
  GPU-hours the attempts before it billed (Elapsed × GPUs).
"""
from __future__ import annotations

from datetime import datetime, timezone
from typing import TypedDict

from lib.slurm.reservations import slurm_time, tres_gpus

# JobName last: a name may hold the delimiter '|' (a run ID is any text), so a line splits into the
# fields before it and the rest
ATTEMPT_FIELDS = "JobIDRaw,Account,State,Start,End,ElapsedRaw,TimelimitRaw,AllocTRES,ReqTRES,JobName"
INTERRUPTED = {"PREEMPTED": "preempted", "REQUEUED": "requeued", "NODE_FAIL": "node-fail"}
# states an attempt has ended in (the job is not running, pending or on its way out)
ENDED = {"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "PREEMPTED", "NODE_FAIL", "BOOT_FAIL", "DEADLINE",
         "OUT_OF_MEMORY", "REQUEUED", "REVOKED"}
class Attempt(TypedDict):
    """One sacct line of a job: times naive UTC (None when Slurm has none), elapsed seconds, the time
    limit in minutes (None: unlimited), GPUs (0 when none are listed)."""
    job_id: str
    name: str
    account: str
    state: str
    start: datetime | None
    end: datetime | None
    elapsed_s: int
    limit_min: int | None
    gpus: int


class Event(TypedDict):
    """An ended attempt the gate records: `event` (preempted | requeued | node-fail | timeout), `at`
    (its End), `started_at` (its Start), `attempt` (1-based), `gpus`, `limit_min`, `gpu_hours` (what
    it billed) and `spent_before_gpu_hours` (what the attempts before it billed)."""
    event: str
    at: datetime
    started_at: datetime
    attempt: int
    gpus: int
    limit_min: int | None
    gpu_hours: float
    spent_before_gpu_hours: float


def _attempt(cells: list[str]) -> Attempt:
    job_id, account, state, start, end, elapsed, limit, alloc, req, name = cells
    if not job_id.isdigit():
        raise ValueError(f"JobIDRaw {job_id!r} is not a job ID")
    limit = limit.strip()
    return {"job_id": job_id, "name": name, "account": account,
            "state": state.split()[0] if state.strip() else "",   # "CANCELLED by 0" -> CANCELLED
            "start": slurm_time(start, timezone.utc), "end": slurm_time(end, timezone.utc),
            "elapsed_s": int(elapsed or 0), "limit_min": int(limit) if limit.isdigit() else None,
            "gpus": tres_gpus(alloc) or tres_gpus(req) or 0}


def _order(a: Attempt) -> tuple:
    t = a["start"] or a["end"]
    return (t is None, t or datetime.max)


def parse_attempts(text: str) -> tuple[dict[str, list[Attempt]], list[str]]:
    """({job ID: its attempts in order}, problems) from sacct output with ATTEMPT_FIELDS (module
    docstring); a line that cannot be read is left out and described in problems."""
    jobs: dict[str, list[Attempt]] = {}
    problems = []
    n_fields = ATTEMPT_FIELDS.count(",") + 1
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        cells = line.split("|", n_fields - 1)
        if len(cells) != n_fields:
            problems.append(f"sacct line {lineno}: {len(cells)} fields, not {n_fields} ({ATTEMPT_FIELDS})")
            continue
        try:
            a = _attempt(cells)
        except ValueError as exc:
            problems.append(f"sacct line {lineno}: {exc}")
            continue
        jobs.setdefault(a["job_id"], []).append(a)
    for attempts in jobs.values():
        attempts.sort(key=_order)
    return jobs, problems


def ended_count(attempts: list[Attempt]) -> int:
    """How many of the attempts have ended (an End and an ended state)."""
    return sum(1 for a in attempts if a["end"] is not None and a["state"] in ENDED)


def job_events(attempts: list[Attempt], requeued_through: int = 0) -> list[Event]:
    """The events of one job's attempts (module docstring). `requeued_through`: the job's restart
    count when known (the latest attempts up to it were requeued even if sacct has no later line yet)."""
    out: list[Event] = []
    spent = 0.0
    for n, a in enumerate(attempts, start=1):
        ended = a["end"] is not None and a["state"] in ENDED
        billed = a["elapsed_s"] / 3600.0 * a["gpus"]
        event = None
        if ended and a["state"] in INTERRUPTED and (n < len(attempts) or n <= requeued_through):
            event = INTERRUPTED[a["state"]]
        elif ended and a["state"] == "TIMEOUT" and n == len(attempts):
            event = "timeout"
        if event is not None:
            out.append({"event": event, "at": a["end"], "started_at": a["start"] or a["end"], "attempt": n,
                        "gpus": a["gpus"], "limit_min": a["limit_min"], "gpu_hours": billed,
                        "spent_before_gpu_hours": spent})
        if ended:
            spent += billed
    return out
