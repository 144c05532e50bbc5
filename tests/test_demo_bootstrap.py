"""Demo history on first start is built only where it cannot pass for a team's history: into a new
ledger (nothing in it at all), in local mode (loopback, no sign-in) or for a signed-in planner, never
when $GATE_DEMO turns it off; and each build is in the audit — the app's as the session's identity,
`python -m lib demo`'s as the OS user. Anyone else on a ledger without runs is told how to load history.
Real ledgers in temp dirs, real AppTest sessions, a real `python -m lib`."""
from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from lib.dashboard.audit import recent_writes
from lib.ledger.audit import os_actor
from lib.ledger.connection import open_ledger
from lib.ledger.demo import DEFAULT_RUNS, already_holds, ensure_demo_history
from lib.ledger.teams_file import sync_teams
from tests.fixtures_app import ROOT, run_count
from tests.fixtures_auth import MEMBER, PLANNER, VIEWER, auth_section, signed_in, write_access
from tests.fixtures_gate import NOW
from tests.fixtures_ledger import query, run_cli

TIMEOUT_S = 120
AUDIT = ["who", "origin", "action", "file_name", "runs_inserted"]

pytestmark = pytest.mark.usefixtures("fresh_caches")


@pytest.fixture
def new_ledger(tmp_path, monkeypatch):
    """The app's ledger, created and empty (schema only), with the demo on as by default."""
    path = tmp_path / "gate.duckdb"
    with open_ledger(path):
        pass
    monkeypatch.setenv("GATE_DB", str(path))
    monkeypatch.delenv("GATE_DEMO", raising=False)
    return path


def contents(path) -> dict:
    """Every table's rows, to show a ledger unchanged."""
    with open_ledger(path, read_only=True) as con:
        tables = [r[0] for r in con.execute("SELECT table_name FROM information_schema.tables "
                                            "WHERE table_catalog = current_database()").fetchall()]
        return {t: sorted(map(repr, con.execute(f"SELECT * FROM {t}").fetchall())) for t in tables}


def app(email: str | None = None) -> AppTest:
    """app.py's first view: local mode, or signed in as `email` with sign-in configured."""
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT_S)
    if email:
        at.secrets["auth"] = auth_section()
        at.user = signed_in(email)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def says_how_to_load_history(at: AppTest, why: str) -> None:
    info = [i.value for i in at.info if "no run history" in i.value]
    assert info and "Upload" in info[0] and "python -m lib import" in info[0], [i.value for i in at.info]
    assert why in info[0], info[0]


def test_local_mode_builds_the_demo_into_a_new_ledger_and_audits_it_once(new_ledger):
    at = app()
    assert run_count(new_ledger) == DEFAULT_RUNS
    assert recent_writes(new_ledger)[AUDIT].values.tolist() == [["local", "app", "demo", None, DEFAULT_RUNS]]
    assert not any("no run history" in i.value for i in at.info)
    at.run()                                                    # a rerun builds nothing more
    assert len(recent_writes(new_ledger)) == 1 and run_count(new_ledger) == DEFAULT_RUNS


def test_a_signed_in_planner_gets_the_demo_recorded_under_their_email(new_ledger, tmp_path, monkeypatch):
    monkeypatch.setenv("GATE_ACCESS", str(write_access(tmp_path)))
    app(PLANNER)
    assert run_count(new_ledger) == DEFAULT_RUNS
    assert recent_writes(new_ledger)[AUDIT].values.tolist() == [[PLANNER, "app", "demo", None, DEFAULT_RUNS]]


@pytest.mark.parametrize("email", [VIEWER, MEMBER])
def test_a_viewer_or_member_never_builds_it_and_is_told_how_to_load_history(new_ledger, tmp_path, monkeypatch,
                                                                            email):
    monkeypatch.setenv("GATE_ACCESS", str(write_access(tmp_path)))
    before = contents(new_ledger)
    says_how_to_load_history(app(email), "only in local mode or for a planner")
    assert contents(new_ledger) == before


@pytest.mark.usefixtures("every_interface")
def test_local_mode_beyond_loopback_never_builds_it(new_ledger):
    before = contents(new_ledger)
    says_how_to_load_history(app(), "listens beyond this machine without sign-in")
    assert contents(new_ledger) == before


@pytest.mark.parametrize("value", ["off", "0", "False"])
def test_gate_demo_off_turns_it_off(new_ledger, monkeypatch, value):
    monkeypatch.setenv("GATE_DEMO", value)
    before = contents(new_ledger)
    says_how_to_load_history(app(), "turned off")
    assert contents(new_ledger) == before


def with_teams(path) -> None:
    with open_ledger(path) as con:
        sync_teams(con)


def with_audit_only(path) -> None:
    with open_ledger(path) as con:
        con.execute("INSERT INTO audit (written_at, actor, origin, action) VALUES (now(), 'x', 'cli', 'teams')")


def with_foreign_table(path) -> None:
    with open_ledger(path) as con:
        con.execute("CREATE TABLE notes (t VARCHAR)")


def with_gate_server_journal(path) -> None:
    with open_ledger(path) as con:
        con.execute("INSERT INTO meta VALUES ('journal:abc', '12')")


HELD = {"teams": (with_teams, "row(s) in its teams table"),
        "audit": (with_audit_only, "1 row(s) in its audit table"),
        "foreign table": (with_foreign_table, "main.notes that is not the ledger's"),
        "meta": (with_gate_server_journal, "1 row(s) in its meta table")}


@pytest.mark.parametrize("kind", HELD)
def test_a_ledger_holding_anything_never_gets_it_even_in_local_mode(new_ledger, kind):
    fill, held = HELD[kind]
    fill(new_ledger)
    before = contents(new_ledger)
    says_how_to_load_history(app(), held)
    assert contents(new_ledger) == before


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
