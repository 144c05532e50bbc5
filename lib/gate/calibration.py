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

Following a change (team × kind and team scopes, rows in time order: by admission when every row
has admitted_at, else by ended_at): lib.gate.calibration_change finds the latest change in the
scope's cost ratio — from the runs' scores under the censored normal and from a surge of runs
stopped at their budget — in the kind's own runs and, for team × kind, in the team's (a change the
kinds share). When one is found only the runs since it say where the ratio is now:
- ``shifted``: the kind's location before the change moved by the posterior of the shift the runs
  since give (scales from before the change, so runs stopped at their budget count), until the kind
  has SHIFT_UNTIL runs since it whose conformal bound is finite;
- ``conformal`` on the runs since the change alone from then on.
A rise only suspected (weaker evidence) never re-centres the bound: it is the larger of the one that
stands (the window's or the latest change's) and the shifted one. The result says since when it adapted (`adapted_since`: the first run after the
change) and how many runs the window dropped (`runs_before_change`). Without a change the bound is
the window's. `change="mean"` selects the earlier test (a mean shift of the log ratios, stops at
their stop value; shifted = median since + the spread before), kept for comparison.
"""
from __future__ import annotations

import itertools
import math
from datetime import datetime, timedelta
from statistics import NormalDist
from typing import Iterable

import numpy as np

from lib.gate.calibration_change import (CHANGE_MIN_BEFORE, CHANGE_MIN_RUNS, MIN_UNCENSORED_FOR_TOBIT, change_bound,
                                         mean_change)
from lib.gate.contracts import Calibration, CalibrationRow
from lib.gate.tobit import tobit_fit

DEFAULT_LEVEL = 0.9
DEFAULT_WINDOW_DAYS = 365
SHIFT_UNTIL = 40          # runs since a change before they carry a bound on their own
CHANGE_TEST = "censored"  # the change test the gate runs; "mean": the earlier one, for comparison
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


def _fit(done, cens, level, start=None):
    """(method, median r or None, upper q or None, Tobit (μ, σ) or None) for one scope's runs (numpy arrays)."""
    q = conformal_quantile(done, len(cens), level)
    if q is not None:
        return "conformal", _median(done, cens), q, None
    if len(cens) and len(done) >= MIN_UNCENSORED_FOR_TOBIT and len(done) + len(cens) >= runs_needed(level):
        mu, sigma = tobit_fit(done, cens, start=start, tol=1e-9)
        return "tobit", mu, mu + _STD.inv_cdf(level) * sigma, (mu, sigma)
    return "none", _median(done, cens), None, None


def scope_bound(r, censored, level: float = DEFAULT_LEVEL, *, start=None, change: str = CHANGE_TEST,
                keys=None, team: tuple | None = None) -> dict:
    """One scope's bound from its log ratios `r` and censored flags in time order (oldest first).

    Returns {"method", "median" (log ratio or None), "q" (log upper bound or None), "n", "n_censored",
    "since" (index of the first run after a change, or None), "suspected" (index of the first run of
    a rise only suspected since, when it widened the bound, or None), "since_key" and "suspect_key"
    (the keys of those runs, from the runs they were found in), "by" (the test that found the change),
    "pooled" and "suspect_pooled" (found in the team's runs), "fit" (Tobit (μ, σ) of the window when
    one was made, or None)}. After a change found in the team's runs, n and n_censored count the
    team's runs since it.
    start: a previous Tobit (μ, σ) of nearly the same runs, to converge faster; change: "censored"
    (the gate's test) or "mean" (the earlier one); keys, team: see calibration_change.change_bound.
    """
    r = np.asarray(r, dtype=float)
    c = np.asarray(censored, dtype=bool)
    if change == "mean":
        return _mean_shift_bound(r, c, level, start)
    method, med, q, fit = _fit(r[~c], r[c], level, start)
    window = {"method": method, "median": med, "q": q, "n": len(r), "n_censored": int(c.sum()), "since": None,
              "suspected": None, "since_key": None, "suspect_key": None, "by": None, "pooled": False,
              "suspect_pooled": False, "fit": fit}   # fit: the window's Tobit, the next replay's start
    if len(r) < CHANGE_MIN_BEFORE + CHANGE_MIN_RUNS and team is None:
        return window
    if fit is None and c.any() and (~c).sum() >= MIN_UNCENSORED_FOR_TOBIT:
        fit = window["fit"] = tobit_fit(r[~c], r[c], start=start)   # the change test's reference
    found = change_bound(r, c, level, keys=keys, team=team, fit=fit, start=start)
    bound = window
    cb = found["change"]
    if cb is not None:
        since = cb["since"]
        ra, ca = r[since:], c[since:]
        info = {"by": cb["by"], "pooled": cb["pooled"], "since_key": cb["since_key"], "since": since}
        q_after = conformal_quantile(ra[~ca], int(ca.sum()), level) if len(ra) >= SHIFT_UNTIL else None
        if q_after is not None:
            bound = {**window, **info, "method": "conformal", "median": _median(ra[~ca], ra[ca]), "q": q_after,
                     "n": len(ra), "n_censored": int(ca.sum())}
        else:
            # n: the runs the shift rests on (the team's since the change when found there)
            bound = {**window, **info, "method": "shifted", "median": cb["median"], "q": cb["q"],
                     "n": cb["runs_after"], "n_censored": cb["stops_after"]}
    su = found["suspect"]
    if su is not None and (bound["q"] is None or su["q"] > bound["q"]):
        bound = {**bound, "method": "shifted", "q": su["q"], "suspected": su["since"],
                 "suspect_key": su["since_key"], "suspect_pooled": su["pooled"]}
    return bound


def _mean_shift_bound(r, c, level: float, start) -> dict:
    """scope_bound with the earlier change test: a mean shift of the log ratios (stops at their stop
    value); shifted = the median since + the conformal spread before, × √(1 + π / 2m)."""
    since = mean_change(r) if len(r) >= CHANGE_MIN_BEFORE + CHANGE_MIN_RUNS else None
    found = {"suspected": None, "since_key": None, "suspect_key": None, "by": "mean", "pooled": False,
             "suspect_pooled": False}
    if since is not None:
        ra, ca = r[since:], c[since:]
        after_done, after_cens = ra[~ca], ra[ca]
        m = len(ra)
        if m >= SHIFT_UNTIL:
            method, med, q, fit = _fit(after_done, after_cens, level, start)
            if q is not None:
                return {"method": method, "median": med, "q": q, "n": m, "n_censored": len(after_cens),
                        "since": since, "fit": fit, **found}
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
                    "since": since, "fit": None, **found}
    method, med, q, fit = _fit(r[~c], r[c], level, start)
    return {"method": method, "median": med, "q": q, "n": len(r), "n_censored": int(c.sum()), "since": None,
            "fit": fit, **found}


SCOPES = ("team×kind", "team", "all")
DEFAULT_MAX_RUNS = 1000  # per scope: the most recent runs, so the calibration follows drift


def _in_time_order(rows) -> dict:
    """The usable rows of a scope in time order: {"r" (log ratios), "cens", "times" (when each was
    admitted, else when it ended; None when not every row has one: given order, no change searched),
    "kinds" (None unless every row has one)}. Admission order when every row has admitted_at: a
    change in what teams run starts with a request, and runs admitted before it may end after it."""
    usable = [row for row in rows if row["estimated_gpu_hours"] and row["estimated_gpu_hours"] > 0
              and row["actual_gpu_hours"] is not None and row["actual_gpu_hours"] > 0]
    times = None
    for field in ("admitted_at", "ended_at"):
        if usable and all(row.get(field) is not None for row in usable):
            usable.sort(key=lambda row: (row[field], row.get("ended_at") or row[field]))
            times = [row[field] for row in usable]
            break
    if not usable:
        times = None
    return {"r": [math.log(row["actual_gpu_hours"] / row["estimated_gpu_hours"]) for row in usable],
            "cens": [bool(row.get("censored")) for row in usable], "times": times,
            "by": field if times is not None else None,
            "kinds": [row["kind"] for row in usable] if all(row.get("kind") for row in usable) else None}


def _team_stream(own: dict, team: dict) -> tuple | None:
    """calibration_change.change_bound's `team` argument from the team's rows, or None when they
    cannot be pooled (no kinds, or ordered by another clock than the kind's)."""
    if not (own["kinds"] and team["kinds"] and team["times"] is not None and team["by"] == own["by"]):
        return None
    codes = {k: i for i, k in enumerate(sorted(set(team["kinds"]) | {own["kinds"][0]}))}
    return (np.asarray(team["r"], dtype=float), np.asarray(team["cens"], dtype=bool),
            np.array([codes[k] for k in team["kinds"]]), team["times"], codes[own["kinds"][0]])


def calibrate_scopes(scoped: Iterable[tuple[str, list[CalibrationRow]]], *,
                     level: float = DEFAULT_LEVEL, change: str = CHANGE_TEST) -> Calibration:
    """The correction from the first scope that yields a bound, trying scopes in order.

    scoped: iterable of (scope name, rows) in fallback order — team × kind, team, everyone — where
    rows have estimated_gpu_hours, actual_gpu_hours, censored and (to follow a change) ended_at,
    best also admitted_at and kind. It may be lazy (a generator that queries the ledger scope by
    scope): the team's rows are read with the team × kind's (a change the kinds share), everyone's
    only when neither yields a bound. change: the change test ("censored", or the earlier "mean").
    Returns {"scope", "method", "n", "n_censored", "level", "factor", "upper_factor",
    "runs_needed", "note", "adapted_since", "runs_before_change"}: factor multiplies the raw estimate
    to give the median estimate, upper_factor (None when unknown) to give the upper bound;
    adapted_since (ISO time of the first run after a change in the scope's ratio, or None) and
    runs_before_change (runs of the window the bound no longer rests on) say where it adapted.
    """
    need = runs_needed(level)
    fallback = None
    pending = iter(scoped)
    while (item := next(pending, None)) is not None:
        scope, rows = item
        s = _in_time_order(rows)
        # a change is a team's (a new model family, new data); everyone's runs mix teams' levels
        follow = s["times"] is not None and scope != "all"
        team = None
        if follow and scope == "team×kind" and change == "censored" and s["kinds"]:
            nxt = next(pending, None)
            if nxt is not None:
                pending = itertools.chain([nxt], pending)
                team = _team_stream(s, _in_time_order(nxt[1]))
        if not s["r"]:
            continue
        r, cens = s["r"], s["cens"]
        if follow:
            b = scope_bound(r, cens, level, change=change, keys=s["times"], team=team)
        else:
            b = window_bound(r, cens, level)
        since = b["since"]
        result = {"scope": scope, "method": b["method"], "n": b["n"], "n_censored": b["n_censored"],
                  "level": level, "factor": math.exp(b["median"]) if b["median"] is not None else 1.0,
                  "upper_factor": math.exp(b["q"]) if b["q"] is not None else None,
                  "runs_needed": need,
                  "adapted_since": _iso(b["since_key"] if b.get("since_key") is not None else s["times"][since])
                  if since is not None else None,
                  "runs_before_change": since or 0}
        if b["q"] is not None:
            runs = "runs of the team since the change" if b.get("pooled") and since is not None else \
                f"runs of scope {scope}"
            result["note"] = (f"{b['method']} bound from {result['n']} {runs} "
                              f"({b['n_censored']} censored)") + _change_note(b, s)
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


def _change_note(b: dict, s: dict) -> str:
    """What the note adds about a change the bound followed or a rise it widened for."""
    clock = "admitted" if s["by"] == "admitted_at" else "ended"
    note = ""
    if b["since"] is not None:
        when = b["since_key"] if b.get("since_key") is not None else s["times"][b["since"]]
        where = " in the team's runs" if b.get("pooled") else ""
        evidence = "runs stopping at their budget" if b["by"] == "stops" else "the runs' cost ratios"
        note += (f", adapted to a change in the cost ratio since {_iso(when)} (first run {clock} after it; "
                 f"found{where} from {evidence}; {b['since']} earlier runs of the scope set aside)")
    if b.get("suspected") is not None:
        when = b["suspect_key"] if b.get("suspect_key") is not None else s["times"][b["suspected"]]
        where = " in the team's runs" if b.get("suspect_pooled") else ""
        note += f", widened for a rise in the cost ratio suspected{where} since {_iso(when)}, not yet confirmed"
    return note


def window_bound(r, cens, level: float = DEFAULT_LEVEL) -> dict:
    """The whole window's bound, no change searched for (rows without end times; the method before
    changes were followed). Keys as scope_bound's, without fit."""
    r, c = np.asarray(r, dtype=float), np.asarray(cens, dtype=bool)
    method, med, q, _ = _fit(r[~c], r[c], level)
    return {"method": method, "median": med, "q": q, "n": len(r), "n_censored": int(c.sum()), "since": None,
            "suspected": None, "since_key": None, "suspect_key": None, "by": None, "pooled": False,
            "suspect_pooled": False}


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
    ended_at (datetime) and, when known, admitted_at (datetime: the change search's order). The rolling window keeps rows that ended within `window_days` before now
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
