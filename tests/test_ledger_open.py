"""Opening the ledger: created on first use, versioned, refused when newer, bounded wait on a lock."""
import subprocess
import sys
import time

import pytest

from lib.ledger.connection import SCHEMA_VERSION, LedgerError, LedgerLocked, open_ledger


def test_a_new_ledger_is_created_with_its_schema_version(tmp_path):
    p = tmp_path / "sub" / "gate.duckdb"
    with open_ledger(p, read_only=True, create=True) as con:
        assert con.execute("SELECT value FROM meta WHERE key='schema_version'").fetchall() == \
            [(str(SCHEMA_VERSION),)]
        # the open leaves no pending result behind: the next query on the handle works
        assert con.sql("SELECT count(*) FROM runs").fetchall() == [(0,)]


def test_a_ledger_from_a_newer_program_is_refused_with_a_clear_message(tmp_path):
    p = tmp_path / "gate.duckdb"
    with open_ledger(p) as con:
        con.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", [str(SCHEMA_VERSION + 1)])
    for read_only in (False, True):
        with pytest.raises(LedgerError, match="newer than this program"):
            with open_ledger(p, read_only=read_only):
                pass


def test_a_locked_ledger_waits_then_says_so(tmp_path):
    p = tmp_path / "gate.duckdb"
    with open_ledger(p):
        pass
    holder = subprocess.Popen(
        [sys.executable, "-c", "import duckdb,sys,time; c=duckdb.connect(sys.argv[1]); print('held', flush=True); time.sleep(30)", str(p)],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        t0 = time.monotonic()
        with pytest.raises(LedgerLocked, match="locked by another process"):
            with open_ledger(p, read_only=True, timeout_s=0.5):
                pass
        assert time.monotonic() - t0 < 5
    finally:
        holder.kill()
        holder.wait()
    with open_ledger(p, read_only=True, timeout_s=5) as con:  # free again once the holder is gone
        assert con.execute("SELECT count(*) FROM runs").fetchall() == [(0,)]
