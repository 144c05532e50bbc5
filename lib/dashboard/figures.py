"""Plotly figure builders for the dashboard: DataFrame in, go.Figure out, nothing else.

Every title names its unit. A team keeps one colour on every page and for ever:
`team_colours(teams, explicit)` takes a team's colour from `explicit` (e.g. data/teams.toml) when
set, else from a SHA-256 of its name — never from its position in the team list, so adding a team
(or filtering) never repaints another.

User text (team names, run IDs, reason codes, labels) is shown as typed: plotly.js renders a subset
of HTML in trace names, legends, category labels, hover text, annotations and titles (`<b>`, `<br>`,
`<a href>` as a live link, …). Every public builder is wrapped in `@shows_text_as_typed`, which
HTML-escapes every string the finished figure will display, in one pass (plotly.js turns the
entities back into the characters typed). Builders therefore put raw text in and must not embed user
text in a hovertemplate (use `%{text}`, `%{x}`, `%{fullData.name}` instead).
"""
from __future__ import annotations

import functools
import hashlib
import html
import math

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from lib.dashboard.labels import ALL_TEAMS
from lib.gate.terms import finite_number

PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
           "#7f7f7f", "#bcbd22", "#17becf", "#393b79", "#637939", "#8c6d31", "#843c39"]
CAUSE_COLOURS = {"late start": "#f2a541", "early end": "#4c9be8", "never used": "#c0392b"}
SOURCE_COLOURS = {"runtime": "#4c78a8", "checkpoint overhead": "#f58518", "retries and lost work": "#e45756",
                  "evaluation": "#72b7b2"}
REQUESTED_LABEL = "requested, not measured"
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


def _colour(colours: dict | None, team: str) -> str:
    return (colours or {}).get(team) or team_colours([team])[team]


# ------------------------------------------------------------------- user text, shown as typed

# bidirectional embedding / override / isolate controls: invisible, and they reorder the text
# that follows them (a name ending in U+202E would reverse the rest of a label or caption)
BIDI_CONTROLS = dict.fromkeys([*range(0x202A, 0x202F), *range(0x2066, 0x206A)])


def visible_controls(text: str) -> str:
    """`text` with each bidirectional control character written visibly as `[U+XXXX]`."""
    if not any(ord(ch) in BIDI_CONTROLS for ch in text):
        return text
    return "".join(f"[U+{ord(ch):04X}]" if ord(ch) in BIDI_CONTROLS else ch for ch in text)


def as_typed(text: str) -> str:
    """`text` with the characters plotly.js reads as markup (& < >) written as entities, which
    plotly.js shows as the characters typed, and bidirectional controls made visible. Quotes stay:
    without a `<` no tag can form, and plotly.js does not decode `&quot;`."""
    return html.escape(visible_controls(text), quote=False)


# the trace properties plotly.js displays as text (hovertemplate / texttemplate are the builders'
# own templates, never user text)
_TRACE_TEXT = ("name", "legendgroup", "x", "y", "z", "text", "hovertext", "customdata", "labels",
               "parents", "ids")
_ESCAPED = "_gate_text_escaped"


def _escaped_values(value):
    """Strings escaped, arrays (any depth) element-wise, anything else unchanged; None when nothing
    needs changing."""
    if isinstance(value, str):
        out = as_typed(value)
        return None if out == value else out
    if isinstance(value, (list, tuple, np.ndarray)):
        items = list(value)
        changed = [_escaped_values(v) for v in items]
        if all(c is None for c in changed):
            return None
        return [v if c is None else c for v, c in zip(items, changed)]
    return None


def _escape_props(obj, props) -> None:
    for prop in props:
        try:
            value = obj[prop]
        except (KeyError, ValueError):
            continue
        new = _escaped_values(value)
        if new is not None:
            obj[prop] = new


def escape_figure_text(fig: go.Figure) -> go.Figure:
    """Escape (once) every string `fig` displays: trace text properties, titles, axis categories
    and tick labels, annotations, legend title."""
    if getattr(fig, _ESCAPED, False):
        return fig
    for trace in fig.data:
        _escape_props(trace, _TRACE_TEXT)
    layout = fig.layout
    _escape_props(layout.title, ("text",))
    _escape_props(layout.legend.title, ("text",))
    for axis in [*fig.select_xaxes(), *fig.select_yaxes()]:
        _escape_props(axis, ("categoryarray", "ticktext"))
        _escape_props(axis.title, ("text",))
    for ann in layout.annotations:
        _escape_props(ann, ("text", "hovertext"))
    for shape in layout.shapes:
        _escape_props(shape, ("name",))
    setattr(fig, _ESCAPED, True)
    return fig


def shows_text_as_typed(builder):
    """Decorator for every public figure builder: its figure shows user text as typed."""
    @functools.wraps(builder)
    def build(*args, **kwargs) -> go.Figure:
        return escape_figure_text(builder(*args, **kwargs))
    build.shows_text_as_typed = True
    return build


def _fig(title: str, **layout) -> go.Figure:
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
    fig = _fig(title)
    fig.add_annotation(text=message, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper",
                       font=dict(size=14, color="#666"))
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    return fig


# --------------------------------------------------------------------------------- overview

@shows_text_as_typed
def reserved_vs_used(daily: pd.DataFrame, colours: dict | None = None) -> go.Figure:
    """Used GPU-hours per day stacked by team, with the total reserved GPU-hours as a line."""
    title = "Reserved vs used GPU-hours per day (GPU-h)"
    if daily.empty:
        return empty_figure(title)
    fig = _fig(title, barmode="stack", xaxis_title="day (UTC, reservation start)", yaxis_title="GPU-hours")
    for team, g in daily.groupby("team", sort=True):
        fig.add_bar(x=g["day"], y=g["used_gpu_hours"], name=f"{team} used", marker_color=_colour(colours, team))
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
    fig = _fig(title, barmode="group", xaxis_title="requests", yaxis_title="reason code")
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
    fig = _fig(title, xaxis_title="day (UTC)", yaxis_title="GPUs held (daily average)")
    days = over_time["day"]
    for team, g in over_time.groupby("team", sort=True):
        c = _colour(colours, team)
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
    fig = _fig(title, barmode="stack", xaxis_title="GPU-hours", yaxis_title="team")
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
    fig = _fig(title, xaxis_title="GPU-hours beyond reservation", yaxis_title="team", showlegend=False)
    fig.add_bar(y=d["team"], x=d["overrun_gpu_hours"], orientation="h",
                marker_color=[_colour(colours, t) for t in d["team"]],
                customdata=d["runs"], hovertemplate="%{y}: %{x:.1f} GPU-h over %{customdata} runs<extra></extra>")
    return fig


# ---------------------------------------------------------------------------- idle capacity

@shows_text_as_typed
def idle_by_cause(weekly: pd.DataFrame) -> go.Figure:
    """Idle reserved GPU-hours per week, stacked by cause (all shown teams)."""
    title = "Idle reserved capacity per week by cause (GPU-h)"
    if weekly.empty:
        return empty_figure(title, "no closed reservations in this period")
    w = weekly.groupby("week", as_index=False)[["late_start_gpu_hours", "early_end_gpu_hours",
                                                "never_used_gpu_hours"]].sum()
    fig = _fig(title, barmode="stack", xaxis_title="week (reservation start)", yaxis_title="idle GPU-hours")
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
    fig = _fig(title, barmode="stack", xaxis_title="idle GPU-hours", yaxis_title="team")
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
    fig = _fig(title, xaxis_title="week (reservation start)", yaxis_title="idle share (%)")
    for team, g in weekly.groupby("team", sort=True):
        fig.add_scatter(x=g["week"], y=100 * g["idle_share"], name=team, mode="lines+markers",
                        line=dict(color=_colour(colours, team)))
    return day_axis(fig, weekly["week"], week=True)


# ------------------------------------------------------------------------ estimate accuracy

@shows_text_as_typed
def predicted_vs_actual(points: pd.DataFrame, colours: dict | None = None, band: float = 0.5) -> go.Figure:
    """Log–log scatter of estimated vs actual GPU-hours per run, with y = x and the ±`band` lines
    (actual = (1 ± band) × estimate). Runs whose estimate was only requested are drawn as crosses."""
    title = f"Predicted vs actual GPU-hours per run (GPU-h, log–log; dashed: ±{band:.0%})"
    pts = points[(points["estimated_gpu_hours"] > 0) & (points["actual_gpu_hours"] > 0)] if len(points) else points
    if pts.empty:
        return empty_figure(title, "no finished runs with an estimate in this period")
    fig = _fig(title, xaxis_title="estimated GPU-hours", yaxis_title="actual GPU-hours")
    for (team, requested), g in pts.groupby([pts["team"], pts["estimate_source"] == REQUESTED_LABEL], sort=True):
        fig.add_scatter(x=g["estimated_gpu_hours"], y=g["actual_gpu_hours"], mode="markers",
                        name=f"{team} ({REQUESTED_LABEL})" if requested else team,
                        marker=dict(color=_colour(colours, team), size=6, opacity=0.6,
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
    fig = _fig(title, xaxis_title="day (UTC, end of window)", yaxis_title="actual ÷ estimated")
    for team, g in rolling.groupby("team", sort=True):
        fig.add_scatter(x=g["day"], y=g["median_ratio"], name=team, mode="lines+markers",
                        line=dict(color=_colour(colours, team)), customdata=g["runs"],
                        hovertemplate="%{x}: %{y:.2f} (from %{customdata} runs)<extra>%{fullData.name}</extra>")
    fig.add_hline(y=1.0, line=dict(color="black", width=1, dash="dot"))
    return day_axis(fig, rolling["day"])


@shows_text_as_typed
def error_sources(sources: pd.DataFrame) -> go.Figure:
    """Actual minus estimated GPU-hours per error source and team (positive: underestimated)."""
    title = "Where the error came from: actual − estimated per source (GPU-h; > 0 underestimated)"
    if sources.empty:
        return empty_figure(title, "no finished runs with an itemised estimate in this period")
    fig = _fig(title, barmode="group", xaxis_title="team", yaxis_title="GPU-hours (actual − estimated)")
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
    fig = _fig(title, xaxis_title="team · kind", yaxis_title="factor (× raw estimate)")
    fig.add_bar(x=label, y=cal["factor"], name="median factor", marker_color="#4c78a8",
                customdata=cal["runs"], hovertemplate="%{x}: ×%{y:.2f} from %{customdata} runs<extra></extra>")
    known = cal[cal["upper_factor"].notna()]
    fig.add_scatter(x=known["team"] + " · " + known["kind"], y=known["upper_factor"], mode="markers",
                    name="upper bound factor", marker=dict(symbol="diamond", size=10, color="#e45756"))
    fig.add_hline(y=1.0, line=dict(color="black", width=1, dash="dot"))
    return fig


# ------------------------------------------------------------------------------- stops

@shows_text_as_typed
def stop_reasons(by_reason: pd.DataFrame, colours: dict | None = None) -> go.Figure:
    """Finished runs per stop reason, stacked by team."""
    title = "Runs by stop reason (runs)"
    if by_reason.empty:
        return empty_figure(title, "no runs ended in this period")
    order = by_reason.groupby("stop_reason")["runs"].sum().sort_values(ascending=False).index.tolist()
    fig = _fig(title, barmode="stack", xaxis_title="stop reason", yaxis_title="runs")
    for team, g in by_reason.groupby("team", sort=True):
        fig.add_bar(x=g["stop_reason"], y=g["runs"], name=team, marker_color=_colour(colours, team))
    fig.update_xaxes(categoryorder="array", categoryarray=order)
    return fig


# ------------------------------------------------------------------------------- what-if

@shows_text_as_typed
def estimate_items(estimate: dict) -> go.Figure:
    """The itemised raw estimate (bars) with the raw, calibrated median and upper totals."""
    title = "Estimate by item, raw and calibrated (GPU-h)"
    items = (estimate or {}).get("items_gpu_hours") or {}
    items = {k: v for k, v in items.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    if not items:
        return empty_figure(title, "the decision carries no itemised estimate")
    fig = _fig(title, xaxis_title="GPU-hours", yaxis_title="item", showlegend=True)
    names = list(items)
    fig.add_bar(y=names, x=[items[k] for k in names], orientation="h", name="raw items", marker_color="#4c78a8")
    for key, label, colour in (("raw_gpu_hours", "raw total", "black"),
                               ("median_gpu_hours", "calibrated median", "#f58518"),
                               ("upper_gpu_hours", "calibrated upper bound", "#e45756")):
        v = finite_number(estimate.get(key))
        if v is not None:
            fig.add_vline(x=v, line=dict(color=colour, dash="dash"))
            fig.add_scatter(x=[v], y=[names[-1]], mode="markers", name=f"{label}: {v:.1f}",
                            marker=dict(color=colour, symbol="line-ns-open", size=16, line=dict(width=2)))
    return fig


# ------------------------------------------------------------------------- recovery planner

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
    fig = _fig(title, xaxis_title="checkpoint interval (hours of work between checkpoints, log scale)",
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
    fig = _fig(title, xaxis_title="completion time (hours)", yaxis_title="share of runs", bargap=0.02)
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
    fig = _fig(title, xaxis_title="hours until the run finishes", yaxis_title="choice", showlegend=True)
    fig.add_bar(y=o["option"], x=o["p99"] - o["p50"], base=o["p50"], orientation="h", name="P50 to P99",
                marker_color="#c6dbef", customdata=o["p99"],
                hovertemplate="%{y}: P50 %{base:.3g} h to P99 %{customdata:.3g} h<extra></extra>")
    fig.add_scatter(y=o["option"], x=o["p90"], mode="markers", name="P90",
                    marker=dict(color="#f58518", symbol="line-ns-open", size=18, line=dict(width=3)))
    fig.add_scatter(y=o["option"], x=o["mean"], mode="markers", name="mean",
                    marker=dict(color="#08519c", symbol="diamond", size=10))
    return fig


@shows_text_as_typed
def capacity_calendar(calendar: pd.DataFrame, colours: dict | None = None) -> go.Figure:
    """Accelerators committed per team and day ahead (bars: the peak held that day by admitted,
    unfinished reservations, as the gate counts them) against each team's quota (dashed).
    calendar: lib.dashboard.queries.capacity_calendar (rows of the pooled team are left out)."""
    title = "Committed accelerators per day ahead against quota (GPUs, peak held in the day)"
    teams = calendar[calendar["team"] != ALL_TEAMS] if not calendar.empty else calendar
    if teams.empty:
        return empty_figure(title, "no team policies for these teams")
    fig = _fig(title, barmode="group", xaxis_title="day (UTC)", yaxis_title="GPUs committed")
    for team, g in teams.groupby("team", sort=True):
        c = _colour(colours, team)
        fig.add_bar(x=g["day"], y=g["committed_gpus"], name=team, marker_color=c, legendgroup=team,
                    customdata=g[["quota_gpus", "free_gpus"]].to_numpy(),
                    hovertemplate="%{fullData.name}, %{x|%b %d}: %{y} GPUs committed, quota %{customdata[0]}, "
                                  "free %{customdata[1]}<extra></extra>")
        fig.add_scatter(x=g["day"], y=g["quota_gpus"], name=f"{team} quota", mode="lines", legendgroup=team,
                        line=dict(color=c, dash="dash", shape="hvh"))
    return day_axis(fig, teams["day"])


# ------------------------------------------------------------------------------- forecast

@shows_text_as_typed
def demand_forecast(history: pd.DataFrame, weeks: pd.DataFrame, team: str, colours: dict | None = None) -> go.Figure:
    """One team's weekly GPU-hours: the recent past (bars), the forecast P50 (line) and P90 (band top),
    and the GPU-hours its quota gives in a week (dashed)."""
    title = f"Weekly GPU-hours of {team}: recent weeks and the forecast (GPU-h, P50 line, P90 band)"
    h = history[history["team"] == team]
    w = weeks[weeks["team"] == team]
    if h.empty and w.empty:
        return empty_figure(title, "no history for this team")
    c = _colour(colours, team)
    fig = _fig(title, xaxis_title="week starting (UTC)", yaxis_title="GPU-hours")
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
    fig = _fig(title, xaxis_title="day (UTC)", yaxis_title="GPU-hours spent this month")
    fig.add_scatter(x=p["day"], y=p["p50_gpu_hours"], name="projected P50", mode="lines", line=dict(color="#4c78a8"))
    fig.add_scatter(x=p["day"], y=p["p90_gpu_hours"], name="projected P90", mode="lines", fill="tonexty",
                    line=dict(color="#4c78a8", dash="dot", width=1))
    fig.add_scatter(x=[p["day"].min()], y=[row["consumed_gpu_hours"]], name="spent so far", mode="markers",
                    marker=dict(color="black", size=9))
    fig.add_scatter(x=[p["day"].min(), p["day"].max()], y=[row["budget_gpu_hours"]] * 2, name="monthly budget",
                    mode="lines", line=dict(color="#d62728", width=2))
    return day_axis(fig, p["day"])
