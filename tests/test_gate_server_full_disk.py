"""The warm gate server on a disk that fills up and frees again: a real, small file system (tmpfs,
mounted for the test; it skips where this process may not mount). While the disk is full no job is
admitted without a durable record, the server and a restarted server keep running, and once there
is room again every answered decision reaches the ledger exactly once, by itself, and the log
says so."""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time

import pytest

from tests.fixtures_slurm import GateServerProcess, decisions, hook_request, make_slurm_ledger

pytestmark = pytest.mark.slow


@pytest.fixture
def small_disk(tmp_path):
    mount = tmp_path / "disk"
    mount.mkdir()
    got = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", str(mount)],
                         capture_output=True, text=True)
    if got.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {got.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def fill(disk) -> None:
    """Write a filler file until the file system is full."""
    with open(disk / "filler", "wb") as f, contextlib.suppress(OSError):
        while True:
            f.write(b"\0" * (1 << 16))
            f.flush()
            os.fsync(f.fileno())


def wait_for(predicate, timeout_s: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return False


def test_a_full_disk_refuses_or_records_never_loses_and_the_server_recovers_by_itself(small_disk, tmp_path):
    ledger = make_slurm_ledger(small_disk / "gate.duckdb")
    sock = tmp_path / "gate.sock"
    answered: dict[str, int] = {}

    def ask(server, run_id):
        out = server.ask(hook_request(run_id, estimated_gpu_hours=0.01))
        assert out.code in (0, 1, 3), out.lines()
        if out.code in (0, 1):
            answered[run_id] = out.code
        return out

    server = GateServerProcess(ledger, sock, "--flush-interval-s", "0.1")
    try:
        assert ask(server, "before").code == 0
        fill(small_disk)
        full = [ask(server, f"full-{i}") for i in range(60)]
        assert server.proc.poll() is None, "the server died on a full disk"
        refused = [o for o in full if o.code == 3]
        assert refused, "the disk never filled up"
        assert all("could not judge this job" in " ".join(o.lines()) for o in refused)
    finally:
        server.stop(signal.SIGKILL)  # and a crash while the disk is full
    # a server restarted on the full disk starts and goes on answering (refusing what it cannot record)
    restarted = GateServerProcess(ledger, sock, "--flush-interval-s", "0.1")
    try:
        assert restarted.proc.poll() is None
        ask(restarted, "restarted-full")
        (small_disk / "filler").unlink()  # room again
        assert ask(restarted, "after").code == 0
        # with no one asking, the flusher moves every answered decision into the ledger by itself
        assert wait_for(lambda: set(answered) <= {r["run_id"] for r in decisions(ledger)}), (
            set(answered) - {r["run_id"] for r in decisions(ledger)})
    finally:
        err = restarted.stop()
    print(err)
    rows = decisions(ledger)
    ids = [r["run_id"] for r in rows]
    assert len(ids) == len(set(ids)), "a decision was recorded twice"
    admitted = {r["run_id"] for r in rows if r["state"] == "admit"}
    assert {r for r, code in answered.items() if code == 0} <= admitted
    assert "recovered" in err, err
