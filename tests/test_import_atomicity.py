"""Atomicity: an import that fails, or whose process is killed mid-way, leaves the ledger as it was."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lib.ledger.imports import import_runs
from lib.ledger.connection import open_ledger
from tests.fixtures_imports import GOOD, HEADER, dump, make_import_ledger

ROOT = Path(__file__).resolve().parent.parent


def test_one_bad_row_among_many_writes_nothing(tmp_path):
    db = make_import_ledger(tmp_path)
    import_runs(GOOD.encode(), db=db)
    before = dump(db)
    rows = "".join(f"a{i},nlp,exploratory,1,1,,,,\n" for i in range(5000))
    r = import_runs((HEADER + "\n" + rows + "a9999,nlp,exploratory,1,-5,,,,\n").encode(), db=db)
    assert r.errors and r.errors[0]["line"] == 5002 and not r.written
    assert dump(db) == before


def test_failure_during_the_write_rolls_back(tmp_path, monkeypatch):
    """A crash inside the transaction (here: after teams were created) leaves nothing behind."""
    db = make_import_ledger(tmp_path)
    before = dump(db)
    import lib.ledger.imports as importer
    calls = []

    def boom(fraction, message):
        calls.append(message)
        if message.startswith("writing"):
            raise RuntimeError("simulated crash")

    with pytest.raises(RuntimeError):
        importer.import_runs((GOOD + "r3,ghosts,exploratory,1,1,,,,\n").encode(), db=db, create_teams=True,
                             progress=boom)
    assert dump(db) == before


def _big_csv(path: Path, rows: int) -> None:
    with open(path, "w") as f:
        f.write("run_id,team,kind,gpus,estimated_gpu_hours,actual_gpu_hours,started_at,ended_at,job_name\n")
        for i in range(rows):
            f.write(f"k{i:07d},nlp,exploratory,{1 + i % 8},{i % 97}.5,{i % 89}.25,"
                    f"2024-05-01T10:00:00Z,2024-05-01T12:00:00Z,job {i}\n")


@pytest.mark.slow
def test_kill_mid_import_leaves_all_or_nothing(tmp_path):
    db = make_import_ledger(tmp_path)
    import_runs(GOOD.encode(), db=db)
    before = dump(db)
    big = tmp_path / "big.csv"
    _big_csv(big, 300_000)
    code = ("import sys; sys.path.insert(0, sys.argv[3]); from lib.ledger.imports import import_runs; "
            "import_runs(sys.argv[1], db=sys.argv[2], progress=lambda f, m: print(f, m, flush=True))")
    proc = subprocess.Popen([sys.executable, "-c", code, str(big), str(db), str(ROOT)],
                            stdout=subprocess.PIPE, text=True)
    # kill once it is writing (inside the transaction), or after a time limit whichever comes first
    deadline = time.monotonic() + 30
    for out in proc.stdout:
        if out.startswith("0.7") or time.monotonic() > deadline:
            break
    time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    after = dump(db)
    with open_ledger(db, read_only=True) as con:
        n = con.execute("SELECT count(*) FROM runs WHERE run_id LIKE 'k%'").fetchone()[0]
    assert n in (0, 300_000)
    if n == 0:
        assert after == before
