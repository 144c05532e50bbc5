"""Opening the ledger: one embedded DuckDB file, opened per unit of work and closed promptly.

DuckDB lets one process hold a file read-write; while it does, every other process is refused, even
read-only. So nothing here keeps a handle between units of work: `open_ledger()` retries briefly on a
lock (bounded by `timeout_s`) and raises `LedgerLocked` with a clear message after that.
"""
from __future__ import annotations

import contextlib
import os
import random
import time
from pathlib import Path

import duckdb

SCHEMA_VERSION = 1
DEFAULT_PATH = Path(__file__).resolve().parent.parent / "data" / "gate.duckdb"
DEFAULT_TIMEOUT_S = 10.0
_CONFIG = {"threads": 2, "memory_limit": "4GB"}
_SCHEMA_SQL = (Path(__file__).with_name("schema.sql")).read_text(encoding="utf-8")


class LedgerError(RuntimeError):
    """The ledger cannot be used as asked (locked, newer than this program, unreadable)."""


class LedgerLocked(LedgerError):
    """Another process held the ledger file for longer than the timeout."""


def ledger_path(path: str | os.PathLike | None = None) -> Path:
    """The ledger file: `path`, else $GATE_DB, else data/gate.duckdb."""
    if path:
        return Path(path)
    env = os.environ.get("GATE_DB")
    return Path(env) if env else DEFAULT_PATH


def _is_lock_error(exc: Exception) -> bool:
    text = str(exc)
    return "lock" in text.lower() and ("Conflicting" in text or "Could not set lock" in text)


def _connect(path: Path, read_only: bool, timeout_s: float) -> duckdb.DuckDBPyConnection:
    deadline = time.monotonic() + timeout_s
    delay_s = 0.01
    while True:
        try:
            return duckdb.connect(str(path), read_only=read_only, config=_CONFIG)
        except duckdb.IOException as exc:
            if not _is_lock_error(exc):
                raise LedgerError(f"cannot open ledger {path}: {exc}") from exc
            if time.monotonic() >= deadline:
                raise LedgerLocked(
                    f"ledger {path} is locked by another process (waited {timeout_s:.1f} s); "
                    "try again when the import or submit holding it has finished"
                ) from exc
            time.sleep(delay_s * (0.5 + random.random()))
            delay_s = min(delay_s * 2, 0.25)


def _schema_version(con: duckdb.DuckDBPyConnection) -> int:
    """The ledger's schema version; 0 for a file with no schema yet.

    Reads `meta` directly (a missing table means a new file): about 10 ms cheaper per open than
    asking information_schema, and every submit opens the ledger.
    """
    try:
        rows = con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchall()
    except duckdb.CatalogException:
        return 0
    return int(rows[0][0]) if rows else 0


def ensure_schema(con: duckdb.DuckDBPyConnection) -> None:
    """Create the schema on a new ledger; refuse a ledger written by a newer program."""
    version = _schema_version(con)
    if version > SCHEMA_VERSION:
        raise LedgerError(
            f"this ledger has schema version {version}, newer than this program's "
            f"{SCHEMA_VERSION}: upgrade Training Gate before using it"
        )
    if version == SCHEMA_VERSION:
        return
    con.execute("BEGIN TRANSACTION")
    try:
        con.execute(_SCHEMA_SQL)
        _migrate(con)
        con.execute(
            "INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", [str(SCHEMA_VERSION)]
        )
        con.execute("COMMIT")
    except Exception:
        con.execute("ROLLBACK")
        raise


def _migrate(con: duckdb.DuckDBPyConnection) -> None:
    """Forward migrations from older schema versions go here (none yet: version 1 is the first)."""


@contextlib.contextmanager
def open_ledger(path=None, *, read_only: bool = False, timeout_s: float = DEFAULT_TIMEOUT_S):
    """Open the ledger for one unit of work; create it (and its folder) on first write.

    A read-only open of a file that does not exist yet creates it first, so readers of a fresh
    machine see an empty ledger rather than an error.
    """
    p = ledger_path(path)
    if not p.exists():
        p.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.closing(_connect(p, False, timeout_s)) as con:
            ensure_schema(con)
    con = _connect(p, read_only, timeout_s)
    try:
        if not read_only:
            ensure_schema(con)
        else:
            _check_version_read_only(con, p)
        yield con
    finally:
        con.close()


def _check_version_read_only(con, p: Path) -> None:
    version = _schema_version(con)
    if version > SCHEMA_VERSION:
        raise LedgerError(
            f"ledger {p} has schema version {version}, newer than this program's {SCHEMA_VERSION}"
        )
    if version < SCHEMA_VERSION:
        raise LedgerError(f"ledger {p} needs migrating to version {SCHEMA_VERSION}: open it for writing once")


@contextlib.contextmanager
def transaction(con: duckdb.DuckDBPyConnection):
    """BEGIN ... COMMIT, or ROLLBACK on any exception (re-raised): all or nothing."""
    con.execute("BEGIN TRANSACTION")
    try:
        yield con
    except BaseException:
        con.execute("ROLLBACK")
        raise
    con.execute("COMMIT")
