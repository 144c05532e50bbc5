"""User text shows as typed in every chart: team names, run IDs and labels that are markup, links,
formulas or huge never become markup or live links in a Plotly figure (plotly.js renders <b>, <br>,
<a href>, … in names, categories, hover text, annotations and titles)."""
from __future__ import annotations

import html
import importlib
import inspect
import pkgutil

import numpy as np
import pandas as pd
import pytest

import lib.dashboard
from lib.dashboard import replay_figures, replay_view
from lib.dashboard import (estimate_figures, figure_kit, figure_text, forecast_figures, forecasts, idle_figures,
                           recovery_figures, reservation_figures, stop_figures)
from lib.dashboard.filters import default_filters
from tests.fixtures_app import PAGE_QUERIES
from tests.fixtures_hostile import HOSTILE, make_hostile_ledger

TEMPLATE_KEYS = {"hovertemplate", "texttemplate"}  # the builders' own templates, never user text


@pytest.fixture(scope="module")
def hostile_page_results(tmp_path_factory):
    """Every page's query results (and the forecast's plan_ahead) on a ledger of hostile team names."""
    path = tmp_path_factory.mktemp("hostile") / "gate.duckdb"
    now = make_hostile_ledger(path)
    f = default_filters(now.date())
    out = {name: query(f, path, now) for name, query in PAGE_QUERIES.items()}
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
    start = pd.Timestamp("2026-12-15 12:00")
    planned = pd.DataFrame({"run_id": h, "team": h, "kind": "exploratory", "gpus": 4,
                            "planned_start": [start + pd.Timedelta(hours=i) for i in range(len(h))],
                            "planned_end": [start + pd.Timedelta(hours=i + 5) for i in range(len(h))]})
    lost = pd.DataFrame({"team": h, "capacity": "preemptible", "attempts": 2, "lost_gpu_hours": 3.0,
                         "expected_lost_gpu_hours": 2.5, "modelled_attempts": 2})
    return optima, curve, options, estimate, reasons, planned, lost


def figures_by_builder(pages) -> dict[str, list]:
    """Every builder, drawn over the hostile ledger's real query results (and crafted frames where
    the labels are not team names)."""
    c = figure_kit.team_colours(HOSTILE)
    o, r, i, e, s = (pages[k] for k in ("overview", "reservations", "idle_capacity", "estimate_accuracy",
                                        "stops_promotion"))
    optima, curve, options, estimate, reasons, planned, lost = _crafted()
    return {
        "empty_figure": [figure_kit.empty_figure(HOSTILE[0], HOSTILE[1])],
        "reserved_vs_used": [reservation_figures.reserved_vs_used(o["daily"], c)],
        "deferred_reasons": [reservation_figures.deferred_reasons(o["deferred_by_reason"]),
                             reservation_figures.deferred_reasons(reasons)],
        "reserved_over_time": [reservation_figures.reserved_over_time(r["over_time"], r["quotas"], c)],
        "budget_bars": [reservation_figures.budget_bars(r["budget"], HOSTILE[1])],
        "overrun_bars": [reservation_figures.overrun_bars(r["overrun_by_team"], c)],
        "idle_by_cause": [idle_figures.idle_by_cause(i["weekly"])],
        "idle_by_team": [idle_figures.idle_by_team(i["by_team"])],
        "idle_share_trend": [idle_figures.idle_share_trend(i["weekly"], c)],
        "predicted_vs_actual": [estimate_figures.predicted_vs_actual(e["points"], c)],
        "rolling_ratio": [estimate_figures.rolling_ratio(e["rolling"], c)],
        "error_sources": [estimate_figures.error_sources(e["sources"])],
        "calibration_factors": [estimate_figures.calibration_factors(pages["calibration"]["table"])],
        "stop_reasons": [stop_figures.stop_reasons(s["by_reason"], c)],
        "estimate_items": [estimate_figures.estimate_items(estimate)],
        "checkpoint_interval_curve": [recovery_figures.checkpoint_interval_curve(curve, optima, 1.0, 29.0)],
        "completion_histogram": [recovery_figures.completion_histogram(np.linspace(5, 40, 500), budget_hours=30.0,
                                                                       budget_label=HOSTILE[1], p_breach=0.1,
                                                                       wall_limit_h=35.0)],
        "scenario_options": [recovery_figures.scenario_options(options)],
        "demand_forecast": [forecast_figures.demand_forecast(pages["plan_ahead"]["history"],
                                                             pages["plan_ahead"]["weeks"], t, c) for t in HOSTILE],
        "burn_down_chart": [forecast_figures.burn_down_chart(pages["plan_ahead"]["burn_path"],
                                                             pages["plan_ahead"]["burn"], t) for t in HOSTILE],
        "capacity_calendar": [reservation_figures.capacity_calendar(r["calendar"], c)],
        "queue_schedule": [reservation_figures.queue_schedule(r["waiting"], c),
                           reservation_figures.queue_schedule(planned, c)],
        "lost_work_bars": [recovery_figures.lost_work_bars(lost, c)],
        "replay_difference": [replay_figures.replay_difference(_replay_effect(), unit, c)
                              for unit in ("decisions", "hours")],
        "pool_measures": [replay_figures.pool_measures(_pool_rows(), 6, 4)],
    }


def _replay_effect() -> pd.DataFrame:
    """A replay's effect table (replay_view.difference_table) for teams with hostile names."""
    summary = {"admit": 3, "defer": 2, "reject": 0, "deferrals_by_reason": {"capacity": 2},
               "mean_wait_hours": 1.5, "p90_wait_hours": 4.0}
    result = {"teams": [{"team": name, "baseline": summary,
                         "proposed": {**summary, "admit": 2, "defer": 3, "deferrals_by_reason": {"capacity": 3},
                                      "p90_wait_hours": 6.0}} for name in HOSTILE]}
    return replay_view.difference_table(result)


def _pool_rows() -> pd.DataFrame:
    rows = [{"pool_gpus": n, "team": t, "admitted": 5, "deferred": 1, "deferral_share": 0.1,
             "cluster_capacity_deferrals": 1, "mean_wait_hours": 2.0, "p90_wait_hours": 3.0}
            for n in (4, 6, 8) for t in (replay_view.ALL_TEAMS, *HOSTILE)]
    return pd.DataFrame(rows)


# the blank figure every builder starts from: it shows only the title its builder gives it, and that
# builder's @shows_text_as_typed escapes the finished figure (escaping here would mark it done too early)
NOT_BUILDERS = {"titled_figure"}


def builders() -> dict:
    """Every public function of any module of lib/dashboard that builds a figure (returns one and does
    not take one): a new builder, or a new module of them, is covered (or fails here) without editing
    this list."""
    def builds(fn):
        sig = inspect.signature(fn)
        return "Figure" in str(sig.return_annotation) and not any(
            "Figure" in str(p.annotation) for p in sig.parameters.values())
    found = {}
    for info in pkgutil.iter_modules(lib.dashboard.__path__, "lib.dashboard."):
        module = importlib.import_module(info.name)
        found.update({name: fn for name, fn in inspect.getmembers(module, inspect.isfunction)
                      if not name.startswith("_") and name not in NOT_BUILDERS
                      and fn.__module__ == module.__name__ and builds(fn)})
    return found


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


@pytest.fixture(scope="module")
def hostile_figures(hostile_page_results) -> dict[str, list]:
    """figures_by_builder over the hostile results, drawn once for the module (the tests only read them)."""
    return figures_by_builder(hostile_page_results)


def test_every_builder_is_driven_with_hostile_text_and_escapes_it(hostile_figures):
    drawn = hostile_figures
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
                assert "<" not in text.replace(figure_text.LINE_BREAK, ""), (name, key, text[:200])   # ours only


def test_hostile_team_names_reach_the_charts_escaped_not_dropped(hostile_figures):
    drawn = hostile_figures
    shown = " ".join(t for figs in drawn.values() for fig in figs for _, t in strings(fig.to_dict()))
    for name in HOSTILE:
        assert html.escape(name.replace("\u202e", "[U+202E]"), quote=False) in shown, name[:40]
    assert "\u202e" not in shown  # an invisible override would reverse the rest of a label
    legend = [t.name for t in drawn["idle_share_trend"][0].data]
    assert "&lt;b&gt;bold&lt;/b&gt;" in legend


def test_escaping_keeps_category_order_and_hover_in_step():
    by_reason = pd.DataFrame({"team": ["<b>t</b>", "<b>t</b>"], "stop_reason": ["<i>x</i>", "budget"],
                              "runs": [1, 5]})
    fig = stop_figures.stop_reasons(by_reason)
    assert list(fig.layout.xaxis.categoryarray) == ["budget", "&lt;i&gt;x&lt;/i&gt;"]
    assert set(fig.data[0].x) == set(fig.layout.xaxis.categoryarray)
    rolling = pd.DataFrame({"day": [pd.Timestamp("2026-01-05")], "team": ["<b>t</b>"], "median_ratio": [1.0],
                            "runs": [2]})
    fig = estimate_figures.rolling_ratio(rolling)
    assert "<b>" not in fig.data[0].hovertemplate and fig.data[0].name == "&lt;b&gt;t&lt;/b&gt;"


def test_an_ampersand_typed_by_a_user_is_escaped_once():
    fig = idle_figures.idle_share_trend(pd.DataFrame({"week": [pd.Timestamp("2026-01-05")], "team": ["R&D &lt;"],
                                                 "idle_share": [0.2]}))
    assert fig.data[0].name == "R&amp;D &amp;lt;"
    assert figure_text.escape_figure_text(fig).data[0].name == "R&amp;D &amp;lt;"  # idempotent per figure
