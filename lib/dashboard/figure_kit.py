"""What every dashboard chart is built from: one colour per team for ever, the common layout, date and
log axes that label their ticks as people read them, and the figure that says there is nothing to draw.

A team keeps one colour on every page: `team_colours(teams, explicit)` takes a team's colour from
`explicit` (e.g. data/teams.toml) when set, else from a SHA-256 of its name, at a perceptual distance
(CIEDE2000) from every set colour and from the other teams' — never from its position in the team list
or a filter, so only a new team that would otherwise look nearly the same can repaint one without a
set colour.

The charts themselves live with the page they serve: `reservation_figures` (Overview, Reservations),
`idle_figures`, `estimate_figures` (Estimate accuracy, What-if), `recovery_figures`, `forecast_figures`,
`stop_figures`. Each builder takes DataFrames and returns a go.Figure, nothing else; every title
names its unit; user text is shown as typed (`figure_text`).
"""
from __future__ import annotations

import functools
import hashlib
import math

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from lib.dashboard.figure_text import shows_text_as_typed

# Beside the sidebar on an 800 px screen a chart is about 450 px wide. The legend sits in rows at the
# bottom rather than in a column at the right, which would take half of that width; the title (on two
# lines when long: figure_text) sits at the top and pushes the plot down as far as it needs.
_LAYOUT = dict(template="plotly_white", margin=dict(l=10, r=10, t=60, b=10), hovermode="closest",
               legend=dict(title_text="", orientation="h", yref="container", y=0, yanchor="bottom", x=0,
                           xanchor="left"))
_TITLE = dict(automargin=True, yref="container", y=1, yanchor="top", pad=dict(t=14))

# ------------------------------------------------------------------------------------- team colours
# A team without a set colour gets one from its name: candidates drawn from SHA-256(name, i) in CIE
# LCh (lightness 40-72 and chroma 35-75: readable on white, never a grey), and the first that lies at
# least MIN_DISTANCE (CIEDE2000) from every colour it must stand apart from is taken. MIN_DISTANCE is
# how far apart the set colours of data/teams.toml (Paul Tol's "muted") are from each other at the
# least; a name drawn from the old 14-colour palette could land at 8.6 from one of them. Around 20
# teams fill the readable colours at that distance: then a team takes the farthest candidate.
MIN_DISTANCE = 15.0          # CIEDE2000 ΔE; about 2 is a just-noticeable difference
CANDIDATES = 96              # tried per team; none far enough: the farthest of them
REFERENCE_COLOURS = ("#000000", "#7f7f7f")   # totals and reference lines in the charts


_WHITE = np.array([0.95047, 1.0, 1.08883])   # D65
_RGB_TO_XYZ = np.array([[0.4124564, 0.3575761, 0.1804375], [0.2126729, 0.7151522, 0.0721750],
                        [0.0193339, 0.1191920, 0.9503041]])
_XYZ_TO_RGB = np.array([[3.2404542, -1.5371385, -0.4985314], [-0.9692660, 1.8760108, 0.0415560],
                        [0.0556434, -0.2040259, 1.0572252]])
_EPSILON, _KAPPA = 216 / 24389, 24389 / 27


def _labs(srgb: np.ndarray) -> np.ndarray:
    """CIE L*a*b* (D65) of sRGB colours (rows of r, g, b in 0..1)."""
    linear = np.where(srgb <= 0.04045, srgb / 12.92, ((srgb + 0.055) / 1.055) ** 2.4)
    t = linear @ _RGB_TO_XYZ.T / _WHITE
    f = np.where(t > _EPSILON, np.cbrt(t), (_KAPPA * t + 16) / 116)
    return np.stack([116 * f[:, 1] - 16, 500 * (f[:, 0] - f[:, 1]), 200 * (f[:, 1] - f[:, 2])], axis=1)


@functools.lru_cache(maxsize=4096)
def lab(colour: str) -> tuple[float, float, float]:
    """CIE L*a*b* (D65) of an sRGB "#rrggbb"."""
    return tuple(float(v) for v in _labs(np.array([[int(colour[i:i + 2], 16) / 255 for i in (1, 3, 5)]]))[0])


def _srgb_of_lch(lch: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sRGB rows in 0..1, which lie inside sRGB) of CIE LCh(ab) colours (rows of L*, C*, hue in degrees)."""
    lightness, chroma, hue = lch.T
    fy = (lightness + 16) / 116
    f = np.stack([fy + chroma * np.cos(np.radians(hue)) / 500, fy, fy - chroma * np.sin(np.radians(hue)) / 200], axis=1)
    xyz = np.where(f ** 3 > _EPSILON, f ** 3, (116 * f - 16) / _KAPPA) * _WHITE
    linear = xyz @ _XYZ_TO_RGB.T
    inside = np.all((linear >= -1e-9) & (linear <= 1 + 1e-9), axis=1)
    linear = np.clip(linear, 0.0, 1.0)
    return np.where(linear <= 0.0031308, 12.92 * linear, 1.055 * linear ** (1 / 2.4) - 0.055), inside


def ciede2000(lab1, lab2):
    """The CIEDE2000 colour difference of CIE L*a*b* colours (Sharma, Wu and Dalal, 2005): two
    triples give a float; arrays of triples (last axis L*, a*, b*) broadcast to an array."""
    lab1, lab2 = np.asarray(lab1, dtype=float), np.asarray(lab2, dtype=float)
    (l1, a1, b1), (l2, a2, b2) = np.moveaxis(lab1, -1, 0), np.moveaxis(lab2, -1, 0)
    c_mean = (np.hypot(a1, b1) + np.hypot(a2, b2)) / 2
    g = 0.5 * (1 - np.sqrt(c_mean ** 7 / (c_mean ** 7 + 25.0 ** 7)))
    a1p, a2p = a1 * (1 + g), a2 * (1 + g)
    c1p, c2p = np.hypot(a1p, b1), np.hypot(a2p, b2)
    h1p, h2p = np.degrees(np.arctan2(b1, a1p)) % 360, np.degrees(np.arctan2(b2, a2p)) % 360
    chromatic = c1p * c2p != 0
    diff = h2p - h1p
    dh = np.where(~chromatic, 0.0, np.where(np.abs(diff) <= 180, diff, np.where(diff > 180, diff - 360, diff + 360)))
    dh_big = 2 * np.sqrt(c1p * c2p) * np.sin(np.radians(dh / 2))
    l_mean, cp_mean, h_sum = (l1 + l2) / 2, (c1p + c2p) / 2, h1p + h2p
    h_mean = np.where(~chromatic, h_sum, np.where(np.abs(h1p - h2p) <= 180, h_sum / 2,
                                                  np.where(h_sum < 360, (h_sum + 360) / 2, (h_sum - 360) / 2)))
    t = (1 - 0.17 * np.cos(np.radians(h_mean - 30)) + 0.24 * np.cos(np.radians(2 * h_mean))
         + 0.32 * np.cos(np.radians(3 * h_mean + 6)) - 0.20 * np.cos(np.radians(4 * h_mean - 63)))
    sl = 1 + 0.015 * (l_mean - 50) ** 2 / np.sqrt(20 + (l_mean - 50) ** 2)
    sc, sh = 1 + 0.045 * cp_mean, 1 + 0.015 * cp_mean * t
    rt = (-2 * np.sqrt(cp_mean ** 7 / (cp_mean ** 7 + 25.0 ** 7))
          * np.sin(np.radians(60 * np.exp(-(((h_mean - 275) / 25) ** 2)))))
    dl, dc = (l2 - l1) / sl, (c2p - c1p) / sc
    dh_big = dh_big / sh
    out = np.sqrt(dl ** 2 + dc ** 2 + dh_big ** 2 + rt * dc * dh_big)
    return float(out) if out.ndim == 0 else out


def colour_distance(one: str, other: str) -> float:
    """CIEDE2000 difference of two "#rrggbb" colours: how far apart a reader sees them."""
    return ciede2000(lab(one), lab(other))


@functools.lru_cache(maxsize=1024)
def _candidates(team: str) -> tuple[tuple[str, ...], np.ndarray]:
    """The CANDIDATES colours a team's name proposes, in its own order, and their L*a*b*:
    SHA-256(name, i) read as LCh, those outside sRGB skipped."""
    digests = b"".join(hashlib.sha256(f"{team}\x00{i}".encode("utf-8")).digest() for i in range(CANDIDATES * 2))
    # each digest: 8 big-endian 32-bit words, two candidates of (hue, lightness, chroma) and 2 spare
    u = np.frombuffer(digests, dtype=">u4").reshape(-1, 8)[:, :6].reshape(-1, 3) / 2 ** 32
    srgb, inside = _srgb_of_lch(np.stack([40 + 32 * u[:, 1], 35 + 40 * u[:, 2], 360 * u[:, 0]], axis=1))
    levels = np.round(srgb[inside][:CANDIDATES] * 255).astype(int)   # about half fall outside sRGB
    colours = tuple("#" + "".join(f"{v:02x}" for v in row) for row in levels)
    return colours, _labs(levels / 255)


def _is_colour(value) -> bool:
    return isinstance(value, str) and len(value) == 7 and value[0] == "#" and all(
        ch in "0123456789abcdefABCDEF" for ch in value[1:])


def hashed_colour(team: str, avoid=()) -> str:
    """The colour a team name proposes that stands apart (MIN_DISTANCE, CIEDE2000) from every colour
    in `avoid` and from black and grey: the first of its candidates that does, else the one farthest
    from them. It depends only on the name and `avoid` (SHA-256: the same in every process)."""
    away = np.array([lab(c) for c in (*REFERENCE_COLOURS, *avoid) if _is_colour(c)])
    colours, labs = _candidates(str(team))
    gaps = np.empty(0)
    for start in range(0, len(colours), 16):   # most names find one among their first few
        gaps = np.concatenate([gaps, ciede2000(labs[start:start + 16, None, :], away[None, :, :]).min(axis=1)])
        far = np.flatnonzero(gaps >= MIN_DISTANCE)
        if len(far):
            return colours[far[0]]
    return colours[int(np.argmax(gaps))]


def team_colours(teams, explicit: dict | None = None) -> dict[str, str]:
    """A colour per team: `explicit[team]` when set (e.g. in data/teams.toml), else `hashed_colour`,
    kept apart from every set colour and from the hashed colours of the teams before it in name order.
    Pass every team of the ledger (not only those shown) so that filtering repaints none. A set colour
    never changes with other teams; a hashed one only when a new team without a set colour, earlier
    in name order, would otherwise look nearly the same (set a colour to pin a team's)."""
    names = tuple(sorted(set(teams)))
    set_colours = tuple(sorted((t, c) for t, c in (explicit or {}).items() if c))
    return dict(zip(names, _assigned(names, set_colours)))


@functools.lru_cache(maxsize=64)
def _assigned(names: tuple, set_colours: tuple) -> tuple:
    """team_colours' colours for sorted `names`, given the (team, colour) pairs set."""
    explicit = dict(set_colours)
    colours = {t: explicit[t] for t in names if t in explicit}
    taken = list(explicit.values())   # a set colour of a team not shown is still taken
    for t in names:
        if t not in colours:
            colours[t] = hashed_colour(t, taken)
            taken.append(colours[t])
    return tuple(colours[t] for t in names)


def team_colour(colours: dict | None, team: str) -> str:
    """`colours[team]` when the page passed one, else the colour the team's name hashes to."""
    return (colours or {}).get(team) or team_colours([team])[team]


def titled_figure(title: str, **layout) -> go.Figure:
    """An empty figure with `title` and the common layout (`layout` overrides it)."""
    fig = go.Figure()
    fig.update_layout(title=dict(text=title, **_TITLE), **{**_LAYOUT, **layout})
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
