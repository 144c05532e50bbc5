"""A thread that keeps its reads open (a page render: lib.ledger.connection.keep_reads_open) opens the
ledger's file once, lets go of it when it ends, when it starts a new unit of work, or before it writes;
a write elsewhere in the process waits for it instead of failing, and one in another process waits
as it does for any reader."""
import subprocess
import sys
import threading
import time

import pytest

from lib.ledger.connection import keep_reads_open, open_ledger

COUNT = "SELECT count(*) FROM runs"


@pytest.fixture
def empty_ledger(tmp_path):
    """A new ledger file: the schema, no rows."""
    p = tmp_path / "gate.duckdb"
    with open_ledger(p):
        pass
    return p


def _write(p, timeout_s=5.0) -> None:
    with open_ledger(p, timeout_s=timeout_s) as con:
        con.execute("UPDATE meta SET value = value WHERE key = 'schema_version'")


def _in_thread(fn):
    """Run fn in a thread of its own, wait for it; its exception, if any, is raised here."""
    failed = []

    def run():
        try:
            fn()
        except BaseException as exc:   # noqa: BLE001 - handed to the caller
            failed.append(exc)
    t = threading.Thread(target=run)
    t.start()
    t.join(60)
    if failed:
        raise failed[0]


def test_a_thread_that_ends_lets_go_of_what_it_kept(empty_ledger):
    def render():
        keep_reads_open()
        for _ in range(3):
            with open_ledger(empty_ledger, read_only=True) as con:
                assert con.execute(COUNT).fetchone() == (0,)
    _in_thread(render)
    t0 = time.monotonic()
    _write(empty_ledger, timeout_s=0.5)   # would wait, then fail, had the kept open outlived its thread
    assert time.monotonic() - t0 < 0.5


def test_a_write_in_the_keeping_thread_closes_the_kept_open_first(empty_ledger):
    def render_then_write():
        keep_reads_open()
        with open_ledger(empty_ledger, read_only=True):
            pass
        _write(empty_ledger, timeout_s=0.5)
        with open_ledger(empty_ledger, read_only=True) as con:   # and reads after it see the write's ledger
            assert con.execute(COUNT).fetchone() == (0,)
    _in_thread(render_then_write)


def test_a_write_in_another_thread_waits_for_the_keeper_and_a_new_unit_of_work_lets_go(empty_ledger):
    kept, release, wrote = threading.Event(), threading.Event(), []

    def render():
        keep_reads_open()
        with open_ledger(empty_ledger, read_only=True):
            pass
        kept.set()
        release.wait(30)
        keep_reads_open()          # the next unit of work: what the last one kept is closed
        time.sleep(5)              # the thread lives on: only the call let go

    keeper = threading.Thread(target=render)
    keeper.start()
    assert kept.wait(30)
    writer = threading.Thread(target=lambda: wrote.append(_write(empty_ledger, timeout_s=20) or time.monotonic()))
    writer.start()
    time.sleep(0.5)
    assert wrote == []             # waiting, not refused
    released_at = time.monotonic()
    release.set()
    writer.join(30)
    assert wrote and wrote[0] >= released_at and wrote[0] - released_at < 4
    keeper.join(30)


def test_another_process_waits_for_a_kept_open_as_for_any_reader(empty_ledger):
    script = ("import sys; from lib.ledger.connection import open_ledger, LedgerLocked\n"
              "try:\n    open_ledger(sys.argv[1], timeout_s=0.5).__enter__(); print('wrote')\n"
              "except LedgerLocked: print('locked')\n")
    kept, release = threading.Event(), threading.Event()

    def render():
        keep_reads_open()
        with open_ledger(empty_ledger, read_only=True):
            pass
        kept.set()
        release.wait(60)

    keeper = threading.Thread(target=render)
    keeper.start()
    assert kept.wait(30)

    def other_process() -> str:
        return subprocess.run([sys.executable, "-c", script, str(empty_ledger)], capture_output=True, text=True,
                              timeout=120).stdout.strip()
    try:
        assert other_process() == "locked"
    finally:
        release.set()
        keeper.join(30)
    assert other_process() == "wrote"
