"""The Slurm commands the gate's epilog runs on one job: what it is doing now (`squeue`), its attempts
(`sacct --duplicates`), and the changes a recovery decision makes (`scontrol hold`, `requeuehold`,
`update Comment=` / `TimeLimit=`). Each runs through lib.slurm.reservations.run_slurm (UTC times, a
timeout): a command that is missing, fails or does not answer raises SlurmUnavailable."""
from __future__ import annotations

from typing import TypedDict

from lib.slurm.attempts import ATTEMPT_FIELDS, Attempt, parse_attempts
from lib.slurm.reservations import SlurmFailed, run_slurm

SLURM_COMMAND_TIMEOUT_S = 20.0
ENDED_PREFIX = "training-gate: ended:"   # the Comment of a job the gate ended after an interruption
COMMENT_CHARS = 900


class JobNow(TypedDict):
    """A job as squeue shows it now: state (PENDING, RUNNING, COMPLETING, TIMEOUT, ...), reason
    (JobHeldAdmin, BeginTime, ...) and comment."""
    state: str
    reason: str
    comment: str


def job_now(job_id: str, timeout_s: float = SLURM_COMMAND_TIMEOUT_S) -> JobNow | None:
    """The job as squeue shows it, or None when slurmctld no longer knows it (purged after MinJobAge)."""
    try:
        out = run_slurm(["squeue", "-h", "-j", job_id, "-o", "%T|%r|%k"], timeout_s)
    except SlurmFailed as exc:
        if "Invalid job id" in str(exc):
            return None
        raise
    line = out.splitlines()[0] if out.strip() else ""
    if not line:
        return None
    state, reason, comment = (line.split("|", 2) + ["", ""])[:3]   # the comment last: it may hold '|'
    return {"state": state.strip(), "reason": reason.strip(), "comment": comment}


def attempts_of(job_id: str | None = None, *, since: str | None = None,
                timeout_s: float = SLURM_COMMAND_TIMEOUT_S) -> dict[str, list[Attempt]]:
    """Every attempt of one job (`job_id`), or of every job active since `since` (sacct -S), as
    lib.slurm.attempts.parse_attempts reads them."""
    argv = ["sacct", "--duplicates", "--allocations", "--parsable2", "--noheader", "-o", ATTEMPT_FIELDS]
    argv += ["-j", job_id] if job_id else ["--allusers", "-S", since or "now-1days", "-E", "now"]
    jobs, _ = parse_attempts(run_slurm(argv, timeout_s))
    return jobs


def hold(job_id: str, running: bool, why: str, timeout_s: float = SLURM_COMMAND_TIMEOUT_S) -> None:
    """Say why in the job's Comment, then keep it from running again: a pending job is held, a
    running one requeued and held (`scontrol requeuehold`). The Comment first: whoever sees the job
    held sees why."""
    set_comment(job_id, why, timeout_s)
    run_slurm(["scontrol", "requeuehold" if running else "hold", job_id], timeout_s)


def set_comment(job_id: str, text: str, timeout_s: float = SLURM_COMMAND_TIMEOUT_S) -> None:
    one_line = " ".join(str(text).split())[:COMMENT_CHARS]
    run_slurm(["scontrol", "update", f"JobId={job_id}", f"Comment={one_line}"], timeout_s)


def lower_time_limit(job_id: str, minutes: int, timeout_s: float = SLURM_COMMAND_TIMEOUT_S) -> None:
    run_slurm(["scontrol", "update", f"JobId={job_id}", f"TimeLimit={int(minutes)}"], timeout_s)
