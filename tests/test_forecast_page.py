"""The Forecast page under AppTest: teams projected to use up their budget are named, with the day;
a team with room is not; the planner picks how many weeks ahead the weekly forecast shows."""
from __future__ import annotations

import pytest
from lib.ledger.connection import open_ledger, transaction
from lib.ledger.team_weeks import rebuild as rebuild_team_weeks
from tests.fixtures_app import open_app, page_script

pytestmark = pytest.mark.usefixtures("fresh_caches")


def forecast_page():
    at = open_app("forecast")
    assert not at.exception, [e.value for e in at.exception]
    return at


def set_budget(path, team: str, gpu_hours: float) -> None:
    with open_ledger(path) as con:
        con.execute("UPDATE teams SET monthly_budget_gpu_hours = ? WHERE team = ?", [gpu_hours, team])


def only_vision_short(path) -> None:
    """vision gets a 1 GPU-hour budget (used up at once), every other team one it can never reach."""
    set_budget(path, "vision", 1.0)
    for team in ("nlp-research", "safety", "speech"):
        set_budget(path, team, 1e9)


def test_a_team_projected_to_run_out_is_named_with_the_day(page_ledger):
    only_vision_short(page_ledger[0])
    at = forecast_page()
    warning = " ".join(w.value for w in at.warning)
    assert "vision on" in warning and "safety" not in warning
    burn = at.dataframe[0].value
    assert set(burn["team"]) >= {"vision", "safety"}
    assert burn.set_index("team").loc["vision", "exhausts_p50"] is not None


def test_no_team_at_risk_says_so(page_ledger):
    path, _ = page_ledger
    for team in ("nlp-research", "vision", "safety", "speech"):
        set_budget(path, team, 1e9)
    at = forecast_page()
    assert not at.warning
    assert any("No team is projected" in s.value for s in at.success)
    assert len(at.get("plotly_chart")) == 2


def test_overview_flags_the_team_and_reservations_charts_its_burn_down(page_ledger):
    only_vision_short(page_ledger[0])
    at = open_app()
    # Overview names the team with its run-out days at P90 (and P50), earliest first
    assert any("may run out this month" in w.value and "vision**: P90" in w.value for w in at.warning), \
        [w.value for w in at.warning]
    at.switch_page(page_script("reservations")).run()
    assert not at.exception, [e.value for e in at.exception]
    assert any("vision on" in w.value for w in at.warning)
    assert at.selectbox(key="res_burn_team").options


def test_overview_says_nothing_when_no_team_is_at_risk(page_ledger):
    path, _ = page_ledger
    for team in ("nlp-research", "vision", "safety", "speech"):
        set_budget(path, team, 1e9)
    at = open_app()
    assert not any("may run out" in w.value or "use up" in w.value for w in at.warning) and not at.success


def test_the_planner_picks_how_many_weeks_ahead_the_weekly_forecast_shows(page_ledger):
    with open_ledger(page_ledger[0]) as con, transaction(con):
        rebuild_team_weeks(con)           # as every write path keeps it (the fixture writes runs directly)
    at = forecast_page()
    assert set(at.dataframe[1].value.groupby("team").size()) == {8}          # the default: eight weeks
    at.slider(key="fc_weeks").set_value(26).run()
    assert not at.exception, [e.value for e in at.exception]
    weeks = at.dataframe[1].value
    assert set(weeks.groupby("team").size()) == {26} and weeks["horizon"].max() == 26
    assert any("next 26 weeks" in h.value for h in at.subheader)
    assert any("Model chosen" in c.value and "vision" in c.value for c in at.caption)
