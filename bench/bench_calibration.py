"""Coverage and tightness of the calibrated upper bound, today's method against the one that follows
a change, on generated histories whose true costs the generator knows.

    python bench/bench_calibration.py [--teams 12] [--seed 0] [--level 0.9]

Each team submits requests at random times (about 3 a day); a run ends 0.5-4 days after its
request, so only runs that ended before a request may inform its bound. A run's log cost ratio
ln(actual / estimate) is normal with the team's own mean (-0.1..0.4) and spread (0.2..0.45); a run
that overruns a budget cap (1-2 spreads over the mean) is stopped there half the time and recorded
as censored at the cap, but its true ratio is what coverage is scored against. Each team has 400
runs of history, then 200 scored requests. Scenarios: steady; the ratio of every run requested
after request 60 multiplied by 1.5, 2 or 3 (a new model family, pilots still from the old one); and
a slow drift to 2x over the 200 requests.

Per scenario and method it prints the coverage (share of requests whose true cost stayed at or
under the bound; an unknown bound counts as not covering), for jumps separately over the 30
requests after the jump and the 60 after those, and the tightness: the median of bound / true cost
over the requests with a bound. "today" is the window's bound as it stood before the change search
(conformal, else Tobit, over the team's last 1,000 runs of 365 days); "new" is lib.gate.calibration
as the gate runs it.
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lib.gate.calibration import DEFAULT_MAX_RUNS, scope_bound, window_bound  # noqa: E402

HISTORY, SCORED, JUMP_AT = 400, 200, 60
SCENARIOS = {"steady": ("jump", 1.0), "jump 1.5x": ("jump", 1.5), "jump 2x": ("jump", 2.0),
             "jump 3x": ("jump", 3.0), "drift to 2x": ("drift", 2.0)}


def team_stream(rng: np.random.Generator, shape: str, factor: float) -> dict:
    """One team's runs in request order: request day, end day, true and recorded log ratio, censored."""
    n = HISTORY + SCORED
    submit = np.cumsum(rng.exponential(1 / 3, n))
    end = submit + rng.uniform(0.5, 4.0, n)
    mu, sigma = rng.uniform(-0.1, 0.4), rng.uniform(0.2, 0.45)
    shift = np.zeros(n)
    scored = np.arange(n) - HISTORY
    if shape == "jump":
        shift[scored >= JUMP_AT] = math.log(factor)
    else:
        shift[scored >= 0] = math.log(factor) * scored[scored >= 0] / SCORED
    true = mu + shift + sigma * rng.standard_normal(n)
    cap = mu + shift + sigma * rng.uniform(1.0, 2.0, n)
    cens = (true > cap) & (rng.random(n) < 0.5)
    recorded = np.where(cens, cap, true)
    return {"submit": submit, "end": end, "true": true, "recorded": recorded, "censored": cens}


def bounds(s: dict, level: float) -> dict:
    """Log upper bound per scored request (NaN: unknown), today's and the new method."""
    order = np.argsort(s["end"], kind="stable")
    ends = s["end"][order]
    out = {"today": [], "new": []}
    for j in range(HISTORY, HISTORY + SCORED):
        t = s["submit"][j]
        done = order[:np.searchsorted(ends, t, side="right")]
        done = done[s["end"][done] >= t - 365][-DEFAULT_MAX_RUNS:]
        r, c = s["recorded"][done], s["censored"][done]
        for name, b in (("today", window_bound(r, c, level)), ("new", scope_bound(r, c, level))):
            out[name].append(b["q"] if b["q"] is not None else math.nan)
    return {k: np.asarray(v) for k, v in out.items()}


def score(true: np.ndarray, q: np.ndarray) -> tuple[float, float]:
    """(coverage, median bound / true cost) of log bounds q against true log ratios."""
    known = ~np.isnan(q)
    coverage = float(np.mean(np.where(known, true <= np.nan_to_num(q, nan=-np.inf), False)))
    return coverage, float(np.median(np.exp(q[known] - true[known]))) if known.any() else math.nan


def run(teams: int, seed: int, level: float) -> dict:
    """Per scenario and method: pooled true ratios and bounds of every team's scored requests."""
    rng = np.random.default_rng(seed)
    results = {}
    for name, (shape, factor) in SCENARIOS.items():
        per = {"true": [], "today": [], "new": []}
        for _ in range(teams if name != "steady" else 2 * teams):
            s = team_stream(rng, shape, factor)
            b = bounds(s, level)
            per["true"].append(s["true"][HISTORY:])
            per["today"].append(b["today"])
            per["new"].append(b["new"])
        results[name] = {k: np.stack(v) for k, v in per.items()}
    return results


def report(results: dict, level: float) -> list[str]:
    lines = [f"level {level:.0%}; coverage (share of requests whose true cost stayed under the bound) "
             "and tightness (median bound / true cost)",
             f"{'scenario':<14}{'method':<8}{'coverage':>9}{'next 30':>9}{'60 after':>9}{'tightness':>10}"]
    for name, res in results.items():
        for method in ("today", "new"):
            q, true = res[method], res["true"]
            cov, tight = score(true.ravel(), q.ravel())
            if name.startswith("jump"):
                w1 = slice(JUMP_AT, JUMP_AT + 30)
                w2 = slice(JUMP_AT + 30, JUMP_AT + 90)
                c1 = score(true[:, w1].ravel(), q[:, w1].ravel())[0]
                c2 = score(true[:, w2].ravel(), q[:, w2].ravel())[0]
                extra = f"{c1:>9.1%}{c2:>9.1%}"
            else:
                extra = f"{'':>9}{'':>9}"
            lines.append(f"{name:<14}{method:<8}{cov:>9.1%}{extra}{tight:>10.3f}")
    return lines


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--teams", type=int, default=12, help="teams per scenario (twice as many steady)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--level", type=float, default=0.9)
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    results = run(args.teams, args.seed, args.level)
    for line in report(results, args.level):
        print(line)
    print(f"({time.perf_counter() - t0:.1f} s)")


if __name__ == "__main__":
    main()
