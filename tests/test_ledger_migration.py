"""A ledger written by schema version 1 (before team colours and prices), 2 (before the audit of who
wrote), 3 (before the weekly usage kept beside runs), 4 (before a team's pilot scaling efficiency,
runs' checkpoints and interruptions, and budget alerts), 5 (before the cluster's windows) or 6 (before
the queue's age and the pools) is upgraded, its data kept: by any write open, by `upgrade_ledger`, and
by the app on start, whose pages only read."""
from __future__ import annotations

import duckdb
import pytest
from streamlit.testing.v1 import AppTest

from lib.ledger.connection import SCHEMA_VERSION, LedgerError, open_ledger, upgrade_ledger
from lib.ledger.state import team_policy
from lib.ledger.teams_file import load_teams_file
from tests.fixtures_app import ROOT, fill_ledger, page_script
from tests.fixtures_ledger import VISION_TEAM_TOML, query, run_cli

TABLES = ("teams", "snapshots", "runs", "pilots", "decisions")


# what each schema version added, undone: a ledger of an older version is today's without them
ADDED_BY = {
    8: ("ALTER TABLE alerts DROP COLUMN claimed_by", "ALTER TABLE alerts DROP COLUMN claimed_until"),
    7: ("ALTER TABLE teams DROP COLUMN queue_max_age_days", "DROP TABLE pools"),
    6: ("DROP TABLE cluster_windows",),
    5: ("ALTER TABLE teams DROP COLUMN scaling_efficiency", "ALTER TABLE teams DROP COLUMN enforce_spend_limit",
        "ALTER TABLE teams DROP COLUMN set_time_limit", "DROP TABLE interruptions",
        "DROP SEQUENCE interruption_seq", "DROP TABLE checkpoints", "DROP TABLE alerts"),
    4: ("DROP TABLE team_weeks",),
    3: ("ALTER TABLE decisions DROP COLUMN actor", "DROP TABLE audit", "DROP SEQUENCE audit_seq"),
    2: ("ALTER TABLE teams DROP COLUMN colour", "DROP TABLE prices"),
}


def make_version(path, version: int) -> None:
    """A ledger of schema `version` with page-shaped data: today's schema without what the later
    versions added."""
    fill_ledger(path, n_runs=200)
    with open_ledger(path) as con:
        for later in range(SCHEMA_VERSION, version, -1):
            for statement in ADDED_BY[later]:
                con.execute(statement)
        con.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", [str(version)])


def contents(path) -> dict:
    return {t: query(path, f"SELECT * FROM {t} ORDER BY ALL") for t in TABLES}


# the values an upgrade gives old rows in the columns it adds (teams.colour, teams.scaling_efficiency,
# teams.enforce_spend_limit and set_time_limit, decisions.actor, teams.queue_max_age_days): NULL, but
# linear scaling, the spend limit enforced and the time limit left alone for every team that had a policy
# before them (a NULL queue age reads as the default)
NO_COLOUR, NO_ACTOR, NO_AGE = None, None, None
LINEAR = (1.0, True, False)


def assert_kept(before: dict, after: dict, new_columns: dict[str, tuple]) -> None:
    """Every row kept; each table in `new_columns` gained those columns, with those values in old rows."""
    for t in TABLES:
        assert after[t] == [(*row, *new_columns.get(t, ())) for row in before[t]], t


@pytest.fixture
def v1_ledger(tmp_path):
    path = tmp_path / "v1.duckdb"
    make_version(path, 1)
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
    assert_kept(before, contents(v1_ledger), new_columns={"teams": (NO_COLOUR, *LINEAR, NO_AGE), "decisions": (NO_ACTOR,)})


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
    assert_kept(before, contents(v1_ledger), new_columns={"teams": (NO_COLOUR, *LINEAR, NO_AGE), "decisions": (NO_ACTOR,)})


def test_a_version_2_ledger_gains_the_audit_table_and_decision_actors_and_keeps_its_rows(tmp_path):
    path = tmp_path / "v2.duckdb"
    make_version(path, 2)
    before = contents(path)
    with pytest.raises(LedgerError, match="needs migrating from schema version 2"):
        with open_ledger(path, read_only=True):
            pass
    assert upgrade_ledger(path) is True
    assert query(path, "SELECT value FROM meta WHERE key = 'schema_version'") == [(str(SCHEMA_VERSION),)]
    assert query(path, "SELECT count(*) FROM audit") == [(0,)]
    assert_kept(before, contents(path), new_columns={"teams": (*LINEAR, NO_AGE), "decisions": (NO_ACTOR,)})


def test_a_version_3_ledger_gains_the_weekly_usage_of_its_runs_and_keeps_its_rows(tmp_path):
    path = tmp_path / "v3.duckdb"
    make_version(path, 3)
    before = contents(path)
    assert upgrade_ledger(path) is True
    assert query(path, "SELECT value FROM meta WHERE key = 'schema_version'") == [(str(SCHEMA_VERSION),)]
    assert_kept(before, contents(path), new_columns={"teams": (*LINEAR, NO_AGE)})
    weeks = query(path, "SELECT team, week, gpu_hours FROM team_weeks ORDER BY ALL")
    assert weeks and weeks == query(path, """SELECT team, date_trunc('week', started_at)::DATE, sum(CASE WHEN ended_at
        IS NOT NULL THEN coalesce(actual_gpu_hours, 0) ELSE coalesce(reserved_gpu_hours, 0) END)
        FROM runs WHERE started_at IS NOT NULL GROUP BY ALL ORDER BY ALL""")


VISION_VERSION_BEFORE = "5243fdc88574"   # its policy_version as the release before scaling_efficiency hashed it


def test_a_version_4_ledger_gains_linear_scaling_and_an_unchanged_policy_keeps_its_version(tmp_path):
    path = tmp_path / "v4.duckdb"
    make_version(path, 4)
    with duckdb.connect(str(path)) as con:   # the team as the release before loaded it (a ledger open would upgrade)
        con.execute("UPDATE teams SET policy_version = ? WHERE team = 'vision'", [VISION_VERSION_BEFORE])
    before = contents(path)
    assert upgrade_ledger(path) is True
    assert_kept(before, contents(path), new_columns={"teams": (*LINEAR, NO_AGE)})
    for table in ("interruptions", "checkpoints", "alerts"):   # the tables version 5 added, empty
        assert query(path, f"SELECT count(*) FROM {table}") == [(0,)]
    teams_file = tmp_path / "teams.toml"
    teams_file.write_text(VISION_TEAM_TOML, encoding="utf-8")
    p = run_cli("teams", "--file", teams_file, db=path)
    assert p.returncode == 0, p.stderr
    assert query(path, "SELECT policy_version, scaling_efficiency FROM teams WHERE team = 'vision'") == \
        [(VISION_VERSION_BEFORE, 1.0)]
    teams_file.write_text(VISION_TEAM_TOML + "scaling_efficiency = 0.9\n", encoding="utf-8")
    assert run_cli("teams", "--file", teams_file, db=path).returncode == 0
    [(version, efficiency)] = query(path, "SELECT policy_version, scaling_efficiency FROM teams WHERE team = 'vision'")
    assert version != VISION_VERSION_BEFORE and efficiency == 0.9


def test_a_version_6_ledger_gains_the_queue_age_and_the_pools_and_reads_the_default_age(tmp_path):
    path = tmp_path / "v6.duckdb"
    make_version(path, 6)
    before = contents(path)
    assert upgrade_ledger(path) is True
    assert query(path, "SELECT value FROM meta WHERE key = 'schema_version'") == [(str(SCHEMA_VERSION),)]
    assert_kept(before, contents(path), new_columns={"teams": (NO_AGE,)})
    assert query(path, "SELECT count(*) FROM pools") == [(0,)]
    with open_ledger(path, read_only=True) as con:
        team = con.execute("SELECT min(team) FROM teams").fetchone()[0]
        assert team_policy(con, team)["queue_max_age_days"] == 14   # NULL in the old row: the default
