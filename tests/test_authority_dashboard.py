"""The dashboard across clusters: the Clusters page ATTACHes several cluster ledgers read-only and
shows them together with a cluster filter; with an authority named, each team's shared numbers."""
from __future__ import annotations

import shutil

import duckdb
import pytest

from lib.dashboard.cluster_queries import cluster_ledgers
from lib.ledger.connection import LedgerError
from tests.fixtures_app import open_app

pytestmark = pytest.mark.usefixtures("fresh_caches")


def board_of(at):
    """The 'Per cluster and team' table (the first grid when no authority is named)."""
    return at.dataframe[0].value


def test_the_clusters_page_shows_two_attached_ledgers_and_filters_by_cluster(page_ledger, tmp_path, monkeypatch):
    path, _ = page_ledger
    other = tmp_path / "b.duckdb"
    shutil.copyfile(path, other)
    with duckdb.connect(str(other)) as con:   # cluster b never decided for the busiest team
        team = con.execute("SELECT team FROM decisions GROUP BY team ORDER BY count(*) DESC LIMIT 1").fetchone()[0]
        con.execute("DELETE FROM decisions WHERE team = ?", [team])
    monkeypatch.setenv("GATE_CLUSTER_LEDGERS", f"a={path},b={other}")
    at = open_app("clusters")
    assert not at.exception and not at.error, [e.value for e in at.exception] + [e.value for e in at.error]
    assert [t.value for t in at.title] == ["Clusters"]
    board = board_of(at)
    assert set(board["cluster"]) == {"a", "b"}
    mine = board[board["team"] == team].set_index("cluster")
    assert mine.loc["a", "admitted"] + mine.loc["a", "deferred"] > 0
    assert "b" not in mine.index or mine.loc["b", "admitted"] + mine.loc["b", "deferred"] == 0
    # everything else is in both copies alike
    rest = board[board["team"] != team]
    assert (rest[rest["cluster"] == "a"].drop(columns="cluster").reset_index(drop=True)
            .equals(rest[rest["cluster"] == "b"].drop(columns="cluster").reset_index(drop=True)))

    at.multiselect(key="cl_clusters").set_value(["b"]).run()
    assert not at.exception
    assert set(board_of(at)["cluster"]) == {"b"}
    assert set(at.dataframe[1].value["cluster"]) <= {"b"}


def test_cluster_ledgers_names_each_file_and_refuses_a_bad_entry(tmp_path):
    assert cluster_ledgers(env={"GATE_CLUSTER_LEDGERS": f"a={tmp_path}/a.duckdb, b = {tmp_path}/b.duckdb"}) == {
        "a": tmp_path / "a.duckdb", "b": tmp_path / "b.duckdb"}
    assert list(cluster_ledgers(tmp_path / "x.duckdb", env={"GATE_CLUSTER": "east"})) == ["east"]
    for bad in ("a", "a=", "'; DROP=x", "a=x,a=y", "-a=x"):
        with pytest.raises(LedgerError, match="GATE_CLUSTER_LEDGERS"):
            cluster_ledgers(env={"GATE_CLUSTER_LEDGERS": bad})


@pytest.mark.postgres
def test_with_an_authority_the_page_shows_every_cluster_holds_against_the_team(
        postgres_server, authority_db, tmp_path, monkeypatch):
    from lib.authority.facts import Authority
    from lib.ledger.deciding import submit_request
    from tests.fixtures_postgres import GATE_PASSWORD, make_clusters, shared_request
    url = postgres_server.url(authority_db)
    ledgers = make_clusters(tmp_path, url, quota=8, budget=100)
    for cluster, n in (("a", 2), ("b", 1)):
        authority = Authority(url, cluster)
        for i in range(n):
            assert submit_request(shared_request(f"{cluster}-{i}"), db=ledgers[cluster],
                                  authority=authority)["state"] == "admit"
        authority.close()
    monkeypatch.setenv("GATE_DB", str(ledgers["a"]))
    monkeypatch.setenv("GATE_DEMO", "0")
    monkeypatch.setenv("GATE_CLUSTER_LEDGERS", f"a={ledgers['a']},b={ledgers['b']}")
    monkeypatch.setenv("GATE_AUTHORITY", url)
    monkeypatch.setenv("GATE_CLUSTER", "a")
    at = open_app("clusters")
    assert not at.exception and not at.error, [e.value for e in at.error]
    shared = at.dataframe[0].value.set_index("team")
    assert shared.loc["shared", "held_gpus"] == 6 and shared.loc["shared", "clusters"] == "a: 4, b: 2"
    assert shared.loc["shared", "remaining_gpu_hours"] == pytest.approx(100 - 30)
    board = at.dataframe[1].value
    assert sorted(zip(board["cluster"], board["held_gpus"])) == [("a", 4), ("b", 2)]
    assert all(GATE_PASSWORD not in str(x.value) for x in [*at.markdown, *at.caption, *at.warning, *at.info])
    # the budget on Reservations is the authority's too: both clusters' holds are committed
    at.switch_page("pages/1_Reservations.py").run()
    assert not at.exception, [e.value for e in at.exception]
    budget = next(d.value for d in at.dataframe if "consumed_gpu_hours" in d.value.columns).set_index("team")
    assert budget.loc["shared", "committed_gpu_hours"] == pytest.approx(30)
    assert any("shared authority's" in c.value for c in at.caption)
    # and so is the team board on Overview: budget left counts both clusters' holds
    at.switch_page("pages/0_Overview.py").run()
    assert not at.exception, [e.value for e in at.exception]
    team_rows = next(d.value for d in at.dataframe if "budget_left_gpu_hours" in d.value.columns).set_index("team")
    assert team_rows.loc["shared", "budget_left_gpu_hours"] == pytest.approx(100 - 30)
    assert any("shared authority's" in c.value for c in at.caption)
