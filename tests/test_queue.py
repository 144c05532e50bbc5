"""The queue of waiting requests on the Reservations page, read from the forward plan: every request deferred
and not admitted since (up to its team's queue age after its first deferral), whatever the period shown,
decided again by the gate in the order it serves them — its planned start is the gate's own fix time when
nothing competes, and recorded reasons that have gone stale are never shown."""
from __future__ import annotations

import datetime as dt
import re

import pandas as pd
import pytest

from lib.dashboard import queue_and_calendar, reservation_queries
from lib.dashboard.filters import Filters
from lib.gate.terms import minute_up, utcnow
from lib.ledger.connection import open_ledger, transaction
from lib.ledger.deciding import submit_request
from lib.ledger.recording import canonical_json
from tests.fixtures_app import insert_teams, open_app
from tests.fixtures_ledger import demo_request

H = dt.timedelta(hours=1)
ODD = dt.timedelta(minutes=17, seconds=42)   # ends off the hour: "to the minute" means something


def book(con, run_id, team, gpus, start, end, kind="exploratory", **cols):
    """An admitted, unfinished reservation of `gpus` accelerators over [start, end)."""
    row = {"run_id": run_id, "team": team, "kind": kind, "gpus": gpus, "reserved_from": start,
           "reserved_until": end, "reserved_gpu_hours": gpus * (end - start) / H, "source": "test",
           "updated_at": start, **cols}
    con.execute(f"INSERT INTO runs ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})", list(row.values()))


def defer(con, run_id, at, team="safety", kind="exploratory", gpus=4, codes=("capacity",), capacity="stable", **req):
    """A deferral of `run_id` recorded at `at` with the reasons `codes` (which may no longer hold)."""
    request = demo_request(run_id=run_id, team=team, kind=kind, gpus=gpus, capacity=capacity, **req)
    con.execute("""INSERT INTO decisions (decided_at, run_id, team, kind, state, reason_codes, origin,
                   request_json, decision_json) VALUES (?, ?, ?, ?, 'defer', ?, 'test', ?, '{}')""",
                [at, run_id, team, kind, list(codes), canonical_json(request)])


@pytest.fixture
def safety_ledger(tmp_path):
    """Team safety (quota 16, no retraining set-aside) holds 9 accelerators now — 5 until now + 6 h 17 m,
    4 until now + 30 h — and 4 more booked from tomorrow: 13 held as the gate counts them. Returns
    (path, now)."""
    path, now = tmp_path / "gate.duckdb", utcnow()
    with open_ledger(path) as con, transaction(con):
        insert_teams(con)
        book(con, "safety-a", "safety", 5, now - 2 * H, now + 6 * H + ODD, started_at=now - 2 * H)
        book(con, "safety-b", "safety", 4, now - H, now + 30 * H, started_at=now - H)
        book(con, "safety-tomorrow", "safety", 4, now + 24 * H, now + 40 * H)
    return path, now


def fits_from(decision) -> str:
    """The time the decision's capacity fix names, as written there (ISO, to the minute)."""
    (fix,) = [r["fix"] for r in decision["reasons"] if r["code"] == "capacity"]
    return re.search(r"or from (\S+) when running reservations end", fix).group(1)


def minute(t) -> str:
    """`t` to the minute, rounded up, as every planned start is shown (never before it fits)."""
    return minute_up(pd.Timestamp(t).to_pydatetime())


def test_the_queue_plans_the_gates_fix_time_to_the_minute_on_the_page(safety_ledger, monkeypatch, fresh_caches):
    path, now = safety_ledger
    # 13 held + 4 > 16: deferred. Without the booking from tomorrow 9 + 4 would fit now; with it,
    # the first end (5 GPUs at now + 6 h 17 m) leaves 8 + 4 <= 16.
    decision = submit_request(demo_request(run_id="safety-wait-001", team="safety", gpus=4), db=path)
    assert decision["state"] == "defer" and [r["code"] for r in decision["reasons"]] == ["capacity"]
    assert fits_from(decision) == minute(now + 6 * H + ODD)

    f = Filters(now.date() - dt.timedelta(days=3), now.date())
    row = reservation_queries.reservations(f, path).get("waiting").set_index("run_id").loc["safety-wait-001"]
    assert minute(row["planned_start"]) == fits_from(decision)
    assert row["note"] == "when reservations end"
    assert row["reasons"] == "capacity" and row["gpus"] == 4 and row["team"] == "safety"

    monkeypatch.setenv("GATE_DB", str(path))
    monkeypatch.setenv("GATE_DEMO", "0")
    at = open_app("reservations")
    assert not at.exception, [e.value for e in at.exception]
    (queue,) = [d.value for d in at.dataframe if "planned_start" in d.value.columns]
    assert list(queue.columns[:2]) == ["planned_start", "run_id"]    # the key column first
    shown = queue.set_index("run_id").loc["safety-wait-001"]
    assert minute(shown["planned_start"]) == fits_from(decision)
    assert any("1 waiting request, 1 planned" in c.value for c in at.caption)


@pytest.fixture
def aged_queue_ledger(safety_ledger):
    """safety_ledger plus deferrals of every age and fate."""
    path, now = safety_ledger
    with open_ledger(path) as con, transaction(con):
        defer(con, "old-wait", now - 60 * 24 * H)                     # two months ago: expired since
        # never decided since: left the queue
        defer(con, "given-up", now - (queue_and_calendar.QUEUE_DAYS + 1) * 24 * H)
        defer(con, "old-wait", now - 3 * H)                           # deferred again since
        defer(con, "fits-now", now - 5 * H, gpus=2)                   # recorded for capacity; 13 + 2 <= 16 now
        defer(con, "prod-wait", now - 2 * H, kind="production", capacity="preemptible", checkpoint_supported=True)
        defer(con, "over-budget", now - 9 * H, codes=("budget",), budget_gpu_hours=1)   # waiting cannot cure it:
        # it does not wait, nor does other-team (a per-job cap beside capacity)
        defer(con, "admitted-since", now - 4 * H)
        book(con, "admitted-since", "safety", 1, now, now + H)
        defer(con, "other-team", now - H, team="vision", gpus=200, codes=("gpu-cap", "capacity"))
    return path, now


def test_the_queue_is_now_whatever_the_dates_and_orders_by_planned_start_then_serve_order(aged_queue_ledger):
    path, now = aged_queue_ledger
    last_week = Filters(now.date() - dt.timedelta(days=7), now.date())
    out = reservation_queries.reservations(last_week, path, now)
    q = out["waiting"].set_index("run_id")
    assert list(q.index) == ["fits-now", "prod-wait"]
    assert out["queue_count"] == 2 and out["planned_count"] == 2
    assert q.loc["fits-now", "planned_start"] == pd.Timestamp(now) and q.loc["fits-now", "reasons"] == ""
    # behind fits-now's 2 accelerators, the production run waits for the first release
    assert q.loc["prod-wait", "planned_start"] == pd.Timestamp(now + 6 * H + ODD)
    assert q.loc["prod-wait", "ahead"] == "fits-now"
    assert q.loc["prod-wait", "waited_hours"] == pytest.approx(2)
    # old-wait waited since its first deferral, two months: past safety's 14 days, expired
    assert out["expired_count"] == 1 and list(out["expired"]["run_id"]) == ["old-wait"]
    # a period long ago still shows today's queue
    long_ago = Filters(now.date() - dt.timedelta(days=400), now.date() - dt.timedelta(days=300))
    assert list(reservation_queries.reservations(long_ago, path, now)["waiting"]["run_id"]) == list(q.index)


def test_team_kind_and_capacity_filters_narrow_the_queue(aged_queue_ledger):
    path, now = aged_queue_ledger
    day = now.date()
    ids = lambda **kw: list(  # noqa: E731
        reservation_queries.reservations(Filters(day, day, **kw), path, now)["waiting"]["run_id"])
    assert ids(teams=("vision",)) == []
    assert ids(kinds=("production",)) == ["prod-wait"]
    assert ids(capacity="stable") == ["fits-now"]


def test_the_queue_shows_at_most_row_limit_rows_and_counts_them_all(aged_queue_ledger, monkeypatch):
    path, now = aged_queue_ledger
    monkeypatch.setattr(queue_and_calendar, "ROW_LIMIT", 1)
    out = reservation_queries.reservations(Filters(now.date(), now.date()), path, now)
    assert list(out["waiting"]["run_id"]) == ["fits-now"]
    assert out["queue_count"] == 2
