"""Flush means flushed: a warm gate server holding more answered decisions than one batch (500) in
its journal moves every one into the ledger when it is stopped (SIGTERM) and says how many, and
`op=flush` moves them all in one call; nothing stays in the journal."""
from __future__ import annotations

import json
import re
import sqlite3
import threading

from lib.slurm.journal import journal_path
from lib.slurm.wire import ask, flush
from tests.fixtures_ledger import query
from tests.fixtures_slurm import COMMENT_REQUEST, GateServerProcess

BACKLOG = 620   # more than one batch (lib.slurm.journal: 500 entries)
CALLERS = 4


def submit_backlog(server: GateServerProcess, prefix: str, n: int = BACKLOG, gpus: int = 1) -> dict:
    answers: dict[str, str] = {}   # run ID -> the decision's state

    def caller(k: int) -> None:
        for i in range(k, n, CALLERS):
            run_id = f"{prefix}-{i:04d}"
            request = {**COMMENT_REQUEST, "run_id": run_id, "team": "vision", "gpus": gpus,
                       "max_runtime_hours": 1, "capacity": "stable"}
            code, rest = ask(server.sock, {"op": "submit", "db": str(server.db.resolve()),
                                           "request": json.dumps(request)}, timeout_s=60)
            assert code == 0, rest
            answers[run_id] = json.loads(rest)["state"]
    threads = [threading.Thread(target=caller, args=(k,)) for k in range(CALLERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(answers) == n
    return answers


def decisions(db) -> set[str]:
    return {r[0] for r in query(db, "SELECT run_id FROM decisions")}


def test_a_clean_stop_moves_a_backlog_of_more_than_one_batch_into_the_ledger(slurm_ledger, tmp_path):
    server = GateServerProcess(slurm_ledger, tmp_path / "gate.sock", "--flush-interval-s", "3600")
    try:
        answered = submit_backlog(server, "stop")
        assert decisions(slurm_ledger) == set()   # all still in the journal
    finally:
        logs = server.stop()
    assert server.proc.returncode == 0, logs
    assert decisions(slurm_ledger) == set(answered)
    moved = re.findall(r"on stop: moved (\d+) decision\(s\) into", logs)
    assert moved == [str(BACKLOG)], logs
    with sqlite3.connect(journal_path(slurm_ledger.resolve())) as con:
        assert con.execute("SELECT count(*) FROM entries").fetchone() == (0,)


def test_op_flush_moves_the_whole_backlog_in_one_call(slurm_ledger, tmp_path):
    server = GateServerProcess(slurm_ledger, tmp_path / "gate.sock", "--flush-interval-s", "3600")
    try:
        answered = submit_backlog(server, "flush")
        assert flush(server.sock, str(server.db.resolve())) == BACKLOG
        assert decisions(slurm_ledger) == set(answered)
        assert flush(server.sock, str(server.db.resolve())) == 0
    finally:
        logs = server.stop()
    assert re.findall(r"on stop: moved (\d+) decision", logs) == ["0"], logs


def test_the_epilog_finds_an_admit_still_in_the_journal_and_waits_its_bound_when_none_can_move_it(
        slurm_ledger, tmp_path, monkeypatch):
    import signal
    import time

    from lib.slurm import epilog
    server = GateServerProcess(slurm_ledger, tmp_path / "gate.sock", "--flush-interval-s", "3600")
    monkeypatch.setenv("TG_GATE_SOCKET", server.sock)
    try:
        # a first batch of defers (more accelerators than the team has), then the job's admit
        assert set(submit_backlog(server, "big", gpus=10_000).values()) == {"defer"}
        assert submit_backlog(server, "job", n=1) == {"job-0000": "admit"}
        last = "job-0000"
        run = epilog._admitted(last, slurm_ledger, time.monotonic() + 60)
        assert run is not None and run["run_id"] == last
        assert submit_backlog(server, "killed", n=1) == {"killed-0000": "admit"}
    finally:
        server.stop(signal.SIGKILL)   # its journal stays: nothing can move it until a server starts
    monkeypatch.setattr(epilog, "ADMIT_WAIT_S", 2.0)
    t0 = time.monotonic()
    assert epilog._admitted("killed-0000", slurm_ledger, time.monotonic() + 60) is None
    assert 2.0 <= time.monotonic() - t0 < 10
