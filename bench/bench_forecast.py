"""Backtest of the weekly demand forecast — the model chosen per team (new), simple exponential
smoothing with α 0.3 (old) and the naive baseline side by side, in one run — and how spend counted at a
run's end relates to demand counted at its start.

    python -m bench.bench_forecast [--db PATH] [--seeds 5] [--noise 0.1 0.2] [--origins 26] [--weeks 26]
                                   [--no-demo] [--cost | --cost-only] [--old REV] [--repeat 3]

1. Generated histories (tests/fixtures_forecast.py), per noise level (log-sd of the weekly noise) and
   seed: three years of a team growing 40 % a year, a team with a step up and a year-end dip, and a
   steady team. Forecasts as of each of the last --origins weeks with --weeks weeks of outcome after
   them, from the history up to then only (refitted), against what followed.
2. The demo history (built into a temp file), or --db: forecasts as of past Mondays through
   lib.ledger.forecast.forecast(as_of), from what the ledger knew then, against what followed.
Per horizon: the share of team-weeks whose actual fell at or under P90 (goal 85-95 % at every horizon
up to 26) and the median absolute percentage error (MdAPE) of P50, new / old / naive ("P50 = mean of
the last 4 weeks, P90 = their maximum"). Per kind of generated team: P50 MdAPE and its gain over naive
(goal: at least 15 % lower on growing teams, no worse on steady ones), beside the noise floor (the
MdAPE of a forecaster that knew the expected demand) and the models chosen.
3. Spend and demand on the ledger: per team and complete month, GPU-hours of runs that ended in it ÷
   GPU-hours of runs that started in it, and the GPU-hour-weighted run duration; today's burn-down weekly
   rate beside the weekly P50, new and old (the old burn-down: k-day sums of the last 91 days' spend).
4. With --cost (--cost-only: nothing else): statsmodels' cold import, a team's fit, and `python -m lib
   forecast` beyond process start (its wall time less that of `python -m lib --help`) on the ledger, the
   old code (git revision --old, before the model cache) and the new side by side: with no model cache
   file, with the one the last forecast left, and with one team's entry taken out of it.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lib.gate.terms import month_start, next_month_start, utcnow  # noqa: E402
from lib.ledger.connection import open_ledger  # noqa: E402
from lib.ledger.forecast import forecast, model_cache, week_start, weekly_usage  # noqa: E402
from lib.planning.forecast import cache as forecast_cache, models as forecast_models  # noqa: E402
from lib.planning.forecast.demand import MAX_WEEKS, naive_forecast, team_forecast  # noqa: E402
from lib.planning.forecast.models import fit_team  # noqa: E402
from tests.fixtures_forecast import KINDS, expected_demand, generated_histories  # noqa: E402

HISTORY_WEEKS = 156                 # generated histories: three years
LAST_MONDAY = dt.date(2026, 11, 23)
SHOWN_HORIZONS = (1, 2, 3, 4, 6, 8, 10, 13, 17, 21, 26)
OLD_REV = "7a3e3be"                 # the forecast before the log-trend candidates and the model cache


# --------------------------------------------------------------------------- the old method, for comparison

OLD_ALPHA, OLD_INIT, OLD_ORIGINS, OLD_BURN_DAYS = 0.3, 4, 52, 91


def old_forecast(weekly, horizons: int) -> list[tuple[float, float]]:
    """(P50, P90) per horizon as the forecast had them before: SES α 0.3, the level times the 50th / 90th
    percentiles of y[t+h] / L[t] over the last 52 origins."""
    y = np.asarray(weekly, dtype=float)
    levels = np.empty_like(y)
    level = 0.0
    for i, v in enumerate(y):
        level = OLD_ALPHA * v + (1 - OLD_ALPHA) * level if i >= OLD_INIT else float(y[: i + 1].mean())
        levels[i] = level
    last = float(levels[-1]) if y.size else 0.0
    out = []
    for h in range(1, horizons + 1):
        t = np.arange(OLD_INIT - 1, y.size - h)[-OLD_ORIGINS:]
        t = t[levels[t] > 0]
        r = y[t + h] / levels[t]
        out.append(tuple(last * np.quantile(r, [0.5, 0.9])) if r.size else (last, last))
    return out


# --------------------------------------------------------------------------- scoring

def score(rows) -> dict:
    """rows: (actual, new p50, new p90, old p50, old p90, naive p50, naive p90) -> coverage and MdAPE."""
    a = np.array(rows, dtype=float)
    y = a[:, 0]
    pos = y > 0
    out = {"n": len(a)}
    for i, name in ((1, "new"), (3, "old"), (5, "naive")):
        out[f"cover_{name}"] = float(np.mean(y <= a[:, i + 1]))
        out[f"mdape_{name}"] = float(np.median(np.abs(a[pos, i] - y[pos]) / y[pos])) if pos.any() else float("nan")
    return out


def horizon_table(scored: dict, title: str) -> list[str]:
    lines = [title, f"{'horizon':>7} {'team-weeks':>10} | {'P90 covers: new':>15} {'old':>6} {'naive':>6} | "
                    f"{'P50 MdAPE: new':>14} {'old':>6} {'naive':>6}"]
    stats = {h: score(rows) for h, rows in scored.items() if rows}
    for h in [h for h in SHOWN_HORIZONS if h in stats]:
        s = stats[h]
        lines.append(f"{h:>7} {s['n']:>10,} | {s['cover_new']:>15.1%} {s['cover_old']:>6.1%} {s['cover_naive']:>6.1%} | "
                     f"{s['mdape_new']:>14.1%} {s['mdape_old']:>6.1%} {s['mdape_naive']:>6.1%}")
    if stats:
        def span(key):
            v = [s[key] for s in stats.values()]
            return f"{min(v):.0%}-{max(v):.0%}"
        lines.append(f"{'1-' + str(max(stats)):>7} {'':>10} | {span('cover_new'):>15} {span('cover_old'):>6} "
                     f"{span('cover_naive'):>6} | (P90 coverage: lowest-highest over every horizon)")
        goal = all(0.85 <= s["cover_new"] <= 0.95 for s in stats.values())
        lines.append(f"P90 of the new model within 85-95 % at every horizon: {'met' if goal else 'NOT met'}")
    return lines


# --------------------------------------------------------------------------- 1. generated histories

def generated(seeds: int, noise: float, origins: int, weeks: int) -> tuple[dict, dict, Counter]:
    """Per horizon the scored rows (all kinds), per kind the rows plus the noise floor's errors, and the
    models chosen per kind."""
    by_h = {h: [] for h in range(1, weeks + 1)}
    by_kind = {k: {"rows": [], "floor": [], "seeds": {}} for k in KINDS}
    chosen = Counter()
    for seed in range(seeds):
        series = generated_histories(seed, HISTORY_WEEKS, LAST_MONDAY, noise)
        expected = expected_demand(seed, HISTORY_WEEKS, LAST_MONDAY)
        for kind, y in series.items():
            for k in range(origins):
                origin = HISTORY_WEEKS - weeks - k            # history y[:origin]; outcomes y[origin:origin+weeks]
                last = LAST_MONDAY - dt.timedelta(weeks=HISTORY_WEEKS - origin)
                model = fit_team(y[:origin], last)
                chosen[(kind, model["name"])] += 1
                new = team_forecast(model, last + dt.timedelta(weeks=1))["weeks"]
                old = old_forecast(y[:origin], weeks)
                n50, n90 = naive_forecast(y[:origin])
                for h in range(1, weeks + 1):
                    actual = y[origin + h - 1]
                    row = (actual, new[h - 1]["p50_gpu_hours"], new[h - 1]["p90_gpu_hours"], *old[h - 1], n50, n90)
                    by_h[h].append(row)
                    by_kind[kind]["rows"].append(row)
                    by_kind[kind]["seeds"].setdefault(seed, []).append(row)
                    median = expected[kind][origin + h - 1] * np.exp(-noise ** 2 / 2)
                    by_kind[kind]["floor"].append(abs(median - actual) / actual)
    return by_h, by_kind, chosen


def kind_table(by_kind: dict, chosen: Counter) -> list[str]:
    lines = [f"{'team':>9} | {'P50 MdAPE: new':>14} {'old':>6} {'naive':>6} {'floor':>6} | "
             f"{'vs naive: new':>13} {'old':>6} | models chosen (origins)"]
    for kind, d in by_kind.items():
        s = score(d["rows"])
        gain_new, gain_old = 1 - s["mdape_new"] / s["mdape_naive"], 1 - s["mdape_old"] / s["mdape_naive"]
        models = ", ".join(f"{m} {n}" for (k, m), n in sorted(chosen.items()) if k == kind)
        lines.append(f"{kind:>9} | {s['mdape_new']:>14.1%} {s['mdape_old']:>6.1%} {s['mdape_naive']:>6.1%} "
                     f"{float(np.median(d['floor'])):>6.1%} | {-gain_new:>+13.0%} {-gain_old:>+6.0%} | {models}")
    for kind, d in by_kind.items():
        gains = [1 - (s := score(rows))["mdape_new"] / s["mdape_naive"] for rows in d["seeds"].values()]
        lines.append(f"{kind:>9} | new vs naive per seed: " + " ".join(f"{-g:+.0%}" for g in gains))
    grow, steady = score(by_kind["growing"]["rows"]), score(by_kind["steady"]["rows"])
    lines.append("P50 error at least 15 % below naive on the growing team: "
                 f"{'met' if grow['mdape_new'] <= 0.85 * grow['mdape_naive'] else 'NOT met'}; "
                 f"no worse on the steady team: {'met' if steady['mdape_new'] <= steady['mdape_naive'] else 'NOT met'}")
    return lines


# --------------------------------------------------------------------------- 2. a ledger

def ledger_backtest(db, origins: int, weeks: int, now: dt.datetime) -> tuple[dict, Counter]:
    """Per horizon the scored rows of forecasts made as of past Mondays from what the ledger knew then."""
    with open_ledger(db, read_only=True) as con:
        outcome = weekly_usage(con, now)
    actual = {(r.team, r.week): r.gpu_hours for r in outcome.itertuples()}
    first_origin = week_start(now) - dt.timedelta(weeks=weeks)
    scored = {h: [] for h in range(1, weeks + 1)}
    chosen = Counter()
    for k in range(origins):
        as_of = dt.datetime.combine(first_origin - dt.timedelta(weeks=k), dt.time())
        made = forecast(db, as_of=as_of, weeks=weeks)
        known = made["history"]
        for team, entry in made["teams"].items():
            history = known.loc[known["team"] == team, "gpu_hours"].to_numpy(float)
            if history.size < 8:
                continue
            chosen[entry["model"]] += 1
            old = old_forecast(history, weeks)
            n50, n90 = naive_forecast(history)
            for row in entry["weeks"]:
                y = actual.get((team, row["week_start"]))
                if y is not None:
                    scored[row["horizon"]].append((y, row["p50_gpu_hours"], row["p90_gpu_hours"],
                                                   *old[row["horizon"] - 1], n50, n90))
    return scored, chosen


def spend_and_demand(db, now: dt.datetime) -> list[str]:
    """Per team: spend ÷ demand over complete months, the GPU-hour-weighted run duration, and today's
    burn-down weekly rate beside the weekly P50, new and old."""
    month0 = month_start(now)
    with open_ledger(db, read_only=True) as con:
        rows = con.execute("""
            WITH m AS (
              SELECT team, date_trunc('month', ended_at) AS month, sum(actual_gpu_hours) AS spend FROM runs
              WHERE ended_at IS NOT NULL AND ended_at < $m0 GROUP BY ALL),
            d AS (
              SELECT team, date_trunc('month', started_at) AS month, sum(actual_gpu_hours) AS demand FROM runs
              WHERE ended_at IS NOT NULL AND started_at < $m0 GROUP BY ALL)
            SELECT team, quantile_cont(spend / demand, [0.1, 0.5, 0.9]), count(*)
            FROM m JOIN d USING (team, month)
            WHERE month > (SELECT min(month) FROM d d2 WHERE d2.team = d.team) AND demand > 0
            GROUP BY team ORDER BY team""", {"m0": month0}).fetchall()
        durations = dict(con.execute("""
            SELECT team, sum(actual_gpu_hours * date_diff('second', started_at, ended_at)) / 3600 / sum(actual_gpu_hours)
            FROM runs WHERE ended_at IS NOT NULL AND started_at IS NOT NULL AND actual_gpu_hours > 0
            GROUP BY team""").fetchall())
        day0 = dt.datetime.combine(now.date(), dt.time())
        daily = {}
        for team, day, hours in con.execute(
                "SELECT team, date_diff('day', $first, date_trunc('day', ended_at)), sum(actual_gpu_hours) FROM runs "
                "WHERE ended_at >= $first AND ended_at < $day0 GROUP BY ALL",
                {"first": day0 - dt.timedelta(days=OLD_BURN_DAYS), "day0": day0}).fetchall():
            daily.setdefault(team, np.zeros(OLD_BURN_DAYS))[day] = hours or 0.0
        history = weekly_usage(con, now, live=True)
    result = forecast(db, as_of=now, weeks=MAX_WEEKS, live=True)
    days_left = (next_month_start(now).date() - now.date()).days
    lines = [f"{'team':>13} | {'spend ÷ demand, months: P10':>27} {'P50':>5} {'P90':>5} {'months':>6} | "
             f"{'run hours (GPU-h weighted)':>26} | {'weekly P50: new':>15} {'burn-down':>9} | "
             f"{'old weekly':>10} {'old burn-down':>13}"]
    for team, q, n in rows:
        entry = result["teams"].get(team)
        if entry is None or "burn_down" not in entry:
            continue
        b = entry["burn_down"]
        new_rate = (b["p50_month_end_gpu_hours"] - b["consumed_gpu_hours"]) / b["days_left"] * 7
        first = week_start(now)
        new_p50 = np.mean([entry["weeks"][(now.date() + dt.timedelta(days=i) - first).days // 7]["p50_gpu_hours"]
                           for i in range(days_left)])
        y = history.loc[history["team"] == team, "gpu_hours"].to_numpy(float)
        old_p50 = old_forecast(y, 1)[0][0]
        d = daily.get(team, np.zeros(OLD_BURN_DAYS))
        old_rate = float(np.median(np.convolve(d, np.ones(days_left), mode="valid"))) / days_left * 7
        lines.append(f"{team:>13} | {q[0]:>27.2f} {q[1]:>5.2f} {q[2]:>5.2f} {n:>6} | {durations.get(team, 0):>26.1f} | "
                     f"{new_p50:>15,.0f} {new_rate:>9,.0f} | {old_p50:>10,.0f} {old_rate:>13,.0f}")
    return lines


# --------------------------------------------------------------------------- 4. cost

def wall(cmd: list[str], cwd=ROOT) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, cwd=cwd, check=True, capture_output=True)
    return time.perf_counter() - t


def old_tree(rev: str) -> Path:
    """The code at git revision `rev`, unpacked in a temp dir (its `python -m lib` is the old command)."""
    out = Path(tempfile.mkdtemp()) / "old"
    out.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(out)], input=archive, check=True)
    return out


def cost(db, old_rev: str, repeat: int) -> list[str]:
    """statsmodels' import, a team's fits, and `python -m lib forecast` beyond process start (its wall time
    less that of `python -m lib --help` from the same tree), old (`old_rev`) vs new, interleaved, median of
    `repeat`: with no model cache file (the first forecast after every team's history changed), with the
    file the last forecast left (no history changed), and with one team's entry taken out of it (one
    team's history changed: that team is fitted, so statsmodels is imported)."""
    py = sys.executable
    imp = ("import time, pandas, duckdb; t = time.perf_counter(); "
           "import statsmodels.tsa.exponential_smoothing.ets; print(time.perf_counter() - t)")
    imports = [float(subprocess.run([py, "-c", imp], capture_output=True, text=True, check=True).stdout) for _ in range(3)]
    with open_ledger(db, read_only=True) as con:
        usage = weekly_usage(con, utcnow(), live=True)
    first = week_start(utcnow())
    forecast_models._blas_threads()                 # imports statsmodels: the fits below are fits only
    fits, keys = [], []
    for _, g in usage.groupby("team"):
        forecast_models._fit_cached.cache_clear()
        t = time.perf_counter()
        fit_team(g["gpu_hours"].to_numpy(float), first - dt.timedelta(weeks=1))
        fits.append(time.perf_counter() - t)
        keys.append(forecast_cache.model_key(g["gpu_hours"].to_numpy(float), first - dt.timedelta(weeks=1)))
    old = old_tree(old_rev)
    cache = model_cache(db)
    cmd = [py, "-m", "lib", "--db", str(Path(db).resolve()), "forecast", "--weeks", str(MAX_WEEKS)]
    help_cmd = [py, "-m", "lib", "--help"]
    wall(cmd)                                       # leaves the cache file of every team's current history
    full = cache.read_text()
    entries = json.loads(full)["entries"]
    assert keys[0] in entries, "the forecast left no entry for the first team's history"
    one_out = json.dumps({"format": forecast_cache.FORMAT,
                          "entries": {k: v for k, v in entries.items() if k != keys[0]}})
    cases = (("no model cache file (every history changed)", None),
             ("the cache file the last forecast left (none changed)", full),
             ("one team's entry taken out (its history changed)", one_out))
    lines = [f"statsmodels ETS cold import (pandas and duckdb loaded): median {statistics.median(imports):.2f} s",
             f"one team's fits (3 ETS fits + backtest), {len(fits)} teams: "
             f"median {statistics.median(fits) * 1000:.0f} ms, "
             f"total {sum(fits):.2f} s",
             f"python -m lib forecast --weeks {MAX_WEEKS} beyond process start (less `python -m lib --help`), "
             f"median of {repeat} (goal < 3 s); old: {old_rev}",
             f"{'case':>55} | {'old':>6} {'new':>6} | {'process start: old':>18} {'new':>5}"]
    for name, content in cases:
        got = {"old": [], "new": [], "old help": [], "new help": []}
        for _ in range(repeat):
            got["old help"].append(wall(help_cmd, old))
            got["old"].append(wall(cmd, old))
            got["new help"].append(wall(help_cmd))
            if content is None:
                cache.unlink(missing_ok=True)
            else:
                cache.write_text(content)
            got["new"].append(wall(cmd))
        m = {k: statistics.median(v) for k, v in got.items()}
        lines.append(f"{name:>55} | {m['old'] - m['old help']:>5.2f}s {m['new'] - m['new help']:>5.2f}s | "
                     f"{m['old help']:>17.2f}s {m['new help']:>4.2f}s")
    lines.append(f"load average over the last minute at the end: {os.getloadavg()[0]:.1f} (2 cores)")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", help="ledger to score (default: the demo history, built in a temp dir)")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--noise", type=float, nargs="*", default=[0.1, 0.2])
    ap.add_argument("--origins", type=int, default=26)
    ap.add_argument("--weeks", type=int, default=MAX_WEEKS)
    ap.add_argument("--no-demo", action="store_true", help="generated histories only")
    ap.add_argument("--cost", action="store_true", help="also time the import, the fits and the command")
    ap.add_argument("--old", default=OLD_REV, help=f"git revision of the old command for --cost (default {OLD_REV})")
    ap.add_argument("--cost-only", action="store_true", help="only the timings of --cost (on --db or the demo)")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each command for --cost (median)")
    args = ap.parse_args(argv)
    args.cost = args.cost or args.cost_only
    for noise in [] if args.cost_only else args.noise:
        t0 = time.perf_counter()
        by_h, by_kind, chosen = generated(args.seeds, noise, args.origins, args.weeks)
        print("\n".join(horizon_table(by_h, f"\n== generated histories, weekly noise log-sd {noise}: {args.seeds} seeds "
                                             f"x 3 teams x {args.origins} origins ({time.perf_counter() - t0:.0f} s)")))
        print("\n".join(kind_table(by_kind, chosen)))
    if args.no_demo and not args.db:
        return 0
    now = utcnow().replace(second=0, microsecond=0)
    db = args.db
    if db is None:
        from lib.ledger.demo import build_demo
        db = Path(tempfile.mkdtemp()) / "demo.duckdb"
        build_demo(db, now=now)
    if args.cost_only:
        print("\n== cost")
        print("\n".join(cost(db, args.old, args.repeat)))
        return 0
    t0 = time.perf_counter()
    scored, chosen = ledger_backtest(db, args.origins, args.weeks, now)
    print("\n".join(horizon_table(scored, f"\n== ledger {db}: {args.origins} origins "
                                          f"({time.perf_counter() - t0:.0f} s); models chosen: "
                                          + ", ".join(f"{m} {n}" for m, n in chosen.most_common()))))
    print("\n== spend (counted at a run's end) and demand (at its start)")
    print("\n".join(spend_and_demand(db, now)))
    if args.cost:
        print("\n== cost")
        print("\n".join(cost(db, args.old, args.repeat)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
