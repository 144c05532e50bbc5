"""The capacity calendar: accelerators committed and free per team and day ahead, read from the forward
plan, whose timeline is the one the gate's earliest fit reads — so each day's committed count is what
the gate would count then, and free is what it would admit (for experiments, and for retraining)."""
from __future__ import annotations

import datetime as dt

import pandas as pd
import pytest

from lib.dashboard import queue_and_calendar, reservation_queries
from lib.dashboard.filters import Filters
from lib.gate.capacity import held_at, holdings_timeline
from lib.ledger.connection import open_ledger
from lib.ledger.state import held_reservations, team_state
from lib.planning.plan.forward import forward_plan
from tests.fixtures_app import TEAMS, fill_ledger
from tests.fixtures_gate import NOW, policy
from tests.fixtures_plan import held, plan_inputs

H = dt.timedelta(hours=1)


def holder(gpus, until, kind="exploratory", team="safety"):
    return {"team": team, "kind": kind, "gpus": gpus, "reserved_gpu_hours": 1.0, "reserved_until": until}


def test_the_timeline_releases_each_holder_at_its_end_and_never_an_open_ended_one():
    holders = [holder(4, NOW + 2 * H), holder(3, NOW + 2 * H), holder(2, None), holder(5, NOW + 5 * H),
               holder(6, NOW - H)]                      # ended before now: holds nothing
    assert holdings_timeline(NOW, holders) == [
        {"at": NOW, "gpus": 14}, {"at": NOW + 2 * H, "gpus": 7}, {"at": NOW + 5 * H, "gpus": 2}]
    assert holdings_timeline(NOW, []) == [{"at": NOW, "gpus": 0}]
    timeline = holdings_timeline(NOW, holders)
    assert [held_at(timeline, NOW + k * H) for k in (0, 1, 2, 4, 5, 100)] == [14, 14, 7, 7, 2, 2]


def test_each_days_committed_count_is_what_the_gate_counts_at_that_day_start(tmp_path):
    path = tmp_path / "gate.duckdb"
    now = fill_ledger(path, n_runs=600) + dt.timedelta(minutes=23)
    cal = reservation_queries.reservations(Filters(now.date(), now.date()), path, now)["calendar"]
    teams = [t[0] for t in TEAMS]
    assert len(cal) == queue_and_calendar.CALENDAR_DAYS * len(teams)       # one row per team and day, no totals
    today = dt.datetime.combine(now.date(), dt.time())
    with open_ledger(path, read_only=True) as con:
        assert any(r["reserved_from"] > now for r in held_reservations(con, now))   # upcoming ones count too
        for i in range(queue_and_calendar.CALENDAR_DAYS):
            day = today + dt.timedelta(days=i)
            at = max(now, day)
            rows = cal[cal["day"] == pd.Timestamp(day)].set_index("team")
            for team in teams:
                # what the gate holds now, each reservation until its expected end, at the day's start (the
                # queue of this ledger holds no complete request, so the plan starts nothing). Not the state
                # at the day's start as the ledger stands: every run not ended by then would still hold.
                gate_counts = held_at(holdings_timeline(now, team_state(con, team, now)["reservations"]), at)
                assert rows.loc[team, "committed_gpus"] == gate_counts, (team, day)
                if i == 0:
                    assert gate_counts == sum(r["gpus"] for r in team_state(con, team, at)["reservations"])
    first = cal[cal["day"] == pd.Timestamp(today)]
    assert first["committed_gpus"].sum() > 0


def test_free_never_goes_below_zero_and_over_commitment_is_shown():
    safety = policy(team="safety", reserved_gpus=16, retraining_reserved_gpus=0)
    speech = policy(team="speech", reserved_gpus=32, retraining_reserved_gpus=8)
    inputs = plan_inputs([held("s-1", 12, 30, team="safety"), held("s-2", 9, 3, team="safety"),
                          held("sp-1", 8, None, team="speech")], [], policies={"safety": safety, "speech": speech})
    cal = pd.DataFrame(forward_plan(inputs, days=3)["calendar"]).set_index(["date", "team"])
    d0, d1, d2 = (NOW.date() + dt.timedelta(days=i) for i in range(3))
    assert cal.loc[(d0, "safety"), ["committed_gpus", "free_gpus", "retraining_free_gpus"]].tolist() == [21, 0, 16]
    assert cal.loc[(d1, "safety"), "committed_gpus"] == 12 and cal.loc[(d1, "safety"), "free_gpus"] == 4
    assert cal.loc[(d2, "safety"), "committed_gpus"] == 0
    assert cal.loc[(d2, "speech"), "committed_gpus"] == 8                     # no end: held every day
    # the retraining set-aside is not free for experiments: 32 - 8 set aside - 8 held
    assert cal.loc[(d2, "speech"), ["free_gpus", "retraining_free_gpus"]].tolist() == [16, 32]


def test_the_team_filter_applies_and_the_kind_and_capacity_filters_do_not(tmp_path):
    path = tmp_path / "gate.duckdb"
    now = fill_ledger(path, n_runs=300)
    day = now.date()
    everyone = reservation_queries.reservations(Filters(day, day), path, now)["calendar"]
    narrowed = reservation_queries.reservations(Filters(day, day, teams=("safety",), kinds=("production",),
                                            capacity="preemptible"), path, now)["calendar"]
    assert set(narrowed["team"]) == {"safety"}
    safety = everyone[everyone["team"] == "safety"].reset_index(drop=True)
    pd.testing.assert_frame_equal(narrowed.reset_index(drop=True), safety)


@pytest.mark.parametrize("minutes, next_day", [(0, 0), (59, 4)])
def test_today_starts_at_now_and_a_hold_past_midnight_counts_the_next_day(minutes, next_day):
    now = NOW.replace(hour=23, minute=minutes)   # held until now + 30 min: 23:30, or 00:29 the next day
    safety = policy(team="safety", reserved_gpus=16, retraining_reserved_gpus=0)
    hold = held("s", 4, 0.5, team="safety")
    hold["reserved_until"] = now + H / 2
    cal = forward_plan(plan_inputs([hold], [], policies={"safety": safety}, as_of=now), days=2)["calendar"]
    assert [r["date"] for r in cal] == [now.date(), now.date() + dt.timedelta(days=1)]
    assert [r["committed_gpus"] for r in cal] == [4, next_day]
