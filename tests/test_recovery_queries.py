"""lib.dashboard.recovery_view.recovery_inputs on a hand-built ledger: MTBF, restart time and empirical lifetimes per
team x capacity type, with numbers worked out by hand."""
from __future__ import annotations

import datetime as dt
import math

import pytest

from lib.dashboard import recovery_view
from lib.dashboard.filters import Filters
from lib.ledger.connection import open_ledger, transaction
from lib.dashboard.labels import ALL_TEAMS
from lib.dashboard.recovery_view import default_restart_h, recovery_inputs
from tests.fixtures_app import insert_teams
from tests.fixtures_gate import NOW

H = dt.timedelta(hours=1)


def period(**kw):
    return Filters(date_from=(NOW - dt.timedelta(days=10)).date(), date_to=NOW.date(), **kw)


def add_run(con, run_id, team, capacity, gpus, actual, interruptions, restarts=None, retry=None, *,
            ended_at=NOW - 24 * H, kind="exploratory"):
    con.execute("""INSERT INTO runs (run_id, team, kind, capacity, gpus, started_at, ended_at, actual_gpu_hours,
                   interruptions, restarts, act_retry_gpu_hours, stop_reason, source, updated_at)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'completed', 'test', ?)""",
                [run_id, team, kind, capacity, gpus, None if ended_at is None else ended_at - 10 * H, ended_at,
                 actual, interruptions, restarts, retry, NOW])


@pytest.fixture(scope="module")
def recovery_ledger(tmp_path_factory):
    """Hand-made runs of speech and vision whose interruption figures the tests work out (the comments).
    Read only."""
    path = tmp_path_factory.mktemp("recovery") / "recovery.duckdb"
    with open_ledger(path) as con, transaction(con):
        insert_teams(con)
        # speech, preemptible: 10 h with 4 interruptions (restart 2 / (4 x 2) = 0.25 h; gaps 10/5 = 2 h x 4),
        # 6 h with 1 (restart 0.4 / 4 = 0.1 h; gap 6/2 = 3 h), 4 h never interrupted
        add_run(con, "a", "speech", "preemptible", 2, 20.0, 4, 4, 2.0)
        add_run(con, "b", "speech", "preemptible", 4, 24.0, 1, 1, 0.4, kind="production")
        add_run(con, "c", "speech", "preemptible", 1, 4.0, 0, 0, 0.0)
        # speech, stable: 10 h on 8 GPUs, never interrupted
        add_run(con, "d", "speech", "stable", 8, 80.0, 0, 0, None)
        # vision, preemptible: 10 h on 16 GPUs, 1 interruption, no retry GPU-hours recorded
        add_run(con, "e", "vision", "preemptible", 16, 160.0, 1, 1, None)
        # left out: still running, ended before the period, no interruption count, no spend
        add_run(con, "running", "speech", "preemptible", 2, 50.0, 9, 9, 9.0, ended_at=None)
        add_run(con, "old", "speech", "preemptible", 2, 50.0, 9, 9, 9.0, ended_at=NOW - 40 * 24 * H)
        add_run(con, "uncounted", "speech", "preemptible", 2, 50.0, None, 9, 9.0)
        add_run(con, "zero", "speech", "preemptible", 2, 0.0, 3, 3, 0.0)
    return path


def row(rates, team, capacity):
    r = rates[(rates["team"] == team) & (rates["capacity"] == capacity)]
    assert len(r) == 1, (team, capacity, rates)
    return r.iloc[0].to_dict()


def lifetimes_of(lt, team, capacity):
    return sorted(lt.loc[(lt["team"] == team) & (lt["capacity"] == capacity), "lifetime_h"].tolist())


def test_rates_per_team_and_capacity_are_exact(recovery_ledger):
    out = recovery_inputs(period(), recovery_ledger, NOW)
    rates, lt = out["rates"], out["lifetimes"]
    assert set(zip(rates["team"], rates["capacity"])) == {
        ("speech", "preemptible"), ("speech", "stable"), ("vision", "preemptible"),
        (ALL_TEAMS, "preemptible"), (ALL_TEAMS, "stable")}
    sp = row(rates, "speech", "preemptible")
    assert (sp["runs"], sp["interrupted_runs"], sp["interruptions"]) == (3, 2, 5)
    assert sp["run_hours"] == pytest.approx(20.0) and sp["gpu_hours"] == pytest.approx(48.0)
    assert sp["mtbf_h"] == pytest.approx(4.0)
    assert sp["median_gpus"] == 2.0
    assert sp["restart_runs"] == 2 and sp["restart_source"] == "ledger"
    assert sp["restart_h"] == pytest.approx((0.25 + 0.1) / 2)
    # Kaplan-Meier lifetimes: 4 interruptions at 2 h and 1 at 3 h; censored at 2, 3 and 4 h (each run's
    # last gap and run c). S(2) = 1 - 4/8 = 1/2, S(3) = 1/2 x (1 - 1/3) = 1/3; beyond 3 h an exponential
    # tail with the MTBF 20 h / 5 = 4 h. 8 lifetimes at probabilities (i + 0.5) / 8: four at 2 h, one at
    # 3 h, then 3 + 4 ln((1/3) / (1 - u)) for u = 0.6875, 0.8125, 0.9375
    assert sp["lifetime_samples"] == 8 and sp["censored_lifetimes"] == 3 and not sp["enough_lifetimes"]
    tail = [3 + 4 * math.log((1 / 3) / (1 - u)) for u in (0.6875, 0.8125, 0.9375)]
    assert lifetimes_of(lt, "speech", "preemptible") == pytest.approx([2.0, 2.0, 2.0, 2.0, 3.0] + tail)


def test_no_interruptions_leave_the_mtbf_empty_and_no_retries_use_the_default_restart(recovery_ledger):
    rates = recovery_inputs(period(), recovery_ledger, NOW)["rates"]
    st_ = row(rates, "speech", "stable")
    assert st_["interruptions"] == 0 and math.isnan(st_["mtbf_h"])
    assert st_["restart_source"] == "default" and st_["restart_h"] == pytest.approx(5 / 60)
    assert st_["lifetime_samples"] == 0 and st_["censored_lifetimes"] == 1   # no interruption: no curve
    vi = row(rates, "vision", "preemptible")
    assert vi["mtbf_h"] == pytest.approx(10.0)
    assert vi["restart_runs"] == 0 and vi["restart_source"] == "default"
    assert vi["restart_h"] == pytest.approx(10 / 60)   # 16 GPUs: up to 64 -> 10 minutes


def test_pooled_rows_cover_every_shown_team(recovery_ledger):
    out = recovery_inputs(period(), recovery_ledger, NOW)
    pool = row(out["rates"], ALL_TEAMS, "preemptible")
    assert (pool["runs"], pool["interruptions"]) == (4, 6)
    assert pool["run_hours"] == pytest.approx(30.0) and pool["mtbf_h"] == pytest.approx(5.0)
    assert pool["median_gpus"] == pytest.approx(3.0)
    assert pool["restart_h"] == pytest.approx(0.175) and pool["restart_source"] == "ledger"
    # with vision's run (an interruption at 5 h, censored at 5 h): S(2) = 0.6, S(3) = 0.48, S(5) = 0.24,
    # MTBF 30 h / 6 = 5 h; 10 lifetimes at probabilities 0.05, 0.15, ..., 0.95
    tail = [5 + 5 * math.log(0.24 / (1 - u)) for u in (0.85, 0.95)]
    assert lifetimes_of(out["lifetimes"], ALL_TEAMS, "preemptible") == pytest.approx([2, 2, 2, 2, 3, 5, 5, 5] + tail)


def test_the_sidebar_filters_apply(recovery_ledger):
    speech = recovery_inputs(period(teams=("speech",)), recovery_ledger, NOW)["rates"]
    assert set(speech["team"]) == {"speech", ALL_TEAMS}
    assert row(speech, ALL_TEAMS, "preemptible")["mtbf_h"] == pytest.approx(4.0)
    stable = recovery_inputs(period(capacity="stable"), recovery_ledger, NOW)["rates"]
    assert set(stable["capacity"]) == {"stable"}
    production = recovery_inputs(period(kinds=("production",)), recovery_ledger, NOW)["rates"]
    assert row(production, "speech", "preemptible")["mtbf_h"] == pytest.approx(6.0)
    nobody = recovery_inputs(period(teams=("o'brien; DROP TABLE runs",)), recovery_ledger, NOW)
    assert nobody["rates"].empty and nobody["lifetimes"].empty


def test_lifetimes_are_capped_per_row(recovery_ledger, monkeypatch):
    monkeypatch.setattr(recovery_view, "MAX_LIFETIME_SAMPLES", 3)
    out = recovery_inputs(period(), recovery_ledger, NOW)
    assert row(out["rates"], "speech", "preemptible")["lifetime_samples"] == 3
    assert len(lifetimes_of(out["lifetimes"], "speech", "preemptible")) == 3
    assert len(lifetimes_of(out["lifetimes"], ALL_TEAMS, "preemptible")) == 3


def test_an_empty_ledger_gives_empty_frames(tmp_path):
    path = tmp_path / "empty.duckdb"
    with open_ledger(path):
        pass
    out = recovery_inputs(period(), path, NOW)
    assert out["rates"].empty and out["lifetimes"].empty
    assert "mtbf_h" in out["rates"] and "lifetime_h" in out["lifetimes"]


@pytest.mark.parametrize("gpus,minutes", [(1, 5), (8, 5), (9, 10), (64, 10), (65, 15), (4096, 15), (None, 5)])
def test_the_default_restart_time_grows_with_the_job(gpus, minutes):
    assert default_restart_h(gpus) == pytest.approx(minutes / 60)
