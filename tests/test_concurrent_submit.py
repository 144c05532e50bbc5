"""Two (or twenty) processes submitting at once: DuckDB admits one writing process per file, so
submitters serialize on the lock (bounded retry); none double-books, no decision is lost, and a
ledger held past the timeout gives a clear message and exit code 3."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time

import pytest

from lib.ledger.connection import LedgerLocked
from lib.ledger.deciding import submit_request
from lib.ledger.writer import writer_turn
from tests.fixtures_gate import NOW
from tests.fixtures_ledger import REPO, counts, query, run_cli, tiny_request, write_json

pytestmark = pytest.mark.slow


def test_twenty_concurrent_submitters_never_double_book(tiny_ledger, tmp_path):
    env = {**os.environ, "GATE_DB": str(tiny_ledger)}
    procs = []
    for i in range(20):  # 8 GPUs reserved, 2 per request: exactly 4 fit
        path = write_json(tmp_path / f"r{i}.json", tiny_request(i))
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "lib", "submit", str(path), "--timeout", "40"],
            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    results = []
    for p in procs:
        out, err = p.communicate(timeout=60)
        results.append((p.returncode, out, err))
    codes = sorted(rc for rc, _, _ in results)
    assert codes == [0] * 4 + [1] * 16, [err for _, _, err in results]
    for rc, out, _ in results:
        d = json.loads(out)
        assert d["state"] == ("admit" if rc == 0 else "defer")
        if rc == 1:
            assert [r["code"] for r in d["reasons"]] == ["capacity"]
    assert counts(tiny_ledger)["decisions"] == 20
    assert query(tiny_ledger, "SELECT state, count(*) FROM decisions GROUP BY 1 ORDER BY 1") == [
        ("admit", 4), ("defer", 16)]
    assert query(tiny_ledger, "SELECT count(*), sum(gpus) FROM runs WHERE reserved_gpu_hours IS NOT NULL") == [
        (4, 8)]


HOLDER = """
import sys, time, duckdb
con = duckdb.connect(sys.argv[1])
print("holding", flush=True)
sys.stdin.readline()
con.close()
"""


def test_a_ledger_locked_past_the_timeout_exits_3_and_changes_nothing(tiny_ledger, tmp_path):
    before = counts(tiny_ledger)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(tiny_ledger)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "holding"
        path = write_json(tmp_path / "r.json", tiny_request(1))
        p = run_cli("submit", path, "--timeout", "0.5", db=tiny_ledger, timeout=20)
        assert p.returncode == 3
        assert "locked by another process" in p.stderr and "0.5 s" in p.stderr
        assert p.stdout == ""
        p = run_cli("check", path, "--timeout", "0.3", db=tiny_ledger, timeout=20)
        assert p.returncode == 3 and "locked" in p.stderr
        csv = tmp_path / "runs.csv"
        csv.write_text("run_id,team,kind,gpus\nimp-1,tiny,exploratory,1\n")
        p = run_cli("import", csv, "--timeout", "0.4", db=tiny_ledger, timeout=20)
        assert p.returncode == 3 and "0.4 s" in p.stderr  # the import honours --timeout too
    finally:
        holder.communicate("\n", timeout=10)
    assert counts(tiny_ledger) == before
    # once the holder is gone, the same submit goes through
    p = run_cli("submit", path, db=tiny_ledger)
    assert p.returncode == 0, p.stderr


WAITER = """
import sys, time
from lib.ledger.writer import writer_turn
db, me, log = sys.argv[1], sys.argv[2], sys.argv[3]
print("ready", flush=True)
sys.stdin.readline()
print("arriving", flush=True)
with writer_turn(db, 60):
    with open(log, "a") as f:
        f.write(me + "\\n")
    time.sleep(0.02)
"""


def _hold_writer_lock(db):
    import fcntl
    fd = os.open(f"{db}.writer-lock", os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


@pytest.mark.parametrize("trial", range(2))
def test_writers_waiting_for_their_turn_are_served_in_arrival_order(tmp_path, trial):
    db, log = tmp_path / "gate.duckdb", tmp_path / "turns.log"
    waiters = [subprocess.Popen([sys.executable, "-c", WAITER, str(db), str(i), str(log)], cwd=REPO,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
               for i in range(6)]
    held = _hold_writer_lock(db)
    try:
        for w in waiters:
            assert w.stdout.readline().strip() == "ready"
        for w in waiters:  # one at a time, each well inside its wait before the next arrives
            w.stdin.write("go\n")
            w.stdin.flush()
            assert w.stdout.readline().strip() == "arriving"
            time.sleep(0.15)
    finally:
        os.close(held)
    for w in waiters:
        assert w.wait(timeout=60) == 0
    assert log.read_text().split() == [str(i) for i in range(6)]


def test_a_writer_that_gave_up_waiting_leaves_the_lock_to_the_next(tmp_path):
    db = tmp_path / "gate.duckdb"
    held = _hold_writer_lock(db)
    t0 = time.monotonic()
    try:
        with pytest.raises(LedgerLocked, match=r"waited 0\.[45] s for other submitters, timeout 0\.4 s"):
            with writer_turn(db, 0.4):
                pass
    finally:
        os.close(held)
    assert time.monotonic() - t0 >= 0.4
    t1 = time.monotonic()
    with writer_turn(db, 5.0):  # the abandoned wait got the lock and let it go at once
        assert time.monotonic() - t1 < 1.0
        other = subprocess.run([sys.executable, "-c", "import sys\nfrom lib.ledger.writer import writer_turn\n"
                                "with writer_turn(sys.argv[1], 0.3): pass", str(db)],
                               cwd=REPO, capture_output=True, text=True, timeout=60)
        assert other.returncode != 0 and "LedgerLocked" in other.stderr  # held here, not leaked
    for t in threading.enumerate():
        if t.name == "ledger-writer-turn":
            t.join(timeout=5)  # it has released the lock; it may still be on its way out
            assert not t.is_alive()


HOLD_BOTH = """
import fcntl, os, sys, time, duckdb
con = duckdb.connect(sys.argv[1])
fd = os.open(sys.argv[1] + ".writer-lock", os.O_RDWR | os.O_CREAT)
fcntl.flock(fd, fcntl.LOCK_EX)
print("holding", flush=True)
sys.stdin.readline()
time.sleep(float(sys.argv[2]))
os.close(fd)
sys.stdin.readline()
con.close()
"""


def test_the_locked_message_reports_the_whole_wait(tiny_ledger):
    # another submitter holds the writer turn for 1.1 s, then a process keeps DuckDB's file lock
    holder = subprocess.Popen([sys.executable, "-c", HOLD_BOTH, str(tiny_ledger), "1.1"], cwd=REPO,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "holding"
        holder.stdin.write("go\n")
        holder.stdin.flush()
        t0 = time.monotonic()
        with pytest.raises(LedgerLocked) as err:
            submit_request(tiny_request(1), db=tiny_ledger, now=NOW, timeout_s=1.5)
        elapsed = time.monotonic() - t0
    finally:
        holder.communicate("\n", timeout=10)
    waited = float(re.search(r"waited (\d+\.\d) s", str(err.value)).group(1))
    assert 1.45 <= waited <= elapsed + 0.05, (waited, elapsed)
    assert "timeout 1.5 s" in str(err.value)
    assert counts(tiny_ledger)["decisions"] == 0
