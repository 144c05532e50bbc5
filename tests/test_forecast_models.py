"""The weekly demand models on generated histories: a growing team is forecast with its growth, a
year-end dip is forecast where it falls without dragging the weeks after it down, a steady team's
noise is not taken for an event, the forecasts are statsmodels' own, the bands cover about nine
weeks in ten out of sample, and the same history always gives the same forecast."""
from __future__ import annotations

import datetime as dt

import numpy as np
import pytest

from lib.planning.forecast import models as forecast_models
from lib.planning.forecast.demand import MIN_RATIOS, naive_forecast, pooled_ratios, team_forecast
from lib.planning.forecast.models import MAX_WEEKS, fit_team, year_end_place
from tests.fixtures_forecast import (BASE, GROWTH_PER_YEAR, YEAR_END_DIP, expected_demand, generated_histories,
                                     mondays_to)

LAST = dt.date(2026, 11, 23)          # a Monday: the last complete week of the histories
NEXT = LAST + dt.timedelta(weeks=1)   # the first week forecast
WEEKS = 156                           # three years of history


def forecast_of(y, last=LAST):
    return team_forecast(fit_team(y, last), last + dt.timedelta(weeks=1))


def test_the_weeks_around_the_new_year_are_placed_by_their_thursday():
    assert year_end_place(dt.date(2026, 12, 28)) == (2027, 0)      # Thursday 31 Dec: the week holding 1 Jan
    assert year_end_place(dt.date(2027, 12, 27)) == (2028, 0)      # Thursday 30 Dec, 1 Jan a Saturday
    assert year_end_place(dt.date(2026, 12, 21)) == (2027, -1)     # Christmas week
    assert year_end_place(dt.date(2027, 1, 4)) == (2027, 1)
    assert year_end_place(dt.date(2026, 11, 16)) == (2027, -6)     # the first week a year end is measured against
    assert year_end_place(dt.date(2026, 6, 1)) is None


def test_a_flat_history_forecasts_itself_with_no_spread():
    f = forecast_of([100.0] * 30)
    assert f["model"] == "combined"                                 # a tie keeps the default
    assert {(w["p50_gpu_hours"], w["p90_gpu_hours"]) for w in f["weeks"]} == {(100.0, 100.0)}
    assert [w["week_start"] for w in f["weeks"][:2]] == [NEXT, NEXT + dt.timedelta(weeks=1)]
    assert len(f["weeks"]) == MAX_WEEKS and f["weeks"][0]["quota_for_p90_gpus"] == 1


def test_a_growing_team_is_forecast_with_its_growth_where_the_naive_mean_lags():
    y = generated_histories(0, WEEKS, LAST, noise=0.05)["growing"]
    f = forecast_of(y)
    truth = BASE["growing"] * (1 + GROWTH_PER_YEAR) ** ((WEEKS - 1 + 26) / 52)   # expected 26 weeks ahead
    p50 = f["weeks"][25]["p50_gpu_hours"]
    assert f["model"] in {"log-trend", "damped-trend", "combined"}  # a model with the growth in it
    assert abs(p50 / truth - 1) < 0.08
    assert naive_forecast(y)[0] < 0.85 * truth                     # the naive 4-week mean lags by 15 % and more
    assert f["weeks"][0]["p50_gpu_hours"] < f["weeks"][12]["p50_gpu_hours"] < p50


def dipping(weeks=WEEKS, last=LAST, seed=0):
    """A team steady at 800 GPU-hours a week but for the year-end dip, with 5 % noise."""
    dip = np.array([YEAR_END_DIP.get((year_end_place(m) or (0, None))[1], 1.0) for m in mondays_to(last, weeks)])
    return 800.0 * dip * np.random.default_rng(seed).lognormal(0, 0.05, weeks)


def test_a_year_end_dip_is_forecast_in_its_weeks_and_nowhere_else():
    f = forecast_of(dipping())
    assert f["model"].endswith("+year-end")
    p50 = {w["week_start"]: w["p50_gpu_hours"] for w in f["weeks"]}
    christmas, new_year = dt.date(2026, 12, 21), dt.date(2026, 12, 28)
    assert p50[christmas] < 0.6 * 800 and p50[new_year] < 0.6 * 800
    assert all(0.9 * 800 < v < 1.1 * 800 for week, v in p50.items() if year_end_place(week) is None)


def test_the_weeks_after_a_dip_are_not_dragged_down_by_it():
    last = dt.date(2026, 1, 12)                 # the second week after the new year
    y = dipping(last=last)
    assert y[-4:-2].mean() < 0.6 * 800          # the history ends just after the dip
    f = forecast_of(y, last)
    assert f["weeks"][0]["p50_gpu_hours"] > 0.9 * 800


@pytest.mark.parametrize("seed", range(4))
def test_a_steady_teams_noise_is_not_taken_for_a_year_end_event(seed):
    y = generated_histories(seed, WEEKS, LAST, noise=0.2)["steady"]
    assert not fit_team(y, LAST)["name"].endswith("+year-end")


def test_the_forecast_from_the_last_week_is_statsmodels_own():
    from statsmodels.tsa.exponential_smoothing.ets import ETSModel   # here: only this test compares with it
    y = generated_histories(1, 40, dt.date(2026, 10, 26), noise=0.1)["growing"]   # no year end in it
    model = fit_team(y, dt.date(2026, 10, 26))
    level = ETSModel(y, error="add").fit(disp=False).forecast(MAX_WEEKS)
    damped = ETSModel(y, error="add", trend="add", damped_trend=True).fit(disp=False).forecast(MAX_WEEKS)
    trend = np.expm1(ETSModel(np.log1p(y), error="add", trend="add").fit(disp=False).forecast(MAX_WEEKS))
    expected = {"level": level, "damped-trend": damped, "log-trend": trend, "combined": (level + damped + trend) / 3}
    assert np.allclose(model["point"], expected[model["name"]], rtol=1e-9)


def test_the_same_history_gives_the_same_forecast():
    y = generated_histories(2, WEEKS, LAST, noise=0.2)["step+dip"]
    first = forecast_of(y)
    forecast_models._fit_cached.cache_clear()    # fit again rather than reading the cache
    assert forecast_of(y) == first


def test_p90_covers_about_nine_weeks_in_ten_out_of_sample():
    """Forecasts made from the history up to each origin only (refitted), scored on what followed."""
    covered = []
    for seed in range(3):
        series = generated_histories(seed, WEEKS, LAST, noise=0.15)
        for y in series.values():
            for origin in range(WEEKS - MAX_WEEKS - 20, WEEKS - MAX_WEEKS + 1, 5):
                f = forecast_of(y[:origin], LAST - dt.timedelta(weeks=WEEKS - origin))
                covered += [y[origin + w["horizon"] - 1] <= w["p90_gpu_hours"] for w in f["weeks"]]
    assert 0.85 <= np.mean(covered) <= 0.95


def test_a_team_with_little_history_borrows_the_pooled_errors():
    short = fit_team([100.0] * 12, LAST)
    assert short["ratios"][MAX_WEEKS - 1].size < MIN_RATIOS
    long = fit_team(expected_demand(0, WEEKS, LAST)["steady"] * np.tile([0.5, 1.5], WEEKS // 2), LAST)
    pooled = pooled_ratios([short, long])
    week = team_forecast(short, NEXT, pooled)["weeks"][MAX_WEEKS - 1]
    p90_ratio = np.quantile(pooled[0][MAX_WEEKS - 1], 0.9, method="weibull")     # plotting position k / (n + 1)
    assert week["p90_gpu_hours"] == pytest.approx(100.0 * p90_ratio, abs=0.05)
    assert week["p90_gpu_hours"] > 100.0
