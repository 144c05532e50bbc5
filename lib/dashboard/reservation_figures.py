"""The charts of Overview and Reservations: GPU-hours reserved against used, deferred requests by reason,
reserved accelerators against quota, the month's budget, overruns, and the capacity calendar ahead.
"""
from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from lib.dashboard.figure_kit import day_axis, empty_figure, titled_figure, team_colour
from lib.dashboard.figure_text import shows_text_as_typed


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
    """Accelerators committed per team and day ahead (bars: what admitted reservations and the forward
    plan's starts hold at the day's start, as the gate counts them) against each team's quota (dashed).
    calendar: lib.dashboard.queue_and_calendar.forward_view's calendar (one row per team and day is
    drawn: the capacity types differ only in what is free)."""
    title = "Committed accelerators per day ahead against quota (GPUs, at the day's start)"
    if calendar.empty:
        return empty_figure(title, "no team policies for these teams")
    teams = calendar.drop_duplicates(["day", "team"])
    fig = titled_figure(title, barmode="group", xaxis_title="day (UTC)", yaxis_title="GPUs committed")
    for team, g in teams.groupby("team", sort=True):
        c = team_colour(colours, team)
        fig.add_bar(x=g["day"], y=g["committed_gpus"], name=team, marker_color=c, legendgroup=team,
                    customdata=g[["quota_gpus", "free_gpus", "retraining_free_gpus"]].to_numpy(),
                    hovertemplate="%{fullData.name}, %{x|%b %d}: %{y} GPUs committed, quota %{customdata[0]}, "
                                  "free %{customdata[1]} (retraining %{customdata[2]})<extra></extra>")
        fig.add_scatter(x=g["day"], y=g["quota_gpus"], name=f"{team} quota", mode="lines", legendgroup=team,
                        line=dict(color=c, dash="dash", shape="hvh"))
    return day_axis(fig, teams["day"])


@shows_text_as_typed
def queue_schedule(waiting: pd.DataFrame, colours: dict | None = None) -> go.Figure:
    """The queue as a schedule: each waiting request the forward plan starts, from its planned start to
    its estimated end (a line per request, a marker at the start sized by its accelerators), one row
    per team, coloured by team. waiting: lib.dashboard.queue_and_calendar.forward_view's queue."""
    title = "The queue as the gate would serve it: planned starts (UTC)"
    planned = waiting[waiting["planned_start"].notna()] if not waiting.empty else waiting
    if planned.empty:
        return empty_figure(title, "no waiting request starts within the plan")
    fig = titled_figure(title, xaxis_title="planned start → estimated end (UTC)", yaxis_title="team")
    for team, g in planned.groupby("team", sort=True):
        c = team_colour(colours, team)
        xs, ys = [], []
        for start, end in zip(g["planned_start"], g["planned_end"]):
            xs += [start, end, None]
            ys += [team, team, None]
        fig.add_scatter(x=xs, y=ys, mode="lines", line=dict(color=c, width=2), opacity=0.5, name=team,
                        legendgroup=team, showlegend=False, hoverinfo="skip")
        fig.add_scatter(x=g["planned_start"], y=[team] * len(g), mode="markers", name=team, legendgroup=team,
                        marker=dict(color=c, size=[6 + min(int(n), 16) for n in g["gpus"].fillna(1)]),
                        customdata=g[["run_id", "gpus", "kind"]].to_numpy(),
                        hovertemplate="%{customdata[0]} (%{customdata[2]}, %{customdata[1]} GPUs): "
                                      "starts %{x|%b %d %H:%M}<extra>%{fullData.name}</extra>")
    fig.update_xaxes(type="date")
    return fig
