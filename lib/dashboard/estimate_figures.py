"""The charts of estimates against what runs used (Estimate accuracy) and of one itemised estimate
(What-if): predicted against actual, the error over time and by source, the calibration applied.
"""
from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from lib.dashboard.figure_kit import day_axis, empty_figure, log_axis, titled_figure, team_colour
from lib.dashboard.figure_text import shows_text_as_typed
from lib.dashboard.labels import REQUESTED_LABEL, estimate_item
from lib.gate.terms import finite_number

SOURCE_COLOURS = {"runtime": "#4c78a8", "checkpoint overhead": "#f58518", "retries and lost work": "#e45756",
                  "evaluation": "#72b7b2"}


@shows_text_as_typed
def predicted_vs_actual(points: pd.DataFrame, colours: dict | None = None, band: float = 0.5) -> go.Figure:
    """Log–log scatter of estimated vs actual GPU-hours per run, with y = x and the ±`band` lines
    (actual = (1 ± band) × estimate). Runs whose estimate was only requested are drawn as crosses."""
    title = f"Predicted vs actual GPU-hours per run (GPU-h, log–log; dashed: ±{band:.0%})"
    pts = points[(points["estimated_gpu_hours"] > 0) & (points["actual_gpu_hours"] > 0)] if len(points) else points
    if pts.empty:
        return empty_figure(title, "no finished runs with an estimate in this period")
    fig = titled_figure(title, xaxis_title="estimated GPU-hours", yaxis_title="actual GPU-hours")
    for (team, requested), g in pts.groupby([pts["team"], pts["estimate_source"] == REQUESTED_LABEL], sort=True):
        fig.add_scatter(x=g["estimated_gpu_hours"], y=g["actual_gpu_hours"], mode="markers",
                        name=f"{team} ({REQUESTED_LABEL})" if requested else team,
                        marker=dict(color=team_colour(colours, team), size=6, opacity=0.6,
                                    symbol="x" if requested else "circle"),
                        text=g["run_id"], hovertemplate="%{text}<br>estimated %{x:.1f} GPU-h<br>"
                                                        "actual %{y:.1f} GPU-h<extra></extra>")
    lo = float(min(pts["estimated_gpu_hours"].min(), pts["actual_gpu_hours"].min()))
    hi = float(max(pts["estimated_gpu_hours"].max(), pts["actual_gpu_hours"].max()))
    lo, hi = lo / 1.2, hi * 1.2
    log_axis(fig, "x", lo, hi)
    log_axis(fig, "y", lo, hi)
    xs = [lo, hi]
    fig.add_scatter(x=xs, y=xs, mode="lines", name="y = x (exact)", line=dict(color="black", width=1))
    fig.add_scatter(x=xs, y=[x * (1 + band) for x in xs], mode="lines", name=f"+{band:.0%}",
                    line=dict(color="grey", dash="dash", width=1))
    fig.add_scatter(x=xs, y=[x * (1 - band) for x in xs], mode="lines", name=f"−{band:.0%}",
                    line=dict(color="grey", dash="dash", width=1))
    return fig


@shows_text_as_typed
def rolling_ratio(rolling: pd.DataFrame, colours: dict | None = None, window_days: int = 28) -> go.Figure:
    """Rolling median of actual / estimated per team over time (1 = exact)."""
    title = f"Estimate error over time: rolling {window_days}-day median of actual ÷ estimated (ratio)"
    if rolling.empty:
        return empty_figure(title, "no finished runs with a measured estimate in this period")
    fig = titled_figure(title, xaxis_title="day (UTC, end of window)", yaxis_title="actual ÷ estimated")
    for team, g in rolling.groupby("team", sort=True):
        fig.add_scatter(x=g["day"], y=g["median_ratio"], name=team, mode="lines+markers",
                        line=dict(color=team_colour(colours, team)), customdata=g["runs"],
                        hovertemplate="%{x}: %{y:.2f} (from %{customdata} runs)<extra>%{fullData.name}</extra>")
    fig.add_hline(y=1.0, line=dict(color="black", width=1, dash="dot"))
    return day_axis(fig, rolling["day"])


@shows_text_as_typed
def error_sources(sources: pd.DataFrame) -> go.Figure:
    """Actual minus estimated GPU-hours per error source and team (positive: underestimated)."""
    title = "Where the error came from: actual − estimated per source (GPU-h; > 0 underestimated)"
    if sources.empty:
        return empty_figure(title, "no finished runs with an itemised estimate in this period")
    fig = titled_figure(title, barmode="group", xaxis_title="team", yaxis_title="GPU-hours (actual − estimated)")
    for source, g in sources.groupby("source", sort=False):
        fig.add_bar(x=g["team"], y=g["error_gpu_hours"], name=source, marker_color=SOURCE_COLOURS.get(source))
    fig.add_hline(y=0, line=dict(color="black", width=1))
    return fig


@shows_text_as_typed
def calibration_factors(cal: pd.DataFrame) -> go.Figure:
    """The median factor and the upper-bound factor the gate applies per team × kind."""
    title = "Calibration the gate applies today (× raw estimate; bar: median factor, ◆: upper bound)"
    if cal.empty:
        return empty_figure(title, "no calibration history")
    label = cal["team"] + " · " + cal["kind"]
    fig = titled_figure(title, xaxis_title="team · kind", yaxis_title="factor (× raw estimate)")
    fig.add_bar(x=label, y=cal["factor"], name="median factor", marker_color="#4c78a8",
                customdata=cal["runs"], hovertemplate="%{x}: ×%{y:.2f} from %{customdata} runs<extra></extra>")
    known = cal[cal["upper_factor"].notna()]
    fig.add_scatter(x=known["team"] + " · " + known["kind"], y=known["upper_factor"], mode="markers",
                    name="upper bound factor", marker=dict(symbol="diamond", size=10, color="#e45756"))
    fig.add_hline(y=1.0, line=dict(color="black", width=1, dash="dot"))
    return fig



@shows_text_as_typed
def estimate_items_figure(estimate: dict) -> go.Figure:
    """The itemised raw estimate (bars) with the raw, calibrated median and upper totals."""
    title = "Estimate by item, raw and calibrated (GPU-h)"
    items = (estimate or {}).get("items_gpu_hours") or {}
    items = {k: v for k, v in items.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    if not items:
        return empty_figure(title, "the decision carries no itemised estimate")
    fig = titled_figure(title, xaxis_title="GPU-hours", yaxis_title="item", showlegend=True)
    names = [estimate_item(k) for k in items]   # in words, as the table beside it names them
    fig.add_bar(y=names, x=list(items.values()), orientation="h", name="raw items", marker_color="#4c78a8")
    for key, label, colour in (("raw_gpu_hours", "raw total", "black"),
                               ("median_gpu_hours", "calibrated median", "#f58518"),
                               ("upper_gpu_hours", "calibrated upper bound", "#e45756")):
        v = finite_number(estimate.get(key))
        if v is not None:
            fig.add_vline(x=v, line=dict(color=colour, dash="dash"))
            fig.add_scatter(x=[v], y=[names[-1]], mode="markers", name=f"{label}: {v:.1f}",
                            marker=dict(color=colour, symbol="line-ns-open", size=16, line=dict(width=2)))
    return fig
