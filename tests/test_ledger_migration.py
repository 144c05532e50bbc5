"""A ledger written by schema version 1 (before team colours and prices) is upgraded, its data
kept: by any write open, by `upgrade_ledger`, and by the app on start, whose pages only read."""
from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from lib.ledger.connection import SCHEMA_VERSION, LedgerError, open_ledger, upgrade_ledger
from lib.ledger.teams_file import load_teams_file
from tests.fixtures_app import ROOT, fill_ledger, page_script
from tests.fixtures_ledger import query, run_cli

TABLES = ("teams", "snapshots", "runs", "pilots", "decisions")


def make_version_1(path) -> None:
    """A version-1 ledger with page-shaped data: today's schema without what version 2 added."""
    fill_ledger(path, n_runs=200)
    with open_ledger(path) as con:
        con.execute("ALTER TABLE teams DROP COLUMN colour")
        con.execute("DROP TABLE prices")
        con.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")


def contents(path) -> dict:
    return {t: query(path, f"SELECT * FROM {t} ORDER BY ALL") for t in TABLES}


@pytest.fixture
def v1_ledger(tmp_path):
    path = tmp_path / "v1.duckdb"
    make_version_1(path)
    assert query(path, "SELECT value FROM meta WHERE key = 'schema_version'") == [("1",)]
    return path


def test_a_read_only_open_refuses_a_version_1_ledger_until_it_is_upgraded(v1_ledger):
    before = contents(v1_ledger)
    with pytest.raises(LedgerError, match="needs migrating"):
        with open_ledger(v1_ledger, read_only=True):
            pass
    assert upgrade_ledger(v1_ledger) is True
    assert upgrade_ledger(v1_ledger) is False           # once: a current ledger is left alone
    with open_ledger(v1_ledger, read_only=True) as con:
        assert con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchall() == \
            [(str(SCHEMA_VERSION),)]
        assert con.execute("SELECT count(*) FROM teams WHERE colour IS NULL").fetchall() == \
            con.execute("SELECT count(*) FROM teams").fetchall()
        assert con.execute("SELECT count(*) FROM prices").fetchall() == [(0,)]
    after = contents(v1_ledger)
    assert after["teams"] == [(*row, None) for row in before["teams"]]   # every policy kept, colour NULL
    assert {t: after[t] for t in TABLES if t != "teams"} == {t: before[t] for t in TABLES if t != "teams"}


def test_upgrade_leaves_a_missing_file_alone(tmp_path):
    assert upgrade_ledger(tmp_path / "none.duckdb") is False
    assert not (tmp_path / "none.duckdb").exists()


def test_the_teams_command_upgrades_a_version_1_ledger_and_stores_colours_and_prices(v1_ledger):
    runs = query(v1_ledger, "SELECT count(*) FROM runs")
    p = run_cli("export", db=v1_ledger)                 # a reading command refuses it, saying what to do
    assert p.returncode == 3 and "needs migrating from schema version 1" in p.stderr
    assert "python -m lib teams" in p.stderr
    p = run_cli("teams", db=v1_ledger)
    assert p.returncode == 0, p.stderr
    shipped = {t["team"]: t["colour"] for t in load_teams_file()["teams"]}
    assert dict(query(v1_ledger, "SELECT team, colour FROM teams")) == shipped
    assert query(v1_ledger, "SELECT capacity, price_per_gpu_hour, currency FROM prices ORDER BY 1") == \
        [("preemptible", 0.9, "USD"), ("stable", 2.5, "USD")]
    assert query(v1_ledger, "SELECT count(*) FROM runs") == runs


@pytest.mark.usefixtures("fresh_caches")
def test_the_app_upgrades_a_version_1_ledger_on_start_and_renders_its_pages(v1_ledger, monkeypatch):
    before = contents(v1_ledger)
    monkeypatch.setenv("GATE_DB", str(v1_ledger))
    monkeypatch.setenv("GATE_DEMO", "0")
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
    at.run()
    for page in ("overview", "idle_capacity", "reservations"):
        at.switch_page(page_script(page)).run()
        assert not at.exception, [e.value for e in at.exception]
        assert not at.error, [e.value for e in at.error]
        assert at.title
        if page == "overview":   # the kept history is shown
            assert next(m.value for m in at.metric if m.label == "Runs in period") not in ("0", "—")
    assert query(v1_ledger, "SELECT value FROM meta WHERE key = 'schema_version'") == [(str(SCHEMA_VERSION),)]
    after = contents(v1_ledger)
    assert after["teams"] == [(*row, None) for row in before["teams"]]
    assert {t: after[t] for t in TABLES if t != "teams"} == {t: before[t] for t in TABLES if t != "teams"}
