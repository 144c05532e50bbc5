"""An authority setting the operator must fix — an sslmode libpq does not know, a database the
PostgreSQL server does not have — exits 2 with a message saying what to fix (not 3, a gate failure
that may pass by waiting), from the command line and from a gate server's start, and no line of any
output holds the URL's password."""
from __future__ import annotations

import subprocess
import sys

import pytest

from tests.fixtures_ledger import run_cli, write_json
from tests.fixtures_postgres import GATE_PASSWORD, authority_env, make_clusters, shared_request
from tests.fixtures_slurm import REPO

pytestmark = [pytest.mark.postgres]
PLANTED = "Pl4nted-" + GATE_PASSWORD   # a password only the bad URLs carry


def outputs(url: str, ledger, tmp_path) -> list[tuple[str, subprocess.CompletedProcess]]:
    env = authority_env(url, "a")
    request = write_json(tmp_path / "r.json", shared_request("a-0"))
    got = [(what, run_cli("--db", ledger, *args, env=env))
           for what, args in (("status", ("authority", "status")), ("submit", ("submit", request)),
                              ("init", ("authority", "init")))]
    server = subprocess.run([sys.executable, "-m", "lib.slurm.server", "--socket", str(tmp_path / "s.sock"),
                             "--db", str(ledger)], cwd=REPO, env={**env, "PYTHONPATH": str(REPO)},
                            capture_output=True, text=True, timeout=120)
    return got + [("server", server)]


@pytest.mark.parametrize("bad, said", [
    ("sslmode", "sslmode='verify-everything': it must be one of disable, allow, prefer, require"),
    ("database", "which does not exist on that server"),
])
def test_a_bad_sslmode_or_a_missing_database_exits_2_saying_so_and_naming_no_password(
        postgres_server, authority_db, tmp_path, bad, said):
    ledgers = make_clusters(tmp_path, postgres_server.url(authority_db), names=("a",))
    if bad == "sslmode":
        url = postgres_server.url(authority_db, password=PLANTED, sslmode="verify-everything")
    else:
        # the role's own password: PostgreSQL checks it before it looks for the database
        url = postgres_server.url(authority_db + "_missing")
    for what, out in outputs(url, ledgers["a"], tmp_path):
        assert out.returncode == 2, (what, out.returncode, out.stderr)
        assert said in out.stderr, (what, out.stderr)
        for line in (out.stdout + out.stderr).splitlines():
            assert PLANTED not in line and GATE_PASSWORD not in line, (what, line)
    assert not (tmp_path / "s.sock").exists()
