"""Everything the gate creates beside a ledger is owner-only, whatever the caller's umask: the ledger
holds every decision, and a lock file another user can open is one they can hold to stall every
writer. Real processes started with a permissive umask."""
from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest

from tests.fixtures_ledger import write_json
from tests.fixtures_slurm import REPO, COMMENT_REQUEST, GateServerProcess, hook_request

pytestmark = pytest.mark.slow


def run_with_umask(*args: str, umask: int = 0o000, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", "import os, sys, runpy; os.umask(int(sys.argv[1], 8)); "
                           "sys.argv = sys.argv[2:]; runpy.run_module(sys.argv[0], run_name='__main__')",
                           oct(umask), *args], cwd=REPO, capture_output=True, text=True, timeout=120, **kw)


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_the_command_line_creates_the_ledger_and_its_lock_owner_only(tmp_path):
    db = tmp_path / "new" / "gate.duckdb"
    p = run_with_umask("lib", "--db", str(db), "teams")
    assert p.returncode == 0, p.stderr
    request = write_json(tmp_path / "r.json", {**COMMENT_REQUEST, "team": "vision", "gpus": 1,
                                               "max_runtime_hours": 1, "capacity": "stable"})
    p = run_with_umask("lib", "--db", str(db), "submit", str(request))
    assert p.returncode in (0, 1), p.stderr
    made = [db, db.with_name(db.name + ".writer-lock")]
    assert {str(f): oct(mode(f)) for f in made} == {str(f): "0o600" for f in made}
    assert mode(db.parent) == 0o700  # the folder the command created for it


def test_a_gate_server_creates_its_journal_and_pid_file_owner_only(tmp_path):
    db = tmp_path / "gate.duckdb"
    assert run_with_umask("lib", "--db", str(db), "teams").returncode == 0
    old = os.umask(0)
    try:  # the server process inherits the permissive umask
        server = GateServerProcess(db, tmp_path / "run" / "gate.sock")
    finally:
        os.umask(old)
    try:
        assert server.ask(hook_request("modes")).code == 0
        made = [db.with_name(db.name + suffix) for suffix in (".gate-journal", ".gate-server.lock")]
        made += [p for p in tmp_path.iterdir() if p.name.startswith("gate.duckdb.gate-journal-")]
        assert {str(f): oct(mode(f)) for f in made} == {str(f): "0o600" for f in made}
        assert mode(tmp_path / "run") == 0o700  # the socket's folder, made by the server
        assert mode(tmp_path / "run" / "gate.sock") == 0o600
    finally:
        server.stop()
