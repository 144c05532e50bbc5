"""A gated job's ended attempts recorded in the ledger, and the recovery decision carried out in Slurm.

`reconcile(job_id, attempts, now, ...)`: the job (named after its run ID by the submit hook) is
matched to its run; every event of its attempts (lib.slurm.attempts.job_events) goes through
`lib.ledger.recovering.recover_run` — the Recovery planner's decision, recorded once per (run,
event, End): a second call, or a catch-up after the epilog, records nothing new. The attempt's
Start is passed along, so the time a requeued job waited to start again is not billed, and the
work lost is the time since the run's last checkpoint in the attempt × GPUs. A TIMEOUT is
recorded as a budget breach only when the run's spend limit set its time limit
(lib.slurm.limits.timeout_was_spend_limit); other time-outs are left to the sacct import.

Then, for the job's latest interruption, while the job is back in the queue:
- **end**: the job is held (`scontrol hold`; one that already started again is requeued and
  held), its Comment says `training-gate: ended: <code>: <message>`; the ledger has the run
  stopped, incomplete, its last checkpoint kept (recover_run). A job someone released after that
  hold (its Comment still says so, it is no longer held) is left alone.
- **resume** / **restart**: the job runs; with the spend limit enforced its time limit is lowered
  to what the spend limit has left (lib.slurm.limits.remaining_minutes).
"""
from __future__ import annotations

import json
from datetime import datetime

from lib.ledger.connection import open_ledger
from lib.ledger.finishing import UnknownRun
from lib.ledger.recovering import RecoverInputError, admitted_request, recover_run
from lib.ledger.state import team_policy
from lib.slurm import slurm_jobs
from lib.slurm.attempts import Attempt, job_events
from lib.slurm.limits import remaining_minutes, spend_limit, timeout_was_spend_limit

LIVE = {"PENDING", "RUNNING", "CONFIGURING", "SUSPENDED", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED",
        "SPECIAL_EXIT", "RESIZING", "STAGE_OUT", "SIGNALING"}   # squeue states of a job that may still run
STARTED = {"RUNNING", "CONFIGURING", "SUSPENDED", "RESIZING", "SIGNALING"}


def gated_run(run_id: str, *, db=None, timeout_s: float = 10.0) -> dict | None:
    """The run the gate admitted under `run_id` ({run_id, team, gpus, ended, spend_limit_gpu_hours:
    the spend limit Slurm enforces, or None}), or None when the gate admitted no such run."""
    with open_ledger(db, read_only=True, timeout_s=timeout_s, create=False) as con:
        row = con.execute("SELECT team, gpus, ended_at FROM runs WHERE run_id = ? AND reserved_gpu_hours "
                          "IS NOT NULL", [run_id]).fetchone()
        if row is None:
            return None
        request = admitted_request(con, run_id)
        policy = team_policy(con, row[0])
    if not request:
        return None
    return {"run_id": run_id, "team": row[0], "gpus": int(row[1]), "ended": row[2] is not None,
            "spend_limit_gpu_hours": spend_limit(request, policy)}


def reconcile(job_id: str, attempts: list[Attempt], *, requeued_through: int = 0, db=None,
              timeout_s: float = 10.0, now: slurm_jobs.JobNow | None = None, log=print) -> dict:
    """Record the job's events and carry out its latest decision (module docstring). `now`: the job
    as squeue shows it (slurm_jobs.job_now; None: no longer known). Returns {run_id, recorded:
    [decision, ...], action: what was done in Slurm or None, skipped: [why, ...]}."""
    name = attempts[-1]["name"] if attempts else ""
    out = {"job_id": job_id, "run_id": name or None, "recorded": [], "action": None, "skipped": []}
    run = gated_run(name, db=db, timeout_s=timeout_s) if name else None
    if run is None:
        out["skipped"].append(f"job {job_id}: no run the gate admitted is named {name!r}")
        return out
    limit, gpus = run["spend_limit_gpu_hours"], run["gpus"]
    latest = None
    for ev in job_events(attempts, requeued_through):
        event = ev["event"]
        if event == "timeout":
            if not timeout_was_spend_limit(ev["limit_min"], limit, ev["spent_before_gpu_hours"], gpus):
                continue   # the job's own limit or the calibrated one: a wall-clock stop, for the sacct import
            event = "budget"
        try:
            decision = recover_run(name, event=event, at=ev["at"], attempt_started_at=ev["started_at"],
                                   db=db, timeout_s=timeout_s, source="slurm")
        except (RecoverInputError, UnknownRun) as exc:
            out["skipped"].append(f"attempt {ev['attempt']} {event} at {ev['at'].isoformat()}: {exc}")
            continue
        out["recorded"].append(decision)
        latest = (ev, decision)
    if latest is not None and latest[0]["event"] != "timeout" and now is not None and now["state"] in LIVE:
        out["action"] = _carry_out(job_id, latest[1], attempts, now, limit, gpus, log)
    return out


def _carry_out(job_id: str, decision: dict, attempts: list[Attempt], now: dict, limit, gpus: int, log) -> str | None:
    """The decision for the job's latest interruption, done in Slurm (module docstring)."""
    if decision["action"] == "end":
        if now["comment"].startswith(slurm_jobs.ENDED_PREFIX) and now["reason"] != "JobHeldAdmin":
            log(f"job {job_id}: released after the gate ended run {decision['run_id']}: left alone")
            return None
        why = f"{slurm_jobs.ENDED_PREFIX} {decision['code']}: {decision['message']}"
        slurm_jobs.hold(job_id, now["state"] in STARTED, why)
        return "held"
    if limit is None:
        return None
    spent = sum(a["elapsed_s"] / 3600.0 * a["gpus"] for a in attempts if a["end"] is not None)
    minutes = remaining_minutes(limit, spent, gpus)
    current = attempts[-1]["limit_min"]
    if minutes is not None and (current is None or minutes < current):
        slurm_jobs.lower_time_limit(job_id, minutes)
        return f"time limit {minutes} min"
    return None


def dump(result: dict) -> str:
    """A reconcile result as one JSON line (times as ISO text) for the epilog's log."""
    return json.dumps(result, default=lambda o: o.isoformat() if isinstance(o, datetime) else str(o),
                      sort_keys=True)
