"""The time limit Slurm enforces for an admitted job, and which of its time-outs was its spend limit.

Pure functions over the admitted request, the decision and the team's policy; minutes are Slurm's
whole minutes, GPU-hours as everywhere (`_gpu_hours`). The submit hook's judge (lib.slurm.judge) sets the
lowest of these limits when it is below what the job asked (never above: a job's own `--time`, or
its comment's `max_runtime_hours`, is the most it gets):

- **spend limit** (team policy `enforce_spend_limit`, default true, where the admitted stop policy
  names `spend_limit_gpu_hours`): the wall clock the limit buys on the job's accelerators, in whole
  minutes rounded down, less STOP_MARGIN_MIN. slurmctld looks for jobs past their limit every 30 s
  and bills a timed-out job up to that look (its End), and SIGTERM reaches the job then, KillWait
  seconds before SIGKILL, so the job is stopped, and billed, within its spend limit. At least one
  minute, Slurm's smallest limit. After a preemption the next attempt gets what is left
  (`remaining_minutes`): the limit is on the run, not on one attempt.
- **calibrated** (team policy `set_time_limit`, default false): the calibrated upper wall clock
  (the decision's `upper_gpu_hours` / accelerators) plus CALIBRATED_MARGIN (10 %, at least 5
  minutes), rounded up; none when the upper bound is unknown. The upper bound is already a high
  quantile of what such runs took; the margin covers start-up and scheduling the estimate does not see.
"""
from __future__ import annotations

import math

STOP_MARGIN_MIN = 1                  # one minute: slurmctld's 30 s time-limit check, and rounding
CALIBRATED_MARGIN = (0.10, 5)        # (fraction of the upper wall clock, at least these minutes)


def _number(x) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) else None


def spend_minutes(spend_gpu_hours: float, gpus: int) -> int:
    """Whole minutes a job on `gpus` accelerators may run within `spend_gpu_hours` (module docstring)."""
    return max(1, math.floor(spend_gpu_hours * 60.0 / gpus + 1e-9) - STOP_MARGIN_MIN)


def calibrated_minutes(upper_gpu_hours: float, gpus: int) -> int:
    """The calibrated upper wall clock of `upper_gpu_hours` on `gpus` plus its margin, whole minutes up."""
    wall_min = upper_gpu_hours * 60.0 / gpus
    fraction, at_least = CALIBRATED_MARGIN
    return max(1, math.ceil(wall_min + max(fraction * wall_min, at_least) - 1e-9))


def spend_limit(request: dict, policy: dict | None) -> float | None:
    """The spend limit Slurm enforces for the run (GPU-hours): the admitted stop policy's, when the
    team enforces it (enforce_spend_limit, default true); else None."""
    if (policy or {}).get("enforce_spend_limit") is False:
        return None
    return _number(((request or {}).get("stop_policy") or {}).get("spend_limit_gpu_hours"))


def admitted_time_limit(request: dict, decision: dict, policy: dict | None, asked_minutes: int | None) -> dict:
    """What the hook does to an admitted job's time limit. `asked_minutes`: the job's own limit (its
    --time, else its comment's runtime; None: unlimited). Returns {minutes: the limit to set, or None
    to leave the job's; spend_minutes, calibrated_minutes: each rule's limit or None; by:
    "spend-limit" | "calibrated" | None; text: what the admit message says, or ""}."""
    gpus = request.get("gpus")
    out = {"minutes": None, "spend_minutes": None, "calibrated_minutes": None, "by": None, "text": ""}
    if not isinstance(gpus, int) or isinstance(gpus, bool) or gpus < 1:
        return out
    limit = spend_limit(request, policy)
    if limit is not None:
        out["spend_minutes"] = spend_minutes(limit, gpus)
    upper = _number((decision.get("estimate") or {}).get("upper_gpu_hours"))
    if (policy or {}).get("set_time_limit") is True and upper is not None:
        out["calibrated_minutes"] = calibrated_minutes(upper, gpus)
    rules = [(m, by) for m, by in ((out["spend_minutes"], "spend-limit"), (out["calibrated_minutes"], "calibrated"))
             if m is not None]
    if not rules:
        return out
    minutes, by = min(rules)
    if asked_minutes is not None and minutes >= asked_minutes:
        return out
    asked = f"asked {asked_minutes} min" if asked_minutes is not None else "asked no limit"
    if by == "spend-limit":
        why = (f"from the spend limit {limit:g} GPU-h on {gpus} GPUs ({asked}; Slurm sends SIGTERM at the "
               "limit: checkpoint then)")
    else:
        why = (f"from the calibrated upper wall clock {upper * 60 / gpus:.0f} min plus its margin ({asked}; "
               "set_time_limit)")
    out.update(minutes=minutes, by=by, text=f"time limit set to {minutes} min {why}")
    return out


def remaining_minutes(limit_gpu_hours: float, spent_gpu_hours: float, gpus: int) -> int | None:
    """The time limit of a run's next attempt under its spend limit, after `spent_gpu_hours`; None
    when nothing is left (the recovery decision ends such a run)."""
    left = limit_gpu_hours - spent_gpu_hours
    return spend_minutes(left, gpus) if left > 0 else None


def timeout_was_spend_limit(limit_minutes: int | None, limit_gpu_hours: float | None, spent_before_gpu_hours: float,
                            gpus: int) -> bool:
    """Was a time-out the run's spend limit? True when the spend limit is enforced and the attempt's
    time limit (`limit_minutes`) was at least what the spend left at the attempt's start gives
    (`remaining_minutes`): the spend limit was the binding one (or was exceeded). A lower limit was
    the job's own, or the calibrated one: a wall-clock stop."""
    if limit_gpu_hours is None or limit_minutes is None:
        return False
    left = remaining_minutes(limit_gpu_hours, spent_before_gpu_hours, gpus)
    return left is None or limit_minutes >= left
