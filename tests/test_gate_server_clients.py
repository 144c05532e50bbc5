"""The warm gate server and its callers, as real processes: a burst of simultaneous connections all
get an answer."""
from __future__ import annotations

import signal
import socket
import threading
import time

import pytest

from tests.fixtures_slurm import GateServerProcess, hook_request, make_slurm_ledger


@pytest.fixture
def ledger(tmp_path):
    return make_slurm_ledger(tmp_path / "gate.duckdb")


# ------------------------------------------------------------------ many callers at once

@pytest.mark.slow
def test_500_simultaneous_callers_all_get_a_real_answer_none_a_gate_failure(ledger, tmp_path):
    """The server is stopped (SIGSTOP) while 500 callers connect, so every one of them is waiting in
    the listen backlog at once; then it goes on and must answer each with a decision (0 or 1)."""
    from lib.slurm.hook import ask_server
    server = GateServerProcess(ledger, tmp_path / "gate.sock", "--journal-sync", "NORMAL")
    codes, mu = {}, threading.Lock()

    def one(i):
        try:
            out = ask_server(server.sock, hook_request(f"many-{i}", estimated_gpu_hours=0.1),
                             {"db": str(ledger)}, 120)
            got = out.code if out is not None else "no server"
        except Exception as exc:  # the hook would make this a gate failure
            got = f"{type(exc).__name__}: {exc}"
        with mu:
            codes[i] = got

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(500)]
    try:
        server.proc.send_signal(signal.SIGSTOP)
        for t in threads:
            t.start()
        time.sleep(2.0)  # every caller has connected (or been turned away)
        server.proc.send_signal(signal.SIGCONT)
        for t in threads:
            t.join(timeout=180)
    finally:
        server.proc.send_signal(signal.SIGCONT)
        server.stop()
    failed = {i: c for i, c in codes.items() if c not in (0, 1)}
    assert len(codes) == 500 and not failed, f"{len(failed)} of 500 without a decision, e.g. " \
                                             f"{list(failed.items())[:3]}"


def test_the_client_waits_for_room_in_a_full_listen_backlog_within_its_timeout(tmp_path):
    """A listener whose backlog is full turns connect() away with EAGAIN: the client tries again
    (briefly, within its timeout) instead of failing the job at once."""
    from lib.slurm.wire import exchange
    path = str(tmp_path / "tiny.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(0)  # room for one waiting connection
    results, mu = [], threading.Lock()

    def client(i):
        try:
            got = exchange(path, {}, {"op": "ping", "i": i}, 10)
        except Exception as exc:
            got = f"{type(exc).__name__}: {exc}"
        with mu:
            results.append(got)

    def serve_later():
        time.sleep(0.5)  # meanwhile the backlog is full
        listener.settimeout(10)
        for _ in range(6):
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(10)
                while conn.recv(65536):  # the whole request, then the answer
                    pass
                conn.sendall(b"0\nok\n")
    clients = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(6)]
    acceptor = threading.Thread(target=serve_later, daemon=True)
    acceptor.start()
    for t in clients:
        t.start()
    for t in clients:
        t.join(timeout=30)
    acceptor.join(timeout=30)
    listener.close()
    assert results == [(0, "ok\n")] * 6


def test_the_client_gives_up_on_a_full_backlog_when_its_timeout_runs_out(tmp_path):
    from lib.slurm.wire import exchange
    path = str(tmp_path / "stuck.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(0)
    first = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    first.connect(path)  # fills the backlog; nobody ever accepts
    try:
        t = time.monotonic()
        with pytest.raises(OSError):
            exchange(path, {}, {"op": "ping"}, 0.5)
        assert time.monotonic() - t < 3
    finally:
        first.close()
        listener.close()
