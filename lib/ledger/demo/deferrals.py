"""The demo's deferred requests, decided by the gate itself: for each deferral `runs.generate` drew
(a time, team, kind and one or two reasons), a full request built to meet those reasons, decided by
lib.gate.admission.decide over the team's policy and `demo_state` — the state that gives those
reasons — and serialised as lib.ledger.recording.record_decision records a submit, so deciding it
again gives it again (tests/test_demo_decisions.py). The demo's admits are generated history and
are not re-decided. Run in a thread while DuckDB inserts the chunk before.
"""
from __future__ import annotations

from datetime import datetime, timedelta

import numpy as np
import pandas as pd

from lib.gate.admission import decide
from lib.gate.calibration import calibrate
from lib.gate.terms import KINDS, finite_number, naive_utc
from lib.ledger.demo.insert import run_ids
from lib.ledger.demo.parameters import DEFER_CODES, GPU_CHOICES
from lib.ledger.recording import canonical_json

_NO_HISTORY = calibrate([], "", "")   # the calibration of a team without history (no correction)


def demo_state(policy: dict, snapshots: list[dict], request: dict, codes) -> dict:
    """The team state a demo request for `policy`'s team was decided under, from the request
    (its submitted_at is the decision time) and the reason codes the decision gave: the team's
    snapshots; for 'capacity' one reservation holding every reserved accelerator; for
    'retraining-protection' experiments holding just too many of the accelerators left to them;
    for 'period-budget' the month's budget already spent. Without calibration history."""
    now = naive_utc(request["submitted_at"])
    reserved, set_aside = policy["reserved_gpus"], policy["retraining_reserved_gpus"]
    held = []
    if "capacity" in codes:
        kind = "retraining" if request["kind"] == "retraining" else "exploratory"
        held = [(kind, reserved)]
    elif "retraining-protection" in codes:
        held = [("exploratory", max(0, reserved - set_aside - int(request["gpus"]) + 1))]
    return {
        "now": now,
        "reservations": [{"run_id": f"{policy['team']}-held-{i}", "team": policy["team"], "kind": k,
                          "gpus": g, "reserved_gpu_hours": 10.0 * g, "reserved_from": now,
                          "reserved_until": now + timedelta(hours=10)}
                         for i, (k, g) in enumerate(held) if g > 0],
        "period_spent_gpu_hours": float(policy["monthly_budget_gpu_hours"]) if "period-budget" in codes else 0.0,
        "snapshots": {s["snapshot"] for s in snapshots if s["team"] in (None, policy["team"])},
        "calibration": _NO_HISTORY,
    }


def _deferred_request(policy: dict, snapshots: list[dict], run_id: str, kind: str, gpus: int,
                      judged: float, codes: list[str], decided_at: datetime, u: float) -> dict:
    """A full request that the gate defers for (at least) `codes`, under demo_state."""
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


def deferred_decisions(data: dict, teams: list[dict], snapshots: list[dict]) -> pd.DataFrame:
    """The deferred demo decisions, each decided by the gate (lib.gate.admission.decide) over the
    team's policy and demo_state, and serialised as lib.ledger.recording.record_decision records it."""
    d = data["deferred"]
    codes = np.array(DEFER_CODES)
    rows = []
    run_gpus = data["runs"]["gpus"].to_numpy()
    first = int(data["runs"]["i"].iloc[0]) if len(data["runs"]) else 0
    later_rows = np.unique(d["i"].to_numpy()[d["later"].to_numpy()]) - first
    ids = dict(zip((later_rows + first).tolist(), run_ids(data, later_rows)))
    times = d["decided_at"].to_numpy().astype("datetime64[s]").astype(datetime)
    for j, later, i, ti, ki, lo, hi, at, judged in zip(
            d["j"].tolist(), d["later"].tolist(), d["i"].tolist(), d["team_i"].tolist(),
            d["kind_i"].tolist(), d["c_lo"].tolist(), d["c_hi"].tolist(), times,
            d["judged"].tolist()):
        policy = teams[ti]
        run_id = ids[i] if later else f"{policy['team']}-deferred-{j:07d}"
        drawn = [str(codes[lo])] + ([str(codes[hi])] if hi >= 0 else [])
        kind = KINDS[ki]
        gpus = int(run_gpus[i - first]) if later else int(GPU_CHOICES[j % 5])
        request = _deferred_request(policy, snapshots, run_id, kind, gpus, judged, drawn, at,
                                    (j * 0.6180339887) % 1.0)
        wanted = drawn
        for _ in range(4):   # the state follows the codes: decide until they agree
            decision = decide(request, policy, demo_state(policy, snapshots, request, wanted))
            got = [r["code"] for r in decision["reasons"]]
            if decision["state"] == "defer" and got == wanted:
                break
            if decision["state"] != "defer":   # nothing deferred it: it was over budget after all
                request["budget_gpu_hours"] = 0.0
            wanted = got or ["budget"]
        est = decision["estimate"] or {}
        rows.append((at, run_id, policy["team"], kind, decision["state"],
                     [r["code"] for r in decision["reasons"]], finite_number(est.get("judged_gpu_hours")),
                     decision["policy_version"], canonical_json(request), canonical_json(decision)))
    return pd.DataFrame(rows, columns=["decided_at", "run_id", "team", "kind", "state", "reason_codes",
                                       "judged_gpu_hours", "policy_version", "request_json",
                                       "decision_json"])
