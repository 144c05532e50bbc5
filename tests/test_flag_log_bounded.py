"""The flag log stays bounded however many jobs the failure policy answers: one short JSON line per
job (never the job's comment, which may be megabytes), the file rotated before it passes its size
(at most KEEP old files kept), and writers in several processes at once never interleave lines."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from lib.slurm.flag_log import KEEP
from lib.slurm.judge import failure
from tests.fixtures_ledger import REPO
from tests.fixtures_slurm import comment, job

WRITER = """
import sys
from lib.slurm.flag_log import append
for i in range(int(sys.argv[3])):
    append(sys.argv[1], {"action": "refused", "why": "gate server did not answer " + "x" * 5000,
                         "run_id": f"w{sys.argv[2]}-{i}", "policy": "refuse", "note": None,
                         "job": {"account": "vision", "name": f"w{sys.argv[2]}-{i}", "comment": "c" * 1_000_000}})
"""


def test_four_writers_of_a_flood_leave_short_whole_lines_in_bounded_rotated_files(tmp_path):
    log = tmp_path / "flags.jsonl"
    env = {**os.environ, "PYTHONPATH": str(REPO), "TG_FLAG_LOG_MAX_MB": "0.05"}   # 52 KB a file
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(log), str(w), "300"], cwd=REPO, env=env)
             for w in range(4)]
    assert [p.wait(timeout=300) for p in procs] == [0] * 4
    files = sorted(tmp_path.glob("flags.jsonl*"))
    assert files[0] == log and len(files) == KEEP + 1   # the log and KEEP rotated ones, no more
    lines = [ln for f in files for ln in Path(f).read_text(encoding="utf-8").splitlines()]
    for f in files:
        assert f.stat().st_size <= int(0.05 * 1024 * 1024), f
    for ln in lines:
        assert len(ln) < 2048
        rec = json.loads(ln)   # whole lines: never two writers' text in one
        assert rec["action"] == "refused" and "comment" not in rec["job"] and rec["job"]["account"] == "vision"
        assert rec["run_id"] == rec["job"]["name"]
    # the newest lines are kept (the writer that ended last wrote its last job into the current file),
    # the oldest gone
    current = {json.loads(ln)["run_id"] for ln in log.read_text(encoding="utf-8").splitlines()}
    assert {f"w{w}-299" for w in range(4)} & current
    assert len(lines) < 4 * 300
    assert len(lines) == len({json.loads(ln)["run_id"] for ln in lines})   # no line written twice


def test_a_failure_before_the_request_was_read_logs_the_run_id_the_job_names(tmp_path):
    """A gate that failed before it read the request (a ledger it could not open) still logs which
    run the job is: the operator looks for it by run ID, and the line never holds the comment."""
    log = tmp_path / "flags.jsonl"
    failure(job(comment=comment(run_id="run-that-failed")), {"on_failure": "accept-and-flag", "flag_log": str(log),
                                                             "default_partition": None}, "LedgerLocked: held")
    failure(job(comment="not json"), {"on_failure": "refuse", "flag_log": str(log), "default_partition": None}, "x")
    first, second = [json.loads(line) for line in log.read_text().splitlines()]
    assert first["run_id"] == "run-that-failed" and "comment" not in first["job"]
    assert second["run_id"] is None
