"""Builders for the store, command-line, demo and concurrency tests: the demo ledger's size, a small
team's policy file, requests those ledgers admit, and helpers that read a ledger or run `python -m lib`.
The fixtures that build these ledgers are in tests/conftest.py.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import duckdb

from lib.ledger.connection import open_ledger
from lib.ledger.teams_file import sync_teams
from tests.fixtures_gate import request

REPO = Path(__file__).resolve().parent.parent
DEMO_RUNS = 300
BUSY_RUNS = 20_000   # the busy_ledger fixture's runs

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

# one team's table of a teams file, all its keys given (no [defaults] needed)
VISION_TEAM_TOML = """[teams.vision]
reserved_gpus = 16
max_gpus_per_job = 8
max_gpu_mem_gb = 80
max_runtime_hours = 72
monthly_budget_gpu_hours = 5000
"""


def demo_request(**changes) -> dict:
    """The one request builder's request, as a team of the demo ledger makes it: it admits there."""
    return request(**{"run_id": "vision-test-0001", "max_runtime_hours": 12, "budget_gpu_hours": 40,
                      "expected_interruptions": 0, "data_snapshot": "common-crawl-2025-04",
                      "estimated_gpu_hours": 10, **changes})


def tiny_request(i: int, **changes) -> dict:
    return demo_request(**{"run_id": f"tiny-{i:03d}", "team": "tiny", "data_snapshot": "tiny-data-v1",
                      "gpus": 2, **changes})


def teams_ledger(folder: Path, teams_toml: str, name: str = "gate") -> Path:
    """A new ledger `<name>.duckdb` in `folder` with the teams file `teams_toml` loaded (as `teams` does)."""
    teams = folder / f"{name}.toml"
    teams.write_text(teams_toml, encoding="utf-8")
    path = folder / f"{name}.duckdb"
    with open_ledger(path) as con:
        sync_teams(con, teams)
    return path


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
