"""Job lifetimes (hours from a (re)start until the next interruption) from the ledger, by Kaplan-Meier.

The ledger keeps interruption counts, not times: a run of h wall hours with n interruptions is cut
into n + 1 equal gaps of h / (n + 1); the n gaps that ended in an interruption are observed
lifetimes, and the last gap (ended by the run's end, not by an interruption) is right-censored: the
lifetime was at least that long. A run never interrupted is one censored lifetime of h. Dropping
the censored gaps (as a plain sample of the observed ones does) biases lifetimes short, most on
stable capacity where nearly every run ends uninterrupted; Kaplan-Meier counts them as at risk.

- `kaplan_meier`: the survival curve S(t) = Π over event times t_i ≤ t of (1 - d_i / n_i), with d_i
  lifetimes ending in an interruption at t_i and n_i still at risk (lifetimes ≥ t_i: a lifetime
  censored at t_i is still at risk there).
- `km_sample`: a sample of lifetimes for the simulator: the curve's quantiles at evenly spaced
  probabilities; beyond the last interruption (when S stays above 0 there) the tail continues
  exponentially with the mean time between interruptions (exposure hours / interruptions).
"""
from __future__ import annotations

import math
from typing import Iterable, TypedDict


class SurvivalStep(TypedDict):
    """One event time of a Kaplan-Meier curve: hours, at risk, interruptions there, S(t) after it."""
    t: float
    at_risk: float
    events: float
    survival: float


def kaplan_meier(lifetimes: Iterable[tuple[float, float, float]]) -> list[SurvivalStep]:
    """The Kaplan-Meier curve of grouped lifetimes (hours, interruptions there, censored there).

    Each tuple counts lifetimes of one length: how many ended in an interruption (events) and how
    many were censored at it. Returns one step per time with an event, in time order.
    """
    rows: dict[float, list[float]] = {}
    for t, events, censored in lifetimes:
        if not (t > 0 and math.isfinite(t)) or events < 0 or censored < 0:
            raise ValueError(f"lifetimes need hours > 0 and counts >= 0, got {(t, events, censored)!r}")
        acc = rows.setdefault(float(t), [0.0, 0.0])
        acc[0] += events
        acc[1] += censored
    at_risk = sum(e + c for e, c in rows.values())
    survival, steps = 1.0, []
    for t in sorted(rows):
        events, censored = rows[t]
        if events:
            survival *= 1.0 - events / at_risk
            steps.append({"t": t, "at_risk": at_risk, "events": events, "survival": survival})
        at_risk -= events + censored
    return steps


def km_sample(lifetimes: Iterable[tuple[float, float, float]], size: int) -> list[float]:
    """`size` lifetimes (hours) at the Kaplan-Meier quantiles (i + 0.5) / size; [] without events.

    Beyond the last interruption the curve is extended by an exponential tail whose mean is the
    mean time between interruptions of the same lifetimes (their total hours / interruptions).
    """
    groups = [(float(t), float(e), float(c)) for t, e, c in lifetimes]
    steps = kaplan_meier(groups)
    if not steps or size <= 0:
        return []
    events = sum(e for _, e, _ in groups)
    mtbf = sum(t * (e + c) for t, e, c in groups) / events
    last_t, last_s = steps[-1]["t"], steps[-1]["survival"]
    out, k = [], 0
    for i in range(size):
        u = (i + 0.5) / size
        while k < len(steps) and 1.0 - steps[k]["survival"] < u - 1e-12:
            k += 1
        if k < len(steps):
            out.append(steps[k]["t"])
        else:   # u beyond the curve's last step: S(t) = last_s · exp(-(t - last_t) / mtbf) = 1 - u
            out.append(last_t + mtbf * math.log(last_s / (1.0 - u)))
    return out

