"""Shared helpers for the import tests: a real ledger file with teams, and a full dump for comparisons."""
from __future__ import annotations

from pathlib import Path

from lib.ledger.connection import open_ledger

TEAMS = {"vision": ["spot"], "nlp": []}
TABLES = ["meta", "teams", "snapshots", "runs", "pilots", "decisions"]


def make_import_ledger(tmp_path: Path, teams=TEAMS) -> Path:
    db = tmp_path / "ledger.duckdb"
    with open_ledger(db) as con:
        for team, partitions in teams.items():
            con.execute(
                "INSERT INTO teams (team, reserved_gpus, max_gpus_per_job, max_gpu_mem_gb, max_runtime_hours, "
                "monthly_budget_gpu_hours, preemptible_partitions, policy_version) "
                "VALUES (?, 8, 8, 80, 24, 1000, ?, 'test-1')", [team, partitions]).fetchall()
    return db


def dump(db: Path) -> dict:
    """Every row of every table, sorted: equal dumps mean the ledger did not change."""
    with open_ledger(db, read_only=True) as con:
        return {t: sorted(map(repr, con.execute(f"SELECT * FROM {t}").fetchall())) for t in TABLES}


def runs(db: Path) -> dict:
    with open_ledger(db, read_only=True) as con:
        cur = con.execute("SELECT * FROM runs ORDER BY run_id")
        names = [d[0] for d in cur.description]
        return {r[0]: dict(zip(names, r)) for r in cur.fetchall()}


HEADER = "run_id,team,kind,gpus,estimated_gpu_hours,actual_gpu_hours,started_at,ended_at,job_name"
GOOD = (HEADER + "\n"
        "r1,vision,production,2,10,9.5,2024-05-01T10:00:00Z,2024-05-01T15:00:00Z,a\n"
        "r2,nlp,exploratory,1,4,,2024-05-02T10:00:00Z,,b\n")
