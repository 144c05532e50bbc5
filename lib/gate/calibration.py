"""Calibrating estimates against history (docs/rules.md, Calibration).

For each past completed run, r = ln(actual / estimated). The gate multiplies a new raw estimate by
exp(median r) (the median correction) and by exp(q) for an upper bound at level 1 - α. Runs stopped
for budget or wall clock are *censored*: their actual is only a lower bound on what they needed.

Methods, and which one `calibrate` reports:
- ``conformal``: split-conformal quantile with censored runs counted as +inf (valid, distribution
  free). It needs n ≥ 1/α - 1 runs and becomes unknown when more than about α of them are censored.
- ``tobit``: a log-normal fitted by maximum likelihood with right-censoring (a censored run adds its
  survival probability, not its density); bound = exp(μ + z_{1-α} σ). Used when conformal gives no
  finite bound but enough uncensored runs exist to fit.
- ``none``: too few runs: the factor is 1 (or the median of what there is) and the bound is None —
  unknown, never invented.
Scope falls back from team × kind to team to everyone until a scope has enough runs for a bound.
The rolling window is the last 365 days and at most the 1,000 most recent runs of a scope.
"""
from __future__ import annotations

import math
from datetime import datetime, timedelta
from statistics import NormalDist
from typing import Iterable

from lib.gate.contracts import Calibration, CalibrationRow

DEFAULT_LEVEL = 0.9
DEFAULT_WINDOW_DAYS = 365
MIN_UNCENSORED_FOR_TOBIT = 5
_STD = NormalDist()


def runs_needed(level: float = DEFAULT_LEVEL) -> int:
    """Smallest n for which a split-conformal bound at `level` is finite: ⌈1/α - 1⌉."""
    alpha = 1.0 - level
    return math.ceil(1.0 / alpha - 1.0 - 1e-9)


def log_ratios(rows: Iterable[CalibrationRow]) -> tuple[list[float], list[float]]:
    """(uncensored r, censored r) from rows with estimated_gpu_hours, actual_gpu_hours, censored."""
    done, cens = [], []
    for row in rows:
        est, act = row["estimated_gpu_hours"], row["actual_gpu_hours"]
        if not est or est <= 0 or act is None or act <= 0:
            continue
        (cens if row.get("censored") else done).append(math.log(act / est))
    return done, cens


def conformal_quantile(done: list[float], n_censored: int, level: float) -> float | None:
    """The ⌈(n+1)·level⌉-th smallest log ratio, censored runs counted as +inf; None if unknown."""
    n = len(done) + n_censored
    k = math.ceil((n + 1) * level - 1e-9)
    if n == 0 or k > n:
        return None
    ordered = sorted(done)
    return ordered[k - 1] if k <= len(ordered) else None


def _median(done: list[float], cens: list[float]) -> float | None:
    """Median log ratio with censored runs as +inf (they needed at least their stop value).

    When that median falls on a censored run, the median of the stop values themselves is used
    instead: a lower bound on the true median, never the no-correction factor 1 by default.
    """
    n = len(done) + len(cens)
    if n == 0:
        return None
    ordered = sorted(done) + [math.inf] * len(cens)
    low, high = ordered[(n - 1) // 2], ordered[n // 2]
    if not math.isinf(high):
        return (low + high) / 2.0
    values = sorted(done + cens)
    return (values[(n - 1) // 2] + values[n // 2]) / 2.0


def tobit_fit(done: list[float], cens: list[float], iterations: int = 200) -> tuple[float, float]:
    """Normal (μ, σ) of log ratios by maximum likelihood with right-censoring, via EM."""
    values = done + cens
    mu = sum(values) / len(values)
    sigma = max(math.sqrt(sum((v - mu) ** 2 for v in values) / len(values)), 1e-3)
    n = len(values)
    for _ in range(iterations):
        s1 = sum(done)
        s2 = sum(v * v for v in done)
        for c in cens:
            z = (c - mu) / sigma
            surv = max(_STD.cdf(-z), 1e-300)  # 1 - Φ(z)
            lam = _STD.pdf(z) / surv          # inverse Mills ratio
            s1 += mu + sigma * lam
            s2 += mu * mu + sigma * sigma + sigma * (c + mu) * lam
        new_mu = s1 / n
        new_sigma = math.sqrt(max(s2 / n - new_mu * new_mu, 1e-6))
        if abs(new_mu - mu) < 1e-9 and abs(new_sigma - sigma) < 1e-9:
            mu, sigma = new_mu, new_sigma
            break
        mu, sigma = new_mu, new_sigma
    return mu, sigma


def _fit(done, cens, level):
    """(method, median r or None, upper q or None) for one scope's runs."""
    q = conformal_quantile(done, len(cens), level)
    if q is not None:
        return "conformal", _median(done, cens), q
    if cens and len(done) >= MIN_UNCENSORED_FOR_TOBIT and len(done) + len(cens) >= runs_needed(level):
        mu, sigma = tobit_fit(done, cens)
        return "tobit", mu, mu + _STD.inv_cdf(level) * sigma
    return "none", _median(done, cens), None


SCOPES = ("team×kind", "team", "all")
DEFAULT_MAX_RUNS = 1000  # per scope: the most recent runs, so the calibration follows drift


def calibrate_scopes(scoped: Iterable[tuple[str, list[CalibrationRow]]], *,
                     level: float = DEFAULT_LEVEL) -> Calibration:
    """The correction from the first scope that yields a bound, trying scopes in order.

    scoped: iterable of (scope name, rows) in fallback order — team × kind, team, everyone — where
    rows have estimated_gpu_hours, actual_gpu_hours, censored. It may be lazy (a generator that
    queries the ledger scope by scope): later scopes are not read once one yields a bound.
    Returns {"scope", "method", "n", "n_censored", "level", "factor", "upper_factor",
    "runs_needed", "note"}: factor multiplies the raw estimate to give the median estimate,
    upper_factor (None when unknown) to give the upper bound.
    """
    need = runs_needed(level)
    fallback = None
    for scope, rows in scoped:
        done, cens = log_ratios(rows)
        if not done and not cens:
            continue
        method, med, q = _fit(done, cens, level)
        result = {"scope": scope, "method": method, "n": len(done) + len(cens),
                  "n_censored": len(cens), "level": level,
                  "factor": math.exp(med) if med is not None else 1.0,
                  "upper_factor": math.exp(q) if q is not None else None,
                  "runs_needed": need}
        if q is not None:
            result["note"] = (f"{method} bound from {result['n']} runs of scope {scope} "
                              f"({len(cens)} censored)")
            return result
        fallback = fallback or result
    if fallback is None:
        return {"scope": None, "method": "none", "n": 0, "n_censored": 0, "level": level,
                "factor": 1.0, "upper_factor": None, "runs_needed": need,
                "note": f"no comparable history: bound unknown (needs {need} runs)"}
    fallback["note"] = (f"bound unknown: {fallback['n']} runs of scope {fallback['scope']} "
                        f"({fallback['n_censored']} censored), needs {need} with few enough censored")
    return fallback


def calibrate(history: Iterable[CalibrationRow], team: str, kind: str, *, level: float = DEFAULT_LEVEL,
              now: datetime | None = None, window_days: int = DEFAULT_WINDOW_DAYS,
              max_runs: int = DEFAULT_MAX_RUNS) -> Calibration:
    """The correction the gate applies to a raw estimate of `team`'s `kind` run (see calibrate_scopes).

    history: rows (dicts) with team, kind, estimated_gpu_hours, actual_gpu_hours, censored,
    ended_at (datetime). The rolling window keeps rows that ended within `window_days` before now,
    and at most the `max_runs` most recent of each scope.
    """
    if now is not None:
        since = now - timedelta(days=window_days)
        history = [h for h in history if h.get("ended_at") is None or h["ended_at"] >= since]
    else:
        history = list(history)

    def recent(rows):
        if len(rows) <= max_runs:
            return rows
        return sorted(rows, key=lambda h: h.get("ended_at") or datetime.min)[-max_runs:]

    def scoped():
        yield "team×kind", recent([h for h in history if h["team"] == team and h["kind"] == kind])
        yield "team", recent([h for h in history if h["team"] == team])
        yield "all", recent(history)
    return calibrate_scopes(scoped(), level=level)


def conformal_backtest(log_ratios_in_time_order, censored, *, level: float = DEFAULT_LEVEL,
                       window: int = DEFAULT_MAX_RUNS, last: int = 100) -> dict:
    """The coverage the split-conformal bound actually achieved on one scope's recent runs.

    Replays the `last` runs in end-time order: each one's bound is the conformal quantile of the up to
    `window` runs before it (censored as +inf), and the run counts as covered when its log ratio stays
    at or under it. A censored run is only a known miss (its stop value already exceeded the bound);
    otherwise whether it fitted is unknown and it is skipped, as are runs whose bound is unknown.
    Returns {"checked", "covered", "coverage" (None when nothing checked), "unknown_bound", "level"}.
    """
    import numpy as np

    r = np.asarray(log_ratios_in_time_order, dtype=float)
    c = np.asarray(censored, dtype=bool)
    prior_values = np.where(c, np.inf, r)
    checked = covered = unknown = 0
    for i in range(max(0, len(r) - last), len(r)):
        prior = prior_values[max(0, i - window):i]
        k = math.ceil((len(prior) + 1) * level - 1e-9)
        if len(prior) == 0 or k > len(prior):
            unknown += 1
            continue
        q = np.partition(prior, k - 1)[k - 1]
        if not math.isfinite(q):
            unknown += 1
            continue
        if c[i]:
            if r[i] > q:
                checked += 1  # a known miss: it stopped above the bound and still needed more
            continue
        checked += 1
        covered += bool(r[i] <= q)
    return {"checked": checked, "covered": covered, "unknown_bound": unknown, "level": level,
            "coverage": covered / checked if checked else None}
