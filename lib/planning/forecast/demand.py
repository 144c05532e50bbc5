"""Planning ahead: weekly GPU-hour demand forecasts and the month's budget burn-down, one demand model
for both, as plain numbers.

Weekly demand: y[t] is the GPU-hours a team's runs used, counted in the week (Monday 00:00 UTC) they
started. Each team's model is the candidate (a level, a damped trend, a trend in log demand, their mean —
the default — any with the year-end weeks) whose own backtest missed least
(lib.planning.forecast.models). P50 and P90 at horizon h (h = 1 is the week after the last complete one)
are its point forecast times the 50th and 90th percentiles of the ratios actual ÷ forecast the chosen
model made h weeks ahead over the team's last 52 origins (sample quantiles that cover what they say:
`_quantiles`); a team with fewer than MIN_RATIOS ratios at a horizon borrows the pooled ratios of every
team. The band is therefore as wide as the model's own past misses, whatever their shape (Hyndman &
Athanasopoulos, "Forecasting: Principles and Practice", 3rd ed., §5.5 empirical prediction intervals).
The quota that would cover P90: P90 GPU-hours ÷ hours in a week, rounded up.

Budget burn-down (one month, UTC): spend is counted when a run ends (as the gate counts a team's
monthly spend), demand when it starts. A run's GPU-hours enter spend one run-duration after they enter
demand, so the spend of any span is the demand of the same span moved back by the runs' durations: at
the weekly forecast's rate both come to the same GPU-hours a day, bar the growth over one run's
duration. Spend still to come on each day left (today counted whole) is therefore that day's week's
weekly P50 ÷ 7 — the burn-down's weekly rate is the weekly forecast's P50 — and its P90 is the same
days' point forecast times the 90th percentile of the model's own backtest ratios of sums over as
many weeks (a month's P90 is less than the sum of its weeks' P90s). Neither is ever below the committed
reservations due to end by then (each assumed to spend what it reserved). The projected exhaustion
day is the first day the projected total reaches the budget.
"""
from __future__ import annotations

import datetime as dt
import math
from pathlib import Path
from typing import Iterable, Sequence, TypedDict

import numpy as np

from lib.gate.terms import HOURS_PER_WEEK
from lib.planning.forecast import cache as cache_file
from lib.planning.forecast.models import MAX_WEEKS, TeamModel, fit_team

MIN_RATIOS = 12             # fewer ratios than this at a horizon: use the pooled ratios of every team
NAIVE_WEEKS = 4             # the baseline: the mean of the last four weeks

__all__ = ["MAX_WEEKS", "MIN_RATIOS", "WeekForecast", "TeamForecast", "team_models",
           "pooled_ratios", "team_forecast", "naive_forecast", "BurnDown", "burn_down"]


# Projections are rounded to a tenth of a GPU-hour: more digits would claim a precision they lack.


class WeekForecast(TypedDict):
    week_start: dt.date
    horizon: int                # weeks ahead of the last complete week
    p50_gpu_hours: float
    p90_gpu_hours: float
    quota_for_p90_gpus: int     # accelerators that would give P90 GPU-hours in the week


class TeamForecast(TypedDict):
    model: str                  # the candidate the backtest chose (models.fit_team)
    weeks: list[WeekForecast]   # horizons 1 .. MAX_WEEKS
    point: list[float]          # the point forecast per horizon (GPU-hours)
    sum_p90: list[float]        # per j weeks: 90th percentile of actual ÷ forecast of the j-week sums


def team_models(series: dict[str, Sequence[float]], first_week: dt.date,
                cache: Path | None = None) -> dict[str, TeamModel]:
    """Each team's chosen model from its weekly GPU-hours (oldest first, the last the week before
    `first_week`). `cache`: a file of models fitted before (lib.planning.forecast.cache), read for the
    histories it holds and rewritten when a history had to be fitted."""
    last = first_week - dt.timedelta(weeks=1)
    if cache is None:
        return {team: fit_team(y, last) for team, y in series.items()}
    stored = cache_file.load_models(cache)
    keys = {team: cache_file.model_key(y, last) for team, y in series.items()}
    out = {team: stored.get(keys[team]) or fit_team(y, last) for team, y in series.items()}
    if any(k not in stored for k in keys.values()):
        for team, k in keys.items():        # the ones used now last: the most recently used are kept
            stored.pop(k, None)
            stored[k] = out[team]
        cache_file.save_models(cache, stored)
    return out


def pooled_ratios(models: Iterable[TeamModel]) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Every team's ratios per horizon, and its sum ratios per number of weeks, together."""
    models = list(models)

    def pool(key):
        return [np.concatenate([m[key][h] for m in models]) if models else np.empty(0) for h in range(MAX_WEEKS)]
    return pool("ratios"), pool("sums")


def _quantiles(ratios: np.ndarray, qs: tuple[float, ...]) -> np.ndarray:
    """Sample quantiles with plotting position k / (n + 1) (Hyndman & Fan, "Sample quantiles in
    statistical packages", The American Statistician 50(4), 1996, type 6): the k-th smallest of n
    ratios is exceeded by a new one with probability 1 − k / (n + 1), so a P90 of 52 ratios covers 90 %,
    where numpy's default (type 7) would cover about 88.5 %."""
    return np.quantile(ratios, qs, method="weibull")


def _own_or_pooled(own: np.ndarray, pooled: np.ndarray | None) -> np.ndarray:
    return pooled if own.size < MIN_RATIOS and pooled is not None and pooled.size > own.size else own


def team_forecast(model: TeamModel, first_week: dt.date,
                  pooled: tuple[list[np.ndarray], list[np.ndarray]] | None = None) -> TeamForecast:
    """P50 / P90 GPU-hours for the MAX_WEEKS weeks from `first_week` (the week after the model's last
    week). `pooled` (pooled_ratios): used at a horizon where the team's own ratios are fewer than
    MIN_RATIOS."""
    rows: list[WeekForecast] = []
    sum_p90 = []
    pooled_h, pooled_j = pooled if pooled is not None else ([None] * MAX_WEEKS, [None] * MAX_WEEKS)
    for h in range(1, MAX_WEEKS + 1):
        level = float(model["point"][h - 1])
        ratios = _own_or_pooled(model["ratios"][h - 1], pooled_h[h - 1])
        p50, p90 = (level * _quantiles(ratios, (0.5, 0.9))) if ratios.size else (level, level)
        p90 = max(p90, p50)
        rows.append({"week_start": first_week + dt.timedelta(weeks=h - 1), "horizon": h,
                     "p50_gpu_hours": round(float(p50), 1), "p90_gpu_hours": round(float(p90), 1),
                     "quota_for_p90_gpus": int(math.ceil(round(float(p90) / HOURS_PER_WEEK, 9)))})
        sums = _own_or_pooled(model["sums"][h - 1], pooled_j[h - 1])
        sum_p90.append(float(_quantiles(sums, (0.9,))[0]) if sums.size else 1.0)
    return {"model": model["name"], "weeks": rows, "point": [float(v) for v in model["point"]],
            "sum_p90": sum_p90}


def naive_forecast(weekly: Sequence[float], weeks: int = NAIVE_WEEKS) -> tuple[float, float]:
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


def burn_down(budget: float, consumed: float, today: dt.date, month_end: dt.date, demand: TeamForecast,
              committed_ends: Sequence[tuple[dt.datetime | None, float]]) -> BurnDown:
    """The month's projected spend (GPU-hours) per day from `today` to `month_end`, both inclusive
    (spend so far is in `consumed`; the rest of today counts as a whole day: cautious). `demand`: the
    team's weekly forecast whose first week holds `today`; `committed_ends`: (reserved_until, reserved
    GPU-hours) of the team's held reservations."""
    days_left = max(0, (month_end - today).days + 1)
    first_week = demand["weeks"][0]["week_start"]
    path = []
    exhausts = {"p50": None, "p90": None}
    s50 = point = 0.0
    for j in range(1, days_left + 1):
        day = today + dt.timedelta(days=j - 1)
        h = min((day - first_week).days // 7, MAX_WEEKS - 1)
        s50 += demand["weeks"][h]["p50_gpu_hours"] / 7
        point += demand["point"][h] / 7
        s90 = max(point * demand["sum_p90"][min(math.ceil(j / 7), MAX_WEEKS) - 1], s50)
        due = sum(hours for end, hours in committed_ends
                  if end is not None and end < dt.datetime.combine(day + dt.timedelta(days=1), dt.time()))
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
