"""Backtest of the weekly demand forecast against a naive baseline, one run.

    python -m bench.bench_forecast [--db PATH] [--origins 26] [--weeks 8]

Forecasts are made as of past Mondays (every week for the last `--origins` weeks that have at least
`--weeks` weeks of outcome after them), each from only what the ledger knew then
(lib.dashboard.forecasts.forecast with as_of), and scored against the weekly GPU-hours that followed.
Per horizon it prints the share of team-weeks whose actual fell at or under P90 (goal 85-95 %) and
the median absolute percentage error of P50, for the method and for the naive baseline "P50 = mean
of the last 4 weeks, P90 = their maximum", side by side. Without --db it scores the demo history
(built into a temp file).
"""
from __future__ import annotations

import argparse
import datetime as dt
import tempfile
import time
from pathlib import Path

import numpy as np

from lib.dashboard.forecasts import forecast, week_start, weekly_usage
from lib.gate.terms import utcnow
from lib.ledger.connection import open_ledger
from lib.planning.forecast import naive_forecast


def backtest(db, origins: int, weeks: int, now: dt.datetime) -> dict:
    """Per horizon: lists of (actual, method p50, method p90, naive p50, naive p90)."""
    with open_ledger(db, read_only=True) as con:
        outcome = weekly_usage(con, now)
    actual = {(r.team, r.week): r.gpu_hours for r in outcome.itertuples()}
    last_outcome = week_start(now) - dt.timedelta(weeks=1)
    first_origin = last_outcome - dt.timedelta(weeks=weeks - 1)
    scored = {h: [] for h in range(1, weeks + 1)}
    for k in range(origins):
        origin = first_origin - dt.timedelta(weeks=k)
        as_of = dt.datetime.combine(origin, dt.time())
        made = forecast(db, as_of=as_of, weeks=weeks)
        with open_ledger(db, read_only=True) as con:
            known = weekly_usage(con, as_of)
        for team, entry in made["teams"].items():
            history = known.loc[known["team"] == team, "gpu_hours"].to_numpy(float)
            if history.size < 8:
                continue
            n50, n90 = naive_forecast(history)
            for row in entry["weeks"]:
                y = actual.get((team, row["week_start"]))
                if y is not None:
                    scored[row["horizon"]].append((y, row["p50_gpu_hours"], row["p90_gpu_hours"], n50, n90))
    return scored


def table(scored: dict) -> list[str]:
    lines = [f"{'horizon':>7} {'team-weeks':>10} | {'P90 covers: method':>18} {'naive':>7} | "
             f"{'P50 MdAPE: method':>17} {'naive':>7}"]
    for h, rows in scored.items():
        if not rows:
            continue
        a = np.array(rows)
        y = a[:, 0]
        pos = y > 0

        def mdape(p):
            return float(np.median(np.abs(p[pos] - y[pos]) / y[pos])) if pos.any() else float("nan")
        lines.append(f"{h:>7} {len(a):>10,} | {np.mean(y <= a[:, 2]):>18.1%} {np.mean(y <= a[:, 4]):>7.1%} | "
                     f"{mdape(a[:, 1]):>17.1%} {mdape(a[:, 3]):>7.1%}")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", help="ledger to score (default: the demo history, built in a temp dir)")
    ap.add_argument("--origins", type=int, default=26)
    ap.add_argument("--weeks", type=int, default=8)
    args = ap.parse_args(argv)
    now = utcnow()
    db = args.db
    if db is None:
        from lib.ledger.demo import build_demo
        db = Path(tempfile.mkdtemp()) / "demo.duckdb"
        build_demo(db, now=now.replace(second=0, microsecond=0))
    t0 = time.perf_counter()
    scored = backtest(db, args.origins, args.weeks, now)
    print(f"ledger: {db}; {args.origins} forecast origins, {args.weeks} weeks ahead; "
          f"{time.perf_counter() - t0:.1f} s")
    print("\n".join(table(scored)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
