"""What the gate's submit hook adds to one `sbatch`, measured on the running test cluster.

    lib/slurm/cluster.sh start            # once
    python -m bench.bench_slurm_hook [--n 50] [--gap-ms 150]

Times N submissions each (held with --hold, so nothing runs; cancelled at the end) of:
  pass-through   a job without GPUs: job_submit.lua returns at once, Python never starts
  gated, warm    a GPU job judged through the warm gate server (the default set-up)  - admit
  gated, refused a GPU job over its budget, refused by sbatch                        - defer
  gated, cold    a GPU job judged in-process (no server: Python imports DuckDB per sbatch)
and the Python start-up parts: `python -c pass`, `python -S -c pass`, the hook's own import under -S
(what the warm path starts), and `import lib.ledger.deciding` (what the cold path adds).
The hook config is pointed at a temporary ledger for the run and restored afterwards.
Prints a table: median and P95 in ms, and the median added over pass-through. Goal: < 100 ms.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.slurm_cluster import CONF, ENV, NOT_RUNNING, STATE, cluster_ready

REPO = Path(__file__).resolve().parent.parent
REQUEST = {"kind": "exploratory", "gpu_mem_gb": 40, "budget_gpu_hours": 4, "estimated_gpu_hours": 0.1,
           "checkpoint_supported": True, "expected_interruptions": 0, "data_snapshot": "imagenet-21k-2024"}


def timed(cmd, env=ENV) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.perf_counter()
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    return (time.perf_counter() - t0) * 1000.0, r


def p95(xs):
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(0.95 * (len(s) - 1))))]


def set_conf(saved: str, **settings) -> None:
    lines = [ln for ln in saved.splitlines() if ln.split("=", 1)[0] not in settings]
    CONF.write_text("\n".join(lines + [f"{k}={v}" for k, v in settings.items()]) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=50, help="submissions per case (default 50)")
    ap.add_argument("--gap-ms", type=float, default=150.0,
                    help="pause between submissions (default 150): one sbatch at a time, as users submit; "
                         "0 measures a burst, where each job also waits for the previous one's ledger close")
    args = ap.parse_args()
    if not cluster_ready():
        print(NOT_RUNNING, file=sys.stderr)
        return 1
    sys.path.insert(0, str(REPO))
    from tests.fixtures_slurm import make_slurm_ledger as make_ledger

    tmp = Path(tempfile.mkdtemp(prefix="tg-bench-"))
    saved = CONF.read_text()
    tag = f"b{int(time.time())}"
    jobids, rows = [], []
    try:
        def case(label, settings, argv_for, expect_ok):
            # a fresh ledger per case: 50 admitted reservations would fill the team's GPUs
            case_db = make_ledger(tmp / f"gate-{len(rows)}.duckdb")
            set_conf(saved, GATE_DB=str(case_db), **settings)
            times = []
            for i in range(args.n):
                ms, r = timed(["sbatch", "--parsable", "--hold", *argv_for(i), "--wrap", "true"])
                if (r.returncode == 0) != expect_ok:
                    raise SystemExit(f"{label}: unexpected sbatch result: {r.stderr.strip()}")
                if r.returncode == 0:
                    jobids.append(r.stdout.strip().split(";")[0])
                times.append(ms)
                time.sleep(args.gap_ms / 1000.0)
            rows.append((label, statistics.median(times), p95(times)))

        gpu = ["--account=vision", "--gres=gpu:1", "--time=5"]
        case("sbatch, pass-through (no GPUs)", {}, lambda i: ["--time=5"], True)
        case("sbatch, gated, warm server: admit", {},
             lambda i: [*gpu, "--comment=" + json.dumps({**REQUEST, "run_id": f"{tag}-w{i}"})], True)
        case("sbatch, gated, warm server: refuse", {},
             lambda i: [*gpu, "--comment=" + json.dumps({**REQUEST, "run_id": f"{tag}-r{i}",
                                                        "estimated_gpu_hours": 40})], False)
        case("sbatch, gated, cold Python: admit", {"TG_GATE_SOCKET": str(tmp / "no-server.sock")},
             lambda i: [*gpu, "--comment=" + json.dumps({**REQUEST, "run_id": f"{tag}-c{i}"})], True)
    finally:
        CONF.write_text(saved)
        for k in range(0, len(jobids), 200):
            subprocess.run(["scancel", *jobids[k:k + 200]], env=ENV, capture_output=True)

    py = sys.executable
    # as the hook runs: bytecode cached under the cluster's state dir (job_submit.lua sets the same)
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONPYCACHEPREFIX": str(STATE / "pycache")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    starts = {
        "python -c pass": [py, "-c", "pass"],
        "python -S -c pass": [py, "-S", "-c", "pass"],
        "python -S -c 'import lib.slurm.hook' (warm path start)": [py, "-S", "-c", "import lib.slurm.hook"],
        "python -c 'import lib.ledger.deciding' (cold path imports)": [py, "-c", "import lib.ledger.deciding"],
    }
    for label, cmd in starts.items():
        times = [timed(cmd, env)[0] for _ in range(min(args.n, 20))]
        rows.append((label, statistics.median(times), p95(times)))

    base = rows[0][1]
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"\nSlurm submit hook cost, {args.n} submissions per sbatch case, {args.gap_ms:g} ms apart "
          f"({os.cpu_count()} CPUs, "
          f"load average {load} at the end: other work on the machine inflates every number)\n")
    print(f"{'case':58s} {'median ms':>10s} {'P95 ms':>8s} {'added ms':>9s}")
    for label, med, p in rows:
        added = f"{med - base:9.1f}" if label.startswith("sbatch, gated") else " " * 9
        print(f"{label:58s} {med:10.1f} {p:8.1f} {added}")
    warm_added = rows[1][1] - base
    print(f"\ngoal: < 100 ms added at the median (warm server, admit): "
          f"{'MET' if warm_added < 100 else 'NOT MET'} ({warm_added:.1f} ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
