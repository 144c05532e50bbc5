"""The Slurm commands the gate's epilog runs on one job: what it is doing now (`squeue`), its attempts
(`sacct --duplicates`), and the changes a recovery decision makes (`scontrol hold`, `requeuehold`,
`update Comment=` / `TimeLimit=`). Each runs with a timeout and TZ=UTC; a command that is missing,
fails or does not answer raises SlurmUnavailable (its stderr in the message)."""
from __future__ import annotations

import os
import subprocess
from typing import TypedDict

from lib.slurm.attempts import ATTEMPT_FIELDS, Attempt, parse_attempts

DEFAULT_TIMEOUT_S = 20.0
ENDED_PREFIX = "training-gate: ended:"   # the Comment of a job the gate ended after an interruption
COMMENT_CHARS = 900


class SlurmUnavailable(RuntimeError):
    """A Slurm command is missing, failed or did not answer in time."""


class JobNow(TypedDict):
    """A job as squeue shows it now: state (PENDING, RUNNING, COMPLETING, TIMEOUT, ...), reason
    (JobHeldAdmin, BeginTime, ...) and comment."""
    state: str
    reason: str
    comment: str


def run(argv: list[str], timeout_s: float = DEFAULT_TIMEOUT_S) -> str:
    """stdout of a Slurm command (module docstring)."""
    env = {**os.environ, "TZ": "UTC", "SLURM_TIME_FORMAT": "standard"}
    try:
        p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SlurmUnavailable(f"{argv[0]}: {exc}") from None
    if p.returncode != 0:
        raise SlurmUnavailable(f"{' '.join(argv[:3])}: exit {p.returncode}: {p.stderr.strip()[:500]}")
    return p.stdout


def job_now(job_id: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> JobNow | None:
    """The job as squeue shows it, or None when slurmctld no longer knows it (purged after MinJobAge)."""
    try:
        out = run(["squeue", "-h", "-j", job_id, "-o", "%T|%r|%k"], timeout_s)
    except SlurmUnavailable as exc:
        if "Invalid job id" in str(exc):
            return None
        raise
    line = out.splitlines()[0] if out.strip() else ""
    if not line:
        return None
    state, reason, comment = (line.split("|", 2) + ["", ""])[:3]   # the comment last: it may hold '|'
    return {"state": state.strip(), "reason": reason.strip(), "comment": comment}


def attempts_of(job_id: str | None = None, *, since: str | None = None,
                timeout_s: float = DEFAULT_TIMEOUT_S) -> dict[str, list[Attempt]]:
    """Every attempt of one job (`job_id`), or of every job active since `since` (sacct -S), as
    lib.slurm.attempts.parse_attempts reads them."""
    argv = ["sacct", "--duplicates", "--allocations", "--parsable2", "--noheader", "-o", ATTEMPT_FIELDS]
    argv += ["-j", job_id] if job_id else ["--allusers", "-S", since or "now-1days", "-E", "now"]
    jobs, _ = parse_attempts(run(argv, timeout_s))
    return jobs


def hold(job_id: str, running: bool, why: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
    """Keep the job from running again, and say why in its Comment: a pending job is held, a running
    one requeued and held (`scontrol requeuehold`)."""
    run(["scontrol", "requeuehold" if running else "hold", job_id], timeout_s)
    set_comment(job_id, why, timeout_s)


def set_comment(job_id: str, text: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
    one_line = " ".join(str(text).split())[:COMMENT_CHARS]
    run(["scontrol", "update", f"JobId={job_id}", f"Comment={one_line}"], timeout_s)


def lower_time_limit(job_id: str, minutes: int, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
    run(["scontrol", "update", f"JobId={job_id}", f"TimeLimit={int(minutes)}"], timeout_s)
