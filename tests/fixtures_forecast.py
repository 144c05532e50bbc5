"""Generated weekly demand histories for the forecast's tests and bench (bench/bench_forecast.py): a
team growing 40 % a year, a team with a step up and a year-end dip, and a steady team, as weekly
GPU-hours with log-normal noise, from a seed.
"""
from __future__ import annotations

import datetime as dt

import numpy as np

from lib.planning.forecast.models import year_end_place

GROWTH_PER_YEAR = 0.40          # the growing team: 40 % more a year, compounded weekly
YEAR_END_DIP = {-2: 0.85, -1: 0.45, 0: 0.50}   # share of its usual demand around the new year (place: share)
STEP_UP = 1.6                   # the stepping team's demand after its step
STEP_SPAN = (0.3, 0.8)          # the step falls in this part of the history
BASE = {"growing": 1000.0, "step+dip": 800.0, "steady": 600.0}   # GPU-hours a week at the start
KINDS = tuple(BASE)


def mondays_to(last_monday: dt.date, weeks: int) -> list[dt.date]:
    """The `weeks` Mondays up to `last_monday`, oldest first."""
    return [last_monday - dt.timedelta(weeks=weeks - 1 - i) for i in range(weeks)]


def expected_demand(seed: int, weeks: int, last_monday: dt.date) -> dict[str, np.ndarray]:
    """Each kind of team's demand without noise (GPU-hours a week), oldest week first."""
    rng = np.random.default_rng([seed, 1])
    t = np.arange(weeks)
    dip = np.array([YEAR_END_DIP.get((year_end_place(m) or (0, None))[1], 1.0)
                    for m in mondays_to(last_monday, weeks)])
    step_at = int(rng.integers(int(weeks * STEP_SPAN[0]), int(weeks * STEP_SPAN[1])))
    return {"growing": BASE["growing"] * (1 + GROWTH_PER_YEAR) ** (t / 52),
            "step+dip": BASE["step+dip"] * np.where(t >= step_at, STEP_UP, 1.0) * dip,
            "steady": np.full(weeks, BASE["steady"])}


def generated_histories(seed: int, weeks: int, last_monday: dt.date, noise: float) -> dict[str, np.ndarray]:
    """Each kind of team's weekly GPU-hours: its expected demand times log-normal noise of log-sd
    `noise` with mean 1 (so the expected demand is the mean, exp(-noise²/2) of it the median)."""
    rng = np.random.default_rng([seed, 2])
    return {kind: y * rng.lognormal(-noise ** 2 / 2, noise, weeks)
            for kind, y in expected_demand(seed, weeks, last_monday).items()}
