"""The demo's requests drawn with a flaw: a full request built to ask for something the gate defers
(lib.ledger.demo.parameters.DEFER_WEIGHTS: a snapshot it does not know, no pilot above the threshold,
a budget below the estimate, more than a cap, a pilot's memory above the accelerators', preemptible
capacity without checkpoints). lib.ledger.demo.decisions has the gate decide them.
"""
from __future__ import annotations

from datetime import datetime


def flawed_request(policy: dict, snapshots: list[dict], run_id: str, kind: str, gpus: int,
                   judged: float, codes: list[str], decided_at: datetime, u: float) -> dict:
    """A full request of `policy`'s team, decided at `decided_at`, that asks for what the gate defers
    for `codes` (request codes of DEFER_WEIGHTS), whatever the team's state."""
    team = policy["team"]
    snaps = sorted(s["snapshot"] for s in snapshots if s["team"] in (None, team)) or [None]
    gpus = int(max(1, min(gpus, policy["max_gpus_per_job"] or 1)))
    est = float(round(min(judged, 0.9 * policy["pilot_required_above_gpu_hours"] or judged,
                          0.5 * gpus * policy["max_runtime_hours"]), 3)) or 1.0
    req = {
        "run_id": run_id, "team": team, "kind": kind, "gpus": gpus,
        "gpu_mem_gb": float(min(80.0, policy["max_gpu_mem_gb"])) or 40.0,
        "max_runtime_hours": float(round(min(policy["max_runtime_hours"], max(1.0, 2 * est / gpus)), 1)),
        "budget_gpu_hours": float(round(est * 1.5 + 1, 1)), "checkpoint_supported": True,
        "expected_interruptions": 0.0, "capacity": "stable", "data_snapshot": snaps[int(u * len(snaps))],
        "estimated_gpu_hours": est, "skip_full_evaluation": False, "holdout_allowance": 0,
        "submitted_at": decided_at.isoformat(timespec="seconds"),
    }
    if kind == "production":
        req["holdout_allowance"] = 1
    for code in codes:
        if code == "no-snapshot":
            req["data_snapshot"] = f"{team}-scratch-{run_id[-4:]}"
        elif code == "no-pilot":
            est = float(round(policy["pilot_required_above_gpu_hours"] * (1.2 + u), 3))
            req.update(estimated_gpu_hours=est, budget_gpu_hours=float(round(est * 1.5 + 1, 1)))
        elif code == "budget":
            req["budget_gpu_hours"] = float(round(req["estimated_gpu_hours"] * (0.4 + 0.5 * u), 1))
        elif code == "gpu-cap":
            req["gpus"] = int(policy["max_gpus_per_job"]) * 2 or 1
        elif code == "memory-cap":
            req["gpu_mem_gb"] = float(policy["max_gpu_mem_gb"]) + 40.0
        elif code == "runtime-cap":
            req["max_runtime_hours"] = float(policy["max_runtime_hours"]) * 1.5
        elif code == "memory":
            g, e = req["gpus"], req.pop("estimated_gpu_hours")
            req["pilot"] = {"steps_per_second": 2.0, "planned_steps": max(1, int(e / g * 3600 * 2)),
                            "peak_mem_gb": req["gpu_mem_gb"] + 8.0,
                            "eval_gpu_hours": 1.0 if kind == "production" else 0.0}
        elif code == "no-recovery":
            req.update(capacity="preemptible", checkpoint_supported=False)
    return req
