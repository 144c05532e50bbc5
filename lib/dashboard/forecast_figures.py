"""The Forecast charts (the burn-down also on Reservations): a team's weekly GPU-hours and forecast,
and its month's projected spend against the budget.
"""
from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from lib.dashboard.figure_kit import day_axis, empty_figure, titled_figure, team_colour
from lib.dashboard.figure_text import shows_text_as_typed


@shows_text_as_typed
def demand_forecast(history: pd.DataFrame, weeks: pd.DataFrame, team: str, colours: dict | None = None,
                    horizon: int | None = None) -> go.Figure:
    """One team's weekly GPU-hours: the recent past (bars), the forecast P50 (line) and P90 (band top)
    for the weeks up to `horizon` ahead (None: every week given), and the GPU-hours its quota gives in a
    week (dashed)."""
    title = f"Weekly GPU-hours of {team}: recent weeks and the forecast (GPU-h, P50 line, P90 band)"
    h = history[history["team"] == team]
    w = weeks[weeks["team"] == team]
    if horizon is not None:
        w = w[w["horizon"] <= horizon]
    if h.empty and w.empty:
        return empty_figure(title, "no history for this team")
    c = team_colour(colours, team)
    fig = titled_figure(title, xaxis_title="week starting (UTC)", yaxis_title="GPU-hours")
    fig.add_bar(x=h["week"], y=h["gpu_hours"], name="used (runs started that week)", marker_color=c, opacity=0.55)
    fig.add_scatter(x=w["week_start"], y=w["p50_gpu_hours"], name="forecast P50", mode="lines+markers",
                    line=dict(color=c, width=2))
    fig.add_scatter(x=w["week_start"], y=w["p90_gpu_hours"], name="forecast P90", mode="lines", fill="tonexty",
                    line=dict(color=c, width=1, dash="dot"))
    quota = w["quota_gpu_hours_per_week"].dropna()
    if len(quota):
        xs = [*h["week"], *w["week_start"]]
        fig.add_scatter(x=[min(xs), max(xs)], y=[float(quota.iloc[0])] * 2, name="quota × 168 h", mode="lines",
                        line=dict(color="black", dash="dash", width=1))
    return day_axis(fig, [*h["week"], *w["week_start"]], week=True)


@shows_text_as_typed
def burn_down_chart(path: pd.DataFrame, burn: pd.DataFrame, team: str) -> go.Figure:
    """One team's month: spend so far, the projected month-to-date spend to month end (P50 line, P90
    band top) and the monthly budget (GPU-hours)."""
    title = f"Budget burn-down of {team} this month (GPU-h: projected spend, P50 line, P90 band)"
    p = path[path["team"] == team]
    b = burn[burn["team"] == team]
    if p.empty or b.empty:
        return empty_figure(title, "no budget or no days left this month")
    row = b.iloc[0]
    fig = titled_figure(title, xaxis_title="day (UTC)", yaxis_title="GPU-hours spent this month")
    fig.add_scatter(x=p["day"], y=p["p50_gpu_hours"], name="projected P50", mode="lines", line=dict(color="#4c78a8"))
    fig.add_scatter(x=p["day"], y=p["p90_gpu_hours"], name="projected P90", mode="lines", fill="tonexty",
                    line=dict(color="#4c78a8", dash="dot", width=1))
    fig.add_scatter(x=[p["day"].min()], y=[row["consumed_gpu_hours"]], name="spent so far", mode="markers",
                    marker=dict(color="black", size=9))
    fig.add_scatter(x=[p["day"].min(), p["day"].max()], y=[row["budget_gpu_hours"]] * 2, name="monthly budget",
                    mode="lines", line=dict(color="#d62728", width=2))
    return day_axis(fig, p["day"])
