"""Calibration against history: median correction, split-conformal bound, censored runs."""
import math
import random
from datetime import timedelta

import pytest

from lib.gate.calibration import calibrate, conformal_quantile, runs_needed, tobit_fit
from tests.fixtures_gate import NOW, history


def test_runs_needed_for_a_90_percent_bound_is_nine():
    assert runs_needed(0.9) == 9
    assert runs_needed(0.8) == 4


def test_conformal_quantile_is_the_ceil_n_plus_1_level_th_smallest():
    r = [math.log(x) for x in (1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 1.7, 1.8)]
    assert conformal_quantile(r, 0, 0.9) == pytest.approx(math.log(1.8))  # k = ⌈10 × 0.9⌉ = 9
    assert conformal_quantile(r[:8], 0, 0.9) is None                    # k = 9 > n = 8
    assert conformal_quantile(r, 1, 0.9) is None        # n = 10, k = 10: the censored (+inf) one
    r18 = [i / 100 for i in range(18)]
    assert conformal_quantile(r18, 1, 0.9) == pytest.approx(0.17)  # n = 19, k = 18: largest observed
    assert conformal_quantile(r18, 2, 0.9) is None                 # n = 20, k = 19: a censored one


def test_median_factor_and_bound_from_team_and_kind():
    c = calibrate(history(ratios=[1.5] * 9 + [3.0]), "vision", "exploratory", now=NOW)
    assert c["scope"] == "team×kind" and c["method"] == "conformal" and c["n"] == 10
    assert c["factor"] == pytest.approx(1.5)
    assert c["upper_factor"] == pytest.approx(3.0)


def test_falls_back_to_team_then_everyone():
    hist = history(kind="production", ratios=[2.0] * 3) + history(kind="exploratory", ratios=[1.2] * 10)
    c = calibrate(hist, "vision", "production", now=NOW)
    assert c["scope"] == "team" and c["n"] == 13
    others = history(team="speech", ratios=[0.8] * 12)
    c = calibrate(others + history(ratios=[2.0] * 2), "vision", "exploratory", now=NOW)
    assert c["scope"] == "all" and c["n"] == 14


def test_too_few_runs_leave_the_bound_unknown():
    c = calibrate(history(ratios=[1.3] * 4), "vision", "exploratory", now=NOW)
    assert c["upper_factor"] is None and c["method"] == "none"
    assert c["factor"] == pytest.approx(1.3)
    assert "unknown" in c["note"]
    empty = calibrate([], "vision", "exploratory", now=NOW)
    assert empty["factor"] == 1.0 and empty["upper_factor"] is None and empty["n"] == 0


def test_rolling_window_drops_old_runs():
    old = [{**h, "ended_at": NOW - timedelta(days=800)} for h in history(ratios=[5.0] * 20)]
    c = calibrate(old + history(ratios=[1.1] * 10), "vision", "exploratory", now=NOW, window_days=365)
    assert c["n"] == 10 and c["factor"] == pytest.approx(1.1)


def test_censored_runs_are_not_ordinary_observations():
    # 4 of 12 runs stopped for budget at 1.5× their estimate: as plain observations they would pull
    # the bound down to ~1.5; as censored they leave conformal unknown and Tobit bounds above 1.5
    ratios = [1.0, 1.1, 0.9, 1.2, 1.0, 1.3, 1.1, 0.95, 1.5, 1.5, 1.5, 1.5]
    c = calibrate(history(ratios=ratios, censored={8, 9, 10, 11}), "vision", "exploratory", now=NOW)
    assert c["n_censored"] == 4 and c["method"] == "tobit"
    assert c["upper_factor"] > 1.5


def test_tobit_without_censoring_is_the_plain_normal_fit():
    r = [0.1, 0.2, 0.3, 0.4]
    mu, sigma = tobit_fit(r, [])
    assert mu == pytest.approx(0.25)
    assert sigma == pytest.approx(math.sqrt(sum((x - 0.25) ** 2 for x in r) / 4))


def test_tobit_recovers_a_lognormal_under_heavy_censoring():
    rng = random.Random(7)
    true_mu, true_sigma, cap = 0.3, 0.5, 0.5
    draws = [rng.gauss(true_mu, true_sigma) for _ in range(4000)]
    done = [d for d in draws if d < cap]
    cens = [cap for d in draws if d >= cap]
    assert len(cens) / len(draws) > 0.3
    mu, sigma = tobit_fit(done, cens, iterations=2000)
    assert mu == pytest.approx(true_mu, abs=0.04) and sigma == pytest.approx(true_sigma, abs=0.04)


def test_the_backtest_covers_about_its_level_on_stationary_ratios():
    from lib.gate.backtest import backtest
    rng = random.Random(11)
    r = [rng.gauss(0.1, 0.4) for _ in range(600)]
    result = backtest(r, [False] * 600, level=0.9, window=300, last=300)
    assert result["checked"] == 300 and result["unknown_bound"] == 0
    assert 0.84 <= result["coverage"] <= 0.96


def test_the_backtest_counts_drift_as_misses_and_unknowns_apart():
    from lib.gate.backtest import backtest
    # ten runs at ratio 1, then five at ratio 3: the first overrun misses the old bound (1); the
    # rolling window (10 runs, k = 10) then holds the overrun and the bound follows the drift
    r = [0.0] * 10 + [math.log(3)] * 5
    result = backtest(r, [False] * 15, level=0.9, window=10, last=5)
    assert (result["checked"], result["covered"], result["coverage"]) == (5, 4, 0.8)
    # with all ten of a run's predecessors censored, no bound is known (nor a Tobit fit)
    result = backtest([0.0] * 12, [True] * 11 + [False], level=0.9, window=10, last=1)
    assert (result["checked"], result["unknown_bound"]) == (0, 1)
    # a censored run that stopped above the bound is a known miss; below it (here under the Tobit
    # bound of the nine runs at 0 and one censored at 1), unknown and skipped
    result = backtest([0.0] * 10 + [1.0, -1.0], [False] * 10 + [True, True], level=0.9,
                                window=10, last=2)
    assert (result["checked"], result["covered"]) == (1, 0)
