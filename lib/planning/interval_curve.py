"""The checkpoint-interval curve the Recovery planner draws: expected completion time (and billed
GPU-hours) over a log grid of intervals around the optimum, and the optima themselves.

Pure maths over lib.planning.preemption, no pandas: rows are plain dicts. Hours are wall clock on the
job's GPUs; an interval is hours of work between checkpoints.
"""
from __future__ import annotations

import math

import numpy as np

from lib.planning.preemption import best_segment_count, expected_time, optimal_interval

GRID_POINTS = 60
METHODS = ("young", "daly", "exact")


def expected_or_none(work_h: float, interval_h: float, checkpoint_h: float, restart_h: float, mtbf_h: float,
                     downtime_h: float = 0.0) -> dict | None:
    """lib.planning.preemption.expected_time, or None where it has no finite answer (overflow, or an
    interval it refuses)."""
    try:
        return expected_time(work_h, interval_h, checkpoint_h, restart_h, mtbf_h, downtime_h)
    except (OverflowError, ValueError):
        return None


def expected_hours(work_h: float, interval_h: float, checkpoint_h: float, restart_h: float, mtbf_h: float,
                   downtime_h: float = 0.0) -> float:
    """Expected completion time (hours) at one interval; NaN where there is no finite answer."""
    e = expected_or_none(work_h, interval_h, checkpoint_h, restart_h, mtbf_h, downtime_h)
    return e["expected_hours"] if e else math.nan


def optima(work_h: float, checkpoint_h: float, restart_h: float, mtbf_h: float,
           downtime_h: float = 0.0) -> list[dict]:
    """The Young, Daly and exact optimal intervals, then the best whole number of equal segments:
    [{method, interval_h, expected_hours}]. Raises ValueError on inputs preemption refuses."""
    out = []
    for method in METHODS:
        tau = optimal_interval(checkpoint_h, mtbf_h, method)
        out.append({"method": method, "interval_h": tau,
                    "expected_hours": expected_hours(work_h, tau, checkpoint_h, restart_h, mtbf_h, downtime_h)})
    n_best = best_segment_count(work_h, checkpoint_h, restart_h, mtbf_h, max_segments=10_000)
    tau = work_h / n_best
    out.append({"method": f"best whole segments ({n_best})", "interval_h": tau,
                "expected_hours": expected_hours(work_h, tau, checkpoint_h, restart_h, mtbf_h, downtime_h)})
    return out


def interval_grid(work_h: float, optimum_intervals: list[float], points: int = GRID_POINTS) -> np.ndarray:
    """A log grid of intervals around the last finite optimum (×/÷ 8, within (0, work]), with the
    optima that fit inside the work added, sorted and unique."""
    finite = [x for x in optimum_intervals if 0 < x < math.inf]
    centre = finite[-1] if finite else work_h / 10
    hi = min(centre * 8, work_h)
    lo = max(centre / 8, work_h / 2000)
    if lo >= hi:
        lo = hi / 20
    return np.unique(np.concatenate([np.geomspace(lo, hi, points), [x for x in finite if x <= work_h]]))


def interval_curve(work_h: float, gpus: int, checkpoint_h: float, restart_h: float, mtbf_h: float,
                   downtime_h: float = 0.0, points: int = GRID_POINTS) -> tuple[list[dict], list[dict]]:
    """(curve, optima): curve rows {interval_h, expected_hours, expected_cost_gpu_hours} over
    interval_grid (NaN where there is no finite answer), and optima() as above."""
    best = optima(work_h, checkpoint_h, restart_h, mtbf_h, downtime_h)
    rows = []
    for tau in interval_grid(work_h, [o["interval_h"] for o in best[:len(METHODS)]], points):
        e = expected_or_none(work_h, float(tau), checkpoint_h, restart_h, mtbf_h, downtime_h)
        rows.append({"interval_h": float(tau), "expected_hours": e["expected_hours"] if e else math.nan,
                     "expected_cost_gpu_hours": gpus * e["expected_billed_hours"] if e else math.nan})
    return rows, best
