"""The shared frame every page draws first: `frame()` sets the page config, creates the ledger (and,
in local mode or for a planner, the demo history: ui.demo) on first start and draws the sidebar
filters, turning a locked or unreadable ledger into a message. app.py calls it before running the
page; every page script calls it first too, and within one script run it draws once. So a page is
framed the same whether it runs through app.py's st.navigation or on its own — as Streamlit runs a
`pages/` script in its classic multipage mode (see docs/dashboard.md).
"""
from __future__ import annotations

import datetime as dt
from pathlib import Path

import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx

from lib.dashboard.filters import (CUSTOM, DATE_MIN, QUERY_KEYS, RANGE_LABELS, Filters, View, date_max,
                                   default_filters, filters_from_query, query_from_filters, resolve_range)
from lib.gate.terms import CAPACITIES, KINDS
from lib.ledger.connection import keep_reads_open
from ui.access import who, who_box
from ui.data import db_path, ledger_errors, now_minute, cached_sidebar_options
from ui.demo import ensure_demo, ensure_ledger
from ui.pages import PAGE_ICON, tab_title
from ui.text import as_text

_FRAME_RUN = "_frame_run"


def _this_run():
    """An object that lives exactly as long as the current script run (None outside Streamlit)."""
    ctx = get_script_run_ctx()
    return None if ctx is None else ctx.cursors  # a fresh dict at every run's start


def _page_script() -> str | None:
    """The script of the page this run shows (None outside Streamlit). st.navigation registers the
    pages and the one it runs before the frame draws, whether app.py called it or Streamlit's classic
    multipage mode did for a page run on its own."""
    ctx = get_script_run_ctx()
    if ctx is None:
        return None
    page = ctx.pages_manager.get_pages().get(ctx.page_script_hash) or {}
    return page.get("script_path")


def frame() -> Filters:
    """The shared frame, drawn once per script run: page config, the ledger (and the demo history)
    on first start, the sidebar filters; a locked or unreadable ledger shows a message and stops
    the page. Returns the filters. app.py calls it before the page runs, and every page script
    calls it first: a page run through app.py finds it drawn, a page run on its own (Streamlit's
    classic multipage mode, a first request straight to a page URL) draws it itself."""
    run = _this_run()
    if run is not None and st.session_state.get(_FRAME_RUN) is run:
        return filters()
    st.session_state[_FRAME_RUN] = run
    keep_reads_open()   # this run's many reads join one open of the ledger, closed when the run ends
    st.set_page_config(page_title=tab_title(_page_script()), page_icon=PAGE_ICON, layout="wide")
    grant = who()   # a signed-out session, or one without a role, stops here: before any write
    who_box(grant)
    with ledger_errors("Reload the page in a moment."):
        ensure_ledger()
        ensure_demo(grant)
        return filter_widgets()


# ------------------------------------------------------------------------------ the sidebar filters

def filter_widgets() -> Filters:
    """Draw the shared sidebar filters and return them (call it through `frame()`); they persist
    across pages because app.py draws them on every run, outside the page. Stored as
    st.session_state['filters'] for the pages.

    The filters live in the URL too (lib.dashboard.filters.query_from_filters: `teams`, `kinds`,
    `capacity`, `range` or `from` + `to`, only what differs from the default): a session's first run
    sets the widgets from the query string, and every run writes the widgets back to it."""
    opts = cached_sidebar_options()
    sees = who()["sees"]          # None: every team; else a member who sees only their own teams
    if sees is not None:
        opts = {**opts, "teams": [t for t in opts["teams"] if t in sees]}
    today = now_minute().date()   # UTC
    default = default_filters(opts["last_day"], today)
    _keep_filters(opts["teams"])
    _filters_from_url(opts["teams"], default, today)
    sb = st.sidebar
    sb.header("Filters")
    teams = sb.multiselect("Teams", opts["teams"], key="f_teams", placeholder="all teams")
    kinds = sb.multiselect("Kinds", KINDS, key="f_kinds", placeholder="all kinds")
    cap = sb.radio("Capacity type", ["all", *CAPACITIES], key="f_capacity", horizontal=True)
    period = sb.selectbox("Period", list(RANGE_LABELS), key="f_range", format_func=RANGE_LABELS.get)
    if period != CUSTOM:
        st.session_state["f_dates"] = resolve_range(period, today)
    elif "f_dates" not in st.session_state:
        st.session_state["f_dates"] = (default.date_from, default.date_to)
    dates = sb.date_input("Dates (UTC, inclusive)", key="f_dates", min_value=DATE_MIN, max_value=date_max(today),
                          disabled=period != CUSTOM,
                          help=f"By default the {default.days} days up to the ledger's last day with data "
                               "(today when that is later). A period other than Custom dates ends today (UTC).")
    if isinstance(dates, (tuple, list)):
        start = dates[0] if len(dates) else default.date_from
        end = dates[1] if len(dates) > 1 else start
    else:
        start = end = dates
    if sees is not None and not teams:   # "all teams" is all of theirs ("" matches none when none is left)
        teams = opts["teams"] or [""]
    f = Filters(date_from=start, date_to=end, teams=tuple(teams), kinds=tuple(kinds),
                capacity=None if cap == "all" else cap)
    sb.caption(as_text(f"Ledger: {Path(db_path()).name} · {opts['runs']:,} runs"))
    st.session_state["filters"] = f
    st.session_state["all_teams"] = opts["teams"]
    _filters_to_url(View(f, period), default)
    return f


_URL_READ, _URL_NOTES = "_f_url_read", "_f_url_notes"


def _filters_from_url(teams: list[str], default: Filters, today: dt.date) -> None:
    """On a session's first run (a link opened, a page reloaded), set the filter widgets from the
    URL's query parameters; what the link asks for and cannot be had is kept as notes, shown by
    `_filters_to_url` while the filters stay as the link set them."""
    if st.session_state.get(_URL_READ):
        return
    st.session_state[_URL_READ] = True
    query = {k: st.query_params.get_all(k) for k in QUERY_KEYS if k in st.query_params}
    if not query:
        return
    view = filters_from_query(query, teams=teams, default=default, today=today)
    f = view.filters
    st.session_state.update(f_teams=list(f.teams), f_kinds=list(f.kinds), f_capacity=f.capacity or "all",
                            f_range=view.range, f_dates=(f.date_from, f.date_to))
    st.session_state[_URL_NOTES] = view


def _filters_to_url(view: View, default: Filters) -> None:
    """Write the filters to the URL's query string (only what differs from the default; parameters
    of others stay), on every run: Streamlit clears the query string when st.navigation switches
    pages, and the frame draws on every run, so the link always shows the view. Shows the notes of
    the link that opened the session while its filters are unchanged."""
    want = query_from_filters(view, default)
    have = {k: st.query_params.get_all(k) for k in QUERY_KEYS if k in st.query_params}
    if want != have:   # only these keys: another parameter may be bound to a widget, and stays as it is
        for key in have.keys() - want.keys():
            del st.query_params[key]
        if want:
            st.query_params.update(want)
    opened = st.session_state.get(_URL_NOTES)
    if opened is not None and opened.notes and opened == view:
        st.warning("  \n".join(["Part of this link's filters could not be used:",
                                *(as_text(n) for n in opened.notes)]))


FILTER_KEYS = ("f_teams", "f_kinds", "f_capacity", "f_range", "f_dates")


def _keep_filters(teams: list[str]) -> None:
    """Keep the filter values across page switches. A widget's identity includes the script that
    draws it: drawn by app.py a filter is the same widget on every page, but drawn by a page running
    on its own (classic multipage mode, AppTest.switch_page) it is a new widget on each page, and
    Streamlit would forget its value. Writing the value back as session state before the widget is
    drawn keeps it (Streamlit's documented way to carry widget values across pages)."""
    for key in FILTER_KEYS:
        if key in st.session_state:
            value = st.session_state[key]
            if key == "f_teams":
                value = [t for t in value if t in teams]
            st.session_state[key] = value


def filters() -> Filters:
    """The filters the frame drew for this run."""
    f = st.session_state.get("filters")
    if f is None:  # the frame stopped before the filters (never on a readable ledger)
        f = default_filters(cached_sidebar_options()["last_day"])
    return f
