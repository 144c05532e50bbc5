"""User text shows as typed in every chart: team names, run IDs and labels that are markup, links,
formulas or huge never become markup or live links in a Plotly figure (plotly.js renders <b>, <br>,
<a href>, … in names, categories, hover text, annotations and titles)."""
from __future__ import annotations

import html
import inspect

import numpy as np
import pandas as pd
import pytest

from lib.dashboard import figures, forecasts, queries
from lib.dashboard.filters import default_filters
from tests.fixtures_hostile import HOSTILE, make_hostile_ledger

QUERIES = ("overview", "reservations", "idle_capacity", "estimate_accuracy", "stops_promotion", "calibration")
TEMPLATE_KEYS = {"hovertemplate", "texttemplate"}  # the builders' own templates, never user text


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    path = tmp_path_factory.mktemp("hostile") / "gate.duckdb"
    now = make_hostile_ledger(path)
    f = default_filters(now.date())
    out = {name: getattr(queries, name)(f, path, now) for name in QUERIES}
    out["plan_ahead"] = forecasts.plan_ahead(f, path, now)
    return out


def _crafted():
    h = HOSTILE
    optima = pd.DataFrame({"method": h[:3], "interval_h": [0.5, 1.0, 2.0], "expected_hours": [30.0, 31.0, 33.0]})
    curve = pd.DataFrame({"interval_h": [0.25, 0.5, 1.0, 2.0], "expected_hours": [35.0, 30.0, 31.0, 33.0]})
    options = pd.DataFrame({"option": h, "mean": 10.0, "p50": 9.0, "p90": 12.0, "p99": 15.0})
    estimate = {"items_gpu_hours": {name: 1.0 + i for i, name in enumerate(h)}, "raw_gpu_hours": 45.0,
                "median_gpu_hours": 50.0, "upper_gpu_hours": 60.0}
    reasons = pd.DataFrame({"reason": h, "requests": range(1, len(h) + 1), "previous_requests": 1})
    return optima, curve, options, estimate, reasons


def figures_by_builder(pages) -> dict[str, list]:
    """Every builder, drawn over the hostile ledger's real query results (and crafted frames where
    the labels are not team names)."""
    c = figures.team_colours(HOSTILE)
    o, r, i, e, s = (pages[k] for k in ("overview", "reservations", "idle_capacity", "estimate_accuracy",
                                        "stops_promotion"))
    optima, curve, options, estimate, reasons = _crafted()
    return {
        "empty_figure": [figures.empty_figure(HOSTILE[0], HOSTILE[1])],
        "reserved_vs_used": [figures.reserved_vs_used(o["daily"], c)],
        "deferred_reasons": [figures.deferred_reasons(o["deferred_by_reason"]), figures.deferred_reasons(reasons)],
        "reserved_over_time": [figures.reserved_over_time(r["over_time"], r["quotas"], c)],
        "budget_bars": [figures.budget_bars(r["budget"], HOSTILE[1])],
        "overrun_bars": [figures.overrun_bars(r["overrun_by_team"], c)],
        "idle_by_cause": [figures.idle_by_cause(i["weekly"])],
        "idle_by_team": [figures.idle_by_team(i["by_team"])],
        "idle_share_trend": [figures.idle_share_trend(i["weekly"], c)],
        "predicted_vs_actual": [figures.predicted_vs_actual(e["points"], c)],
        "rolling_ratio": [figures.rolling_ratio(e["rolling"], c)],
        "error_sources": [figures.error_sources(e["sources"])],
        "calibration_factors": [figures.calibration_factors(pages["calibration"]["table"])],
        "stop_reasons": [figures.stop_reasons(s["by_reason"], c)],
        "estimate_items": [figures.estimate_items(estimate)],
        "checkpoint_interval_curve": [figures.checkpoint_interval_curve(curve, optima, 1.0, 29.0)],
        "completion_histogram": [figures.completion_histogram(np.linspace(5, 40, 500), budget_hours=30.0,
                                                              budget_label=HOSTILE[1], p_breach=0.1,
                                                              wall_limit_h=35.0)],
        "scenario_options": [figures.scenario_options(options)],
        "demand_forecast": [figures.demand_forecast(pages["plan_ahead"]["history"], pages["plan_ahead"]["weeks"], t, c)
                            for t in HOSTILE],
        "burn_down_chart": [figures.burn_down_chart(pages["plan_ahead"]["burn_path"], pages["plan_ahead"]["burn"], t)
                            for t in HOSTILE],
        "capacity_calendar": [figures.capacity_calendar(r["calendar"], c)],
    }


def builders() -> dict:
    """Every public function of lib/dashboard/figures.py that builds a figure (returns one and does
    not take one): a new builder is covered (or fails here) without editing this list."""
    def builds(fn):
        sig = inspect.signature(fn)
        return "Figure" in str(sig.return_annotation) and not any(
            "Figure" in str(p.annotation) for p in sig.parameters.values())
    return {name: fn for name, fn in inspect.getmembers(figures, inspect.isfunction)
            if not name.startswith("_") and fn.__module__ == figures.__name__ and builds(fn)}


def strings(node, key=""):
    """(key, string) for every string in a figure dict, at any depth."""
    if isinstance(node, str):
        yield key, node
    elif isinstance(node, dict):
        for k, v in node.items():
            yield from strings(v, k)
    elif isinstance(node, (list, tuple, np.ndarray)):
        for v in node:
            yield from strings(v, key)


def test_every_builder_is_driven_with_hostile_text_and_escapes_it(pages):
    drawn = figures_by_builder(pages)
    assert set(builders()) == set(drawn), "drive every figure builder with hostile text here"
    for name, fn in builders().items():
        assert getattr(fn, "shows_text_as_typed", False), f"{name} is not wrapped in @shows_text_as_typed"
    for name, figs in drawn.items():
        for fig in figs:
            found = list(strings(fig.to_dict()))
            assert found, name
            for key, text in found:
                if key in TEMPLATE_KEYS:
                    assert not any(h in text for h in ("example.invalid", "alert(", "bold")), (name, key, text)
                    continue
                assert "<" not in text, (name, key, text[:200])


def test_hostile_team_names_reach_the_charts_escaped_not_dropped(pages):
    drawn = figures_by_builder(pages)
    shown = " ".join(t for figs in drawn.values() for fig in figs for _, t in strings(fig.to_dict()))
    for name in HOSTILE:
        assert html.escape(name.replace("\u202e", "[U+202E]"), quote=False) in shown, name[:40]
    assert "\u202e" not in shown  # an invisible override would reverse the rest of a label
    legend = [t.name for t in drawn["idle_share_trend"][0].data]
    assert "&lt;b&gt;bold&lt;/b&gt;" in legend


def test_escaping_keeps_category_order_and_hover_in_step():
    by_reason = pd.DataFrame({"team": ["<b>t</b>", "<b>t</b>"], "stop_reason": ["<i>x</i>", "budget"],
                              "runs": [1, 5]})
    fig = figures.stop_reasons(by_reason)
    assert list(fig.layout.xaxis.categoryarray) == ["budget", "&lt;i&gt;x&lt;/i&gt;"]
    assert set(fig.data[0].x) == set(fig.layout.xaxis.categoryarray)
    rolling = pd.DataFrame({"day": [pd.Timestamp("2026-01-05")], "team": ["<b>t</b>"], "median_ratio": [1.0],
                            "runs": [2]})
    fig = figures.rolling_ratio(rolling)
    assert "<b>" not in fig.data[0].hovertemplate and fig.data[0].name == "&lt;b&gt;t&lt;/b&gt;"


def test_an_ampersand_typed_by_a_user_is_escaped_once():
    fig = figures.idle_share_trend(pd.DataFrame({"week": [pd.Timestamp("2026-01-05")], "team": ["R&D &lt;"],
                                                 "idle_share": [0.2]}))
    assert fig.data[0].name == "R&amp;D &amp;lt;"
    assert figures.escape_figure_text(fig).data[0].name == "R&amp;D &amp;lt;"  # idempotent per figure
