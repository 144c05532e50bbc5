"""The suite's fixtures, in one place: real DuckDB ledgers in temp dirs, never mocks.

- `demo_ledger`: a private copy of a 300-run demo ledger built once per session (`demo_template`)
  with the teams of data/teams.toml, at the suite's one clock `NOW` (tests/fixtures_gate.py).
- `tiny_ledger`: one small team ('tiny', 8 GPUs) and its snapshot, no runs: capacity tests.
- `import_ledger`: teams vision and nlp only, for the import tests.
- `page_ledger`: a 300-run ledger shaped for the dashboard pages, read by the app through $GATE_DB:
  `(path, now)`.
- `submitted_ledger`: a private copy of a history made only by `submit` and `finish` calls (three teams,
  deferrals for capacity and budget, a month boundary), built once per session: `(path, first, last)`
  decision times; for the policy-replay tests. `pooled_submitted_ledger`: the same on a stable pool
  smaller than the quotas together (cluster-capacity deferrals), read only.
- `browser`: Debian's Chromium driven by Playwright, one per browser test module.
- `fresh_caches`: Streamlit's caches cleared around a test (they outlive an AppTest in one process).
- `every_interface`: the app's listen address set to 0.0.0.0 (beyond loopback) for one test.
- `postgres_server`: a real PostgreSQL 15 server for the session (tests marked `postgres`), and
  `authority_db`: a fresh database on it for one test.

Builders of plain data and files live beside this file in the fixtures_*.py modules.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.fixtures_app import CHROMIUM, CHROMIUM_ARGS, fill_ledger
from tests.fixtures_gate import NOW
from tests.fixtures_imports import make_import_ledger
from tests.fixtures_ledger import BUSY_RUNS, DEMO_RUNS, TINY_TEAMS, teams_ledger
from tests.fixtures_replay import POOLED_TEAMS, build_submitted_ledger


@pytest.fixture(scope="session")
def demo_template(tmp_path_factory) -> Path:
    from lib.ledger.demo import build_demo
    path = tmp_path_factory.mktemp("ledger-template") / "demo.duckdb"
    build_demo(path, runs=DEMO_RUNS, seed=7, now=NOW)
    return path


@pytest.fixture
def demo_ledger(demo_template, tmp_path) -> Path:
    """A private copy of the small demo ledger."""
    path = tmp_path / "gate.duckdb"
    shutil.copyfile(demo_template, path)
    return path


@pytest.fixture(scope="session")
def busy_ledger(tmp_path_factory) -> Path:
    """A read-only demo ledger of BUSY_RUNS runs: busy teams finish dozens of runs a week. Do not write to it."""
    from lib.ledger.demo import build_demo
    path = tmp_path_factory.mktemp("busy-ledger") / "busy.duckdb"
    build_demo(path, runs=BUSY_RUNS, seed=3, now=NOW)
    return path


@pytest.fixture(scope="session")
def submitted_template(tmp_path_factory):
    return build_submitted_ledger(tmp_path_factory.mktemp("submitted-template"))


@pytest.fixture(scope="session")
def pooled_submitted_ledger(tmp_path_factory):
    """The submit-and-finish history on a cluster whose stable pool (12) is smaller than the teams'
    quotas together (18), so the gate defers for cluster-capacity: (path, first, last). Read only."""
    return build_submitted_ledger(tmp_path_factory.mktemp("pooled-template"), n=120, teams=POOLED_TEAMS)


@pytest.fixture
def submitted_ledger(submitted_template, tmp_path):
    """A private copy of the submit-and-finish history: (path, first decision, last decision)."""
    path, first, last = submitted_template
    copy = tmp_path / "submitted.duckdb"
    shutil.copyfile(path, copy)
    return copy, first, last


@pytest.fixture
def tiny_ledger(tmp_path) -> Path:
    """A ledger with only team 'tiny' (8 GPUs reserved) and its snapshot, no runs."""
    return teams_ledger(tmp_path, TINY_TEAMS, "tiny")


@pytest.fixture
def import_ledger(tmp_path) -> Path:
    """A ledger with teams vision (preemptible partition 'spot') and nlp, no runs."""
    return make_import_ledger(tmp_path)


@pytest.fixture
def fresh_caches():
    """Streamlit's caches outlive an AppTest inside one pytest process: each test starts clean."""
    import streamlit as st
    st.cache_data.clear()
    st.cache_resource.clear()
    yield
    st.cache_data.clear()
    st.cache_resource.clear()


@pytest.fixture
def every_interface():
    """The server option as `--server.address=0.0.0.0` sets it (an app listening beyond loopback), for
    this test only."""
    from streamlit import config
    before = config.get_option("server.address")
    config.set_option("server.address", "0.0.0.0")
    yield
    config.set_option("server.address", before)


@pytest.fixture
def page_ledger(tmp_path, monkeypatch, fresh_caches):
    """A 300-run ledger in tmp_path that the app reads through $GATE_DB (no demo build): (path, now)."""
    path = tmp_path / "gate.duckdb"
    now = fill_ledger(path, n_runs=300)
    monkeypatch.setenv("GATE_DB", str(path))
    monkeypatch.setenv("GATE_DEMO", "0")
    return path, now


@pytest.fixture(scope="module")
def browser():
    """Debian's Chromium through Playwright (never a downloaded browser), one per test module."""
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture(scope="session")
def postgres_server():
    """A real PostgreSQL 15 server for the session (tests/fixtures_postgres.py); skips when absent."""
    from tests.fixtures_postgres import PostgresServer, postgres_missing
    why = postgres_missing()
    if why:
        pytest.skip(why)
    server = PostgresServer()
    yield server
    server.close()


@pytest.fixture
def authority_db(postgres_server) -> str:
    """A fresh database on the session's PostgreSQL, with no schema yet: its name."""
    return postgres_server.new_database()
