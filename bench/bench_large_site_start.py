"""How soon a warm gate server answers on a large site: a ledger of N teams (each with a few finished
runs, so its calibration facts have something to read), a real `python -m lib.slurm.server` started
on it, timed until its socket listens and until its first answer (a what-if for the last team).

    python bench/bench_large_site_start.py [--teams 10 100 400] [--runs-per-team 5]

Prints one row per N: seconds to listen, seconds to the first answer (both from the process start,
Python's own start-up included). Goal: listening within 3 s with 400 teams.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lib.gate.terms import utcnow  # noqa: E402
from lib.ledger.connection import open_ledger  # noqa: E402
from lib.ledger.teams_file import sync_teams  # noqa: E402
from lib.slurm.wire import ask  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
TEAM = """
[teams.t{i:04d}]
reserved_gpus = 8
retraining_reserved_gpus = 0
max_gpus_per_job = 8
monthly_budget_gpu_hours = 100000
"""


def build(path: Path, teams: int, runs_per_team: int) -> None:
    text = "[defaults]\nmax_gpu_mem_gb = 80\nmax_runtime_hours = 48\npilot_required_above_gpu_hours = 1000\n"
    text += "".join(TEAM.format(i=i) for i in range(teams))
    text += "".join(f'\n[[snapshots]]\nsnapshot = "s{i:04d}"\nteam = "t{i:04d}"\n' for i in range(teams))
    toml = path.with_suffix(".toml")
    toml.write_text(text, encoding="utf-8")
    now = utcnow()
    with open_ledger(path) as con:
        sync_teams(con, toml)
        rows = []
        for i in range(teams):
            for j in range(runs_per_team):
                start = now - timedelta(days=j + 1)
                rows.append((f"t{i:04d}-r{j}", f"t{i:04d}", "exploratory", 2, 10.0, start, start + timedelta(hours=5),
                             start, start + timedelta(hours=4), 8.0, "csv", now))
        con.executemany("INSERT INTO runs (run_id, team, kind, gpus, reserved_gpu_hours, reserved_from, "
                        "reserved_until, started_at, ended_at, actual_gpu_hours, source, updated_at) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        rows)


def measure(db: Path, sock: Path, last_team: str) -> tuple[float, float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GATE_AUTHORITY")}
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "lib.slurm.server", "--socket", str(sock), "--db", str(db),
                             "--windows-interval-s", "0"], cwd=REPO, env={**env, "PYTHONPATH": str(REPO)},
                            stderr=subprocess.PIPE, text=True)
    try:
        while not sock.exists():
            if proc.poll() is not None:
                raise SystemExit(proc.stderr.read())
            time.sleep(0.01)
        listening = time.monotonic() - t0
        request = {"run_id": "probe", "team": last_team, "kind": "exploratory", "gpus": 1, "gpu_mem_gb": 40,
                   "max_runtime_hours": 1, "budget_gpu_hours": 4, "estimated_gpu_hours": 0.5,
                   "checkpoint_supported": True, "expected_interruptions": 0, "data_snapshot": "s0000"}
        code, rest = ask(str(sock), {"op": "check", "db": str(db), "request": json.dumps(request)}, timeout_s=120)
        assert code == 0, rest
        return listening, time.monotonic() - t0
    finally:
        proc.terminate()
        proc.communicate(timeout=60)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--teams", type=int, nargs="+", default=[10, 100, 400])
    ap.add_argument("--runs-per-team", type=int, default=5)
    args = ap.parse_args()
    print(f"{'teams':>6} {'listening s':>12} {'first answer s':>15}")
    for n in args.teams:
        with tempfile.TemporaryDirectory() as tmp:
            db = Path(tmp) / "gate.duckdb"
            build(db, n, args.runs_per_team)
            listening, answered = measure(db, Path(tmp) / "gate.sock", f"t{n - 1:04d}")
            print(f"{n:>6} {listening:>12.2f} {answered:>15.2f}", flush=True)


if __name__ == "__main__":
    main()
