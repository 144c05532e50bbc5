"""What the warm gate server's reload costs: the stall of every sbatch after another writer (an
import, a finish, a demo rebuild) changed the ledger, on ledgers of growing history.

    python bench/bench_gate_reload.py LEDGER [LEDGER ...]

For each ledger (copied to a temp file first: the server writes its journal beside it): starting
the server (lib.slurm.live.LiveGate: policies, reservations, booked run IDs, every team's facts),
then a reload (what follows another writer's change; median of 3), with the booked run IDs hashed
by DuckDB's string hash (lib.ledger.booked_ids, what the server uses) and, side by side, by MD5
(its fallback, and what the server used before). Also the cost of one "is this run ID taken?" in
memory. Goal: a reload of a 10^7-run ledger well under a second.
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lib.ledger import booked_ids  # noqa: E402
from lib.slurm.live import LiveGate  # noqa: E402


def _reload_s(gate: LiveGate, repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        gate._reload()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def measure(ledger: Path) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / ledger.name
        shutil.copyfile(ledger, db)
        t = time.perf_counter()
        gate = LiveGate(db)
        start = time.perf_counter() - t
        try:
            runs = len(gate.booked_in_ledger)
            reload_hash = _reload_s(gate)
            run_ids = [f"probe-{i}" for i in range(20000)]
            t = time.perf_counter()
            for run_id in run_ids:
                gate.booked_in_ledger.maybe(run_id)
            lookup_us = (time.perf_counter() - t) / len(run_ids) * 1e6
            same = booked_ids.same_string_hash
            booked_ids.same_string_hash = lambda con: False   # the MD5 fallback
            try:
                reload_md5 = _reload_s(gate)
            finally:
                booked_ids.same_string_hash = same
        finally:
            gate.close()
    return {"runs": runs, "start": start, "hash": reload_hash, "md5": reload_md5, "lookup_us": lookup_us}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("ledgers", nargs="+", type=Path)
    args = ap.parse_args(argv)
    rows = []
    for ledger in args.ledgers:
        print(f"measuring {ledger} ...", flush=True)
        rows.append((ledger.name, measure(ledger)))
    head = f"{'ledger':<28}{'booked runs':>14}{'start':>10}{'reload':>10}{'reload, MD5':>13}{'MD5 / hash':>12}{'lookup':>10}"
    print()
    print(head)
    print("-" * len(head))
    for name, m in rows:
        print(f"{name:<28}{m['runs']:>14,}{m['start']:>9.2f}s{m['hash']:>9.3f}s{m['md5']:>12.3f}s"
              f"{m['md5'] / m['hash']:>11.1f}x{m['lookup_us']:>8.1f}us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
