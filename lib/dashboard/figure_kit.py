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


def _linear(channel: float) -> float:
    return channel / 12.92 if channel <= 0.04045 else ((channel + 0.055) / 1.055) ** 2.4


def lab(colour: str) -> tuple[float, float, float]:
    """CIE L*a*b* (D65) of an sRGB "#rrggbb"."""
    r, g, b = (_linear(int(colour[i:i + 2], 16) / 255) for i in (1, 3, 5))
    xyz = (0.4124564 * r + 0.3575761 * g + 0.1804375 * b) / 0.95047, \
        0.2126729 * r + 0.7151522 * g + 0.0721750 * b, (0.0193339 * r + 0.1191920 * g + 0.9503041 * b) / 1.08883
    fx, fy, fz = (t ** (1 / 3) if t > 216 / 24389 else (24389 / 27 * t + 16) / 116 for t in xyz)
    return 116 * fy - 16, 500 * (fx - fy), 200 * (fy - fz)


def _hex_of_lch(lightness: float, chroma: float, hue_deg: float) -> str | None:
    """sRGB "#rrggbb" of a CIE LCh(ab) colour, None when it lies outside sRGB."""
    a, b = chroma * math.cos(math.radians(hue_deg)), chroma * math.sin(math.radians(hue_deg))
    fy = (lightness + 16) / 116
    fx, fz = fy + a / 500, fy - b / 200
    x, y, z = (f ** 3 if f ** 3 > 216 / 24389 else (116 * f - 16) * 27 / 24389 for f in (fx, fy, fz))
    x, z = x * 0.95047, z * 1.08883
    rgb = (3.2404542 * x - 1.5371385 * y - 0.4985314 * z, -0.9692660 * x + 1.8760108 * y + 0.0415560 * z,
           0.0556434 * x - 0.2040259 * y + 1.0572252 * z)
    if any(v < -1e-9 or v > 1 + 1e-9 for v in rgb):
        return None
    srgb = (12.92 * v if v <= 0.0031308 else 1.055 * v ** (1 / 2.4) - 0.055 for v in rgb)
    return "#" + "".join(f"{min(255, max(0, round(v * 255))):02x}" for v in srgb)


def ciede2000(lab1, lab2) -> float:
    """The CIEDE2000 colour difference of two CIE L*a*b* colours (Sharma, Wu and Dalal, 2005)."""
    (l1, a1, b1), (l2, a2, b2) = lab1, lab2
    c_mean = (math.hypot(a1, b1) + math.hypot(a2, b2)) / 2
    g = 0.5 * (1 - math.sqrt(c_mean ** 7 / (c_mean ** 7 + 25 ** 7)))
    a1p, a2p = a1 * (1 + g), a2 * (1 + g)
    c1p, c2p = math.hypot(a1p, b1), math.hypot(a2p, b2)
    h1p = math.degrees(math.atan2(b1, a1p)) % 360 if c1p else 0.0
    h2p = math.degrees(math.atan2(b2, a2p)) % 360 if c2p else 0.0
    dl, dc = l2 - l1, c2p - c1p
    dh = 0.0 if not c1p * c2p else (h2p - h1p if abs(h2p - h1p) <= 180 else
                                    h2p - h1p - 360 if h2p > h1p else h2p - h1p + 360)
    dh_big = 2 * math.sqrt(c1p * c2p) * math.sin(math.radians(dh / 2))
    l_mean, cp_mean = (l1 + l2) / 2, (c1p + c2p) / 2
    if not c1p * c2p:
        h_mean = h1p + h2p
    elif abs(h1p - h2p) <= 180:
        h_mean = (h1p + h2p) / 2
    else:
        h_mean = (h1p + h2p + 360) / 2 if h1p + h2p < 360 else (h1p + h2p - 360) / 2
    t = (1 - 0.17 * math.cos(math.radians(h_mean - 30)) + 0.24 * math.cos(math.radians(2 * h_mean))
         + 0.32 * math.cos(math.radians(3 * h_mean + 6)) - 0.20 * math.cos(math.radians(4 * h_mean - 63)))
    sl = 1 + 0.015 * (l_mean - 50) ** 2 / math.sqrt(20 + (l_mean - 50) ** 2)
    sc, sh = 1 + 0.045 * cp_mean, 1 + 0.015 * cp_mean * t
    rt = (-2 * math.sqrt(cp_mean ** 7 / (cp_mean ** 7 + 25 ** 7))
          * math.sin(math.radians(60 * math.exp(-(((h_mean - 275) / 25) ** 2)))))
    return math.sqrt((dl / sl) ** 2 + (dc / sc) ** 2 + (dh_big / sh) ** 2 + rt * (dc / sc) * (dh_big / sh))


def colour_distance(one: str, other: str) -> float:
    """CIEDE2000 difference of two "#rrggbb" colours: how far apart a reader sees them."""
    return ciede2000(lab(one), lab(other))


@functools.lru_cache(maxsize=1024)
def _candidates(team: str) -> tuple[tuple[str, tuple], ...]:
    """The CANDIDATES colours a team's name proposes, in its own order, with their L*a*b*:
    SHA-256(name, i) read as LCh, those outside sRGB skipped."""
    found = []
    for i in range(CANDIDATES * 8):   # about half fall outside sRGB
        d = hashlib.sha256(f"{team}\x00{i}".encode("utf-8")).digest()
        hue, light, chroma = (int.from_bytes(d[k:k + 4], "big") / 2 ** 32 for k in (0, 4, 8))
        colour = _hex_of_lch(40 + 32 * light, 35 + 40 * chroma, 360 * hue)
        if colour is not None:
            found.append((colour, lab(colour)))
            if len(found) == CANDIDATES:
                break
    return tuple(found)


def _is_colour(value) -> bool:
    return isinstance(value, str) and len(value) == 7 and value[0] == "#" and all(
        ch in "0123456789abcdefABCDEF" for ch in value[1:])


def hashed_colour(team: str, avoid=()) -> str:
    """The colour a team name proposes that stands apart (MIN_DISTANCE, CIEDE2000) from every colour
    in `avoid` and from black and grey: the first of its candidates that does, else the one farthest
    from them. It depends only on the name and `avoid` (SHA-256: the same in every process)."""
    away = [lab(c) for c in (*REFERENCE_COLOURS, *avoid) if _is_colour(c)]
    best, best_gap = None, -1.0
    for colour, here in _candidates(str(team)):
        gap = min(ciede2000(here, a) for a in away)
        if gap >= MIN_DISTANCE:
            return colour
        if gap > best_gap:
            best, best_gap = colour, gap
    return best


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
