"""The Recovery planner's figure builders: pure functions, titled with units, drawing what they are given."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import pytest

from lib.dashboard import recovery_figures
from lib.planning.preemption import expected_time, optimal_interval

W, C, R, M = 24.0, 5 / 60, 10 / 60, 6.0


def curve_and_optima():
    grid = np.geomspace(0.05, 24, 40)
    curve = pd.DataFrame({"interval_h": grid,
                          "expected_hours": [expected_time(W, t, C, R, M)["expected_hours"] for t in grid]})
    curve["expected_cost_gpu_hours"] = curve["expected_hours"] * 8
    optima = pd.DataFrame([{"method": m, "interval_h": optimal_interval(C, M, m),
                            "expected_hours": expected_time(W, optimal_interval(C, M, m), C, R, M)["expected_hours"]}
                           for m in ("young", "daly", "exact")])
    return curve, optima


def test_the_interval_curve_marks_the_three_optima():
    curve, optima = curve_and_optima()
    fig = recovery_figures.checkpoint_interval_curve(curve, optima, current_interval_h=1.0,
                                                     failure_free_hours=W + 24 * C)
    assert isinstance(fig, go.Figure)
    assert "(hours)" in fig.layout.title.text
    assert fig.layout.xaxis.type == "log"
    line = fig.data[0]
    assert list(line.x) == pytest.approx(list(curve["interval_h"]))
    marks = {t.name.split(":")[0]: t for t in fig.data[1:]}
    assert set(marks) == {"young", "daly", "exact"}
    for m in ("young", "daly", "exact"):
        assert marks[m].x[0] == pytest.approx(optimal_interval(C, M, m))
    assert marks["exact"].y[0] == pytest.approx(float(optima.loc[2, "expected_hours"]))
    xs = [s.x0 for s in fig.layout.shapes if s.x0 == s.x1]
    assert 1.0 in xs  # the chosen interval


def test_the_interval_curve_skips_infinite_optima_and_says_when_empty():
    curve, _ = curve_and_optima()
    inf = pd.DataFrame([{"method": "exact", "interval_h": math.inf, "expected_hours": math.nan}])
    fig = recovery_figures.checkpoint_interval_curve(curve, inf)
    assert len(fig.data) == 1
    empty = recovery_figures.checkpoint_interval_curve(pd.DataFrame(columns=["interval_h", "expected_hours"]), inf)
    assert empty.layout.annotations and "(hours)" in empty.layout.title.text


def test_the_completion_histogram_is_binned_with_the_budget_line():
    x = np.random.default_rng(0).exponential(3.0, 20_000) + 24.0
    fig = recovery_figures.completion_histogram(x, budget_hours=30.0, budget_label="240 GPU-h ÷ 8 GPUs", p_breach=0.13,
                                       wall_limit_h=40.0, bins=50)
    assert "hours" in fig.layout.title.text and "20,000 runs" in fig.layout.title.text
    bars = fig.data[0]
    assert len(bars.x) == 50
    assert sum(bars.y) == pytest.approx(1.0)
    lines = {t.name: t.x[0] for t in fig.data[1:] if t.x[0] == t.x[1]}
    budget = next(name for name in lines if name.startswith("budget"))
    assert lines[budget] == 30.0 and "P(breach) 13.0%" in budget and "240 GPU-h" in budget
    assert lines["deadline 40 h"] == 40.0
    assert lines[next(n for n in lines if n.startswith("P50"))] == pytest.approx(np.median(x))


def test_the_completion_histogram_copes_with_one_value_and_none():
    assert len(recovery_figures.completion_histogram(np.full(100, 24.0)).data[0].x) == 60
    empty = recovery_figures.completion_histogram([])
    assert empty.layout.annotations and "(hours)" in empty.layout.title.text


def test_the_scenario_chart_draws_each_available_choice():
    options = pd.DataFrame({"option": ["resume", "restart"], "mean": [25.0, 45.0], "p50": [24.0, 44.0],
                            "p90": [28.0, 50.0], "p99": [31.0, 58.0]})
    fig = recovery_figures.scenario_options(options)
    assert "(hours" in fig.layout.title.text
    bar = fig.data[0]
    assert list(bar.y) == ["resume", "restart"]
    assert list(bar.base) == [24.0, 44.0] and list(bar.x) == [7.0, 14.0]
    assert list(fig.data[1].x) == [28.0, 50.0] and list(fig.data[2].x) == [25.0, 45.0]
    no_resume = options.assign(p50=[np.nan, 44.0], p99=[np.nan, 58.0])
    assert list(recovery_figures.scenario_options(no_resume).data[0].y) == ["restart"]
    assert recovery_figures.scenario_options(options.iloc[0:0]).layout.annotations
