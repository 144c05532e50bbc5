"""The warm gate server as a real process: kill -9 mid-burst, a full journal, a second server, hostile
messages, the socket's mode, the caller recorded. No Slurm needed: the hook's own client talks to it."""
from __future__ import annotations

import os
import signal
import stat
import threading
import time

import pytest

from lib.ledger.connection import open_ledger
from tests.fixtures_slurm import COMMENT_REQUEST, GateServerProcess, decisions, hook_request
from tests.fixtures_slurm import raw_answer as _raw


def _burst(server, prefix: str, n: int, threads: int = 4) -> dict:
    """run_id -> the hook's exit code, for every job that got an answer."""
    answered, mu = {}, threading.Lock()

    def one(i):
        run_id = f"{prefix}-{i}"
        try:
            out = server.ask(hook_request(run_id, estimated_gpu_hours=0.25), timeout_s="5")
        except Exception:  # the server died under us: no answer
            return
        if out is not None and out.code in (0, 1):
            with mu:
                answered[run_id] = out.code

    def worker(k):
        for i in range(k, n, threads):
            one(i)
    ts = [threading.Thread(target=worker, args=(k,)) for k in range(threads)]
    for t in ts:
        t.start()
    return answered, ts


def test_kill_9_mid_burst_then_restart_records_every_answered_decision_exactly_once(slurm_ledger, tmp_path):
    sock = tmp_path / "gate.sock"
    server = GateServerProcess(slurm_ledger, sock)
    try:
        answered, threads = _burst(server, "k", 200)
        deadline = time.monotonic() + 120
        while len(answered) < 40 and time.monotonic() < deadline:  # some answered, the burst still going
            time.sleep(0.01)
    finally:
        server.stop(signal.SIGKILL)
    for t in threads:
        t.join(timeout=120)
    assert 40 <= len(answered) < 200
    restarted = GateServerProcess(slurm_ledger, sock)
    try:
        restarted.flush()
    finally:
        restarted.stop()
    rows = decisions(slurm_ledger)
    ids = [r["run_id"] for r in rows]
    assert len(ids) == len(set(ids)), "a decision was recorded twice"
    assert set(answered) <= set(ids), "an answered decision is missing from the ledger"
    admitted = {r["run_id"] for r in rows if r["state"] == "admit"}
    # a job whose answer was on its way when the server died may be recorded (the gate errs towards
    # holding quota, never towards double-booking): at most one per connection in flight
    assert len(admitted - {r for r, code in answered.items() if code == 0}) <= 4
    assert {r for r, code in answered.items() if code == 0} <= admitted
    with open_ledger(slurm_ledger, read_only=True) as con:
        reserved = {r[0] for r in con.execute("SELECT run_id FROM runs WHERE reserved_gpu_hours IS NOT NULL").fetchall()}
    assert reserved == admitted


def test_a_full_journal_refuses_never_admits_without_a_record_and_the_server_goes_on(slurm_ledger, tmp_path):
    server = GateServerProcess(slurm_ledger, tmp_path / "gate.sock", "--journal-max-mb", "0.07")
    try:
        outcomes = [server.ask(hook_request(f"f-{i}", note="x" * 3000)) for i in range(40)]
        refused = [o for o in outcomes if o.code == 3]
        assert refused, "the journal never filled"
        assert all("could not judge this job" in " ".join(o.lines()) for o in refused)
        assert server.proc.poll() is None
        flagged = server.ask(hook_request("f-flag"), on_failure="accept-and-flag")
        assert flagged.code == 4  # the failure policy, not an admit
        server.flush()
        admitted = [f"f-{i}" for i, o in enumerate(outcomes) if o.code == 0]
    finally:
        server.stop()
    assert {r["run_id"] for r in decisions(slurm_ledger) if r["state"] == "admit"} == set(admitted)


@pytest.mark.parametrize("name", ["same path", "hard link"])
def test_a_second_server_on_the_same_ledger_refuses_to_start_and_names_the_holder(slurm_ledger, tmp_path, name):
    """By the file's identity, not its name: a hard link to the ledger is the same ledger."""
    second = slurm_ledger
    if name == "hard link":
        second = tmp_path / "elsewhere" / "link.duckdb"
        second.parent.mkdir()
        second.hardlink_to(slurm_ledger)
    first = GateServerProcess(slurm_ledger, tmp_path / "a.sock")
    try:
        with pytest.raises(AssertionError) as info:
            GateServerProcess(second, tmp_path / "b.sock")
        assert f"pid {first.proc.pid}" in str(info.value)
        assert first.ask(hook_request("still-serving")).code == 0
        # nor does an in-process submit through that name decide beside the server
        from tests.fixtures_ledger import run_cli, write_json
        request = write_json(tmp_path / "r.json", {**COMMENT_REQUEST, "run_id": "beside", "team": "vision",
                                                   "gpus": 1, "max_runtime_hours": 1, "capacity": "stable"})
        p = run_cli("submit", request, db=second)
        assert p.returncode == 3 and f"pid {first.proc.pid}" in p.stderr, p.stderr
    finally:
        first.stop()
    assert "beside" not in {r["run_id"] for r in decisions(slurm_ledger)}


def test_hostile_messages_are_refused_and_the_server_goes_on(slurm_ledger, tmp_path):
    sock = tmp_path / "gate.sock"
    server = GateServerProcess(slurm_ledger, sock)
    try:
        assert stat.S_IMODE(os.stat(sock).st_mode) == 0o600
        assert _raw(sock, b"x" * (5 << 20)).startswith("3\n")  # too large (MAX_MESSAGE is 4 MiB)
        assert _raw(sock, b"\xff\xfe\0garbage\0\0c:op").startswith("3\n")  # malformed
        assert _raw(sock, b"c:op\0submit\0c:request\0{not json").startswith("3\n")
        assert _raw(sock, b"").startswith("3\n")
        ok = server.ask(hook_request("after-hostile"))
        assert ok.code == 0, ok.lines()
        server.flush()
    finally:
        server.stop()
    with open_ledger(slurm_ledger, read_only=True) as con:
        actor = con.execute("SELECT actor FROM decisions WHERE run_id = 'after-hostile'").fetchone()[0]
    assert f"(uid {os.getuid()})" in actor  # the caller's peer credentials are kept with the decision


def test_a_held_ledger_does_not_stop_the_gate_decisions_land_once_it_is_free(slurm_ledger, tmp_path):
    import subprocess
    import sys

    from tests.fixtures_slurm import REPO
    server = GateServerProcess(slurm_ledger, tmp_path / "gate.sock")
    # a warm server: the team's facts read (on first need, or by the background warm-up after a start)
    assert server.ask(hook_request("warm-up")).code == 0
    server.flush()
    holder = subprocess.Popen(  # an import holding the ledger read-write
        [sys.executable, "-c", "import sys, time; from lib.ledger.connection import open_ledger\n"
         "with open_ledger(sys.argv[1]) as con:\n    print('held', flush=True); sys.stdin.readline()",
         str(slurm_ledger)], cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        try:
            assert holder.stdout.readline().strip() == "held"
            assert server.ask(hook_request("while-held")).code == 0  # decided from memory, journaled
            with pytest.raises(RuntimeError, match="could not flush"):
                server.flush()
        finally:
            holder.communicate("\n", timeout=60)
        server.flush()
        assert [r["state"] for r in decisions(slurm_ledger, "while-held")] == ["admit"]
    finally:
        server.stop()


def test_without_a_server_the_hook_first_records_what_a_killed_server_answered(slurm_ledger, tmp_path):
    from lib.slurm.hook import config_from_env
    from lib.slurm.in_process import judge_in_process
    server = GateServerProcess(slurm_ledger, tmp_path / "gate.sock", "--flush-interval-s", "3600")
    try:
        assert server.ask(hook_request("journaled-only")).code == 0
    finally:
        server.stop(signal.SIGKILL)
    assert _ledger_decisions(slurm_ledger) == []  # nothing flushed yet
    config = {**config_from_env({}), "db": str(slurm_ledger)}
    again = judge_in_process(hook_request("journaled-only"), config)  # in-process, as the Python fallback decides
    assert again.code == 0 and again.decision.get("replayed") is True  # the same admit, not a second one
    assert [r["state"] for r in _ledger_decisions(slurm_ledger)] == ["admit"]


def _ledger_decisions(db):
    with open_ledger(db, read_only=True) as con:
        return [{"run_id": r[0], "state": r[1]} for r in con.execute(
            "SELECT run_id, state FROM decisions ORDER BY decision_id").fetchall()]


def test_the_command_line_goes_through_a_running_server_and_refuses_to_bypass_it(slurm_ledger, tmp_path):
    import json
    import subprocess
    import sys

    from tests.fixtures_slurm import COMMENT_REQUEST, REPO
    sock = tmp_path / "gate.sock"
    server = GateServerProcess(slurm_ledger, sock, "--flush-interval-s", "3600")
    req = tmp_path / "req.json"
    req.write_text(json.dumps({**COMMENT_REQUEST, "run_id": "cli-1", "team": "vision", "gpus": 2,
                               "max_runtime_hours": 1, "capacity": "stable"}))

    def cli(*argv, socket_env=True):
        env = {**os.environ, "TG_GATE_SOCKET": str(sock)} if socket_env else \
            {k: v for k, v in os.environ.items() if k != "TG_GATE_SOCKET"}
        return subprocess.run([sys.executable, "-m", "lib", "--db", str(slurm_ledger), *argv], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=120)
    try:
        r = cli("submit", str(req))
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["state"] == "admit"
        assert _ledger_decisions(slurm_ledger) == []  # decided by the server: in its journal, not yet flushed
        again = cli("check", str(req))
        assert again.returncode == 0 and json.loads(again.stdout)["replayed"] is True  # the server knows it
        bypass = cli("submit", str(req), socket_env=False)
        assert bypass.returncode == 3 and f"pid {server.proc.pid}" in bypass.stderr
    finally:
        server.stop()
    assert [r["state"] for r in _ledger_decisions(slurm_ledger)] == ["admit"]  # moved in when it stopped
