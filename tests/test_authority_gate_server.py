"""Two warm gate servers (two clusters: two ledgers, one authority on a real PostgreSQL), each taking
a burst from 16 callers for the same team: together they never admit more than the team's quota or
month budget, and every answered decision is in exactly one cluster's ledger — also when one server
is killed with SIGKILL and PostgreSQL restarts in the middle of the burst, or PostgreSQL alone
restarts: then no answered decision is lost and no hold counted twice (the team fills to exactly its
quota after). Without the authority the server refuses (the default) or, when told, admits within
its cluster's share."""
from __future__ import annotations

import json
import signal
import threading
import time

import pytest

from lib.slurm.wire import ask
from tests.fixtures_ledger import query, run_cli
from tests.fixtures_postgres import authority_env, make_clusters, shared_request
from tests.fixtures_slurm import GateServerProcess

pytestmark = [pytest.mark.postgres, pytest.mark.slow]
CALLERS = 16


def start(monkeypatch, url, cluster, ledger, sock, *, deadline_s: str | None = "20", **extra) -> GateServerProcess:
    """A gate server on `ledger` for `cluster` of the authority at `url`. `deadline_s`: its
    $GATE_AUTHORITY_DEADLINE_S (None: the default). These tests are about never over-booking, not
    about the deadline (its own test passes None): on a loaded machine a healthy PostgreSQL may take
    longer than the default 2.5 s."""
    for key, value in authority_env(url, cluster, **extra).items():
        monkeypatch.setenv(key, value)
    if deadline_s is None:
        monkeypatch.delenv("GATE_AUTHORITY_DEADLINE_S", raising=False)
    else:
        monkeypatch.setenv("GATE_AUTHORITY_DEADLINE_S", deadline_s)
    for key in ("GATE_AUTHORITY_OFFLINE_SHARE",):
        if key not in extra:
            monkeypatch.delenv(key, raising=False)
    server = GateServerProcess(ledger, sock)
    # warm: its ledger loaded and the authority asked once (a what-if: nothing written), so a burst
    # races two ready servers rather than one and one still starting
    ask(server.sock, {"op": "check", "db": str(server.db.resolve()), "request": json.dumps(shared_request("warm"))},
        timeout_s=60)
    return server


def submit(server: GateServerProcess, request: dict):
    """(exit code, decision or error text) of an op=submit to the server; None when it is gone."""
    try:
        got = ask(server.sock, {"op": "submit", "db": str(server.db.resolve()), "request": json.dumps(request)},
                  timeout_s=60)
    except (OSError, ValueError):   # gone, or killed while it answered (an empty answer)
        return None
    if got is None:
        return None
    code, rest = got
    return code, (json.loads(rest) if code == 0 else rest)


def burst(server, cluster: str, per_caller: int, answers: dict, prefix: str = "") -> list[threading.Thread]:
    """CALLERS threads, each submitting `per_caller` requests of team shared; answers[run_id] =
    (cluster, answer)."""
    def caller(k):
        for i in range(per_caller):
            run_id = f"{cluster}{prefix}-{k}-{i}"
            answers[run_id] = (cluster, submit(server, shared_request(run_id)))
    threads = [threading.Thread(target=caller, args=(k,)) for k in range(CALLERS)]
    for t in threads:
        t.start()
    return threads


def pg(url, sql):
    import psycopg
    with psycopg.connect(url) as con:
        return con.execute(sql).fetchall()


def ledger_decisions(ledger) -> dict:
    rows = query(ledger, "SELECT run_id, state, decision_json FROM decisions")
    assert len(rows) == len({r[0] for r in rows}), "a decision recorded twice"
    return {r[0]: (r[1], json.loads(r[2])) for r in rows}


def check_cluster_ledgers(answers: dict, ledgers: dict) -> dict:
    """Every answered decision in its own cluster's ledger once, never in another: {cluster: decisions}."""
    recorded = {c: ledger_decisions(ledger) for c, ledger in ledgers.items()}
    for run_id, (cluster, got) in answers.items():
        if got is None or got[0] != 0:
            continue   # no decision reached the caller
        for c in ledgers:
            assert (run_id in recorded[c]) == (c == cluster), (run_id, c)
        state, decision = recorded[cluster][run_id]
        assert state == got[1]["state"] and decision["cluster"] == cluster
    return recorded


def wait_for_answers(answers: dict, n: int, timeout_s: float = 60) -> None:
    """Until `n` callers have their answer (the burst is under way)."""
    deadline = time.monotonic() + timeout_s
    while len(answers) < n and time.monotonic() < deadline:
        time.sleep(0.01)


def settle_and_fill(monkeypatch, url, ledgers: dict, servers: dict, tmp_path, quota: int) -> dict:
    """After a burst that a fault broke into, with every server stopped: the authority holds each
    admit the ledgers recorded (none lost), `authority sync --grace-s 0` on each cluster adds none
    and releases only holds no ledger has (committed, then the answer lost to the fault); then it
    holds exactly the ledgers' admits, and a second burst on new servers fills the team to exactly
    its quota: a hold lost would let it admit more, a hold counted twice fewer. The second burst's
    answers {run_id: (cluster, answer)}."""
    recorded = {c: ledger_decisions(ledger) for c, ledger in ledgers.items()}
    admits = {(c, r) for c, d in recorded.items() for r, (state, _) in d.items() if state == "admit"}
    held = {(h[0], h[1]) for h in pg(url, "SELECT cluster, run_id FROM training_gate.holds "
                                          "WHERE released_at IS NULL")}
    assert admits <= held, admits - held
    for cluster, ledger in ledgers.items():
        out = run_cli("--db", ledger, "authority", "sync", "--grace-s", "0", env=authority_env(url, cluster))
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["holds_added"] == 0
    held = pg(url, "SELECT cluster, run_id, gpus FROM training_gate.holds WHERE released_at IS NULL")
    assert {(h[0], h[1]) for h in held} == admits
    left = quota - sum(h[2] for h in held)
    assert left >= 0
    servers.update({c: start(monkeypatch, url, c, ledgers[c], tmp_path / f"{c}-fill.sock") for c in ledgers})
    fill: dict = {}
    per_caller = -(-left // (2 * CALLERS * len(ledgers))) + 1   # more requests of 2 GPUs than is left
    try:
        threads = [t for c, s in servers.items() for t in burst(s, c, per_caller, fill, prefix="fill")]
        for t in threads:
            t.join(120)
    finally:
        logs = {c: s.stop() for c, s in servers.items()}
    assert all(got is not None and got[0] == 0 for _, got in fill.values()), logs
    assert sum(1 for _, got in fill.values() if got[1]["state"] == "admit") * 2 == left
    assert sum(h[0] for h in pg(url, "SELECT gpus FROM training_gate.holds WHERE released_at IS NULL")) == quota
    return fill


@pytest.mark.parametrize("what", ["quota", "budget"])
def test_two_servers_bursting_for_one_team_never_over_book_it(postgres_server, authority_db, tmp_path,
                                                              monkeypatch, what):
    url = postgres_server.url(authority_db)
    # 16 callers x 3 requests on each cluster (96 in all) of 2 GPUs and 10 GPU-h; room for 56 of them:
    # more than one cluster asks for (48), so both must admit some however the machine schedules them
    ledgers = make_clusters(tmp_path, url, **({"quota": 112, "budget": 100_000} if what == "quota"
                                              else {"quota": 100_000, "budget": 560}))
    servers = {c: start(monkeypatch, url, c, ledgers[c], tmp_path / f"{c}.sock") for c in ledgers}
    answers: dict = {}
    try:
        threads = [t for c, s in servers.items() for t in burst(s, c, 3, answers)]
        for t in threads:
            t.join(120)
        for s in servers.values():
            s.flush()
    finally:
        logs = {c: s.stop() for c, s in servers.items()}
    assert len(answers) == 96 and all(a[1] is not None and a[1][0] == 0 for a in answers.values()), logs
    admitted = {(c, r) for r, (c, got) in answers.items() if got[1]["state"] == "admit"}
    assert len(admitted) == 56
    assert {r["code"] for _, got in answers.values() if got[1]["state"] == "defer" for r in got[1]["reasons"]} \
        == {"capacity" if what == "quota" else "period-budget"}
    check_cluster_ledgers(answers, ledgers)
    assert set(pg(url, "SELECT cluster, run_id FROM training_gate.holds WHERE released_at IS NULL")) == admitted


def test_kill_9_of_one_server_and_a_postgres_restart_mid_burst_keep_the_team_within_its_quota(
        postgres_server, authority_db, tmp_path, monkeypatch):
    url = postgres_server.url(authority_db)
    ledgers = make_clusters(tmp_path, url, quota=40, budget=100_000)   # room for 20 requests of 2 GPUs
    servers = {c: start(monkeypatch, url, c, ledgers[c], tmp_path / f"{c}.sock") for c in ledgers}
    answers: dict = {}
    try:
        threads = [t for c, s in servers.items() for t in burst(s, c, 4, answers)]
        wait_for_answers(answers, 12)
        before = len(answers)
        servers["a"].stop(signal.SIGKILL)
        postgres_server.restart(down_s=0.5)
        assert before < 128, "the burst ended before the faults"
        for t in threads:
            t.join(180)
        servers["a"] = start(monkeypatch, url, "a", ledgers["a"], tmp_path / "a2.sock")  # recovers its journal
        for s in servers.values():
            s.flush()
        # after the restart both take more, and still the team is never over its quota
        more = [t for c, s in servers.items() for t in burst(s, c, 1, answers, prefix="x")]
        for t in more:
            t.join(120)
        for s in servers.values():
            s.flush()
    finally:
        logs = {c: s.stop() for c, s in servers.items()}
    failures = [got[1] for _, got in answers.values() if got is not None and got[0] != 0]
    assert all("authority" in f or "Unavailable" in f for f in failures), failures   # refused, said why
    recorded = check_cluster_ledgers(answers, ledgers)
    held = pg(url, "SELECT cluster, run_id, gpus FROM training_gate.holds WHERE released_at IS NULL")
    assert sum(h[2] for h in held) <= 40, logs
    in_ledgers = {(c, r) for c, d in recorded.items() for r, (state, _) in d.items() if state == "admit"}
    assert in_ledgers <= {(h[0], h[1]) for h in held}   # a hold in the authority for every recorded admit
    answered = {(c, r) for r, (c, got) in answers.items() if got is not None and got[0] == 0
                and got[1]["state"] == "admit"}
    assert answered <= in_ledgers and len(answered) >= 10, (len(answered), logs)
    settle_and_fill(monkeypatch, url, ledgers, servers, tmp_path, 40)


def test_a_postgres_restart_mid_burst_loses_no_answered_decision_and_counts_nothing_twice(
        postgres_server, authority_db, tmp_path, monkeypatch):
    url = postgres_server.url(authority_db)
    ledgers = make_clusters(tmp_path, url, quota=200, budget=100_000)   # room for 100 requests of 2 GPUs
    servers = {c: start(monkeypatch, url, c, ledgers[c], tmp_path / f"{c}.sock") for c in ledgers}
    answers: dict = {}
    try:
        threads = [t for c, s in servers.items() for t in burst(s, c, 8, answers)]   # 256 requests
        wait_for_answers(answers, 12)
        before = len(answers)
        postgres_server.restart(down_s=0.5)
        assert before < 256, "the burst ended before the restart"
        for t in threads:
            t.join(180)
        time.sleep(1.2)   # while away, a server asks the authority again at most once a second
        # the same servers, never restarted, decide against the authority again
        after = [t for c, s in servers.items() for t in burst(s, c, 1, answers, prefix="after")]
        for t in after:
            t.join(120)
        for s in servers.values():
            s.flush()
    finally:
        logs = {c: s.stop() for c, s in servers.items()}
    assert len(answers) == 288 and all(got is not None for _, got in answers.values()), logs
    failures = [got[1] for _, got in answers.values() if got[0] != 0]
    assert all("authority" in f for f in failures), failures   # refused while it was away, saying so
    assert all(got[0] == 0 for r, (_, got) in answers.items() if "after" in r), logs
    check_cluster_ledgers(answers, ledgers)
    settle_and_fill(monkeypatch, url, ledgers, servers, tmp_path, 200)


def test_without_the_authority_a_server_refuses_by_default_and_admits_within_its_share_when_told(
        postgres_server, authority_db, tmp_path, monkeypatch):
    url = postgres_server.url(authority_db)
    ledgers = make_clusters(tmp_path, url, quota=8, budget=100_000)
    refusing = start(monkeypatch, url, "a", ledgers["a"], tmp_path / "a.sock")
    sharing = start(monkeypatch, url, "b", ledgers["b"], tmp_path / "b.sock", GATE_AUTHORITY_OFFLINE_SHARE="0.5")
    try:
        assert submit(refusing, shared_request("a-0"))[1]["state"] == "admit"
        postgres_server.stop("immediate")
        try:
            code, text = submit(refusing, shared_request("a-1"))
            assert code == 3 and "cannot be reached" in text and "refused" in text
            # half of 8 accelerators alone: two requests of 2, then capacity with the share's limit
            got = [submit(sharing, shared_request(f"b-{i}"))[1] for i in range(3)]
            assert [d["state"] for d in got] == ["admit", "admit", "defer"]
            assert all(d["authority"] == "offline" and d["cluster"] == "b" for d in got)
            assert [r["limit"] for r in got[2]["reasons"] if r["code"] == "capacity"] == [4]
        finally:
            postgres_server.start()
        time.sleep(1.2)   # while away, the server asks the authority again at most once a second
        # back: the offline holds are written once, before b's next decision, which sees every cluster's:
        # 2 (a) + 4 (b, offline) + 2 fills the 8, and cluster a finds them all held
        after = submit(sharing, shared_request("b-3"))[1]
        assert after["state"] == "admit" and "authority" not in after
        full = submit(refusing, shared_request("a-2"))[1]
        assert [r["in_use"] for r in full["reasons"] if r["code"] == "capacity"] == [8]
        holds = pg(url, "SELECT cluster, run_id, offline FROM training_gate.holds WHERE released_at IS NULL "
                        "ORDER BY cluster, run_id")
        assert holds == [("a", "a-0", False), ("b", "b-0", True), ("b", "b-1", True), ("b", "b-3", False)]
        for s in (refusing, sharing):
            s.flush()
    finally:
        logs = refusing.stop() + sharing.stop()
    # the ledger of b records what it decided while the authority was away, marked so
    decided = ledger_decisions(ledgers["b"])
    assert [decided[f"b-{i}"][1].get("authority") for i in range(4)] == ["offline"] * 3 + [None], logs
    assert "a-1" not in ledger_decisions(ledgers["a"])   # refused: no decision


def test_a_server_whose_authority_is_malformed_or_lacks_the_schema_exits_2_naming_no_password(
        postgres_server, authority_db, tmp_path):
    import subprocess
    import sys

    from tests.fixtures_postgres import GATE_PASSWORD
    from tests.fixtures_slurm import REPO, make_slurm_ledger
    ledger = make_slurm_ledger(tmp_path / "gate.duckdb")
    for url, said in ((f"postgresql://gate:{GATE_PASSWORD}@127.0.0.1:port/x", "authority URL"),
                      (postgres_server.url(authority_db), "no Training Gate schema")):
        env = {**authority_env(url, "a"), "PYTHONPATH": str(REPO)}
        out = subprocess.run([sys.executable, "-m", "lib.slurm.server", "--socket", str(tmp_path / "s.sock"),
                              "--db", str(ledger)], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
        assert out.returncode == 2, out.stderr
        assert said in out.stderr and GATE_PASSWORD not in out.stderr
        assert not (tmp_path / "s.sock").exists()
