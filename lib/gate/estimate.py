"""A run's cost from its pilot, itemised in GPU-hours (docs/rules.md, Pilot estimates).

The pilot measures steps/s on a representative slice and on the worst-case input shape; the tail
share of steps is budgeted at the worst-case rate, never at the pilot mean. On top of compute come
data-loading stalls, checkpoint writes, evaluation and the expected cost of interruptions (restart
time plus the work lost since the last checkpoint). Every item is GPU-hours: wall hours × GPUs.

A pilot measured on `pilot.gpus` accelerators is scaled to the request's `gpus` (`throughput_ratio`):
linearly below the pilot's count (the same GPU-hours, a longer wall clock), and above it each added
accelerator adds `scaling_efficiency` of what one of the pilot's gave (Gustafson's scaled speedup), so
the GPU-hours never fall when a request asks for fewer accelerators than its pilot ran on.

Preemptible capacity interrupts runs whatever the request says: a preemptible request is priced with
the larger of its stated expected_interruptions and the interruptions the ledger observed there
(interruptions per GPU-hour × the run's GPU-hours before restarts); both are in `interruptions`.
"""
from __future__ import annotations

import math

from lib.gate.contracts import Estimate, ExpectedInterruptions, InterruptionRate, Pilot, Request

ITEMS = ("compute_typical", "compute_worst_case", "data_loading", "checkpoint", "evaluation",
         "restarts_and_lost_work")


def throughput_ratio(gpus: int, pilot_gpus: int, scaling_efficiency: float = 1.0) -> float:
    """Steps/s on `gpus` accelerators ÷ steps/s the pilot measured on `pilot_gpus` (docs/rules.md,
    Pilot estimates): r = gpus / pilot_gpus when r ≤ 1 (linear: the same GPU-hours), else
    1 + scaling_efficiency × (r − 1) (each added accelerator adds that share of one of the pilot's)."""
    r = gpus / pilot_gpus
    return r if r <= 1.0 else 1.0 + scaling_efficiency * (r - 1.0)


def from_pilot(pilot: Pilot, *, gpus: int, expected_interruptions: float,
               checkpoint_supported: bool, skip_full_evaluation: bool,
               scaling_efficiency: float = 1.0) -> Estimate:
    """Itemised estimate from a (validated, defaulted) pilot.

    pilot keys: steps_per_second, worst_case_steps_per_second (steps/s on `gpus` pilot accelerators,
    default: the request's), worst_case_share (0..1 of steps), planned_steps,
    checkpoint_interval_steps, checkpoint_write_s (s per checkpoint), eval_gpu_hours,
    data_loading_fraction (share of wall time stalled on input, 0..1), restart_minutes (reload +
    warm-up per interruption). Both rates are scaled by `throughput_ratio`; a checkpoint write takes
    longer in proportion when fewer accelerators share it than in the pilot, never less time.
    Returns {"items_gpu_hours": {...}, "raw_gpu_hours", "wall_hours"}.
    """
    steps = pilot["planned_steps"]
    share = pilot["worst_case_share"]
    pilot_gpus = pilot.get("gpus", gpus)
    ratio = throughput_ratio(gpus, pilot_gpus, scaling_efficiency)
    typical_h = steps * (1.0 - share) / (pilot["steps_per_second"] * ratio) / 3600.0
    worst_h = steps * share / (pilot["worst_case_steps_per_second"] * ratio) / 3600.0
    compute_h = typical_h + worst_h
    f = pilot["data_loading_fraction"]
    loading_h = compute_h * f / (1.0 - f)  # stalls are f of the wall time: wall = compute / (1 - f)
    interval = pilot["checkpoint_interval_steps"]
    n_checkpoints = math.ceil(steps / interval) if checkpoint_supported else 0
    write_h = pilot["checkpoint_write_s"] * max(1.0, pilot_gpus / gpus) / 3600.0
    checkpoint_h = n_checkpoints * write_h
    eval_gpu_hours = 0.0 if skip_full_evaluation else pilot["eval_gpu_hours"]
    run_h = compute_h + loading_h + checkpoint_h
    if checkpoint_supported:
        # an interruption lands on average halfway through a segment (its compute and its write)
        segment_h = (compute_h + loading_h) * min(interval, steps) / steps + write_h
        lost_h = segment_h / 2.0
    else:
        lost_h = run_h / 2.0
    restart_h = expected_interruptions * (pilot["restart_minutes"] / 60.0 + lost_h)
    items = {
        "compute_typical": typical_h * gpus,
        "compute_worst_case": worst_h * gpus,
        "data_loading": loading_h * gpus,
        "checkpoint": checkpoint_h * gpus,
        "evaluation": eval_gpu_hours,
        "restarts_and_lost_work": restart_h * gpus,
    }
    total = sum(items.values())
    return {"items_gpu_hours": items, "raw_gpu_hours": total, "wall_hours": total / gpus}


def from_stated(estimated_gpu_hours: float, *, gpus: int) -> Estimate:
    """A team's stated estimate, taken whole (no items to show): GPU-hours and wall hours."""
    return {"items_gpu_hours": {"stated": estimated_gpu_hours},
            "raw_gpu_hours": estimated_gpu_hours, "wall_hours": estimated_gpu_hours / gpus}


def expected_interruptions(stated: float, exposure_gpu_hours: float,
                           rate: InterruptionRate | None) -> ExpectedInterruptions:
    """The stated number, the ledger's (rate per GPU-hour × exposure GPU-hours) and the larger."""
    from_ledger = rate["per_gpu_hour"] * exposure_gpu_hours if rate else None
    return {"stated": stated, "from_ledger": from_ledger, "used": max(stated, from_ledger or 0.0),
            "rate": rate}


def estimate_request(req: Request, interruption_rate: InterruptionRate | None = None,
                     scaling_efficiency: float = 1.0) -> Estimate:
    """The raw estimate of a validated request, from its pilot or its stated GPU-hours.

    scaling_efficiency: the team's (policy), for a pilot measured on other than the request's gpus.
    interruption_rate: what the ledger observed on preemptible capacity; a preemptible request's
    estimate expects at least rate × its GPU-hours before restarts (its `interruptions` key says
    both numbers). A stated estimate is taken whole: the numbers are recorded, not priced (there is
    no restart time or checkpoint interval to price them with)."""
    stated = req["expected_interruptions"]
    preemptible = req.get("capacity") == "preemptible"
    if "pilot" in req:
        def priced(n):
            return from_pilot(req["pilot"], gpus=req["gpus"], expected_interruptions=n,
                              checkpoint_supported=req["checkpoint_supported"],
                              skip_full_evaluation=req["skip_full_evaluation"],
                              scaling_efficiency=scaling_efficiency)
        est = priced(stated)
        if preemptible:
            exposure = est["raw_gpu_hours"] - est["items_gpu_hours"]["restarts_and_lost_work"]
            expect = expected_interruptions(stated, exposure, interruption_rate)
            if expect["used"] > stated:
                est = priced(expect["used"])
            est["interruptions"] = expect
        est["source"] = "pilot"
    else:
        est = from_stated(req["estimated_gpu_hours"], gpus=req["gpus"])
        if preemptible:
            est["interruptions"] = expected_interruptions(stated, req["estimated_gpu_hours"], interruption_rate)
        est["source"] = "stated"
    return est
