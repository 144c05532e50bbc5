"""The dashboard's Streamlit helpers: cached page data, the shared filters, downloads, imports.

This is the only module besides app.py and app_pages/ that imports Streamlit; lib/ never does.

Caching: query results are cached with st.cache_data, keyed by the ledger path, a data version
and the filters. The data version is the (mtime, size) of the ledger file and its WAL: any write by
any process (an import, `python -m lib submit`, a finish) changes it, so a page never shows stale
data, and reading it costs a stat(), not a DuckDB open. Caches are also cleared after an import.
No DuckDB handle is ever cached: every query function opens, reads and closes.
"""
from __future__ import annotations

import contextlib
import datetime as dt
import inspect
import os
import threading
from pathlib import Path

import pandas as pd
import streamlit as st

from lib.dashboard import figures

from lib.dashboard import queries
from lib.dashboard.filters import Filters, default_filters
from lib.ledger.connection import LedgerError, LedgerLocked, NotALedger, ledger_path, open_ledger
from lib.dashboard.tables import escape_markdown, safe_csv_bytes

CACHE_TTL_S = 600
_DEMO_LOCK = threading.Lock()


def db_path() -> str:
    """The ledger file the app reads: $GATE_DB, else data/gate.duckdb (lib.ledger.connection.ledger_path)."""
    return str(ledger_path())


def data_version(path: str | None = None) -> tuple:
    """A cheap token that changes whenever the ledger file (or its WAL) is written."""
    p = Path(path or db_path())
    out = []
    for f in (p, p.with_name(p.name + ".wal")):
        try:
            s = f.stat()
            out.append((s.st_mtime_ns, s.st_size))
        except FileNotFoundError:
            out.append(None)
    return tuple(out)


def now_minute() -> dt.datetime:
    """Now (UTC, naive) to the minute: part of cache keys, so results refresh at least each minute."""
    return dt.datetime.now(dt.timezone.utc).replace(tzinfo=None, second=0, microsecond=0)


@contextlib.contextmanager
def ledger_errors(retry: str = "Try again in a moment."):
    """Turn a locked, unreadable or wrong ledger into a message on the page (and stop the page
    there): never a traceback."""
    try:
        yield
    except LedgerLocked as exc:
        st.error(f"The ledger is busy: {escape_markdown(exc)}. {retry}")
        st.stop()
    except NotALedger as exc:
        st.error(f"The ledger cannot be read: {escape_markdown(exc)}. Point `GATE_DB` at a Training "
                 "Gate ledger (or unset it for `data/gate.duckdb`) and restart the app.")
        st.stop()
    except LedgerError as exc:
        st.error(f"The ledger cannot be read: {escape_markdown(exc)}")
        st.stop()


@st.cache_data(ttl=CACHE_TTL_S, show_spinner=False, max_entries=256)
def _page_data(name: str, path: str, version: tuple, filters: Filters, now: dt.datetime):
    return getattr(queries, name)(filters, path, now)


@st.cache_data(ttl=CACHE_TTL_S, show_spinner=False, max_entries=16)
def _sidebar_options(path: str, version: tuple) -> dict:
    return queries.sidebar_options(path)


def page_data(name: str, filters: Filters):
    """The cached result of lib.dashboard.queries.<name>(filters) for the current ledger."""
    return PageData(name, filters).data


@st.cache_resource(ttl=CACHE_TTL_S, show_spinner=False, max_entries=256)
def _figure(builder: str, page: str, keys: tuple, path: str, version: tuple, filters: Filters,
            now: dt.datetime, teams: tuple, options: tuple):
    # A plotly Figure costs 30-60 ms to build and as much to unpickle, so figures are cached as
    # objects (st.cache_resource, never copied). Nothing mutates them: st.plotly_chart only reads.
    data = _page_data(page, path, version, filters, now)
    fn = getattr(figures, builder)
    kwargs = dict(options)
    if "colours" in inspect.signature(fn).parameters:
        kwargs["colours"] = figures.team_colours(teams)
    return fn(*(data[k] for k in keys), **kwargs)


class PageData:
    """One page's data for one run: cached query results (`.data`) and cached charts (`.chart`).

    On a locked or unreadable ledger it shows an error box and stops the page."""

    def __init__(self, name: str, filters: Filters, *, hourly: bool = False):
        self.name, self.filters = name, filters
        self.path = db_path()
        self.version = data_version(self.path)
        self.now = now_minute()
        if hourly:  # for results that move slowly with time (the calibration's 365-day window)
            self.now = self.now.replace(minute=0)
        with ledger_errors("Reload the page in a moment."):
            self.data = _page_data(name, self.path, self.version, filters, self.now)

    def __getitem__(self, key):
        return self.data[key]

    def chart(self, builder: str, *keys: str, **options) -> None:
        """Draw lib.dashboard.figures.<builder>(data[key], ...) (team colours added when it takes them)."""
        with ledger_errors("Reload the page in a moment."):
            fig = _figure(builder, self.name, keys, self.path, self.version, self.filters, self.now,
                          tuple(all_teams()), tuple(sorted(options.items())))
        st.plotly_chart(fig, width="stretch")


def sidebar_options() -> dict:
    """Teams, run count and last day for the filters; a locked or unreadable ledger stops the page
    with a message."""
    path = db_path()
    with ledger_errors("Reload the page in a moment."):
        return _sidebar_options(path, data_version(path))


def clear_caches() -> None:
    """Forget every cached query result (after an import, so every page shows the new data)."""
    _page_data.clear()
    _sidebar_options.clear()
    _figure.clear()


def ledger_is_empty() -> bool:
    return sidebar_options()["runs"] == 0


# --------------------------------------------------------------------------------- filters

def filter_widgets() -> Filters:
    """Draw the shared sidebar filters and return them; they persist across pages because app.py
    draws them on every run. Stored as st.session_state['filters'] for the pages."""
    opts = sidebar_options()
    default = default_filters(opts["last_day"])
    sb = st.sidebar
    sb.header("Filters")
    teams = sb.multiselect("Teams", opts["teams"], key="f_teams", placeholder="all teams")
    kinds = sb.multiselect("Kinds", ["exploratory", "production", "retraining"], key="f_kinds",
                           placeholder="all kinds")
    cap = sb.radio("Capacity type", ["all", "stable", "preemptible"], key="f_capacity", horizontal=True)
    if "f_dates" not in st.session_state:
        st.session_state["f_dates"] = (default.date_from, default.date_to)
    today = dt.date.today()
    dates = sb.date_input("Dates (UTC, inclusive)", key="f_dates", min_value=dt.date(2000, 1, 1),
                          max_value=dt.date(today.year + 2, 12, 31))
    if isinstance(dates, (tuple, list)):
        start = dates[0] if len(dates) else default.date_from
        end = dates[1] if len(dates) > 1 else start
    else:
        start = end = dates
    f = Filters(date_from=start, date_to=end, teams=tuple(teams), kinds=tuple(kinds),
                capacity=None if cap == "all" else cap)
    sb.caption(escape_markdown(f"Ledger: {Path(db_path()).name} · {opts['runs']:,} runs"))
    st.session_state["filters"] = f
    st.session_state["all_teams"] = opts["teams"]
    return f


def filters() -> Filters:
    """The filters app.py drew for this run."""
    f = st.session_state.get("filters")
    if f is None:  # a page run on its own (never through app.py)
        f = default_filters(sidebar_options()["last_day"])
    return f


def all_teams() -> list[str]:
    return st.session_state.get("all_teams") or sidebar_options()["teams"]


# ------------------------------------------------------------------------------ output

def download(df: pd.DataFrame, name: str, key: str, label: str = "Download CSV") -> None:
    """A CSV download of the table, formula-like cells neutralised."""
    st.download_button(label, safe_csv_bytes(df), file_name=f"{name}.csv", mime="text/csv", key=key,
                       disabled=df.empty)


def table(df: pd.DataFrame, name: str, key: str, *, empty: str, caption: str | None = None) -> None:
    """A data table (cells shown as text, never markup) with its CSV download, or an empty-state
    message saying what to do."""
    if df.empty:
        st.info(empty)
        return
    st.dataframe(df, hide_index=True, width="stretch")
    if caption:
        st.caption(caption)
    download(df, name, key)


def caption(text: str) -> None:
    """A caption whose text (possibly user data) shows as typed, never as markup."""
    st.caption(escape_markdown(text))


def chart(fig) -> None:
    st.plotly_chart(fig, width="stretch")


# ------------------------------------------------------------------------------ demo

def ensure_ledger() -> None:
    """On first start, create the app's ledger ($GATE_DB, else data/gate.duckdb) when it does not
    exist yet, so every page reads an empty ledger rather than an error."""
    if not os.path.lexists(db_path()):
        with open_ledger(db_path()):
            pass


def ensure_demo() -> None:
    """On first start with an empty ledger, build the demo history (unless GATE_DEMO=0), showing
    progress. One build per process even when several sessions start at once."""
    if os.environ.get("GATE_DEMO", "1") == "0" or not ledger_is_empty():
        return
    from lib.ledger.demo import ensure_demo_history
    with _DEMO_LOCK:
        clear_caches()
        if not ledger_is_empty():
            return
        with st.status("The ledger is empty: building demo history…", expanded=True) as status:
            bar = st.progress(0.0, text="starting")

            def progress(fraction, message=""):
                bar.progress(min(max(float(fraction), 0.0), 1.0), text=str(message))

            built = ensure_demo_history(db_path(), progress=progress)
            status.update(label="Demo history built" if built else "Ledger already has history",
                          state="complete", expanded=False)
        clear_caches()


def import_progress(bar):
    """An import_runs progress callback drawing into a st.progress bar."""
    def progress(fraction, message=""):
        bar.progress(min(max(float(fraction), 0.0), 1.0), text=str(message))
    return progress
