"""A deferred Slurm job held in Slurm's queue until the gate admits it: the pure parts.

When a GPU job's deferral needs only time (lib.gate.capacity.cured_by_waiting) and the job can fit
some day, the warm gate server accepts it held (job_submit.lua: `job_desc.priority = 0`; Slurm
shows JobHeldUser until the keeper makes it an admin hold, JobHeldAdmin, within a second or so;
job_submit.lua's slurm_job_modify refuses anyone's release but root's or the gate's meanwhile)
instead of refusing it.
Its admin comment (`hold_comment`) names the run and this gate's ledger (`gate_tag`), its place and
planned start; the queue keeper (lib.slurm.queue_keeper) finds the job by it afterwards, since the
job has no ID while the hook runs, and keeps it current.

- `hold_choice`: hold or refuse a judged deferral (TG_ON_DEFER, and whether it can ever fit).
- `held_message`: what sbatch prints for a held job; `hold_comment` / `parse_hold_comment`: its admin
  comment and the run ID read back from it.
- `pending_jobs`: `squeue --json` read as the gate's pending jobs (plain data);
  `reconcile_holds`: what to do with them against the gate's line (release, keep current, cancel, or take
  a request whose job left Slurm's queue out of the line). No Slurm is run here.

Times are naive UTC datetimes; Slurm's in `squeue --json` are seconds since the epoch.
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone

from lib.gate.capacity import LINE_CURES, cured_by_waiting, fit_for_reasons

ON_DEFER = ("hold", "refuse")       # TG_ON_DEFER: hold a deferral only time cures (default), or refuse it
HOLD_PREFIX = "training-gate: queued run "
HELD_REASONS = ("JobHeldAdmin", "JobHeldUser")   # a job submitted with priority 0 pends JobHeldUser at first
GONE_GRACE_S = 60.0   # a held run whose job is not in Slurm's queue this long after its hold has left it
_PARSE = re.compile(r'^training-gate: queued run ("(?:[^"\\]|\\.)*"|[A-Za-z0-9._:@+-]+) \[gate ([0-9a-f]{8})\]')
_BARE = re.compile(r"[A-Za-z0-9._:@+-]+")


def gate_tag(db_path) -> str:
    """Eight hex digits naming a ledger (its resolved path), so a gate server touches only its own
    ledger's held jobs when several serve one cluster."""
    return hashlib.sha256(str(db_path).encode("utf-8", "surrogateescape")).hexdigest()[:8]


def ordinal(n: int) -> str:
    """1st, 2nd, 3rd, 4th, 11th, 21st, ..."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def minute_text(t: datetime | None) -> str | None:
    return None if t is None else t.strftime("%Y-%m-%d %H:%M UTC")


def hold_choice(decision: dict, on_defer: str, fit: tuple[datetime | None, str] | None) -> tuple[bool, str]:
    """(hold?, why not) for a judged decision. Held: a deferral whose codes only time cures, with
    TG_ON_DEFER=hold (anything but "refuse" is hold), that `fit` (fit_for_reasons' (earliest time,
    explanation), see `hold_fit`) says can fit some day. A refusal's why is "" when the answer is
    simply today's refusal, else what the refused job's message should add."""
    if decision.get("state") != "defer" or on_defer == "refuse":
        return False, ""
    codes = [r.get("code") for r in decision.get("reasons") or []]
    if not cured_by_waiting(codes):
        return False, ""
    if fit is not None and fit[0] is None:
        return False, f"never fits as asked: {fit[1]}"
    return True, ""


def hold_fit(decision: dict, request: dict, policy: dict | None, state: dict, now: datetime
                 ) -> tuple[datetime | None, str] | None:
    """The earliest time capacity and the month cure the deferral's codes, from the team's `state`
    (lib.slurm.live.LiveGate.state), ignoring the gate's line ahead of it: (time, explanation), (None,
    why) when waiting never makes it fit (more GPUs than the quota or the pool), None when it cannot
    be said (no policy, no GPU count)."""
    gpus = request.get("gpus")
    if policy is None or not isinstance(gpus, int) or isinstance(gpus, bool):
        return None
    codes = {r.get("code") for r in decision.get("reasons") or []} - LINE_CURES
    wall = ((decision.get("estimate") or {}).get("wall_hours")) or 0.0
    return fit_for_reasons(now, codes, request.get("kind"), policy["reserved_gpus"],
                           policy["retraining_reserved_gpus"], state.get("reservations") or [], gpus,
                           (state.get("pools") or {}).get(request.get("capacity") or "stable"),
                           request.get("team"), float(wall))


def place_text(team: str, team_place: int | None, planned: datetime | None) -> str:
    """"3rd in line for team vision, planned start 2026-12-07 22:39 UTC", or "queued for team vision"
    with the planned start when known."""
    head = f"{ordinal(team_place)} in line for team {team}" if team_place else f"queued for team {team}"
    return head + (f", planned start {minute_text(planned)}" if planned is not None else ", planned start not known yet")


def held_message(run_id: str, team: str, codes: list[str], where: str) -> str:
    """The user's line for a held job (`where`: place_text)."""
    return (f"training-gate: queued: run {run_id} {where}; it starts by itself, no need to resubmit "
            f"(deferred for {', '.join(codes)}; `python -m lib queue --team {team}` shows the line, "
            "scancel takes it out)")


def hold_comment(run_id: str, tag: str, where: str, codes: list[str]) -> str:
    """The held job's admin comment: the run, the gate, where it stands and why it waits."""
    shown = run_id if _BARE.fullmatch(run_id) else json.dumps(run_id)   # any other run ID as a JSON string
    return f"{HOLD_PREFIX}{shown} [gate {tag}]: {where} (deferred for {', '.join(codes)})"


def parse_hold_comment(text: str | None) -> tuple[str, str] | None:
    """(run ID, gate tag) of a held job's admin comment, None for any other comment."""
    m = _PARSE.match(text or "")
    if not m:
        return None
    shown = m.group(1)
    try:
        return (json.loads(shown) if shown.startswith('"') else shown), m.group(2)
    except ValueError:
        return None


@dataclass(frozen=True)
class PendingJob:
    """A pending job of this gate as squeue shows it."""
    job_id: str
    run_id: str
    reason: str              # JobHeldAdmin while the gate holds it
    admin_comment: str
    start: datetime | None   # Slurm's expected start (the begin time the keeper sets)
    time_limit_min: int | None
    user: str


def _from_epoch(value) -> datetime | None:
    if not isinstance(value, int) or value <= 0:
        return None
    return datetime.fromtimestamp(value, timezone.utc).replace(tzinfo=None)


def pending_jobs(squeue_json: dict, tag: str) -> list[PendingJob]:
    """The PENDING jobs of `squeue --json` whose admin comment names a run held by the gate `tag`
    (22.05's --json ignores -t: the state is filtered here)."""
    out = []
    for j in squeue_json.get("jobs") or []:
        if j.get("job_state") != "PENDING":
            continue
        got = parse_hold_comment(j.get("admin_comment"))
        if got is None or got[1] != tag:
            continue
        limit = j.get("time_limit")
        out.append(PendingJob(str(j.get("job_id")), got[0], str(j.get("state_reason") or ""),
                              j.get("admin_comment") or "", _from_epoch(j.get("start_time")),
                              limit if isinstance(limit, int) and limit > 0 else None, str(j.get("user_name") or "")))
    return out


@dataclass
class Actions:
    """What `reconcile_holds` asks the keeper to do."""
    admin_hold: list[PendingJob] = field(default_factory=list)      # held as its user's: made an admin hold
    release: list[PendingJob] = field(default_factory=list)         # admitted: release, set its time limit
    update: list[tuple[PendingJob, str, datetime | None]] = field(default_factory=list)  # (job, comment, start)
    cancel_jobs: list[tuple[PendingJob, str]] = field(default_factory=list)  # (job, why): its request left the line
    cancel_waiting: list[str] = field(default_factory=list)   # run IDs whose held job left Slurm's queue
    forget: list[str] = field(default_factory=list)           # run IDs no longer watched


def reconcile_holds(pending: list[PendingJob], *, watched: dict[str, datetime], line: dict[str, dict],
                    admitted: set[str], left: dict[str, str], tag: str, now: datetime,
                    seen: set[str] = frozenset(), grace_s: float = GONE_GRACE_S) -> Actions:
    """The keeper's actions for this gate's pending held jobs.

    `watched`: run ID -> when its job was held (held by this server, or seen held in Slurm's queue);
    `line`: run ID -> its row of lib.ledger.queue.queue_line (team, team_place, planned_start ISO,
    reasons) for every waiting request; `admitted`: run IDs the gate has admitted (booked);
    `left`: run ID -> why, for requests that left the line (expired, cancelled); `seen`: run IDs
    whose job an earlier pass saw pending.

    A held job is released once its run is admitted (never while its run still waits), kept
    current while it waits, cancelled when its request left the line. One submitted with priority 0
    pends as held by its user (Slurm 22.05 cannot tell the hook's hold from `sbatch --hold`): it is
    made an admin hold (`scontrol hold` by root), which only root, SlurmUser or an operator can
    release. A watched run whose job is not pending any more (seen pending before, or `grace_s`
    after its hold: a job refused after the hook never appears) and that still waits was cancelled
    in Slurm: its request is taken out of the line. Pure: plain data in and out.
    """
    acts = Actions()
    pending_ids = set()
    for job in pending:
        pending_ids.add(job.run_id)
        if job.reason not in HELD_REASONS:
            continue   # released already (waiting for resources)
        if job.reason != "JobHeldAdmin" and job.run_id not in admitted:
            acts.admin_hold.append(job)
        if job.run_id in admitted:
            acts.release.append(job)
        elif job.run_id in line:
            row = line[job.run_id]
            planned = _naive(row.get("planned_start"))
            where = place_text(row["team"], row.get("team_place"), planned)
            comment = hold_comment(job.run_id, tag, where, list(row.get("reasons") or []))
            if comment != job.admin_comment or (planned is not None and planned != job.start):
                acts.update.append((job, comment, planned))
        elif job.run_id in left:
            acts.cancel_jobs.append((job, left[job.run_id]))
    for run_id, since in watched.items():
        if run_id in pending_ids:
            continue
        if run_id not in seen and (now - since).total_seconds() < grace_s:
            continue
        if run_id in line:
            acts.cancel_waiting.append(run_id)
        acts.forget.append(run_id)
    acts.update.sort(key=lambda u: (u[2] is None, u[2] or now))   # the soonest first: a pass may do only some
    return acts


def _naive(text) -> datetime | None:
    if not text:
        return None
    t = datetime.fromisoformat(text)
    return t.replace(tzinfo=None) if t.tzinfo is None else t.astimezone(timezone.utc).replace(tzinfo=None)
