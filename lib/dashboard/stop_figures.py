"""The Stops and promotion chart: finished runs per stop reason, stacked by team."""
from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from lib.dashboard.figure_kit import empty_figure, titled_figure, team_colour
from lib.dashboard.figure_text import shows_text_as_typed


@shows_text_as_typed
def stop_reasons(by_reason: pd.DataFrame, colours: dict | None = None) -> go.Figure:
    """Finished runs per stop reason, stacked by team."""
    title = "Runs by stop reason (runs)"
    if by_reason.empty:
        return empty_figure(title, "no runs ended in this period")
    order = by_reason.groupby("stop_reason")["runs"].sum().sort_values(ascending=False).index.tolist()
    fig = titled_figure(title, barmode="stack", xaxis_title="stop reason", yaxis_title="runs")
    for team, g in by_reason.groupby("team", sort=True):
        fig.add_bar(x=g["stop_reason"], y=g["runs"], name=team, marker_color=team_colour(colours, team))
    fig.update_xaxes(categoryorder="array", categoryarray=order)
    return fig
