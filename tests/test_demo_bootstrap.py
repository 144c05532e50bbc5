"""Demo history on first start is built only where it cannot pass for a team's history: into a new
ledger (nothing in it at all), in local mode (loopback, no sign-in) or for a signed-in planner, never
when $GATE_DEMO turns it off; and each build is in the audit — the app's as the session's identity,
`python -m lib demo`'s as the OS user. Anyone else on a ledger without runs is told how to load history.
Real ledgers in temp dirs, real AppTest sessions, a real `python -m lib`."""
from __future__ import annotations


from lib.dashboard.audit import recent_writes
from lib.ledger.audit import os_actor
from lib.ledger.connection import open_ledger
from lib.ledger.demo import already_holds, ensure_demo_history
from tests.fixtures_app import run_count
from tests.fixtures_gate import NOW
from tests.fixtures_ledger import query, run_cli

AUDIT = ["who", "origin", "action", "file_name", "runs_inserted"]


def test_ensure_demo_history_checks_the_ledger_is_new_and_records_who(tmp_path):
    path = tmp_path / "gate.duckdb"
    who = {"actor": "ana@example.org", "origin": "app", "file_name": None}
    assert ensure_demo_history(path, who=who, runs=200, days=60, now=NOW) is True
    assert recent_writes(path)[AUDIT].values.tolist() == [["ana@example.org", "app", "demo", None, 200]]
    assert ensure_demo_history(path, who=who, runs=200, days=60, now=NOW) is False    # not new any more
    assert run_count(path) == 200 and len(recent_writes(path)) == 1
    with open_ledger(path, read_only=True) as con:
        assert already_holds(con) == "200 row(s) in its runs table"


def test_python_m_lib_demo_is_audited_as_the_os_user(tmp_path):
    path = tmp_path / "gate.duckdb"
    p = run_cli("demo", "--runs", "200", "--days", "60", db=path)
    assert p.returncode == 0, p.stderr
    assert recent_writes(path)[AUDIT].values.tolist() == [[os_actor(), "cli", "demo", None, 200]]
    assert query(path, "SELECT detail FROM audit") == [("200 runs over 60 days, seed 0; replaced 0 earlier demo runs",)]
