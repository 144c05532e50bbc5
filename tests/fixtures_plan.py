"""Builders for the forward-plan tests: plan inputs as plain data (lib.planning.plan.data), at the suite's
one clock NOW, for the one test team `vision` of tests/fixtures_gate.py (16 accelerators, 4 set aside
for retraining, 8 per job, 5000 GPU-h a month)."""
from __future__ import annotations

from datetime import datetime, timedelta

from lib.gate.calibration import calibrate
from lib.gate.terms import KINDS, month_start
from tests.fixtures_gate import NOW, policy, request

H = timedelta(hours=1)
NO_HISTORY = calibrate([], "", "")     # factor 1, no upper bound: the judged estimate is the stated one


def held(run_id: str, gpus: int, hours_left, kind="exploratory", team="vision", capacity="stable",
         gpu_hours: float | None = None) -> dict:
    """A reservation held at NOW until NOW + hours_left (None: no end)."""
    return {"run_id": run_id, "team": team, "kind": kind, "gpus": gpus, "capacity": capacity,
            "reserved_gpu_hours": gpu_hours if gpu_hours is not None else gpus * (hours_left or 10),
            "reserved_from": NOW - H, "reserved_until": None if hours_left is None else NOW + hours_left * H}


def waiting(run_id: str, *, waited_hours: float = 1.0, expires_in_days: float = 14.0, **changes) -> dict:
    """A waiting request (the fixtures_gate request with `changes`): deferred first `waited_hours` ago."""
    req = request(run_id=run_id, **changes)
    since = NOW - waited_hours * H
    return {"run_id": run_id, "team": req["team"], "kind": req["kind"], "gpus": req["gpus"],
            "capacity": req["capacity"], "waiting_since": since,
            "expires_at": NOW + timedelta(days=expires_in_days), "request": req}


def plan_inputs(held_=(), waiting_=(), *, policies=None, spent: float = 0.0, pools=None, windows=(),
                as_of=NOW) -> dict:
    policies = policies or {"vision": policy()}
    return {"as_of": as_of, "policies": policies, "held": sorted(held_, key=lambda r: r["run_id"]),
            "waiting": list(waiting_), "spent": {(t, month_start(as_of)): spent for t in policies},
            "snapshots": {None: {"imagenet-2026-11"}},
            "calibrations": {(t, k): NO_HISTORY for t in policies for k in KINDS},
            "interruption_rates": {}, "pools": dict(pools or {}), "windows": list(windows)}


# ------------------------------------------------------------------------------ a ledger with a queue

QUEUE_TEAMS = """
[defaults]
max_gpu_mem_gb = 80
max_runtime_hours = 48
pilot_required_above_gpu_hours = 1000

[teams.alpha]
reserved_gpus = 16
retraining_reserved_gpus = 4
max_gpus_per_job = 16
monthly_budget_gpu_hours = 400
queue_max_age_days = 60

[teams.beta]
reserved_gpus = 8
max_gpus_per_job = 8
monthly_budget_gpu_hours = 400

[[snapshots]]
snapshot = "shared-v1"
"""


def queue_request(run_id: str, team: str, gpus: int, est: float, kind: str = "exploratory", **extra) -> dict:
    return {"run_id": run_id, "team": team, "kind": kind, "gpus": gpus, "gpu_mem_gb": 80,
            "max_runtime_hours": 40, "budget_gpu_hours": est * 3, "checkpoint_supported": True,
            "expected_interruptions": 0, "capacity": "stable", "data_snapshot": "shared-v1",
            "estimated_gpu_hours": est, **extra}


def build_queue_ledger(folder) -> tuple:
    """(ledger path, now): a history made by the gate's own submit and finish, whose queue at `now`
    (NOW) holds stale deferrals and live ones:
    - alpha spent 380 of its 400 GPU-h in November; its requests of late November (1 accelerator each)
      were deferred for period-budget, and December's budget has reset since (stale: `check` admits
      them now, and they are first in the line);
    - alpha holds 8 + 4 (retraining) accelerators now; its requests of this morning for 5, 6 and 7
      were deferred for capacity and the retraining set-aside, and still are;
    - beta was deferred for capacity on the 14th by a run that has finished since (stale), and for
      this month's budget (400 GPU-h, 390 spent), which only January resets;
    - a beta request deferred for capacity 30 days ago has waited past beta's 14 days: expired."""
    from lib.ledger.connection import open_ledger
    from lib.ledger.deciding import submit_request
    from lib.ledger.finishing import finish_run
    from lib.ledger.teams_file import sync_teams

    teams = folder / "queue-teams.toml"
    teams.write_text(QUEUE_TEAMS, encoding="utf-8")
    db = folder / "queue.duckdb"
    with open_ledger(db) as con:
        sync_teams(con, teams)
    nov = datetime(2026, 11, 20, 9)

    def submit(req, at):
        return submit_request(req, db=db, now=at)["state"]
    assert submit(queue_request("alpha-nov", "alpha", 8, 300), nov) == "admit"
    finish_run("alpha-nov", actual_gpu_hours=380, stop_reason="completed", ended_at=nov + 40 * H,
               started_at=nov, db=db)
    for i in range(3):   # 380 + 25 > 400: deferred for the month's budget, in November (1 accelerator each:
        # still waiting in the line in December, they leave room for alpha-run beside them)
        assert submit(queue_request(f"alpha-late-nov-{i}", "alpha", 1, 25), nov + (100 + i) * H) == "defer"
    old = NOW - timedelta(days=30)   # beta full then: beta-old deferred for capacity, never admitted since
    assert submit(queue_request("beta-old-hog", "beta", 8, 4), old) == "admit"
    assert submit(queue_request("beta-old", "beta", 4, 20), old + timedelta(minutes=5)) == "defer"
    finish_run("beta-old-hog", actual_gpu_hours=4, stop_reason="completed", ended_at=old + H, started_at=old, db=db)
    # beta: 390 of its 400 GPU-h spent this month; a request of 20 waits for January
    assert submit(queue_request("beta-spent", "beta", 8, 250), datetime(2026, 12, 2)) == "admit"
    finish_run("beta-spent", actual_gpu_hours=390, stop_reason="completed", ended_at=datetime(2026, 12, 4),
               started_at=datetime(2026, 12, 2), db=db)
    assert submit(queue_request("beta-budget", "beta", 2, 20), NOW - 30 * H) == "defer"
    # beta deferred for capacity on the 14th by a run that finished early since
    assert submit(queue_request("beta-hog", "beta", 8, 4), NOW - 24 * H) == "admit"
    assert submit(queue_request("beta-cap", "beta", 4, 2), NOW - 24 * H + timedelta(minutes=10)) == "defer"
    finish_run("beta-hog", actual_gpu_hours=4, stop_reason="completed", ended_at=NOW - 23 * H,
               started_at=NOW - 24 * H, db=db)
    # alpha now: 8 experiments until NOW + 3 h, 4 retraining until NOW + 30 h
    assert submit(queue_request("alpha-run", "alpha", 8, 8 * 5), NOW - 2 * H) == "admit"
    assert submit(queue_request("alpha-retrain", "alpha", 4, 4 * 32, kind="retraining"), NOW - 2 * H) == "admit"
    for i, gpus in enumerate((5, 6, 7)):
        assert submit(queue_request(f"alpha-wait-{i}", "alpha", gpus, gpus * 6), NOW - (1 - i / 10) * H) == "defer"
    return db, NOW
