"""The charts of Idle reserved capacity: idle reserved GPU-hours by week, by team and cause, and the
idle share per team and week.
"""
from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from lib.dashboard.figure_kit import day_axis, empty_figure, titled_figure, team_colour
from lib.dashboard.figure_text import shows_text_as_typed

CAUSE_COLOURS = {"late start": "#f2a541", "early end": "#4c9be8", "never used": "#c0392b"}


@shows_text_as_typed
def idle_by_cause(weekly: pd.DataFrame) -> go.Figure:
    """Idle reserved GPU-hours per week, stacked by cause (all shown teams)."""
    title = "Idle reserved capacity per week by cause (GPU-h)"
    if weekly.empty:
        return empty_figure(title, "no closed reservations in this period")
    w = weekly.groupby("week", as_index=False)[["late_start_gpu_hours", "early_end_gpu_hours",
                                                "never_used_gpu_hours"]].sum()
    fig = titled_figure(title, barmode="stack", xaxis_title="week (reservation start)", yaxis_title="idle GPU-hours")
    for col, cause in (("late_start_gpu_hours", "late start"), ("early_end_gpu_hours", "early end"),
                       ("never_used_gpu_hours", "never used")):
        fig.add_bar(x=w["week"], y=w[col], name=cause, marker_color=CAUSE_COLOURS[cause])
    return day_axis(fig, w["week"], week=True)


@shows_text_as_typed
def idle_by_team(by_team: pd.DataFrame) -> go.Figure:
    """Idle reserved GPU-hours per team (charged to the team that held them), stacked by cause."""
    title = "Idle reserved capacity per team by cause (GPU-h, charged to the holder)"
    if by_team.empty:
        return empty_figure(title, "no closed reservations in this period")
    d = by_team.sort_values("idle_gpu_hours")
    fig = titled_figure(title, barmode="stack", xaxis_title="idle GPU-hours", yaxis_title="team")
    for col, cause in (("late_start_gpu_hours", "late start"), ("early_end_gpu_hours", "early end"),
                       ("never_used_gpu_hours", "never used")):
        fig.add_bar(y=d["team"], x=d[col], orientation="h", name=cause, marker_color=CAUSE_COLOURS[cause])
    return fig


@shows_text_as_typed
def idle_share_trend(weekly: pd.DataFrame, colours: dict | None = None) -> go.Figure:
    """Share of reserved GPU-hours left idle, per team and week."""
    title = "Idle share of reserved capacity per week (%)"
    if weekly.empty:
        return empty_figure(title, "no closed reservations in this period")
    fig = titled_figure(title, xaxis_title="week (reservation start)", yaxis_title="idle share (%)")
    for team, g in weekly.groupby("team", sort=True):
        fig.add_scatter(x=g["week"], y=100 * g["idle_share"], name=team, mode="lines+markers",
                        line=dict(color=team_colour(colours, team)))
    return day_axis(fig, weekly["week"], week=True)
