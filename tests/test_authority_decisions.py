"""Several clusters, one budget: gates that name the same authority (a real PostgreSQL) decide each
request against the team's policy, the holds of every cluster and the month's spend kept there;
each cluster's own ledger keeps its decisions, with the cluster's name on each."""
from __future__ import annotations

import json

import pytest

from tests.fixtures_ledger import counts, query, run_cli, write_json
from tests.fixtures_postgres import GATE_PASSWORD, SHARED_TEAMS, authority_env, make_clusters, shared_request

pytestmark = pytest.mark.postgres


def submit(ledger, url, cluster, request, tmp_path, *args, op="submit"):
    path = write_json(tmp_path / f"req-{cluster}-{request['run_id']}.json", request)
    return run_cli("--db", ledger, op, path, *args, env=authority_env(url, cluster))


def holds(server, db):
    import psycopg
    with psycopg.connect(server.url(db)) as con:
        return con.execute("SELECT cluster, run_id, gpus, released_at IS NOT NULL, released_why "
                           "FROM training_gate.holds ORDER BY cluster, run_id").fetchall()


def test_a_cluster_admits_only_what_the_other_left_of_the_team_quota(postgres_server, authority_db, tmp_path):
    url = postgres_server.url(authority_db)
    ledgers = make_clusters(tmp_path, url, quota=8, budget=10_000)
    for i in range(3):
        out = submit(ledgers["a"], url, "a", shared_request(f"a-{i}"), tmp_path)
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["cluster"] == "a"
    assert submit(ledgers["b"], url, "b", shared_request("b-0"), tmp_path).returncode == 0
    out = submit(ledgers["b"], url, "b", shared_request("b-1"), tmp_path)
    assert out.returncode == 1, out.stderr
    decision = json.loads(out.stdout)
    capacity = [r for r in decision["reasons"] if r["code"] == "capacity"]
    assert capacity and capacity[0]["in_use"] == 8 and capacity[0]["limit"] == 8
    assert decision["cluster"] == "b"
    # each decision is in its own cluster's ledger, and only there
    assert query(ledgers["a"], "SELECT run_id FROM decisions ORDER BY run_id") == [("a-0",), ("a-1",), ("a-2",)]
    assert query(ledgers["b"], "SELECT run_id, state FROM decisions ORDER BY run_id") == [
        ("b-0", "admit"), ("b-1", "defer")]
    assert [h[:3] for h in holds(postgres_server, authority_db)] == [
        ("a", "a-0", 2), ("a", "a-1", 2), ("a", "a-2", 2), ("b", "b-0", 2)]

    # a run finishing on cluster a frees its accelerators for cluster b
    fin = run_cli("--db", ledgers["a"], "finish", "a-1", "--actual-gpu-hours", "3", "--stop-reason", "completed",
                  env=authority_env(url, "a"))
    assert fin.returncode == 0, fin.stderr
    assert ("a", "a-1", 2, True, "finish") in holds(postgres_server, authority_db)
    assert submit(ledgers["b"], url, "b", shared_request("b-2"), tmp_path).returncode == 0


def test_the_month_spend_of_every_cluster_counts_against_the_budget(postgres_server, authority_db, tmp_path):
    url = postgres_server.url(authority_db)
    ledgers = make_clusters(tmp_path, url, quota=64, budget=25)
    assert submit(ledgers["a"], url, "a", shared_request("a-0"), tmp_path).returncode == 0
    assert submit(ledgers["a"], url, "a", shared_request("a-1"), tmp_path).returncode == 0
    out = submit(ledgers["b"], url, "b", shared_request("b-0"), tmp_path)
    assert out.returncode == 1
    budget = [r for r in json.loads(out.stdout)["reasons"] if r["code"] == "period-budget"][0]
    assert budget["in_use"] == pytest.approx(20.0)   # cluster a's two holds of 10 GPU-h
    # the what-if on cluster b reads the authority too, and writes nothing there
    before = holds(postgres_server, authority_db)
    check = submit(ledgers["b"], url, "b", shared_request("b-1"), tmp_path, op="check")
    assert check.returncode == 1 and json.loads(check.stdout)["cluster"] == "b"
    assert holds(postgres_server, authority_db) == before
    # a-0 ends having spent 1 GPU-h: 1 spent + 10 held + 10 asked ≤ 25
    fin = run_cli("--db", ledgers["a"], "finish", "a-0", "--actual-gpu-hours", "1", "--stop-reason", "completed",
                  env=authority_env(url, "a"))
    assert fin.returncode == 0, fin.stderr
    out = submit(ledgers["b"], url, "b", shared_request("b-2"), tmp_path)
    assert out.returncode == 0, out.stdout
    # and the status command shows both clusters' holds and the month's spend
    status = run_cli("authority", "status", env=authority_env(url, "b"))
    assert status.returncode == 0, status.stderr
    team = json.loads(status.stdout)["teams"]["shared"]
    assert team["month_spent_gpu_hours"] == pytest.approx(1.0)
    assert set(team["clusters"]) == {"a", "b"} and team["held_gpus"] == 4
    assert GATE_PASSWORD not in status.stdout + status.stderr


def test_without_the_schema_or_with_a_newer_one_deciders_exit_2_and_write_nothing(
        postgres_server, authority_db, tmp_path):
    url = postgres_server.url(authority_db)
    teams = tmp_path / "teams.toml"
    teams.write_text(SHARED_TEAMS.format(quota=8, budget=100), encoding="utf-8")
    ledger = tmp_path / "a.duckdb"
    assert run_cli("--db", ledger, "teams", "--file", teams).returncode == 0
    out = submit(ledger, url, "a", shared_request("a-0"), tmp_path)
    assert out.returncode == 2
    assert "no Training Gate schema" in out.stderr and "authority init" in out.stderr
    assert GATE_PASSWORD not in out.stderr and counts(ledger)["decisions"] == 0

    assert run_cli("authority", "init", "--teams-file", teams, env=authority_env(url, "a")).returncode == 0
    postgres_server.admin("UPDATE training_gate.meta SET value = '99' WHERE key = 'schema_version'", db=authority_db)
    for args in (("--db", ledger, "submit", write_json(tmp_path / "r.json", shared_request("a-1"))),
                 ("authority", "status"), ("authority", "init", "--teams-file", teams)):
        out = run_cli(*args, env=authority_env(url, "a"))
        assert out.returncode == 2, (args, out.stderr)
        assert "schema version 99, newer than this program's 1" in out.stderr
        assert GATE_PASSWORD not in out.stderr
    assert counts(ledger)["decisions"] == 0


@pytest.mark.parametrize("bad", [
    "postgresql://gate:{pw}@127.0.0.1:notaport/db",
    "mysql://gate:{pw}@127.0.0.1/db",
    "postgresql://gate:{pw}@127.0.0.1/db?sslmod=require",
    "postgresql://gate:{pw}@[::1/db",
    "postgresql://gate:{pw}@127.0.0.1",
])
def test_a_malformed_url_exits_2_without_its_password(tmp_path, bad):
    ledger = tmp_path / "a.duckdb"
    teams = tmp_path / "teams.toml"
    teams.write_text(SHARED_TEAMS.format(quota=8, budget=100), encoding="utf-8")
    assert run_cli("--db", ledger, "teams", "--file", teams).returncode == 0
    url = bad.format(pw=GATE_PASSWORD)
    for args in (("--db", ledger, "submit", write_json(tmp_path / "r.json", shared_request("a-0"))),
                 ("--db", ledger, "check", tmp_path / "r.json"), ("authority", "status")):
        out = run_cli(*args, env=authority_env(url, "a"))
        assert out.returncode == 2, (url, args, out.stderr)
        assert "authority URL" in out.stderr and GATE_PASSWORD not in out.stdout + out.stderr
    assert counts(ledger)["decisions"] == 0


def test_a_missing_cluster_name_exits_2(tmp_path):
    env = authority_env("postgresql://gate@127.0.0.1/db", "x")
    env.pop("GATE_CLUSTER")
    out = run_cli("authority", "status", env=env)
    assert out.returncode == 2 and "GATE_CLUSTER" in out.stderr


def test_an_unreachable_or_refusing_authority_is_a_gate_failure_that_names_no_password(
        postgres_server, authority_db, tmp_path):
    url = postgres_server.url(authority_db)
    ledgers = make_clusters(tmp_path, url, names=("a",))
    wrong = postgres_server.url(authority_db, password="Wr0ng-" + GATE_PASSWORD)
    from tests.fixtures_postgres import free_port
    closed = f"postgresql://gate:{GATE_PASSWORD}@127.0.0.1:{free_port()}/{authority_db}?connect_timeout=2"
    for bad, said in ((wrong, "password authentication failed"), (closed, "cannot be reached")):
        out = submit(ledgers["a"], bad, "a", shared_request("a-0"), tmp_path)
        assert out.returncode == 3, out.stderr
        assert said in out.stderr and "gate failure" in out.stderr
        assert GATE_PASSWORD not in out.stdout + out.stderr
    assert counts(ledgers["a"])["decisions"] == 0
    assert holds(postgres_server, authority_db) == []


def test_without_an_authority_decisions_carry_no_cluster(tiny_ledger, tmp_path):
    from tests.fixtures_ledger import tiny_request
    out = run_cli("--db", tiny_ledger, "submit", write_json(tmp_path / "r.json", tiny_request(1)))
    assert out.returncode == 0 and "cluster" not in json.loads(out.stdout)


def test_the_command_line_admits_within_its_share_when_told_and_sync_writes_those_holds_once(
        postgres_server, authority_db, tmp_path):
    from tests.fixtures_postgres import free_port
    url = postgres_server.url(authority_db)
    ledgers = make_clusters(tmp_path, url, names=("a",), quota=8, budget=10_000)
    away = f"postgresql://gate:{GATE_PASSWORD}@127.0.0.1:{free_port()}/{authority_db}?connect_timeout=2"
    states = []
    for i in range(3):
        path = write_json(tmp_path / f"o{i}.json", shared_request(f"a-{i}"))
        out = run_cli("--db", ledgers["a"], "submit", path,
                      env=authority_env(away, "a", GATE_AUTHORITY_OFFLINE_SHARE="0.5"))
        assert GATE_PASSWORD not in out.stdout + out.stderr
        decision = json.loads(out.stdout)
        assert decision["authority"] == "offline" and "cannot be reached" in " ".join(decision["notes"])
        states.append(decision["state"])
    assert states == ["admit", "admit", "defer"]   # half of 8 accelerators: two requests of 2
    assert holds(postgres_server, authority_db) == []
    for expected in (2, 0):   # the second sync finds nothing left to add
        out = run_cli("--db", ledgers["a"], "authority", "sync", env=authority_env(url, "a"))
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["holds_added"] == expected
    assert [h[:3] for h in holds(postgres_server, authority_db)] == [("a", "a-0", 2), ("a", "a-1", 2)]


def test_an_invalid_offline_share_exits_2(tmp_path):
    out = run_cli("authority", "status", env=authority_env("postgresql://gate@127.0.0.1/db", "a",
                                                           GATE_AUTHORITY_OFFLINE_SHARE="2"))
    assert out.returncode == 2 and "GATE_AUTHORITY_OFFLINE_SHARE" in out.stderr


def test_an_authority_table_in_the_teams_file_names_the_authority(postgres_server, authority_db, tmp_path):
    url = postgres_server.url(authority_db)
    teams = tmp_path / "teams.toml"
    teams.write_text(SHARED_TEAMS.format(quota=8, budget=100) + f'\n[authority]\nurl = "{url}"\ncluster = "east"\n',
                     encoding="utf-8")
    env = authority_env(url, "x")
    env.pop("GATE_AUTHORITY")
    env.pop("GATE_CLUSTER")
    assert run_cli("--db", tmp_path / "l.duckdb", "teams", "--file", teams, env=env).returncode == 0
    out = run_cli("authority", "init", "--teams-file", teams, env=env)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["teams_inserted"] == 1
    teams.write_text(teams.read_text() + 'colour = "red"\n', encoding="utf-8")   # an unknown key is refused
    out = run_cli("authority", "status", "--teams-file", teams, env=env)
    assert out.returncode == 2 and "[authority] colour: unknown key" in out.stderr
    assert GATE_PASSWORD not in out.stderr
