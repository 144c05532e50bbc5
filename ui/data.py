"""Cached page data and figures: what a page reads from the ledger, and how a locked or unreadable
ledger becomes a message (`ledger_errors`) rather than a traceback.

Pages reach queries and figures by reference: `PageData(overview_queries.overview, f)` and
`data.chart(reservation_figures.reserved_vs_used, "daily")`; cache keys use the function's qualified
name (module and name, so two functions never share one).

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
from pathlib import Path
from typing import Callable

import duckdb
import streamlit as st

from lib.dashboard import figure_kit, settings, sidebar_queries
from lib.dashboard.filters import Filters
from lib.ledger.connection import LedgerError, LedgerLocked, NotALedger, ledger_path
from ui.text import as_text

CACHE_TTL_S = 600


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
    there): never a traceback. Any DuckDB error is one too: a damaged block fails only the read
    that reaches it, possibly in lib code beyond the read models (the what-if check, the replay)."""
    try:
        yield
    except LedgerLocked as exc:
        st.error(f"The ledger is busy: {as_text(exc)}. {retry}")
        st.stop()
    except NotALedger as exc:
        st.error(f"The ledger cannot be read: {as_text(exc)}. Point `GATE_DB` at a Training "
                 "Gate ledger (or unset it for `data/gate.duckdb`) and restart the app.")
        st.stop()
    except (LedgerError, duckdb.Error) as exc:
        st.error(f"The ledger cannot be read: {as_text(exc)}")
        st.stop()


def qualified_name(fn: Callable) -> str:
    """`module.qualname` of a query or figure function: the part of a cache key that names it."""
    return f"{fn.__module__}.{fn.__qualname__}"


@st.cache_data(ttl=CACHE_TTL_S, show_spinner=False, max_entries=256)
def _page_data(name: str, _query: Callable, path: str, version: tuple, filters: Filters, now: dt.datetime):
    # `name` (the query's qualified name) is the key; `_query` itself is not hashed
    return _query(filters, path, now)


@st.cache_data(ttl=CACHE_TTL_S, show_spinner=False, max_entries=16)
def _sidebar_options(path: str, version: tuple) -> dict:
    return sidebar_queries.sidebar_options(path)


@st.cache_data(ttl=CACHE_TTL_S, show_spinner=False, max_entries=16)
def _set_colours(path: str, version: tuple) -> dict:
    return settings.colours(path)


def set_colours() -> tuple:
    """The team colours data/teams.toml sets, as the ledger holds them: sorted (team, "#rrggbb")
    pairs (a cache key for figures); teams without one get a colour apart from them
    (figure_kit.team_colours)."""
    path = db_path()
    with ledger_errors("Reload the page in a moment."):
        return tuple(sorted(_set_colours(path, data_version(path)).items()))


def page_data(query: Callable, filters: Filters):
    """The cached result of `query(filters, path, now)` (a page query of lib.dashboard) for the
    current ledger."""
    return PageData(query, filters).data


@st.cache_resource(ttl=CACHE_TTL_S, show_spinner=False, max_entries=256)
def _figure(builder_name: str, _builder: Callable, page: str, _query: Callable, keys: tuple, path: str,
            version: tuple, filters: Filters, now: dt.datetime, teams: tuple, colours: tuple,
            options: tuple):
    # A plotly Figure costs 30-60 ms to build and as much to unpickle, so figures are cached as
    # objects (st.cache_resource, never copied). Nothing mutates them: st.plotly_chart only reads.
    data = _page_data(page, _query, path, version, filters, now)
    kwargs = dict(options)
    if "colours" in inspect.signature(_builder).parameters:
        kwargs["colours"] = figure_kit.team_colours(teams, dict(colours))
    return _builder(*(data[k] for k in keys), **kwargs)


class PageData:
    """One page's data for one run: cached query results (`.data`) and cached charts (`.chart`).

    `query` is a page query of lib.dashboard (a `*_queries` module's) taking (filters, path, now). On a
    locked or unreadable ledger it shows an error box and stops the page."""

    def __init__(self, query: Callable, filters: Filters, *, hourly: bool = False):
        self.query, self.name, self.filters = query, qualified_name(query), filters
        self.path = db_path()
        self.version = data_version(self.path)
        self.now = now_minute()
        if hourly:  # for results that move slowly with time (the calibration's 365-day window)
            self.now = self.now.replace(minute=0)
        with ledger_errors("Reload the page in a moment."):
            self.data = _page_data(self.name, query, self.path, self.version, filters, self.now)

    def __getitem__(self, key):
        return self.data[key]

    def chart(self, builder: Callable, *keys: str, **options) -> None:
        """Draw `builder(data[key], ..., **options)` (a figure builder of lib.dashboard; team colours
        added when it takes them), cached as an object."""
        with ledger_errors("Reload the page in a moment."):
            # colours over every team of the ledger, not only this session's: the same for everyone
            fig = _figure(qualified_name(builder), builder, self.name, self.query, keys, self.path,
                          self.version, self.filters, self.now, tuple(cached_sidebar_options()["teams"]), set_colours(),
                          tuple(sorted(options.items())))
        st.plotly_chart(fig, width="stretch")


def cached_sidebar_options() -> dict:
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
    return cached_sidebar_options()["runs"] == 0


def all_teams() -> list[str]:
    """Every team the sidebar offers this session (the frame's filters keep them for the run)."""
    return st.session_state.get("all_teams") or cached_sidebar_options()["teams"]


def chart(fig) -> None:
    st.plotly_chart(fig, width="stretch")
