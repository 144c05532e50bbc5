"""A ledger whose file is damaged inside (4 KiB past its header overwritten with random bytes, as a bad
disk or a torn copy leaves it) opens, and fails only when a page reads the damaged block — DuckDB then
raises its own error, not always an IOException. Every page turns any such read error into the app's
message ("The ledger cannot be read: …"), never a traceback; the read models raise LedgerError.

The damage is aimed at the blocks holding the runs, decisions and teams tables (from
pragma_storage_info), a few seeds each, so the pages' reads do reach it."""
from __future__ import annotations

import random
import shutil

import duckdb
import pytest
from streamlit.testing.v1 import AppTest

from lib.dashboard import forecasts, overview_queries, settings, sidebar_queries
from lib.dashboard.filters import default_filters
from lib.ledger.connection import LedgerError
from lib.ledger.demo import build_demo
from tests.fixtures_app import PAGES, ROOT, page_script

TIMEOUT_S = 60
MESSAGE = "The ledger cannot be read"
SECTOR = 4096

pytestmark = pytest.mark.usefixtures("fresh_caches")


@pytest.fixture(scope="module")
def intact(tmp_path_factory):
    """A small demo ledger (2,000 runs over 90 days) and where its tables' blocks lie in the file:
    (path, {table: [byte offset of each block]}, block size)."""
    path = tmp_path_factory.mktemp("intact") / "gate.duckdb"
    build_demo(path, runs=2000, days=90, seed=0)
    con = duckdb.connect(str(path), read_only=True)
    try:
        block_size, blocks = con.execute("SELECT block_size, total_blocks FROM pragma_database_size()").fetchone()
        header = path.stat().st_size - blocks * block_size      # the file's headers come first
        where = {t: [header + b * block_size for b, in con.execute(
                    f"SELECT DISTINCT block_id FROM pragma_storage_info('{t}') "
                    "WHERE persistent AND block_id >= 0 ORDER BY block_id").fetchall()]
                 for t in ("runs", "decisions", "teams")}
    finally:
        con.close()
    assert all(where.values()), where
    return path, where, block_size


def damaged(intact, folder, table: str, seed: int):
    """A copy of the intact ledger with 4 KiB of one of `table`'s blocks (chosen by `seed`, as is the
    place inside it and the bytes) overwritten."""
    source, where, block_size = intact
    path = folder / f"damaged-{table}-{seed}.duckdb"
    shutil.copyfile(source, path)
    rng = random.Random(seed)
    blocks = where[table]
    at = blocks[seed % len(blocks)] + rng.randrange(block_size // SECTOR) * SECTOR
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(rng.randbytes(SECTOR))
    return path


def load(page: str | None) -> AppTest:
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT_S).run()
    if page:
        at.switch_page(page_script(page)).run()
    return at


def says_it_cannot_read(at: AppTest) -> bool:
    errors = [e.value for e in at.error]
    assert not at.exception, [e.value for e in at.exception]
    assert all(MESSAGE in e for e in errors), errors   # no other error box on a damaged ledger
    return bool(errors)


SEEDS = [("runs", 0), ("runs", 1), ("runs", 2), ("decisions", 0), ("teams", 0)]


def test_overview_on_a_damaged_ledger_says_it_cannot_be_read_never_a_traceback(intact, tmp_path, monkeypatch):
    said = {}
    for table, seed in SEEDS:
        st_clear()
        monkeypatch.setenv("GATE_DB", str(damaged(intact, tmp_path, table, seed)))
        said[table, seed] = says_it_cannot_read(load("overview"))
    # every page's frame reads the teams; Overview reads the runs it sums
    assert said["teams", 0] and said["runs", 0], said


def test_every_page_on_a_damaged_ledger_says_it_cannot_be_read(intact, tmp_path, monkeypatch):
    # (a damaged teams block fails every page in the shared frame: the Overview test covers it)
    monkeypatch.setenv("GATE_DB", str(damaged(intact, tmp_path, "runs", 0)))
    said = {}
    for page in PAGES:
        st_clear()
        said[page] = says_it_cannot_read(load(page))
    assert sum(said.values()) >= len(PAGES) // 2, said


def test_the_read_models_raise_ledger_error_for_a_damaged_block(intact, tmp_path):
    f = default_filters(None)
    teams, runs = damaged(intact, tmp_path, "teams", 0), damaged(intact, tmp_path, "runs", 0)
    for read in (lambda: sidebar_queries.sidebar_options(teams), lambda: settings.colours(teams),
                 lambda: forecasts.budget_outlook(f, teams), lambda: overview_queries.overview(f, runs)):
        with pytest.raises(LedgerError, match="cannot read ledger"):
            read()


def st_clear() -> None:
    """A fresh cache per ledger: results are keyed by the ledger's path and version, but the figures'
    cache outlives a test."""
    import streamlit as st
    st.cache_data.clear()
    st.cache_resource.clear()
