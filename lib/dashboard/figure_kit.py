"""What every dashboard chart is built from: one colour per team for ever, the common layout, date and
log axes that label their ticks as people read them, and the figure that says there is nothing to draw.

A team keeps one colour on every page and for ever: `team_colours(teams, explicit)` takes a team's
colour from `explicit` (e.g. data/teams.toml) when set, else from a SHA-256 of its name — never from
its position in the team list, so adding a team (or filtering) never repaints another.

The charts themselves live with the page they serve: `reservation_figures` (Overview, Reservations),
`idle_figures`, `estimate_figures` (Estimate accuracy, What-if), `recovery_figures`, `forecast_figures`,
`stop_figures`. Each builder takes DataFrames and returns a go.Figure, nothing else; every title
names its unit; user text is shown as typed (`figure_text`).
"""
from __future__ import annotations

import hashlib
import math

import pandas as pd
import plotly.graph_objects as go

from lib.dashboard.figure_text import shows_text_as_typed

PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
           "#7f7f7f", "#bcbd22", "#17becf", "#393b79", "#637939", "#8c6d31", "#843c39"]
_LAYOUT = dict(template="plotly_white", margin=dict(l=10, r=10, t=60, b=10), legend_title_text="",
               hovermode="closest")


def hashed_colour(team: str) -> str:
    """The palette colour a team name hashes to (SHA-256, so the same in every process): it depends
    on the name alone. Two names may share a colour; that is accepted rather than letting one
    team's colour depend on which other teams exist."""
    digest = hashlib.sha256(str(team).encode("utf-8")).digest()
    return PALETTE[int.from_bytes(digest[:8], "big") % len(PALETTE)]


def team_colours(teams, explicit: dict | None = None) -> dict[str, str]:
    """A colour per team that never changes: `explicit[team]` when given (e.g. a colour set in
    data/teams.toml), else `hashed_colour(team)`. Adding or removing a team repaints no other."""
    explicit = explicit or {}
    return {t: explicit.get(t) or hashed_colour(t) for t in sorted(set(teams))}


def team_colour(colours: dict | None, team: str) -> str:
    """`colours[team]` when the page passed one, else the colour the team's name hashes to."""
    return (colours or {}).get(team) or team_colours([team])[team]


def titled_figure(title: str, **layout) -> go.Figure:
    """An empty figure with `title` and the common layout (`layout` overrides it)."""
    fig = go.Figure()
    fig.update_layout(title=dict(text=title), **{**_LAYOUT, **layout})
    return fig


DAY_TICKS_UP_TO = 14   # distinct days (or weeks) on a date axis up to which every one gets its own tick


def day_axis(fig: go.Figure, days, *, week: bool = False) -> go.Figure:
    """A date x axis that never ticks below its data's step (a day, or a week): plotly's automatic
    ticks on a one-day range fall every few hours or seconds. Up to DAY_TICKS_UP_TO distinct values
    each gets one tick labelled with its date; more are left to plotly's (then daily or coarser) ticks
    with a date-only format."""
    values = sorted(pd.to_datetime(pd.Series(list(days))).dropna().unique())
    label = "week of %b %d" if week else "%b %d"
    if 0 < len(values) <= DAY_TICKS_UP_TO:
        stamps = [pd.Timestamp(v) for v in values]
        fig.update_xaxes(type="date", tickmode="array", tickvals=stamps,
                         ticktext=[t.strftime(label) for t in stamps])
    else:
        fig.update_xaxes(type="date", tickformat="%b %d\n%Y", tickformatstops=[])
    return fig


def log_ticks(lo: float, hi: float) -> list[float]:
    """Tick values for a log axis over [lo, hi] (both > 0): 1, 2 and 5 times each power of ten in
    range (only 1 per decade when the range spans more than 4 decades); on a range too narrow for two
    of those, its ends and middle rounded to two significant digits."""
    if not (lo > 0 and hi > 0) or not (math.isfinite(lo) and math.isfinite(hi)):
        return []
    lo, hi = min(lo, hi), max(lo, hi)
    first, last = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    steps = (1,) if last - first > 4 else (1, 2, 5)
    ticks = [m * 10.0 ** e for e in range(first, last + 1) for m in steps]
    inside = [t for t in ticks if lo <= t * (1 + 1e-9) and t <= hi * (1 + 1e-9)]
    if len(inside) >= 2:
        return inside
    return sorted({float(f"{v:.2g}") for v in (lo, math.sqrt(lo * hi), hi)})


def log_axis(fig: go.Figure, axis: str, lo: float, hi: float) -> go.Figure:
    """Make `axis` ("x" or "y") logarithmic with ticks labelled as whole numbers (0.2, 0.5, 1, 2, …):
    plotly's own log ticks label 0.2–0.9 as bare digits '2'…'9'."""
    ticks = log_ticks(lo, hi)
    update = fig.update_xaxes if axis == "x" else fig.update_yaxes
    update(type="log", tickmode="array", tickvals=ticks, ticktext=[f"{t:,.10g}" for t in ticks])
    return fig


@shows_text_as_typed
def empty_figure(title: str, message: str = "no data for these filters") -> go.Figure:
    """A figure that says there is nothing to draw (keeps the page layout steady)."""
    fig = titled_figure(title)
    fig.add_annotation(text=message, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper",
                       font=dict(size=14, color="#666"))
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return fig
