"""Calibration looks for each scope's newest runs in the last days first and widens the window only
while it holds too few: on a long history that skips what lies before (DuckDB's zone maps), and the
answer must be exactly the whole window's. Real demo ledger; the whole-window answer is had by
turning the newest-first windows off."""
import pandas as pd
import pytest

from lib.dashboard import estimate_queries
from lib.dashboard.filters import Filters
from lib.ledger import calibration_rows as calib
from lib.ledger.calibration_scopes import calibrations
from lib.ledger.connection import open_ledger
from tests.fixtures_gate import NOW

FEW = 15   # rows per scope: few enough that a busy scope finds them within the last week


def test_the_newest_rows_of_a_busy_scope_come_from_the_last_days_and_equal_the_whole_windows(busy_ledger, monkeypatch):
    p = {**calib.calibration_params(NOW), "max_runs": FEW, "team": "nlp-research", "kind": "exploratory"}
    sql = (f"SELECT run_id, ended_at FROM ({calib.CALIBRATION_ROWS_SQL}) WHERE team = $team AND kind = $kind "
           f"{calib.CALIBRATION_ORDER} LIMIT $max_runs")
    with open_ledger(busy_ledger, read_only=True) as con:
        week = con.execute(sql, {**p, "since": NOW - pd.Timedelta(days=calib.NEWEST_FIRST_DAYS[0]).to_pytimedelta()}).fetchall()
        assert len(week) == FEW, "the scope must be busy enough for the narrow window to answer"
        got = calib.newest_rows(con, sql, p, FEW)
        whole = con.execute(sql, p).fetchall()
    assert got == whole == week


def test_a_scope_short_of_rows_is_read_over_the_whole_window(busy_ledger):
    p = {**calib.calibration_params(NOW), "max_runs": 10_000, "team": "safety", "kind": "retraining"}
    sql = (f"SELECT run_id FROM ({calib.CALIBRATION_ROWS_SQL}) WHERE team = $team AND kind = $kind "
           f"{calib.CALIBRATION_ORDER} LIMIT $max_runs")
    with open_ledger(busy_ledger, read_only=True) as con:
        whole = con.execute(sql, p).fetchall()
        assert calib.newest_rows(con, sql, p, 10_000) == whole


@pytest.mark.parametrize("max_runs", [FEW, 60, 1000])
def test_the_gates_calibration_is_the_same_with_or_without_the_newest_first_windows(busy_ledger, monkeypatch, max_runs):
    with open_ledger(busy_ledger, read_only=True) as con:
        fast = {(t, k): calib.calibration(con, t, k, NOW, max_runs=max_runs)
                for t in ("nlp-research", "ranking", "safety") for k in ("exploratory", "production", "retraining")}
        monkeypatch.setattr(calib, "NEWEST_FIRST_DAYS", ())
        slow = {key: calib.calibration(con, *key, NOW, max_runs=max_runs) for key in fast}
    assert fast == slow


@pytest.mark.parametrize("max_runs", [FEW, 60])
def test_the_dashboards_calibration_table_and_alarms_are_the_same_with_or_without_them(busy_ledger, monkeypatch, max_runs):
    f = Filters(NOW.date(), NOW.date())
    with open_ledger(busy_ledger, read_only=True) as con:
        p = {**calib.calibration_params(NOW), "max_runs": max_runs}
        teams = [t for (t,) in con.execute(calib.KNOWN_TEAMS).fetchall()]
        cut = calib.newest_cutoffs(con, calib.CALIBRATION_ROWS_SQL, p, max_runs + estimate_queries.BACKTEST_RUNS, teams)
    fast = estimate_queries.calibration_shown(f, busy_ledger, NOW, max_runs=max_runs)
    monkeypatch.setattr(calib, "NEWEST_FIRST_DAYS", ())
    slow = estimate_queries.calibration_shown(f, busy_ledger, NOW, max_runs=max_runs)
    if max_runs == FEW:
        assert any(since > p["since"] for since in cut.values()), "some scope must be cut short"
    pd.testing.assert_frame_equal(fast["table"], slow["table"])
    pd.testing.assert_frame_equal(fast["alarms"], slow["alarms"])


@pytest.mark.parametrize("max_runs", [FEW, 60, 1000])
def test_every_team_and_kind_calibrated_at_once_is_each_ones_own_calibration(busy_ledger, max_runs):
    with open_ledger(busy_ledger, read_only=True) as con:
        teams = [t for (t,) in con.execute(calib.KNOWN_TEAMS).fetchall()]
        pairs = [(t, k) for t in teams + ["no-such-team"] for k in ("exploratory", "production", "retraining")]
        at_once = calibrations(con, pairs, NOW, max_runs=max_runs)
        each = {pair: calib.calibration(con, *pair, NOW, max_runs=max_runs) for pair in pairs}
    assert len(teams) >= 3 and at_once == each
    assert {c["scope"] for c in each.values()} >= {"team×kind", "all"}, "the fallback scopes must be exercised"
