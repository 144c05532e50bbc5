"""The monthly budget of a month the planner picks: past months show consumed against the budget,
the current month adds what is committed; the date filter never moves it."""
from __future__ import annotations

import datetime as dt

import pytest
from streamlit.testing.v1 import AppTest

from lib.dashboard import budget_queries, reservation_queries
from lib.dashboard.filters import Filters
from lib.ledger.connection import open_ledger, transaction
from tests.fixtures_app import ROOT, insert_teams, page_script
from tests.fixtures_gate import NOW

H = dt.timedelta(hours=1)
NOVEMBER, DECEMBER = dt.date(2026, 11, 1), dt.date(2026, 12, 1)   # NOW is 2026-12-15


@pytest.fixture
def months_ledger(tmp_path):
    """speech: 30 GPU-h used in November, 12 in December, and a reservation of 48 GPU-h held now."""
    path = tmp_path / "gate.duckdb"
    with open_ledger(path) as con, transaction(con):
        insert_teams(con)
        for run_id, ended, used in [("nov", dt.datetime(2026, 11, 20), 30.0), ("dec", NOW - 24 * H, 12.0)]:
            con.execute("""INSERT INTO runs (run_id, team, kind, gpus, reserved_gpu_hours, started_at, ended_at,
                           actual_gpu_hours, source, updated_at) VALUES (?, 'speech', 'exploratory', 2, ?, ?, ?, ?, 'test', ?)""",
                        [run_id, used, ended - 5 * H, ended, used, NOW])
        con.execute("""INSERT INTO runs (run_id, team, kind, gpus, reserved_from, reserved_until, reserved_gpu_hours,
                       source, updated_at) VALUES ('held', 'speech', 'exploratory', 8, ?, ?, 48.0, 'test', ?)""",
                    [NOW - H, NOW + 5 * H, NOW])
    return path


def speech(out) -> dict:
    return out["budget"].set_index("team").loc["speech"].to_dict()


def test_a_past_month_shows_consumed_against_budget_and_the_current_month_adds_committed(months_ledger):
    period = Filters(dt.date(2025, 1, 1), dt.date(2025, 1, 31))       # the dates play no part
    past = budget_queries.monthly_budget(period, months_ledger, NOW, month=dt.date(2026, 11, 30))   # any day names it
    assert past["month"] == NOVEMBER and not past["current_month"]
    assert speech(past) == {"monthly_budget_gpu_hours": 9000.0, "consumed_gpu_hours": 30.0,
                            "committed_gpu_hours": 0.0, "remaining_gpu_hours": 9000.0 - 30.0}
    now_month = budget_queries.monthly_budget(period, months_ledger, NOW)
    assert now_month["month"] == DECEMBER and now_month["current_month"]
    assert speech(now_month) == {"monthly_budget_gpu_hours": 9000.0, "consumed_gpu_hours": 12.0,
                                 "committed_gpu_hours": 48.0, "remaining_gpu_hours": 9000.0 - 12.0 - 48.0}
    # the Reservations page's data carries this month's; monthly_budget_in is the page's query for another
    assert speech(reservation_queries.reservations(period, months_ledger, NOW)) == speech(now_month)
    assert speech(budget_queries.monthly_budget_in(NOVEMBER)(period, months_ledger, NOW)) == speech(past)
    in_month = budget_queries.monthly_budget_in
    assert in_month(NOVEMBER).__qualname__ != in_month(DECEMBER).__qualname__


def test_the_picker_offers_the_months_with_data_newest_first():
    assert budget_queries.budget_months(dt.date(2026, 9, 17), NOW) == [DECEMBER, NOVEMBER, dt.date(2026, 10, 1),
                                                                dt.date(2026, 9, 1)]
    assert budget_queries.budget_months(None, NOW) == [DECEMBER]
    assert len(budget_queries.budget_months(dt.date(2000, 1, 1), NOW)) == budget_queries.BUDGET_MONTHS


def test_picking_last_month_on_the_page_shows_its_consumed_and_no_committed(page_ledger):
    path, now = page_ledger
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
    at.run()
    at.switch_page(page_script("reservations")).run()
    picker = at.selectbox(key="res_budget_month")
    this_month = now.date().replace(day=1)
    last_month = (this_month - dt.timedelta(days=1)).replace(day=1)
    assert picker.value == this_month and picker.options[:2] == [f"{this_month:%B %Y}", f"{last_month:%B %Y}"]

    picker.set_value(last_month).run()
    assert not at.exception, [e.value for e in at.exception]
    assert any(c.value.startswith(f"{last_month:%B %Y}. ") and "past month" in c.value for c in at.caption)
    (shown,) = [d.value for d in at.dataframe if "consumed_gpu_hours" in d.value.columns]
    expected = budget_queries.monthly_budget(Filters(now.date(), now.date()), path, now, month=last_month)["budget"]
    assert list(shown["consumed_gpu_hours"]) == pytest.approx(list(expected["consumed_gpu_hours"]))
    assert shown["consumed_gpu_hours"].sum() > 0
    assert (shown["committed_gpu_hours"] == 0).all()
