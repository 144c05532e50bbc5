"""Every write records who: an import from the command line is recorded as its OS user ("NAME (uid N)"),
one from the dashboard as the session's identity, a policy export as whoever downloaded it — in the same
transaction as the write, so a refused or dry-run import records nothing. Real ledgers, a real
`python -m lib`."""
from __future__ import annotations

import pytest

from lib.dashboard.audit import recent_writes
from lib.ledger.audit import os_actor, record, record_export
from lib.ledger.connection import open_ledger
from lib.ledger.imports import import_runs
from tests.fixtures_imports import GOOD, HEADER
from tests.fixtures_ledger import run_cli

COLUMNS = ["who", "origin", "action", "file_name", "format", "runs_inserted", "runs_updated", "runs_unchanged"]


def rows(db) -> list[list]:
    return recent_writes(db)[COLUMNS].astype(object).where(lambda d: d.notna(), None).values.tolist()


def test_a_command_line_import_is_recorded_as_the_os_user_with_its_file_and_counts(import_ledger, tmp_path):
    csv = tmp_path / "history.csv"
    csv.write_text(GOOD, encoding="utf-8")
    p = run_cli("import", csv, db=import_ledger)
    assert p.returncode == 0, p.stderr
    p = run_cli("import", csv, db=import_ledger)          # again: nothing changes, still a recorded write
    assert p.returncode == 0, p.stderr
    assert rows(import_ledger) == [[os_actor(), "cli", "import", "history.csv", "csv", 0, 0, 2],
                                   [os_actor(), "cli", "import", "history.csv", "csv", 2, 0, 0]]


def test_a_dashboard_import_is_recorded_as_the_session_identity(import_ledger):
    who = {"actor": "ana@example.org", "origin": "app", "file_name": "from-browser.csv"}
    report = import_runs(GOOD.encode(), db=import_ledger, who=who)
    assert report.written
    assert rows(import_ledger) == [["ana@example.org", "app", "import", "from-browser.csv", "csv", 2, 0, 0]]


def test_a_dry_run_or_a_refused_import_records_nothing(import_ledger):
    assert import_runs(GOOD.encode(), db=import_ledger, dry_run=True).ok
    bad = HEADER + "\nr9,nosuchteam,production,2,10,9,2024-05-01T10:00:00Z,2024-05-01T15:00:00Z,x\n"
    assert not import_runs(bad.encode(), db=import_ledger).ok
    assert recent_writes(import_ledger).empty


def test_a_policy_export_is_recorded_with_the_teams_it_changes(import_ledger):
    record_export(import_ledger, {"actor": "local", "origin": "app", "file_name": "teams.toml"},
                  detail="changes vision")
    audit = recent_writes(import_ledger)
    assert audit[["who", "action", "file_name", "format"]].values.tolist() == \
        [["local", "policy-export", "teams.toml", "toml"]]


def test_an_unknown_action_or_origin_is_refused(import_ledger):
    with open_ledger(import_ledger) as con:
        with pytest.raises(ValueError, match="unknown audit action"):
            record(con, {"actor": "x", "origin": "app", "file_name": None}, "delete")
        with pytest.raises(ValueError, match="unknown origin"):
            record(con, {"actor": "x", "origin": "web", "file_name": None}, "import")


def test_a_command_line_submit_records_the_os_user_as_who_asked(demo_ledger, tmp_path):
    from tests.fixtures_ledger import demo_request, query, write_json
    p = run_cli("submit", write_json(tmp_path / "req.json", demo_request(run_id="vision-who-001")), db=demo_ledger)
    assert p.returncode == 0, p.stderr
    assert query(demo_ledger, "SELECT actor, state FROM decisions WHERE run_id = 'vision-who-001'") == [(os_actor(), "admit")]
