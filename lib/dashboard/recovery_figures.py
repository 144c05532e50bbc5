"""The Recovery planner's charts: expected completion time against the checkpoint interval, the
simulated completion-time distribution, the completion time of each choice after an event, and the
work lost to interruptions, measured beside expected.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from lib.dashboard.figure_kit import empty_figure, log_axis, team_colour, titled_figure
from lib.dashboard.figure_text import shows_text_as_typed

OPTIMUM_COLOURS = {"young": "#9467bd", "daly": "#2ca02c", "exact": "#d62728"}


@shows_text_as_typed
def checkpoint_interval_curve(curve: pd.DataFrame, optima: pd.DataFrame,
                              current_interval_h: float | None = None,
                              failure_free_hours: float | None = None) -> go.Figure:
    """Expected completion time (hours) against the checkpoint interval (hours of work between
    checkpoints, log axis), with the Young, Daly and exact optima marked.

    curve: interval_h, expected_hours (and optionally expected_cost_gpu_hours for the hover);
    optima: method ("young" | "daly" | "exact"), interval_h, expected_hours."""
    title = "Expected completion time against checkpoint interval (hours)"
    c = curve.dropna(subset=["interval_h", "expected_hours"]) if not curve.empty else curve
    if c.empty:
        return empty_figure(title, "no interval gives a finite expected time for these inputs")
    fig = titled_figure(title, xaxis_title="checkpoint interval (hours of work between checkpoints, log scale)",
               yaxis_title="expected completion time (hours)")
    log_axis(fig, "x", float(c["interval_h"].min()), float(c["interval_h"].max()))
    hover = "every %{x:.3g} h: %{y:.4g} h expected<extra></extra>"
    custom = None
    if "expected_cost_gpu_hours" in c:
        custom = c["expected_cost_gpu_hours"]
        hover = "every %{x:.3g} h: %{y:.4g} h expected, %{customdata:,.1f} GPU-h billed<extra></extra>"
    fig.add_scatter(x=c["interval_h"], y=c["expected_hours"], mode="lines", name="expected completion time",
                    line=dict(color="#4c78a8", width=2), customdata=custom, hovertemplate=hover)
    if failure_free_hours is not None and math.isfinite(failure_free_hours):
        fig.add_hline(y=failure_free_hours, line=dict(color="#7f7f7f", dash="dot"),
                      annotation_text="no interruptions", annotation_position="bottom right")
    for row in optima.itertuples(index=False):
        if row.interval_h is None or not math.isfinite(row.interval_h) or row.interval_h <= 0 \
                or row.expected_hours is None or not math.isfinite(row.expected_hours):
            continue
        colour = OPTIMUM_COLOURS.get(row.method, "black")
        fig.add_scatter(x=[row.interval_h], y=[row.expected_hours], mode="markers",
                        name=f"{row.method}: every {row.interval_h * 60:.0f} min ({row.expected_hours:.4g} h)",
                        marker=dict(color=colour, size=11, symbol={"young": "diamond", "daly": "square"}
                                    .get(row.method, "star"), line=dict(color="white", width=1)))
    if current_interval_h is not None and math.isfinite(current_interval_h) and current_interval_h > 0:
        fig.add_vline(x=current_interval_h, line=dict(color="black", dash="dash"),
                      annotation_text=f"chosen: {current_interval_h:.3g} h", annotation_position="top")
    return fig


@shows_text_as_typed
def completion_histogram(completion_hours, *, budget_hours: float | None = None, budget_label: str = "",
                         p_breach: float | None = None, wall_limit_h: float | None = None,
                         bins: int = 60) -> go.Figure:
    """The simulated completion-time distribution (hours; binned here, so the browser gets ~60 bars
    however many runs were simulated), with P50 / P90, the budget line (budget_hours: the budget in
    wall-clock hours, e.g. GPU-hours / GPUs) and the wall-clock limit."""
    x = np.asarray(completion_hours, dtype=float).ravel()
    x = x[np.isfinite(x)]
    title = f"Simulated completion time ({x.size:,} runs; hours)"
    if x.size == 0:
        return empty_figure("Simulated completion time (hours)", "nothing simulated")
    lo, hi = float(x.min()), float(x.max())
    if hi <= lo:
        hi = lo + max(abs(lo) * 1e-3, 1e-6)
    counts, edges = np.histogram(x, bins=bins, range=(lo, hi))
    share = counts / x.size
    mids = (edges[:-1] + edges[1:]) / 2
    fig = titled_figure(title, xaxis_title="completion time (hours)", yaxis_title="share of runs", bargap=0.02)
    fig.add_bar(x=mids, y=share, width=edges[1] - edges[0], name="simulated runs", marker_color="#4c78a8",
                customdata=np.stack([edges[:-1], edges[1:]], axis=1),
                hovertemplate="%{customdata[0]:.3g}–%{customdata[1]:.3g} h: %{y:.1%}<extra></extra>")
    top = float(share.max()) * 1.08
    p50, p90 = np.percentile(x, [50, 90])
    lines = [(float(p50), f"P50 {p50:.3g} h", dict(color="#7f7f7f", dash="dot")),
             (float(p90), f"P90 {p90:.3g} h", dict(color="#f58518", dash="dot"))]
    if budget_hours is not None and math.isfinite(budget_hours):
        text = f"budget {budget_label} ({budget_hours:.3g} h)".replace("  ", " ")
        if p_breach is not None:
            text += f" · P(breach) {p_breach:.1%}"
        lines.append((float(budget_hours), text, dict(color="#d62728", width=3)))
    if wall_limit_h is not None and math.isfinite(wall_limit_h) and wall_limit_h > 0:
        lines.append((float(wall_limit_h), f"deadline {wall_limit_h:.3g} h", dict(color="black", dash="dash")))
    for v, label, line in lines:  # vertical lines as legend entries: labels never overlap
        fig.add_scatter(x=[v, v], y=[0, top], mode="lines", name=label, line=line,
                        hovertemplate="%{fullData.name}<extra></extra>")
    return fig


@shows_text_as_typed
def scenario_options(options: pd.DataFrame) -> go.Figure:
    """Completion time of each recovery choice (hours): a bar from P50 to P99, marks at P90 and the
    mean. options: option, mean, p50, p90, p99 (completion hours; rows with NaN are skipped)."""
    title = "Completion time of each choice after the event (hours: P50 to P99, P90 and mean marked)"
    o = options.dropna(subset=["p50", "p99"]) if not options.empty else options
    if o.empty:
        return empty_figure(title, "no choice to simulate")
    fig = titled_figure(title, xaxis_title="hours until the run finishes", yaxis_title="choice", showlegend=True)
    fig.add_bar(y=o["option"], x=o["p99"] - o["p50"], base=o["p50"], orientation="h", name="P50 to P99",
                marker_color="#c6dbef", customdata=o["p99"],
                hovertemplate="%{y}: P50 %{base:.3g} h to P99 %{customdata:.3g} h<extra></extra>")
    fig.add_scatter(y=o["option"], x=o["p90"], mode="markers", name="P90",
                    marker=dict(color="#f58518", symbol="line-ns-open", size=18, line=dict(width=3)))
    fig.add_scatter(y=o["option"], x=o["mean"], mode="markers", name="mean",
                    marker=dict(color="#08519c", symbol="diamond", size=10))
    return fig


@shows_text_as_typed
def lost_work_bars(groups: pd.DataFrame, colours: dict | None = None) -> go.Figure:
    """GPU-hours lost to interruptions per team and capacity type: measured (solid, the team's
    colour) beside what the closed form expects for the same attempts (hatched). groups:
    lib.dashboard.lost_work_queries.lost_work's "groups" (team, capacity, attempts, lost_gpu_hours,
    expected_lost_gpu_hours, modelled_attempts)."""
    title = "Work lost to interruptions: measured and expected (GPU-hours)"
    if groups.empty:
        return empty_figure(title, "no interrupted attempt recorded in this period")
    g = groups.sort_values(["team", "capacity"])
    x = [f"{t} · {c}" for t, c in zip(g["team"], g["capacity"])]
    bar_colours = [team_colour(colours, t) for t in g["team"]]
    fig = titled_figure(title, barmode="group", xaxis_title="team · capacity type", yaxis_title="GPU-hours lost")
    fig.add_bar(x=x, y=g["lost_gpu_hours"], name="measured", marker=dict(color=bar_colours),
                customdata=g["attempts"], hovertemplate="%{x}: %{y:,.2f} GPU-h lost in %{customdata} "
                                                        "interrupted attempts<extra></extra>")
    fig.add_bar(x=x, y=g["expected_lost_gpu_hours"].fillna(0.0), name="expected (closed form)",
                marker=dict(color=bar_colours, opacity=0.45, pattern=dict(shape="/", fgcolor="#333333")),
                customdata=g["modelled_attempts"],
                hovertemplate="%{x}: %{y:,.2f} GPU-h expected for %{customdata} attempts<extra></extra>")
    return fig
