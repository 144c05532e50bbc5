"""The warm gate server and its callers, as real processes: slow or idle clients never hold up a real
job, a burst of simultaneous connections all get an answer, and the server checks every setting a
caller sends (it never takes a caller's flag log, clock or time-out on trust)."""
from __future__ import annotations

import json
import signal
import socket
import threading
import time

import pytest

from tests.fixtures_slurm import (COMMENT_REQUEST, GateServerProcess, decisions, hook_request, job,
                                  make_slurm_ledger)

PROMPT_S = 1.0  # a real job's answer while slow callers hang on: well inside the Lua hook's ~13 s
DEADLINE_S = 3.0  # lib.slurm.server.MESSAGE_DEADLINE_S: a whole message, however its bytes trickle


@pytest.fixture
def server(slurm_ledger, tmp_path):
    s = GateServerProcess(slurm_ledger, tmp_path / "gate.sock")
    yield s
    s.stop()

# ------------------------------------------------------------------ many callers at once

@pytest.mark.slow
def test_500_simultaneous_callers_all_get_a_real_answer_none_a_gate_failure(slurm_ledger, tmp_path):
    """The server is stopped (SIGSTOP) while 500 callers connect, so every one of them is waiting in
    the listen backlog at once; then it goes on and must answer each with a decision (0 or 1)."""
    from lib.slurm.hook import ask_server
    server = GateServerProcess(slurm_ledger, tmp_path / "gate.sock", "--journal-sync", "NORMAL")
    codes, mu = {}, threading.Lock()

    def one(i):
        try:
            out = ask_server(server.sock, hook_request(f"many-{i}", estimated_gpu_hours=0.1),
                             {"db": str(slurm_ledger)}, 120)
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


# ------------------------------------------------------------------ slow and idle clients

def _connect(sock) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(30)
    s.connect(str(sock))
    return s


def _answer(s: socket.socket) -> str:
    """Everything the server sends until it closes (what a client that stopped sending reads)."""
    chunks = []
    try:
        while b := s.recv(65536):
            chunks.append(b)
    except OSError:
        pass
    return b"".join(chunks).decode("utf-8", "replace")


class Trickler(threading.Thread):
    """A client that sends one byte every `every_s` seconds and never finishes its message; `answer`
    is what the server sent it, `answered_after` when (seconds after connecting)."""

    def __init__(self, sock, every_s: float = 0.5):
        super().__init__(daemon=True)
        self.s, self.every_s = _connect(sock), every_s
        self.t0 = time.monotonic()
        self.answer, self.answered_after = None, None
        self.halt = threading.Event()

    def run(self):
        self.s.setblocking(False)
        while not self.halt.is_set():
            try:
                got = self.s.recv(65536)
            except BlockingIOError:
                got = None
            except OSError:
                got = b""
            if got is not None:  # the server answered (or hung up): read the rest and stop
                self.s.setblocking(True)
                self.s.settimeout(5)
                self.answer = (got + _answer(self.s).encode()).decode("utf-8", "replace")
                self.answered_after = time.monotonic() - self.t0
                return
            try:
                self.s.send(b"f")
            except OSError:
                pass
            self.halt.wait(self.every_s)

    def close(self):
        self.halt.set()
        self.join(timeout=10)
        self.s.close()


def _timed_ask(server, run_id, **config):
    t = time.monotonic()
    out = server.ask(hook_request(run_id), **config)
    return out, time.monotonic() - t


@pytest.mark.slow
def test_a_job_is_answered_at_once_while_idle_and_trickling_connections_are_open(server):
    idle = [_connect(server.sock) for _ in range(16)]
    tricklers = [Trickler(server.sock) for _ in range(16)]
    for t in tricklers:
        t.start()
    try:
        time.sleep(0.3)  # every slow connection has reached the server
        for i in range(3):
            out, took = _timed_ask(server, f"prompt-{i}")
            assert out.code == 0, out.lines()
            assert took < PROMPT_S, f"a real job waited {took:.2f} s behind slow connections"
    finally:
        for s in idle:
            s.close()
        for t in tricklers:
            t.close()


@pytest.mark.slow
def test_a_message_not_complete_by_its_deadline_is_refused_even_while_bytes_keep_coming(server):
    idle = _connect(server.sock)
    trickler = Trickler(server.sock, every_s=0.3)
    trickler.start()
    t0 = time.monotonic()
    try:
        idle_answer = _answer(idle)
        idle_after = time.monotonic() - t0
        trickler.join(timeout=DEADLINE_S + 5)
    finally:
        idle.close()
        trickler.close()
    for answer, after in ((idle_answer, idle_after), (trickler.answer, trickler.answered_after)):
        assert answer is not None and answer.startswith("3\n"), answer
        assert f"not complete within {DEADLINE_S:g} s" in answer
        assert after is not None and after < DEADLINE_S + 1.5, after
    assert server.ask(hook_request("after-slow")).code == 0


# ------------------------------------------------------------------ the settings a caller sends

def _op(server, op, request=None, **config):
    from lib.slurm.wire import ask
    config = {"op": op, "db": str(server.db), **config}
    if request is not None:
        config["request"] = json.dumps(request)
    return ask(server.sock, config, timeout_s=60)


def _request(run_id, **changes):
    return {**COMMENT_REQUEST, "run_id": run_id, "team": "vision", "gpus": 2, "max_runtime_hours": 1,
            "capacity": "stable", **changes}


@pytest.mark.slow
def test_a_bad_timeout_is_refused_by_name_never_accepted_and_holds_up_no_other_caller(server, tmp_path):
    other = make_slurm_ledger(tmp_path / "other.duckdb")  # not loaded yet: the bad value would reach it
    stalled = {}

    def bad_first():
        t = time.monotonic()
        stalled["out"] = server.ask(hook_request("nan-job"), db=str(other), timeout_s="nan",
                                    on_failure="accept-and-flag")
        stalled["took"] = time.monotonic() - t
    th = threading.Thread(target=bad_first, daemon=True)
    th.start()
    time.sleep(0.2)
    out, took = _timed_ask(server, "beside-nan")
    th.join(timeout=120)
    assert out.code == 0 and took < PROMPT_S, (out.lines(), took)
    assert stalled["out"].code == 3 and stalled["took"] < PROMPT_S, (stalled["out"].lines(), stalled["took"])
    assert "timeout_s" in " ".join(stalled["out"].lines()) and "nan" in " ".join(stalled["out"].lines())
    for bad in ("inf", "-1", "0", "61", "abc", "1e999"):
        got = server.ask(hook_request(f"bad-{bad}"), timeout_s=bad, on_failure="accept-and-flag")
        text = " ".join(got.lines())
        assert got.code == 3 and "timeout_s" in text and repr(bad) in text, (bad, got.code, text)
    code, rest = _op(server, "check", _request("op-nan"), timeout_s="nan")
    assert code == 2 and "timeout_s" in rest and "'nan'" in rest, rest
    assert server.ask(hook_request("ok-60"), timeout_s="60").code == 0  # the largest allowed
    server.flush()
    assert {r["run_id"] for r in decisions(server.db)} == {"beside-nan", "ok-60"}


@pytest.mark.slow
def test_the_server_writes_only_its_own_flag_log_never_a_path_the_caller_names(slurm_ledger, tmp_path, monkeypatch):
    own, elsewhere = tmp_path / "own-flags.jsonl", tmp_path / "caller-chose.jsonl"
    monkeypatch.setenv("TG_FLAG_LOG", str(own))  # the server's environment at its start
    server = GateServerProcess(slurm_ledger, tmp_path / "gate.sock")
    try:
        out = server.ask(job(comment=None, name="no-comment"), flag_log=str(elsewhere),
                         on_failure="accept-and-flag")
    finally:
        server.stop()
    assert out.code == 4, out.lines()  # an incomplete job under accept-and-flag: flagged, as before
    assert not elsewhere.exists()
    logged = [json.loads(line) for line in own.read_text().splitlines()]
    assert [r["job"]["name"] for r in logged] == ["no-comment"]


@pytest.mark.slow
def test_a_submit_dated_away_from_the_servers_clock_is_refused_a_check_may_be_any_time(server):
    for i in range(8):  # vision's quota full
        code, rest = _op(server, "submit", _request(f"fill-{i}", gpus=32), origin="cli")
        assert code == 0, rest
        if json.loads(rest)["state"] == "defer":
            break
    else:
        pytest.fail("the quota never filled")
    code, rest = _op(server, "submit", _request("future", gpus=8), now="2099-01-01T00:00:00", origin="cli")
    assert code == 2 and "now" in rest and "2099-01-01" in rest, (code, rest)
    code, rest = _op(server, "check", _request("future", gpus=8), now="2099-01-01T00:00:00")
    assert code == 0 and json.loads(rest)["run_id"] == "future"  # a what-if may ask about any time
    code, rest = _op(server, "check", _request("future", gpus=8), now="yesterday")
    assert code == 2 and "now" in rest and "'yesterday'" in rest
    hooked = server.ask(hook_request("future-hook"), now="2099-01-01T00:00:00")
    assert hooked.code == 3 and "now" in " ".join(hooked.lines())
    server.flush()
    assert not [r for r in decisions(server.db) if r["run_id"].startswith("future")]


@pytest.mark.slow
def test_settings_outside_their_fixed_values_are_refused_by_name(server):
    code, rest = _op(server, "submit", _request("o-1"), origin="root-shell")
    assert code == 2 and "origin" in rest and "'root-shell'" in rest, rest
    code, rest = _op(server, "submit", _request("o-2"), origin="kueue")
    assert code == 0 and json.loads(rest)["state"] == "admit", rest
    code, rest = _op(server, "drop-tables")
    assert code == 2 and "op" in rest and "'drop-tables'" in rest, rest
    code, rest = _op(server, "submit", _request("o-3"), policy_note="trust me")
    assert code == 2 and "policy_note" in rest, rest
    bad_part = server.ask(hook_request("p-1"), default_partition="gpu;rm -rf /", on_failure="accept-and-flag")
    assert bad_part.code == 3 and "default_partition" in " ".join(bad_part.lines())
    unknown_policy = server.ask(job(comment=None), on_failure="open-sesame")  # unknown: refuse, as before
    assert unknown_policy.code == 3
    assert server.ask(hook_request("p-2"), default_partition="gpu,spot").code == 0
