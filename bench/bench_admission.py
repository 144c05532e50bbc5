"""Decisions per second: the full decision vs the source's four-argument function, one run.

    python -m bench.bench_admission [--n 100000]

Both see the same 100 000 varied requests (stated estimates and pilots, all kinds, both capacities,
crowded and empty teams), in two mixes: `queue` (budgets and quotas mostly sufficient, most requests
admitted, as a real queue sees them) and `adversarial` (most requests break several checks, so every
decision formats several reasons). The full decision gets a precomputed calibration per team × kind,
as the ledger hands it, so the ratio measures the decision itself, not a history scan. Timings are
process CPU seconds, the three functions interleaved, best of 5 rounds: this machine is shared.
"""
from __future__ import annotations

import argparse
import random
import time

from lib.gate.admission import admit_training, decide
from lib.gate.calibration import calibrate
from tests.fixtures_gate import NOW, PILOT, history, policy, reservation


def source_admit_training(estimated_gpu_hours, budget_gpu_hours, checkpoint_supported, expected_interruptions):
    """Verbatim from the source document (with its NaN hole), as the baseline."""
    if min(estimated_gpu_hours, budget_gpu_hours, expected_interruptions) < 0:
        raise ValueError("resource values must be nonnegative")
    if estimated_gpu_hours > budget_gpu_hours:
        return {"state": "defer", "reason": "budget"}
    if expected_interruptions > 0 and not checkpoint_supported:
        return {"state": "defer", "reason": "no-recovery"}
    return {"state": "admit", "reserved_gpu_hours": estimated_gpu_hours}


def make_cases(n: int, seed: int = 0, mix: str = "queue"):
    rng = random.Random(seed)
    tight = mix == "adversarial"
    pol = policy()
    hist = history(ratios=[rng.lognormvariate(0.1, 0.3) for _ in range(40)]) + \
        history(kind="production", ratios=[rng.lognormvariate(0.2, 0.4) for _ in range(40)])
    cals = {k: calibrate(hist, "vision", k, now=NOW) for k in ("exploratory", "production", "retraining")}
    crowds = [[], [reservation(gpus=4)], [reservation("a", gpus=6), reservation("b", "retraining", 4)]]
    cases = []
    for i in range(n):
        kind = rng.choice(("exploratory", "production", "retraining"))
        req = {"run_id": f"r{i}", "team": "vision", "kind": kind,
               "gpus": rng.randint(1, 10) if tight else rng.choice((1, 2, 4)),
               "gpu_mem_gb": rng.choice((40, 80, 96)) if tight else rng.choice((40, 80)),
               "max_runtime_hours": rng.uniform(1, 90) if tight else rng.uniform(12, 70),
               "budget_gpu_hours": rng.uniform(0, 400) if tight else rng.uniform(200, 400),
               "checkpoint_supported": rng.random() < (0.8 if tight else 0.97),
               "expected_interruptions": rng.randint(0, 4), "data_snapshot": "imagenet-2026-11",
               "capacity": rng.choice(("stable", "preemptible"))}
        if rng.random() < 0.5:
            req["estimated_gpu_hours"] = rng.uniform(0, 400) if tight else rng.uniform(1, 45)
        else:
            req["pilot"] = {**PILOT, "planned_steps": rng.randint(1000, 200_000 if tight else 60_000)}
        st = {"now": NOW, "reservations": rng.choice(crowds if tight else crowds[:2]),
              "period_spent_gpu_hours": rng.uniform(0, 5000 if tight else 3000),
              "snapshots": {"imagenet-2026-11"}, "calibration": cals[kind]}
        cases.append((req, st))
    return pol, cases


def measure(n: int, mix: str, rounds: int = 5) -> list[tuple]:
    pol, cases = make_cases(n, mix=mix)
    four = [(r.get("estimated_gpu_hours", 50.0), r["budget_gpu_hours"], r["checkpoint_supported"],
             r["expected_interruptions"]) for r, _ in cases]
    fns = {
        "source admit_training (4 args, verbatim)": lambda: [source_admit_training(*a) for a in four],
        "lib.gate.admission.admit_training (validated)": lambda: [admit_training(*a) for a in four],
        "lib.gate.admission.decide (full decision)": lambda: [decide(r, pol, s) for r, s in cases],
    }
    best = dict.fromkeys(fns, float("inf"))
    outputs = {}
    for _ in range(rounds):
        for name, fn in fns.items():
            t0 = time.process_time()
            outputs[name] = fn()
            best[name] = min(best[name], time.process_time() - t0)
    states: dict[str, int] = {}
    for d in outputs["lib.gate.admission.decide (full decision)"]:
        states[d["state"]] = states.get(d["state"], 0) + 1
    return [(mix, name, sec, n / sec, best["source admit_training (4 args, verbatim)"], states)
            for name, sec in best.items()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    print(f"{args.n:,} requests per mix; CPU seconds, best of {args.rounds} interleaved rounds")
    print(f"{'mix':<12} {'function':<42} {'seconds':>8} {'decisions/s':>12} {'x source':>9}")
    for mix in ("queue", "adversarial"):
        rows = measure(args.n, mix, args.rounds)
        for _, name, sec, rate, base, states in rows:
            print(f"{mix:<12} {name:<42} {sec:>8.3f} {rate:>12,.0f} {sec / base:>9.1f}")
        print(f"{'':<12} full decisions: {states}")


if __name__ == "__main__":
    main()
