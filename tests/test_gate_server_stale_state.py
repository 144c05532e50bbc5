"""The warm gate server never decides on stale state: while it is busy (background jobs keep its
batches going), other processes import reservations, change team policy with `teams` and finish
runs, and every decision it takes for the watched team equals what the ledger says at that moment
(a deferred probe is then cancelled, another writer too, so it waits in no line ahead of the next).
Real processes throughout: the server, the command line for every other writer."""
from __future__ import annotations

import subprocess
import sys
import threading
from datetime import timedelta

import pytest

from lib.gate.terms import utcnow
from lib.ledger.connection import open_ledger
from lib.ledger.deciding import check_request
from lib.slurm.comment import build_request
from tests.fixtures_slurm import REPO, GateServerProcess, job, quota_teams

pytestmark = pytest.mark.slow

QUOTA = 16


def cli(db, *args: str) -> subprocess.CompletedProcess:
    p = subprocess.run([sys.executable, "-m", "lib", "--db", str(db), *args], cwd=REPO,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, (args, p.stderr)
    return p


def probe_job(run_id: str, team: str, gpus: int, **comment) -> dict:
    import json
    request = {"run_id": run_id, "kind": "exploratory", "gpu_mem_gb": 40, "budget_gpu_hours": 10,
               "estimated_gpu_hours": 1, "checkpoint_supported": True, "expected_interruptions": 0,
               "data_snapshot": "snap", **comment}
    return job(account=team, time_limit="600", name=run_id, comment=json.dumps(request),
               tres_per_node=f"gres:gpu:{gpus}")


def load_teams(db, tmp_path, quota: int) -> None:
    path = tmp_path / f"teams-{quota}.toml"
    path.write_text(quota_teams(quota))
    cli(db, "teams", "--file", str(path))


def qa_decisions(db) -> list[tuple[str, str]]:
    with open_ledger(db, read_only=True) as con:
        return con.execute("SELECT run_id, state FROM decisions WHERE team = 'qa' ORDER BY decided_at, run_id").fetchall()


def test_every_decision_of_a_busy_server_sees_the_other_writers_changes(tmp_path):
    db = tmp_path / "gate.duckdb"
    load_teams(db, tmp_path, QUOTA)
    # batches as often as they can go: the server holds the ledger for a batch most of the time
    server = GateServerProcess(db, tmp_path / "gate.sock", "--flush-interval-s", "0.02")
    stop = threading.Event()
    background = {"answered": 0}

    def keep_busy(k: int) -> None:  # the flusher writes a batch every 0.25 s all along
        i = 0
        while not stop.is_set():
            i += 1
            out = server.ask(probe_job(f"bg-{k}-{i}", "qb", 1, estimated_gpu_hours=0.0001))
            background["answered"] += out is not None and out.code == 0

    threads = [threading.Thread(target=keep_busy, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    checked = []
    expected_states: dict[str, str] = {}

    def probe(run_id: str, gpus: int, expect: str) -> None:
        """Decide through the server right after the other writer's change (when the server's own
        batch is most likely to hold the ledger), and check the same request against the ledger.
        The check is made after the decision when it should defer (a wrong admit lands in the
        ledger: the check would still defer), before it when it should admit (a right admit would
        otherwise count against itself)."""
        fields = probe_job(run_id, "qa", gpus)
        request, _, _ = build_request(fields)
        expected = check_request(request, db=db) if expect == "admit" else None
        out = server.ask(fields)
        expected = expected or check_request(request, db=db)
        assert out is not None and out.code in (0, 1), out and out.lines()
        assert (out.code == 0) == (expected["state"] == "admit") == (expect == "admit"), (
            run_id, expect, expected["state"], [r["code"] for r in expected["reasons"]], out.lines())
        checked.append(run_id)
        expected_states[run_id] = expect
        if expect == "defer":   # out of the gate's line again (it would wait ahead of the next probes)
            server.flush()
            cli(db, "cancel", run_id)

    try:
        for it in range(6):
            now = utcnow().replace(microsecond=0)
            # an import books 12 of qa's 16 accelerators: 8 more must wait
            (tmp_path / "imp.csv").write_text(
                "run_id,team,kind,gpus,reserved_from,reserved_until,reserved_gpu_hours\n"
                f"imp-{it},qa,exploratory,12,{now.isoformat()},{(now + timedelta(hours=10)).isoformat()},5\n")
            cli(db, "import", str(tmp_path / "imp.csv"))
            probe(f"after-import-{it}", 8, "defer")
            # finishing it frees them
            cli(db, "finish", f"imp-{it}", "--actual-gpu-hours", "0", "--stop-reason", "cancelled")
            probe(f"after-finish-{it}", 8, "admit")
            server.flush()
            cli(db, "finish", f"after-finish-{it}", "--actual-gpu-hours", "0", "--stop-reason", "cancelled")
            # a lower quota applies to the very next decision, and so does its restoring
            load_teams(db, tmp_path, 4)
            probe(f"after-teams-{it}", 8, "defer")
            load_teams(db, tmp_path, QUOTA)
            probe(f"after-restore-{it}", 8, "admit")
            server.flush()
            cli(db, "finish", f"after-restore-{it}", "--actual-gpu-hours", "0", "--stop-reason", "cancelled")
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=60)
        server.flush()
        log = server.stop()
    assert len(checked) == 24, log
    assert background["answered"] > 50, "the server was not kept busy"
    # every probe was recorded once, as the server answered it, and each deferred one's cancel
    cancels = [(run_id, "reject") for run_id, state in expected_states.items() if state == "defer"]
    assert sorted(qa_decisions(db)) == sorted([*expected_states.items(), *cancels])
