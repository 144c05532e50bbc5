"""User text in a Plotly figure, shown as typed.

User text (team names, run IDs, reason codes, labels) is shown as typed: plotly.js renders a subset
of HTML in trace names, legends, category labels, hover text, annotations and titles (`<b>`, `<br>`,
`<a href>` as a live link, …). Every public builder is wrapped in `@shows_text_as_typed`, which
HTML-escapes every string the finished figure will display, in one pass (plotly.js turns the
entities back into the characters typed). Builders therefore put raw text in and must not embed user
text in a hovertemplate (use `%{text}`, `%{x}`, `%{fullData.name}` instead). After the escape, a long
title or axis title is broken into lines with our own `<br>` between words (plotly.js never wraps),
the one piece of markup a figure carries.
"""
from __future__ import annotations

import functools
import html

import numpy as np
import plotly.graph_objects as go

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
        if prop not in obj:   # asked for, a missing property costs plotly a "did you mean" search
            continue
        value = obj[prop]
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
    _break_lines(layout.title, TITLE_LINE_CHARS)
    _escape_props(layout.legend.title, ("text",))
    for axis in [*fig.select_xaxes(), *fig.select_yaxes()]:
        _escape_props(axis, ("categoryarray", "ticktext"))
        _escape_props(axis.title, ("text",))
        _break_lines(axis.title, AXIS_TITLE_LINE_CHARS)
    for ann in layout.annotations:
        _escape_props(ann, ("text", "hovertext"))
    for shape in layout.shapes:
        _escape_props(shape, ("name",))
    setattr(fig, _ESCAPED, True)
    return fig


# A chart beside the sidebar on an 800 px screen is about 450 px wide: plotly.js never wraps a title,
# so a longer one is cut. Titles and axis titles are broken into lines of at most these many characters.
TITLE_LINE_CHARS, AXIS_TITLE_LINE_CHARS = 48, 40
LINE_BREAK = "<br>"   # the only markup a figure carries: ours, between words of escaped text


def lines_of(text: str, width: int) -> list[str]:
    """`text` (already escaped) in lines of at most `width` characters as read (an entity counts as
    the one character it shows), broken at spaces only, so never inside an entity; a longer word
    keeps a line of its own."""
    lines, line, seen = [], [], 0
    for word in text.split(" "):
        n = len(html.unescape(word))
        if line and seen + 1 + n > width:
            lines.append(" ".join(line))
            line, seen = [], 0
        seen += n + (1 if line else 0)
        line.append(word)
    return [*lines, " ".join(line)]


def _break_lines(title, width: int) -> None:
    """Put a (layout or axis) title's escaped text on lines of at most `width` characters: our own
    `<br>` between words, after the escape, so user text in it still shows as typed."""
    text = title.text
    if isinstance(text, str) and len(text) > width and LINE_BREAK not in text:
        title.text = LINE_BREAK.join(lines_of(text, width))


def shows_text_as_typed(builder):
    """Decorator for every public figure builder: its figure shows user text as typed."""
    @functools.wraps(builder)
    def build(*args, **kwargs) -> go.Figure:
        return escape_figure_text(builder(*args, **kwargs))
    build.shows_text_as_typed = True
    return build
