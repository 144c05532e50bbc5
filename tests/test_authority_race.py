"""Two clusters racing for the last of one team's accelerators, or the last of its month budget:
real `python -m lib submit` processes on two ledgers that share one authority (a real PostgreSQL)
never admit more than the team has together, and every answered decision is in exactly one ledger."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.fixtures_ledger import REPO, query, write_json
from tests.fixtures_postgres import authority_env, make_clusters, shared_request

pytestmark = [pytest.mark.postgres, pytest.mark.slow]
PER_CLUSTER = 6


def race(tmp_path, url, ledgers, **changes) -> dict:
    """PER_CLUSTER submitters per cluster, all started at once: {run_id: (cluster, exit code, decision)}."""
    procs = {}
    for cluster, ledger in ledgers.items():
        for i in range(PER_CLUSTER):
            run_id = f"{cluster}-{i}"
            path = write_json(tmp_path / f"{run_id}.json", shared_request(run_id, **changes))
            env = {**authority_env(url, cluster), "PYTHONPATH": str(REPO)}
            env.pop("GATE_DB", None)
            procs[run_id] = (cluster, subprocess.Popen(
                [sys.executable, "-m", "lib", "--db", str(ledger), "--timeout", "120", "submit", str(path)],
                cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    out = {}
    for run_id, (cluster, p) in procs.items():
        stdout, stderr = p.communicate(timeout=300)
        assert p.returncode in (0, 1), f"{run_id}: exit {p.returncode}: {stderr}"
        out[run_id] = (cluster, p.returncode, json.loads(stdout))
    return out


def pg_holds(url) -> set:
    import psycopg
    with psycopg.connect(url) as con:
        return {r for r in con.execute("SELECT cluster, run_id FROM training_gate.holds "
                                       "WHERE released_at IS NULL").fetchall()}


def check_ledgers(answers: dict, ledgers: dict) -> None:
    """Every answered decision is in its own cluster's ledger once, and in no other."""
    for cluster, ledger in ledgers.items():
        rows = query(ledger, "SELECT run_id, state, decision_json FROM decisions ORDER BY run_id")
        mine = sorted(r for r, (c, _, _) in answers.items() if c == cluster)
        assert [r[0] for r in rows] == mine
        for run_id, state, decision_json in rows:
            assert state == answers[run_id][2]["state"]
            assert json.loads(decision_json)["cluster"] == cluster


@pytest.mark.parametrize("what", ["quota", "budget"])
def test_two_clusters_racing_never_over_book_the_team(postgres_server, authority_db, tmp_path, what):
    url = postgres_server.url(authority_db)
    if what == "quota":   # 8 accelerators, 2 a request: room for 4 of the 12
        ledgers, room = make_clusters(tmp_path, url, quota=8, budget=100_000), 4
    else:                 # 35 GPU-h this month, 10 a request: room for 3 of the 12
        ledgers, room = make_clusters(tmp_path, url, quota=1000, budget=35), 3
    answers = race(tmp_path, url, ledgers)
    admitted = {(c, r) for r, (c, code, d) in answers.items() if d["state"] == "admit"}
    assert len(admitted) == room, answers
    assert all(code == 1 for c, code, d in answers.values() if d["state"] != "admit")
    reasons = {r["code"] for _, _, d in answers.values() if d["state"] == "defer" for r in d["reasons"]}
    assert reasons == {"capacity" if what == "quota" else "period-budget"}
    check_ledgers(answers, ledgers)
    assert pg_holds(url) == admitted
    # each ledger's own reservations are its admits, and together they fit the team
    held = sum(query(ledgers[c], "SELECT sum(gpus) FROM runs WHERE reserved_gpu_hours IS NOT NULL")[0][0] or 0
               for c in ledgers)
    assert held == 2 * room
