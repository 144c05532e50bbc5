"""The ledger and its demo history on a session's first view: `ensure_ledger` and `ensure_demo`, which
the shared frame (ui.page_frame.frame) calls.

Demo history is for trying the app out. It must never reach a team's real ledger, where 10,000
made-up runs would feed the live gate's calibration and spend, so it is built only
- into a new ledger: one that holds nothing at all (lib.ledger.demo.already_holds), checked again
  under the write lock the build keeps;
- for a session that may write history: local mode (loopback, no sign-in) or a signed-in planner —
  never for a member or a viewer, nor on an app listening beyond loopback without sign-in
  (ui.access.write_refusal);
- unless $GATE_DEMO turns it off (`off`, `0`, `false` or `no`; unset: on);
and the ledger's audit records it (action "demo", the session's identity — "local" in local mode —,
origin "app", the runs built). A ledger without runs otherwise says how to load history.
"""
from __future__ import annotations

import os
import threading

import streamlit as st

from lib.gate.access import Grant
from lib.ledger.connection import open_ledger, upgrade_ledger
from lib.ledger.demo import already_holds, ensure_demo_history
from ui.access import who_writes, write_refusal
from ui.data import CACHE_TTL_S, clear_caches, data_version, db_path, ledger_is_empty
from ui.text import as_text, import_progress

DEMO_ENV = "GATE_DEMO"
DEMO_OFF = ("off", "0", "false", "no")
_BUILDING = threading.Lock()   # one build per process, however many sessions start at once

NO_HISTORY = ("The ledger holds no run history yet. A planner loads it on the **Upload** page (a run CSV "
              "or Slurm `sacct` output), or with `python -m lib import FILE` (`--format sacct` for sacct); "
              "`python -m lib teams` loads the team policy of `data/teams.toml`, and `python -m lib demo` "
              "builds demo history to try the app on.")


def ensure_ledger() -> None:
    """On first start, create the app's ledger ($GATE_DB, else data/gate.duckdb) when it does not
    exist yet, so every page reads an empty ledger rather than an error; and bring a ledger written
    by an older version of Training Gate to the current schema (one write open), which the pages'
    read-only opens would refuse ("needs migrating"). Checked once per ledger version."""
    if not os.path.lexists(db_path()):
        with open_ledger(db_path()):
            pass
    else:
        _upgraded(db_path(), data_version())


@st.cache_data(ttl=CACHE_TTL_S, show_spinner=False, max_entries=16)
def _upgraded(path: str, version: tuple) -> bool:
    return upgrade_ledger(path)


def ensure_demo(grant: Grant) -> None:
    """Build the demo history (showing progress) when the ledger has no runs and this session may
    (see the module docstring); otherwise, on a ledger without runs, say how to load history and why
    no demo was built."""
    if not ledger_is_empty():
        return
    why_not = _why_no_demo(grant)
    if why_not is None:
        with _BUILDING:
            clear_caches()
            if not ledger_is_empty():   # another session built it meanwhile
                return
            why_not = _build(grant)
            clear_caches()
    if why_not:
        st.info(f"{NO_HISTORY}\n\n{why_not}")


def demo_turned_off() -> str | None:
    """The $GATE_DEMO value that turns the demo history off, or None (unset or anything else: on)."""
    value = os.environ.get(DEMO_ENV)
    return value if value is not None and value.strip().lower() in DEMO_OFF else None


def _why_no_demo(grant: Grant) -> str | None:
    """Why this session builds no demo history (None: it does)."""
    off = demo_turned_off()
    if off is not None:
        return f"Demo history is turned off here (`{DEMO_ENV}={as_text(off)}`)."
    if write_refusal():
        return "This app listens beyond this machine without sign-in, so it builds no demo history."
    if grant["role"] != "planner":
        return "Demo history is built on first start only in local mode or for a planner."
    held = _held(db_path(), data_version())
    if held:
        return f"Demo history goes only into a new ledger, and this one already holds {held}."
    return None


@st.cache_data(ttl=CACHE_TTL_S, show_spinner=False, max_entries=16)
def _held(path: str, version: tuple) -> str | None:
    with open_ledger(path, read_only=True) as con:
        return already_holds(con)


def _build(grant: Grant) -> str | None:
    """Build the demo into the new ledger, recorded as this session's write; None when it did, else why not."""
    with st.status("The ledger is new: building demo history…", expanded=True) as status:
        bar = st.progress(0.0, text="starting")
        built = ensure_demo_history(db_path(), who=who_writes(grant), progress=import_progress(bar))
        status.update(label="Demo history built" if built else "The ledger is no longer new",
                      state="complete", expanded=False)
    return None if built else "Demo history goes only into a new ledger, and another writer has written to this one."
