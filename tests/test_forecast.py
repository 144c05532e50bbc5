"""Weekly demand forecasts and the month's budget burn-down: the maths on hand-made series, the read
model on a real ledger (as of a past moment it reads only what was known then), and the command line."""
from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys

import numpy as np
import pytest

from lib.dashboard.forecasts import forecast, week_start
from lib.ledger.connection import open_ledger, transaction
from lib.planning.forecast import (burn_down, forecast_ratios, kday_sum_quantiles, naive_forecast,
                                   smoothed_levels, weekly_forecast)
from tests.fixtures_app import ROOT

MONDAY = dt.date(2026, 11, 30)


def test_a_flat_history_forecasts_itself_with_no_spread():
    rows = weekly_forecast([100.0] * 30, MONDAY, horizons=3)
    assert [(r["p50_gpu_hours"], r["p90_gpu_hours"]) for r in rows] == [(100.0, 100.0)] * 3
    assert [r["week_start"] for r in rows] == [MONDAY, MONDAY + dt.timedelta(weeks=1), MONDAY + dt.timedelta(weeks=2)]
    assert rows[0]["quota_for_p90_gpus"] == 1          # 100 GPU-h in a 168-hour week: one accelerator


def test_the_level_follows_a_step_with_the_smoothing_weight():
    levels = smoothed_levels([10.0] * 4 + [20.0])
    assert levels[3] == 10.0 and levels[4] == pytest.approx(0.3 * 20 + 0.7 * 10)


def test_p90_covers_about_nine_weeks_in_ten_on_noisy_history():
    rng = np.random.default_rng(7)
    covered = []
    for team in range(20):
        y = rng.lognormal(np.log(500), 0.4, size=160)
        for origin in range(100, 150):
            f = weekly_forecast(y[:origin], MONDAY, horizons=1)[0]
            covered.append(y[origin] <= f["p90_gpu_hours"])
    assert 0.85 <= np.mean(covered) <= 0.95


def test_a_team_with_little_history_borrows_the_pooled_errors():
    short = [100.0] * 6
    assert forecast_ratios(short, 1)[0].size < 12
    pooled = [np.array([0.5] * 20 + [2.0] * 20)]
    row = weekly_forecast(short, MONDAY, horizons=1, pooled=pooled)[0]
    assert row["p90_gpu_hours"] == pytest.approx(200.0)   # level 100 x the pooled 90th-percentile ratio


def test_the_naive_baseline_is_the_mean_and_max_of_the_last_four_weeks():
    assert naive_forecast([1, 2, 3, 4, 5, 6]) == (4.5, 6.0)


def test_k_day_sums_come_from_consecutive_days():
    assert kday_sum_quantiles([1, 2, 3, 4], 2, qs=(0.0, 1.0)) == [3.0, 7.0]
    assert kday_sum_quantiles([1.0], 3, qs=(0.5,)) == [3.0]       # short history: k x one day


def test_burn_down_projects_steady_spend_and_names_the_exhaustion_day():
    b = burn_down(200.0, 100.0, dt.date(2026, 12, 20), dt.date(2026, 12, 31), [10.0] * 91, [])
    assert b["days_left"] == 12
    assert b["path"][0] == {"day": dt.date(2026, 12, 20), "p50_gpu_hours": 110.0, "p90_gpu_hours": 110.0}
    assert b["exhausts_p50"] == dt.date(2026, 12, 29)            # 100 + 10 x 10 days reaches 200
    assert b["p50_month_end_gpu_hours"] == 220.0
    assert burn_down(300.0, 100.0, dt.date(2026, 12, 20), dt.date(2026, 12, 31), [10.0] * 91, [])["exhausts_p50"] is None


def test_committed_reservations_due_to_end_set_a_floor_under_the_projection():
    ends = [(dt.datetime(2026, 12, 21, 12), 500.0)]
    b = burn_down(400.0, 100.0, dt.date(2026, 12, 20), dt.date(2026, 12, 31), [10.0] * 91, ends)
    assert b["path"][0]["p50_gpu_hours"] == 110.0                 # not due yet
    assert b["path"][1]["p50_gpu_hours"] == 600.0                 # due by the end of the 21st
    assert b["exhausts_p50"] == dt.date(2026, 12, 21) and b["committed_gpu_hours"] == 500.0


def _add_run(path, run_id, team, started, ended, actual):
    with open_ledger(path) as con, transaction(con):
        con.execute("""INSERT INTO runs (run_id, team, kind, gpus, started_at, ended_at, actual_gpu_hours,
                       reserved_gpu_hours, source, updated_at) VALUES (?, ?, 'exploratory', 8, ?, ?, ?, ?, 'test', ?)""",
                    [run_id, team, started, ended, actual, actual, ended])


def test_a_forecast_as_of_a_past_moment_ignores_what_came_after(page_ledger):
    path, now = page_ledger
    as_of = dt.datetime.combine(week_start(now) - dt.timedelta(weeks=2), dt.time())
    before = forecast(path, as_of=as_of, weeks=2)
    _add_run(path, "late-huge", "vision", as_of + dt.timedelta(days=1), as_of + dt.timedelta(days=2), 1e6)
    after = forecast(path, as_of=as_of, weeks=2)
    assert after["teams"] == before["teams"] and after["history"].equals(before["history"])
    assert forecast(path, weeks=2)["teams"]["vision"] != before["teams"]["vision"]


def test_a_run_still_running_at_the_as_of_moment_counts_its_reservation(page_ledger):
    path, now = page_ledger
    as_of = dt.datetime.combine(week_start(now), dt.time()) + dt.timedelta(days=1)
    started = as_of - dt.timedelta(days=8)
    base = forecast(path, as_of=as_of, weeks=1)["teams"]["safety"]["weeks"][0]["p50_gpu_hours"]
    _add_run(path, "long-one", "safety", started, as_of + dt.timedelta(days=3), 5000.0)
    after = forecast(path, as_of=as_of, weeks=1)["teams"]["safety"]["weeks"][0]["p50_gpu_hours"]
    assert after > base


def test_the_command_line_prints_weeks_with_p50_and_p90(page_ledger):
    path, now = page_ledger
    out = subprocess.run([sys.executable, "-m", "lib", "forecast", "--db", str(path), "--weeks", "3",
                          "--as-of", (now - dt.timedelta(days=7)).isoformat()],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    weeks = result["teams"]["vision"]["weeks"]
    assert len(weeks) == 3 and {"week_start", "p50_gpu_hours", "p90_gpu_hours"} <= set(weeks[0])
    assert all(w["p90_gpu_hours"] >= w["p50_gpu_hours"] >= 0 for w in weeks)
    assert "burn_down" in result["teams"]["vision"]
