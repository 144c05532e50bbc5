"""Builders for the budget-alert tests: the tiny team with a month's budget of 100 GPU-hours beside a
team that spends nothing, and a free loopback port."""
from __future__ import annotations

import socket

from lib.ledger.connection import open_ledger
from lib.ledger.deciding import submit_request
from lib.ledger.teams_file import sync_teams
from tests.fixtures_ledger import TINY_TEAMS, run_cli, tiny_request

# the one tiny team file, with a month's budget of 100 GPU-hours, and a team that spends nothing
ALERT_TEAMS = TINY_TEAMS.replace("monthly_budget_gpu_hours = 100000", "monthly_budget_gpu_hours = 100") + """
[teams.calm]
reserved_gpus = 8
max_gpus_per_job = 8
monthly_budget_gpu_hours = 100000
"""

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def build_spent_ledger(folder) -> tuple:
    """(ledger, teams file) in `folder`: team 'tiny' has spent 85 of its 100 GPU-hours this month."""
    teams = folder / "teams.toml"
    teams.write_text(ALERT_TEAMS, encoding="utf-8")
    db = folder / "gate.duckdb"
    with open_ledger(db) as con:
        sync_teams(con, teams)
    assert submit_request(tiny_request(1), db=db)["state"] == "admit"
    assert run_cli("finish", "tiny-001", "--actual-gpu-hours", "85", "--stop-reason", "completed",
                   db=db).returncode == 0
    return db, teams
