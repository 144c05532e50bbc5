"""What counting measured interruption events costs: the preemptible interruption rate (read at every
decision), the Recovery planner's rates and its lost work, counts only (before) against events where
a run has them (now), on one demo ledger in one run.

    python -m bench.bench_interruption_rate [--runs 200000] [--events-share 0.5] [--rounds 5]

The demo history (lib.ledger.demo) records interruption counts only; this bench then records, for
`--events-share` of the interrupted preemptible runs, one interruption event per counted
interruption (as `recover` or an sacct import would), each attempt ending evenly spaced through the
run, with a checkpoint record in every second attempt. Timings are wall milliseconds per call on one
open connection (as the gate and the dashboard each hold one per unit of work), best of `--rounds`
rounds with old and new interleaved: this machine is shared.
"""
from __future__ import annotations

import argparse
import datetime as dt
import tempfile
import time
from pathlib import Path

from lib.dashboard.filters import Filters
from lib.dashboard.lost_work_queries import lost_work
from lib.dashboard.reading import reader
from lib.dashboard.recovery_view import finished_runs_cte
from lib.ledger.connection import open_ledger
from lib.ledger.demo import build_demo
from lib.ledger.state import interruption_rate
from tests.fixtures_gate import NOW

# the rate before measured events (lib.ledger.state.interruption_rate as it was), verbatim
OLD_RATE = (
    "SELECT count(*) FILTER (WHERE team = $team), sum(actual_gpu_hours) FILTER (WHERE team = $team), "
    "sum(interruptions) FILTER (WHERE team = $team), count(*), sum(actual_gpu_hours), sum(interruptions) "
    "FROM runs WHERE capacity = 'preemptible' AND ended_at > $since AND ended_at <= $now "
    "AND interruptions IS NOT NULL AND actual_gpu_hours > 0")
# the planner's rows before measured events (recovery_view.recovery_inputs' CTE as it was)
OLD_FIN = """WITH fin AS (
  SELECT r.team, r.capacity, r.gpus, r.actual_gpu_hours, r.actual_gpu_hours / r.gpus AS run_hours,
         r.interruptions, r.restarts, r.act_retry_gpu_hours
  FROM runs r WHERE {where} AND r.ended_at >= $start AND r.ended_at < $end
    AND r.actual_gpu_hours > 0 AND r.gpus > 0 AND r.interruptions IS NOT NULL)"""
RATES = " SELECT team, capacity, count(*), sum(interruptions), sum(run_hours) FROM fin GROUP BY ALL"

EVENTS = """
INSERT INTO interruptions (run_id, event, occurred_at, attempt, attempt_started_at, attempt_gpu_hours,
                           lost_gpu_hours, source, recorded_at)
SELECT run_id, 'preempted', started_at + (ended_at - started_at) * k / (interruptions + 1), k,
       started_at + (ended_at - started_at) * (k - 1) / (interruptions + 1),
       actual_gpu_hours / (interruptions + 1), actual_gpu_hours / (interruptions + 1) / 4, 'sacct', now()
FROM runs, range(1, interruptions + 1) AS t(k)
WHERE capacity = 'preemptible' AND interruptions > 0 AND started_at IS NOT NULL AND ended_at > started_at
  AND hash(run_id) % 1000 < $share"""
CHECKPOINTS = """
INSERT INTO checkpoints (run_id, name, saved_at, recorded_at)
SELECT run_id, 'ckpt-' || attempt, attempt_started_at + (occurred_at - attempt_started_at) / 2, now()
FROM interruptions WHERE attempt % 2 = 0"""


def best_ms(fn, rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=200_000)
    ap.add_argument("--events-share", type=float, default=0.5)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "bench.duckdb"
        build_demo(db, runs=args.runs, seed=0, now=NOW)
        with open_ledger(db) as con:
            con.execute(EVENTS, {"share": int(args.events_share * 1000)})
            con.execute(CHECKPOINTS)
            n_events, n_runs = con.execute("SELECT count(*), count(DISTINCT run_id) FROM interruptions").fetchone()
            n_ckpt = con.execute("SELECT count(*) FROM checkpoints").fetchone()[0]
            teams = [t for (t,) in con.execute("SELECT team FROM teams ORDER BY team").fetchall()]
        last = NOW.date()
        periods = {"28 days": Filters(last - dt.timedelta(days=27), last),
                   "2 years": Filters(last - dt.timedelta(days=729), last)}
        print(f"demo ledger: {args.runs:,} runs; {n_events:,} interruption events on {n_runs:,} runs, "
              f"{n_ckpt:,} checkpoint records; best of {args.rounds} rounds, ms per call")
        print(f"{'what':<44}{'before (counts)':>17}{'now (events)':>15}")
        since = NOW - dt.timedelta(days=365)
        with reader(db) as con:
            for team in (teams[0], teams[-1]):
                p = {"team": team, "since": since, "now": NOW}
                old = best_ms(lambda: con.execute(OLD_RATE, p).fetchone(), args.rounds)
                new = best_ms(lambda: interruption_rate(con, team, NOW), args.rounds)
                print(f"{'interruption_rate (' + team + ')':<44}{old:>17.2f}{new:>15.2f}")
            for name, f in periods.items():
                where, p = f.where("r")
                p.update(start=f.start, end=f.end)
                old = best_ms(lambda: con.execute(OLD_FIN.format(where=where) + RATES, p).fetchall(), args.rounds)
                new = best_ms(lambda: con.execute(finished_runs_cte(where) + RATES, p).fetchall(), args.rounds)
                print(f"{'planner rates, ' + name:<44}{old:>17.2f}{new:>15.2f}")
        for name, f in periods.items():   # a new read model: no before; it opens the ledger itself
            ms = best_ms(lambda: lost_work(f, db), args.rounds)
            att = int(lost_work(f, db)["groups"]["attempts"].sum())
            print(f"{f'lost work, {name} ({att:,} attempts)':<44}{'—':>17}{ms:>15.2f}")


if __name__ == "__main__":
    main()
