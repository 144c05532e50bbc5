"""What the gate's line costs the warm gate server: one decision with N requests waiting in the line,
beside the same decision with nobody waiting, in one run.

    python bench/bench_server_line.py [--waiting 0,100,1000] [--decisions 200]

A ledger of 20 teams (quota 16 each) in a temp dir; each team's 16 accelerators are held by a
48-hour run, and N requests (spread over the teams, 8 accelerators each) are deferred for capacity,
so they wait in the line. The server (lib.slurm.live.LiveGate, in this process) then decides, without
writing, a probe request of a team with room (nobody of its own team waits, but the line is laid out:
a newcomer is served after everyone waiting), and the median and p95 per decision are printed beside
the empty line's, with the difference. Goal: under 1 ms at the median and 5 ms at p95 added with
1,000 waiting.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lib.gate.terms import utcnow  # noqa: E402
from lib.ledger.connection import open_ledger, transaction  # noqa: E402
from lib.ledger.deciding import decide_in_ledger  # noqa: E402
from lib.ledger.recording import record_decisions  # noqa: E402
from lib.ledger.teams_file import sync_teams  # noqa: E402
from lib.slurm.live import LiveGate  # noqa: E402

TEAMS = 20


def teams_toml() -> str:
    head = ("[defaults]\nmax_gpu_mem_gb = 80\nmax_runtime_hours = 48\npilot_required_above_gpu_hours = 100000\n"
            "max_gpus_per_job = 16\nmonthly_budget_gpu_hours = 1000000\n")
    teams = "".join(f"\n[teams.t{i:02d}]\nreserved_gpus = 16\n" for i in range(TEAMS + 1))
    return head + teams + '\n[[snapshots]]\nsnapshot = "data-v1"\n'


def request(run_id: str, team: str, gpus: int, hours: float) -> dict:
    return {"run_id": run_id, "team": team, "kind": "exploratory", "gpus": gpus, "gpu_mem_gb": 40,
            "estimated_gpu_hours": gpus * hours, "budget_gpu_hours": gpus * hours * 2,
            "max_runtime_hours": min(48, hours * 1.2), "checkpoint_supported": True,
            "expected_interruptions": 0, "data_snapshot": "data-v1", "capacity": "stable"}


def build(folder: Path, waiting: int) -> Path:
    """The ledger: every team's quota held for 40 h, `waiting` requests deferred behind them."""
    (folder / "teams.toml").write_text(teams_toml(), encoding="utf-8")
    db, now = folder / f"line-{waiting}.duckdb", utcnow() - timedelta(minutes=5)
    with open_ledger(db) as con:
        sync_teams(con, folder / "teams.toml")
        with transaction(con):
            decided = []
            for i in range(TEAMS):
                r = request(f"hold-{i}", f"t{i:02d}", 16, 40)
                decided.append((r, decide_in_ledger(con, r, now)[0], "bench", now, None))
            record_decisions(con, decided)
            decided = []
            for k in range(waiting):
                r = request(f"wait-{k}", f"t{k % TEAMS:02d}", 8, 4)
                d = decide_in_ledger(con, r, now + timedelta(seconds=k % 60))[0]
                assert d["state"] == "defer", d
                decided.append((r, d, "bench", now + timedelta(seconds=k % 60), None))
            record_decisions(con, decided)
    return db


def measure(db: Path, n: int) -> tuple[float, float]:
    """(median, p95) seconds of one decision (not written) of a probe with room."""
    gate = LiveGate(db, flusher=False)
    try:
        probe = request("probe", f"t{TEAMS:02d}", 8, 2)
        gate.decide(probe, now=utcnow(), origin="bench", write=False)   # facts read once
        times = []
        for _ in range(n):
            t = time.perf_counter()
            decision, _ = gate.decide(probe, now=utcnow(), origin="bench", write=False)
            times.append(time.perf_counter() - t)
        assert decision["state"] == "admit", decision
    finally:
        gate.close()
    times.sort()
    return statistics.median(times), times[int(0.95 * (len(times) - 1))]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--waiting", default="0,100,1000", help="comma-separated line lengths (0 is always measured)")
    ap.add_argument("--decisions", type=int, default=200)
    args = ap.parse_args(argv)
    sizes = sorted({0, *(int(x) for x in args.waiting.split(","))})
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for size in sizes:
            print(f"building a line of {size:,} and deciding {args.decisions} times ...", flush=True)
            rows.append((size, *measure(build(Path(tmp), size), args.decisions)))
    base_med, base_p95 = rows[0][1], rows[0][2]
    head = f"{'waiting':>9}{'median':>12}{'p95':>12}{'median added':>15}{'p95 added':>12}"
    print()
    print(head)
    print("-" * len(head))
    for size, med, p95 in rows:
        print(f"{size:>9,}{med * 1e3:>10.2f}ms{p95 * 1e3:>10.2f}ms{(med - base_med) * 1e3:>13.2f}ms"
              f"{(p95 - base_p95) * 1e3:>10.2f}ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
