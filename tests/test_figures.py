"""The plotly figure builders: pure functions of DataFrames, titled with units, colours per team."""
from __future__ import annotations

import datetime as dt

import pandas as pd
import plotly.graph_objects as go
import pytest

from lib.dashboard import estimate_figures, figure_kit, idle_figures, labels, reservation_figures, stop_figures
from lib.dashboard.filters import default_filters
from tests.fixtures_app import PAGE_QUERIES, fill_ledger

UNITS = ("(GPU-h", "(GPUs", "(runs)", "(requests)", "(%)", "(ratio)", "(×")


@pytest.fixture(scope="module")
def page_results(tmp_path_factory):
    """Every page's query results on a 300-run ledger, read once for the module."""
    path = tmp_path_factory.mktemp("fig") / "gate.duckdb"
    now = fill_ledger(path, n_runs=300)
    f = default_filters(now.date())
    return {name: query(f, path, now) for name, query in PAGE_QUERIES.items()}


def builds(pages):
    c = figure_kit.team_colours(["nlp-research", "safety", "speech", "vision"])
    o, r, i, e, s = (pages[k] for k in ("overview", "reservations", "idle_capacity", "estimate_accuracy",
                                        "stops_promotion"))
    return {
        "reserved_vs_used": reservation_figures.reserved_vs_used(o["daily"], c),
        "deferred_reasons": reservation_figures.deferred_reasons(o["deferred_by_reason"]),
        "reserved_over_time": reservation_figures.reserved_over_time(r["over_time"], r["quotas"], c),
        "budget_bars": reservation_figures.budget_bars(r["budget"], "June 2026"),
        "overrun_bars": reservation_figures.overrun_bars(r["overrun_by_team"], c),
        "idle_by_cause": idle_figures.idle_by_cause(i["weekly"]),
        "idle_by_team": idle_figures.idle_by_team(i["by_team"]),
        "idle_share_trend": idle_figures.idle_share_trend(i["weekly"], c),
        "predicted_vs_actual": estimate_figures.predicted_vs_actual(e["points"], c),
        "rolling_ratio": estimate_figures.rolling_ratio(e["rolling"], c),
        "error_sources": estimate_figures.error_sources(e["sources"]),
        "calibration_factors": estimate_figures.calibration_factors(pages["calibration"]["table"]),
        "stop_reasons": stop_figures.stop_reasons(s["by_reason"], c),
    }


def test_every_figure_has_data_and_a_title_with_its_unit(page_results):
    for name, fig in builds(page_results).items():
        assert isinstance(fig, go.Figure), name
        assert fig.data, f"{name} drew nothing"
        title = fig.layout.title.text
        assert any(u in title for u in UNITS), f"{name}: title {title!r} names no unit"


def test_every_builder_says_so_when_there_is_nothing_to_draw(page_results):
    for name, fig in builds({k: {kk: (vv.iloc[0:0] if isinstance(vv, pd.DataFrame) else vv)
                                 for kk, vv in v.items()} for k, v in page_results.items()}).items():
        assert not fig.data, name
        assert fig.layout.annotations and fig.layout.annotations[0].text, name


def test_team_colours_are_stable_and_the_same_for_every_page():
    a = figure_kit.team_colours(["vision", "ads", "speech"])
    b = figure_kit.team_colours(["speech", "vision", "ads", "speech"])
    assert a == b and len(set(a.values())) == 3
    fig1 = idle_figures.idle_share_trend(pd.DataFrame({"week": [dt.date(2026, 1, 5)], "team": ["vision"],
                                                  "idle_share": [0.2]}), a)
    fig2 = estimate_figures.rolling_ratio(pd.DataFrame({"day": [dt.date(2026, 1, 5)], "team": ["vision"],
                                               "median_ratio": [1.1], "runs": [3]}), a)
    assert fig1.data[0].line.color == fig2.data[0].line.color == a["vision"]


def test_adding_a_team_repaints_no_set_colour_and_a_hashed_one_only_to_keep_them_apart():
    teams = ["nlp-research", "safety", "speech", "vision"]
    pinned = figure_kit.team_colours(teams, {t: SET_COLOURS[t] for t in teams})
    hashed = figure_kit.team_colours(teams)
    for new in ("aardvark", "mmm", "zzz-last", "ads", "team-7"):
        after = figure_kit.team_colours([*teams, new], {t: SET_COLOURS[t] for t in teams})
        assert {t: after[t] for t in teams} == pinned, new
        after = figure_kit.team_colours([*teams, new])
        for t in teams:   # a repainted team's old colour was too near one given before it in name order
            if after[t] != hashed[t]:
                before_it = [after[u] for u in sorted(after) if u < t]
                assert min(figure_kit.colour_distance(hashed[t], c) for c in before_it) < figure_kit.MIN_DISTANCE


def test_an_explicit_colour_wins_and_the_rest_keep_theirs():
    explicit = {"vision": "#000000"}
    c = figure_kit.team_colours(["vision", "speech"], explicit)
    assert c == {"vision": "#000000", "speech": figure_kit.team_colours(["speech"])["speech"]}


def test_a_team_gets_the_same_colour_in_another_process():
    import subprocess
    import sys
    from tests.fixtures_app import ROOT
    teams = ["nlp-research", "safety", "speech", "vision", "<b>x</b>"]
    code = ("import json; from lib.dashboard import figure_kit; "
            f"print(json.dumps(figure_kit.team_colours({teams!r})))")
    out = [subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True,
                          env={"PYTHONHASHSEED": seed, "PATH": "/usr/bin:/bin"}).stdout for seed in ("1", "2")]
    import json
    assert json.loads(out[0]) == json.loads(out[1]) == figure_kit.team_colours(teams)


def test_predicted_vs_actual_is_log_log_with_identity_and_bands():
    pts = pd.DataFrame({"run_id": ["a", "b", "c"], "team": ["t", "t", "u"],
                        "estimated_gpu_hours": [1.0, 10.0, 100.0], "actual_gpu_hours": [2.0, 9.0, 120.0],
                        "estimate_source": ["pilot", labels.REQUESTED_LABEL, "stated"]})
    fig = estimate_figures.predicted_vs_actual(pts, band=0.5)
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "log"
    lines = {t.name: t for t in fig.data if t.mode == "lines"}
    ident = lines["y = x (exact)"]
    assert list(ident.x) == list(ident.y)
    assert [y / x for x, y in zip(lines["+50%"].x, lines["+50%"].y)] == pytest.approx([1.5, 1.5])
    assert [y / x for x, y in zip(lines["−50%"].x, lines["−50%"].y)] == pytest.approx([0.5, 0.5])
    requested = [t for t in fig.data if t.name and labels.REQUESTED_LABEL in t.name]
    assert len(requested) == 1 and requested[0].marker.symbol == "x" and list(requested[0].text) == ["b"]


def test_the_what_if_estimate_chart_shows_items_and_the_calibrated_totals():
    est = {"items_gpu_hours": {"compute": 10.0, "checkpoint": 1.0}, "raw_gpu_hours": 11.0,
           "median_gpu_hours": 12.0, "upper_gpu_hours": None}
    fig = estimate_figures.estimate_items_figure(est)
    assert list(fig.data[0].x) == [10.0, 1.0]
    names = " ".join(t.name for t in fig.data)
    assert "raw total: 11.0" in names and "calibrated median: 12.0" in names and "upper" not in names


def test_a_single_day_gets_one_date_tick_not_hourly_or_sub_second_ticks():
    day = dt.date(2026, 12, 15)
    daily = pd.DataFrame({"day": [day, day], "team": ["a", "b"], "reserved_gpu_hours": [10.0, 5.0],
                          "used_gpu_hours": [8.0, 4.0]})
    axis = reservation_figures.reserved_vs_used(daily).layout.xaxis
    assert axis.tickmode == "array"
    assert [pd.Timestamp(v).date() for v in axis.tickvals] == [day]
    assert list(axis.ticktext) == ["Dec 15"]


def test_a_long_date_range_keeps_plotly_ticks_with_a_date_only_format():
    days = [dt.date(2026, 1, 1) + dt.timedelta(days=i) for i in range(60)]
    daily = pd.DataFrame({"day": days, "team": "a", "reserved_gpu_hours": 1.0, "used_gpu_hours": 1.0})
    axis = reservation_figures.reserved_vs_used(daily).layout.xaxis
    assert axis.tickmode is None and "%H" not in axis.tickformat and "%S" not in axis.tickformat


def test_weekly_axes_say_week_of():
    weekly = pd.DataFrame({"week": [dt.date(2026, 12, 7)], "team": ["a"], "late_start_gpu_hours": [1.0],
                           "early_end_gpu_hours": [0.0], "never_used_gpu_hours": [0.0], "idle_share": [0.1]})
    assert list(idle_figures.idle_by_cause(weekly).layout.xaxis.ticktext) == ["week of Dec 07"]


@pytest.mark.parametrize("lo, hi, expected", [
    (0.2, 0.9, [0.2, 0.5]),
    (0.15, 12.0, [0.2, 0.5, 1, 2, 5, 10]),
    (3.0, 4.0, [3.0, 3.5, 4.0]),  # no two 1-2-5 values inside: the ends and the middle, 2 digits
])
def test_log_ticks_are_one_two_five_inside_the_range(lo, hi, expected):
    assert figure_kit.log_ticks(lo, hi) == pytest.approx(expected)


def test_log_axes_label_fractions_as_numbers_not_bare_digits():
    pts = pd.DataFrame({"run_id": ["a", "b"], "team": ["t", "t"], "estimated_gpu_hours": [0.2, 0.9],
                        "actual_gpu_hours": [0.3, 0.8], "estimate_source": ["pilot", "pilot"]})
    axis = estimate_figures.predicted_vs_actual(pts).layout.xaxis
    assert axis.type == "log"
    assert "0.2" in axis.ticktext and "0.5" in axis.ticktext
    assert all(float(text) == pytest.approx(v) for text, v in zip(axis.ticktext, axis.tickvals))
    assert figure_kit.log_ticks(1e-3, 1e4) == pytest.approx([10.0 ** e for e in range(-3, 5)])


# ---------------------------------------------------------------------------- colours that stand apart
# data/teams.toml's set colours (Paul Tol's "muted"), as a planner ships them
SET_COLOURS = {"nlp-research": "#332288", "vision": "#CC6677", "speech": "#44AA99", "safety": "#999933",
               "ads": "#882255", "search": "#88CCEE", "ranking": "#117733", "robotics": "#AA4499"}


@pytest.mark.parametrize("lab1, lab2, expected", [   # Sharma, Wu and Dalal (2005), Table 1
    ((50, 2.6772, -79.7751), (50, 0, -82.7485), 2.0425),
    ((50, 2.5, 0), (50, 0, -2.5), 4.3065),
    ((50, 2.5, 0), (73, 25, -18), 27.1492),
    ((60.2574, -34.0099, 36.2677), (60.4626, -34.1751, 39.4387), 1.2644),
    ((90.8027, -2.0831, 1.4410), (91.1528, -1.6435, 0.0447), 1.4441),
    ((2.0776, 0.0795, -1.1350), (0.9033, -0.0636, -0.5514), 0.9082),
])
def test_colour_distance_is_ciede2000(lab1, lab2, expected):
    assert figure_kit.ciede2000(lab1, lab2) == pytest.approx(expected, abs=1e-4)
    assert figure_kit.ciede2000(lab2, lab1) == pytest.approx(expected, abs=1e-4)


def test_a_new_teams_colour_stands_apart_from_every_set_colour():
    for i in range(60):
        name = f"team-{i}"
        colour = figure_kit.team_colours([*SET_COLOURS, name], SET_COLOURS)[name]
        nearest = min(figure_kit.colour_distance(colour, c) for c in [*SET_COLOURS.values(), "#000000"])
        assert nearest >= figure_kit.MIN_DISTANCE, (name, colour, nearest)
        assert figure_kit.team_colours([*SET_COLOURS, name], SET_COLOURS)[name] == colour   # the same each time


def test_teams_without_a_set_colour_stand_apart_from_each_other_too():
    names = [f"new-{i}" for i in range(10)]
    colours = figure_kit.team_colours(names)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            assert figure_kit.colour_distance(colours[a], colours[b]) >= figure_kit.MIN_DISTANCE, (a, b)


def test_a_set_colour_of_a_team_not_shown_still_keeps_new_teams_away_from_it():
    shown = figure_kit.team_colours(["new-team"], SET_COLOURS)   # filtered to one team
    assert shown == {"new-team": figure_kit.team_colours([*SET_COLOURS, "new-team"], SET_COLOURS)["new-team"]}


# ---------------------------------------------------------------------------- narrow charts
def test_titles_and_axis_titles_come_in_lines_a_narrow_chart_shows_whole(page_results):
    from lib.dashboard import figure_text
    for name, fig in builds(page_results).items():
        texts = [(fig.layout.title.text, figure_text.TITLE_LINE_CHARS)]
        texts += [(axis.title.text, figure_text.AXIS_TITLE_LINE_CHARS)
                  for axis in [*fig.select_xaxes(), *fig.select_yaxes()] if axis.title.text]
        for text, width in texts:
            lines = text.split(figure_text.LINE_BREAK)
            assert all(len(html_unescape(line)) <= width for line in lines), (name, text)
        assert fig.layout.legend.orientation == "h", name   # rows under the chart, not a column beside it


def html_unescape(text: str) -> str:
    import html
    return html.unescape(text)


def test_a_long_title_breaks_between_words_and_keeps_user_text_as_typed():
    from lib.dashboard import figure_text
    team = "<b>R&D</b> with a rather long team name"
    fig = figure_kit.empty_figure(f"Weekly GPU-hours of {team}: recent weeks and the forecast (GPU-h)")
    lines = fig.layout.title.text.split(figure_text.LINE_BREAK)
    assert len(lines) > 1
    assert " ".join(html_unescape(line) for line in lines) == (
        f"Weekly GPU-hours of {team}: recent weeks and the forecast (GPU-h)")
    assert all("<" not in line for line in lines)
