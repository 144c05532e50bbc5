"""Real ledgers for the store, command-line, demo and concurrency tests (no mocks).

`demo_template` builds one small ledger per test session (the teams of data/teams.toml synced, a
300-run demo at a fixed `NOW`); `ledger` gives each test its own copy of that file. `tiny_teams`
writes a teams file with one small team whose capacity the tests can fill exactly.
"""
from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import duckdb
import pytest

REPO = Path(__file__).resolve().parent.parent
NOW = datetime(2026, 6, 15, 12, 0)
DEMO_RUNS = 300

TINY_TEAMS = """
[defaults]
max_gpu_mem_gb = 80
max_runtime_hours = 48
pilot_required_above_gpu_hours = 1000

[teams.tiny]
reserved_gpus = 8
retraining_reserved_gpus = 0
max_gpus_per_job = 8
monthly_budget_gpu_hours = 100000
preemptible_partitions = ["spot"]

[[snapshots]]
snapshot = "tiny-data-v1"
team = "tiny"
"""

PILOT = {
    "steps_per_second": 4.0, "worst_case_steps_per_second": 2.0, "worst_case_share": 0.1,
    "peak_mem_gb": 60.0, "checkpoint_write_s": 30.0, "planned_steps": 20_000,
    "checkpoint_interval_steps": 2_000, "eval_gpu_hours": 1.0, "data_loading_fraction": 0.05,
    "restart_minutes": 5.0,
}


def request(**changes) -> dict:
    """A valid request for team vision (snapshot shared by all teams) that admits on the demo."""
    base = {
        "run_id": "vision-test-0001", "team": "vision", "kind": "exploratory", "gpus": 2,
        "gpu_mem_gb": 80, "max_runtime_hours": 12, "budget_gpu_hours": 40,
        "checkpoint_supported": True, "expected_interruptions": 0,
        "data_snapshot": "common-crawl-2025-04", "capacity": "stable", "estimated_gpu_hours": 10,
    }
    out = {**copy.deepcopy(base), **changes}
    return {k: v for k, v in out.items() if v is not ...}


def tiny_request(i: int, **changes) -> dict:
    return request(**{"run_id": f"tiny-{i:03d}", "team": "tiny", "data_snapshot": "tiny-data-v1",
                      "gpus": 2, **changes})


def counts(db) -> dict:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return {t: con.execute(f"SELECT count(*) FROM {t}").fetchall()[0][0]
                for t in ("teams", "snapshots", "runs", "pilots", "decisions")}
    finally:
        con.close()


def query(db, sql, params=None) -> list[tuple]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(sql, params or []).fetchall()
    finally:
        con.close()


def run_cli(*args, db=None, stdin: str | None = None, timeout: float = 60, env=None):
    """`python -m lib ARGS` in a real process; returns the CompletedProcess (text)."""
    e = dict(os.environ)
    e.pop("GATE_DB", None)
    if db is not None:
        e["GATE_DB"] = str(db)
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "lib", *map(str, args)], cwd=REPO, env=e,
                          input=stdin, capture_output=True, text=True, timeout=timeout)


def write_json(path: Path, obj) -> Path:
    path.write_text(json.dumps(obj), encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def demo_template(tmp_path_factory) -> Path:
    from lib.ledger.demo import build_demo
    path = tmp_path_factory.mktemp("ledger-template") / "demo.duckdb"
    build_demo(path, runs=DEMO_RUNS, seed=7, now=NOW)
    return path


@pytest.fixture
def ledger(demo_template, tmp_path) -> Path:
    """A private copy of the small demo ledger."""
    path = tmp_path / "gate.duckdb"
    shutil.copyfile(demo_template, path)
    return path


@pytest.fixture
def tiny_ledger(tmp_path) -> Path:
    """A ledger with only team 'tiny' (8 GPUs reserved) and its snapshot, no runs."""
    from lib.ledger.connection import open_ledger
    from lib.ledger.teams_file import sync_teams
    teams = tmp_path / "tiny.toml"
    teams.write_text(TINY_TEAMS, encoding="utf-8")
    path = tmp_path / "tiny.duckdb"
    with open_ledger(path) as con:
        sync_teams(con, teams)
    return path
