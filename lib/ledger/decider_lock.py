"""Who may decide for a ledger: one warm gate server, or in-process deciders, never both.

The lock is an flock on the ledger file itself, so it follows the file's identity (device and inode)
and not the name it was opened by: a hard link, a second path through `..` or a bind mount all
reach the same lock. A gate server holds it exclusively for its lifetime (`ServerLock`); an
in-process decider (`python -m lib submit`, the Slurm hook without a server) holds it shared for the
length of one decision (`deciding_in_process`), opened before its DuckDB connection and closed after
it. Each refuses while the other holds it, with `ServerBusy` naming the holder's pid where the
kernel's lock table shows it.

flock and DuckDB's own (fcntl) file lock are independent on Linux: holding one never blocks the
other, and closing a DuckDB connection never drops this lock. `<ledger>.gate-server.lock` keeps
the server's pid for operators to read; it is not the lock.
"""
from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

try:
    import fcntl
except ImportError:  # pragma: no cover - not on Linux
    fcntl = None

from lib.ledger.connection import LedgerError, owner_only_files

# An in-process decider holds the shared lock for one decision only: a starting server waits this
# long for such holders before it calls the ledger busy.
SERVER_START_WAIT_S = 3.0


class ServerBusy(LedgerError):
    """A gate server decides for this ledger (or, to a starting server, another one already does)."""


def pid_file(ledger: Path) -> Path:
    return ledger.with_name(ledger.name + ".gate-server.lock")


def lock_holders(path: Path) -> list[int]:
    """The pids holding an flock on the file at `path` (from /proc/locks; [] where it cannot say)."""
    try:
        st = os.stat(path)
        with open("/proc/locks", encoding="ascii", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    want = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    pids = []
    for line in lines:
        parts = line.split()
        # "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF" (a waiter's line reads "1: -> FLOCK ...")
        if len(parts) >= 6 and parts[1] == "FLOCK" and parts[5] == want:
            with contextlib.suppress(ValueError):
                pids.append(int(parts[4]))
    return pids


def _holder_text(ledger: Path) -> str:
    pids = sorted(set(lock_holders(ledger)))
    return f"pid {', '.join(map(str, pids))}" if pids else "another process"


def _open_for_lock(ledger: Path) -> int:
    try:
        return os.open(ledger, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise LedgerError(f"cannot open ledger {ledger} to lock it: {exc.strerror or exc}") from None


def _take_exclusive(ledger: Path, wait_s: float) -> int:
    """An fd on `ledger` holding its exclusive lock. Waits up to `wait_s` seconds for in-process
    deciders; ServerBusy when another server holds it."""
    fd = _open_for_lock(ledger)
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() >= deadline:
                holder = _holder_text(ledger)
                os.close(fd)
                raise ServerBusy(f"ledger {ledger} is already served by a gate server ({holder}, "
                                 f"which holds the ledger file's lock, whatever name it opened it by); "
                                 "stop it first") from None
            time.sleep(0.02)


def _write_pid(ledger: Path) -> None:
    owner_only_files()
    with contextlib.suppress(OSError):
        pid_fd = os.open(pid_file(ledger), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            os.ftruncate(pid_fd, 0)
            os.pwrite(pid_fd, str(os.getpid()).encode(), 0)
        finally:
            os.close(pid_fd)


class ServerLock:
    """The exclusive decider lock a gate server holds for its lifetime, on a descriptor of the ledger
    that stays open until `release`: closing a descriptor of the ledger would drop every fcntl lock
    this process holds on it, DuckDB's included (POSIX), so the server also reads the ledger's
    change stamp through it (`fd`), and keeps the descriptors of a replaced file until it stops.

    Take it before this process opens the ledger with DuckDB (a refusal closes its descriptor)."""

    def __init__(self, ledger: Path, wait_s: float = SERVER_START_WAIT_S, *, record_pid: bool = True):
        self.ledger, self.wait_s = Path(ledger), wait_s
        self._replaced: list[int] = []
        self.fd = _take_exclusive(self.ledger, wait_s) if fcntl is not None else -1
        if record_pid:  # a server, not a command line draining a stopped server's journal
            _write_pid(self.ledger)

    def follow(self) -> None:
        """When another file now stands under the ledger's name (a demo rebuild replaces it), take
        the lock on that one too. Call while this process has no DuckDB connection to the ledger."""
        try:
            st = os.stat(self.ledger)
        except FileNotFoundError:
            return
        held = os.fstat(self.fd)
        if (held.st_dev, held.st_ino) != (st.st_dev, st.st_ino):
            fd = _take_exclusive(self.ledger, self.wait_s)
            self._replaced.append(self.fd)
            self.fd = fd

    def release(self) -> None:
        for fd in (self.fd, *self._replaced):
            if fd >= 0:
                os.close(fd)
        self.fd, self._replaced = -1, []


@contextlib.contextmanager
def deciding_in_process(ledger: Path):
    """Hold the shared lock for one in-process decision; ServerBusy at once when a gate server
    holds the ledger (deciding here too could book the same accelerators twice). A ledger that does
    not exist yet has no server: nothing to hold."""
    if fcntl is None:  # pragma: no cover - not on Linux
        yield
        return
    try:
        fd = os.open(ledger, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        yield
        return
    except OSError as exc:
        raise LedgerError(f"cannot open ledger {ledger} to lock it: {exc.strerror or exc}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ServerBusy(f"ledger {ledger} is served by a gate server ({_holder_text(ledger)}); "
                             "decide through it (set TG_GATE_SOCKET to its socket) or stop it first") from None
        yield
    finally:
        os.close(fd)
