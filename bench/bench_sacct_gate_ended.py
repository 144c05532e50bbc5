"""Benchmark: a sacct re-import with and without the rule that keeps the end of runs the gate ended.

    python bench/bench_sacct_gate_ended.py [--jobs N] [--rounds R]

A sacct file of N gated jobs (2 GPUs, one hour; two thirds TIMEOUT) is imported into a new ledger; a
tenth of the runs get an `end` interruption (the epilog's budget stop) and stop reason `budget`; then
the same file is imported again and timed. "old": sacct's merge rules without the gate-ended rule
(the budget stops become wall-clock); "new": as shipped (they stay budget). Each measurement in its
own child process, old and new alternated in rounds so both see the same load; the table shows each
round and the fastest of each.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import json, sys, time
sys.path.insert(0, {root!r})
mode, src, db = sys.argv[1], sys.argv[2], sys.argv[3]
from lib.ledger.imports import sacct
if mode == "old":
    for column in ("stop_reason", "ended_at"):
        sacct._MERGE_RULES.pop(column)
from lib.ledger.connection import open_ledger
from lib.ledger.imports import import_runs
from tests.fixtures_slurm import make_slurm_ledger
make_slurm_ledger(db)
assert not import_runs(src, fmt="sacct", db=db).errors
with open_ledger(db) as con:
    con.execute("INSERT INTO interruptions (run_id, event, occurred_at, attempt, attempt_started_at, "
                "attempt_gpu_hours, lost_gpu_hours, action, decision_json, source, recorded_at) SELECT run_id, "
                "'budget', ended_at, 1, started_at, 2, 0, 'end', '{{}}', 'slurm', now() FROM runs "
                "WHERE hash(run_id) % 10 = 0")
    con.execute("UPDATE runs SET stop_reason = 'budget' WHERE run_id IN (SELECT run_id FROM interruptions)")
t = time.perf_counter()
report = import_runs(src, fmt="sacct", db=db)
seconds = time.perf_counter() - t
with open_ledger(db, read_only=True) as con:
    kept = con.execute("SELECT count(*) FROM runs WHERE stop_reason = 'budget'").fetchone()[0]
print(json.dumps({{"seconds": seconds, "updated": report.updated, "budget_kept": kept}}))
"""


def write_sacct(path: Path, jobs: int) -> None:
    from lib.ledger.imports import XDMOD_FIELDS
    lines = ["|".join(XDMOD_FIELDS)]
    for i in range(jobs):
        v = dict(jobid=str(1000 + i), jobidraw=str(1000 + i), cluster="c", partition="spot", qos="normal",
                 account="vision", group="g", gid="1", user="u", uid="1", submit="2026-05-01T10:00:00",
                 eligible="2026-05-01T10:00:00", start="2026-05-01T10:01:00", end="2026-05-01T11:01:00",
                 elapsed="01:00:00", exitcode="0:0", state="TIMEOUT" if i % 3 else "COMPLETED", nnodes="1",
                 ncpus="1", reqcpus="1", reqmem="1G", reqtres="cpu=1,gres/gpu=2", alloctres="cpu=1,gres/gpu=2",
                 timelimit="01:00:00", nodelist="n1", jobname=f"run-{i}")
        lines.append("|".join(v[f] for f in XDMOD_FIELDS))
    path.write_text("\n".join(lines) + "\n")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    with tempfile.TemporaryDirectory(prefix="bench-sacct-") as tmp:
        src = Path(tmp) / "sacct.txt"
        write_sacct(src, args.jobs)
        runs = {"old": [], "new": []}
        for r in range(args.rounds):
            for mode in ("old", "new"):
                db = Path(tmp) / f"{mode}-{r}.duckdb"
                out = subprocess.run([sys.executable, "-c", CHILD.format(root=str(ROOT)), mode, str(src), str(db)],
                                     capture_output=True, text=True, cwd=ROOT)
                if out.returncode != 0:
                    raise SystemExit(f"{mode} failed:\n{out.stderr}")
                runs[mode].append(json.loads(out.stdout.strip().splitlines()[-1]))
    print(f"sacct re-import of {args.jobs:,} jobs, a tenth of them ended by the gate (seconds per round)")
    print(f"{'':6} {'rounds':>28} {'fastest':>8} {'budget stops kept':>18}")
    for mode in ("old", "new"):
        secs = " ".join(f"{x['seconds']:6.2f}" for x in runs[mode])
        print(f"{mode:6} {secs:>28} {min(x['seconds'] for x in runs[mode]):8.2f} {runs[mode][-1]['budget_kept']:>18,}")


if __name__ == "__main__":
    main()
