"""Every decision names who asked, in one format ("NAME (uid N)" for an OS user): a Slurm job's own
user (not the gate server's peer, which is slurmctld), the command line's user in-process and
through the gate server alike, and the hook's in-process fallback."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from lib.ledger.audit import os_actor
from tests.fixtures_ledger import run_cli, write_json
from tests.fixtures_slurm import COMMENT_REQUEST, REPO, GateServerProcess, hook_request, make_slurm_ledger

ME = os_actor()


def actor_of(db, run_id: str) -> str:
    from tests.fixtures_ledger import query
    (row,) = query(db, "SELECT actor FROM decisions WHERE run_id = ?", [run_id])
    return row[0]


def cli_request(tmp_path, run_id: str):
    return write_json(tmp_path / f"{run_id}.json", {**COMMENT_REQUEST, "run_id": run_id, "team": "vision",
                                                   "gpus": 1, "max_runtime_hours": 1, "capacity": "stable"})


def test_os_actor_is_name_and_uid():
    assert os_actor(4242, "alice") == "alice (uid 4242)"
    assert ME.endswith(f" (uid {os.getuid()})")


@pytest.mark.slow
def test_through_the_gate_server_a_job_is_its_users_and_a_command_line_submit_the_callers(tmp_path):
    db = make_slurm_ledger(tmp_path / "gate.duckdb")
    sock = tmp_path / "gate.sock"
    server = GateServerProcess(db, sock)
    try:
        assert server.ask(hook_request("job-of-alice") | {"user": "alice", "uid": "4242"}).code == 0
        p = run_cli("submit", cli_request(tmp_path, "cli-through-server"), db=db,
                    env={"TG_GATE_SOCKET": str(sock)})
        assert p.returncode == 0, p.stderr
        server.flush()
    finally:
        server.stop()
    assert actor_of(db, "job-of-alice") == "alice (uid 4242)"
    assert actor_of(db, "cli-through-server") == ME


@pytest.mark.slow
def test_in_process_the_command_line_and_the_hook_record_the_same_format(tmp_path):
    db = make_slurm_ledger(tmp_path / "gate.duckdb")
    p = run_cli("submit", cli_request(tmp_path, "cli-in-process"), db=db)
    assert p.returncode == 0, p.stderr
    job = hook_request("hook-in-process") | {"user": "bob", "uid": "4343"}
    args = []
    for k, v in job.items():
        args += ["--" + k.replace("_", "-"), "" if v is None else str(v)]
    env = {**os.environ, "PYTHONPATH": str(REPO), "GATE_DB": str(db)}
    env.pop("TG_GATE_SOCKET", None)
    hook = subprocess.run([sys.executable, "-S", str(REPO / "lib" / "slurm" / "hook.py"), *args],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert hook.returncode == 0, hook.stdout + hook.stderr
    assert actor_of(db, "cli-in-process") == ME
    assert actor_of(db, "hook-in-process") == "bob (uid 4343)"
