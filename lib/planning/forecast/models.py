"""Weekly demand models of one team: candidates fitted by statsmodels' ETS, the one whose own backtest
missed least chosen, and its backtest misses per horizon (the bands' raw material).

Candidates (Hyndman & Athanasopoulos, "Forecasting: Principles and Practice", 3rd ed., FPP):
- "level": ETS(A,N,N), simple exponential smoothing with its smoothing weight fitted (§8.1);
- "damped-trend": ETS(A,Ad,N), an additive trend that fades by φ a week, 0.8 ≤ φ ≤ 0.98 (§8.2);
- "log-trend": ETS(A,A,N), Holt's linear trend (§8.2), fitted to log(1 + y): a steady growth *rate*, as
  a team's demand grows by a share a year, forecast back on the GPU-hour scale by exp(·) − 1 — the
  median of the forecast distribution (§5.6), which the bands' median ratio then adjusts;
- "combined": the mean of the three, the default (forecast combinations, §13.4; the mean of simple,
  Holt's and damped exponential smoothing is the M3 competition's "Comb S-H-D" benchmark: Makridakis &
  Hibon, "The M3-Competition: results, conclusions and implications", International Journal of
  Forecasting 16(4), 2000): the level lags a growing team, a trend extrapolates a steady team's noise,
  and their mean missed less out of sample than any one chosen alone (bench/bench_forecast.py);
- any of them with "+year-end": the weeks around the new year (YEAR_END_WEEKS, placed by the week's
  Thursday as ISO weeks are) forecast at the model's value times the mean ratio (geometric) each had in
  past years to its base, the median of the four weeks a month before the new year — where that ratio
  is beyond what weekly noise makes. Every candidate is fitted with the history's year-end weeks at
  their base, so a dip does not drag the level of the weeks after it down.
statsmodels fits each model (maximum likelihood) once on the whole history; its filtered states give the
forecast from every past week t, ŷ[t+h|t] = ℓ[t] + (φ + … + φ^h)·b[t] (φ = 1 undamped; the model's own
forecast function, the same statsmodels' forecast gives from the last week), so the backtest needs no
refit: three fits a team. The candidate with the least weighted absolute error Σ|y − ŷ| ÷ Σy over the
last ERROR_ORIGINS origins and every horizon up to MAX_WEEKS wins, but the combination is the default:
another candidate (in the order level, damped trend, log-trend, then each with the year end) replaces
the best so far only if it misses at least MARGIN less. Errors over 52 overlapping origins differ by a
few per cent between candidates that forecast alike, and picking the single best by so little (a
steady team's trend, a growing team's level) missed more out of sample than keeping the combination.
Its ratios y[t+h] / ŷ[t+h|t] are the bands' raw material (lib.planning.forecast.demand). The fit is
deterministic: same history, same forecast.
"""
from __future__ import annotations

import datetime as dt
import math
import warnings
from functools import lru_cache
from typing import Sequence, TypedDict

import numpy as np

MAX_WEEKS = 26              # the farthest horizon: half a year, a procurement horizon
ERROR_ORIGINS = 52          # past forecast origins whose misses make the bands and choose the model
WARM_UP_WEEKS = 8           # the first states rest on the fitted start: no forecast origin before them
MIN_FIT_WEEKS = 10          # fewer weeks of history: the mean of the history, no model
YEAR_END_WEEKS = (-2, -1, 0, 1)   # weeks around the new year: 0 holds 1 January, -1 Christmas
BASE_WEEKS = (-6, -5, -4, -3)     # the weeks a year end is measured against (the month before it)
MIN_RATIO = 0.01            # a year-end week at under 1 % of its base counts as 1 %
NO_PLACE = -99
MARGIN = 0.05               # a candidate replaces the best so far only if it misses at least 5 % less


class TeamModel(TypedDict):
    name: str                   # the candidate chosen: combined | level | damped-trend | log-trend, any + "+year-end"
    point: np.ndarray           # the point forecast for horizons 1..MAX_WEEKS (GPU-hours)
    ratios: list[np.ndarray]    # per horizon: actual ÷ forecast over the backtest's origins
    sums: list[np.ndarray]      # per number of weeks j: Σ actual ÷ Σ forecast over the next j weeks
    scores: dict                # each candidate's backtest error Σ|y − ŷ| ÷ Σy (None: not fitted)


def year_end_place(monday: dt.date) -> tuple[int, int] | None:
    """(the new year, the week's place around it: 0 the week holding 1 January, -1 the week before,
    …) for a week in BASE_WEEKS .. YEAR_END_WEEKS, else None. A week belongs to the year of its
    Thursday, as ISO weeks do."""
    thursday = monday + dt.timedelta(days=3)
    year = thursday.year + (thursday.month >= 7)
    p = ((thursday - dt.date(year, 1, 1)).days + 3) // 7
    return (year, p) if BASE_WEEKS[0] <= p <= YEAR_END_WEEKS[-1] else None


def _places(mondays: Sequence[dt.date]) -> np.ndarray:
    """Each week's place around the new year (NO_PLACE outside)."""
    return np.array([NO_PLACE if (yp := year_end_place(m)) is None else yp[1] for m in mondays], dtype=int)


def _year_ends(y: np.ndarray, mondays: Sequence[dt.date]) -> list[dict]:
    """Per year end the history holds in full from its base weeks on: {place: (week index, base GPU-hours,
    ratio to the base)} for its year-end weeks seen."""
    ends: dict[int, dict] = {}
    for i, m in enumerate(mondays):
        if (yp := year_end_place(m)) is not None:
            ends.setdefault(yp[0], {})[yp[1]] = i
    out = []
    for _, weeks in sorted(ends.items()):
        if any(b not in weeks for b in BASE_WEEKS):
            continue
        base = float(np.median(y[[weeks[b] for b in BASE_WEEKS]]))
        if base > 0:
            out.append({p: (weeks[p], base, max(MIN_RATIO, y[weeks[p]] / base))
                        for p in YEAR_END_WEEKS if p in weeks})
    return out


def _ets_states(z: np.ndarray, trend: bool, damped: bool = False) -> tuple[np.ndarray, np.ndarray, float]:
    """(level after each week, trend after each week, φ) of ETS(A,N,N), ETS(A,A,N) (`trend`) or ETS(A,Ad,N)
    (`trend` and `damped`) fitted to z by statsmodels (maximum likelihood); φ is 1 undamped."""
    # here: statsmodels (with scipy) takes over a second to import, and only a forecast needs it
    from statsmodels.tsa.exponential_smoothing.ets import ETSModel
    model = ETSModel(z, error="add", trend="add" if trend else None, damped_trend=trend and damped)
    with warnings.catch_warnings():   # a flat or short history can leave the optimiser unconverged
        warnings.simplefilter("ignore")
        res = model.fit(disp=False)
    states = np.asarray(res.states, dtype=float)
    if not trend:
        return states[:, 0], np.zeros(z.size), 1.0
    phi = float(res.params[res.param_names.index("damping_trend")]) if damped else 1.0
    return states[:, 0], states[:, 1], phi


def _forecasts(level: np.ndarray, slope: np.ndarray, phi: float, horizons: int) -> np.ndarray:
    """ŷ[t+h|t] = ℓ[t] + (φ + … + φ^h)·b[t] for every origin t (rows) and h = 1..horizons (columns)."""
    return level[:, None] + slope[:, None] * np.cumsum(phi ** np.arange(1, horizons + 1))[None, :]


def _year_end_factors(y: np.ndarray, mondays: Sequence[dt.date], ends: list[dict], horizons: int,
                      noise: float) -> np.ndarray:
    """The factor on the forecast from origin t (rows) of the week h ahead (columns): for a week at a
    year-end place p, the mean (geometric) m of the ratios of the k year ends whose week p had been seen
    by t, where |log m| ≥ 3·noise/√k (a place that differs from its base by more than weekly noise of
    log-sd `noise` would make it, four places tested: a steady team's noise is not taken for an event);
    1 elsewhere."""
    n = y.size
    future = [mondays[-1] + dt.timedelta(weeks=k) for k in range(1, horizons + 1)]
    places = _places([*mondays, *future])
    target = places[np.arange(n)[:, None] + np.arange(1, horizons + 1)[None, :]]
    factor = np.ones((n, horizons))
    t = np.arange(n)[:, None]
    for p in YEAR_END_WEEKS:
        seen = [(week[0], math.log(week[2])) for end in ends if (week := end.get(p))]
        if not seen:
            continue
        known = np.array([i for i, _ in seen])[None, :] <= t              # (origins, year ends)
        count = known.sum(axis=1)
        logs = (known * np.array([v for _, v in seen])[None, :]).sum(axis=1)
        mean = logs / np.maximum(count, 1)
        event = (count > 0) & (np.abs(mean) >= 3 * noise / np.sqrt(np.maximum(count, 1)))
        mean = np.where(event, np.exp(mean), 1.0)
        factor = np.where(target == p, mean[:, None], factor)
    return factor


def _candidates(y: np.ndarray, mondays: Sequence[dt.date], horizons: int) -> dict[str, np.ndarray]:
    """Each candidate's forecast from every origin t (rows; the last row is the forecast from the
    last week) for h = 1..horizons (columns). Three fits: the year-end weeks the history holds are
    fitted at their base level in every candidate (so a dip does not drag the level down after it),
    and the "+year-end" candidates also forecast them at the ratios past years had."""
    ends = _year_ends(y, mondays)
    z = y.copy()
    for end in ends:
        for i, base, _ in end.values():
            z[i] = base
    out = {"level": _forecasts(*_ets_states(z, False), horizons),
           "damped-trend": _forecasts(*_ets_states(z, True, damped=True), horizons)}
    with np.errstate(over="ignore"):          # a runaway growth rate overflows: no candidate (below)
        out["log-trend"] = np.expm1(_forecasts(*_ets_states(np.log1p(np.maximum(z, 0.0)), True), horizons))
    out = {name: np.maximum(f, 0.0) for name, f in out.items() if np.isfinite(f).all()}  # a diverged fit is none
    if len(out) > 1:
        out = {"combined": np.mean(list(out.values()), axis=0), **out}
    if ends and "level" in out:
        ahead, seen = out["level"][WARM_UP_WEEKS - 1:-1, 0], z[WARM_UP_WEEKS:]   # one week ahead, and what came
        ok = (ahead > 0) & (seen > 0)
        noise = float(np.std(np.log(seen[ok] / ahead[ok]))) if ok.sum() > 1 else 0.0
        factor = _year_end_factors(y, mondays, ends, horizons, noise)
        for name in list(out):
            out[f"{name}+year-end"] = out[name] * factor
    return out


def _backtest(y: np.ndarray, f: np.ndarray, horizons: int, origins: int):
    """Per horizon h the ratios actual ÷ forecast, per j weeks the ratios of the j-week sums, and the
    weighted absolute error, over the last `origins` origins with an outcome (from WARM_UP_WEEKS on)."""
    n = y.size
    run = np.concatenate([[0.0], np.cumsum(y)])             # run[k] = y[0] + … + y[k-1]
    ratios, sums, err, tot = [], [], 0.0, 0.0
    for h in range(1, horizons + 1):
        t = np.arange(WARM_UP_WEEKS - 1, n - h)[-origins:]
        fc, actual = f[t, h - 1], y[t + h]
        ok = fc > 0
        ratios.append(actual[ok] / fc[ok])
        err += float(np.abs(actual - fc).sum())
        tot += float(actual.sum())
        fs, ys = f[t, :h].sum(axis=1), run[t + h + 1] - run[t + 1]
        ok = fs > 0
        sums.append(ys[ok] / fs[ok])
    return ratios, sums, (err / tot if tot > 0 else math.inf)


def fit_team(weekly: Sequence[float], last_monday: dt.date, horizons: int = MAX_WEEKS,
             origins: int = ERROR_ORIGINS) -> TeamModel:
    """The chosen model of a team whose weekly GPU-hours are `weekly` (oldest first, the last one
    the week starting `last_monday`): its point forecast for the next `horizons` weeks and its
    backtest ratios. Cached: the same history gives the same model without a refit."""
    return _fit_cached(tuple(float(v) for v in weekly), last_monday, horizons, origins)


def _mean_model(y: np.ndarray, horizons: int) -> TeamModel:
    """Too short a history for a model: its mean, with no backtest of its own."""
    return {"name": "mean", "point": np.full(horizons, float(y.mean()) if y.size else 0.0),
            "ratios": [np.empty(0) for _ in range(horizons)], "sums": [np.empty(0) for _ in range(horizons)],
            "scores": {}}


@lru_cache(maxsize=1)
def _blas_threads():
    """The process's BLAS thread pools (threadpoolctl), found once: scipy's optimiser, which the fits
    run on, calls BLAS on vectors of a few numbers, where OpenBLAS's threads only wait for each other
    (on a busy two-core machine a team's fits took 5-15 times longer with them)."""
    # here: only a fit needs it, and scipy's BLAS must be loaded (by statsmodels) before it looks
    from statsmodels.tsa.exponential_smoothing import ets  # noqa: F401
    from threadpoolctl import ThreadpoolController
    return ThreadpoolController()


@lru_cache(maxsize=256)
def _fit_cached(weekly: tuple, last_monday: dt.date, horizons: int, origins: int) -> TeamModel:
    # one BLAS thread while fitting; the limit is process-wide while it lasts (other threads' BLAS
    # calls run on one thread meanwhile)
    with _blas_threads().limit(limits=1, user_api="blas"):
        model = _fit(np.asarray(weekly, dtype=float), last_monday, horizons, origins)
    for a in (model["point"], *model["ratios"], *model["sums"]):
        a.setflags(write=False)     # shared by every caller of the cache
    return model


def _fit(y: np.ndarray, last_monday: dt.date, horizons: int, origins: int) -> TeamModel:
    n = y.size
    if n < MIN_FIT_WEEKS or not (y > 0).any():
        return _mean_model(y, horizons)
    mondays = [last_monday - dt.timedelta(weeks=n - 1 - i) for i in range(n)]
    best = None
    scores = {}
    for name, f in _candidates(y, mondays, horizons).items():
        ratios, sums, score = _backtest(y, f, horizons, origins)
        scores[name] = score
        if best is None or score < best[0] * (1 - MARGIN) - 1e-9:      # (and a flat history's rounding is a tie)
            best = (score, name, f[-1], ratios, sums)
    if best is None:
        return _mean_model(y, horizons)
    _, name, point, ratios, sums = best
    return {"name": name, "point": point, "ratios": ratios, "sums": sums, "scores": scores}
