"""The kept queue against refuse-and-resubmit: one request stream run side by side through the gate as it
was without a queue (a deferred request is resubmitted by its user every hour until `decide` admits it
against what is held then: whoever fits at their try starts, later requests may jump ahead) and through
the gate's line (a deferred request waits in the line and starts at its turn: conservative backfill,
lib.planning.plan.forward's `lay_out`/`place`, a newcomer admitted only when `turn` places it now).

    python bench/bench_queue.py [--requests 400] [--seed 1] [--trace PHILLY_CSV --trace-requests 1500
                                [--trace-start 2017-10-09]] [--whole-line]

Streams:
1. synthetic (seeded): one team, quota 32 accelerators, requests for 1 to 32 accelerators arriving in
   bursts (a burst every ~8 h of ~11 requests within half an hour), estimated wall clock lognormal
   (median 3 h), time limit twice the estimate (at most 72 h);
2. with --trace, a Philly trace CSV (the columns of the public Philly traces as published by
   petuum/adaptdl: timestamp, duration s, num_gpus, gpu_time, cluster): its first --trace-requests
   arrivals from --trace-start, each virtual cluster a team whose quota is its P90 concurrent GPUs over
   the whole trace (each job counted from its submission for its duration); a job needing more than its
   VC's quota can never start and is left out (counted). The trace's duration is the actual run; its
   estimate is that × lognormal noise (the user's guess), its time limit twice the estimate at least the
   actual, whole hours. Skipped cleanly when the file is absent.
Every run: actual = estimate × lognormal(0, 0.5) (synthetic), capped by its time limit; it holds its
accelerators from its start until it ends, and the gate counts it until then (until its estimated end,
then until its time limit: the calibration has no history, factor 1, no upper bound). No budget binds,
no pools; teams are independent, so each is simulated alone.
Measured per size class: mean, P90 and max wait (hours, first submission to start), submissions per run,
and the GPU-hours the quotas ran while requests still arrived (first to last arrival), with the queue's
ratio to refuse-and-resubmit's. Goals: with the queue one submission per run; the largest class's P90 wait
at least halved; quota GPU-hours used >= 95 % of refuse-and-resubmit's.
The kept queue lays the line out (`place` in serve order on a `Line`) at each run end, each arrival that
finds room and each overrun; `--whole-line` lays out every waiting request at every event and planned
start instead (the same starts: see `kept_queue`). The CPU seconds of both simulations are printed.
"""
from __future__ import annotations

import argparse
import csv
import heapq
import math
import random
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lib.gate.admission import decide  # noqa: E402
from lib.gate.calibration import calibrate  # noqa: E402
from lib.gate.capacity import span_end  # noqa: E402
from lib.gate.terms import KINDS, month_start  # noqa: E402
from lib.planning.plan.forward import Placed, place, serve_key  # noqa: E402
from lib.planning.plan.line import Line  # noqa: E402
from lib.planning.plan.turn import as_waiting, turn  # noqa: E402

START = datetime(2026, 1, 5)
H = timedelta(hours=1)
SNAPSHOT = "bench-v1"
NO_HISTORY = calibrate([], "", "")     # factor 1, no upper bound
HORIZON_DAYS = 120                     # how far ahead the line places (a queue of day-long 32-GPU runs)
RESUBMIT = H                           # refuse-and-resubmit: a deferred user tries again an hour later
CLASSES = ((1, 1, "1"), (2, 4, "2-4"), (5, 8, "5-8"), (9, 32, "9-32"), (33, 10**6, "33+"))
GOAL_P90_RATIO, GOAL_USE_RATIO = 0.5, 0.95


def team_policy(team: str, quota: int, cap_hours: float) -> dict:
    """A plain team policy: quota `quota` accelerators, no set-aside, no budget or pilot that binds."""
    return {"team": team, "reserved_gpus": quota, "retraining_reserved_gpus": 0, "max_gpus_per_job": quota,
            "max_gpu_mem_gb": 80.0, "max_runtime_hours": cap_hours, "monthly_budget_gpu_hours": 1e12,
            "pilot_required_above_gpu_hours": 1e12, "budget_basis_production": "upper",
            "budget_basis_exploratory": "median", "budget_basis_retraining": "upper",
            "preemptible_partitions": [], "policy_version": "bench-queue", "queue_max_age_days": 3650}


def job(i: int, team: str, gpus: int, arrive: datetime, est_h: float, limit_h: float, actual_h: float) -> dict:
    """One run of a stream: its request as a user submits it, and the hours it actually runs."""
    req = {"run_id": f"{team}-{i:06d}", "team": team, "kind": "exploratory", "gpus": gpus, "gpu_mem_gb": 80,
           "max_runtime_hours": limit_h, "budget_gpu_hours": gpus * limit_h * 2 + 1, "checkpoint_supported": True,
           "expected_interruptions": 0, "data_snapshot": SNAPSHOT, "capacity": "stable",
           "estimated_gpu_hours": gpus * est_h}
    return {"id": req["run_id"], "team": team, "gpus": gpus, "arrive": arrive, "limit_h": limit_h,
            "actual_h": min(actual_h, limit_h), "request": req}


# ------------------------------------------------------------------------------------------ streams

def synthetic_stream(n: int, seed: int = 1, quota: int = 32) -> tuple[list[dict], dict[str, dict]]:
    """(n jobs of one team `synth` arriving in bursts, {team: policy})."""
    rng = random.Random(seed)
    sizes, weights = (1, 2, 4, 8, 16, 32), (50, 10, 15, 15, 7, 3)
    jobs, t = [], START
    while len(jobs) < n:
        for _ in range(min(n - len(jobs), max(1, int(rng.expovariate(1 / 11))))):
            est = min(48.0, max(0.25, rng.lognormvariate(math.log(3), 0.8)))
            limit = min(72.0, math.ceil(2 * est))
            arrive = t + timedelta(minutes=rng.uniform(0, 30))
            jobs.append(job(len(jobs), "synth", rng.choices(sizes, weights)[0], arrive, est, limit,
                            est * rng.lognormvariate(0, 0.5)))
        t += timedelta(hours=rng.expovariate(1 / 8))
    jobs.sort(key=lambda j: (j["arrive"], j["id"]))
    return jobs, {"synth": team_policy("synth", quota, 72.0)}


def p90_concurrent(rows: list[tuple[datetime, float, int]]) -> int:
    """P90 over time (time-weighted) of the GPUs held by jobs counted from submission for their duration."""
    steps = sorted([(t, g) for t, _, g in rows] + [(t + timedelta(seconds=d), -g) for t, d, g in rows])
    spans: dict[int, float] = {}
    held, prev = 0, None
    for t, dg in steps:
        if prev is not None and t > prev:
            spans[held] = spans.get(held, 0.0) + (t - prev).total_seconds()
        held, prev = held + dg, t
    total, acc = sum(spans.values()), 0.0
    for level in sorted(spans):
        acc += spans[level]
        if acc >= 0.9 * total:
            return max(1, level)
    return 1


def philly_stream(path: Path, n: int, start: datetime | None, seed: int = 1) -> tuple[list[dict], dict, int]:
    """(the first n jobs submitted from `start` on, {VC: policy with its P90 concurrent GPUs as quota},
    how many of the n ask for more than their VC's quota and are left out)."""
    rng = random.Random(seed)
    by_vc: dict[str, list[tuple[datetime, float, int]]] = {}
    with path.open(newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            by_vc.setdefault(row["cluster"], []).append(
                (datetime.fromisoformat(row["timestamp"]), float(row["duration"]), int(row["num_gpus"])))
    quotas = {vc: p90_concurrent(rows) for vc, rows in by_vc.items()}
    everyone = sorted((t, vc, d, g) for vc, rows in by_vc.items() for t, d, g in rows
                      if start is None or t >= start)[:n]
    jobs, left_out = [], 0
    for i, (t, vc, d, g) in enumerate(everyone):
        if g > quotas[vc]:
            left_out += 1
            continue
        actual = max(d, 60.0) / 3600
        est = max(1 / 60, actual * rng.lognormvariate(0, 0.5))
        jobs.append(job(i, vc, g, t, est, float(math.ceil(max(2 * est, actual))), actual))
    cap = max([j["limit_h"] for j in jobs] + [1.0])
    return jobs, {vc: team_policy(vc, q, cap) for vc, q in quotas.items()}, left_out


# ------------------------------------------------------------------------------------- simulation

class Sim:
    """What one team holds over time: the runs started and not ended, each held by the gate from its
    start until its estimated end (the decision's wall clock), past it until its time limit."""

    def __init__(self, jobs: list[dict], policy: dict):
        self.jobs, self.policy, self.quota = jobs, policy, policy["reserved_gpus"]
        self.running: dict[str, tuple[dict, datetime, float, float]] = {}   # id -> (job, start, wall h, GPU-h)
        self.events: list = []
        self.seq = 0
        self.started: dict[str, datetime] = {}
        self.tries: dict[str, int] = {}
        self.peak = 0             # the most accelerators held at once
        self.overbooked = 0       # starts after which more than the quota was held (only a start adds)
        self.layouts = 0          # the kept queue: times the line was laid out (lay_out or turn)
        self.most_waiting = 0     # the kept queue: the longest line

    def push(self, at: datetime, order: int, what: str, payload) -> None:
        self.seq += 1
        heapq.heappush(self.events, (at, order, self.seq, what, payload))

    def each_event(self, first: str):
        """Each job's arrival pushed as a `first` event, then every event in time order as (time, what,
        payload) (at one time: run ends, then arrivals, then wakes); a run's end is removed from the
        running before it is yielded."""
        for j in self.jobs:
            self.push(j["arrive"], 1, first, j)
        while self.events:
            now, _, _, what, payload = heapq.heappop(self.events)
            if what == "end":
                del self.running[payload]
            yield now, what, payload

    def held(self, now: datetime) -> list[dict]:
        """The reservations the gate counts at `now`, in run-ID order."""
        out = []
        for rid in sorted(self.running):
            j, start, wall, gpu_h = self.running[rid]
            until = span_end(start, wall)
            if until <= now:
                until = span_end(start, j["limit_h"])
            out.append({"run_id": rid, "team": j["team"], "kind": "exploratory", "gpus": j["gpus"],
                        "capacity": "stable", "reserved_gpu_hours": gpu_h, "reserved_from": start,
                        "reserved_until": until})
        return out

    def start(self, j: dict, now: datetime, decision: dict) -> None:
        self.running[j["id"]] = (j, now, decision["estimate"]["wall_hours"], decision["reserved_gpu_hours"])
        self.started[j["id"]] = now
        in_use = sum(r[0]["gpus"] for r in self.running.values())
        self.peak = max(self.peak, in_use)
        self.overbooked += in_use > self.quota
        self.push(now + timedelta(hours=j["actual_h"]), 0, "end", j["id"])

    def state(self, now: datetime) -> dict:
        return {"now": now, "reservations": self.held(now), "period_spent_gpu_hours": 0.0,
                "snapshots": {SNAPSHOT}, "calibration_history": [], "calibration": NO_HISTORY}

    def used_gpu_hours(self, t0: datetime, t1: datetime) -> float:
        """GPU-hours run within [t0, t1]."""
        total = 0.0
        for j in self.jobs:
            s = self.started.get(j["id"])
            if s is not None:
                e = s + timedelta(hours=j["actual_h"])
                total += j["gpus"] * max(0.0, (min(e, t1) - max(s, t0)).total_seconds()) / 3600
        return total


def refuse_and_resubmit(jobs: list[dict], policy: dict) -> Sim:
    """Each request decided at its submission and, deferred, again every RESUBMIT until admitted."""
    sim = Sim(jobs, policy)
    for now, what, payload in sim.each_event("try"):
        if what == "end":
            continue
        j = payload
        sim.tries[j["id"]] = sim.tries.get(j["id"], 0) + 1
        d = decide(j["request"], policy, sim.state(now), explain=False)
        if d["state"] == "admit":
            sim.start(j, now, d)
        elif d["state"] == "defer":
            sim.push(now + RESUBMIT, 1, "try", j)
        else:
            raise ValueError(f"{j['id']} rejected: {[r['code'] for r in d['reasons']]}")
    return sim


def plan_inputs(sim: Sim, now: datetime, waiting: list[dict]) -> dict:
    """The line's inputs at `now`: what the team holds and who waits (plain data, as lib.ledger.plan reads it)."""
    team = sim.policy["team"]
    return {"as_of": now, "policies": {team: sim.policy}, "held": sim.held(now), "waiting": waiting,
            "spent": {(team, month_start(now)): 0.0}, "snapshots": {None: {SNAPSHOT}},
            "calibrations": {(team, k): NO_HISTORY for k in KINDS}, "interruption_rates": {},
            "pools": {}, "windows": []}


def kept_queue(jobs: list[dict], policy: dict, *, whole_line: bool = False) -> Sim:
    """Each request submitted once: admitted when `turn` places it now, else waiting in the line; at every
    run end and at the estimated end of a run that overruns it, every waiting request the line places
    now starts.

    whole_line: lay the whole line out (`lay_out`) at every run end, arrival and planned start, as the
    plan does. Otherwise the same placement, cheaper (each step is `place` on the line, in serve order):
    - the line is laid out up to the last request that could still start now (the room left at now is
      at least its accelerators): one served after that cannot start now, and what is placed before it
      does not depend on it;
    - the line is laid out again at each run end and at the estimated end of each run that overruns it
      (both modes: the gate then holds it until its time limit, and the line changes), and nowhere
      else: a planned start is always the end of a holding (a run started, or one placed before it),
      so nothing starts in between;
    - a newcomer asks `turn` only when the room left now holds it (otherwise the line places it later).
    The test of this bench checks that both give the same start to every run."""
    sim = Sim(jobs, policy)
    by_id = {j["id"]: j for j in jobs}
    waiting: list[dict] = []       # WaitingRequest rows
    wake: list[datetime | None] = [None]
    end = timedelta(days=HORIZON_DAYS)

    def start(j: dict, now: datetime, decision: dict) -> None:
        sim.start(j, now, decision)
        wall = decision["estimate"]["wall_hours"]
        if j["actual_h"] > wall:   # the gate then holds it until its time limit: the line changes
            sim.push(span_end(now, wall), 2, "wake", "overrun")

    def free_now() -> int:
        return sim.quota - sum(r[0]["gpus"] for r in sim.running.values())

    def admit_due(now: datetime) -> None:
        if not waiting:
            return
        order = sorted(waiting, key=serve_key)
        smallest = [0] * len(order)        # the fewest accelerators asked for from each place on
        least = 10**9
        for k in range(len(order) - 1, -1, -1):
            least = smallest[k] = min(least, int(order[k]["gpus"]))
        free = free_now()
        if not whole_line and free < smallest[0]:
            return
        line = Line(plan_inputs(sim, now, waiting))
        sim.layouts += 1
        nxt = None
        for k, w in enumerate(order):
            if not whole_line and free < smallest[k]:
                break
            q = place(line, Placed(w, policy), now, now + end)
            if q.start == now:
                start(by_id[w["run_id"]], now, {"estimate": {"wall_hours": q.wall},
                                                "reserved_gpu_hours": w["gpus"] * q.wall})
                free -= int(w["gpus"])
            elif q.start is not None and (nxt is None or q.start < nxt):
                nxt = q.start
        waiting[:] = [w for w in waiting if w["run_id"] not in sim.running]
        if whole_line and nxt is not None and nxt != wake[0]:
            wake[0] = nxt
            sim.push(nxt, 2, "wake", None)

    for now, what, payload in sim.each_event("arrive"):
        if what == "end":
            if not sim.events or sim.events[0][0] != now or sim.events[0][3] != "end":
                admit_due(now)   # once after every run ending at this time
        elif what == "wake":
            if not whole_line or payload == "overrun" or now == wake[0]:
                admit_due(now)
        else:
            j = payload
            sim.tries[j["id"]] = 1
            if not whole_line and free_now() < j["gpus"]:
                waiting.append(as_waiting(waiting, j["request"], policy, now))
                sim.most_waiting = max(sim.most_waiting, len(waiting))
                continue
            inputs = plan_inputs(sim, now, waiting)
            w = as_waiting(inputs["waiting"], j["request"], policy, now)
            q, _ = turn(inputs, w, policy, now, days=HORIZON_DAYS)
            sim.layouts += 1
            if q.start == now:
                start(j, now, decide(j["request"], policy, sim.state(now), explain=False))
            elif q.start is None and not waiting and not sim.running:
                raise ValueError(f"{j['id']} can never start: {q.note}")
            else:
                waiting.append(w)
                sim.most_waiting = max(sim.most_waiting, len(waiting))
                if whole_line and q.start is not None and (wake[0] is None or wake[0] <= now or q.start < wake[0]):
                    wake[0] = q.start
                    sim.push(q.start, 2, "wake", None)
    if waiting:
        raise ValueError(f"{len(waiting)} request(s) never started")
    return sim


# ---------------------------------------------------------------------------------------- reporting

def percentile(xs: list[float], p: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, math.ceil(p * len(xs)) - 1))]


def size_class(gpus: int) -> str:
    return next(name for lo, hi, name in CLASSES if lo <= gpus <= hi)


def measure(jobs: list[dict], sims: list[Sim]) -> dict:
    """Per size class (and "all"): waits (h), submissions per run, runs; and the GPU-hours run while
    requests arrived."""
    started = {k: v for s in sims for k, v in s.started.items()}
    tries = {k: v for s in sims for k, v in s.tries.items()}
    rows: dict[str, dict] = {}
    for name in [c[2] for c in CLASSES] + ["all"]:
        mine = [j for j in jobs if name in ("all", size_class(j["gpus"]))]
        if not mine:
            continue
        waits = [(started[j["id"]] - j["arrive"]).total_seconds() / 3600 for j in mine]
        rows[name] = {"runs": len(mine), "mean": sum(waits) / len(waits), "p90": percentile(waits, 0.9),
                      "max": max(waits), "subs": sum(tries[j["id"]] for j in mine) / len(mine)}
    t0, t1 = min(j["arrive"] for j in jobs), max(j["arrive"] for j in jobs)
    return {"classes": rows, "used": sum(s.used_gpu_hours(t0, t1) for s in sims),
            "capacity": sum(s.quota for s in sims) * (t1 - t0).total_seconds() / 3600,
            "overbooked": sum(s.overbooked for s in sims), "layouts": sum(s.layouts for s in sims),
            "most_waiting": max(s.most_waiting for s in sims)}


def simulate(jobs: list[dict], policies: dict, label: str = "", whole_line: bool = False) -> dict:
    """Both behaviours over the stream, team by team: {"refuse": measures, "queue": measures, "cpu": {...}}."""
    out: dict = {"cpu": {}}
    teams = sorted({j["team"] for j in jobs})
    def queue(mine, policy):
        return kept_queue(mine, policy, whole_line=whole_line)
    for name, run in (("refuse", refuse_and_resubmit), ("queue", queue)):
        t = time.process_time()
        sims = []
        for i, team in enumerate(teams):
            mine = [j for j in jobs if j["team"] == team]
            sims.append(run(mine, policies[team]))
            if label:
                print(f"  {label} {name}: team {i + 1}/{len(teams)} ({len(mine)} runs)", file=sys.stderr, flush=True)
        out["cpu"][name] = time.process_time() - t
        out[name] = measure(jobs, sims)
    return out


def report(title: str, res: dict) -> None:
    r, q = res["refuse"], res["queue"]
    print(f"\n## {title}\n")
    print("| size class (GPUs) | runs | mean wait h (resubmit / queue) | P90 wait h | max wait h "
          "| submissions per run |")
    print("|---|---|---|---|---|---|")
    for name, a in r["classes"].items():
        b = q["classes"][name]
        print(f"| {name} | {a['runs']} | {a['mean']:.1f} / {b['mean']:.1f} | {a['p90']:.1f} / {b['p90']:.1f} "
              f"| {a['max']:.1f} / {b['max']:.1f} | {a['subs']:.2f} / {b['subs']:.2f} |")
    largest = [n for n in r["classes"] if n != "all"][-1]
    a, b = r["classes"][largest], q["classes"][largest]
    p90_ratio = b["p90"] / a["p90"] if a["p90"] else float("nan")
    use_ratio = q["used"] / r["used"] if r["used"] else float("nan")
    print(f"\nquota GPU-hours used while requests arrived: resubmit {r['used']:,.0f} "
          f"({r['used'] / r['capacity']:.0%} of the quotas), queue {q['used']:,.0f} "
          f"({q['used'] / q['capacity']:.0%}); over-booked events: {r['overbooked']} / {q['overbooked']}")
    print(f"CPU seconds: resubmit {res['cpu']['refuse']:.1f}, queue {res['cpu']['queue']:.1f} "
          f"({q['layouts']:,} line lay-outs, at most {q['most_waiting']} waiting in one team's line)")
    print("goals:")
    print(f"- one submission per run with the queue: {q['classes']['all']['subs']:.2f} "
          f"({'met' if q['classes']['all']['subs'] == 1 else 'NOT met'})")
    verdict = ("no wait to halve" if not a["p90"] else "met" if p90_ratio <= GOAL_P90_RATIO else "NOT met")
    print(f"- largest class ({largest}) P90 wait at least halved: {a['p90']:.1f} h -> {b['p90']:.1f} h, "
          f"ratio {p90_ratio:.2f} ({verdict})")
    print(f"- quota GPU-hours used >= {GOAL_USE_RATIO:.0%} of resubmit's: ratio {use_ratio:.3f} "
          f"({'met' if use_ratio >= GOAL_USE_RATIO else 'NOT met'})")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=400, help="requests of the synthetic stream")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--quota", type=int, default=32, help="the synthetic team's quota (accelerators)")
    ap.add_argument("--trace", type=Path, help="a Philly trace CSV (skipped when absent)")
    ap.add_argument("--trace-requests", type=int, default=1500)
    ap.add_argument("--trace-start", type=datetime.fromisoformat, default=None,
                    help="first submission time taken from the trace (default: its first)")
    ap.add_argument("--whole-line", action="store_true",
                    help="lay the whole line out at every event (the same starts, much slower on a long line)")
    args = ap.parse_args(argv)
    jobs, policies = synthetic_stream(args.requests, args.seed, args.quota)
    print(f"synthetic: {len(jobs)} requests ...", file=sys.stderr, flush=True)
    report(f"Synthetic stream: {len(jobs)} requests, seed {args.seed}, quota {args.quota}",
           simulate(jobs, policies, "synthetic", args.whole_line))
    if args.trace is None:
        return
    if not args.trace.is_file():
        print(f"\n(no trace at {args.trace}: the Philly stream is skipped)")
        return
    print("philly: reading the trace ...", file=sys.stderr, flush=True)
    jobs, policies, left_out = philly_stream(args.trace, args.trace_requests, args.trace_start, args.seed)
    used = sorted({j["team"] for j in jobs})
    report(f"Philly trace: {len(jobs)} requests from {jobs[0]['arrive']:%Y-%m-%d %H:%M} to "
           f"{jobs[-1]['arrive']:%Y-%m-%d %H:%M}, {len(used)} VCs (quotas "
           + ", ".join(f"{vc[:6]} {policies[vc]['reserved_gpus']}" for vc in used)
           + f"); {left_out} asking for more than their VC's quota left out",
           simulate(jobs, {vc: policies[vc] for vc in used}, "philly", args.whole_line))


if __name__ == "__main__":
    main()
