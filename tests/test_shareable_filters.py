"""Relative date ranges and shareable views: the sidebar filters as URL query parameters.

The pure half (lib/dashboard/filters.py: resolve_range, query_from_filters, filters_from_query) on fixed
dates; the app half under AppTest: a query string sets the widgets, a widget change rewrites the query
string, a bad or hostile parameter is ignored with a warning shown as text."""
from __future__ import annotations

import datetime as dt

import pytest
from streamlit.testing.v1 import AppTest

from lib.dashboard.filters import (CUSTOM, DATE_MIN, Filters, View, date_max, default_filters,
                                   filters_from_query, query_from_filters, resolve_range)
from tests.fixtures_app import ROOT, page_script
from tests.fixtures_hostile import HOSTILE
from tests.test_hostile_pages import markup_in, shown as seen

D = dt.date
TODAY = D(2026, 5, 14)
TEAMS = ["nlp-research", "safety", "speech", "vision"]
DEFAULT = default_filters(D(2026, 5, 1), today=TODAY)   # 2026-04-04 .. 2026-05-01
TIMEOUT_S = 60


def parse(query: dict, teams=TEAMS) -> View:
    return filters_from_query(query, teams=teams, default=DEFAULT, today=TODAY)


# ------------------------------------------------------------------------------ relative ranges

@pytest.mark.parametrize("name, today, expected", [
    ("last-7-days", D(2026, 5, 14), (D(2026, 5, 8), D(2026, 5, 14))),
    ("last-30-days", D(2026, 1, 10), (D(2025, 12, 12), D(2026, 1, 10))),       # across a year end
    ("last-90-days", D(2024, 3, 1), (D(2023, 12, 3), D(2024, 3, 1))),          # through a 29-day February
    ("last-90-days", D(2025, 3, 1), (D(2024, 12, 2), D(2025, 3, 1))),          # through a 28-day February
    ("this-month", D(2026, 5, 1), (D(2026, 5, 1), D(2026, 5, 1))),             # the first: one day
    ("this-month", D(2028, 2, 29), (D(2028, 2, 1), D(2028, 2, 29))),           # leap day
    ("this-quarter", D(2026, 3, 31), (D(2026, 1, 1), D(2026, 3, 31))),         # last day of Q1
    ("this-quarter", D(2026, 4, 1), (D(2026, 4, 1), D(2026, 4, 1))),           # first day of Q2
    ("this-quarter", D(2028, 2, 29), (D(2028, 1, 1), D(2028, 2, 29))),
    ("this-quarter", D(2026, 12, 31), (D(2026, 10, 1), D(2026, 12, 31))),
])
def test_a_relative_range_resolves_to_whole_days_ending_today(name, today, expected):
    assert resolve_range(name, today) == expected


def test_last_n_days_holds_n_days_including_today():
    for name, days in (("last-7-days", 7), ("last-30-days", 30), ("last-90-days", 90)):
        start, end = resolve_range(name, TODAY)
        assert end == TODAY and Filters(date_from=start, date_to=end).days == days


def test_an_unknown_range_is_refused():
    for name in ("last-8-days", "custom", "Last 7 days", ""):
        with pytest.raises(ValueError):
            resolve_range(name, TODAY)


def test_the_default_period_is_the_28_days_up_to_the_last_day_with_data():
    assert (DEFAULT.date_from, DEFAULT.date_to, DEFAULT.days) == (D(2026, 4, 4), D(2026, 5, 1), 28)


# ------------------------------------------------------------------------------ the query string

VIEWS = [
    View(DEFAULT),
    View(Filters(D(2026, 4, 15), D(2026, 5, 8), teams=("vision", "speech"), kinds=("production",),
                 capacity="preemptible"), "last-30-days"),
    View(Filters(D(2026, 2, 1), D(2026, 2, 28), teams=("safety",)), CUSTOM),
    View(Filters(D(2026, 5, 1), D(2026, 5, 14), kinds=("retraining", "exploratory"), capacity="stable"),
         "this-month"),
]


@pytest.mark.parametrize("view", VIEWS)
def test_a_view_survives_the_round_trip_through_the_url(view):
    if view.range != CUSTOM:
        view = View(Filters(*resolve_range(view.range, TODAY), view.filters.teams, view.filters.kinds,
                            view.filters.capacity), view.range)
    back = parse(query_from_filters(view, DEFAULT))
    assert back == view and back.notes == ()


def test_only_what_differs_from_the_default_is_written():
    assert query_from_filters(View(DEFAULT), DEFAULT) == {}
    q = query_from_filters(View(Filters(DEFAULT.date_from, DEFAULT.date_to, teams=("vision", "speech"),
                                        kinds=("production",))), DEFAULT)
    assert q == {"teams": ["speech,vision"], "kinds": ["production"]}
    assert query_from_filters(View(Filters(D(2026, 1, 1), D(2026, 1, 31))), DEFAULT) == \
        {"from": ["2026-01-01"], "to": ["2026-01-31"]}
    assert query_from_filters(View(Filters(*resolve_range("last-7-days", TODAY)), "last-7-days"), DEFAULT) == \
        {"range": ["last-7-days"]}


def test_teams_may_be_comma_joined_or_repeated_and_a_comma_in_a_name_is_kept():
    assert parse({"teams": ["vision,speech"]}).filters.teams == ("speech", "vision")
    assert parse({"teams": ["vision", "speech"]}).filters.teams == ("speech", "vision")
    odd = ["a,b", "c"]
    view = View(Filters(DEFAULT.date_from, DEFAULT.date_to, teams=tuple(odd)))
    q = query_from_filters(view, DEFAULT)
    assert q == {"teams": ["a,b", "c"]}
    assert parse(q, teams=odd).filters.teams == ("a,b", "c")


def test_an_unknown_team_is_dropped_and_said():
    view = parse({"teams": ["vision,nobody"]})
    assert view.filters.teams == ("vision",)
    assert view.notes == ("teams: “nobody” is not a team in the ledger; left out.",)


@pytest.mark.parametrize("query, param, value", [
    ({"kinds": ["production,bogus"]}, "kinds", "bogus"),
    ({"capacity": ["spot"]}, "capacity", "spot"),
    ({"range": ["last-8-days"]}, "range", "last-8-days"),
    ({"from": ["2026-13-01"], "to": ["2026-05-01"]}, "from", "2026-13-01"),
    ({"from": ["2026-04-01"], "to": ["yesterday"]}, "to", "yesterday"),
    ({"from": ["1999-12-31"], "to": ["2026-05-01"]}, "from", "1999-12-31"),
    ({"from": ["2026-04-01"], "to": ["2029-01-01"]}, "to", "2029-01-01"),   # after date_max(TODAY)
])
def test_a_bad_parameter_is_ignored_with_a_note_naming_it_and_its_value(query, param, value):
    view = parse(query)
    assert len(view.notes) == 1 and view.notes[0].startswith(f"{param}: “{value}”"), view.notes
    assert view.filters.kinds == (("production",) if param == "kinds" else ())   # the good part is kept
    assert view.filters.capacity is None
    assert (view.filters.date_from, view.filters.date_to) == (DEFAULT.date_from, DEFAULT.date_to)
    assert view.range == CUSTOM


def test_dates_out_of_order_or_half_given_fall_back_to_the_default_with_a_note():
    backwards = parse({"from": ["2026-05-01"], "to": ["2026-04-01"]})
    assert backwards.filters == DEFAULT and "before" in backwards.notes[0]
    half = parse({"from": ["2026-04-01"]})
    assert half.filters == DEFAULT and half.notes == ("to: is missing; the default dates are shown.",)
    assert date_max(TODAY) == D(2028, 12, 31) and DATE_MIN == D(2000, 1, 1)


def test_a_range_wins_over_explicit_dates_and_says_so():
    view = parse({"range": ["last-7-days"], "from": ["2026-01-01"], "to": ["2026-01-31"]})
    assert (view.filters.date_from, view.filters.date_to) == resolve_range("last-7-days", TODAY)
    assert view.notes == ("from/to: ignored, range=last-7-days sets the dates.",)


def test_parameters_of_others_and_empty_values_are_left_alone():
    view = parse({"embed": ["true"], "run": ["x"], "teams": [""], "capacity": [""]})
    assert view == View(DEFAULT) and view.notes == ()


@pytest.mark.parametrize("value", HOSTILE + ["javascript:alert(document.cookie)", "x" * 100_000])
def test_a_hostile_value_comes_back_as_a_short_plain_note(value):
    for key in ("teams", "kinds", "capacity", "range", "from"):
        view = parse({key: [value], "to": ["2026-05-01"]} if key == "from" else {key: [value]})
        assert view.filters.teams == () and view.filters.kinds == () and view.filters.capacity is None
        assert view.notes, (key, value)
        assert all(len(n) < 300 for n in view.notes), max(map(len, view.notes))


# ------------------------------------------------------------------------------ the app (AppTest)

def open_app(query: dict | None = None, page: str | None = None) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT_S)
    at.query_params.update(query or {})
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    if page:
        at.switch_page(page_script(page)).run()
        assert not at.exception, [e.value for e in at.exception]
    return at


def widgets(at: AppTest) -> tuple:
    sb = at.sidebar
    return (sb.multiselect(key="f_teams").value, sb.multiselect(key="f_kinds").value,
            sb.radio(key="f_capacity").value, sb.selectbox(key="f_range").value,
            tuple(sb.date_input(key="f_dates").value))


def utc_today() -> dt.date:
    return dt.datetime.now(dt.timezone.utc).date()


@pytest.mark.usefixtures("fresh_caches")
def test_a_query_string_sets_the_sidebar_filters(page_ledger):
    at = open_app({"teams": "speech,vision", "kinds": "production", "capacity": "stable",
                   "range": "last-30-days"})
    assert widgets(at) == (["speech", "vision"], ["production"], "stable", "last-30-days",
                           resolve_range("last-30-days", utc_today()))
    assert at.sidebar.date_input(key="f_dates").disabled   # the range sets the dates
    assert not at.warning


@pytest.mark.usefixtures("fresh_caches")
def test_explicit_dates_in_the_query_string_set_the_date_picker(page_ledger):
    at = open_app({"from": "2026-01-05", "to": "2026-02-10"}, page="reservations")
    assert widgets(at)[3:] == (CUSTOM, (D(2026, 1, 5), D(2026, 2, 10)))
    assert "2026-01-05 to 2026-02-10" in "".join(seen(c.value) for c in at.caption)
    assert at.query_params == {"from": "2026-01-05", "to": "2026-02-10"}


@pytest.mark.usefixtures("fresh_caches")
def test_changing_a_filter_rewrites_the_query_string_and_it_survives_a_page_switch(page_ledger):
    at = open_app()
    assert at.query_params == {}          # the default view writes nothing
    at.sidebar.multiselect(key="f_teams").set_value(["vision", "speech"]).run()
    at.sidebar.selectbox(key="f_range").set_value("this-quarter").run()
    at.sidebar.radio(key="f_capacity").set_value("preemptible").run()
    assert at.query_params == {"teams": "speech,vision", "capacity": "preemptible", "range": "this-quarter"}
    at.switch_page(page_script("stops_promotion")).run()
    assert not at.exception
    assert at.query_params == {"teams": "speech,vision", "capacity": "preemptible", "range": "this-quarter"}
    assert widgets(at)[:4] == (["vision", "speech"], [], "preemptible", "this-quarter")
    at.sidebar.multiselect(key="f_teams").set_value([]).run()
    at.sidebar.radio(key="f_capacity").set_value("all").run()
    at.sidebar.selectbox(key="f_range").set_value(CUSTOM).run()
    assert at.query_params == {"from": resolve_range("this-quarter", utc_today())[0].isoformat(),
                               "to": utc_today().isoformat()}   # custom keeps the dates the range showed


@pytest.mark.usefixtures("fresh_caches")
def test_parameters_of_others_stay_in_the_query_string(page_ledger):
    at = open_app({"other": "1", "kinds": "retraining"})
    at.sidebar.multiselect(key="f_kinds").set_value([]).run()
    assert at.query_params == {"other": "1"}


@pytest.mark.usefixtures("fresh_caches")
def test_a_bad_or_hostile_parameter_is_ignored_with_a_warning_shown_as_text(page_ledger):
    long = "L" * 5_000
    at = open_app({"teams": ["<b>bold</b>", "speech"], "kinds": "javascript:alert(1)",
                   "capacity": "[x](https://example.invalid/z)", "from": long, "to": "2026-01-01"},
                  page="overview")
    assert widgets(at)[:3] == (["speech"], [], "all")
    bodies = [w.value for w in at.warning]
    assert bodies, "no warning about the link"
    text = "\n".join(seen(b) for b in bodies)
    for param, value in (("teams", "<b>bold</b>"), ("kinds", "javascript:alert(1)"),
                         ("capacity", "[x](https://example.invalid/z)"), ("from", "L" * 60 + "…")):
        assert f"{param}: “{value}”" in text, text
    assert long not in text
    for body in bodies:
        assert not markup_in(body), (body, markup_in(body))
        assert "javascript:a" not in body      # ':' is followed by a word joiner: no scheme, no link
    # the link is cleaned: only what was used stays in the URL
    assert at.query_params == {"teams": "speech"}
