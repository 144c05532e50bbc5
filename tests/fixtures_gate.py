"""Plain-data builders for the gate's pure functions: a team policy, its state, a request."""
from __future__ import annotations

import copy
from datetime import datetime, timedelta

NOW = datetime(2026, 12, 15, 12, 0)  # mid-month: month-to-date and next-period rules both have room

POLICY = {
    "team": "vision", "reserved_gpus": 16, "retraining_reserved_gpus": 4, "max_gpus_per_job": 8,
    "max_gpu_mem_gb": 80.0, "max_runtime_hours": 72.0, "monthly_budget_gpu_hours": 5000.0,
    "pilot_required_above_gpu_hours": 50.0, "budget_basis_production": "upper",
    "budget_basis_exploratory": "median", "budget_basis_retraining": "upper",
    "preemptible_partitions": ["spot"], "policy_version": "test-v1",
}

PILOT = {
    "steps_per_second": 5.0, "worst_case_steps_per_second": 2.5, "worst_case_share": 0.1,
    "peak_mem_gb": 60.0, "checkpoint_write_s": 30.0, "planned_steps": 36_000,
    "checkpoint_interval_steps": 3_600, "eval_gpu_hours": 1.0, "data_loading_fraction": 0.05,
    "restart_minutes": 5.0,
}

REQUEST = {
    "run_id": "vision-resnet-001", "team": "vision", "kind": "exploratory", "gpus": 2,
    "gpu_mem_gb": 80, "max_runtime_hours": 24, "budget_gpu_hours": 23,
    "checkpoint_supported": True, "expected_interruptions": 2, "data_snapshot": "imagenet-2026-11",
    "capacity": "stable", "estimated_gpu_hours": 18.5,
}


def policy(**changes) -> dict:
    return {**copy.deepcopy(POLICY), **changes}


def request(**changes) -> dict:
    out = {**copy.deepcopy(REQUEST), **changes}
    return {k: v for k, v in out.items() if v is not ...}


def reservation(run_id="held-1", kind="exploratory", gpus=4, gpu_hours=40.0, hours_left=5.0) -> dict:
    return {"run_id": run_id, "kind": kind, "gpus": gpus, "reserved_gpu_hours": gpu_hours,
            "reserved_until": NOW + timedelta(hours=hours_left) if hours_left is not None else None}


def history(team="vision", kind="exploratory", ratios=(1.0,) * 12, censored=(), est=10.0) -> list[dict]:
    """Finished runs with actual = est × ratio; indexes in `censored` stopped for budget."""
    return [{"team": team, "kind": kind, "estimated_gpu_hours": est, "actual_gpu_hours": est * r,
             "censored": i in censored, "ended_at": NOW - timedelta(days=i + 1)}
            for i, r in enumerate(ratios)]


def state(reservations=(), spent=0.0, snapshots=("imagenet-2026-11",), hist=None, calibration=None) -> dict:
    s = {"now": NOW, "reservations": list(reservations), "period_spent_gpu_hours": spent,
         "snapshots": set(snapshots), "calibration_history": hist if hist is not None else history()}
    if calibration is not None:
        s["calibration"] = calibration
    return s
