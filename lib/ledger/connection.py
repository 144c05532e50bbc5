"""Opening the ledger: one embedded DuckDB file, opened per unit of work and closed promptly.

DuckDB lets one process hold a file read-write; while it does, every other process is refused, even
read-only. So nothing here keeps a handle between units of work: `open_ledger()` retries briefly on a
lock (bounded by `timeout_s`) and raises `LedgerLocked` with a clear message after that.

Files are owner-only: every open for writing sets this process's umask to 077 first
(`owner_only_files`), so the ledger, its WAL and the lock and journal files beside it are created
mode 0600 whatever the caller's umask: the ledger holds every decision, and a lock file others can
open is one they can hold to stall every writer. An operator who wants a group to read the
ledger grants it on the file (chmod / ACL); a file that exists keeps the mode it has.

Only a ledger is ever opened: a file holding anything else (another DuckDB database, an SQLite
database, any other file, a directory) is refused with `NotALedger` and left exactly as it was. The
file's first bytes are read before DuckDB sees it, and DuckDB never installs or loads extensions on
its own, so a wrong path never reaches for the network.
"""
from __future__ import annotations

import contextlib
import contextvars
import os
import random
import re
import time
from pathlib import Path

import duckdb

from lib.gate.terms import number_problem
from lib.ledger import team_weeks

SCHEMA_VERSION = 8
DEFAULT_PATH = Path(__file__).resolve().parents[2] / "data" / "gate.duckdb"
LOCK_TIMEOUT_S = 10.0
_CONFIG = {"threads": 2, "memory_limit": "4GB",
           "autoinstall_known_extensions": False, "autoload_known_extensions": False}
_SCHEMA_SQL = (Path(__file__).with_name("schema.sql")).read_text(encoding="utf-8")
SQLITE_MAGIC = b"SQLite format 3\x00"
DUCKDB_MAGIC = b"DUCK"  # at byte offset 8
_TABLES_SHOWN = 5


class LedgerError(RuntimeError):
    """The ledger cannot be used as asked (locked, newer than this program, unreadable)."""


class LedgerLocked(LedgerError):
    """Another process held the ledger file for longer than the timeout."""


class NotALedger(LedgerError):
    """The path holds no Training Gate ledger (nothing there, or some other file): a wrong path."""


def ledger_path(path: str | os.PathLike | None = None) -> Path:
    """The ledger file: `path`, else $GATE_DB, else data/gate.duckdb."""
    if path:
        return Path(path)
    env = os.environ.get("GATE_DB")
    return Path(env) if env else DEFAULT_PATH


def owner_only_files() -> None:
    """Make every file and folder this process creates from now on owner-only (umask 077). Called
    before anything that may create a ledger, a WAL, a lock or a journal; idempotent, and never
    loosens (one call: no moment with another umask in force for the other threads)."""
    os.umask(0o077)


# DuckDB keeps two database headers at these offsets and writes the next checkpoint's iteration
# (the 8 bytes after each header's checksum) into the older one: a checkpoint always changes it,
# even when the file's size and, within the clock's tick, its mtime stay the same.
_HEADER_ITERATIONS = (4096 + 8, 8192 + 8)


def change_stamp(path, fd: int) -> tuple:
    """What changes whenever any process commits to the ledger at `path`: the file's identity, size,
    mtime and DuckDB's checkpoint iteration, and its WAL's identity, size and mtime. A stat and a
    16-byte read: cheap enough to take before every decision.

    `fd`: a descriptor on the ledger that the caller keeps open. Opening and closing the file here
    would be wrong, not only slow: closing any descriptor of a file drops every fcntl lock the
    process holds on it (POSIX), DuckDB's own included, so another process could write beside a
    connection of this one."""
    p = Path(path)
    out: list = []
    try:
        st = os.stat(p)
    except FileNotFoundError:
        out.append(None)
    else:
        held = os.fstat(fd)
        iterations = None
        if (held.st_dev, held.st_ino) == (st.st_dev, st.st_ino):  # else replaced: the identity differs
            iterations = tuple(int.from_bytes(os.pread(fd, 8, off), "little") for off in _HEADER_ITERATIONS)
        out.append((st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, iterations))
    try:
        st = os.stat(p.with_name(p.name + ".wal"))
        out.append((st.st_ino, st.st_size, st.st_mtime_ns))
    except FileNotFoundError:
        out.append(None)
    return tuple(out)


def default_timeout_s() -> float:
    """Seconds to wait for a ledger another process holds: $GATE_TIMEOUT_S, else 10."""
    try:
        value = float(os.environ.get("GATE_TIMEOUT_S", LOCK_TIMEOUT_S))
    except ValueError:
        return LOCK_TIMEOUT_S
    return value if number_problem(value) is None else LOCK_TIMEOUT_S


def check_ledger_file(path: str | os.PathLike | None = None) -> bool:
    """Look at the file's first bytes, without DuckDB: True when it is a DuckDB file, False when
    nothing is there yet; NotALedger for a directory, an empty (0-byte) file, an SQLite database or
    any other file. A DuckDB file may still hold some other database: `open_ledger` checks that."""
    p = ledger_path(path)
    try:
        if p.is_dir():
            raise NotALedger(f"{p} is a directory, not a ledger file")
        if not p.exists():
            return False
        if not p.is_file():
            raise NotALedger(f"{p} is not a regular file, so not a ledger")
        if p.stat().st_size == 0:
            raise NotALedger(f"{p} is empty (0 bytes), not a ledger: a mistaken path or a truncated "
                             "copy; restore the ledger from a backup or remove the file")
        with open(p, "rb") as f:
            head = f.read(16)
    except OSError as exc:
        raise LedgerError(f"cannot read ledger {p}: {exc.strerror or exc}") from None
    if head.startswith(SQLITE_MAGIC):
        raise NotALedger(f"{p} is an SQLite database, not a ledger")
    if head[8:12] != DUCKDB_MAGIC:
        raise NotALedger(f"{p} is not a DuckDB file, so not a ledger")
    return True


def _is_lock_error(exc: Exception) -> bool:
    text = str(exc)
    return "lock" in text.lower() and ("Conflicting" in text or "Could not set lock" in text)


def _is_held_in_process(exc: Exception) -> bool:
    """DuckDB's refusal to open a file this process has open with another configuration (read-only
    here, a write there): it passes when the other open closes, like another process's lock."""
    return "different configuration" in str(exc)


def _connect(path: Path, read_only: bool, timeout_s: float) -> duckdb.DuckDBPyConnection:
    deadline = time.monotonic() + timeout_s
    delay_s = 0.01
    if not read_only:
        _let_go(path)
    while True:
        try:
            return duckdb.connect(str(path), read_only=read_only, config=_CONFIG)
        except (duckdb.IOException, duckdb.ConnectionException) as exc:
            if not (_is_lock_error(exc) or _is_held_in_process(exc)):
                raise LedgerError(f"cannot open ledger {path}: {exc}") from exc
            if time.monotonic() >= deadline:
                holder = "another process" if _is_lock_error(exc) else "a page render of this process"
                raise LedgerLocked(
                    f"ledger {path} is locked by {holder} (waited {timeout_s:.1f} s); "
                    "try again when the import or submit holding it has finished"
                ) from exc
            time.sleep(delay_s * (0.5 + random.random()))
            delay_s = min(delay_s * 2, 0.25)
        except (duckdb.Error, OSError) as exc:
            raise LedgerError(f"cannot open ledger {path}: {exc}") from exc


# The ledgers this thread keeps open read-only (keep_reads_open): realpath -> connection.
_held: contextvars.ContextVar[dict | None] = contextvars.ContextVar("held_ledgers", default=None)


def keep_reads_open() -> None:
    """From now until this thread ends (or calls this again), keep each ledger it reads open
    read-only, for a unit of work made of many short reads: a dashboard page renders with five to
    ten, each of its own. Every read-only `open_ledger` of a kept ledger then joins the database
    DuckDB already has open in this process (under a millisecond) instead of opening the file again
    (30-40 ms on a 10^7-run ledger, reading its catalog), and finds DuckDB's cache of its blocks warm.

    A call closes what the thread kept since its last call (a new unit of work). The thread's end
    closes them too: Python drops a thread's context variables when it ends, and DuckDB closes a
    connection nobody holds. Meanwhile other processes' writes wait for them as for any reader, and
    a write open of a kept ledger in this thread closes it first. Made for threads that end with
    their unit of work, as a Streamlit script run's does."""
    held = _held.get()
    if held is None:
        _held.set({})
        return
    for con in held.values():
        con.close()
    held.clear()


def _keep(path: Path) -> None:
    """After `keep_reads_open` in this thread: hold the ledger at `path` open (one more read-only connection)."""
    held = _held.get()
    key = os.path.realpath(path)
    if held is not None and key not in held:
        held[key] = duckdb.connect(str(path), read_only=True, config=_CONFIG)


def _let_go(path: Path) -> None:
    """Close this context's kept read-only connection to `path`, before a write open of it."""
    held = _held.get()
    if held:
        con = held.pop(os.path.realpath(path), None)
        if con is not None:
            con.close()


def _name(path: Path | None) -> str:
    return f"ledger {path}" if path else "this ledger"


def _user_tables(con: duckdb.DuckDBPyConnection) -> list[str]:
    return [r[0] for r in con.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_catalog = current_database() "
        "ORDER BY table_schema, table_name").fetchall()]


def _schema_version(con: duckdb.DuckDBPyConnection, path: Path | None = None) -> int | None:
    """The ledger's schema version; None for a DuckDB database with no tables yet.

    Reads `meta` directly (a missing table means a new file): cheaper per open than asking
    information_schema, and every submit opens the ledger. Raises NotALedger for a database
    with tables but no schema version, LedgerError for a version that is not a whole number.
    """
    try:
        rows = con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchall()
    except (duckdb.CatalogException, duckdb.BinderException):
        rows = []
    if not rows:
        tables = _user_tables(con)
        if not tables:
            return None
        shown = ", ".join(tables[:_TABLES_SHOWN]) + (", …" if len(tables) > _TABLES_SHOWN else "")
        raise NotALedger(f"{path or 'this file'} is a DuckDB database but not a Training Gate ledger "
                         f"(it has tables {shown}, but no schema version)")
    value = rows[0][0]
    try:
        return int(value)
    except (TypeError, ValueError):
        raise LedgerError(f"{_name(path)} has schema version {value!r}, which is not a whole "
                          "number: its meta table is damaged; restore the ledger from a backup") from None


def _check_complete(con: duckdb.DuckDBPyConnection, path: Path) -> None:
    """Refuse a file too short to hold the blocks its own header says are in use (a truncated copy)."""
    rows = con.execute("SELECT block_size, used_blocks FROM pragma_database_size() "
                       "WHERE database_name = current_database()").fetchall()
    if not rows:
        return
    block_size, blocks = rows[0]
    size = path.stat().st_size
    if size < block_size * blocks:
        raise LedgerError(f"ledger {path} is truncated ({size:,} bytes, but {blocks:,} blocks of "
                          f"{block_size:,} bytes in use): restore it from a backup")


def ensure_schema(con: duckdb.DuckDBPyConnection, path: Path | None = None) -> None:
    """Create the schema on a new (table-less) database; refuse a ledger written by a newer program
    and any database that is not a ledger."""
    version = _schema_version(con, path)
    if version is not None and version > SCHEMA_VERSION:
        raise LedgerError(
            f"{_name(path)} has schema version {version}, newer than this program's "
            f"{SCHEMA_VERSION}: upgrade Training Gate before using it"
        )
    if version == SCHEMA_VERSION:
        return
    con.execute("BEGIN TRANSACTION")
    try:
        con.execute(_SCHEMA_SQL)
        if version is not None:
            _migrate(con, version)
        con.execute(
            "INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", [str(SCHEMA_VERSION)]
        )
        con.execute("COMMIT")
    except Exception:
        con.execute("ROLLBACK")
        raise


# version -> the statements that bring a ledger of that version to the next one. New tables need no
# step: schema.sql (all IF NOT EXISTS) runs first and creates them; a step adds what schema.sql cannot
# add to an existing table. Each statement is idempotent.
_MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: ("ALTER TABLE teams ADD COLUMN IF NOT EXISTS colour VARCHAR",),   # 2: team colours (+ prices table)
    2: ("ALTER TABLE decisions ADD COLUMN IF NOT EXISTS actor VARCHAR",),  # 3: who asked (+ audit table)
    3: team_weeks.REBUILD,                                                # 4: weekly usage, from runs
    # 5: pilot scaling (every team so far scaled linearly) and the Slurm time limits (the defaults)
    4: ("ALTER TABLE teams ADD COLUMN IF NOT EXISTS scaling_efficiency DOUBLE DEFAULT 1.0",
        "ALTER TABLE teams ADD COLUMN IF NOT EXISTS enforce_spend_limit BOOLEAN DEFAULT true",
        "ALTER TABLE teams ADD COLUMN IF NOT EXISTS set_time_limit BOOLEAN DEFAULT false"),
    # 6: the cluster_windows table (new tables only)
    6: ("ALTER TABLE teams ADD COLUMN IF NOT EXISTS queue_max_age_days INTEGER",),  # 7: the queue's age (+ pools)
    7: ("ALTER TABLE alerts ADD COLUMN IF NOT EXISTS claimed_by VARCHAR",            # 8: alert claims
        "ALTER TABLE alerts ADD COLUMN IF NOT EXISTS claimed_until TIMESTAMP"),
}


def _migrate(con: duckdb.DuckDBPyConnection, version: int) -> None:
    """Bring a ledger of schema `version` forward to SCHEMA_VERSION, inside ensure_schema's
    transaction (after schema.sql has created any new tables). Existing rows are kept; new
    columns are NULL."""
    for v in range(version, SCHEMA_VERSION):
        for statement in _MIGRATIONS.get(v, ()):
            con.execute(statement)


@contextlib.contextmanager
def open_ledger(path=None, *, read_only: bool = False, timeout_s: float | None = None,
                create: bool | None = None):
    """Open the ledger for one unit of work.

    A write open creates a missing ledger (and its folder), or the schema in a DuckDB file with no
    tables. A read-only open of a missing file creates it first when `create` is true; by default
    (`create=None`) only the configured ledger (`path` None: $GATE_DB, else data/gate.duckdb) is
    created, so a fresh machine reads an empty ledger, while a path the caller names must exist.
    Anything that is not a ledger raises NotALedger and is left unchanged. `timeout_s` (default
    $GATE_TIMEOUT_S, else 10 s) bounds the wait for a ledger another process holds.
    """
    p = ledger_path(path)
    if timeout_s is None:
        timeout_s = default_timeout_s()
    if create is None:
        create = not path
    if not read_only or create:
        owner_only_files()
    if not check_ledger_file(p):
        if read_only and not create:
            raise NotALedger(f"no ledger at {p}: check the path, or create one with "
                             "`python -m lib teams --db PATH` or an import")
        try:
            p.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise LedgerError(f"cannot create ledger {p}: {exc.strerror or exc}") from None
        if read_only:
            with contextlib.closing(_connect(p, False, timeout_s)) as con:
                ensure_schema(con, p)
    con = _connect(p, read_only, timeout_s)
    try:
        try:
            _check_complete(con, p)
            if not read_only:
                ensure_schema(con, p)
            else:
                _check_version_read_only(con, p)
                _keep(p)
        except duckdb.Error as exc:
            raise LedgerError(f"cannot use ledger {p}: {exc}") from exc
        yield con
    finally:
        con.close()


def _check_version_read_only(con, p: Path) -> None:
    version = _schema_version(con, p)
    if version is None:
        raise NotALedger(f"{p} is an empty DuckDB database, not a ledger yet: create one with "
                         "`python -m lib teams --db PATH` or an import")
    if version > SCHEMA_VERSION:
        raise LedgerError(
            f"ledger {p} has schema version {version}, newer than this program's {SCHEMA_VERSION}"
        )
    if version < SCHEMA_VERSION:
        raise LedgerError(f"ledger {p} needs migrating from schema version {version} to {SCHEMA_VERSION}: "
                          "open it for writing once (start the app, or run a command that writes, such as "
                          "`python -m lib teams`)")


def upgrade_ledger(path=None, *, timeout_s: float | None = None) -> bool:
    """Bring an existing ledger written by an older version of this program to SCHEMA_VERSION with
    one write open; True when it did. A missing file, an empty DuckDB file, a current ledger and a
    newer one are left alone (False: the next open says what is wrong); a file that is not a ledger
    raises NotALedger. For a reader (the app) that otherwise only opens read-only, which refuses an
    older ledger ("needs migrating")."""
    p = ledger_path(path)
    if timeout_s is None:
        timeout_s = default_timeout_s()
    if not check_ledger_file(p):
        return False
    with contextlib.closing(_connect(p, True, timeout_s)) as con:   # read-only: most ledgers are current
        try:
            version = _schema_version(con, p)
            if version is not None and version >= SCHEMA_VERSION:
                _keep(p)
        except duckdb.Error as exc:
            raise LedgerError(f"cannot use ledger {p}: {exc}") from exc
    if version is None or version >= SCHEMA_VERSION:
        return False
    with open_ledger(p, timeout_s=timeout_s):
        pass
    return True


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


def used_params(sql: str, params: dict | None) -> dict:
    """The named parameters the SQL text uses (DuckDB refuses unused ones)."""
    names = set(re.findall(r"\$([A-Za-z_]\w*)", sql))
    return {k: v for k, v in (params or {}).items() if k in names}
