"""A path that holds no ledger is refused, named, and left exactly as it was.

Another DuckDB database, an SQLite database, a text file, random bytes, an empty file, a directory:
`open_ledger` refuses each (read or write) and `python -m lib` exits 2 saying what the file is,
without writing a byte, leaving a WAL, or asking DuckDB to fetch an extension. A missing file is
created by a write, or on the first read of the configured ledger; a read of a path the caller
names must find a ledger there. Real files and real `python -m lib` processes throughout.
"""
from __future__ import annotations

import random
import re
import sqlite3

import duckdb
import pytest

from lib.ledger.connection import SCHEMA_VERSION, LedgerError, NotALedger, open_ledger
from tests.fixtures_app import fill_ledger
from tests.fixtures_ledger import REPO, demo_request, run_cli, write_json


def foreign_duckdb(path) -> None:
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE runs (id INTEGER, note VARCHAR); CREATE TABLE x (y DOUBLE); "
                "INSERT INTO runs VALUES (1, 'theirs')")
    con.close()


def sqlite_db(path) -> None:
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE runs (id INTEGER)")
    con.execute("INSERT INTO runs VALUES (1)")
    con.commit()
    con.close()


NOT_LEDGERS = {
    "foreign-duckdb": (foreign_duckdb, "is a DuckDB database but not a Training Gate ledger "
                                       "(it has tables runs, x, but no schema version)"),
    "sqlite": (sqlite_db, "is an SQLite database, not a ledger"),
    "text": (lambda p: p.write_text("run_id,team\nr1,vision\n"), "is not a DuckDB file"),
    "random-bytes": (lambda p: p.write_bytes(random.Random(1).randbytes(20_000)), "is not a DuckDB file"),
    "zero-bytes": (lambda p: p.write_bytes(b""), "is empty (0 bytes)"),
    "directory": (lambda p: p.mkdir(), "is a directory"),
}


def snapshot(folder) -> dict:
    """Every path under `folder` with its bytes (None for a directory)."""
    return {str(f.relative_to(folder)): (f.read_bytes() if f.is_file() else None)
            for f in sorted(folder.rglob("*"))}


def make(tmp_path, kind: str):
    """`kind` of file at theirs/gate.duckdb: (its path, the folder holding only it, the message)."""
    folder = tmp_path / "theirs"
    folder.mkdir()
    path = folder / "gate.duckdb"
    maker, message = NOT_LEDGERS[kind]
    maker(path)
    return path, folder, message


# ------------------------------------------------------------------------------------ open_ledger

@pytest.mark.parametrize("read_only", [False, True], ids=["write", "read"])
@pytest.mark.parametrize("kind", NOT_LEDGERS)
def test_open_ledger_refuses_what_is_not_a_ledger_and_leaves_it_unchanged(tmp_path, kind, read_only):
    path, folder, message = make(tmp_path, kind)
    before = snapshot(folder)
    with pytest.raises(NotALedger) as refused:
        with open_ledger(path, read_only=read_only, timeout_s=1):
            pass
    assert str(path) in str(refused.value) and message in str(refused.value)
    assert snapshot(folder) == before


def test_a_duckdb_file_with_no_tables_becomes_a_ledger_on_its_first_write(tmp_path):
    path = tmp_path / "new.duckdb"
    duckdb.connect(str(path)).close()
    with pytest.raises(NotALedger, match="empty DuckDB database"):
        with open_ledger(path, read_only=True):
            pass
    with open_ledger(path) as con:
        assert con.execute("SELECT value FROM meta").fetchall() == [(str(SCHEMA_VERSION),)]


def test_a_read_of_a_named_path_that_does_not_exist_creates_nothing(tmp_path):
    path = tmp_path / "typo" / "gate.duckdb"
    with pytest.raises(NotALedger, match=f"no ledger at {re.escape(str(path))}: check the path"):
        with open_ledger(path, read_only=True):
            pass
    assert list(tmp_path.iterdir()) == []
    with open_ledger(path):  # a write creates it, folder included
        pass
    with open_ledger(path, read_only=True) as con:
        assert con.execute("SELECT count(*) FROM runs").fetchall() == [(0,)]


def test_the_configured_ledger_is_created_on_its_first_read(tmp_path, monkeypatch):
    path = tmp_path / "fresh" / "gate.duckdb"
    monkeypatch.setenv("GATE_DB", str(path))
    with open_ledger(read_only=True) as con:
        assert con.execute("SELECT count(*) FROM runs").fetchall() == [(0,)]
    assert path.is_file()


def test_a_schema_version_that_is_not_a_number_names_the_ledger_and_the_version(tmp_path):
    path = tmp_path / "gate.duckdb"
    with open_ledger(path) as con:
        con.execute("UPDATE meta SET value = 'abc' WHERE key = 'schema_version'")
    for read_only in (False, True):
        with pytest.raises(LedgerError) as refused:
            with open_ledger(path, read_only=read_only):
                pass
        assert f"ledger {path} has schema version 'abc', which is not a whole number" in str(refused.value)
    p = run_cli("--db", path, "check", write_json(tmp_path / "r.json", demo_request()))
    assert p.returncode == 3
    assert f"ledger {path} has schema version 'abc'" in p.stderr and "int()" not in p.stderr


def test_a_truncated_ledger_is_refused_and_left_as_it_is(tmp_path):
    whole = tmp_path / "whole.duckdb"
    fill_ledger(whole, n_runs=300)
    data = whole.read_bytes()
    path = tmp_path / "theirs" / "gate.duckdb"
    path.parent.mkdir()
    path.write_bytes(data[:len(data) // 2])
    before = snapshot(path.parent)
    for read_only in (True, False):
        with pytest.raises(LedgerError, match=f"ledger {re.escape(str(path))} is truncated"):
            with open_ledger(path, read_only=read_only, timeout_s=1):
                pass
    assert snapshot(path.parent) == before


def test_duckdb_never_installs_or_loads_an_extension_on_its_own(tmp_path):
    with open_ledger(tmp_path / "gate.duckdb") as con:
        assert con.execute("SELECT current_setting('autoinstall_known_extensions'), "
                           "current_setting('autoload_known_extensions')").fetchall() == [(False, False)]
        # what the ledger uses is built in: time zones (ICU) and JSON
        assert con.execute("SELECT TIMESTAMPTZ '2026-01-01 00:00:00+00' AT TIME ZONE 'Europe/Paris', "
                           "json_extract('{\"a\": 1}', '$.a')::INT").fetchall()[0][1] == 1


# ------------------------------------------------------------------------------------ python -m lib

def cli_args(command: str, tmp_path) -> list:
    req = write_json(tmp_path / "r.json", demo_request())
    return {"check": ["check", req], "submit": ["submit", req], "teams": ["teams"],
            "import": ["import", REPO / "data" / "runs_template.csv"],
            "import-dry-run": ["import", REPO / "data" / "runs_template.csv", "--dry-run"],
            "export": ["export"], "demo": ["demo", "--runs", "5"]}[command]


@pytest.mark.parametrize("kind, command", [
    (kind, command)
    for kind in ("foreign-duckdb", "sqlite")
    for command in ("check", "submit", "teams", "import", "import-dry-run", "export", "demo")])
def test_the_command_line_refuses_a_db_that_is_not_a_ledger_and_leaves_it_unchanged(tmp_path, kind, command):
    path, folder, message = make(tmp_path, kind)
    before = snapshot(folder)
    p = run_cli("--db", path, *cli_args(command, tmp_path))
    assert p.returncode == 2, p.stderr
    assert f"{path} {message}" in p.stderr
    assert "Traceback" not in p.stderr and p.stdout == ""
    assert path.read_bytes() == before["gate.duckdb"]
    assert snapshot(folder) == before


def test_submit_refuses_a_foreign_duckdb_file_without_writing_to_it(tmp_path):
    path, folder, message = make(tmp_path, "foreign-duckdb")
    before = path.read_bytes()
    p = run_cli("--db", path, "submit", write_json(tmp_path / "r.json", demo_request()))
    assert p.returncode == 2 and message in p.stderr
    assert path.read_bytes() == before
    assert not path.with_name(path.name + ".wal").exists()
    assert duckdb.connect(str(path), read_only=True).execute("SELECT * FROM runs").fetchall() == [(1, "theirs")]


@pytest.mark.parametrize("kind", ["text", "random-bytes", "zero-bytes", "directory"])
def test_the_command_line_names_what_the_db_is(tmp_path, kind):
    path, folder, message = make(tmp_path, kind)
    before = snapshot(folder)
    p = run_cli("--db", path, "check", write_json(tmp_path / "r.json", demo_request()))
    assert p.returncode == 2 and f"check: {path} {message}" in p.stderr
    assert snapshot(folder) == before


@pytest.mark.parametrize("command", ["check", "export", "import-dry-run"])
def test_a_read_with_a_mistyped_db_exits_2_and_creates_nothing(tmp_path, command):
    args = cli_args(command, tmp_path)
    before = snapshot(tmp_path)
    path = tmp_path / "typo" / "gaet.duckdb"
    p = run_cli("--db", path, *args)
    assert p.returncode == 2, p.stderr
    assert f"no ledger at {path}: check the path" in p.stderr and p.stdout == ""
    assert snapshot(tmp_path) == before


def test_an_sqlite_db_is_refused_before_duckdb_could_fetch_an_extension(tmp_path):
    path, folder, message = make(tmp_path, "sqlite")
    home = tmp_path / "home"
    home.mkdir()
    p = run_cli("--db", path, "check", write_json(tmp_path / "r.json", demo_request()),
                env={"HOME": str(home)})
    assert p.returncode == 2 and message in p.stderr
    assert "extension" not in p.stderr.lower() and "http" not in p.stderr.lower()
    assert list(home.iterdir()) == []  # DuckDB makes ~/.duckdb/extensions before a download
