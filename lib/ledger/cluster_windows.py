"""The cluster's capacity windows in the ledger (`cluster_windows`): the Slurm reservations that hold
GPUs back from the gate's requests (maintenance; reservations for other users or accounts), as the
last sync read them (lib.slurm.windows_sync: the warm gate server every 30 s, or
`python -m lib slurm windows --sync`).

`replace_windows` puts a source's new set (e.g. "scontrol") in place of its old one in one
transaction, recorded in the audit (action "cluster-windows"): only when the set differs, so a
sync that finds the same reservations writes nothing (and moves no change stamp that would make the
gate server reload). `read_windows` gives the windows not yet ended at a time, as lib.gate.contracts.CapacityWindow dicts.
"""
from __future__ import annotations

from datetime import datetime
from typing import Iterable

from lib.gate.contracts import CapacityWindow
from lib.gate.terms import CAPACITIES, INT_MAX, InputError, shown, utcnow
from lib.ledger.audit import Who, command_line, record
from lib.ledger.connection import transaction

_SELECT = ("SELECT name, start_at, end_at, gpus, pool, accounts, users FROM cluster_windows "
           "{where} ORDER BY start_at, name, source")


def window_problem(w) -> str | None:
    """What is wrong with one window (naming the field and its value), None when it can be stored."""
    if not isinstance(w, dict):
        return f"must be a dict, got {shown(w)}"
    name = w.get("name")
    if type(name) is not str or not name.strip():
        return f"name: must be a non-empty string, got {shown(name)}"
    for key in ("start", "end"):
        t = w.get(key)
        if type(t) is not datetime or t.tzinfo is not None:
            return f"{key}: must be a naive UTC datetime, got {shown(t)}"
    if w["end"] <= w["start"]:
        return f"end {w['end']:%Y-%m-%d %H:%M:%S} is not after start {w['start']:%Y-%m-%d %H:%M:%S}"
    gpus = w.get("gpus")
    if type(gpus) is not int or not 0 <= gpus <= INT_MAX:
        return f"gpus: must be a whole number from 0 to {INT_MAX}, got {shown(gpus)}"
    if w.get("pool") is not None and w.get("pool") not in CAPACITIES:
        return f"pool: must be one of {', '.join(CAPACITIES)} or None, got {shown(w.get('pool'))}"
    for key in ("accounts", "users"):
        names = w.get(key)
        if type(names) is not list or not all(type(n) is str for n in names):
            return f"{key}: must be a list of names, got {shown(names)}"
    return None


def _row(w: CapacityWindow) -> tuple:
    return (w["name"], w["start"], w["end"], w["gpus"], w["pool"], list(w["accounts"]), list(w["users"]))


def _window(row) -> CapacityWindow:
    return {"name": row[0], "start": row[1], "end": row[2], "gpus": int(row[3]), "pool": row[4],
            "accounts": list(row[5]), "users": list(row[6])}


def replace_windows(con, windows: Iterable[CapacityWindow], *, source: str, who: Who | None = None) -> bool:
    """Make `windows` the ledger's cluster windows from `source` (where they were read, e.g.
    "scontrol"; those of other sources stay), in one transaction audited as `who` (default: the
    command line's OS user); True when they differed from that source's stored set (and were
    written), False when nothing changed. InputError naming the window and field when one cannot be
    stored (nothing written); two windows of one name and start are one."""
    rows: dict[tuple, tuple] = {}
    for i, w in enumerate(windows, start=1):
        problem = window_problem(w)
        if problem:
            name = w.get("name") if isinstance(w, dict) else None
            raise InputError(f"cluster window #{i} ({shown(name)}): {problem}; nothing written")
        rows[(w["name"], w["start"])] = _row(w)
    new = sorted(rows.values(), key=lambda r: (r[1], r[0]))
    with transaction(con):
        old = [tuple(r[:5]) + (list(r[5]), list(r[6]))
               for r in con.execute(_SELECT.format(where="WHERE source = ?"), [source]).fetchall()]
        if old == new:
            return False
        before = {r[:2]: r for r in old}
        same = sum(1 for r in new if before.get(r[:2]) == r)
        changed = sum(1 for r in new if r[:2] in before) - same
        now = utcnow()
        con.execute("DELETE FROM cluster_windows WHERE source = ?", [source])
        if new:
            con.executemany("INSERT INTO cluster_windows (name, start_at, end_at, gpus, pool, accounts, users, "
                            "source, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                            [(*r, source, now) for r in new])
        record(con, who or command_line(), "cluster-windows", inserted=len(new) - same - changed,
               updated=changed, unchanged=same,
               detail=f"{len(new)} window(s) from {source}; {len(old) - same - changed} gone")
    return True


def preemptible_partitions(con) -> set[str]:
    """Every partition some team's policy in the ledger calls preemptible."""
    return {p for (names,) in con.execute("SELECT preemptible_partitions FROM teams").fetchall() for p in names}


def read_windows(con, now: datetime) -> list[CapacityWindow]:
    """The ledger's cluster windows (of every source) not yet ended at `now` (naive UTC), by start."""
    return [_window(r) for r in con.execute(_SELECT.format(where="WHERE end_at > ?"), [now]).fetchall()]
