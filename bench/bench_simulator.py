"""Throughput of the Monte Carlo simulator: vectorised numpy against a plain-Python loop, in one run.

    python bench/bench_simulator.py [--runs 100000] [--loop-runs 5000]

Same inputs for both (a 24 h job, 8 GPUs, 1 h checkpoint interval, 5 min checkpoints, 15 min restarts,
6 min waits), fewer runs for the loop; rates in simulated runs per second. Then the time of 100 000
runs of the 24 h job at several mean times between interruptions.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from lib.planning.preemption import expected_time  # noqa: E402
from lib.planning.simulate import simulate, simulate_reference  # noqa: E402

JOB = dict(work_h=24.0, interval_h=1.0, checkpoint_h=5 / 60, restart_h=0.25, gpus=8)
DOWNTIME_H = 0.1


def timed(fn, repeat=3):
    best = float("inf")
    out = None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=100_000)
    ap.add_argument("--loop-runs", type=int, default=5_000)
    args = ap.parse_args()

    print(f"job: {JOB}, downtime_h={DOWNTIME_H}")
    print()
    print(f"{'mtbf_h':>7} {'impl':<12} {'runs':>8} {'seconds':>9} {'runs/s':>12} {'speed-up':>9} "
          f"{'mean T (h)':>11} {'closed form':>11}")
    for mtbf in (6.0, 1.35):
        closed = expected_time(JOB["work_h"], JOB["interval_h"], JOB["checkpoint_h"], JOB["restart_h"],
                               mtbf, DOWNTIME_H)["expected_hours"]
        t_vec, vec = timed(lambda: simulate(**JOB, mtbf_h=mtbf, downtime_h=DOWNTIME_H, runs=args.runs,
                                            seed=1))
        t_loop, loop = timed(lambda: simulate_reference(**JOB, mtbf_h=mtbf, downtime_h=DOWNTIME_H,
                                                        runs=args.loop_runs, seed=1), repeat=1)
        rate_vec = args.runs / t_vec
        rate_loop = args.loop_runs / t_loop
        loop_mean = sum(loop["completion_hours"]) / len(loop["completion_hours"])
        print(f"{mtbf:>7g} {'numpy':<12} {args.runs:>8} {t_vec:>9.3f} {rate_vec:>12,.0f} "
              f"{rate_vec / rate_loop:>8.1f}x {vec['completion_hours']['mean']:>11.3f} {closed:>11.3f}")
        print(f"{mtbf:>7g} {'python loop':<12} {args.loop_runs:>8} {t_loop:>9.3f} {rate_loop:>12,.0f} "
              f"{1.0:>8.1f}x {loop_mean:>11.3f} {closed:>11.3f}")

    print()
    print("100 000 runs of the 24 h job (best of 3), numpy:")
    print(f"{'mtbf_h':>7} {'E[N]':>8} {'rounds':>7} {'seconds':>9} {'under 1 s':>9}")
    for mtbf in (24.0, 6.0, 3.1, 1.35, 0.5):
        e = expected_time(JOB["work_h"], JOB["interval_h"], JOB["checkpoint_h"], JOB["restart_h"], mtbf,
                          DOWNTIME_H)
        t, out = timed(lambda: simulate(**JOB, mtbf_h=mtbf, downtime_h=DOWNTIME_H, runs=100_000, seed=1))
        print(f"{mtbf:>7g} {e['expected_interruptions']:>8.2f} {out['rounds']:>7} {t:>9.3f} "
              f"{'yes' if t < 1 else 'no':>9}")


if __name__ == "__main__":
    main()
