"""team_weeks, each team's GPU-hours per week kept beside runs for the demand forecast, stays what a
rebuild from runs gives after every write path: the demo build, a CSV import that adds runs and one
that moves them, a submit and a finish; and the live forecast read from it is the forecast summed
from runs. Real ledgers, no mocks."""
from __future__ import annotations

import datetime as dt

import pytest

from lib.ledger.connection import open_ledger
from lib.ledger.forecast import forecast
from lib.ledger.imports import import_runs
from lib.ledger.deciding import submit_request
from lib.ledger.finishing import finish_run
from lib.ledger import team_weeks
from lib.ledger.team_weeks import GPU_HOURS, WEEK
from tests.fixtures_gate import NOW
from tests.fixtures_ledger import demo_request, query

HEADER = "run_id,team,kind,gpus,reserved_gpu_hours,actual_gpu_hours,started_at,ended_at"


def kept(db) -> dict:
    return {(t, w): h for t, w, h in query(db, "SELECT team, week, gpu_hours FROM team_weeks")}


def from_runs(db) -> dict:
    return {(t, w): h for t, w, h in query(
        db, f"SELECT team, {WEEK}, {GPU_HOURS} FROM runs WHERE started_at IS NOT NULL GROUP BY ALL")}


def assert_kept(db) -> None:
    got, want = kept(db), from_runs(db)
    assert got.keys() == want.keys()
    assert got == {k: pytest.approx(v, rel=1e-12, abs=1e-9) for k, v in want.items()}


def test_the_demo_build_keeps_the_weekly_usage(demo_ledger):
    assert len(kept(demo_ledger)) > 100
    assert_kept(demo_ledger)


@pytest.mark.parametrize("refresh_at_most", [2000, 1], ids=["weeks-touched", "rebuilt"])
def test_an_import_that_adds_runs_and_one_that_moves_them_keep_it(demo_ledger, tmp_path, monkeypatch, refresh_at_most):
    monkeypatch.setattr(team_weeks, "REFRESH_AT_MOST", refresh_at_most)   # a large import rebuilds instead
    first = tmp_path / "first.csv"
    first.write_text(HEADER + "\n"
                     "tw-001,vision,exploratory,4,40,36.5,2026-11-02T10:00:00,2026-11-02T20:00:00\n"
                     "tw-002,vision,production,8,80,,2026-11-03T10:00:00,\n"      # running: its reservation counts
                     "tw-003,ads,exploratory,2,10,,,\n", encoding="utf-8")       # never started: counts nowhere
    assert import_runs(first, db=demo_ledger).inserted == 3
    assert_kept(demo_ledger)
    moved = tmp_path / "moved.csv"
    moved.write_text(HEADER + "\n"
                     "tw-001,vision,exploratory,4,40,50.0,2026-11-10T10:00:00,2026-11-10T22:30:00\n"
                     "tw-002,vision,production,8,80,75.0,2026-11-03T10:00:00,2026-11-04T05:00:00\n", encoding="utf-8")
    assert import_runs(moved, db=demo_ledger).updated == 2
    assert_kept(demo_ledger)
    week = query(demo_ledger, "SELECT gpu_hours FROM team_weeks WHERE team = 'vision' AND week = DATE '2026-11-09'")
    assert week and week[0][0] >= 50.0


def test_a_submit_changes_no_week_and_a_finish_changes_its_own(demo_ledger):
    before = kept(demo_ledger)
    assert submit_request(demo_request(run_id="vision-tw-100"), db=demo_ledger, now=NOW)["state"] == "admit"
    assert kept(demo_ledger) == before
    finish_run("vision-tw-100", actual_gpu_hours=12.5, stop_reason="completed",
               started_at="2026-12-14T09:00:00", ended_at="2026-12-14T12:00:00", db=demo_ledger)
    assert_kept(demo_ledger)
    after = kept(demo_ledger)
    assert {k for k in after if after[k] != before.get(k)} == {("vision", dt.date(2026, 12, 14))}


def test_the_live_forecast_read_from_it_is_the_forecast_summed_from_runs(demo_ledger):
    with open_ledger(demo_ledger, read_only=True) as con:
        assert con.execute("SELECT count(*) FROM runs WHERE ended_at > ?", [NOW]).fetchall() == [(0,)]
    live = forecast(demo_ledger, as_of=NOW, live=True)
    summed = forecast(demo_ledger, as_of=NOW, live=False)
    assert live["history"][["team", "week"]].equals(summed["history"][["team", "week"]])
    assert live["history"]["gpu_hours"].tolist() == pytest.approx(summed["history"]["gpu_hours"].tolist())
    for team, e in summed["teams"].items():
        for got, want in zip(live["teams"][team]["weeks"], e["weeks"]):
            assert (got["p50_gpu_hours"], got["p90_gpu_hours"]) == pytest.approx((want["p50_gpu_hours"], want["p90_gpu_hours"]))
