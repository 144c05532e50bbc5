"""The capacity calendar: accelerators committed per team and day ahead, read from the one timeline
the gate's earliest fit reads, so each day's committed count is what the gate would count then."""
from __future__ import annotations

import datetime as dt

import pandas as pd
import pytest

from lib.dashboard import queue_and_calendar, reservation_queries
from lib.dashboard.labels import ALL_TEAMS
from lib.dashboard.filters import Filters
from lib.gate.capacity import held_at, holdings_timeline
from lib.ledger.connection import open_ledger
from lib.ledger.state import held_reservations, team_state
from tests.fixtures_app import TEAMS, fill_ledger
from tests.fixtures_gate import NOW

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
    assert len(cal) == queue_and_calendar.CALENDAR_DAYS * (len(teams) + 1)
    today = dt.datetime.combine(now.date(), dt.time())
    with open_ledger(path, read_only=True) as con:
        assert any(r["reserved_from"] > now for r in held_reservations(con, now))   # upcoming ones count too
        for i in range(queue_and_calendar.CALENDAR_DAYS):
            day = today + dt.timedelta(days=i)
            at = max(now, day)
            rows = cal[cal["day"] == pd.Timestamp(day)].set_index("team")
            for team in teams:
                # the state the gate decides on, were a request made at the day's start
                gate_counts = sum(r["gpus"] for r in team_state(con, team, at)["reservations"])
                assert rows.loc[team, "committed_gpus"] == gate_counts, (team, day)
            assert rows.loc[ALL_TEAMS, "committed_gpus"] == rows.loc[teams, "committed_gpus"].sum()
    first = cal[cal["day"] == pd.Timestamp(today)]
    assert first["committed_gpus"].sum() > 0


def test_free_never_goes_below_zero_and_over_commitment_is_shown():
    held = [holder(12, NOW + 30 * H), holder(9, NOW + 3 * H), holder(8, None, team="speech")]
    quotas = pd.DataFrame({"team": ["safety", "speech"], "quota_gpus": [16, 32], "retraining_reserved_gpus": [0, 8]})
    cal = queue_and_calendar.capacity_calendar(held, quotas, NOW, days=3).set_index(["day", "team"])
    d0, d1, d2 = (pd.Timestamp(NOW.date() + dt.timedelta(days=i)) for i in range(3))
    assert cal.loc[(d0, "safety")].to_dict() == {"committed_gpus": 21, "quota_gpus": 16, "retraining_reserved_gpus": 0,
                                                 "free_gpus": 0, "over_committed_gpus": 5}
    assert cal.loc[(d1, "safety"), "committed_gpus"] == 12 and cal.loc[(d1, "safety"), "free_gpus"] == 4
    assert cal.loc[(d2, "safety"), "committed_gpus"] == 0
    assert cal.loc[(d2, "speech"), "committed_gpus"] == 8                     # no end: held every day
    # the pooled row: one team's spare never covers another's over-commitment
    assert cal.loc[(d0, ALL_TEAMS)].to_dict() == {"committed_gpus": 29, "quota_gpus": 48,
                                                         "retraining_reserved_gpus": 8, "free_gpus": 24,
                                                         "over_committed_gpus": 5}


def test_the_team_filter_applies_and_the_kind_and_capacity_filters_do_not(tmp_path):
    path = tmp_path / "gate.duckdb"
    now = fill_ledger(path, n_runs=300)
    day = now.date()
    everyone = reservation_queries.reservations(Filters(day, day), path, now)["calendar"]
    narrowed = reservation_queries.reservations(Filters(day, day, teams=("safety",), kinds=("production",),
                                            capacity="preemptible"), path, now)["calendar"]
    assert set(narrowed["team"]) == {"safety", ALL_TEAMS}
    safety = everyone[everyone["team"] == "safety"].reset_index(drop=True)
    pd.testing.assert_frame_equal(narrowed[narrowed["team"] == "safety"].reset_index(drop=True), safety)
    pooled = narrowed[narrowed["team"] == ALL_TEAMS]
    assert list(pooled["committed_gpus"]) == list(safety["committed_gpus"])


@pytest.mark.parametrize("minutes, next_day", [(0, 0), (59, 4)])
def test_today_starts_at_now_and_a_hold_past_midnight_counts_the_next_day(minutes, next_day):
    now = NOW.replace(hour=23, minute=minutes)   # held until now + 30 min: 23:30, or 00:29 the next day
    cal = queue_and_calendar.capacity_calendar([holder(4, now + H / 2)], pd.DataFrame(
        {"team": ["safety"], "quota_gpus": [16], "retraining_reserved_gpus": [0]}), now, days=2)
    safety = cal[cal["team"] == "safety"]
    assert list(safety["day"]) == [pd.Timestamp(now.date()), pd.Timestamp(now.date() + dt.timedelta(days=1))]
    assert list(safety["committed_gpus"]) == [4, next_day]
