"""Writing to the ledger: every writer of the gate takes its turn, then DuckDB's own file lock.

`writer_turn` queues this machine's writers of one ledger on a cheap OS lock beside it
(`<ledger>.writer-lock`); `write_ledger` is the ledger opened for writing inside that turn, with one
timeout for both waits. Submit, finish and the gate server's batches all write this way.
"""
from __future__ import annotations

import contextlib
import os
import threading
import time
from pathlib import Path

try:
    import fcntl
except ImportError:  # pragma: no cover - not on Linux
    fcntl = None

from lib.ledger.connection import LedgerLocked, NotALedger, ledger_path, open_ledger, owner_only_files


@contextlib.contextmanager
def writer_turn(db=None, timeout_s: float = 10.0):
    """Wait for this process's turn among the gate's writers of this ledger; yields the time left.

    Submitters on one machine queue on a cheap OS lock (flock on `<ledger>.writer-lock`) instead of
    all polling DuckDB's file lock at once: with 20 submitters, polling DuckDB starves the process
    that holds the file of CPU on a small machine. The wait blocks in the kernel's queue of that
    lock, so writers get their turns in the order they arrived. DuckDB's own lock (and lib.ledger.connection's
    bounded retry) still guards against every other process (the app, an import). Without fcntl
    (Windows) this is a no-op. Raises LedgerLocked after `timeout_s` seconds.
    """
    if fcntl is None:  # pragma: no cover - not on Linux
        yield timeout_s
        return
    started = time.monotonic()
    path = ledger_path(db)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = _lock_in_turn(_writer_lock_file(path), timeout_s)
    if fd is None:
        raise LedgerLocked(
            f"ledger {path} is locked by another process (waited {time.monotonic() - started:.1f} s "
            f"for other submitters, timeout {timeout_s:.1f} s); try again when they have finished")
    try:
        yield max(0.05, timeout_s - (time.monotonic() - started))
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def _lock_in_turn(lock_path, timeout_s: float) -> int | None:
    """A descriptor holding an exclusive flock on `lock_path`, or None after `timeout_s` seconds.

    flock has no timeout, so a helper thread makes the blocking call while this thread waits at
    most `timeout_s`. When this thread stops waiting first, the descriptor is the helper's: it
    closes it (releasing the lock at once) when the kernel grants the lock.
    """
    owner_only_files()
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return fd
    except BlockingIOError:
        pass
    except BaseException:
        os.close(fd)
        raise
    guard, granted = threading.Lock(), threading.Event()
    gave_up: list[bool] = []
    failed: list[OSError] = []

    def wait() -> None:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError as exc:
            failed.append(exc)
        with guard:
            if gave_up:
                os.close(fd)
            else:
                granted.set()

    threading.Thread(target=wait, name="ledger-writer-turn", daemon=True).start()
    try:
        granted.wait(timeout_s)
    finally:
        with guard:
            if not granted.is_set():
                gave_up.append(True)
    if gave_up:
        return None
    if failed:
        os.close(fd)
        raise failed[0]
    return fd


def _writer_lock_file(ledger: Path) -> Path:
    """The file writers of `ledger` take turns on."""
    return ledger.with_name(ledger.name + ".writer-lock")


@contextlib.contextmanager
def write_ledger(db, timeout_s: float):
    """The ledger opened for writing in this process's writer turn (see `writer_turn`).

    Raises LedgerLocked when the turn and DuckDB's file lock together take longer than `timeout_s`
    seconds; its message reports the whole time waited, both locks included.
    """
    started = time.monotonic()
    lock_file = _writer_lock_file(ledger_path(db))
    lock_existed = lock_file.exists()
    with writer_turn(db, timeout_s) as left_s, contextlib.ExitStack() as stack:
        try:
            con = stack.enter_context(open_ledger(db, read_only=False, timeout_s=left_s))
        except NotALedger:   # someone else's file: leave nothing of ours beside it
            if not lock_existed:
                lock_file.unlink(missing_ok=True)
            raise
        except LedgerLocked as exc:
            raise LedgerLocked(
                f"ledger {ledger_path(db)} is locked by another process (waited "
                f"{time.monotonic() - started:.1f} s, timeout {timeout_s:.1f} s); try again when the "
                "import or submit holding it has finished") from exc
        yield con
