"""The gate server with and without the shared authority, side by side in one run, without Slurm:
a burst of N submissions from C concurrent callers straight to the server's socket (op=submit, what
`python -m lib submit` sends), each asking 1 GPU of one of the teams of data/teams.toml in turn.

    python -m bench.bench_authority [--n 1000] [--concurrency 16]

Two servers on two fresh ledgers: one deciding alone (the embedded ledger, the default), one deciding
against a real PostgreSQL 15 (started for the run, as the tests start it). Prints decisions/s and
latency p50/p95 for each, the ratio, and checks what the run left: every answered decision in its
ledger once, and the authority's holds equal to the admits. `python -m bench.bench_slurm_burst` runs
the same comparison through sbatch on the test cluster.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
REQUEST = {"kind": "exploratory", "gpu_mem_gb": 40, "budget_gpu_hours": 4, "estimated_gpu_hours": 0.1,
           "checkpoint_supported": True, "expected_interruptions": 0, "data_snapshot": "common-crawl-2024-10",
           "gpus": 1, "max_runtime_hours": 1, "capacity": "stable"}


def pct(xs, q):
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))] if s else float("nan")


def burst(sock: Path, db: Path, teams: list[str], tag: str, n: int, concurrency: int) -> dict:
    from lib.slurm.wire import ask
    lat, answers, lock = [], {}, threading.Lock()
    todo = iter(range(n))

    def caller():
        while True:
            with lock:
                i = next(todo, None)
            if i is None:
                return
            req = {**REQUEST, "run_id": f"{tag}-{i}", "team": teams[i % len(teams)]}
            t0 = time.perf_counter()
            code, rest = ask(str(sock), {"op": "submit", "db": str(db), "request": json.dumps(req)}, timeout_s=120)
            took = time.perf_counter() - t0
            with lock:
                lat.append(took)
                answers[req["run_id"]] = json.loads(rest)["state"] if code == 0 else f"failure: {rest}"
    t0 = time.perf_counter()
    threads = [threading.Thread(target=caller) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {"rate": n / (time.perf_counter() - t0), "lat": lat, "answers": answers}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--concurrency", type=int, default=16)
    args = ap.parse_args()
    sys.path.insert(0, str(REPO))
    from lib.authority.store import init_schema
    from lib.gate.terms import utcnow
    from lib.ledger.connection import open_ledger
    from lib.ledger.teams_file import load_teams_file
    from lib.slurm.wire import flush
    from tests.fixtures_postgres import PostgresServer, authority_env, postgres_missing
    from tests.fixtures_slurm import GateServerProcess, make_slurm_ledger
    why = postgres_missing()
    if why:
        print(f"skipped: {why}", file=sys.stderr)
        return 1
    tmp = Path(tempfile.mkdtemp(prefix="tg-bench-authority-"))
    pg = PostgresServer()
    servers = {}
    saved = dict(os.environ)
    try:
        url = pg.url(pg.new_database())
        policies = load_teams_file()["teams"]
        init_schema(url, policies, utcnow())
        teams = sorted(p["team"] for p in policies)
        for label, env in (("embedded ledger alone", {}), ("shared authority", authority_env(url, "bench"))):
            os.environ.clear()
            os.environ.update({**saved, **env})
            db = make_slurm_ledger(tmp / f"{len(servers)}.duckdb")
            servers[label] = GateServerProcess(db, tmp / f"{len(servers)}.sock")
        os.environ.clear()
        os.environ.update(saved)
        results = {}
        for label, server in servers.items():   # a short warm-up (loads the ledger, opens the connection)
            burst(Path(server.sock), server.db.resolve(), teams, f"warm{len(results)}", 32, 4)
            results[label] = burst(Path(server.sock), server.db.resolve(), teams, f"b{len(results)}",
                                   args.n, args.concurrency)
            flush(server.sock, str(server.db.resolve()))
        import psycopg
        with psycopg.connect(url) as con:
            holds = con.execute("SELECT count(*) FROM training_gate.holds WHERE released_at IS NULL "
                                "AND run_id LIKE 'b%'").fetchone()[0]
    finally:
        for server in servers.values():
            server.stop()
        pg.close()
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"\n{args.n} submissions, {args.concurrency} concurrent callers, straight to the gate server "
          f"({os.cpu_count()} CPUs, load average {load})\n")
    print(f"{'':28s} {'decisions/s':>12s} {'p50 ms':>8s} {'p95 ms':>8s} {'admit':>6s} {'defer':>6s} {'failed':>7s} "
          f"{'in ledger once':>15s}")
    for label, r in results.items():
        server = servers[label]
        with open_ledger(server.db, read_only=True) as con:
            got = dict(con.execute("SELECT run_id, count(*) FROM decisions WHERE run_id LIKE 'b%' "
                                   "GROUP BY run_id").fetchall())
        states = list(r["answers"].values())
        answered = [k for k, v in r["answers"].items() if not v.startswith("failure")]
        once = sum(1 for k in answered if got.get(k) == 1)
        print(f"{label:28s} {r['rate']:12.1f} {pct(r['lat'], .5) * 1000:8.1f} {pct(r['lat'], .95) * 1000:8.1f} "
              f"{states.count('admit'):6d} {states.count('defer'):6d} "
              f"{sum(v.startswith('failure') for v in states):7d} {once:>8d} of {len(answered)}")
    alone, shared = results.values()
    admits = list(shared["answers"].values()).count("admit")
    print(f"\nwith the authority / alone: {shared['rate'] / alone['rate']:.2f} of the rate; "
          f"p95 {pct(shared['lat'], .95) * 1000:.0f} ms (goal <= 300 ms); holds in PostgreSQL {holds} = "
          f"admits {admits}: {'yes' if holds == admits else 'NO'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
