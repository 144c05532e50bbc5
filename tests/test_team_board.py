"""Overview's team board: one row per team, riskiest first, with the budget left (now and at month end),
free accelerators, the queue, the drift flag and idle cost; and the teams whose budget may run out this
month named on Overview with their days."""
from __future__ import annotations

import datetime as dt

import pandas as pd
import pytest

from lib.dashboard import overview_queries, team_board
from lib.dashboard.filters import Filters, default_filters
from tests.fixtures_app import open_app
from tests.fixtures_ledger import query


@pytest.fixture(scope="module")
def queue_board(queue_ledger):
    """The board of the queue ledger (tests/fixtures_plan.build_queue_ledger) at its NOW: (board rows by
    team, the result, the ledger, now)."""
    db, now = queue_ledger
    f = Filters(date_from=(now - dt.timedelta(days=28)).date(), date_to=now.date())
    got = team_board.team_board(f, db, now)
    return got["board"].set_index("team"), got, db, now


def test_budget_left_is_the_budget_less_what_ended_this_month_and_what_admitted_reservations_hold(queue_board):
    rows, _, db, now = queue_board
    # beta ended 390 + 4 GPU-h this month and holds nothing: 6 of its 400 left
    assert rows.loc["beta", "budget_gpu_hours"] == 400
    assert rows.loc["beta", "budget_left_gpu_hours"] == pytest.approx(6.0)
    # alpha ended nothing this month (its 380 were November's) and holds two admitted reservations
    (held,) = query(db, "SELECT sum(reserved_gpu_hours) FROM runs WHERE team = 'alpha' AND ended_at IS NULL")[0]
    assert held > 0
    assert rows.loc["alpha", "budget_left_gpu_hours"] == pytest.approx(400 - held)


def test_the_team_that_runs_out_today_comes_first_and_is_named_with_its_days(queue_board):
    rows, got, _, now = queue_board
    assert list(rows.index) == ["beta", "alpha"]
    assert rows.loc["beta", "runs_out_p50"].date() == now.date() == rows.loc["beta", "runs_out_p90"].date()
    assert pd.isna(rows.loc["alpha", "runs_out_p90"])
    assert rows.loc["beta", "left_p90_month_end_gpu_hours"] < 0 < rows.loc["alpha", "left_p90_month_end_gpu_hours"]
    assert team_board.runout_this_month(got["burn"]) == [
        {"team": "beta", "exhausts_p50": now.date(), "exhausts_p90": now.date()}]


def test_free_accelerators_and_the_queue_come_from_the_forward_plan(queue_board):
    rows, _, _, now = queue_board
    # alpha: quota 16, 8 held by an experiment, the 4 set aside for retraining held by retraining, and
    # November's three waiting requests (1 each), first in the line, start now
    assert rows.loc["alpha", "free_gpus_now"] == 16 - 8 - 4 - 3
    assert rows.loc["beta", "free_gpus_now"] == 8 - 4   # its quota less beta-cap (4), which the line starts now
    assert rows.loc["alpha", "fewest_free_7d_gpus"] <= rows.loc["alpha", "free_gpus_now"] + 8
    # alpha waits with three requests of late November (queue age 60 days) and three of this morning;
    # the oldest was deferred on Nov 24 at 13:00
    assert rows.loc["alpha", "queued_requests"] == 6
    assert rows.loc["alpha", "oldest_wait_hours"] == pytest.approx(
        (now - dt.datetime(2026, 11, 24, 13)).total_seconds() / 3600)
    # beta: the budget deferral of 30 h ago and the capacity one; the 20-day-old one has expired
    assert rows.loc["beta", "queued_requests"] == 2
    assert rows.loc["beta", "oldest_wait_hours"] == pytest.approx(30.0)


def test_the_risk_order_puts_the_earliest_run_out_first_then_the_least_left():
    d = pd.Timestamp
    board = pd.DataFrame({
        "team": ["calm", "p90-late", "p90-early", "tight", "p50-too"],
        "runs_out_p90": [pd.NaT, d("2026-12-28"), d("2026-12-20"), pd.NaT, d("2026-12-20")],
        "runs_out_p50": [pd.NaT, pd.NaT, pd.NaT, pd.NaT, d("2026-12-24")],
        "budget_gpu_hours": [100.0, 100.0, 100.0, 1000.0, 100.0],
        "left_p90_month_end_gpu_hours": [50.0, -1.0, -5.0, 100.0, -5.0]})
    assert list(team_board.risk_order(board)["team"]) == ["p50-too", "p90-early", "p90-late", "tight", "calm"]


def test_idle_hours_per_team_add_up_to_overviews_idle_hours_and_are_priced(page_ledger):
    path, now = page_ledger
    f = default_filters(now.date())
    got = team_board.team_board(f, path, now)
    board = got["board"]
    idle = overview_queries.overview(f, path, now)["current"]["idle_gpu_hours"]
    assert idle > 0
    assert board["idle_gpu_hours"].sum() == pytest.approx(idle)
    assert set(board["team"]) == {t for (t,) in query(path, "SELECT team FROM teams")}
    if got["currency"]:
        assert (board["idle_cost"] > 0).any()


def test_overview_shows_the_board_and_names_the_teams_at_risk_with_their_days(page_ledger):
    path, now = page_ledger
    from lib.ledger.connection import open_ledger
    with open_ledger(path) as con:   # speech's budget all but spent: it runs out this month at P50 and P90
        con.execute("UPDATE teams SET monthly_budget_gpu_hours = 1 WHERE team = 'speech'")
    at = open_app("overview")
    assert not at.exception, [e.value for e in at.exception]
    (warning,) = [w.value for w in at.warning if "may run out this month" in w.value]
    first = warning.split("\n")[1]
    assert first.startswith("- **speech**: P90 ") and ", P50 " in first
    grids = [g.value for g in at.dataframe if "runs_out_p90" in g.value.columns]
    assert len(grids) == 1
    assert grids[0]["team"].iloc[0] == "speech"
    assert grids[0]["drift"].notna().all()
    assert any("Teams this month" in h.value for h in at.subheader)


def test_the_drift_column_names_each_drifting_kind_with_since_when():
    board = pd.DataFrame({"team": ["a", "b"], "drift": [None, None]})
    alarms = pd.DataFrame({"team": ["b", "b"], "kind": ["production", "retraining"],
                           "drift_since": pd.to_datetime(["2026-11-20", None])})
    assert list(team_board.with_drift(board, alarms)["drift"]) == ["", "production since 2026-11-20, retraining"]

