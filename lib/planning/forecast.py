"""Planning ahead: weekly GPU-hour demand forecasts and the month's budget burn-down, as plain numbers.

Weekly demand — simple exponential smoothing with empirical error quantiles:
- y[t] is the GPU-hours a team's runs used, counted in the week (Monday 00:00 UTC) they started;
- the level after week t is  L[t] = α·y[t] + (1 − α)·L[t−1]  (α = ALPHA; L starts at the mean of the
  first weeks), and the point forecast for every later week is the last level;
- P50 and P90 at horizon h (h = 1 is the week after the last complete one) are the level times the
  50th and 90th percentiles of the ratios  y[t+h] / L[t]  the same method produced on the team's own
  past (rolling origin, the last ERROR_ORIGINS origins); a team with fewer than MIN_RATIOS ratios at a
  horizon borrows the pooled ratios of every team. The band is therefore as wide as the method's own
  past misses, whatever shape the errors have (Hyndman & Athanasopoulos, "Forecasting: Principles and
  Practice", 3rd ed., §8.1 simple exponential smoothing and §5.5 empirical prediction intervals).
- The quota that would cover P90: P90 GPU-hours ÷ hours in a week, rounded up.

Budget burn-down (one month, UTC): spend is counted when a run ends (as the gate counts a team's
monthly spend). For the k days left, the spend still to come is taken from the empirical distribution
of k-day sums of the team's daily spend over the last BURN_HISTORY_DAYS days (P50, P90), and never
below the committed reservations due to end by then (each is assumed to spend what it reserved).
The projected exhaustion day is the first day the projected total reaches the budget.
"""
from __future__ import annotations

import datetime as dt
import math
from typing import Iterable, Sequence, TypedDict

import numpy as np

ALPHA = 0.3                 # smoothing weight of the newest week
INIT_WEEKS = 4              # weeks averaged for the first level
ERROR_ORIGINS = 52          # past forecast origins whose ratios make the bands
MIN_RATIOS = 12             # fewer ratios than this at a horizon: use the pooled ratios of every team
HOURS_PER_WEEK = 168.0
BURN_HISTORY_DAYS = 91      # daily spend history the burn-down's spread comes from
MAX_WEEKS = 104             # the farthest horizon asked for: two years (the bands rest on a year of origins)


# Projections are rounded to a tenth of a GPU-hour: more digits would claim a precision they lack.


class WeekForecast(TypedDict):
    week_start: dt.date
    horizon: int                # weeks ahead of the last complete week
    p50_gpu_hours: float
    p90_gpu_hours: float
    quota_for_p90_gpus: int     # accelerators that would give P90 GPU-hours in the week


def smoothed_levels(weekly: Sequence[float], alpha: float = ALPHA) -> np.ndarray:
    """The SES level after each week (GPU-hours); empty for an empty series."""
    y = np.asarray(weekly, dtype=float)
    if y.size == 0:
        return y
    levels = np.empty_like(y)
    level = 0.0
    for i, v in enumerate(y):
        level = alpha * v + (1 - alpha) * level if i >= INIT_WEEKS else float(y[: i + 1].mean())
        levels[i] = level
    return levels


def forecast_ratios(weekly: Sequence[float], horizons: int, origins: int = ERROR_ORIGINS) -> list[np.ndarray]:
    """For h = 1..horizons, the ratios y[t+h] / L[t] over the last `origins` origins t that have an
    outcome (origins with a zero level are skipped: a ratio to nothing says nothing)."""
    y = np.asarray(weekly, dtype=float)
    levels = smoothed_levels(y)
    out = []
    for h in range(1, horizons + 1):
        t = np.arange(INIT_WEEKS - 1, y.size - h)[-origins:]
        ok = levels[t] > 0
        out.append(y[t[ok] + h] / levels[t[ok]])
    return out


def weekly_forecast(weekly: Sequence[float], first_week: dt.date, horizons: int = 8,
                    pooled: list[np.ndarray] | None = None) -> list[WeekForecast]:
    """P50 / P90 GPU-hours for the `horizons` weeks from `first_week` (the week after the last complete
    week of `weekly`, oldest first). `pooled`: per-horizon ratios of every team, used where the team's
    own are fewer than MIN_RATIOS."""
    levels = smoothed_levels(weekly)
    level = float(levels[-1]) if levels.size else 0.0
    own = forecast_ratios(weekly, horizons)
    rows: list[WeekForecast] = []
    for h in range(1, horizons + 1):
        ratios = own[h - 1]
        if ratios.size < MIN_RATIOS and pooled is not None and pooled[h - 1].size > ratios.size:
            ratios = pooled[h - 1]
        p50, p90 = (level * np.quantile(ratios, [0.5, 0.9])) if ratios.size else (level, level)
        rows.append({"week_start": first_week + dt.timedelta(weeks=h - 1), "horizon": h,
                     "p50_gpu_hours": round(float(p50), 1), "p90_gpu_hours": round(float(p90), 1),
                     "quota_for_p90_gpus": int(math.ceil(round(float(p90) / HOURS_PER_WEEK, 9)))})
    return rows


def pooled_ratios(series: Iterable[Sequence[float]], horizons: int) -> list[np.ndarray]:
    """Every team's ratios per horizon, together."""
    per_team = [forecast_ratios(s, horizons) for s in series]
    return [np.concatenate([r[h] for r in per_team]) if per_team else np.empty(0) for h in range(horizons)]


def naive_forecast(weekly: Sequence[float], horizons: int = 8, weeks: int = 4) -> tuple[float, float]:
    """The baseline a planner would use without a method: (P50, P90) = (mean, max) of the last
    `weeks` weeks, the same for every horizon."""
    tail = np.asarray(weekly, dtype=float)[-weeks:]
    return (float(tail.mean()), float(tail.max())) if tail.size else (0.0, 0.0)


# --------------------------------------------------------------------------- budget burn-down

class BurnDown(TypedDict):
    budget_gpu_hours: float
    consumed_gpu_hours: float
    committed_gpu_hours: float
    days_left: int
    p50_month_end_gpu_hours: float
    p90_month_end_gpu_hours: float
    exhausts_p50: dt.date | None        # first day the P50 projection reaches the budget (None: not this month)
    exhausts_p90: dt.date | None
    path: list[dict]                    # per day left: day, p50_gpu_hours, p90_gpu_hours (projected totals)


def kday_sum_quantiles(daily: Sequence[float], k: int, qs=(0.5, 0.9)) -> list[float]:
    """Quantiles of the sum of k consecutive days of `daily` spend (GPU-hours). With fewer than k days
    of history, k times the quantiles of a single day (a wider, cautious band)."""
    d = np.asarray(daily, dtype=float)
    if k <= 0 or d.size == 0:
        return [0.0 for _ in qs]
    if d.size < k:
        return [float(k * v) for v in np.quantile(d, qs)]
    sums = np.convolve(d, np.ones(k), mode="valid")
    return [float(v) for v in np.quantile(sums, qs)]


def burn_down(budget: float, consumed: float, today: dt.date, month_end: dt.date,
              daily_spend: Sequence[float], committed_ends: Sequence[tuple[dt.datetime | None, float]]
              ) -> BurnDown:
    """The month's projected spend (GPU-hours) per day from `today` to `month_end`, both inclusive
    (spend so far is in `consumed`; the rest of today counts as a whole day: cautious). `daily_spend`: the team's spend per day over the recent
    past, oldest first; `committed_ends`: (reserved_until, reserved GPU-hours) of the team's held
    reservations."""
    days_left = max(0, (month_end - today).days + 1)
    path = []
    exhausts = {"p50": None, "p90": None}
    for j in range(1, days_left + 1):
        day = today + dt.timedelta(days=j - 1)
        due = sum(h for end, h in committed_ends
                  if end is not None and end < dt.datetime.combine(day + dt.timedelta(days=1), dt.time()))
        s50, s90 = kday_sum_quantiles(daily_spend, j)
        row = {"day": day, "p50_gpu_hours": round(consumed + max(s50, due), 1),
               "p90_gpu_hours": round(consumed + max(s90, due), 1)}
        path.append(row)
        for q in ("p50", "p90"):
            if exhausts[q] is None and budget > 0 and row[f"{q}_gpu_hours"] >= budget:
                exhausts[q] = day
    if budget > 0 and consumed >= budget:
        exhausts = {"p50": today, "p90": today}
    last = path[-1] if path else {"p50_gpu_hours": consumed, "p90_gpu_hours": consumed}
    return {"budget_gpu_hours": float(budget), "consumed_gpu_hours": float(consumed),
            "committed_gpu_hours": float(sum(h for _, h in committed_ends)), "days_left": days_left,
            "p50_month_end_gpu_hours": float(last["p50_gpu_hours"]),
            "p90_month_end_gpu_hours": float(last["p90_gpu_hours"]),
            "exhausts_p50": exhausts["p50"], "exhausts_p90": exhausts["p90"], "path": path}
