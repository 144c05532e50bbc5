"""The Recovery planner's tables, no Streamlit: the checkpoint-interval curve and its optima, the
preemptible-vs-stable comparison, and the options after a preemption or a budget breach — shaped as
the page shows them and lib.dashboard.figures draws them. The maths is in lib.planning."""
from __future__ import annotations

import pandas as pd

from lib.planning import interval_curve as ic

OPTION_NUMBERS = ("expected_extra_gpu_hours", "expected_total_gpu_hours", "simulated_extra_gpu_hours_mean",
                  "mean", "p50", "p90", "p99", "p_budget_breach")


def interval_frames(work_h: float, gpus: int, checkpoint_h: float, restart_h: float, mtbf_h: float,
                    downtime_h: float = 0.0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(curve, optima) of lib.planning.interval_curve as DataFrames, for
    figures.checkpoint_interval_curve. Raises ValueError / OverflowError on inputs it refuses."""
    curve, optima = ic.interval_curve(work_h, gpus, checkpoint_h, restart_h, mtbf_h, downtime_h)
    return pd.DataFrame(curve), pd.DataFrame(optima)


def capacity_table(cmp: dict) -> pd.DataFrame:
    """lib.planning.preemption.compare_capacity's answer as rows: quantity, stable, preemptible."""
    pre = cmp["preemptible"]
    return pd.DataFrame([
        {"quantity": "expected completion (hours)", "stable": cmp["stable_hours"],
         "preemptible": cmp["preemptible_hours"]},
        {"quantity": "billed GPU-hours", "stable": cmp["stable_cost_gpu_hours"],
         "preemptible": cmp["preemptible_billed_gpu_hours"]},
        {"quantity": "cost (stable-price GPU-hours)", "stable": cmp["stable_cost_gpu_hours"],
         "preemptible": cmp["preemptible_cost_gpu_hours"]},
        {"quantity": "expected interruptions", "stable": 0.0, "preemptible": pre["expected_interruptions"]},
        {"quantity": "expected lost work (GPU-hours)", "stable": 0.0,
         "preemptible": cmp["expected_lost_work_gpu_hours"]},
        {"quantity": "expected restarts (GPU-hours)", "stable": 0.0, "preemptible": cmp["expected_restart_gpu_hours"]},
    ])


def options_table(outcome: dict) -> pd.DataFrame:
    """lib.planning.recovery.scenario_outcomes' answer as one row per option: the decision's closed
    form next to the simulated completion times and breach share (numbers as float64, NaN if none)."""
    rows = []
    for name, opt in outcome["decision"]["options"].items():
        sim = outcome["options"].get(name) or {}
        ch = sim.get("completion_hours") or {}
        rows.append({
            "option": name, "available": bool(opt["available"]), "fits_budget": opt["fits_budget"],
            "expected_extra_gpu_hours": opt["expected_extra_gpu_hours"],
            "expected_total_gpu_hours": opt["expected_total_gpu_hours"],
            "simulated_extra_gpu_hours_mean": sim.get("billed_gpu_hours", {}).get("mean"),
            "mean": ch.get("mean"), "p50": ch.get("p50"), "p90": ch.get("p90"), "p99": ch.get("p99"),
            "p_budget_breach": sim.get("p_budget_breach"), "note": opt.get("note", ""),
        })
    options = pd.DataFrame(rows)
    for col in OPTION_NUMBERS:
        options[col] = pd.to_numeric(options[col], errors="coerce").astype("float64")
    return options
