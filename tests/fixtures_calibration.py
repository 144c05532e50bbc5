"""Builders of cost-ratio streams for calibration tests: log ratios in end-time order, with censoring."""
from __future__ import annotations

import math
from datetime import timedelta

import numpy as np

from tests.fixtures_gate import NOW


def ratio_stream(seed: int, n: int, *, mu: float = 0.1, sigma: float = 0.3, jump_at: int | None = None,
                 factor: float = 1.0, censor_share: float = 0.0) -> dict:
    """n log ratios ln(actual / estimate) ~ Normal(mu, sigma), times `factor` from run `jump_at` on.

    With censor_share, that share of the runs over mu + sigma stopped at a budget cap there: their
    recorded ratio is the cap, their true one is kept in "true". Returns {"r", "true", "censored"}."""
    rng = np.random.default_rng(seed)
    shift = np.zeros(n)
    if jump_at is not None:
        shift[jump_at:] = math.log(factor)
    true = mu + shift + sigma * rng.standard_normal(n)
    cap = mu + shift + sigma
    censored = (true > cap) & (rng.random(n) < censor_share)
    return {"r": np.where(censored, cap, true), "true": true, "censored": censored}


def as_history(stream: dict, team: str = "vision", kind: str = "exploratory", est: float = 10.0) -> list[dict]:
    """The stream as calibration rows, one run ending per day up to NOW (the last one day before)."""
    n = len(stream["r"])
    return [{"team": team, "kind": kind, "estimated_gpu_hours": est,
             "actual_gpu_hours": est * math.exp(r), "censored": bool(c),
             "ended_at": NOW - timedelta(days=n - i)}
            for i, (r, c) in enumerate(zip(stream["r"], stream["censored"]))]
