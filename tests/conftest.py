"""The suite's shared fixtures, in one place: real DuckDB ledgers in temp dirs, never mocks.

Where a fixture lives: one that two or more test modules use is defined here, once; one that a single
module uses may stay in that module. No fixture name is defined twice anywhere under tests/ (a module's
fixture would shadow this one): tests/test_fixtures_defined_once.py holds that. The tests/fixtures_*.py
modules hold plain builders and data, no fixtures; this file imports what it needs from them (no
pytest_plugins).

A ledger a test writes to is its own file in tmp_path. Where the same ledger serves many tests it is
built once per session (`*_template`) and each test gets a copy: a copy takes about a millisecond, a
build from a tenth of a second (a teams file) to seconds (a demo). Ledgers whose rows follow the hour
they are built in are kept per hour (`this_hours_ledgers`).

- `demo_ledger`: a copy of a 300-run demo ledger (`demo_template`) with the teams of data/teams.toml,
  at the suite's one clock `NOW` (tests/fixtures_gate.py). `busy_ledger`: a 20,000-run demo, read only.
- `tiny_ledger`: one small team ('tiny', 8 GPUs) and its snapshot, no runs, beside its teams file:
  capacity tests (a copy of `tiny_template`).
- `import_ledger`: teams vision and nlp only, for the import tests (a copy of `import_template`).
- `slurm_ledger`: the teams and snapshots of data/teams.toml, no runs (a copy of `slurm_template`,
  which tests that only read take as it is).
- `page_ledger`: a 300-run ledger shaped for the dashboard pages, read by the app through $GATE_DB:
  `(path, now)`. `hostile_ledger`: the same with every team and run ID carrying a hostile string
  (tests/fixtures_hostile.py).
- `queue_ledger`: the queue history of tests/fixtures_plan.build_queue_ledger, read only: `(path, now)`.
- `submitted_ledger`: a copy of a history made only by `submit` and `finish` calls (three teams,
  deferrals for capacity and budget, a month boundary): `(path, first, last)` decision times; for the
  policy-replay tests. `pooled_submitted_ledger`: the same on a stable pool smaller than the quotas
  together (cluster-capacity deferrals), read only.
- `browser`: Debian's Chromium driven by Playwright, one per browser test module.
- `fresh_caches`: Streamlit's caches cleared around a test (they outlive an AppTest in one process).
- `every_interface`: the app's listen address set to 0.0.0.0 (beyond loopback) for one test.
- `postgres_server`: a real PostgreSQL 15 server for the session (tests marked `postgres`), and
  `authority_db`: a fresh database on it for one test.
- `cluster`: the Slurm test cluster (tests/fixtures_slurm.Cluster) with its hook on a new ledger for
  each test module; the cluster itself is started at most once per session (`slurm_cluster_up`).
"""
from __future__ import annotations

import shutil
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import pytest

from tests.fixtures_alerts import build_spent_ledger
from tests.fixtures_app import CHROMIUM, CHROMIUM_ARGS, fill_ledger, utc_now_hour
from tests.fixtures_gate import NOW
from tests.fixtures_hostile import make_hostile_ledger
from tests.fixtures_imports import make_import_ledger
from tests.fixtures_ledger import BUSY_RUNS, DEMO_RUNS, TINY_TEAMS, teams_ledger
from tests.fixtures_plan import build_queue_ledger
from tests.fixtures_replay import POOLED_TEAMS, build_submitted_ledger
from tests.fixtures_slurm import cluster_session, make_slurm_ledger


def private_copy(template: Path, path: Path) -> Path:
    """A test's own copy of a session's template ledger, at `path`."""
    shutil.copyfile(template, path)
    return path


@pytest.fixture(scope="session")
def demo_template(tmp_path_factory) -> Path:
    from lib.ledger.demo import build_demo
    path = tmp_path_factory.mktemp("ledger-template") / "demo.duckdb"
    build_demo(path, runs=DEMO_RUNS, seed=7, now=NOW)
    return path


@pytest.fixture
def demo_ledger(demo_template, tmp_path) -> Path:
    """A private copy of the small demo ledger."""
    return private_copy(demo_template, tmp_path / "gate.duckdb")


@pytest.fixture(scope="session")
def busy_ledger(tmp_path_factory) -> Path:
    """A read-only demo ledger of BUSY_RUNS runs: busy teams finish dozens of runs a week. Do not write to it."""
    from lib.ledger.demo import build_demo
    path = tmp_path_factory.mktemp("busy-ledger") / "busy.duckdb"
    build_demo(path, runs=BUSY_RUNS, seed=3, now=NOW)
    return path


@pytest.fixture(scope="session")
def submitted_template(tmp_path_factory):
    # seed 2: a history whose deferrals include retraining-protection beside the line's own
    return build_submitted_ledger(tmp_path_factory.mktemp("submitted-template"), seed=2)


@pytest.fixture(scope="session")
def pooled_submitted_ledger(tmp_path_factory):
    """The submit-and-finish history on a cluster whose stable pool (12) is smaller than the teams'
    quotas together (18), so the gate defers for cluster-capacity: (path, first, last). Read only. (Seed 5:
    a history on which the pool search skips stretches of sizes, as its tests need.)"""
    return build_submitted_ledger(tmp_path_factory.mktemp("pooled-template"), n=120, teams=POOLED_TEAMS, seed=5)


@pytest.fixture
def submitted_ledger(submitted_template, tmp_path):
    """A private copy of the submit-and-finish history: (path, first decision, last decision)."""
    path, first, last = submitted_template
    return private_copy(path, tmp_path / "submitted.duckdb"), first, last


@pytest.fixture(scope="session")
def tiny_template(tmp_path_factory) -> Path:
    """The ledger `tiny_ledger` copies, built once for the session."""
    return teams_ledger(tmp_path_factory.mktemp("tiny-template"), TINY_TEAMS, "tiny")


@pytest.fixture
def tiny_ledger(tiny_template, tmp_path) -> Path:
    """A ledger with only team 'tiny' (8 GPUs reserved) and its snapshot, no runs: tmp_path/tiny.duckdb,
    a copy of `tiny_template`, beside the teams file it was synced from (tmp_path/tiny.toml)."""
    (tmp_path / "tiny.toml").write_text(TINY_TEAMS, encoding="utf-8")
    return private_copy(tiny_template, tmp_path / tiny_template.name)


@pytest.fixture(scope="session")
def import_template(tmp_path_factory) -> Path:
    return make_import_ledger(tmp_path_factory.mktemp("import-template"))


@pytest.fixture
def import_ledger(import_template, tmp_path) -> Path:
    """A ledger with teams vision (preemptible partition 'spot') and nlp, no runs: a copy of
    `import_template` at tmp_path/ledger.duckdb, where make_import_ledger(tmp_path) puts one."""
    return private_copy(import_template, tmp_path / import_template.name)


@pytest.fixture(scope="session")
def slurm_template(tmp_path_factory) -> Path:
    """A ledger with the teams and snapshots of data/teams.toml and no runs, built once. Read only."""
    return make_slurm_ledger(tmp_path_factory.mktemp("slurm-template") / "gate.duckdb")


@pytest.fixture
def slurm_ledger(slurm_template, tmp_path) -> Path:
    """A private copy of `slurm_template`: tmp_path/gate.duckdb."""
    return private_copy(slurm_template, tmp_path / "gate.duckdb")


@pytest.fixture(scope="session")
def queue_ledger(tmp_path_factory):
    """The queue history of tests/fixtures_plan.build_queue_ledger at its NOW: (path, now). Read only."""
    return build_queue_ledger(tmp_path_factory.mktemp("queue-ledger"))


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


class HourLedgers:
    """Ledgers whose rows depend only on the hour they are built in (fill_ledger's default `now`, the
    current UTC hour): the first test of an hour builds its own and keeps a copy; the next tests of that
    hour copy the kept file, the very rows a build of their own would make."""

    def __init__(self, folder: Path):
        self.folder, self.kept = folder, {}

    def copy(self, kind: str, path: Path, build: Callable[[Path], datetime]) -> datetime:
        """Put `kind`'s ledger of this hour at `path` (build(path) -> its now, when none is kept yet);
        returns its now."""
        now = utc_now_hour()
        if (kind, now) in self.kept:
            shutil.copyfile(self.kept[kind, now], path)
            return now
        now = build(path)   # the hour it was built for, should the hour have turned meanwhile
        self.kept[kind, now] = self.folder / f"{kind}-{now:%Y%m%d%H}.duckdb"
        shutil.copyfile(path, self.kept[kind, now])
        return now


@pytest.fixture(scope="session")
def this_hours_ledgers(tmp_path_factory) -> HourLedgers:
    return HourLedgers(tmp_path_factory.mktemp("hour-ledgers"))


@pytest.fixture
def page_ledger(tmp_path, monkeypatch, fresh_caches, this_hours_ledgers):
    """A 300-run ledger in tmp_path that the app reads through $GATE_DB (no demo build): (path, now)."""
    path = tmp_path / "gate.duckdb"
    now = this_hours_ledgers.copy("page", path, lambda p: fill_ledger(p, n_runs=300))
    monkeypatch.setenv("GATE_DB", str(path))
    monkeypatch.setenv("GATE_DEMO", "0")
    return path, now


@pytest.fixture
def hostile_ledger(tmp_path, monkeypatch, fresh_caches, this_hours_ledgers):
    """A 300-run ledger whose teams and run IDs carry hostile strings (tests/fixtures_hostile.py), read by
    the app through $GATE_DB: (path, now)."""
    path = tmp_path / "gate.duckdb"
    now = this_hours_ledgers.copy("hostile", path, make_hostile_ledger)
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


@pytest.fixture(scope="session")
def slurm_cluster_up(tmp_path_factory):
    """The Slurm test cluster running for the session: started here when it was not (and stopped at
    the end), else left as it is; skips where Slurm is not installed. Tests take `cluster`."""
    yield from cluster_session(tmp_path_factory)


@pytest.fixture(scope="module")
def cluster(slurm_cluster_up, tmp_path_factory):
    """The test cluster (tests/fixtures_slurm.Cluster) with its hook on a new ledger for this module
    (teams and snapshots of data/teams.toml); the hook config is restored after the module."""
    yield from cluster_session(tmp_path_factory)


@pytest.fixture
def spent_ledger(tmp_path):
    """Team 'tiny' has spent 85 of its 100 GPU-hours this month; team 'calm' nothing: (ledger, teams file)."""
    return build_spent_ledger(tmp_path)
