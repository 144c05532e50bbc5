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


def budget_stream(seed: int, n: int, *, mu: float = 0.1, sigma: float = 0.3, jump_at: int | None = None,
                  factor: float = 1.0, margin: float = 1.4) -> dict:
    """n log ratios ~ Normal(mu, sigma), times `factor` from run `jump_at` on, where every run over its
    budget (about `margin` × the typical cost, 5 % noise) stopped there: recorded ratio the budget,
    censored; the true one kept in "true". Returns {"r", "true", "censored"}."""
    rng = np.random.default_rng(seed)
    shift = np.zeros(n)
    if jump_at is not None:
        shift[jump_at:] = math.log(factor)
    true = mu + shift + sigma * rng.standard_normal(n)
    cap = mu + math.log(margin) + 0.05 * rng.standard_normal(n)
    censored = true > cap
    return {"r": np.where(censored, cap, true), "true": true, "censored": censored}


def team_history(seed: int, kinds: dict, *, days: int = 240, jump_day: int | None = None, factor: float = 2.0,
                 moved: tuple = (), margin: float = 1.4, team: str = "vision", est: float = 10.0) -> list[dict]:
    """A team's runs of several kinds as calibration rows, one admitted every `1 / rate` days per kind
    up to NOW, each ending 0.5-4 days after its admission (and before NOW). kinds: {kind: (mu, sigma,
    runs per day)}. Runs of the kinds in `moved` (every kind when empty) admitted from `jump_day` days
    before NOW on need `factor` times more; every run over its budget (`margin` × its kind's typical
    cost) stopped there, censored."""
    rng = np.random.default_rng(seed)
    rows = []
    for kind, (mu, sigma, rate) in kinds.items():
        admitted = np.arange(days * rate) / rate
        for a in admitted:
            at = NOW - timedelta(days=days - a)
            shift = math.log(factor) if jump_day is not None and a >= days - jump_day and \
                (not moved or kind in moved) else 0.0
            true = mu + shift + sigma * rng.standard_normal()
            cap = mu + math.log(margin)
            ended = at + timedelta(days=float(rng.uniform(0.5, 4.0)))
            if ended >= NOW:
                continue
            rows.append({"team": team, "kind": kind, "estimated_gpu_hours": est,
                         "actual_gpu_hours": est * math.exp(min(true, cap)), "censored": bool(true > cap),
                         "ended_at": ended, "admitted_at": at})
    return rows
