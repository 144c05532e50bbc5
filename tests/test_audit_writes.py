"""Every write the command line makes says who made it, in one actor format ("NAME (uid N)",
lib.ledger.audit.os_actor): `finish` and `teams` each add an audit row in the same transaction as
their write (so a refused one adds none), and `submit` records the same actor with its decision.
Real `python -m lib` processes, real ledgers."""
from __future__ import annotations

import pytest

from lib.ledger.audit import os_actor
from lib.ledger.deciding import submit_request
from lib.ledger.finishing import FinishInputError, finish_run
from tests.fixtures_ledger import TINY_TEAMS, query, run_cli, tiny_request, write_json

AUDIT = ("SELECT actor, origin, action, file_name, format, rows_inserted, rows_updated, rows_unchanged, detail "
         "FROM audit ORDER BY audit_id")


def test_os_actor_is_name_and_uid():
    import os
    from lib.ledger.audit import os_user
    assert os_actor() == f"{os_user()} (uid {os.getuid()})"


def test_finish_records_who_finished_which_run_and_why(tiny_ledger):
    submit_request(tiny_request(1), db=tiny_ledger)
    p = run_cli("finish", "tiny-001", "--actual-gpu-hours", "3", "--stop-reason", "early-stop", db=tiny_ledger)
    assert p.returncode == 0, p.stderr
    assert query(tiny_ledger, AUDIT) == [
        (os_actor(), "cli", "finish", None, None, None, 1, None, "run tiny-001: stopped early-stop")]


def test_a_refused_finish_records_nothing(tiny_ledger):
    submit_request(tiny_request(1), db=tiny_ledger)
    p = run_cli("finish", "tiny-001", "--actual-gpu-hours", "3", "--stop-reason", "completed",
                "--started-at", "2026-12-15T12:00:00", "--ended-at", "2026-12-15T11:00:00", db=tiny_ledger)
    assert p.returncode == 2 and "before started_at" in p.stderr    # refused inside the write transaction
    p = run_cli("finish", "nope", "--actual-gpu-hours", "1", "--stop-reason", "completed", db=tiny_ledger)
    assert p.returncode == 2
    assert query(tiny_ledger, AUDIT) == []
    assert query(tiny_ledger, "SELECT stop_reason FROM runs") == [(None,)]


def test_finish_run_records_the_caller_it_is_given(tiny_ledger):
    submit_request(tiny_request(1), db=tiny_ledger)
    who = {"actor": "ana@example.org", "origin": "app", "file_name": None}
    finish_run("tiny-001", actual_gpu_hours=2.0, stop_reason="budget", db=tiny_ledger, who=who)
    assert query(tiny_ledger, "SELECT actor, origin, action, detail FROM audit") == [
        ("ana@example.org", "app", "finish", "run tiny-001: stopped budget")]
    with pytest.raises(FinishInputError):
        finish_run("tiny-001", actual_gpu_hours=-1, stop_reason="budget", db=tiny_ledger, who=who)
    assert query(tiny_ledger, "SELECT count(*) FROM audit") == [(1,)]


def test_teams_records_who_loaded_which_file_and_what_changed(tmp_path):
    db = tmp_path / "g.duckdb"
    p = run_cli("teams", db=db)
    assert p.returncode == 0, p.stderr
    p = run_cli("teams", db=db)
    assert p.returncode == 0, p.stderr
    tiny = tmp_path / "tiny-policy.toml"
    tiny.write_text(TINY_TEAMS, encoding="utf-8")
    assert run_cli("teams", "--file", tiny, db=db).returncode == 0
    rows = query(db, AUDIT)
    assert [r[:8] for r in rows] == [
        (os_actor(), "cli", "teams", "teams.toml", "toml", 8, 0, 0),
        (os_actor(), "cli", "teams", "teams.toml", "toml", 0, 0, 8),
        (os_actor(), "cli", "teams", "tiny-policy.toml", "toml", 1, 0, 0)]
    assert rows[2][8] == "snapshots inserted 1, updated 0, unchanged 0"


def test_a_refused_teams_file_records_nothing(tmp_path):
    db = tmp_path / "g.duckdb"
    bad = tmp_path / "bad.toml"
    bad.write_text("[teams.vision]\nreserved_gpus = -4\n", encoding="utf-8")
    assert run_cli("teams", "--file", bad, db=db).returncode == 2
    assert query(db, "SELECT count(*) FROM audit") == [(0,)]


def test_a_command_line_submit_records_the_same_actor_with_its_decision(tiny_ledger, tmp_path):
    p = run_cli("submit", write_json(tmp_path / "r.json", tiny_request(1)), db=tiny_ledger)
    assert p.returncode == 0, p.stderr
    assert query(tiny_ledger, "SELECT actor, origin FROM decisions") == [(os_actor(), "cli")]
