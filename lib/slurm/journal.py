"""The warm gate server's journal: every decision it makes is durable here before it answers.

A SQLite file (standard library; WAL mode, synchronous=FULL: a commit is on disk when it returns)
beside the ledger, `<ledger>.gate-journal`. One row per decision, numbered `seq` (never reused), with
a status:

    0 decided      written before the answer; not yet known whether the caller got it
    1 answered     the answer went out: this decision belongs in the ledger
    2 unanswered   the caller hung up before its answer went out: not recorded

The server's flusher moves entries into the ledger in `seq` order (lib.ledger.batch), answered ones
as decisions, unanswered ones only as a moved mark, and stops at the first entry still `decided`.
Entries the ledger has are deleted from the journal.

Group commit: with sync FULL a decision is answered only once its entry is on disk, and decisions that
arrive together share one fsync. `append(..., durable=False)` writes the entry (a SQLite commit in WAL
mode without its fsync: the entry is in the operating system's hands, so a killed server loses
nothing), and `make_durable(seq)` returns once an fsync of the WAL file has covered it: the first caller
to arrive runs the fsync for every entry written so far, the others wait for it, or for the next. A
WAL file reused after a checkpoint had its header synced by SQLite first (synchronous=NORMAL does).

On start a server takes every `decided` entry left by a crashed server as `answered`: the server
may have died after its answer went out and before it noted that, and an answered admit missing
from the ledger could let the gate book the same GPUs twice. The price: a job whose answer was
still on its way when the server died (at most one per connection in flight) is recorded, and
its reservation holds quota until its window ends, although Slurm refused the job for want of
an answer. The gate errs towards refusing, never towards double-booking.

Without a server (the hook deciding in-process, the command line): `drain_left_over_journal` first
moves what a stopped server journaled into the ledger, so that decision sees every one it answered.
"""
from __future__ import annotations

import json
import os
import sqlite3
import threading
import uuid
from datetime import datetime
from pathlib import Path

from lib.gate.terms import escape_surrogates
from lib.ledger.audit import os_actor
from lib.ledger.batch import apply_batch
from lib.ledger.connection import ledger_path
from lib.ledger.decider_lock import ServerLock
from lib.ledger.writer import write_ledger

DECIDED, ANSWERED, UNANSWERED = 0, 1, 2

_SCHEMA = """
CREATE TABLE IF NOT EXISTS entries (
    seq            INTEGER PRIMARY KEY AUTOINCREMENT,
    decided_at     TEXT NOT NULL,      -- naive UTC, ISO 8601
    origin         TEXT NOT NULL,
    request_json   TEXT NOT NULL,
    decision_json  TEXT NOT NULL,
    state          TEXT NOT NULL,      -- the decision's state (admit | defer | reject)
    caller_uid     INTEGER,            -- the socket peer's credentials (SO_PEERCRED)
    caller_pid     INTEGER,
    actor          TEXT,               -- who asked, as the ledger records it (NULL: the peer's uid)
    status         INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


class JournalError(Exception):
    """The journal cannot be written (full disk, unwritable file): no decision may be answered."""


def journal_path(ledger: Path) -> Path:
    return ledger.with_name(ledger.name + ".gate-journal")


class Journal:
    """One open journal file; thread-safe (one connection behind a lock).

    `max_mb`: the journal may grow to this many MiB (SQLite's max_page_count); past it appends fail
    as on a full disk. None: no bound but the disk's. `sync`: FULL (default) fsyncs every decision
    before the answer, surviving a power loss; NORMAL survives the server's crash (kill -9) but not
    the machine's, and saves the fsync (slow on a busy disk) on every sbatch.
    """

    def __init__(self, path: Path, *, max_mb: float | None = None, sync: str = "FULL"):
        if sync not in ("FULL", "NORMAL"):
            raise JournalError(f"journal sync must be FULL or NORMAL, not {sync!r}")
        self.path, self.sync = Path(path), sync
        self._mu = threading.Lock()
        try:
            self._con = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=5)
            self._con.execute("PRAGMA journal_mode=WAL")
            self._con.execute(f"PRAGMA synchronous={sync}")
            self._con.executescript(_SCHEMA)
            columns = {r[1] for r in self._con.execute("PRAGMA table_info(entries)").fetchall()}
            if "actor" not in columns:  # a journal written before decisions named their actor
                self._con.execute("ALTER TABLE entries ADD COLUMN actor TEXT")
            if max_mb is not None:
                page = self._con.execute("PRAGMA page_size").fetchone()[0]
                self._con.execute(f"PRAGMA max_page_count={max(16, int(max_mb * 1048576 // page))}")
            row = self._con.execute("SELECT value FROM meta WHERE key = 'journal_id'").fetchone()
            if row is None:
                self._con.execute("INSERT INTO meta VALUES ('journal_id', ?)", [uuid.uuid4().hex])
                row = self._con.execute("SELECT value FROM meta WHERE key = 'journal_id'").fetchone()
        except sqlite3.Error as exc:
            raise JournalError(f"gate journal {self.path}: {exc}") from None
        self.journal_id: str = row[0]
        self._durable = threading.Condition()   # group commit (see the module docstring)
        self._written = self._synced = 0        # the highest seq written, and made durable by an fsync
        self._syncing = False
        self._wal_fd: int | None = None

    def close(self) -> None:
        with self._mu:
            self._con.close()
        with self._durable:
            if self._wal_fd is not None:
                os.close(self._wal_fd)
                self._wal_fd = None

    def append(self, *, decided_at: datetime, origin: str, request_json: str, decision_json: str,
               state: str, caller_uid: int | None, caller_pid: int | None, actor: str | None = None,
               durable: bool = True) -> int:
        """Write one decision (status decided); its seq. `durable`: on disk before this returns (else
        call `make_durable(seq)` before answering). Raises JournalError. Any text can be written: a
        lone surrogate (which SQLite's UTF-8 cannot hold) goes in as its \\udXXX escape, in the JSON
        columns as the JSON escape that reads back as the same text."""
        try:
            with self._mu:
                if not durable:
                    self._con.execute("PRAGMA synchronous=NORMAL")
                try:
                    cur = self._con.execute(
                        "INSERT INTO entries (decided_at, origin, request_json, decision_json, state, caller_uid, "
                        "caller_pid, actor) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                        [decided_at.isoformat(), escape_surrogates(origin), escape_surrogates(request_json),
                         escape_surrogates(decision_json), escape_surrogates(state), caller_uid, caller_pid,
                         None if actor is None else escape_surrogates(actor)])
                finally:
                    if not durable:
                        self._con.execute(f"PRAGMA synchronous={self.sync}")
                seq = int(cur.lastrowid)
        except sqlite3.Error as exc:
            raise JournalError(f"gate journal {self.path}: {exc}") from None
        with self._durable:
            self._written = max(self._written, seq)
            if durable or self.sync != "FULL":
                self._synced = max(self._synced, seq)
        return seq

    def make_durable(self, seq: int) -> None:
        """Return once entry `seq` is on disk (group commit: see the module docstring). Raises JournalError."""
        with self._durable:
            while self._synced < seq:
                if self._syncing:
                    self._durable.wait()
                    continue
                self._syncing, target = True, self._written
                self._durable.release()
                try:
                    self._fsync_wal()
                except OSError as exc:
                    raise JournalError(f"gate journal {self.path}: fsync: {exc}") from None
                finally:
                    self._durable.acquire()
                    self._syncing = False
                    self._durable.notify_all()
                self._synced = max(self._synced, target)

    def _fsync_wal(self) -> None:
        if self._wal_fd is None:
            self._wal_fd = os.open(self.path.with_name(self.path.name + "-wal"), os.O_RDONLY)
        os.fsync(self._wal_fd)

    def settle(self, seq: int, status: int) -> None:
        """Mark entry `seq` answered or unanswered. Not fsync'ed (synchronous=NORMAL in WAL mode): the
        mark survives the server's crash, not the machine's; an entry whose mark a power loss took
        back is still `decided`, and the next start takes it as answered (see the module docstring)."""
        with self._mu:
            self._con.execute("PRAGMA synchronous=NORMAL")
            try:
                self._con.execute("UPDATE entries SET status = ? WHERE seq = ?", [status, seq])
            finally:
                self._con.execute(f"PRAGMA synchronous={self.sync}")

    def left_over(self) -> list[int]:
        """The seqs of the entries still `decided`."""
        with self._mu:
            return [r[0] for r in self._con.execute("SELECT seq FROM entries WHERE status = 0").fetchall()]

    def settle_left_over(self) -> list[int]:
        """Mark every entry still `decided` answered (on start: see the module docstring); their seqs."""
        seqs = self.left_over()
        with self._mu:
            self._con.execute("UPDATE entries SET status = 1 WHERE status = 0")
        return seqs

    def settled(self, after: int, limit: int = 500, marks: dict[int, int] | None = None) -> list[dict]:
        """Entries after `after` in seq order, up to the first one still decided (exclusive).
        `marks`: seq -> status known in memory but not yet written (a full disk), taken as written."""
        marks = marks or {}
        with self._mu:
            rows = self._con.execute(
                "SELECT seq, decided_at, origin, request_json, decision_json, status, caller_uid, actor FROM entries "
                "WHERE seq > ? ORDER BY seq LIMIT ?", [after, limit]).fetchall()
        out = []
        for seq, at, origin, req, dec, status, uid, actor in rows:
            status = marks.get(seq, status)
            if status == DECIDED:
                break
            out.append({"seq": seq, "decided_at": datetime.fromisoformat(at), "origin": origin,
                        "request": json.loads(req), "decision": json.loads(dec), "record": status == ANSWERED,
                        "actor": actor or (os_actor(uid) if uid is not None else None)})
        return out

    def pending(self, after: int) -> list[dict]:
        """Entries after `after` that are not unanswered (the ledger does not have them yet)."""
        with self._mu:
            rows = self._con.execute(
                "SELECT seq, decided_at, origin, request_json, decision_json, status FROM entries "
                "WHERE seq > ? AND status != 2 ORDER BY seq", [after]).fetchall()
        return [{"seq": seq, "decided_at": datetime.fromisoformat(at), "origin": origin,
                 "request": json.loads(req), "decision": json.loads(dec), "status": status}
                for seq, at, origin, req, dec, status in rows]

    def forget_through(self, seq: int) -> None:
        """Delete the entries the ledger has (through `seq`)."""
        with self._mu:
            self._con.execute("DELETE FROM entries WHERE seq <= ?", [seq])

    def count(self, through: int | None = None) -> int:
        """The entries kept (with `through`: those up to that seq)."""
        with self._mu:
            return self._con.execute("SELECT count(*) FROM entries WHERE seq <= ?",
                                     [(1 << 62) if through is None else through]).fetchone()[0]

    def last_seq(self) -> int:
        """The newest entry's seq (0 when none is kept)."""
        with self._mu:
            return self._con.execute("SELECT coalesce(max(seq), 0) FROM entries").fetchone()[0]


def drain_left_over_journal(db=None, *, timeout_s: float = 5.0) -> int:
    """Before deciding without a server: move what a stopped server journaled into the ledger, so an
    in-process decision sees every decision the server answered. Returns how many were recorded.

    Costs one stat when there is no journal. Raises ServerBusy when a server still holds the ledger
    (it is alive but did not answer: deciding here could book the same GPUs twice).
    """
    ledger = ledger_path(db).resolve()
    path = journal_path(ledger)
    if not path.exists():
        return 0
    lock = ServerLock(ledger, record_pid=False)
    try:
        journal = Journal(path)
        try:
            journal.settle_left_over()
            entries = journal.settled(0, limit=1 << 30)
            recorded = 0
            if entries:
                with write_ledger(ledger, timeout_s) as con:
                    recorded = apply_batch(con, journal.journal_id, entries)
                journal.forget_through(entries[-1]["seq"])
            empty = journal.count() == 0
        finally:
            journal.close()
        if empty:  # nothing left: the next in-process decision pays only the stat
            for p in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
                p.unlink(missing_ok=True)
        return recorded
    finally:
        lock.release()
