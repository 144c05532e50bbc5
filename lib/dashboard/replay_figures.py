"""The Policy replay page's charts: the proposal's effect per team (proposal - baseline), and the
capacity what-if's measures per pool size.
"""
from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from lib.dashboard.figure_kit import empty_figure, team_colour, titled_figure
from lib.dashboard.figure_text import shows_text_as_typed
from lib.dashboard.labels import ALL_TEAMS

UNIT_TITLES = {"decisions": "Proposal − baseline: decisions per team",
               "hours": "Proposal − baseline: wait per team (hours)"}


@shows_text_as_typed
def replay_difference(diff: pd.DataFrame, unit: str, colours: dict | None = None) -> go.Figure:
    """Horizontal bars of proposal - baseline for each measure of `unit` ("decisions": admits and
    deferrals, all and by reason; "hours": mean and P90 wait), one bar per team (difference_table rows)."""
    title = UNIT_TITLES[unit]
    d = diff[(diff["unit"] == unit) & diff["difference"].notna()] if len(diff) else diff
    if d.empty:
        return empty_figure(title, "no replayed requests in this window")
    measures = list(dict.fromkeys(d["measure"]))
    fig = titled_figure(title, barmode="group", xaxis_title="proposal − baseline", yaxis_title=None,
                        height=max(320, 60 + 28 * len(measures) * max(1, d["team"].nunique()) // 2))
    for team, rows in d.groupby("team", sort=True):
        fig.add_bar(y=rows["measure"], x=rows["difference"], orientation="h", name=team,
                    marker_color=team_colour(colours, team),
                    customdata=rows[["baseline", "proposed"]].to_numpy(),
                    hovertemplate="%{y}: %{x:+,.4g}<br>baseline %{customdata[0]:,.4g} → proposed "
                                  "%{customdata[1]:,.4g}")
    fig.update_yaxes(categoryorder="array", categoryarray=measures[::-1])
    fig.add_vline(x=0, line_color="#7f7f7f", line_width=1)
    return fig


@shows_text_as_typed
def pool_measures(rows: pd.DataFrame, found: int | None, today: int | None) -> go.Figure:
    """Every team's deferral share (%) and P90 wait (hours) together, per pool size tried, with the
    size found and today's marked (pool_rows, the all-teams rows)."""
    title = "Deferral share and P90 wait by pool size (all teams)"
    d = rows[rows["team"] == ALL_TEAMS].sort_values("pool_gpus") if len(rows) else rows
    if d.empty:
        return empty_figure(title, "no pool sizes replayed")
    fig = titled_figure(title, xaxis_title="accelerators in the pool", yaxis_title="deferral share (%)",
                        yaxis2=dict(title="P90 wait (hours)", overlaying="y", side="right"))
    fig.add_scatter(x=d["pool_gpus"], y=d["deferral_share"].astype(float) * 100, name="deferral share (%)",
                    mode="lines+markers", line_color="#000000")
    fig.add_scatter(x=d["pool_gpus"], y=d["p90_wait_hours"], name="P90 wait (hours)", yaxis="y2",
                    mode="lines+markers", line_color="#7f7f7f", line_dash="dash")
    for n, label in ((found, "smallest that meets the target"), (today, "today")):
        if n is not None:
            fig.add_vline(x=n, line_color="#7f7f7f", line_dash="dot", annotation_text=f"{label}: {n:,}")
    return fig
