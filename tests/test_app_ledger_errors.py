"""The dashboard on a ledger it cannot use: every page, frame and sidebar included, says what is
wrong in an error box, never a traceback, and leaves the file as it was; the Upload page turns every
failure of an import into a message. Real ledgers, real AppTest, a real second process for a lock.
"""
from __future__ import annotations

import datetime as dt
import random
import subprocess
import sys

import duckdb
import pytest
from streamlit.testing.v1 import AppTest

from lib.ledger.connection import SCHEMA_VERSION, open_ledger
from tests.fixtures_app import ROOT, fill_ledger, page_script, run_count

PAGES = ["overview", "reservations", "idle_capacity", "estimate_accuracy", "what_if",
         "recovery_planner", "upload", "stops_promotion"]
TIMEOUT_S = 60

pytestmark = pytest.mark.usefixtures("fresh_caches")


def whole_ledger(path) -> bytes:
    fill_ledger(path, n_runs=60)
    return path.read_bytes()


def truncated(path) -> None:
    data = whole_ledger(path.with_name("whole.duckdb"))
    path.write_bytes(data[:len(data) // 2])


def newer_schema(path) -> None:
    fill_ledger(path, n_runs=20)
    with open_ledger(path) as con:
        con.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", [str(SCHEMA_VERSION + 1)])


def foreign(path) -> None:
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE runs (id INTEGER); CREATE TABLE x (y INTEGER)")
    con.close()


BROKEN = {
    "zero-bytes": (lambda p: p.write_bytes(b""), "is empty (0 bytes)"),
    "truncated": (truncated, "is truncated"),
    "directory": (lambda p: p.mkdir(), "is a directory"),
    "random-bytes": (lambda p: p.write_bytes(random.Random(2).randbytes(50_000)), "is not a DuckDB file"),
    "text": (lambda p: p.write_text("this is not a database\n"), "is not a DuckDB file"),
    "foreign-duckdb": (foreign, "is a DuckDB database but not a Training Gate ledger"),
    "newer-schema": (newer_schema, "newer than this program"),
}


def snapshot(folder) -> dict:
    return {str(f.relative_to(folder)): (f.read_bytes() if f.is_file() else None)
            for f in sorted(folder.rglob("*"))}


def shown(elements) -> list[str]:
    """The text of alert elements as displayed (Markdown escapes removed)."""
    return [e.value.replace("\\", "") for e in elements]


def every_page_says(needle: str) -> None:
    """Open the app, then each page: no exception anywhere, and an error box naming the problem."""
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT_S)
    for page in [None, *PAGES]:
        if page:
            at.switch_page(page_script(page))
        at.run()
        assert not at.exception, (page, [e.value for e in at.exception])
        errors = shown(at.error)
        assert any(needle in e for e in errors), (page, errors)


@pytest.mark.parametrize("kind", BROKEN)
def test_every_page_says_what_is_wrong_with_the_ledger(tmp_path, monkeypatch, kind):
    folder = tmp_path / "ledger"
    folder.mkdir()
    path = folder / "gate.duckdb"
    make, needle = BROKEN[kind]
    make(path)
    (folder / "whole.duckdb").unlink(missing_ok=True)
    before = snapshot(folder)
    monkeypatch.setenv("GATE_DB", str(path))
    monkeypatch.setenv("GATE_DEMO", "1")  # the demo builder must not touch it either
    every_page_says(needle)
    assert snapshot(folder) == before


HOLDER = """
import sys, duckdb
con = duckdb.connect(sys.argv[1])
print("holding", flush=True)
sys.stdin.readline()
"""


class Holder:
    """A second process holding the ledger read-write until closed."""

    def __init__(self, path):
        self.proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(path)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline().strip() == "holding"

    def close(self):
        self.proc.communicate("\n", timeout=20)


def test_every_page_says_the_ledger_is_busy_while_another_process_holds_it(page_ledger, monkeypatch):
    path, _ = page_ledger
    monkeypatch.setenv("GATE_TIMEOUT_S", "0.2")
    holder = Holder(path)
    try:
        every_page_says("locked by another process")
    finally:
        holder.close()
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT_S).run()
    assert not at.exception and not at.error and at.title  # free again: the page is back


def good_csv(now: dt.datetime) -> bytes:
    def ts(hours_ago):
        return (now - dt.timedelta(hours=hours_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return ("run_id,team,kind,capacity,gpus,estimated_gpu_hours,estimate_source,reserved_from,"
            "reserved_until,reserved_gpu_hours,started_at,ended_at,actual_gpu_hours,stop_reason\n"
            f"up-1,speech,exploratory,stable,4,40,stated,{ts(60)},{ts(48)},4800,{ts(59)},{ts(50)},3600,"
            "completed\n").encode()


def checked_upload(now) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT_S).run()
    at.switch_page(page_script("upload")).run()
    at.file_uploader(key="upload_file").upload("history.csv", good_csv(now), "text/csv").run()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.button(key="upload_import").disabled
    return at


def test_an_import_into_a_ledger_held_by_another_process_says_so_and_writes_nothing(page_ledger, monkeypatch):
    path, now = page_ledger
    monkeypatch.setenv("GATE_TIMEOUT_S", "0.2")
    before = run_count(path)
    at = checked_upload(now)
    holder = Holder(path)
    try:
        at.button(key="upload_import").click().run()
    finally:
        holder.close()
    assert not at.exception, [e.value for e in at.exception]
    errors = shown(at.error)
    assert any("locked by another process" in e and "Nothing was written" in e for e in errors), errors
    assert run_count(path) == before


def test_an_import_that_fails_unexpectedly_says_so_as_text_and_writes_nothing(page_ledger):
    path, now = page_ledger
    before = run_count(path)
    at = checked_upload(now)
    with open_ledger(path) as con:  # the ledger changes under the page between check and import
        con.execute("ALTER TABLE runs DROP COLUMN job_name")
    at.button(key="upload_import").click().run()
    assert not at.exception, [e.value for e in at.exception]
    errors = shown(at.error)
    assert any(e.startswith("The import failed and nothing was written: ") and "Exception" in e
               for e in errors), errors
    assert run_count(path) == before
