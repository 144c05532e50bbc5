"""The month's budget burn-down from the weekly demand forecast (one demand model: its weekly rate is
the weekly P50), on hand-made forecasts and on a real ledger (as of a past moment it reads only what was
known then), and the command line."""
from __future__ import annotations

import datetime as dt
import json
import math
import subprocess
import sys

import pytest

from lib.dashboard.filters import Filters
from lib.dashboard.forecasts import plan_ahead
from lib.gate.terms import next_month_start
from lib.ledger.connection import open_ledger, transaction
from lib.ledger.forecast import forecast, week_start
from lib.ledger.team_weeks import rebuild as rebuild_team_weeks
from lib.planning.forecast.demand import MAX_WEEKS, burn_down, naive_forecast
from tests.fixtures_app import ROOT

MONDAY = dt.date(2026, 12, 14)


def steady_demand(p50: float, point: float | None = None, sum_p90: float = 1.0) -> dict:
    """A weekly forecast (lib.planning.forecast.demand.TeamForecast) of `p50` GPU-hours every week from MONDAY."""
    point = p50 if point is None else point
    return {"model": "level", "point": [point] * MAX_WEEKS, "sum_p90": [sum_p90] * MAX_WEEKS,
            "weeks": [{"week_start": MONDAY + dt.timedelta(weeks=h), "horizon": h + 1, "p50_gpu_hours": p50,
                       "p90_gpu_hours": p50 * 2, "quota_for_p90_gpus": 1} for h in range(MAX_WEEKS)]}


def test_the_naive_baseline_is_the_mean_and_max_of_the_last_four_weeks():
    assert naive_forecast([1, 2, 3, 4, 5, 6]) == (4.5, 6.0)


def test_burn_down_spends_each_day_a_seventh_of_its_weeks_p50_and_names_the_exhaustion_day():
    b = burn_down(200.0, 100.0, dt.date(2026, 12, 20), dt.date(2026, 12, 31), steady_demand(70.0), [])
    assert b["days_left"] == 12
    assert b["path"][0] == {"day": dt.date(2026, 12, 20), "p50_gpu_hours": 110.0, "p90_gpu_hours": 110.0}
    assert b["exhausts_p50"] == dt.date(2026, 12, 29)            # 100 + 10 x 10 days reaches 200
    assert b["p50_month_end_gpu_hours"] == 220.0
    assert burn_down(300.0, 100.0, dt.date(2026, 12, 20), dt.date(2026, 12, 31), steady_demand(70.0),
                     [])["exhausts_p50"] is None


def test_the_burn_down_follows_the_weeks_it_crosses():
    demand = steady_demand(70.0)
    demand["weeks"][1] = {**demand["weeks"][1], "p50_gpu_hours": 140.0}       # the week of 21 December doubles
    b = burn_down(1e9, 0.0, dt.date(2026, 12, 19), dt.date(2026, 12, 31), demand, [])
    totals = [0.0] + [p["p50_gpu_hours"] for p in b["path"]]
    per_day = [round(after - before, 1) for before, after in zip(totals, totals[1:])]
    assert per_day == [10.0, 10.0] + [20.0] * 7 + [10.0] * 4


def test_the_p90_path_is_the_point_forecast_times_the_models_p90_of_sums():
    b = burn_down(1e9, 0.0, dt.date(2026, 12, 14), dt.date(2026, 12, 31), steady_demand(70.0, 77.0, 1.5), [])
    assert b["path"][6]["p90_gpu_hours"] == pytest.approx(77.0 * 1.5, abs=0.05)    # a week: 77 x 1.5
    assert all(p["p90_gpu_hours"] >= p["p50_gpu_hours"] for p in b["path"])


def test_committed_reservations_due_to_end_set_a_floor_under_the_projection():
    ends = [(dt.datetime(2026, 12, 21, 12), 500.0)]
    b = burn_down(400.0, 100.0, dt.date(2026, 12, 20), dt.date(2026, 12, 31), steady_demand(70.0), ends)
    assert b["path"][0]["p50_gpu_hours"] == 110.0                 # not due yet
    assert b["path"][1]["p50_gpu_hours"] == 600.0                 # due by the end of the 21st
    assert b["exhausts_p50"] == dt.date(2026, 12, 21) and b["committed_gpu_hours"] == 500.0


def test_the_burn_downs_weekly_rate_is_the_weekly_forecasts_p50(page_ledger):
    """One demand model: on the Forecast page's data, each team's projected spend for the rest of the
    month is the weekly P50 of the weeks it crosses, a seventh a day."""
    path, now = page_ledger
    with open_ledger(path) as con, transaction(con):
        rebuild_team_weeks(con)           # as every write path keeps it (the fixture writes runs directly)
    data = plan_ahead(Filters(now.date() - dt.timedelta(days=28), now.date()), path, now)
    month_end = (next_month_start(now) - dt.timedelta(days=1)).date()
    days = [now.date() + dt.timedelta(days=i) for i in range((month_end - now.date()).days + 1)]
    p50 = {(w.team, w.week_start): w.p50_gpu_hours for w in data["weeks"].itertuples()}
    compared = 0
    for b in data["burn"].itertuples():
        to_come = sum(p50[(b.team, week_start(d))] / 7 for d in days)
        if to_come < b.committed_gpu_hours:
            continue                      # the committed reservations are the floor here, not the forecast
        implied_weekly = (b.p50_month_end_gpu_hours - b.consumed_gpu_hours) / b.days_left * 7
        assert implied_weekly == pytest.approx(to_come / len(days) * 7, abs=0.1 * 7 / len(days) + 1e-9)
        compared += 1
    assert compared >= 2 and set(data["models"]["model"]) != {"mean"}


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


def test_the_command_line_prints_weeks_up_to_half_a_year_with_the_model_and_the_burn_down(page_ledger):
    path, now = page_ledger
    out = subprocess.run([sys.executable, "-m", "lib", "forecast", "--db", str(path), "--weeks", "26",
                          "--as-of", (now - dt.timedelta(days=7)).isoformat()],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    vision = result["teams"]["vision"]
    weeks = vision["weeks"]
    assert len(weeks) == 26 and {"week_start", "p50_gpu_hours", "p90_gpu_hours"} <= set(weeks[0])
    assert all(w["p90_gpu_hours"] >= w["p50_gpu_hours"] >= 0 for w in weeks)
    names = {f"{m}{y}" for m in ("combined", "level", "damped-trend", "log-trend") for y in ("", "+year-end")}
    assert vision["model"] in names | {"mean"}
    b = vision["burn_down"]
    assert math.isfinite(b["p50_month_end_gpu_hours"]) and b["p90_month_end_gpu_hours"] >= b["p50_month_end_gpu_hours"]
