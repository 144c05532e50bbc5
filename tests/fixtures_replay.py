"""Builders for the policy-replay tests: a ledger whose history is made by the gate's own `submit`
and `finish` (lib.ledger.deciding, lib.ledger.finishing), never by the demo generator, and small
replay worlds as plain data.

`build_submitted_ledger` plays a seeded sequence of requests from three teams with small quotas and
monthly budgets across a month boundary: every request goes through `submit_request` at its time,
and the runs that end before it are finished (`finish_run`) first, so each recorded decision saw
reservations, month spend, calibration and the preemptible interruption rate as they stood. Some runs
overrun their reservation, some never run, some stop on budget (censored); about a fifth run on
preemptible capacity with a pilot (their estimates price the ledger's interruption rate) and finish
with interruptions; deferred requests are retried under the same run ID.
"""
from __future__ import annotations

import random
from datetime import datetime, timedelta
from pathlib import Path

REPLAY_TEAMS = """
[defaults]
max_gpu_mem_gb = 80
max_runtime_hours = 48
pilot_required_above_gpu_hours = 1000

[teams.alpha]
reserved_gpus = 8
max_gpus_per_job = 8
monthly_budget_gpu_hours = 600

[teams.beta]
reserved_gpus = 6
retraining_reserved_gpus = 2
max_gpus_per_job = 4
monthly_budget_gpu_hours = 300

[teams.gamma]
reserved_gpus = 4
max_gpus_per_job = 4
max_runtime_hours = 24
monthly_budget_gpu_hours = 150

[[snapshots]]
snapshot = "shared-v1"
"""

# the same teams on a cluster of 12 stable accelerators (their quotas add up to 18): the gate's own
# decisions then include cluster-capacity deferrals
POOLED_TEAMS = REPLAY_TEAMS + """
[pools.stable]
gpus = 12
"""
POOLED_STABLE_GPUS = 12

REPLAY_START = datetime(2026, 10, 20)
REPLAY_REQUESTS = 80


def replay_request(run_id: str, team: str, kind: str, gpus: int, est: float, budget: float, **extra) -> dict:
    """A complete request with a stated estimate (or a pilot via `extra`)."""
    req = {"run_id": run_id, "team": team, "kind": kind, "gpus": gpus, "gpu_mem_gb": 80,
           "max_runtime_hours": 20, "budget_gpu_hours": budget, "checkpoint_supported": True,
           "expected_interruptions": 0, "capacity": "stable", "data_snapshot": "shared-v1",
           "estimated_gpu_hours": est, **extra}
    if kind == "production":
        req.setdefault("holdout_allowance", 1)
    return req


def preemptible(req: dict, rng: random.Random) -> dict:
    """The request on preemptible capacity, estimated from a pilot of about the same GPU-hours."""
    sps = round(rng.uniform(1, 4), 2)
    steps = max(100, int(req.pop("estimated_gpu_hours") / req["gpus"] * 3600 * sps * 0.9))
    pilot = {"steps_per_second": sps, "planned_steps": steps, "peak_mem_gb": 60.0, "checkpoint_write_s": 30.0,
             "checkpoint_interval_steps": max(1, steps // 10), "restart_minutes": 5.0,
             "eval_gpu_hours": 1.0 if req["kind"] == "production" else 0.0}
    return {**req, "capacity": "preemptible", "expected_interruptions": 0.5, "pilot": pilot}


def build_submitted_ledger(folder: Path, n: int = REPLAY_REQUESTS, seed: int = 3,
                           teams: str = REPLAY_TEAMS) -> tuple[Path, datetime, datetime]:
    """(ledger path, first decision time, last decision time) of the scripted history, under the
    teams file text `teams`."""
    from lib.ledger.connection import open_ledger
    from lib.ledger.deciding import submit_request
    from lib.ledger.finishing import finish_run
    from lib.ledger.teams_file import sync_teams

    rng = random.Random(seed)
    teams_file = folder / "replay-teams.toml"
    teams_file.write_text(teams, encoding="utf-8")
    db = folder / "replay.duckdb"
    with open_ledger(db) as con:
        sync_teams(con, teams_file)
    now = REPLAY_START
    running: list[tuple] = []   # (end, run, actual, stop, start, interruptions)
    retry: list[dict] = []
    for i in range(n):
        now += timedelta(hours=rng.choice((0.5, 1, 2, 3, 5, 8)), seconds=rng.randrange(0, 3600))
        for end, run_id, actual, stop, started, interrupted in sorted(r for r in running if r[0] <= now):
            finish_run(run_id, actual_gpu_hours=actual, stop_reason=stop, ended_at=end, started_at=started,
                       interruptions=interrupted, db=db)
        running = [r for r in running if r[0] > now]
        if retry and rng.random() < 0.3:
            req = retry.pop(0)
        else:
            team = rng.choice(("alpha", "alpha", "beta", "gamma"))
            kind = rng.choice(("exploratory", "exploratory", "production", "retraining"))
            gpus = rng.choice((1, 2, 2, 4, 4, 8 if team == "alpha" else 4))
            est = round(rng.uniform(4, 16) * gpus, 1)
            req = replay_request(f"{team}-{i:03d}", team, kind, gpus, est, round(est * rng.uniform(0.9, 2.2), 1))
            if rng.random() < 0.2:
                req = preemptible(req, rng)
        decision = submit_request(req, db=db, now=now)
        if decision["state"] == "defer":
            if rng.random() < 0.5:
                retry.append(req)
            continue
        if decision["state"] != "admit":
            continue
        if rng.random() < 0.1:   # admitted, never ran: cancelled, and the ledger learns its end (it holds until then)
            running.append((now + timedelta(minutes=rng.randrange(1, 90)), req["run_id"], 0.0, "cancelled", None, None))
            continue
        wall = decision["estimate"]["wall_hours"]
        started = now + timedelta(minutes=rng.randrange(1, 90))
        ratio = rng.lognormvariate(0.1, 0.35)
        actual = round(decision["estimate"]["raw_gpu_hours"] * ratio, 2)
        stop = "completed" if rng.random() < 0.85 else "early-stop"
        if actual > req["budget_gpu_hours"]:
            actual, stop = req["budget_gpu_hours"], "budget"
        end = started + timedelta(hours=max(0.2, wall * ratio * rng.uniform(0.8, 1.3)))
        running.append((end, req["run_id"], actual, stop, started,
                        rng.randrange(0, 4) if req["capacity"] == "preemptible" else None))
    return db, REPLAY_START, now
