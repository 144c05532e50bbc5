"""Monte Carlo simulation of a checkpointed job under interruptions (vectorised numpy).

Same conventions as :mod:`lib.planning.preemption` (hours everywhere, GPU-hours for spend): the work is cut into
segments of ``interval_h`` hours, each followed by a checkpoint of ``checkpoint_h`` hours (the last
included; a remainder is one shorter segment with its own checkpoint; ``interval_h=None`` = no
checkpointing, one segment of the whole work). An interruption during compute or checkpoint loses the
work since the last completed checkpoint. After an interruption the job waits ``downtime_h`` (nothing can
fail, not billed), then restarts for ``restart_h`` (billed, and interruptible: an interruption during the
restart costs another downtime and another restart).

Interruptions form a renewal process: each (re)start of the job draws a fresh lifetime (the time until
its next interruption), either exponential with mean ``mtbf_h`` or resampled with replacement from an
empirical sample ``lifetimes_h`` (e.g. the gaps between interruptions recorded in the ledger). A lifetime
runs across as many segments as it lasts; the first lifetime starts with the job. With exponential
lifetimes this is exactly the closed-form model of :func:`lib.planning.preemption.expected_time`.

Vectorisation: all runs advance together, one *round* = one lifetime per still-running run; the loop is
over rounds (interruptions), with a shrinking set of active runs.
"""
from __future__ import annotations

import bisect
import math
import random

import numpy as np

from lib.gate.terms import checked_count, checked_number
from lib.planning.preemption import expected_time, segment_lengths

__all__ = ["simulate", "simulate_reference", "segment_bounds"]


def segment_bounds(work_h, interval_h, checkpoint_h) -> np.ndarray:
    """Cumulative checkpoint positions S (hours of failure-free time), S[0] = 0, S[-1] = total length."""
    lengths = []
    for length, count in segment_lengths(work_h, interval_h, checkpoint_h):
        lengths.extend([length] * count)
    return np.concatenate(([0.0], np.cumsum(np.asarray(lengths, dtype=float))))


def _lifetime_sampler(rng: np.random.Generator, mtbf_h, lifetimes_h):
    if (mtbf_h is None) == (lifetimes_h is None):
        raise ValueError("give exactly one of mtbf_h or lifetimes_h")
    if lifetimes_h is not None:
        if isinstance(lifetimes_h, (str, bytes, dict)) or np.asarray(lifetimes_h).dtype == bool:
            raise ValueError("lifetimes_h must be a sequence of numbers (hours)")
        try:
            arr = np.asarray(lifetimes_h, dtype=float).ravel()
        except (TypeError, ValueError):
            raise ValueError("lifetimes_h must be a sequence of numbers (hours)") from None
        if arr.size == 0:
            raise ValueError("lifetimes_h must be a non-empty sequence of hours")
        if not np.all(np.isfinite(arr)) or np.any(arr <= 0):
            raise ValueError("lifetimes_h must hold finite hours > 0")
        n = arr.size
        return (lambda size: arr[rng.integers(0, n, size)]), float(arr.mean())
    m = checked_number("mtbf_h", mtbf_h, positive=True, allow_inf=True)
    if math.isinf(m):
        return (lambda size: np.full(size, np.inf)), m
    return (lambda size: rng.exponential(m, size)), m


def _job_inputs(work_h, checkpoint_h, restart_h, downtime_h, gpus, runs) -> tuple:
    """The job's validated numbers (hours, counts); ValueError naming the argument otherwise."""
    return (checked_number("work_h", work_h), checked_number("checkpoint_h", checkpoint_h),
            checked_number("restart_h", restart_h), checked_number("downtime_h", downtime_h),
            checked_count("gpus", gpus), checked_count("runs", runs))


def _summary(x: np.ndarray) -> dict:
    p50, p90, p99 = np.percentile(x, [50.0, 90.0, 99.0])
    return {"mean": float(x.mean()), "p50": float(p50), "p90": float(p90), "p99": float(p99)}


def simulate(work_h, interval_h, checkpoint_h, restart_h, gpus, *, mtbf_h=None, lifetimes_h=None,
             downtime_h=0.0, runs: int = 100_000, seed=0, budget_gpu_hours=None, wall_limit_h=None,
             restart_first: bool = False, max_rounds: int = 20_000, return_samples: bool = False) -> dict:
    """Simulate ``runs`` independent executions of one job; return the distributions.

    Args (hours unless stated): work_h useful work; interval_h work between checkpoints or None;
    checkpoint_h, restart_h, downtime_h >= 0; gpus >= 1 accelerators (billed GPU-hours =
    gpus x (wall hours - downtime)); exactly one of mtbf_h (the job's mean time between interruptions,
    exponential; ``math.inf`` = never) or lifetimes_h (array of observed job lifetimes in hours,
    resampled with replacement); runs >= 1; seed for numpy's default_rng; budget_gpu_hours and
    wall_limit_h optional limits; restart_first: the job starts with a restart (resuming after a
    preemption); max_rounds: safety cap on interruptions per run (ValueError when exceeded).

    Returns a dict:
        completion_hours, billed_gpu_hours, interruptions, lost_work_hours, restart_hours:
            each {"mean", "p50", "p90", "p99"}  (lost work = compute + checkpoint time of interrupted
            attempts, wall hours; restart_hours = time spent restarting, interrupted restarts included)
        lost_work_gpu_hours_mean        gpus x mean lost work
        completion_hours_se             standard error of the mean completion time (hours)
        p_budget_breach                 P(billed GPU-hours > budget_gpu_hours) or None
        p_wall_breach                   P(completion hours > wall_limit_h) or None
        runs, seed, lifetime_mean_h, failure_free_hours, rounds (max interruptions + 1)
        samples (only with return_samples): arrays completion_hours, billed_gpu_hours, interruptions,
            lost_work_hours, restart_hours (one entry per run)
    """
    w, c, r, d, g, n_runs = _job_inputs(work_h, checkpoint_h, restart_h, downtime_h, gpus, runs)
    cap = checked_count("max_rounds", max_rounds)
    if budget_gpu_hours is not None:
        budget = checked_number("budget_gpu_hours", budget_gpu_hours, allow_inf=True)
    if wall_limit_h is not None:
        wall = checked_number("wall_limit_h", wall_limit_h, allow_inf=True)
    if not isinstance(restart_first, bool):
        raise ValueError(f"restart_first must be a bool, got {restart_first!r}")
    if isinstance(seed, bool):
        raise ValueError("seed must be an int or None")
    rng = np.random.default_rng(seed)
    draw, life_mean = _lifetime_sampler(rng, mtbf_h, lifetimes_h)
    if mtbf_h is not None and math.isfinite(life_mean):
        expect_n = expected_time(w, interval_h, c, r, life_mean, d, restart_first=restart_first)
        if expect_n["expected_interruptions"] > cap / 4:
            raise ValueError(
                f"mtbf_h={life_mean:g} h is too short for this job: "
                f"{expect_n['expected_interruptions']:.3g} interruptions expected per run "
                f"(max_rounds={cap})")

    S = segment_bounds(w, interval_h, c)
    total = float(S[-1])
    n_seg = S.size - 1
    S_ext = np.append(S, np.inf)
    # all segments but the last of equal length: the segment index is a division, not a search
    segs = segment_lengths(w, interval_h, c)
    inv_len = None
    if segs and segs[0][0] > 0 and (len(segs) == 1 or (len(segs) == 2 and segs[1][0] <= segs[0][0])):
        inv_len = 1.0 / segs[0][0]

    # outputs, written when a run finishes
    t = np.empty(n_runs)          # wall hours
    n_int = np.empty(n_runs, dtype=np.int64)
    lost = np.empty(n_runs)
    rst = np.empty(n_runs)
    # state of the still-running runs, compacted every round; every active run has been interrupted
    # exactly once per past round, so the interruption count is the round number
    ids = np.arange(n_runs)
    t_a = np.zeros(n_runs)
    lost_a = np.zeros(n_runs)
    rst_a = np.zeros(n_runs)
    k_a = np.zeros(n_runs, dtype=np.int64)   # completed segments
    rounds = 0
    r_now = r if restart_first else 0.0
    while ids.size:
        if rounds >= cap:
            raise ValueError(f"runs still unfinished after max_rounds={cap} interruptions; "
                             "the job practically never finishes with these lifetimes")
        x = draw(ids.size)
        start = S[k_a]
        reach = start + (x - r_now)           # failure-free position this lifetime reaches
        done = reach >= total
        if done.any():                        # restart + the rest of the work, no further interruption
            fin = ids[done]
            t[fin] = t_a[done] + (r_now + total) - start[done]
            n_int[fin] = rounds
            lost[fin] = lost_a[done]
            rst[fin] = rst_a[done] + r_now
            keep = ~done
            ids, x, reach = ids[keep], x[keep], reach[keep]
            t_a, lost_a, rst_a, k_a = t_a[keep], lost_a[keep], rst_a[keep], k_a[keep]
        # interrupted: progress up to the last completed checkpoint survives
        if inv_len is not None:               # equal segments: divide, then fix rounding at the edges
            kf = (reach * inv_len).astype(np.int64)
            np.clip(kf, 0, n_seg - 1, out=kf)
            kf -= S[kf] > reach
            kf += S_ext[kf + 1] <= reach
        else:
            kf = np.searchsorted(S, reach, side="right") - 1
        np.maximum(kf, k_a, out=kf)           # interrupted during the restart: no progress
        lost_a += np.maximum(reach - S[kf], 0.0)
        if r_now > 0:
            rst_a += np.minimum(x, r_now)
        t_a += x
        t_a += d
        k_a = kf
        r_now = r
        rounds += 1

    billed = g * (t - d * n_int)
    out = {
        "runs": n_runs,
        "seed": seed,
        "gpus": g,
        "lifetime_mean_h": life_mean,
        "failure_free_hours": total + (r if restart_first else 0.0),
        "completion_hours": _summary(t),
        "completion_hours_se": float(t.std(ddof=1) / math.sqrt(n_runs)) if n_runs > 1 else math.nan,
        "billed_gpu_hours": _summary(billed),
        "interruptions": _summary(n_int.astype(float)),
        "lost_work_hours": _summary(lost),
        "lost_work_gpu_hours_mean": float(g * lost.mean()),
        "restart_hours": _summary(rst),
        "p_budget_breach": None if budget_gpu_hours is None else float(np.mean(billed > budget)),
        "p_wall_breach": None if wall_limit_h is None else float(np.mean(t > wall)),
        "budget_gpu_hours": None if budget_gpu_hours is None else budget,
        "wall_limit_h": None if wall_limit_h is None else wall,
        "rounds": rounds,  # = max interruptions + 1
    }
    if return_samples:
        out["samples"] = {"completion_hours": t, "billed_gpu_hours": billed, "interruptions": n_int,
                          "lost_work_hours": lost, "restart_hours": rst}
    return out


def simulate_reference(work_h, interval_h, checkpoint_h, restart_h, gpus, *, mtbf_h=None,
                       lifetimes_h=None, downtime_h=0.0, runs: int = 1_000, seed=0,
                       restart_first: bool = False) -> dict:
    """The same simulation as :func:`simulate`, one run at a time in plain Python (``random`` + bisect).

    Slow on purpose: the baseline for bench/bench_simulator.py and an independent check in the tests.
    Returns {"completion_hours": list, "billed_gpu_hours": list, "interruptions": list,
    "lost_work_hours": list}.
    """
    w, c, r, d, g, n_runs = _job_inputs(work_h, checkpoint_h, restart_h, downtime_h, gpus, runs)
    rnd = random.Random(seed)
    if (mtbf_h is None) == (lifetimes_h is None):
        raise ValueError("give exactly one of mtbf_h or lifetimes_h")
    if lifetimes_h is not None:
        pool = [float(v) for v in lifetimes_h]

        def draw():
            return pool[rnd.randrange(len(pool))]
    else:
        rate = 1.0 / checked_number("mtbf_h", mtbf_h, positive=True, allow_inf=True)

        def draw():
            return rnd.expovariate(rate) if rate > 0 else math.inf
    S = segment_bounds(w, interval_h, c).tolist()
    total = S[-1]
    res = {"completion_hours": [], "billed_gpu_hours": [], "interruptions": [], "lost_work_hours": []}
    for _ in range(n_runs):
        t = 0.0
        n = 0
        lost = 0.0
        k = 0
        r_now = r if restart_first else 0.0
        while True:
            x = draw()
            reach = S[k] + x - r_now
            if reach >= total:
                t += r_now + total - S[k]
                break
            kk = max(bisect.bisect_right(S, reach) - 1, k)
            if reach > S[kk]:
                lost += reach - S[kk]
            k = kk
            t += x + d
            n += 1
            r_now = r
        res["completion_hours"].append(t)
        res["billed_gpu_hours"].append(g * (t - d * n))
        res["interruptions"].append(n)
        res["lost_work_hours"].append(lost)
    return res
