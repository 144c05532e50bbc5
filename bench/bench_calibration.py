"""Coverage and tightness of the calibrated upper bound, the earlier change test ("today": a mean
shift of the log ratios, runs in end order) against the gate's ("new": scores and budget stops of
the censored normal, runs in admission order, a team's kinds pooled), on generated histories whose
true costs the generator knows.

    python bench/bench_calibration.py [--teams 12] [--seed 0] [--level 0.9]

Each team submits requests at random times (about 3 a day); a run ends 0.5-4 days after its
request, so only runs that ended before a request may inform its bound. Coverage: the share of
requests whose true cost stayed at or under the bound they were given (an unknown bound counts as
not covering); tightness: the median of bound / true cost over the requests with a bound.

Two families of scenarios, each with 400 runs of history, then 200 scored requests:
- one stream (as before): log ratio normal with the team's own mean (-0.1..0.4) and spread
  (0.2..0.45); a run over a cap 1-2 spreads above the mean is stopped there half the time. Steady;
  the ratio of every run requested after request 60 times 1.5, 2 or 3; a slow drift to 2x.
- budget (three kinds, one team): each kind its own mean (-0.1..0.3) and spread (0.2..0.45);
  every run's budget is about 1.4x its kind's typical cost (noise 8 %) and every run over it stops
  there, recorded as censored at the budget (about 1 in 5 before a jump). Steady; every kind's
  ratio times 2 (or 1.5, 3, or 0.5: a drop) from request 60 on, so that after a 2x jump most runs
  stop at their budget; and the 2x jump where a run's duration grows with its cost (end = request +
  0.2-1 day + 0.3-2.2 days x ratio), so the costliest new runs are the last to end.
Jumps report the 30 requests after the jump ("next 30") and the 60 after those; steady scenarios
the false alarms: the share of decisions resting on a change that is not there (and the share of
scopes with any such decision over the 200); a drop the tightness over the 90 requests after it.
The time column is the mean CPU time of one team x kind bound (the gate's calibration of a request)
for each method.
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lib.gate.calibration import DEFAULT_MAX_RUNS, scope_bound  # noqa: E402

HISTORY, SCORED, JUMP_AT = 400, 200, 60
KIND_SHARES = (0.5, 0.3, 0.2)
BUDGET_MARGIN = math.log(1.4)
# scenario: (family, shape, factor)
SCENARIOS = {"steady": ("stream", "jump", 1.0), "jump 1.5x": ("stream", "jump", 1.5),
             "jump 2x": ("stream", "jump", 2.0), "jump 3x": ("stream", "jump", 3.0),
             "drift to 2x": ("stream", "drift", 2.0),
             "budget steady": ("budget", "jump", 1.0), "budget 2x": ("budget", "jump", 2.0),
             "budget 1.5x": ("budget", "jump", 1.5), "budget 3x": ("budget", "jump", 3.0),
             "budget 2x slow": ("budget", "costlag", 2.0), "budget drop": ("budget", "jump", 0.5)}


def team_stream(rng: np.random.Generator, shape: str, factor: float) -> dict:
    """One team's runs in request order (one kind): request day, end day, true and recorded log
    ratio, censored."""
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
    return {"submit": submit, "end": end, "true": true, "recorded": recorded, "censored": cens,
            "kind": np.zeros(n, dtype=int)}


def budget_team(rng: np.random.Generator, shape: str, factor: float) -> dict:
    """One team's runs of three kinds in request order, every run over its budget stopped there."""
    n = HISTORY + SCORED
    submit = np.cumsum(rng.exponential(1 / 3, n))
    kind = rng.choice(3, n, p=KIND_SHARES)
    mu, sigma = rng.uniform(-0.1, 0.3, 3), rng.uniform(0.2, 0.45, 3)
    shift = np.where(np.arange(n) - HISTORY >= JUMP_AT, math.log(factor), 0.0)
    true = mu[kind] + shift + sigma[kind] * rng.standard_normal(n)
    cap = mu[kind] + BUDGET_MARGIN + 0.08 * rng.standard_normal(n)
    cens = true > cap
    recorded = np.where(cens, cap, true)
    if shape == "costlag":
        end = submit + rng.uniform(0.2, 1.0, n) + rng.uniform(0.3, 2.2, n) * np.exp(recorded)
    else:
        end = submit + rng.uniform(0.5, 4.0, n)
    return {"submit": submit, "end": end, "true": true, "recorded": recorded, "censored": cens, "kind": kind}


def bounds(s: dict, level: float, clock: dict) -> dict:
    """Per scored request: log upper bound (NaN: unknown) and whether it rests on a change, by method.

    today: the request's kind's runs in end order, the earlier change test; new: in admission order
    with the team's runs (all kinds) pooled, the gate's test."""
    order = np.argsort(s["end"], kind="stable")
    ends = s["end"][order]
    out = {m: {"q": [], "changed": [], "suspected": []} for m in ("today", "new")}
    pooled = len(np.unique(s["kind"])) > 1
    for j in range(HISTORY, HISTORY + SCORED):
        t = s["submit"][j]
        done = order[:np.searchsorted(ends, t, side="right")]
        done = done[s["end"][done] >= t - 365][-DEFAULT_MAX_RUNS:]
        kind = s["kind"][j]
        mine = done[s["kind"][done] == kind]
        t0 = time.process_time()
        old = scope_bound(s["recorded"][mine], s["censored"][mine], level, change="mean")
        t1 = time.process_time()
        by_request = np.sort(mine)          # request order is admission order here
        team = None
        if pooled:
            all_runs = np.sort(done)
            team = (s["recorded"][all_runs], s["censored"][all_runs], s["kind"][all_runs],
                    s["submit"][all_runs], int(kind))
        new = scope_bound(s["recorded"][by_request], s["censored"][by_request], level,
                          keys=s["submit"][by_request], team=team)
        t2 = time.process_time()
        clock["today"] += t1 - t0
        clock["new"] += t2 - t1
        clock["calls"] += 1
        for name, b in (("today", old), ("new", new)):
            out[name]["q"].append(b["q"] if b["q"] is not None else math.nan)
            out[name]["changed"].append(b["since"] is not None)
            out[name]["suspected"].append(b.get("suspected") is not None)
    return {m: {k: np.asarray(v) for k, v in d.items()} for m, d in out.items()}


def score(true: np.ndarray, q: np.ndarray) -> tuple[float, float]:
    """(coverage, median bound / true cost) of log bounds q against true log ratios."""
    known = ~np.isnan(q)
    coverage = float(np.mean(np.where(known, true <= np.nan_to_num(q, nan=-np.inf), False)))
    return coverage, float(np.median(np.exp(q[known] - true[known]))) if known.any() else math.nan


def run(teams: int, seed: int, level: float, only=None) -> tuple[dict, dict]:
    """Per scenario: every team's true ratios and, per method, bounds and change flags (stacked)."""
    rng = np.random.default_rng(seed)
    clock = {"today": 0.0, "new": 0.0, "calls": 0}
    results = {}
    for name, (family, shape, factor) in SCENARIOS.items():
        if only and name not in only:
            continue
        make = team_stream if family == "stream" else budget_team
        per: dict = {"true": [], "today": [], "new": []}
        for _ in range(2 * teams if "steady" in name else teams):
            s = make(rng, shape, factor)
            b = bounds(s, level, clock)
            per["true"].append(s["true"][HISTORY:])
            for m in ("today", "new"):
                per[m].append(b[m])
        results[name] = {"true": np.stack(per["true"]),
                         **{m: {k: np.stack([d[k] for d in per[m]]) for k in per[m][0]} for m in ("today", "new")}}
    return results, clock


def report(results: dict, clock: dict, level: float) -> list[str]:
    lines = [f"level {level:.0%}; coverage (share of requests whose true cost stayed under the bound) and "
             "tightness (median bound / true cost)",
             f"{'scenario':<16}{'method':<7}{'coverage':>9}{'next 30':>9}{'60 after':>9}{'tightness':>10}"
             f"{'false alarms':>14}{'scopes':>8}"]
    w1, w2 = slice(JUMP_AT, JUMP_AT + 30), slice(JUMP_AT + 30, JUMP_AT + 90)
    for name, res in results.items():
        true = res["true"]
        for method in ("today", "new"):
            q = res[method]["q"]
            cov, tight = score(true.ravel(), q.ravel())
            extra = f"{'':>9}{'':>9}"
            alarms = f"{'':>14}{'':>8}"
            if "steady" in name:
                changed = res[method]["changed"]
                alarms = f"{changed.mean():>14.2%}{changed.any(axis=1).mean():>8.0%}"
            elif "drop" in name:
                tight = score(true[:, JUMP_AT:JUMP_AT + 90].ravel(), q[:, JUMP_AT:JUMP_AT + 90].ravel())[1]
            elif name != "drift to 2x":
                c1 = score(true[:, w1].ravel(), q[:, w1].ravel())[0]
                c2 = score(true[:, w2].ravel(), q[:, w2].ravel())[0]
                extra = f"{c1:>9.1%}{c2:>9.1%}"
            lines.append(f"{name:<16}{method:<7}{cov:>9.1%}{extra}{tight:>10.3f}{alarms}")
    steady = [res["new"]["suspected"] for name, res in results.items() if "steady" in name]
    if steady:
        lines.append("new, steady scenarios: decisions widened for a suspected rise "
                     f"{np.mean([s.mean() for s in steady]):.1%}")
    lines.append("drop: tightness over the 90 requests after the drop; false alarms: decisions resting on a "
                 "change (of the steady scopes' decisions; scopes with any)")
    if clock["calls"]:
        lines.append(f"one team x kind bound, mean CPU: today {clock['today'] / clock['calls'] * 1e3:.2f} ms, "
                     f"new {clock['new'] / clock['calls'] * 1e3:.2f} ms ({clock['calls']:,} requests)")
    return lines


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--teams", type=int, default=12, help="teams per scenario (twice as many steady)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--level", type=float, default=0.9)
    ap.add_argument("--only", nargs="*", help="scenario names to run (default: all)")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    results, clock = run(args.teams, args.seed, args.level, args.only)
    for line in report(results, clock, args.level):
        print(line)
    print(f"({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
