"""A large site starts in seconds: a warm gate server on a ledger of 400 teams listens within a few
seconds of its start (per-team facts are read on first need and ahead in the background, not all
before it listens; all before took 32.6 s here), and its first decisions are the ones the command
line takes in the ledger itself."""
from __future__ import annotations

import json
import time

from bench.bench_large_site_start import build, measure
from lib.ledger.deciding import check_request
from lib.slurm.wire import ask
from tests.fixtures_slurm import GateServerProcess

TEAMS = 400
LISTEN_BOUND_S = 5.0   # 3 s is the goal (measured 0.96 s); slack for a busy shared machine


def probe(team: str, run_id: str) -> dict:
    return {"run_id": run_id, "team": team, "kind": "exploratory", "gpus": 1, "gpu_mem_gb": 40,
            "max_runtime_hours": 1, "budget_gpu_hours": 4, "estimated_gpu_hours": 0.5,
            "checkpoint_supported": True, "expected_interruptions": 0, "data_snapshot": f"s{team[1:]}"}


def test_a_server_of_400_teams_listens_within_seconds_and_decides_as_the_ledger_does(tmp_path):
    db = tmp_path / "gate.duckdb"
    build(db, TEAMS, 5)
    listening, answered = measure(db, tmp_path / "probe.sock", f"t{TEAMS - 1:04d}")
    assert listening < LISTEN_BOUND_S, listening
    server = GateServerProcess(db, tmp_path / "gate.sock", "--flush-interval-s", "3600")
    try:
        time.sleep(0.5)   # some teams warmed in the background, others not yet
        for team in ("t0000", "t0199", f"t{TEAMS - 1:04d}"):
            request = probe(team, f"{team}-probe")
            code, rest = ask(server.sock, {"op": "check", "db": str(db.resolve()), "request": json.dumps(request)},
                             timeout_s=60)
            assert code == 0, rest
            got, expected = json.loads(rest), check_request(request, db=db)
            assert (got["state"], got["reasons"]) == (expected["state"], expected["reasons"]), team
    finally:
        server.stop()
