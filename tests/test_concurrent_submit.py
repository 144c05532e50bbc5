"""Two (or twenty) processes submitting at once: DuckDB admits one writing process per file, so
submitters serialize on the lock (bounded retry); none double-books, no decision is lost, and a
ledger held past the timeout gives a clear message and exit code 3."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.fixtures_ledger import (NOW, REPO, counts, query, run_cli, tiny_ledger,  # noqa: F401
                                   tiny_request, write_json)

pytestmark = pytest.mark.slow


def test_twenty_concurrent_submitters_never_double_book(tiny_ledger, tmp_path):
    env = {**os.environ, "GATE_DB": str(tiny_ledger)}
    procs = []
    for i in range(20):  # 8 GPUs reserved, 2 per request: exactly 4 fit
        path = write_json(tmp_path / f"r{i}.json", tiny_request(i))
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "lib", "submit", str(path), "--now", NOW.isoformat(), "--timeout", "40"],
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
    p = run_cli("submit", path, "--now", NOW.isoformat(), db=tiny_ledger)
    assert p.returncode == 0, p.stderr
