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

Following a change (rows carry ended_at; team × kind and team scopes): a scope's log ratios, in end-time order, are searched for
the latest change in level — the split whose two sides' means differ by at least CHANGE_Z standard
errors and by at least CHANGE_MIN_SHIFT, with CHANGE_MIN_RUNS runs after it; the search repeats on
the runs after each change found. When one is found, only the runs since the change say where the
ratio is now:
- ``shifted``: fewer than SHIFT_UNTIL runs since the change: the bound is their median plus the
  spread the scope showed before the change (the conformal quantile of the earlier runs' distances
  from their own median, widened by √(1 + π / 2m) for a median of only m runs);
- ``conformal`` (or ``tobit``) on the runs since the change alone, once there are SHIFT_UNTIL.
The result then says since when it adapted (`adapted_since`, the first run after the change) and
how many runs the window dropped (`runs_before_change`). Without a change the bound is today's.
"""
from __future__ import annotations

import math
from datetime import datetime, timedelta
from statistics import NormalDist
from typing import Iterable

import numpy as np

from lib.gate.contracts import Calibration, CalibrationRow

DEFAULT_LEVEL = 0.9
DEFAULT_WINDOW_DAYS = 365
MIN_UNCENSORED_FOR_TOBIT = 5
CHANGE_Z = 4.0            # standard errors between the means of the two sides of a change
CHANGE_MIN_SHIFT = 0.15   # log ratio (about 16 %): smaller level changes are left to the window
CHANGE_MIN_RUNS = 3       # runs after a change before it can be called
CHANGE_MIN_BEFORE = 9     # runs before a change (its spread carries the shifted bound)
SHIFT_UNTIL = 40          # runs since a change before they carry a bound on their own
_STD = NormalDist()


def runs_needed(level: float = DEFAULT_LEVEL) -> int:
    """Smallest n for which a split-conformal bound at `level` is finite: ⌈1/α - 1⌉."""
    alpha = 1.0 - level
    return math.ceil(1.0 / alpha - 1.0 - 1e-9)


def conformal_quantile(done, n_censored: int, level: float) -> float | None:
    """The ⌈(n+1)·level⌉-th smallest log ratio, censored runs counted as +inf; None if unknown."""
    n = len(done) + n_censored
    k = math.ceil((n + 1) * level - 1e-9)
    if n == 0 or k > len(done):
        return None
    return _kth(done, k - 1)


def _median(done, cens) -> float | None:
    """Median log ratio with censored runs as +inf (they needed at least their stop value).

    When that median falls on a censored run, the median of the stop values themselves is used
    instead: a lower bound on the true median, never the no-correction factor 1 by default.
    """
    n = len(done) + len(cens)
    if n == 0:
        return None
    lo, hi = (n - 1) // 2, n // 2
    values = done if hi < len(done) else np.concatenate([done, cens])
    return (_kth(values, lo) + _kth(values, hi)) / 2.0


def _kth(values, k: int) -> float:
    """The k-th smallest (0-based) of a sequence of numbers."""
    return float(np.partition(np.asarray(values, dtype=float), k)[k])


def tobit_fit(done, cens, iterations: int = 200, *, start: tuple[float, float] | None = None,
              tol: float = 1e-9) -> tuple[float, float]:
    """Normal (μ, σ) of log ratios by maximum likelihood with right-censoring, via EM.

    start: the fit of nearly the same runs (a replay one run later): Newton's method from there
    converges in a few steps where EM, slow under heavy censoring, takes dozens; EM if it fails."""
    d = np.asarray(done, dtype=float)
    c = np.asarray(cens, dtype=float)
    n = len(d) + len(c)
    if start is not None and len(c):
        fit = _tobit_newton(d, c, start, tol)
        if fit is not None:
            return fit
    if start is None:
        values = np.concatenate([d, c])
        mu = float(values.mean())
        sigma = max(float(values.std()), 1e-3)
    else:
        mu, sigma = start
    s1_done, s2_done = float(d.sum()), float((d * d).sum())
    for _ in range(iterations):
        s1, s2 = s1_done, s2_done
        if len(c):
            z = (c - mu) / sigma
            surv = np.maximum(0.5 * _erfc(z / math.sqrt(2.0)), 1e-300)  # 1 - Φ(z)
            lam = np.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi) / surv               # inverse Mills ratio
            s1 += float((mu + sigma * lam).sum())
            s2 += float((mu * mu + sigma * sigma + sigma * (c + mu) * lam).sum())
        new_mu = s1 / n
        new_sigma = math.sqrt(max(s2 / n - new_mu * new_mu, 1e-6))
        if abs(new_mu - mu) < tol and abs(new_sigma - sigma) < tol:
            mu, sigma = new_mu, new_sigma
            break
        mu, sigma = new_mu, new_sigma
    return mu, sigma


def _tobit_newton(d, c, start: tuple[float, float], tol: float, iterations: int = 30):
    """Newton's method on the censored-normal log likelihood from `start`; None when it does not
    converge to a maximum (then EM takes over)."""
    mu, sigma = start
    for _ in range(iterations):
        if not (sigma > 1e-6 and math.isfinite(mu)):
            return None
        rd = (d - mu) / sigma
        z = (c - mu) / sigma
        lam = np.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi) / np.maximum(
            0.5 * _erfc(z / math.sqrt(2.0)), 1e-300)
        k = lam * (lam - z)
        s2 = sigma * sigma
        g_mu = (rd.sum() + lam.sum()) / sigma
        g_sigma = (-len(d) + (rd * rd).sum() + (lam * z).sum()) / sigma
        h_mm = -(len(d) + k.sum()) / s2
        h_ms = -(2.0 * rd.sum() + (k * z).sum() + lam.sum()) / s2
        h_ss = (len(d) - 3.0 * (rd * rd).sum() - (k * z * z).sum() - 2.0 * (lam * z).sum()) / s2
        det = h_mm * h_ss - h_ms * h_ms
        if not (h_mm < 0 and det > 0):
            return None
        step_mu = (h_ss * g_mu - h_ms * g_sigma) / det
        step_sigma = (h_mm * g_sigma - h_ms * g_mu) / det
        mu, sigma = mu - step_mu, sigma - step_sigma
        if abs(step_mu) < tol and abs(step_sigma) < tol:
            return (float(mu), float(sigma)) if sigma > 1e-6 else None
    return None


def _erfc(x):
    """erfc over a numpy array (numpy has none): the Chebyshev fit of Press et al., *Numerical
    Recipes* (2nd ed., 1992, §6.2, erfcc), fractional error under 1.2e-7 everywhere, tails included."""
    z = np.abs(x)
    t = 1.0 / (1.0 + 0.5 * z)
    poly = -z * z - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (
        -0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (
            -0.82215223 + t * 0.17087277))))))))
    ans = t * np.exp(poly)
    return np.where(x >= 0, ans, 2.0 - ans)


def change_point(r) -> int | None:
    """Index of the first run after the latest change in level of log ratios `r` (end-time order).

    A split counts when the means on its two sides differ by CHANGE_Z standard errors (pooled
    within-side spread) and by CHANGE_MIN_SHIFT at least, with CHANGE_MIN_BEFORE runs before and
    CHANGE_MIN_RUNS after it; the strongest split is taken and the search repeats on the runs after
    it. A censored run counts at its stop value (a lower bound on its ratio). None: no change.
    """
    x = np.asarray(r, dtype=float)
    start, found = 0, None
    while len(x) - start >= CHANGE_MIN_BEFORE + CHANGE_MIN_RUNS:
        seg = x[start:]
        n = len(seg)
        s1 = np.concatenate([[0.0], np.cumsum(seg)])
        s2 = np.concatenate([[0.0], np.cumsum(seg * seg)])
        k = np.arange(CHANGE_MIN_BEFORE, n - CHANGE_MIN_RUNS + 1)
        mean_a, mean_b = s1[k] / k, (s1[n] - s1[k]) / (n - k)
        within = (s2[k] - k * mean_a ** 2) + (s2[n] - s2[k] - (n - k) * mean_b ** 2)
        sd = np.sqrt(np.maximum(within, 0.0) / max(n - 2, 1)) + 1e-9
        shift = mean_b - mean_a
        z = np.abs(shift) / (sd * np.sqrt(1.0 / k + 1.0 / (n - k)))
        z[np.abs(shift) < CHANGE_MIN_SHIFT] = 0.0
        best = int(np.argmax(z))
        if z[best] < CHANGE_Z:
            break
        start += int(k[best])
        found = start
    return found


def _fit(done, cens, level, start=None):
    """(method, median r or None, upper q or None, Tobit (μ, σ) or None) for one scope's runs (numpy arrays)."""
    q = conformal_quantile(done, len(cens), level)
    if q is not None:
        return "conformal", _median(done, cens), q, None
    if len(cens) and len(done) >= MIN_UNCENSORED_FOR_TOBIT and len(done) + len(cens) >= runs_needed(level):
        mu, sigma = tobit_fit(done, cens, start=start, tol=1e-9)
        return "tobit", mu, mu + _STD.inv_cdf(level) * sigma, (mu, sigma)
    return "none", _median(done, cens), None, None


def scope_bound(r, censored, level: float = DEFAULT_LEVEL, *, start=None) -> dict:
    """One scope's bound from its log ratios `r` and censored flags in end-time order (oldest first).

    Returns {"method", "median" (log ratio or None), "q" (log upper bound or None), "n", "n_censored",
    "since" (index of the first run after a change, or None), "fit" (Tobit (μ, σ) or None)}.
    start: a previous Tobit (μ, σ) of nearly the same runs, to converge faster.
    """
    r = np.asarray(r, dtype=float)
    c = np.asarray(censored, dtype=bool)
    since = change_point(r) if len(r) >= CHANGE_MIN_BEFORE + CHANGE_MIN_RUNS else None
    if since is not None:
        ra, ca = r[since:], c[since:]
        after_done, after_cens = ra[~ca], ra[ca]
        m = len(ra)
        if m >= SHIFT_UNTIL:
            method, med, q, fit = _fit(after_done, after_cens, level, start)
            if q is not None:
                return {"method": method, "median": med, "q": q, "n": m, "n_censored": len(after_cens),
                        "since": since, "fit": fit}
        rb, cb = r[:since], c[:since]
        before_done, before_cens = rb[~cb], rb[cb]
        med_before = _median(before_done, before_cens)
        med_after = _median(after_done, after_cens)
        spread = conformal_quantile(before_done - med_before, len(before_cens), level)
        if spread is None and len(before_done) >= MIN_UNCENSORED_FOR_TOBIT:
            mu, sigma = tobit_fit(before_done, before_cens)
            spread = mu - med_before + _STD.inv_cdf(level) * sigma
        if spread is not None and med_after is not None:
            q = med_after + max(spread, 0.0) * math.sqrt(1.0 + math.pi / (2.0 * m))
            return {"method": "shifted", "median": med_after, "q": q, "n": m, "n_censored": len(after_cens),
                    "since": since, "fit": None}
    method, med, q, fit = _fit(r[~c], r[c], level, start)
    return {"method": method, "median": med, "q": q, "n": len(r), "n_censored": int(c.sum()), "since": None,
            "fit": fit}


SCOPES = ("team×kind", "team", "all")
DEFAULT_MAX_RUNS = 1000  # per scope: the most recent runs, so the calibration follows drift


def _in_time_order(rows) -> tuple[list[float], list[bool], list]:
    """(log ratios, censored flags, ended_at) of the usable rows, oldest first when every row has an
    ended_at (else in the order given, and no change is searched for)."""
    usable = [row for row in rows if row["estimated_gpu_hours"] and row["estimated_gpu_hours"] > 0
              and row["actual_gpu_hours"] is not None and row["actual_gpu_hours"] > 0]
    timed = all(row.get("ended_at") is not None for row in usable)
    if timed:
        usable.sort(key=lambda row: row["ended_at"])
    r = [math.log(row["actual_gpu_hours"] / row["estimated_gpu_hours"]) for row in usable]
    return r, [bool(row.get("censored")) for row in usable], [row.get("ended_at") for row in usable] if timed else None


def calibrate_scopes(scoped: Iterable[tuple[str, list[CalibrationRow]]], *,
                     level: float = DEFAULT_LEVEL) -> Calibration:
    """The correction from the first scope that yields a bound, trying scopes in order.

    scoped: iterable of (scope name, rows) in fallback order — team × kind, team, everyone — where
    rows have estimated_gpu_hours, actual_gpu_hours, censored and (to follow a change) ended_at. It
    may be lazy (a generator that queries the ledger scope by scope): later scopes are not read once
    one yields a bound.
    Returns {"scope", "method", "n", "n_censored", "level", "factor", "upper_factor",
    "runs_needed", "note", "adapted_since", "runs_before_change"}: factor multiplies the raw estimate
    to give the median estimate, upper_factor (None when unknown) to give the upper bound;
    adapted_since (ISO time of the first run after a change in the scope's ratio, or None) and
    runs_before_change (runs of the window the bound no longer rests on) say where it adapted.
    """
    need = runs_needed(level)
    fallback = None
    for scope, rows in scoped:
        r, cens, ended = _in_time_order(rows)
        if not r:
            continue
        # a change is a team's (a new model family, new data); everyone's runs mix teams' levels
        follow = ended is not None and scope != "all"
        b = scope_bound(r, cens, level) if follow else window_bound(r, cens, level)
        since = b["since"]
        result = {"scope": scope, "method": b["method"], "n": b["n"], "n_censored": b["n_censored"],
                  "level": level, "factor": math.exp(b["median"]) if b["median"] is not None else 1.0,
                  "upper_factor": math.exp(b["q"]) if b["q"] is not None else None,
                  "runs_needed": need,
                  "adapted_since": _iso(ended[since]) if since is not None else None,
                  "runs_before_change": since or 0}
        if b["q"] is not None:
            result["note"] = (f"{b['method']} bound from {result['n']} runs of scope {scope} "
                              f"({b['n_censored']} censored)")
            if since is not None:
                result["note"] += (f", adapted to a change in the cost ratio since {result['adapted_since']} "
                                   f"({since} earlier runs set aside)")
            return result
        fallback = fallback or result
    if fallback is None:
        return {"scope": None, "method": "none", "n": 0, "n_censored": 0, "level": level,
                "factor": 1.0, "upper_factor": None, "runs_needed": need,
                "note": f"no comparable history: bound unknown (needs {need} runs)",
                "adapted_since": None, "runs_before_change": 0}
    fallback["note"] = (f"bound unknown: {fallback['n']} runs of scope {fallback['scope']} "
                        f"({fallback['n_censored']} censored), needs {need} with few enough censored")
    return fallback


def window_bound(r, cens, level: float = DEFAULT_LEVEL) -> dict:
    """The whole window's bound, no change searched for (rows without end times; the method before
    changes were followed). Keys as scope_bound's, without fit."""
    r, c = np.asarray(r, dtype=float), np.asarray(cens, dtype=bool)
    method, med, q, _ = _fit(r[~c], r[c], level)
    return {"method": method, "median": med, "q": q, "n": len(r), "n_censored": int(c.sum()), "since": None}


def _iso(t) -> str | None:
    """ISO seconds of a datetime-like (the decision is JSON)."""
    if t is None:
        return None
    if hasattr(t, "isoformat"):
        return t.replace(microsecond=0).isoformat() if hasattr(t, "microsecond") else t.isoformat()
    return str(t)


def calibrate(history: Iterable[CalibrationRow], team: str, kind: str, *, level: float = DEFAULT_LEVEL,
              now: datetime | None = None, window_days: int = DEFAULT_WINDOW_DAYS,
              max_runs: int = DEFAULT_MAX_RUNS) -> Calibration:
    """The correction the gate applies to a raw estimate of `team`'s `kind` run (see calibrate_scopes).

    history: rows (dicts) with team, kind, estimated_gpu_hours, actual_gpu_hours, censored,
    ended_at (datetime). The rolling window keeps rows that ended within `window_days` before now
    (and not after now: only runs finished before a decision inform it), and at most the
    `max_runs` most recent of each scope.
    """
    if now is not None:
        since = now - timedelta(days=window_days)
        history = [h for h in history if h.get("ended_at") is None or since <= h["ended_at"] <= now]
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


def backtest(log_ratios_in_time_order, censored, *, level: float = DEFAULT_LEVEL,
             window: int = DEFAULT_MAX_RUNS, last: int = 100, ended_at=None, decided_at=None) -> dict:
    """The coverage the gate's own bound (scope_bound: conformal, Tobit, or after a change shifted)
    achieved on one scope's recent runs (in end-time order), each replayed from the up to `window`
    runs that informed it: those that ended before it was decided when ended_at and decided_at (one
    per run, comparable values) are given, else those that ended before it.

    A run is "covered" when its log ratio stayed at or under its bound, "exceeded" when it went over
    (a censored run only when its stop value already exceeded the bound), "unknown" for a censored
    run stopped under its bound (it might have needed more: never counted as covered), and "no
    bound" when its bound was unknown. Returns {"outcomes" (one per replayed run, oldest first),
    "checked" (covered + exceeded), "covered", "coverage" (None when nothing checked),
    "unknown_bound" (no bound), "level"}.
    """
    r = np.asarray(log_ratios_in_time_order, dtype=float)
    c = np.asarray(censored, dtype=bool)
    if decided_at is not None:
        ends, decided = np.asarray(ended_at), np.asarray(decided_at)
        known = np.minimum(np.searchsorted(ends, decided, side="right"), np.arange(len(r)))
    else:
        known = np.arange(len(r))
    outcomes, fit = [], None
    for i in range(max(0, len(r) - last), len(r)):
        hi = int(known[i])
        lo = max(0, hi - window)
        b = scope_bound(r[lo:hi], c[lo:hi], level, start=fit) if hi > lo else {"q": None, "fit": None}
        fit = b["fit"] or fit
        q = b["q"]
        if q is None or not math.isfinite(q):
            outcomes.append("no bound")
        elif r[i] > q:
            outcomes.append("exceeded")   # a censored run stopped above the bound and needed more still
        elif c[i]:
            outcomes.append("unknown")
        else:
            outcomes.append("covered")
    covered, exceeded = outcomes.count("covered"), outcomes.count("exceeded")
    checked = covered + exceeded
    return {"outcomes": outcomes, "checked": checked, "covered": covered, "level": level,
            "unknown_bound": outcomes.count("no bound"),
            "coverage": covered / checked if checked else None}


ALARM_RUNS = 20        # the recent runs the drift alarm reads
ALARM_P = 0.01         # how unlikely what it saw must be for a scope whose costs have not changed


def _binom_tail(k: int, n: int, p: float) -> float:
    """P(X ≥ k) for X ~ Binomial(n, p)."""
    return sum(math.comb(n, j) * p ** j * (1 - p) ** (n - j) for j in range(k, n + 1)) if n else 1.0


def drift_alarm(outcomes, ended_at=None, *, censored=None, level: float = DEFAULT_LEVEL,
                recent: int = ALARM_RUNS, window: int = DEFAULT_MAX_RUNS) -> dict:
    """Whether a scope's last `recent` runs went over their bound more often than the level allows.

    outcomes: backtest outcomes, oldest first; ended_at: their end times (same order), for since when;
    censored: the scope's censored flags in the same time order, ending with the same run (it may
    reach further back), to judge stops at a limit.
    Two signs, each judged by how unlikely it is (binomial, under ALARM_P) for unchanged costs:
    - over the bound: of the last `recent` runs whose outcome is known (covered or exceeded), more
      exceeded than a bound at `level` lets through;
    - stopped at a limit: of the last `recent` runs, more stopped at their budget or time limit (a
      censored run stopped under its bound: whether it would have fitted is unknown) than the scope's
      share of such stops over the up to `window` runs before them.
    Returns {"alarm" (bool), "checked", "exceeded", "expected" (runs expected over the bound),
    "stopped", "stopped_expected", "since" (end time of the first run that went over or stopped among
    them, or None), "message" (a sentence a planner reads)}.
    """
    alpha = 1.0 - level
    tail = list(outcomes)[-recent:]
    times = list(ended_at)[-recent:] if ended_at is not None else [None] * len(tail)
    known = [(o, t) for o, t in zip(tail, times) if o in ("covered", "exceeded")]
    n, k = len(known), sum(o == "exceeded" for o, _ in known)
    over = k > 0 and _binom_tail(k, n, alpha) < ALARM_P
    expected = alpha * n
    message = f"{k} of the last {n} runs exceeded the {level * 100:.0f} % bound; expected about {expected:.0f}"
    stopped = stopped_expected = 0
    stop_alarm = False
    if censored is not None and len(censored) > len(tail):
        flags = [bool(c) for c in censored]
        before = flags[-len(tail) - window:-len(tail)]
        share = sum(before) / len(before)
        stopped = sum(flags[-len(tail):])
        stopped_expected = share * len(tail)
        stop_alarm = (len(before) >= 2 * recent and stopped > stopped_expected
                      and _binom_tail(stopped, len(tail), max(share, 0.5 / len(before))) < ALARM_P)
        if stop_alarm:
            stops = (f"{stopped} of the last {len(tail)} runs stopped at their budget or time limit before "
                     f"finishing, where about {stopped_expected:.0f} did before")
            message = (f"{message}; {stops}" if over else
                       f"{stops}; of the {n} {'run' if n == 1 else 'runs'} whose outcome is known, {k} exceeded the "
                       f"{level * 100:.0f} % bound (expected about {expected:.0f})")
    marks = [t for o, t in zip(tail, times) if o == "exceeded" or (stop_alarm and o == "unknown")]
    return {"alarm": over or stop_alarm, "checked": n, "exceeded": k, "expected": expected,
            "stopped": stopped, "stopped_expected": stopped_expected,
            "since": marks[0] if marks else None, "message": message}
