"""The scheduler's own reservations in the ledger (`cluster_windows`): maintenance windows and accelerators
reserved for other users or accounts, which the gate subtracts from its pools
(lib.gate.contracts.CapacityWindow, lib.gate.capacity.pool_room). Whoever reads them from the
scheduler writes them with `replace_windows`; the gate and the plan read them with `read_windows`.
"""
from __future__ import annotations

from datetime import datetime

from lib.gate.contracts import CapacityWindow
from lib.gate.terms import utcnow

_COLS = "name, start_at, end_at, gpus, pool, accounts, users"


def read_windows(con, now: datetime) -> list[CapacityWindow]:
    """The windows not ended by `now` (end_at > now), in start order, then by name."""
    return [{"name": r[0], "start": r[1], "end": r[2], "gpus": int(r[3]), "pool": r[4],
             "accounts": list(r[5] or []), "users": list(r[6] or [])}
            for r in con.execute(f"SELECT {_COLS} FROM cluster_windows WHERE end_at > ? "
                                 "ORDER BY start_at, name, source", [now]).fetchall()]


def replace_windows(con, windows: list[CapacityWindow], *, source: str) -> int:
    """Make `windows` the ledger's windows from `source` (those it wrote before are replaced), in the
    caller's transaction. Returns how many were written."""
    con.execute("DELETE FROM cluster_windows WHERE source = ?", [source])
    now = utcnow()
    for w in windows:
        con.execute(f"INSERT INTO cluster_windows ({_COLS}, source, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [w["name"], w["start"], w["end"], int(w["gpus"]), w["pool"], list(w["accounts"]),
                     list(w["users"]), source, now])
    return len(windows)
