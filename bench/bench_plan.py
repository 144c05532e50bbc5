"""Forward plan speed: a queue of waiting requests planned through `decide` (lib.planning.plan.forward), and
`python -m lib plan` on a demo ledger.

    python bench/bench_plan.py [--requests 1000 5000 20000] [--db LEDGER ...] [--repeat 3]

1. Generated queues (seeded): the teams of data/teams.toml, each holding some of its quota, its month's
   budget partly spent, and N waiting requests of every kind (1-8 accelerators, 2-400 GPU-h, some with
   pilots on preemptible capacity, some over a cap or their budget), planned 14 days ahead. Side by
   side: the queue as it was (each row alone: lib.gate.capacity.fit_for_reasons on the recorded reasons,
   once per distinct team, kind, accelerators and reasons) and the plan (every row decided again, in
   serve order, each seeing the others), without and with a pool (the sum of the quotas / 1.5) and a
   maintenance window. Times are CPU-bound, in this process: median of --repeat.
2. Each --db ledger: `python -m lib plan --days 14` in its own process, its wall time less that of
   `python -m lib --help` (process start and imports), median of --repeat.
Targets: 5,000 waiting requests < 5 s; the plan of a 10^7-run ledger < 2 s beyond process start.
"""
from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lib.gate.calibration import calibrate  # noqa: E402
from lib.gate.capacity import fit_for_reasons  # noqa: E402
from lib.gate.terms import KINDS, month_start  # noqa: E402
from lib.ledger.teams_file import load_teams_file  # noqa: E402
from lib.planning.plan.forward import forward_plan  # noqa: E402

NOW = datetime(2026, 12, 15, 12, 0)
QUEUE_TARGET_S, LEDGER_TARGET_S = 5.0, 2.0


def generated_inputs(n: int, seed: int = 1, pools: bool = False) -> tuple[dict, list[list[str]]]:
    """(plan inputs with n waiting requests, each request's recorded reason codes)."""
    rng = random.Random(seed)
    parsed = load_teams_file()
    policies = {t["team"]: {k: v for k, v in t.items() if k != "colour"} for t in parsed["teams"]}
    snaps = {None: {s["snapshot"] for s in parsed["snapshots"]}}
    held, waiting, recorded = [], [], []
    for team, p in policies.items():
        used = 0
        while used < p["reserved_gpus"] * rng.uniform(0.4, 0.9):
            g = rng.choice((1, 2, 4, 8))
            used += g
            held.append({"run_id": f"{team}-held-{len(held):05d}", "team": team, "kind": rng.choice(KINDS), "gpus": g,
                         "capacity": "stable", "reserved_gpu_hours": 10.0 * g, "reserved_from": NOW - timedelta(hours=2),
                         "reserved_until": NOW + timedelta(hours=rng.uniform(0.5, 72))})
    teams = sorted(policies)
    for i in range(n):
        team = rng.choice(teams)
        p = policies[team]
        kind = rng.choice(("exploratory", "exploratory", "production", "retraining"))
        gpus = rng.choice((1, 2, 2, 4, 4, 8, 8, 16))
        est = round(rng.uniform(2, 400), 1)
        req = {"run_id": f"{team}-wait-{i:06d}", "team": team, "kind": kind, "gpus": gpus, "gpu_mem_gb": 80,
               "max_runtime_hours": min(p["max_runtime_hours"], 72), "budget_gpu_hours": round(est * rng.uniform(0.8, 3), 1),
               "checkpoint_supported": True, "expected_interruptions": 0, "capacity": "stable",
               "data_snapshot": sorted(snaps[None])[0], "estimated_gpu_hours": est}
        if kind == "production":
            req["holdout_allowance"] = 1
        if rng.random() < 0.15:
            sps = round(rng.uniform(1, 4), 2)
            req.pop("estimated_gpu_hours")
            req.update(capacity="preemptible", expected_interruptions=0.5, pilot={
                "steps_per_second": sps, "planned_steps": max(100, int(est / gpus * 3600 * sps * 0.9)),
                "peak_mem_gb": 60.0, "checkpoint_write_s": 30.0, "checkpoint_interval_steps": 1000,
                "eval_gpu_hours": 1.0 if kind == "production" else 0.0})
        since = NOW - timedelta(hours=rng.uniform(0.1, 24 * 13))
        waiting.append({"run_id": req["run_id"], "team": team, "kind": kind, "gpus": gpus, "capacity": req["capacity"],
                        "waiting_since": since, "expires_at": since + timedelta(days=14), "request": req})
        recorded.append(rng.choice((["capacity"], ["period-budget"], ["capacity", "retraining-protection"], ["budget"])))
    no_history = calibrate([], "", "")
    inputs = {"as_of": NOW, "policies": policies, "held": sorted(held, key=lambda r: r["run_id"]), "waiting": waiting,
              "spent": {(t, month_start(NOW)): p["monthly_budget_gpu_hours"] * rng.uniform(0.2, 0.95)
                        for t, p in policies.items()},
              "snapshots": snaps, "calibrations": {(t, k): no_history for t in policies for k in KINDS},
              "interruption_rates": {}, "pools": {}, "windows": []}
    if pools:
        quotas = sum(p["reserved_gpus"] for p in policies.values())
        inputs["pools"] = {"stable": int(quotas / 1.5), "preemptible": 64}
        inputs["windows"] = [{"name": "maintenance", "start": NOW + timedelta(days=3), "end": NOW + timedelta(days=3, hours=8),
                              "gpus": int(quotas / 3), "pool": "stable", "accounts": [], "users": []}]
    return inputs, recorded


def each_row_alone(inputs: dict, recorded: list[list[str]]) -> int:
    """The queue as it was: each row's earliest fit from its recorded reasons, over the reservations held
    now, once per distinct (team, kind, accelerators, reasons). Returns the rows reckoned."""
    by_team: dict = {}
    for r in inputs["held"]:
        by_team.setdefault(r["team"], []).append(r)
    seen = {}
    for w, codes in zip(inputs["waiting"], recorded):
        key = (w["team"], w["kind"], w["gpus"], tuple(codes))
        if key not in seen:
            p = inputs["policies"][w["team"]]
            seen[key] = fit_for_reasons(NOW, codes, w["kind"], p["reserved_gpus"], p["retraining_reserved_gpus"],
                                        by_team.get(w["team"], []), w["gpus"])
    return len(inputs["waiting"])


def timed(fn, repeat: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeat):
        t = time.process_time()
        out = fn()
        times.append(time.process_time() - t)
    return statistics.median(times), out


def run_cli(args: list[str]) -> float:
    env = dict(os.environ, GATE_DEMO="0")
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "lib", *args], cwd=ROOT, env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, nargs="+", default=[1000, 5000, 20000])
    ap.add_argument("--db", nargs="*", default=[])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    print(f"{'waiting':>8} | {'each row alone (s)':>18} | {'plan (s)':>9} | {'decisions':>9} | {'planned':>8} | "
          f"{'plan, pool + window (s)':>23} | {'decisions':>9} | {'planned':>8} | target")
    for n in args.requests:
        inputs, recorded = generated_inputs(n)
        alone, _ = timed(lambda: each_row_alone(inputs, recorded), args.repeat)
        t_plan, plan = timed(lambda: forward_plan(inputs, 14), args.repeat)
        pooled, _ = generated_inputs(n, pools=True)
        t_pool, plan_p = timed(lambda: forward_plan(pooled, 14), args.repeat)
        planned = sum(r["planned_start"] is not None for r in plan["queue"])
        planned_p = sum(r["planned_start"] is not None for r in plan_p["queue"])
        ok = "met" if n != 5000 or max(t_plan, t_pool) < QUEUE_TARGET_S else "MISSED"
        print(f"{n:>8,} | {alone:>18.3f} | {t_plan:>9.3f} | {plan['decisions']:>9,} | {planned:>8,} | "
              f"{t_pool:>23.3f} | {plan_p['decisions']:>9,} | {planned_p:>8,} | "
              + (f"< {QUEUE_TARGET_S:g} s: {ok}" if n == 5000 else ""), flush=True)
    if args.db:
        print(f"\n{'ledger':<40} | {'plan --days 14, beyond start (s)':>32} | {'--help (s)':>10} | target")
        for db in args.db:
            start = statistics.median(run_cli(["--help"]) for _ in range(args.repeat))
            whole = statistics.median(run_cli(["--db", db, "plan", "--days", "14"]) for _ in range(args.repeat))
            beyond = whole - start
            print(f"{Path(db).name:<40} | {beyond:>32.2f} | {start:>10.2f} | < {LEDGER_TARGET_S:g} s: "
                  + ("met" if beyond < LEDGER_TARGET_S else "MISSED"), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
