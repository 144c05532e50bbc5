"""Preemption economics: closed forms for checkpointed work under exponential interruptions.

Pure functions over plain numbers (math only): no database, no Streamlit. Units: hours for every
time (``*_h``), GPU-hours for spend (``*_gpu_hours``); a price ratio is spot price / stable price.

Model (docs/rules.md, Preemption economics; Daly FGCS 2006; Bougeret et al. SC'11)
----------------------------------------------------------------------------------
W = ``work_h`` useful work, tau = ``interval_h`` work between checkpoints, C = ``checkpoint_h`` time to
write one checkpoint, R = ``restart_h`` restart time (reload + warm-up), D = ``downtime_h`` time waiting
for capacity after an interruption (nothing can fail during it, and it is not billed), M = ``mtbf_h`` mean
time between interruptions *of the job* (exponential, rate 1/M; see :func:`job_mtbf_h`).

Conventions:

* The work is cut into segments of tau hours; a checkpoint (C hours) follows every segment, the last
  included, so a segment costs L = tau + C hours when nothing goes wrong.
* When W is not a multiple of tau, the remainder is one shorter segment with its own checkpoint.
* An interruption during compute *or* during the checkpoint write loses the whole segment: the job
  resumes from the end of the previous segment.
* After an interruption the job waits D (not interruptible, not billed), then restarts (R hours, billed);
  restarts can themselves be interrupted (then: D again, R again).
* The first attempt of the first segment starts without a restart, unless ``restart_first=True``
  (resuming a job that was just preempted: it must reload before computing).
* No checkpointing (``interval_h=None``): one segment of the whole work with no checkpoint cost
  (every interruption restarts from scratch).

Per segment of length L: E[T_seg] = (M + D) e^{R/M} (e^{L/M} - 1) and E[N_seg] = e^{R/M} (e^{L/M} - 1).
"""
from __future__ import annotations

import math

from lib.gate.terms import checked_count, checked_number

__all__ = [
    "checked_number",
    "checked_count",
    "expected_time",
    "segment_lengths",
    "optimal_interval",
    "best_segment_count",
    "lambert_w0",
    "compare_capacity",
    "job_mtbf_h",
]

_REMAINDER_TOL = 1e-9  # relative: a remainder below work_h * tol is rounding noise, not a segment


# --------------------------------------------------------------------------- segments
def segment_lengths(work_h, interval_h, checkpoint_h) -> list[tuple[float, int]]:
    """The segments of a job as ``[(length_h, count), ...]`` (length = compute + checkpoint, hours).

    ``interval_h=None`` (or an interval >= the work with ``checkpoint_h == 0``) means one segment of the
    whole work with no checkpoint. Otherwise floor(W/tau) full segments of tau + C and, when W is not a
    multiple of tau, one shorter segment (remainder + C). Zero work gives no segments.
    """
    w = checked_number("work_h", work_h)
    c = checked_number("checkpoint_h", checkpoint_h)
    if w == 0:
        return []
    if interval_h is None:
        return [(w, 1)]
    tau = checked_number("interval_h", interval_h, positive=True, allow_inf=True)
    if tau >= w:
        return [(w + c, 1)]
    n_full = math.floor(w / tau)
    rem = w - n_full * tau
    if rem <= _REMAINDER_TOL * w:          # w/tau was an integer up to rounding
        rem = 0.0
    elif tau - rem <= _REMAINDER_TOL * w:  # floor() fell just below an integer
        n_full += 1
        rem = 0.0
    out = [(tau + c, n_full)]
    if rem > 0:
        out.append((rem + c, 1))
    return out


def _segment_moments(length_h: float, r: float, m: float, d: float) -> dict:
    """Exact expectations for one segment of ``length_h`` hours whose first attempt has no restart.

    Returns expected wall hours, interruptions, lost work (compute + checkpoint time of failed attempts),
    restart hours (time in restart phases, interrupted ones included) and downtime hours.
    """
    if math.isinf(m):
        return {"t": length_h, "n": 0.0, "lost": 0.0, "restart": 0.0, "down": 0.0}
    lam = 1.0 / m
    em1_l = math.expm1(lam * length_h)               # e^{L/M} - 1
    e_r = math.exp(lam * r)
    n = e_r * em1_l                                   # E[N_seg]
    t = (m + d) * n                                   # E[T_seg]
    # Attempts after the first include a restart; their count K has E[K] = p1 / q with
    # p1 = 1 - e^{-L/M} (first attempt fails), q = e^{-(R+L)/M} (a retry succeeds).
    p1 = -math.expm1(-lam * length_h)
    e_k = p1 * math.exp(lam * (r + length_h))         # = e^{R/M} (e^{L/M} - 1) = n
    # E[X 1{X<L}] for X ~ Exp(1/M): time lost by an attempt that fails in its compute/checkpoint part
    part = m * p1 - length_h * math.exp(-lam * length_h)
    lost = part + e_k * math.exp(-lam * r) * part
    restart = e_k * m * (-math.expm1(-lam * r))       # Wald: E[K] * E[min(X, R)]
    return {"t": t, "n": n, "lost": lost, "restart": restart, "down": d * n}


def expected_time(work_h, interval_h, checkpoint_h, restart_h, mtbf_h, downtime_h=0.0, *,
                  restart_first: bool = False) -> dict:
    """Expected wall-clock hours to finish ``work_h`` hours of useful work under exponential interruptions.

    Conventions (see the module docstring): a checkpoint follows every segment, the last included; an
    interruption during compute or checkpoint loses the segment; restarts can themselves be interrupted;
    a remainder is one shorter segment with its own checkpoint; ``interval_h=None`` means no
    checkpointing (one segment of the whole work, no checkpoint cost). Per segment of length
    L = tau + C: E[T_seg] = (M + D) e^{R/M} (e^{L/M} - 1), E[N_seg] = e^{R/M} (e^{L/M} - 1).

    Args (hours): work_h >= 0; interval_h > 0 or None; checkpoint_h >= 0; restart_h >= 0;
        mtbf_h > 0 (``math.inf`` = never interrupted); downtime_h >= 0.
        restart_first: the job starts with a restart (resume after a preemption); adds the expected time
        of one interruptible restart, (M + D)(e^{R/M} - 1), and its interruptions, e^{R/M} - 1.

    Returns a dict (hours unless stated):
        expected_hours           E[T], wall clock including downtime
        expected_interruptions   E[N]
        expected_lost_work_hours compute + checkpoint time of attempts that were interrupted
        expected_restart_hours   time spent restarting (interrupted restarts included)
        expected_downtime_hours  D * E[N] (not billed)
        expected_billed_hours    E[T] - D E[N] (per accelerator; multiply by GPUs for GPU-hours)
        checkpoint_hours         C * number of checkpoints (when nothing fails)
        failure_free_hours       W + checkpoint_hours (+ R if restart_first)
        segments                 number of segments (checkpoints)
        stretch                  E[T] / W (nan for W = 0)
    E[T] = W + checkpoint_hours + lost + restart + downtime holds exactly (restart counts every restart,
    successful ones included).
    """
    w = checked_number("work_h", work_h)
    c = checked_number("checkpoint_h", checkpoint_h)
    r = checked_number("restart_h", restart_h)
    m = checked_number("mtbf_h", mtbf_h, positive=True, allow_inf=True)
    d = checked_number("downtime_h", downtime_h)
    if not isinstance(restart_first, bool):
        raise ValueError(f"restart_first must be a bool, got {restart_first!r}")
    segs = segment_lengths(w, interval_h, c)
    tot = {"t": 0.0, "n": 0.0, "lost": 0.0, "restart": 0.0, "down": 0.0}
    n_segments = 0
    ff = 0.0
    for length, count in segs:
        mom = _segment_moments(length, r, m, d)
        for k in tot:
            tot[k] += count * mom[k]
        n_segments += count
        ff += count * length
    if restart_first:
        ff += r
        if math.isinf(m):
            tot["t"] += r
            tot["restart"] += r
        else:
            em1_r = math.expm1(r / m)
            tot["t"] += (m + d) * em1_r
            tot["n"] += em1_r
            tot["down"] += d * em1_r
            tot["restart"] += m * em1_r          # E[T] of an R-length block without downtime
    checkpoints = 0.0 if interval_h is None else c * n_segments
    return {
        "expected_hours": tot["t"],
        "expected_interruptions": tot["n"],
        "expected_lost_work_hours": tot["lost"],
        "expected_restart_hours": tot["restart"],
        "expected_downtime_hours": tot["down"],
        "expected_billed_hours": tot["t"] - tot["down"],
        "checkpoint_hours": checkpoints,
        "failure_free_hours": ff,
        "segments": n_segments,
        "stretch": tot["t"] / w if w > 0 else math.nan,
    }


# --------------------------------------------------------------------------- optimal interval
def lambert_w0(x) -> float:
    """Principal branch W0 of the Lambert W function (w e^w = x) for real x >= -1/e.

    Halley iteration from a branch-point series (near -1/e), log-based guess (large x) or x itself.
    """
    x = float(x)
    if math.isnan(x):
        raise ValueError("x must not be NaN")
    branch = -1.0 / math.e
    if x < branch:
        if x > branch - 1e-15:
            x = branch
        else:
            raise ValueError(f"x must be >= -1/e for the principal branch, got {x!r}")
    if x == 0.0:
        return 0.0
    if math.isinf(x):
        return math.inf
    if x == branch:
        return -1.0
    if x < -0.25:
        p = math.sqrt(max(0.0, 2.0 * (math.e * x + 1.0)))
        w = -1.0 + p - p * p / 3.0 + 11.0 / 72.0 * p ** 3
    elif x < 3.0:
        w = math.log1p(x) * 0.8 if x > 0 else x * (1.0 - x)
    else:
        lx = math.log(x)
        w = lx - math.log(lx) if lx > 1 else lx
    for _ in range(100):
        ew = math.exp(w)
        f = w * ew - x
        wp1 = w + 1.0
        if wp1 == 0.0:
            break
        denom = ew * wp1 - (w + 2.0) * f / (2.0 * wp1)
        step = f / denom
        w -= step
        if abs(step) <= 1e-15 * (1.0 + abs(w)):
            break
    return w


def _exact_fraction(c_over_m: float) -> float:
    """y = tau*/M = 1 + W0(-e^{-(1 + C/M)}), accurate also for tiny C/M.

    Near the branch point the argument of W0 cannot carry C/M to full precision, so the W0 value is
    polished with Newton on the equivalent equation y + ln(1 - y) + C/M = 0 (y in (0, 1)).
    """
    c = c_over_m
    if c == 0.0:
        return 0.0
    if c > 30.0:  # e^{-(1+c)} is below 1e-13: W0(x) = x to double precision
        return 1.0 - math.exp(-(1.0 + c))
    y = 1.0 + lambert_w0(-math.exp(-(1.0 + c)))
    if c < 1.0:
        y = min(max(y, math.sqrt(2.0 * c) * 0.5), 0.999999)
        for _ in range(50):
            f = y + math.log1p(-y) + c
            fp = -y / (1.0 - y)
            step = f / fp
            y_new = y - step
            if not 0.0 < y_new < 1.0:
                y_new = min(max(y_new, y * 0.5), (1.0 + y) * 0.5)
            if abs(y_new - y) <= 1e-16 * y:
                y = y_new
                break
            y = y_new
    return y


def optimal_interval(checkpoint_h, mtbf_h, method: str = "exact") -> float:
    """Optimal work between checkpoints (hours).

    method:
        "young"  sqrt(2 C M) (Young, CACM 1974);
        "daly"   sqrt(2 C M) [1 + sqrt(C/2M)/3 + (C/2M)/9] - C for C < 2M, else M (Daly, FGCS 2006);
        "exact"  M [1 + W0(-e^{-(C/M + 1)})], the minimiser of the per-hour cost (e^{(tau+C)/M} - 1)/tau
                 of the exponential model; independent of R and D.
    C = 0 gives 0 (checkpointing is free, so checkpoint continuously); M = inf gives inf.
    """
    c = checked_number("checkpoint_h", checkpoint_h)
    m = checked_number("mtbf_h", mtbf_h, positive=True, allow_inf=True)
    if method not in ("young", "daly", "exact"):
        raise ValueError(f"method must be 'young', 'daly' or 'exact', got {method!r}")
    if c == 0.0:
        return 0.0
    if math.isinf(m):
        return math.inf
    if method == "young":
        return math.sqrt(2.0 * c * m)
    if method == "daly":
        if c >= 2.0 * m:
            return m
        q = c / (2.0 * m)
        return math.sqrt(2.0 * c * m) * (1.0 + math.sqrt(q) / 3.0 + q / 9.0) - c
    return m * _exact_fraction(c / m)


def best_segment_count(work_h, checkpoint_h, restart_h, mtbf_h, *, max_segments: int = 1_000_000) -> int:
    """Best whole number n >= 1 of equal segments (W/n work + one checkpoint each) for ``work_h``.

    Minimises n (e^{(W/n + C)/M} - 1), which is E[T] up to the constant factor (M + D) e^{R/M}, so R
    (and D) do not change the answer; ``restart_h`` is validated and accepted for symmetry. The cost is
    convex in n, so the best integer is the floor or the ceiling of W / tau*. With C = 0 more segments
    are always better: the answer is capped at ``max_segments``. Zero work returns 1.
    """
    w = checked_number("work_h", work_h)
    c = checked_number("checkpoint_h", checkpoint_h)
    checked_number("restart_h", restart_h)
    m = checked_number("mtbf_h", mtbf_h, positive=True, allow_inf=True)
    cap = checked_count("max_segments", max_segments)
    if w == 0 or math.isinf(m):
        return 1
    if c == 0:
        return cap

    def cost(n: int) -> float:
        return n * math.expm1((w / n + c) / m)

    tau = optimal_interval(c, m, "exact")
    guess = w / tau if tau > 0 else float(cap)
    lo = max(1, min(cap, math.floor(guess)))
    cands = {lo, min(cap, lo + 1), max(1, lo - 1)}
    return min(sorted(cands), key=cost)


# --------------------------------------------------------------------------- capacity choice
def job_mtbf_h(device_mtbf_h, n_devices) -> float:
    """Mean time between interruptions of a job on ``n_devices`` accelerators (hours): M_device / N.

    Independent exponential failures of N devices, any of which interrupts the job.
    """
    m = checked_number("device_mtbf_h", device_mtbf_h, positive=True, allow_inf=True)
    n = checked_count("n_devices", n_devices)
    return m / n


def compare_capacity(work_h, gpus, price_ratio, interval_h, checkpoint_h, restart_h, mtbf_h,
                     downtime_h=0.0, deadline_h=None) -> dict:
    """Preemptible against stable capacity for one job (docs/rules.md, Preemption economics).

    Args: work_h useful work (hours of wall clock on ``gpus`` accelerators); gpus >= 1; price_ratio
    r = preemptible price / stable price (>= 0); interval_h, checkpoint_h, restart_h, downtime_h as in
    :func:`expected_time` (the same checkpoint interval is used on both capacities); mtbf_h the *job's*
    mean time between preemptions on preemptible capacity (use :func:`job_mtbf_h`); stable capacity is
    taken as never interrupted; deadline_h (hours from now) or None.

    Costs are in stable-price GPU-hours: billed GPU-hours x price ratio. Waiting for capacity (D) is not
    billed; restart time is. Stable: gpus x (W + checkpoints). Preemptible: r x gpus x (E[T] - D E[N]).
    Break-even ratio: stable cost / preemptible billed GPU-hours (preemptible is cheaper iff r is below
    it). Delay: E[T] - stable hours; stretch: E[T] / W.

    Deadline (Wu et al., "Can't Be Late", NSDI'24): preemptible capacity is admissible only while a
    fallback to stable capacity still meets the deadline, i.e. while slack >= remaining work + restart
    delay. At the start that is deadline_h >= stable_hours + restart_h; ``fallback_slack_h`` is the wall
    time the job may lose on preemptible capacity before it must switch to stable.

    Returns a dict with stable_hours, stable_cost_gpu_hours, preemptible (the :func:`expected_time`
    dict), preemptible_billed_gpu_hours, preemptible_cost_gpu_hours, break_even_ratio, cheaper,
    expected_delay_hours, stretch, and deadline (None, or a dict with stable_meets, preemptible_admissible,
    fallback_slack_h, expected_preemptible_meets, switch_to_stable_when) and recommendation
    ("preemptible" | "stable").
    """
    w = checked_number("work_h", work_h)
    g = checked_count("gpus", gpus)
    ratio = checked_number("price_ratio", price_ratio)
    r = checked_number("restart_h", restart_h)
    if deadline_h is not None:
        deadline = checked_number("deadline_h", deadline_h)
    pre = expected_time(w, interval_h, checkpoint_h, r, mtbf_h, downtime_h)
    stable_hours = pre["failure_free_hours"]
    stable_cost = g * stable_hours
    pre_billed = g * pre["expected_billed_hours"]
    pre_cost = ratio * pre_billed
    break_even = stable_cost / pre_billed if pre_billed > 0 else math.inf
    cheaper = "preemptible" if ratio < break_even else "stable"
    out = {
        "work_h": w,
        "gpus": g,
        "price_ratio": ratio,
        "stable_hours": stable_hours,
        "stable_cost_gpu_hours": stable_cost,
        "preemptible": pre,
        "preemptible_hours": pre["expected_hours"],
        "preemptible_billed_gpu_hours": pre_billed,
        "preemptible_cost_gpu_hours": pre_cost,
        "expected_lost_work_gpu_hours": g * pre["expected_lost_work_hours"],
        "expected_restart_gpu_hours": g * pre["expected_restart_hours"],
        "break_even_ratio": break_even,
        "cheaper": cheaper,
        "saving_gpu_hours": stable_cost - pre_cost,
        "expected_delay_hours": pre["expected_hours"] - stable_hours,
        "stretch": pre["stretch"],
        "deadline": None,
    }
    recommendation = cheaper
    if deadline_h is not None:
        slack = deadline - stable_hours - r
        stable_meets = stable_hours <= deadline
        admissible = slack >= 0
        out["deadline"] = {
            "deadline_h": deadline,
            "stable_meets": stable_meets,
            "preemptible_admissible": admissible,
            "fallback_slack_h": slack,
            "expected_preemptible_meets": pre["expected_hours"] <= deadline,
            "switch_to_stable_when": (
                "time left before the deadline < remaining work on stable capacity + restart_h "
                f"(at the start: {stable_hours + r:.4g} h of {deadline:.4g} h)"),
        }
        if not admissible:
            recommendation = "stable"
    out["recommendation"] = recommendation
    return out
