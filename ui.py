"""The dashboard's UI kit: the shared frame every page draws first, cached page data and figures,
the sidebar filters, tables with downloads (the ledger and demo history on first start: ui_demo).

It and ui_demo.py are the only modules besides app.py and pages/ that import Streamlit; lib/ never does.

The frame: `frame()` sets the page config, creates the ledger (and, in local mode or for a planner, the
demo history: ui_demo) on first start and draws the sidebar filters, turning a locked or unreadable
ledger into a message. app.py calls it before
running the page; every page script calls it first too, and within one script run it draws once. So a
page is framed the same whether it runs through app.py's st.navigation or on its own — as Streamlit runs
a `pages/` script in its classic multipage mode (see README, "The dashboard").

Who is asking: `who()` is the session's grant (lib.gate.access) — local mode's single user with every
role, or, with [auth] in .streamlit/secrets.toml, the signed-in person's role from the access file;
`require(action)` stops a page, saying why, before it draws anything its role may not use or that would
write on an app exposed beyond loopback without sign-in.

Pages reach queries and figures by reference: `PageData(queries.overview, f)` and
`data.chart(figures.reserved_vs_used, "daily")`; cache keys use the function's qualified name.

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
import ipaddress
import re
from pathlib import Path
from typing import Callable

import duckdb
import pandas as pd
import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx

from lib.dashboard import figures, labels, queries, settings
from lib.gate.terms import neutralise
from lib.gate.access import AccessFileError, Grant, access_path, everyone, load_access_file, may, resolve
from lib.dashboard.filters import (CUSTOM, DATE_MIN, QUERY_KEYS, RANGE_LABELS, Filters, View, date_max,
                                   default_filters, filters_from_query, query_from_filters, resolve_range)
from lib.ledger.connection import LedgerError, LedgerLocked, NotALedger, ledger_path
from lib.dashboard.tables import escape_markdown, safe_cells, safe_csv_bytes

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
    return queries.sidebar_options(path)


@st.cache_data(ttl=CACHE_TTL_S, show_spinner=False, max_entries=16)
def _set_colours(path: str, version: tuple) -> dict:
    return settings.colours(path)


def set_colours() -> tuple:
    """The team colours data/teams.toml sets, as the ledger holds them: sorted (team, "#rrggbb")
    pairs (a cache key for figures); teams without one get figures.hashed_colour."""
    path = db_path()
    with ledger_errors("Reload the page in a moment."):
        return tuple(sorted(_set_colours(path, data_version(path)).items()))


def page_data(query: Callable, filters: Filters):
    """The cached result of `query(filters, path, now)` (a lib.dashboard.queries function) for the
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
        kwargs["colours"] = figures.team_colours(teams, dict(colours))
    return _builder(*(data[k] for k in keys), **kwargs)


class PageData:
    """One page's data for one run: cached query results (`.data`) and cached charts (`.chart`).

    `query` is a lib.dashboard.queries function taking (filters, path, now). On a locked or
    unreadable ledger it shows an error box and stops the page."""

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
        """Draw `builder(data[key], ..., **options)` (a lib.dashboard.figures function; team colours
        added when it takes them), cached as an object."""
        with ledger_errors("Reload the page in a moment."):
            fig = _figure(qualified_name(builder), builder, self.name, self.query, keys, self.path,
                          self.version, self.filters, self.now, tuple(all_teams()), set_colours(),
                          tuple(sorted(options.items())))
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
    """Draw the shared sidebar filters and return them (call it through `frame()`); they persist
    across pages because app.py draws them on every run, outside the page. Stored as
    st.session_state['filters'] for the pages.

    The filters live in the URL too (lib.dashboard.filters.query_from_filters: `teams`, `kinds`,
    `capacity`, `range` or `from` + `to`, only what differs from the default): a session's first run
    sets the widgets from the query string, and every run writes the widgets back to it."""
    opts = sidebar_options()
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
    kinds = sb.multiselect("Kinds", ["exploratory", "production", "retraining"], key="f_kinds",
                           placeholder="all kinds")
    cap = sb.radio("Capacity type", ["all", "stable", "preemptible"], key="f_capacity", horizontal=True)
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
        f = default_filters(sidebar_options()["last_day"])
    return f


def all_teams() -> list[str]:
    return st.session_state.get("all_teams") or sidebar_options()["teams"]


# ------------------------------------------------------------------------------ the frame

PAGE_TITLE = "Training Gate"
PAGE_ICON = "🚦"
_FRAME_RUN = "_frame_run"


def _this_run():
    """An object that lives exactly as long as the current script run (None outside Streamlit)."""
    ctx = get_script_run_ctx()
    return None if ctx is None else ctx.cursors  # a fresh dict at every run's start


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
    st.set_page_config(page_title=PAGE_TITLE, page_icon=PAGE_ICON, layout="wide")
    grant = who()   # a signed-out session, or one without a role, stops here: before any write
    _who_box(grant)
    import ui_demo  # (it imports this module)
    with ledger_errors("Reload the page in a moment."):
        ui_demo.ensure_ledger()
        ui_demo.ensure_demo(grant)
        return filter_widgets()


# ------------------------------------------------------------------------------ who is asking

LOCAL = "local"                  # the identity of every write in local mode
LOCAL_MODE = "local mode: single user, every role"
PAGE_ACTIONS = {"pages/6_Upload.py": "import", "pages/8_Policy_replay.py": "policy",
                "pages/4_What-if.py": "what-if"}   # a page not listed: every role may open it
WRITES = ("import", "policy")


def sign_in_configured() -> bool:
    """True when .streamlit/secrets.toml has an [auth] section: every page then requires sign-in
    (st.login) and roles come from the access file. Without it the app is in local mode."""
    try:
        return bool(st.secrets.load_if_toml_exists() and "auth" in st.secrets)
    except Exception:  # noqa: BLE001 - an unreadable secrets file: Streamlit itself reports it
        return False


def listen_address() -> str:
    """The address the server listens on ("" or None in the option: every interface)."""
    return str(st.get_option("server.address") or "")


def listens_on_loopback() -> bool:
    address = listen_address()
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address.strip("[]")).is_loopback
    except ValueError:
        return False


def write_refusal() -> str | None:
    """Why this app must not write (None: it may): it listens beyond the loopback interface with no
    sign-in, so anyone who can reach it could."""
    if sign_in_configured() or listens_on_loopback():
        return None
    return (f"This app listens on {as_text(listen_address() or 'every interface')} without sign-in, so "
            "anyone who can reach it could write: imports and policy exports are off. Configure sign-in "
            "([auth] in .streamlit/secrets.toml, see the README's \"Deploying for a team\"), or listen "
            "on 127.0.0.1 only.")


@st.cache_resource(ttl=CACHE_TTL_S, show_spinner=False, max_entries=4)
def _access(path: str, version: tuple):
    return load_access_file(path)


def _claims() -> dict:
    try:
        return st.user.to_dict()
    except Exception:  # noqa: BLE001 - no user info (outside a session)
        return {}


def who() -> Grant:
    """Who is asking, and what they may do. Local mode (no [auth]): a single user with every role,
    identity "local". With sign-in: the signed-in person's grant from the access file (matched by the
    `email` claim and the group claim the file names). Nobody signed in, a person the file gives no
    role, or a malformed access file: the page shows why (with a Sign in or Sign out button) and
    stops here, before anything else is drawn."""
    if not sign_in_configured():
        return everyone(LOCAL)
    if not _claims().get("is_logged_in"):
        sign_in_screen()
        st.stop()
    path = access_path()
    try:
        access = _access(str(path), data_version(str(path))[:1])
    except AccessFileError as exc:
        st.error("The access file cannot be used, so nobody may enter:\n\n"
                 + "\n".join(f"- {as_text(p)}" for p in exc.problems) + f"\n\n({as_text(exc.path)})")
        st.stop()
    claims = _claims()
    groups = claims.get(access["groups_claim"]) or []
    groups = [groups] if isinstance(groups, str) else [str(g) for g in groups if g is not None]
    email = claims.get("email") if isinstance(claims.get("email"), str) else None
    grant = resolve(access, email=email, groups=groups)
    if email is None:
        grant["identity"] = str(claims.get("sub") or "unknown")
    if grant["role"] is None:
        st.error(f"You are signed in as {as_text(grant['identity'])}, but the access file gives you no "
                 "role here: ask a capacity planner for access.")
        st.button("Sign out", on_click=st.logout, key="sign_out_no_role")
        st.stop()
    return grant


def sign_in_screen() -> None:
    """What a signed-out visitor sees: the title and a Sign in button (st.login)."""
    st.title(PAGE_TITLE)
    st.info("Sign in with your organisation's account to see the capacity dashboards.")
    st.button("Sign in", type="primary", on_click=st.login, key="sign_in")


def signed_out() -> bool:
    """True when sign-in is configured and nobody is signed in in this session."""
    return sign_in_configured() and not _claims().get("is_logged_in")


def may_open(script: str) -> bool:
    """Whether this session's role may use the page `script` (pages/…): what the navigation lists."""
    action = PAGE_ACTIONS.get(script)
    return action is None or may(who(), action)


def require(action: str, team: str | None = None) -> Grant:
    """Stop the page, saying why, unless this session may `action` (lib.gate.access.ACTIONS) — and,
    for a write, unless the app may write at all (write_refusal). Pages call it before drawing
    anything that could write: the check runs on the server, whatever the browser sends."""
    grant = who()
    if not may(grant, action, team):
        what = {"import": "import run history", "policy": "edit or export team policy",
                "what-if": "run the what-if" + (f" for team {team}" if team else "")}.get(action, action)
        st.error(f"Your role ({grant['role'] or 'none'}) may not {as_text(what)}.")
        st.stop()
    refusal = write_refusal() if action in WRITES else None
    if refusal:
        st.error(refusal)
        st.stop()
    return grant


def who_writes(grant: Grant, file_name: str | None = None) -> dict:
    """The lib.ledger.audit.Who of a write from this session: its identity, origin "app"."""
    return {"actor": grant["identity"], "origin": "app", "file_name": file_name}


def _who_box(grant: Grant) -> None:
    """The sidebar line saying who is asking: local mode, or the signed-in person, role and Sign out."""
    if not sign_in_configured():
        st.sidebar.caption(LOCAL_MODE)
        return
    teams = f" ({', '.join(grant['teams'])})" if grant["teams"] else ""
    st.sidebar.caption(as_text(f"Signed in as {grant['identity']} · {grant['role']}{teams}"))
    st.sidebar.button("Sign out", on_click=st.logout, key="sign_out")


# ------------------------------------------------------------------------------ output

def download(df: pd.DataFrame, name: str, key: str, label: str = "Download CSV") -> None:
    """A CSV download of the table, formula-like cells neutralised."""
    st.download_button(label, safe_csv_bytes(df), file_name=f"{name}.csv", mime="text/csv", key=key,
                       disabled=df.empty)


def table(df: pd.DataFrame, name: str, key: str, *, empty: str, caption: str | None = None) -> None:
    """A data table (cells shown as text, never markup; human headers with units) with its CSV
    download (machine column names), or an empty-state message saying what to do."""
    if df.empty:
        st.info(empty)
        return
    show_table(df)
    if caption:
        st.caption(caption)
    download(df, name, key)


WRAP_CHARS = 55            # characters a wide text column shows per line
LINE_PX, MAX_LINES = 21, 6


def show_table(df: pd.DataFrame) -> None:
    """`df` on screen: headers, units, rounding and help from lib.dashboard.labels; long text (reason
    fixes, notes, missing lists) wrapped over up to MAX_LINES lines rather than cut off (Streamlit's
    grid wraps text when rows are taller than 4rem). The app's one data grid (tests/test_grid_export.py
    checks that no page draws another): formula-like text cells are shown neutralised, as the CSV
    download has them, because the grid's toolbar download and a copy to the clipboard take the
    cells as shown."""
    shown = safe_cells(df)
    config, longest = {}, 0
    for col in df.columns:
        spec = labels.column_spec(str(col))
        config[col], values = _column_config(spec, df[col])
        if values is not None:
            shown[col] = values
        if spec["long"] and len(df):
            longest = max(longest, int(df[col].map(lambda v: len(str(v)) if v is not None else 0).max()))
    lines = min(MAX_LINES, -(-longest // WRAP_CHARS))
    row_height = 12 + LINE_PX * lines if lines > 1 else None
    names = {col: neutralise(str(col)) for col in df.columns}   # a team name can be a column name
    st.dataframe(shown.rename(columns=names), hide_index=True, width="stretch", row_height=row_height,
                 column_config={names[col]: c for col, c in config.items()})


def _column_config(spec: labels.ColumnSpec, values: pd.Series):
    """(Streamlit column config, values to show instead or None) for one column."""
    kind, common = spec["kind"], dict(label=neutralise(spec["label"]), help=spec["help"])
    numeric = pd.api.types.is_numeric_dtype(values) and not pd.api.types.is_bool_dtype(values)
    if kind == "share" and numeric:
        return st.column_config.NumberColumn(format=f"%.{spec['digits']}f%%", **common), values * 100
    if kind in ("number", "ratio") and numeric:
        return st.column_config.NumberColumn(format=f"%.{spec['digits']}f", **common), None
    if kind == "integer" and numeric:
        return st.column_config.NumberColumn(format="%d", **common), None
    if kind == "datetime" and pd.api.types.is_datetime64_any_dtype(values):
        return st.column_config.DatetimeColumn(format="YYYY-MM-DD HH:mm", **common), None
    if kind == "date":
        return st.column_config.DateColumn(format="YYYY-MM-DD", **common), None
    if kind == "bool" and pd.api.types.is_bool_dtype(values):
        return st.column_config.CheckboxColumn(**common), None
    return st.column_config.Column(width="large" if spec["long"] else None, **common), None


WORD_JOINER = "\u2060"  # invisible, no width, and no line break: the text reads as typed
_AUTOLINK_START = re.compile(r"(?i)(www)(?=\\?\.)|([:@])")


def as_text(text) -> str:
    """`text` (possibly user data: team names, run IDs, file names, messages quoting them) for a
    Streamlit Markdown body (st.caption, st.markdown, alerts), shown as typed: never markup, a link,
    an emoji shortcode or a directive.

    escape_markdown backslash-escapes every Markdown character, but GitHub-flavoured Markdown
    links bare URLs and e-mail addresses *after* parsing (remark-gfm's autolink-literal
    transform works on the unescaped text), so `https://…`, `www.…` and `a@b.c` would still
    become live links. A word joiner after every ':' and '@' and after 'www' breaks those
    patterns (and `:emoji:` shortcodes) without changing what the reader sees. Bidirectional
    controls (which would reorder the rest of the line) are shown as `[U+202E]`."""
    text = figures.visible_controls(str(text))
    return _AUTOLINK_START.sub(lambda m: (m.group(1) or m.group(2)) + WORD_JOINER, escape_markdown(text))


def caption(text: str) -> None:
    """A caption whose text (possibly user data) shows as typed, never as markup or a link."""
    st.caption(as_text(text))


def budget_outlook(burn: pd.DataFrame, *, quiet: bool = False) -> None:
    """Name the teams projected (P50) to use up this month's budget, with the day
    (lib.dashboard.forecasts burn rows); otherwise say none is, and which might at P90 — unless
    `quiet`, where a page shows only the warning."""
    if burn.empty:
        return
    at_risk = burn[burn["exhausts_p50"].notna()]
    if len(at_risk):
        st.warning(f"{len(at_risk)} team(s) projected (P50) to use up their monthly budget before month end: "
                   + ", ".join(f"{as_text(t)} on {d:%b %d}" for t, d in zip(at_risk["team"], at_risk["exhausts_p50"])))
    elif not quiet:
        risky = burn[burn["exhausts_p90"].notna()]
        st.success("No team is projected (P50) to use up its budget this month"
                   + (f"; at P90, {len(risky)} might: " + ", ".join(as_text(t) for t in risky["team"])
                      if len(risky) else "."))


def glossary(*terms: str) -> None:
    """A folded 'Terms used here' box explaining each term (lib.dashboard.labels.GLOSSARY)."""
    with st.expander("Terms used here"):
        st.markdown("\n".join(f"- **{term}**: {labels.GLOSSARY[term]}" for term in terms))


def chart(fig) -> None:
    st.plotly_chart(fig, width="stretch")


# ------------------------------------------------------------------------------ progress

def import_progress(bar):
    """A progress callback (import_runs, the demo build) drawing into a st.progress bar."""
    def progress(fraction, message=""):
        bar.progress(min(max(float(fraction), 0.0), 1.0), text=str(message))
    return progress
