"""The gate's bound replayed over a scope's past runs (`backtest`: each run against the bound the gate
would have given it from the runs that had ended when it was admitted), and the drift alarm read
from those outcomes (`drift_alarm`). What the Estimate accuracy page and Overview's drift flag show.
"""
from __future__ import annotations

import hashlib
import math
from typing import MutableMapping

import numpy as np

from lib.gate.calibration import DEFAULT_LEVEL, DEFAULT_MAX_RUNS, SHIFT_UNTIL, scope_bound
from lib.gate.calibration_change import CHANGE_MIN_BEFORE, CHANGE_MIN_RUNS


def backtest(log_ratios_in_time_order, censored, *, level: float = DEFAULT_LEVEL,
             window: int = DEFAULT_MAX_RUNS, last: int = 100, ended_at=None, decided_at=None,
             memo: MutableMapping[str, list] | None = None, memo_tag: bytes = b"") -> dict:
    """The coverage the gate's own bound (scope_bound: conformal, Tobit, or after a change shifted)
    achieved on one scope's recent runs (in end-time order), each replayed from the up to `window`
    runs that informed it: those that ended before it was decided, in the order they were decided
    (admitted), when ended_at and decided_at (one per run, comparable values) are given, else those
    that ended before it, in end order. Each replay sees its kind's runs only (not the team's).

    A run is "covered" when its log ratio stayed at or under its bound, "exceeded" when it went over
    (a censored run only when its stop value already exceeded the bound), "unknown" for a censored
    run stopped under its bound (it might have needed more: never counted as covered), and "no
    bound" when its bound was unknown. Returns {"outcomes" (one per replayed run, oldest first),
    "checked" (covered + exceeded), "covered", "coverage" (None when nothing checked),
    "unknown_bound" (no bound), "level"}.

    memo: bounds replayed before, by the runs they were replayed from (`step_key`, with `memo_tag`
    naming the code that made them): a run's bound depends on those runs only, so a scope replayed
    again after a few more runs ended replays only the new ones. Looked up and filled in place.
    """
    r = np.asarray(log_ratios_in_time_order, dtype=float)
    c = np.asarray(censored, dtype=bool)
    decided = None
    if decided_at is not None:
        ends, decided = np.asarray(ended_at), np.asarray(decided_at)
        known = np.minimum(np.searchsorted(ends, decided, side="right"), np.arange(len(r)))
    else:
        known = np.arange(len(r))
    outcomes, fit = [], None
    for i in range(max(0, len(r) - last), len(r)):
        hi = int(known[i])
        lo = max(0, hi - window)
        if hi <= lo:
            b = {"q": None, "fit": None}
        else:
            if decided is not None:
                # the runs that informed it in the gate's order: by when each was admitted
                order = lo + np.argsort(decided[lo:hi], kind="stable")
                seen_r, seen_c = r[order], c[order]
            else:
                seen_r, seen_c = r[lo:hi], c[lo:hi]
            b = _replayed_bound(seen_r, seen_c, level, fit, memo, memo_tag)
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


def step_key(r: np.ndarray, c: np.ndarray, level: float, tag: bytes = b"") -> str:
    """The key of one replayed bound: a SHA-256 of the runs it was replayed from (log ratios as
    float64 bytes, censored flags), the level and `tag` (the code that computes bounds)."""
    h = hashlib.sha256(tag)
    h.update(np.ascontiguousarray(r, dtype="<f8").tobytes())
    h.update(np.ascontiguousarray(c, dtype=bool).tobytes())
    h.update(repr(float(level)).encode())
    return h.hexdigest()


def _replayed_bound(r, c, level: float, start, memo, tag: bytes) -> dict:
    """scope_bound's {"q", "fit"} for one replayed run, from `memo` when it holds it (a remembered
    bound was computed from the same runs; the Tobit start only speeds convergence, to 1e-9)."""
    if memo is None:
        return scope_bound(r, c, level, start=start)
    key = step_key(r, c, level, tag)
    if (known := memo.get(key)) is not None:
        return {"q": known[0], "fit": tuple(known[1]) if known[1] is not None else None}
    b = scope_bound(r, c, level, start=start)
    memo[key] = [b["q"], list(b["fit"]) if b["fit"] is not None else None]
    return b


ALARM_RUNS = 20        # the recent runs the drift alarm reads
ALARM_P = 0.01         # how unlikely what it saw must be for a scope whose costs have not changed


def _binom_tail(k: int, n: int, p: float) -> float:
    """P(X ≥ k) for X ~ Binomial(n, p)."""
    return sum(math.comb(n, j) * p ** j * (1 - p) ** (n - j) for j in range(k, n + 1)) if n else 1.0


def drift_alarm(outcomes, ended_at=None, *, censored=None, after_change=None, level: float = DEFAULT_LEVEL,
                recent: int = ALARM_RUNS, window: int = DEFAULT_MAX_RUNS) -> dict:
    """Whether a scope's last `recent` runs went over their bound more often than the level allows.

    outcomes: backtest outcomes, oldest first; ended_at: their end times (same order), for since when;
    censored: the scope's censored flags in the same time order, ending with the same run (it may
    reach further back), to judge stops at a limit; after_change: one flag per censored flag, the
    runs after the change the calibration followed (None: no change).
    Two signs, each judged by how unlikely it is (binomial, under ALARM_P) for unchanged costs:
    - over the bound: of the last `recent` runs whose outcome is known (covered or exceeded), more
      exceeded than a bound at `level` lets through;
    - stopped at a limit: more runs stopped at their budget or time limit (a censored run stopped
      under its bound: whether it would have fitted is unknown) than the scope's share of such stops
      before — of the runs since the change when the calibration followed one in the last
      SHIFT_UNTIL runs (CHANGE_MIN_RUNS of them at least) against the up to `window` runs before it,
      else of the last `recent` runs against the up to `window` before them.
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
    stops = ""
    flags = np.asarray(censored, dtype=bool) if censored is not None else None
    mask = np.asarray(after_change, dtype=bool) if after_change is not None and flags is not None else None
    if mask is not None and CHANGE_MIN_RUNS <= mask.sum() <= SHIFT_UNTIL:
        before = flags[~mask][-window:]
        m, stopped = int(mask.sum()), int(flags[mask].sum())
        share = float(before.mean()) if len(before) else 0.0
        stopped_expected = share * m
        stop_alarm = (len(before) >= CHANGE_MIN_BEFORE and stopped > stopped_expected
                      and _binom_tail(stopped, m, max(share, 0.5 / len(before))) < ALARM_P)
        stops = (f"{stopped} of the {m} runs since the change stopped at their budget or time limit; before the "
                 f"change {_one_in(share)} did")
    elif flags is not None and len(flags) > len(tail):
        before = flags[-len(tail) - window:-len(tail)]
        share = float(before.mean())
        stopped = int(flags[-len(tail):].sum())
        stopped_expected = share * len(tail)
        stop_alarm = (len(before) >= 2 * recent and stopped > stopped_expected
                      and _binom_tail(stopped, len(tail), max(share, 0.5 / len(before))) < ALARM_P)
        stops = (f"{stopped} of the last {len(tail)} runs stopped at their budget or time limit before "
                 f"finishing, where about {stopped_expected:.0f} did before")
    if stop_alarm:
        message = (f"{message}; {stops}" if over else
                   f"{stops}; of the {n} {'run' if n == 1 else 'runs'} whose outcome is known, {k} exceeded the "
                   f"{level * 100:.0f} % bound (expected about {expected:.0f})")
    marks = [t for o, t in zip(tail, times) if o == "exceeded" or (stop_alarm and o == "unknown")]
    return {"alarm": over or stop_alarm, "checked": n, "exceeded": k, "expected": expected,
            "stopped": stopped, "stopped_expected": stopped_expected,
            "since": marks[0] if marks else None, "message": message}


def _one_in(share: float) -> str:
    """A share of runs in words: "none", "about 1 in 5", "about 7 in 10"."""
    if share <= 0:
        return "none"
    if share < 0.5:
        return f"about 1 in {round(1 / share)}"
    return f"about {round(10 * share)} in 10"
