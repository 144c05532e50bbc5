"""The charts of Overview and Reservations: GPU-hours reserved against used, deferred requests by reason,
reserved accelerators against quota, the month's budget, overruns, and the capacity calendar ahead.
"""
from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from lib.dashboard.figure_kit import day_axis, empty_figure, titled_figure, team_colour
from lib.dashboard.figure_text import shows_text_as_typed
from lib.dashboard.labels import ALL_TEAMS


@shows_text_as_typed
def reserved_vs_used(daily: pd.DataFrame, colours: dict | None = None) -> go.Figure:
    """Used GPU-hours per day stacked by team, with the total reserved GPU-hours as a line."""
    title = "Reserved vs used GPU-hours per day (GPU-h)"
    if daily.empty:
        return empty_figure(title)
    fig = titled_figure(title, barmode="stack", xaxis_title="day (UTC, reservation start)", yaxis_title="GPU-hours")
    for team, g in daily.groupby("team", sort=True):
        fig.add_bar(x=g["day"], y=g["used_gpu_hours"], name=f"{team} used", marker_color=team_colour(colours, team))
    total = daily.groupby("day", as_index=False)["reserved_gpu_hours"].sum()
    fig.add_scatter(x=total["day"], y=total["reserved_gpu_hours"], name="reserved (all shown teams)",
                    mode="lines+markers", line=dict(color="black", width=2))
    return day_axis(fig, daily["day"])


@shows_text_as_typed
def deferred_reasons(df: pd.DataFrame) -> go.Figure:
    """Deferred requests per reason code, this period against the previous one."""
    title = "Deferred requests by reason (requests)"
    if df.empty or (df["requests"].sum() == 0 and df["previous_requests"].sum() == 0):
        return empty_figure(title, "no deferred requests in this period")
    d = df.sort_values("requests")
    fig = titled_figure(title, barmode="group", xaxis_title="requests", yaxis_title="reason code")
    fig.add_bar(y=d["reason"], x=d["previous_requests"], orientation="h", name="previous period",
                marker_color="#c7c7c7")
    fig.add_bar(y=d["reason"], x=d["requests"], orientation="h", name="this period", marker_color="#1f77b4")
    return fig


# ----------------------------------------------------------------------------- reservations

@shows_text_as_typed
def reserved_over_time(over_time: pd.DataFrame, quotas: pd.DataFrame, colours: dict | None = None) -> go.Figure:
    """Average reserved accelerators per day and team (solid) against each team's quota (dashed)."""
    title = "Reserved accelerators per day against quota (GPUs, daily average)"
    if over_time.empty:
        return empty_figure(title, "no reservations in this period")
    fig = titled_figure(title, xaxis_title="day (UTC)", yaxis_title="GPUs held (daily average)")
    days = over_time["day"]
    for team, g in over_time.groupby("team", sort=True):
        c = team_colour(colours, team)
        fig.add_scatter(x=g["day"], y=g["reserved_gpus"], name=team, mode="lines", line=dict(color=c))
        q = quotas.loc[quotas["team"] == team, "quota_gpus"]
        if len(q):
            fig.add_scatter(x=[days.min(), days.max()], y=[float(q.iloc[0])] * 2, name=f"{team} quota",
                            mode="lines", line=dict(color=c, dash="dash"), showlegend=True)
    return day_axis(fig, days)


@shows_text_as_typed
def budget_bars(budget: pd.DataFrame, month_label: str = "") -> go.Figure:
    """Monthly budget per team split into consumed, committed and remaining GPU-hours."""
    title = f"Monthly budget {month_label}: consumed, committed, remaining (GPU-h)".replace("  ", " ")
    if budget.empty:
        return empty_figure(title, "no team policies loaded")
    fig = titled_figure(title, barmode="stack", xaxis_title="GPU-hours", yaxis_title="team")
    fig.add_bar(y=budget["team"], x=budget["consumed_gpu_hours"], orientation="h", name="consumed",
                marker_color="#4c78a8")
    fig.add_bar(y=budget["team"], x=budget["committed_gpu_hours"], orientation="h",
                name="committed (admitted, not finished)", marker_color="#f58518")
    fig.add_bar(y=budget["team"], x=budget["remaining_gpu_hours"].clip(lower=0), orientation="h",
                name="remaining", marker_color="#d9d9d9")
    over = budget[budget["remaining_gpu_hours"] < 0]
    if len(over):
        fig.add_scatter(y=over["team"], x=over["monthly_budget_gpu_hours"], mode="markers", name="budget (exceeded)",
                        marker=dict(symbol="line-ns-open", size=18, color="#d62728", line=dict(width=3)))
    return fig


@shows_text_as_typed
def overrun_bars(by_team: pd.DataFrame, colours: dict | None = None) -> go.Figure:
    """GPU-hours used beyond the reservation, per team."""
    title = "Overruns: GPU-hours used beyond the reservation (GPU-h)"
    if by_team.empty:
        return empty_figure(title, "no run used more than it reserved in this period")
    d = by_team.sort_values("overrun_gpu_hours")
    fig = titled_figure(title, xaxis_title="GPU-hours beyond reservation", yaxis_title="team", showlegend=False)
    fig.add_bar(y=d["team"], x=d["overrun_gpu_hours"], orientation="h",
                marker_color=[team_colour(colours, t) for t in d["team"]],
                customdata=d["runs"], hovertemplate="%{y}: %{x:.1f} GPU-h over %{customdata} runs<extra></extra>")
    return fig



@shows_text_as_typed
def capacity_calendar(calendar: pd.DataFrame, colours: dict | None = None) -> go.Figure:
    """Accelerators committed per team and day ahead (bars: the peak held that day by admitted,
    unfinished reservations, as the gate counts them) against each team's quota (dashed).
    calendar: lib.dashboard.queue_and_calendar.capacity_calendar (rows of the pooled team are left out)."""
    title = "Committed accelerators per day ahead against quota (GPUs, peak held in the day)"
    teams = calendar[calendar["team"] != ALL_TEAMS] if not calendar.empty else calendar
    if teams.empty:
        return empty_figure(title, "no team policies for these teams")
    fig = titled_figure(title, barmode="group", xaxis_title="day (UTC)", yaxis_title="GPUs committed")
    for team, g in teams.groupby("team", sort=True):
        c = team_colour(colours, team)
        fig.add_bar(x=g["day"], y=g["committed_gpus"], name=team, marker_color=c, legendgroup=team,
                    customdata=g[["quota_gpus", "free_gpus"]].to_numpy(),
                    hovertemplate="%{fullData.name}, %{x|%b %d}: %{y} GPUs committed, quota %{customdata[0]}, "
                                  "free %{customdata[1]}<extra></extra>")
        fig.add_scatter(x=g["day"], y=g["quota_gpus"], name=f"{team} quota", mode="lines", legendgroup=team,
                        line=dict(color=c, dash="dash", shape="hvh"))
    return day_axis(fig, teams["day"])
