"""Recovery after a preemption or a budget breach: resume, restart or end (docs/rules.md, Recovery).

Pure functions over a plain ``situation`` dict; no database, no Streamlit. Units: GPU-hours for spend
and work (``*_gpu_hours``), hours for wall-clock times (``*_h``). Expected costs come from the closed
forms of :mod:`lib.planning.preemption` (exponential interruptions); :func:`scenario_outcomes` adds the Monte Carlo
distributions of :mod:`lib.planning.simulate`.

Situation keys
--------------
Required:
    event                    "preemption" | "budget-breach"
    budget_gpu_hours         approved budget of the run (GPU-hours, >= 0)
    spent_gpu_hours          GPU-hours billed so far (>= 0)
    gpus                     accelerators of the run (int >= 1)
    total_work_gpu_hours     useful work of the whole run, failure-free, without checkpoints (GPU-hours);
                             may be omitted when remaining_work_gpu_hours is given (then it is derived)
Optional:
    remaining_work_gpu_hours useful work left *from the last valid checkpoint* (GPU-hours); default
                             total_work_gpu_hours x (1 - checkpoint_progress_fraction)
    progress_fraction        progress reached when the event happened (0..1; informational: the work
                             lost by this event is (progress - checkpoint progress) x total work)
    last_valid_checkpoint    str (a checkpoint name/path) or None (no valid checkpoint)
    checkpoint_progress_fraction  progress saved in that checkpoint (0..1; default 0)
    restart_h                restart time (reload + warm-up, hours; billed, interruptible; default 0)
    downtime_h               waiting for capacity after an interruption (hours; not billed; default 0)
    mtbf_h                   the job's mean time between interruptions (hours); None or inf = no further
                             interruptions expected (default: mean of lifetimes_h if given, else None)
    checkpoint_interval_h    useful work between checkpoints (hours of wall clock); None = no checkpoints
    checkpoint_h             time to write one checkpoint (hours; default 0)
    restarts_so_far          relaunches already done, resumes and restarts alike (int >= 0; default 0)
    max_restarts             limit on relaunches (int >= 0) or None (no limit)
    failed_steps             failed steps so far (int >= 0; default 0)
    max_failed_steps         the stop policy's failed-step limit (int >= 0) or None
    approved_budget_increase_gpu_hours  an approved, recorded increase of the budget (GPU-hours; default 0)
    lifetimes_h              empirical job lifetimes (hours), used by scenario_outcomes only
    wall_limit_h             wall-clock hours left to the run, for scenario_outcomes' breach probability
    run_id                   informational

Decision rules, in this order (every applicable blocking reason is listed, the first one decides):
    1. budget-breach  a budget breach ends the run unless an approved budget increase is recorded; with
                      one, the increased budget is used below;
    2. budget-spent   the remaining budget (budget + increase - spent) is <= 0;
    3. restart-limit  restarts_so_far >= max_restarts;
    4. failed-step-limit  failed_steps >= max_failed_steps;
    5. resume         a valid checkpoint exists and the remaining budget covers the expected extra
                      GPU-hours of resuming: remaining work + checkpoints + restart + expected lost work
                      and further restarts;
    6. restart        no valid checkpoint and the remaining budget covers the expected extra GPU-hours of
                      a full rerun;
    7. budget-insufficient  otherwise: end.
Ending keeps the last valid checkpoint and marks the artifact incomplete.
"""
from __future__ import annotations

import math

from lib.gate.contracts import RecoveryDecision, RecoverySituation
from lib.gate.terms import checked_count, checked_number
from lib.planning.preemption import expected_time

__all__ = ["decide_recovery", "scenario_outcomes", "END_STOP_REASON", "SITUATION_KEYS"]

SITUATION_KEYS = frozenset({
    "event", "budget_gpu_hours", "spent_gpu_hours", "gpus", "total_work_gpu_hours",
    "remaining_work_gpu_hours", "progress_fraction", "last_valid_checkpoint",
    "checkpoint_progress_fraction", "restart_h", "downtime_h", "mtbf_h", "checkpoint_interval_h",
    "checkpoint_h", "restarts_so_far", "max_restarts", "failed_steps", "max_failed_steps",
    "approved_budget_increase_gpu_hours", "lifetimes_h", "wall_limit_h", "run_id",
})

# ledger stop_reason (lib/ledger/schema.sql vocabulary) recorded when the decision is "end"
END_STOP_REASON = {
    "budget-breach": "budget",
    "budget-spent": "budget",
    "budget-insufficient": "budget",
    "restart-limit": "preempted",
    "failed-step-limit": "failed-steps",
}


def _opt(s: dict, key: str, default):
    value = s.get(key)
    return default if value is None else value


def _fraction(name, value) -> float:
    x = checked_number(name, value)
    if x > 1:
        raise ValueError(f"{name} must be between 0 and 1, got {value!r}")
    return x


def _optional_count(name, value, default):
    if value is None:
        return default
    return checked_count(name, value, minimum=0)


def _parse(s: RecoverySituation) -> dict:
    if not isinstance(s, dict):
        raise ValueError("situation must be a dict")
    unknown = sorted(set(s) - SITUATION_KEYS)
    if unknown:
        raise ValueError(f"unknown situation key(s): {', '.join(map(str, unknown))}")
    for key in ("event", "budget_gpu_hours", "spent_gpu_hours", "gpus"):
        if key not in s:
            raise ValueError(f"{key} is required")
    event = s["event"]
    if event not in ("preemption", "budget-breach"):
        raise ValueError(f"event must be 'preemption' or 'budget-breach', got {event!r}")
    p = {"event": event}
    p["budget"] = checked_number("budget_gpu_hours", s["budget_gpu_hours"])
    p["spent"] = checked_number("spent_gpu_hours", s["spent_gpu_hours"])
    p["gpus"] = checked_count("gpus", s["gpus"])
    p["increase"] = checked_number("approved_budget_increase_gpu_hours",
                            _opt(s, "approved_budget_increase_gpu_hours", 0.0))
    ckpt = s.get("last_valid_checkpoint")
    if ckpt is not None and not isinstance(ckpt, str):
        raise ValueError(f"last_valid_checkpoint must be a str or None, got {ckpt!r}")
    p["checkpoint"] = ckpt if ckpt else None
    p["ckpt_frac"] = 0.0
    if p["checkpoint"]:
        p["ckpt_frac"] = _fraction("checkpoint_progress_fraction",
                                   _opt(s, "checkpoint_progress_fraction", 0.0))
    prog = s.get("progress_fraction")
    p["progress"] = None if prog is None else _fraction("progress_fraction", prog)
    total = s.get("total_work_gpu_hours")
    remaining = s.get("remaining_work_gpu_hours")
    if total is None and remaining is None:
        raise ValueError("total_work_gpu_hours (or remaining_work_gpu_hours) is required")
    if total is not None:
        total = checked_number("total_work_gpu_hours", total)
    if remaining is not None:
        remaining = checked_number("remaining_work_gpu_hours", remaining)
    if total is None:
        if p["ckpt_frac"] >= 1.0:
            raise ValueError("total_work_gpu_hours is required when the checkpoint holds all progress")
        total = remaining / (1.0 - p["ckpt_frac"])
    if remaining is None:
        remaining = total * (1.0 - p["ckpt_frac"])
    p["total"], p["remaining"] = total, remaining
    p["restart_h"] = checked_number("restart_h", _opt(s, "restart_h", 0.0))
    p["downtime_h"] = checked_number("downtime_h", _opt(s, "downtime_h", 0.0))
    p["checkpoint_h"] = checked_number("checkpoint_h", _opt(s, "checkpoint_h", 0.0))
    interval = s.get("checkpoint_interval_h")
    p["interval"] = None if interval is None else checked_number("checkpoint_interval_h", interval, positive=True,
                                                          allow_inf=True)
    lifetimes = s.get("lifetimes_h")
    p["lifetimes"] = lifetimes
    mtbf = s.get("mtbf_h")
    if mtbf is None and lifetimes is not None:
        vals = [checked_number("lifetimes_h", v, positive=True) for v in lifetimes]
        if not vals:
            raise ValueError("lifetimes_h must not be empty")
        mtbf = sum(vals) / len(vals)
    p["mtbf"] = math.inf if mtbf is None else checked_number("mtbf_h", mtbf, positive=True, allow_inf=True)
    p["restarts"] = _optional_count("restarts_so_far", s.get("restarts_so_far"), 0)
    p["max_restarts"] = _optional_count("max_restarts", s.get("max_restarts"), None)
    p["failed"] = _optional_count("failed_steps", s.get("failed_steps"), 0)
    p["max_failed"] = _optional_count("max_failed_steps", s.get("max_failed_steps"), None)
    wl = s.get("wall_limit_h")
    p["wall_limit"] = None if wl is None else checked_number("wall_limit_h", wl, allow_inf=True)
    return p


def _option_cost(p: dict, work_gpu_hours: float) -> dict:
    """Expected extra GPU-hours of relaunching (restart first) to do ``work_gpu_hours`` of work."""
    g = p["gpus"]
    e = expected_time(work_gpu_hours / g, p["interval"], p["checkpoint_h"], p["restart_h"], p["mtbf"],
                      p["downtime_h"], restart_first=True)
    return {
        "expected_extra_gpu_hours": g * e["expected_billed_hours"],
        "expected_work_gpu_hours": work_gpu_hours,
        "expected_checkpoint_gpu_hours": g * e["checkpoint_hours"],
        "expected_restart_gpu_hours": g * e["expected_restart_hours"],
        "expected_lost_work_gpu_hours": g * e["expected_lost_work_hours"],
        "expected_interruptions": e["expected_interruptions"],
        "expected_wall_hours": e["expected_hours"],
        "expected_total_gpu_hours": p["spent"] + g * e["expected_billed_hours"],
    }


def _fmt(x: float) -> str:
    return f"{x:.4g}"


def decide_recovery(situation: RecoverySituation) -> RecoveryDecision:
    """Decide what to do after a preemption or a budget breach (see the module docstring for the keys).

    Returns a dict:
        action          "resume" | "restart" | "end"
        code            resume-from-checkpoint | restart-no-checkpoint | budget-breach | budget-spent |
                        restart-limit | failed-step-limit | budget-insufficient
        message         one human sentence with the numbers
        blocking        every applicable end reason [{code, message}], in the documented order
        stop_reason     ledger stop_reason when action == "end" (budget | preempted | failed-steps), else None
        artifact_status "incomplete" (a run that ends here, or is still running, has no complete artifact)
        last_valid_checkpoint, resume_from (checkpoint name when resuming, else None)
        budget_gpu_hours (effective: approved budget + recorded increase), approved_budget_increase_gpu_hours,
        spent_gpu_hours, remaining_budget_gpu_hours, lost_work_now_gpu_hours (work lost by this event,
        None when progress_fraction is not given), restarts_after (relaunch count after this decision)
        options         {"resume", "restart", "end"}: each with available, fits_budget,
                        expected_extra_gpu_hours (0 for end) and its breakdown (work, checkpoint, restart,
                        lost work GPU-hours; interruptions; wall hours; total GPU-hours incl. spent)
    """
    p = _parse(situation)
    spent = p["spent"]
    increase = p["increase"] if p["increase"] > 0 else 0.0
    budget = p["budget"] + increase
    remaining_budget = budget - spent

    options = {}
    resume = {"available": p["checkpoint"] is not None}
    if resume["available"]:
        resume.update(_option_cost(p, p["remaining"]))
        resume["fits_budget"] = resume["expected_extra_gpu_hours"] <= remaining_budget
        resume["note"] = f"resume from {p['checkpoint']} (progress {p['ckpt_frac']:.0%})"
    else:
        resume.update({k: None for k in ("expected_extra_gpu_hours", "expected_work_gpu_hours",
                                         "expected_checkpoint_gpu_hours", "expected_restart_gpu_hours",
                                         "expected_lost_work_gpu_hours", "expected_interruptions",
                                         "expected_wall_hours", "expected_total_gpu_hours")})
        resume["fits_budget"] = None
        resume["note"] = "no valid checkpoint"
    restart = {"available": True}
    restart.update(_option_cost(p, p["total"]))
    restart["fits_budget"] = restart["expected_extra_gpu_hours"] <= remaining_budget
    restart["note"] = "full rerun from the start" + (
        "; dominated by resuming from the checkpoint" if p["checkpoint"] else "")
    end = {"available": True, "fits_budget": True, "expected_extra_gpu_hours": 0.0,
           "expected_work_gpu_hours": 0.0, "expected_checkpoint_gpu_hours": 0.0,
           "expected_restart_gpu_hours": 0.0, "expected_lost_work_gpu_hours": 0.0,
           "expected_interruptions": 0.0, "expected_wall_hours": 0.0, "expected_total_gpu_hours": spent,
           "note": "artifact incomplete; last valid checkpoint kept"}
    options = {"resume": resume, "restart": restart, "end": end}

    blocking = []
    if p["event"] == "budget-breach" and increase == 0:
        blocking.append({"code": "budget-breach", "message": (
            f"budget breached ({_fmt(spent)} of {_fmt(p['budget'])} GPU-h spent) and no approved budget "
            "increase is recorded")})
    if remaining_budget <= 0:
        blocking.append({"code": "budget-spent", "message": (
            f"budget spent: {_fmt(spent)} of {_fmt(budget)} GPU-h used"
            + (f" (including an approved increase of {_fmt(increase)} GPU-h)" if increase else ""))})
    if p["max_restarts"] is not None and p["restarts"] >= p["max_restarts"]:
        blocking.append({"code": "restart-limit", "message": (
            f"restart limit reached: {p['restarts']} of {p['max_restarts']} relaunches used")})
    if p["max_failed"] is not None and p["failed"] >= p["max_failed"]:
        blocking.append({"code": "failed-step-limit", "message": (
            f"failed-step limit reached: {p['failed']} failed steps, limit {p['max_failed']}")})

    if blocking:
        action, code, message = "end", blocking[0]["code"], blocking[0]["message"]
    elif resume["available"]:
        if resume["fits_budget"]:
            action, code = "resume", "resume-from-checkpoint"
            message = (f"resume from {p['checkpoint']}: expected {_fmt(resume['expected_extra_gpu_hours'])} "
                       f"GPU-h more (work {_fmt(p['remaining'])}, restarts "
                       f"{_fmt(resume['expected_restart_gpu_hours'])}, expected lost work "
                       f"{_fmt(resume['expected_lost_work_gpu_hours'])}) fits the remaining "
                       f"{_fmt(remaining_budget)} GPU-h")
        else:
            action, code = "end", "budget-insufficient"
            message = (f"resuming from {p['checkpoint']} is expected to need "
                       f"{_fmt(resume['expected_extra_gpu_hours'])} GPU-h but only "
                       f"{_fmt(remaining_budget)} GPU-h of budget remain")
            blocking.append({"code": code, "message": message})
    elif restart["fits_budget"]:
        action, code = "restart", "restart-no-checkpoint"
        message = (f"no valid checkpoint: a full rerun is expected to need "
                   f"{_fmt(restart['expected_extra_gpu_hours'])} GPU-h, which fits the remaining "
                   f"{_fmt(remaining_budget)} GPU-h")
    else:
        action, code = "end", "budget-insufficient"
        message = (f"no valid checkpoint and a full rerun is expected to need "
                   f"{_fmt(restart['expected_extra_gpu_hours'])} GPU-h but only "
                   f"{_fmt(remaining_budget)} GPU-h of budget remain")
        blocking.append({"code": code, "message": message})

    if action == "end":
        kept = p["checkpoint"] or "none"
        message = f"end: {message}; artifact incomplete, last valid checkpoint kept: {kept}"

    lost_now = None
    if p["progress"] is not None:
        lost_now = max(0.0, p["progress"] - p["ckpt_frac"]) * p["total"]
    return {
        "action": action,
        "code": code,
        "message": message,
        "blocking": blocking,
        "stop_reason": END_STOP_REASON.get(code) if action == "end" else None,
        "artifact_status": "incomplete",
        "event": p["event"],
        "last_valid_checkpoint": p["checkpoint"],
        "resume_from": p["checkpoint"] if action == "resume" else None,
        "budget_gpu_hours": budget,
        "approved_budget_increase_gpu_hours": increase,
        "spent_gpu_hours": spent,
        "remaining_budget_gpu_hours": remaining_budget,
        "remaining_work_gpu_hours": p["remaining"],
        "total_work_gpu_hours": p["total"],
        "lost_work_now_gpu_hours": lost_now,
        "restarts_after": p["restarts"] + (1 if action in ("resume", "restart") else 0),
        "options": options,
    }


def scenario_outcomes(situation: RecoverySituation, runs: int = 20_000, seed=0) -> dict:
    """Completion-time and cost distributions of each choice, by Monte Carlo (:func:`lib.planning.simulate.simulate`).

    Uses ``lifetimes_h`` (empirical job lifetimes, resampled) when the situation has them, else
    exponential lifetimes with ``mtbf_h`` (none: never interrupted). Each relaunch starts with a restart.
    Returns {"decision": decide_recovery(situation), "options": {"resume": sim | None (no checkpoint),
    "restart": sim, "end": {...zero cost...}}}; each sim is the simulate() dict (completion_hours and
    billed_gpu_hours = *extra* GPU-hours, each mean/p50/p90/p99) plus expected_total_gpu_hours_mean
    (spent + mean extra) and p_budget_breach against the remaining budget (p_wall_breach against
    wall_limit_h when given).
    """
    from lib.planning.simulate import simulate  # numpy only when scenarios are asked for

    decision = decide_recovery(situation)
    p = _parse(situation)
    remaining_budget = decision["remaining_budget_gpu_hours"]
    if p["lifetimes"] is not None:
        source = {"lifetimes_h": p["lifetimes"]}
    else:
        source = {"mtbf_h": p["mtbf"]}

    def run(work_gpu_hours):
        sim = simulate(work_gpu_hours / p["gpus"], p["interval"], p["checkpoint_h"], p["restart_h"],
                       p["gpus"], downtime_h=p["downtime_h"], runs=runs, seed=seed,
                       budget_gpu_hours=max(remaining_budget, 0.0), wall_limit_h=p["wall_limit"],
                       restart_first=True, **source)
        sim["expected_total_gpu_hours_mean"] = p["spent"] + sim["billed_gpu_hours"]["mean"]
        if remaining_budget <= 0:
            sim["p_budget_breach"] = 1.0
        return sim

    zero = {"mean": 0.0, "p50": 0.0, "p90": 0.0, "p99": 0.0}
    return {
        "decision": decision,
        "options": {
            "resume": run(p["remaining"]) if p["checkpoint"] else None,
            "restart": run(p["total"]),
            "end": {"completion_hours": zero, "billed_gpu_hours": zero,
                    "expected_total_gpu_hours_mean": p["spent"], "p_budget_breach": 0.0,
                    "p_wall_breach": 0.0, "note": "artifact incomplete; last valid checkpoint kept"},
        },
    }
