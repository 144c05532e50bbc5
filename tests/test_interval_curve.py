"""The Recovery planner's interval curve (lib.planning.interval_curve) and its tables
(lib.dashboard.recovery_view), without Streamlit."""
from __future__ import annotations

import math

import pytest

from lib.dashboard import recovery_view
from lib.planning import interval_curve as ic
from lib.planning.preemption import compare_capacity, expected_time, optimal_interval
from lib.planning.recovery import scenario_outcomes

JOB = dict(work_h=24.0, checkpoint_h=5 / 60, restart_h=10 / 60, mtbf_h=6.0, downtime_h=0.0)


def test_the_optima_are_young_daly_exact_and_the_best_whole_segments():
    optima = ic.optima(**JOB)
    assert [o["method"] for o in optima[:3]] == ["young", "daly", "exact"]
    assert optima[3]["method"].startswith("best whole segments (")
    for o in optima[:3]:
        assert o["interval_h"] == pytest.approx(optimal_interval(JOB["checkpoint_h"], JOB["mtbf_h"], o["method"]))
    # the best whole number of segments is at least as good as any of the three
    assert optima[3]["expected_hours"] <= min(o["expected_hours"] for o in optima[:3]) + 1e-9


def test_the_curve_spans_the_optimum_and_agrees_with_expected_time():
    curve, optima = ic.interval_curve(gpus=8, **JOB)
    xs = [r["interval_h"] for r in curve]
    assert xs == sorted(xs) and len(set(xs)) == len(xs) >= ic.GRID_POINTS
    exact = optima[2]["interval_h"]
    assert xs[0] < exact < xs[-1] and exact in xs and xs[-1] <= JOB["work_h"]
    for r in curve[::10]:
        e = expected_time(JOB["work_h"], r["interval_h"], JOB["checkpoint_h"], JOB["restart_h"], JOB["mtbf_h"])
        assert r["expected_hours"] == pytest.approx(e["expected_hours"])
        assert r["expected_cost_gpu_hours"] == pytest.approx(8 * e["expected_billed_hours"])
    # the exact optimum is the lowest point of the curve (up to the grid)
    best = min(curve, key=lambda r: r["expected_hours"])
    assert best["expected_hours"] <= optima[2]["expected_hours"] + 1e-9


def test_no_finite_answer_is_nan_not_an_error():
    assert ic.expected_or_none(24.0, -1.0, 0.1, 0.1, 6.0) is None
    assert math.isnan(ic.expected_hours(24.0, -1.0, 0.1, 0.1, 6.0))


def test_a_tiny_job_still_gets_a_grid_inside_its_work():
    grid = ic.interval_grid(0.5, [10.0, 11.0, 12.0])
    assert 0 < grid[0] < grid[-1] <= 0.5


def test_the_tables_the_page_shows():
    curve, optima = recovery_view.interval_frames(gpus=8, **JOB)
    assert list(curve.columns) == ["interval_h", "expected_hours", "expected_cost_gpu_hours"]
    assert list(optima["method"][:3]) == ["young", "daly", "exact"]
    cmp = compare_capacity(24.0, 8, 0.35, 1.0, JOB["checkpoint_h"], JOB["restart_h"], JOB["mtbf_h"], 0.0, None)
    table = recovery_view.capacity_table(cmp)
    assert table.loc[0, "preemptible"] == cmp["preemptible_hours"] and len(table) == 6
    situation = {"event": "preemption", "budget_gpu_hours": 400.0, "spent_gpu_hours": 150.0, "gpus": 8,
                 "total_work_gpu_hours": 300.0, "progress_fraction": 0.5, "last_valid_checkpoint": "ckpt/4500",
                 "checkpoint_progress_fraction": 0.45, "restart_h": JOB["restart_h"], "downtime_h": 0.0,
                 "mtbf_h": 6.0, "checkpoint_interval_h": 1.0, "checkpoint_h": JOB["checkpoint_h"],
                 "restarts_so_far": 0, "max_restarts": 5, "approved_budget_increase_gpu_hours": 0.0,
                 "lifetimes_h": None, "wall_limit_h": None}
    outcome = scenario_outcomes(situation, runs=500, seed=0)
    options = recovery_view.options_table(outcome)
    assert set(options["option"]) == set(outcome["decision"]["options"])
    assert all(options[c].dtype == "float64" for c in recovery_view.OPTION_NUMBERS)
