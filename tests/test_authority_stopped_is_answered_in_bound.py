"""A PostgreSQL authority that stops answering (every postgres process SIGSTOPped: the connections
stay open, the kernel acknowledges, nothing replies, so neither libpq's timeouts nor
statement_timeout ever fire) holds up no caller of the warm gate server beyond the stated bound: each
is answered by the failure policy at once, the server logs the outage once when it begins and once,
with its length, when PostgreSQL answers again (SIGCONT), and decisions go through the authority
again after it."""
from __future__ import annotations

import os
import re
import signal
import threading
import time

import pytest

from lib.authority.serving import ANSWER_BOUND_S
from tests.fixtures_postgres import PostgresServer, make_clusters, postgres_missing, shared_request
from tests.test_authority_gate_server import start, submit

pytestmark = [pytest.mark.postgres, pytest.mark.slow]
SLACK_S = 1.0      # process start-up of a busy machine, the socket round trip
STOPPED_S = 12.0   # longer than the bound, several times over


def postgres_pids(server: PostgresServer) -> list[int]:
    """The postmaster and every process it started (backends, background workers)."""
    postmaster = int((server.data / "postmaster.pid").read_text().split()[0])
    pids = [postmaster]
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = open(f"/proc/{entry}/stat").read()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == postmaster:
                pids.append(int(entry))
    return pids


def test_a_stopped_authority_is_answered_within_the_bound_and_its_outage_logged_once(tmp_path, monkeypatch):
    why = postgres_missing()
    if why:
        pytest.skip(why)
    pg = PostgresServer()   # its own: the session's server must not be stopped under other tests
    server = None
    stopped: list[int] = []
    try:
        url = pg.url(pg.new_database())
        ledgers = make_clusters(tmp_path, url, names=("a",), quota=64, budget=100_000)
        server = start(monkeypatch, url, "a", ledgers["a"], tmp_path / "a.sock", deadline_s=None)   # the default bound
        assert submit(server, shared_request("before"))[1]["state"] == "admit"
        stopped = postgres_pids(pg)
        assert len(stopped) > 2   # the postmaster, the server's backend, background workers
        for pid in stopped:
            os.kill(pid, signal.SIGSTOP)
        t_stop = time.monotonic()
        took: dict[str, float] = {}
        answers: dict[str, tuple] = {}

        def caller(run_id: str) -> None:
            t0 = time.monotonic()
            answers[run_id] = submit(server, shared_request(run_id))
            took[run_id] = time.monotonic() - t0

        for i in range(3):   # one at a time: each may be the one that asks the authority again
            caller(f"alone-{i}")
            time.sleep(0.6)
        threads = [threading.Thread(target=caller, args=(f"burst-{k}",)) for k in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        caller("late")
        assert time.monotonic() - t_stop < STOPPED_S, "the callers took longer than the stop itself"
        time.sleep(max(0.0, STOPPED_S - (time.monotonic() - t_stop)))
        for pid in stopped:
            os.kill(pid, signal.SIGCONT)
        stopped = []
        assert len(took) == 10
        assert max(took.values()) <= ANSWER_BOUND_S + SLACK_S, took
        for run_id, got in answers.items():   # the failure policy (the default: refuse) answered each
            assert got is not None and got[0] == 3 and "refused" in got[1], (run_id, got)
        time.sleep(1.5)   # the next decision asks the authority again
        assert submit(server, shared_request("after"))[1]["state"] == "admit"
        assert submit(server, shared_request("after-2"))[1]["state"] == "admit"
    finally:
        for pid in stopped:
            os.kill(pid, signal.SIGCONT)
        logs = server.stop() if server is not None else ""
        pg.close()
    away = [ln for ln in logs.splitlines() if "the authority is away" in ln]
    back = [ln for ln in logs.splitlines() if "the authority is back after" in ln]
    assert len(away) == 1 and len(back) == 1, logs
    assert "refused" in away[0]
    length = float(re.search(r"back after ([0-9.]+) s away", back[0]).group(1))
    assert STOPPED_S - ANSWER_BOUND_S - SLACK_S <= length <= STOPPED_S + 10, back[0]
