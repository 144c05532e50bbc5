"""A burst of submissions through Slurm with the gate in the way, while the dashboard reads the ledger.

    lib/slurm/cluster.sh start            # once
    python -m bench.bench_slurm_burst [--n 1000] [--concurrency 16] [--single 30] [--no-dashboard]
                                      [--on-defer hold|refuse]

On the running test cluster, with the hook pointed at a fresh ledger for the run (restored after):
  1. pass-through: N jobs without GPUs (job_submit.lua returns at once), `--concurrency` sbatch callers;
  2. gated: the same N jobs asking for 1 GPU each with a gate request in --comment, the teams of
     data/teams.toml in turn (a big burst runs into their quotas: later jobs are deferred, which
     tests double-booking; with the server's default TG_ON_DEFER=hold they are accepted held, so
     the mix has held jobs, which the queue keeper turns into admin holds meanwhile);
  2b. gated through a shared authority: the same burst, to a second gate server that decides against
     a real PostgreSQL (started for the run, as the tests start it; skipped, saying why, where
     PostgreSQL 15 is absent), on a third fresh ledger, the same dashboard read running on it: gated
     rate and p95 side by side with 2;
  3. one sbatch at a time (`--single` each, 100 ms apart, plain and gated taking turns; the gated ones
     admitted, on a second fresh ledger): the hook's added median for one sbatch.
During 1, 2 and 2b a dashboard read (lib.dashboard.overview_queries.overview on the ledger, plus the decided
run IDs) runs, pausing 200 ms after each (not with --no-dashboard: the gate's path alone). Jobs are
submitted held and cancelled at the end. Prints one table: sbatch/s, latency p50/p95, decisions in the ledger vs answered, the most GPUs a team held at once vs
its quota, dashboard read failures and slowest read, and the longest time from an sbatch's answer
until its decision was visible to the dashboard (to the first read of the decided run IDs that
started after the answer and saw it; resolution: one read cycle).
Goals: gated >= half the pass-through rate and p95 <= 300 ms, with and without the authority, gated p95
< 1 s, +< 5 ms per single sbatch, every answered decision recorded, no over-quota, no failed read, no
read > 1 s, visible within 2 s.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench.slurm_cluster import CONF, ENV, NOT_RUNNING, SOCKET, cluster_ready

REPO = Path(__file__).resolve().parent.parent
REQUEST = {"kind": "exploratory", "gpu_mem_gb": 40, "budget_gpu_hours": 4, "estimated_gpu_hours": 0.1,
           "checkpoint_supported": True, "expected_interruptions": 0, "data_snapshot": "common-crawl-2024-10"}


def pct(xs, q):
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))] if s else float("nan")


class DashboardReader(threading.Thread):
    """Every 200 ms: the Overview read model and the decided run IDs, timed; first sight of each run ID."""

    def __init__(self, db: Path, enabled: bool = True):
        super().__init__(daemon=True)
        self.db, self.stop, self.enabled = db, threading.Event(), enabled
        self.times, self.started, self.failures, self.first_seen = [], [], [], {}

    def run(self):
        from lib.dashboard import overview_queries
        from lib.dashboard.filters import Filters
        from lib.ledger.connection import open_ledger
        today = dt.date.today()
        f = Filters(today - dt.timedelta(days=1), today + dt.timedelta(days=1))
        while self.enabled and not self.stop.is_set():
            t0 = time.perf_counter()
            try:
                overview_queries.overview(f, db=self.db)
                asked = time.perf_counter()  # what this read sees was in the ledger when it started
                with open_ledger(self.db, read_only=True, timeout_s=10) as con:
                    seen = [r[0] for r in con.execute("SELECT run_id FROM decisions").fetchall()]
                for run_id in seen:
                    self.first_seen.setdefault(run_id, asked)
            except Exception as exc:  # noqa: BLE001 - a failed read is what is counted
                self.failures.append(f"{type(exc).__name__}: {exc}")
            self.times.append(time.perf_counter() - t0)
            self.started.append(t0)
            self.stop.wait(0.2)  # a read, then 200 ms (a read at this load takes longer than 200 ms)


def sbatch(args: list[str]) -> tuple[float, float, subprocess.CompletedProcess]:
    """(seconds taken, perf_counter at the answer, result)."""
    t0 = time.perf_counter()
    r = subprocess.run(["sbatch", "--parsable", "--hold", *args, "--wrap", "true"], env=ENV,
                       capture_output=True, text=True, timeout=300)
    t1 = time.perf_counter()
    return t1 - t0, t1, r


def burst(argv_for, n: int, concurrency: int) -> dict:
    t0 = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        results = list(pool.map(lambda i: sbatch(argv_for(i)), range(n)))
    wall = time.perf_counter() - t0
    return {"rate": n / wall, "lat": [r[0] for r in results], "at": [r[1] for r in results],
            "results": [r[2] for r in results]}


def warm_up(argv: list[str], jobids: list[str], wait_s: float = 120.0) -> None:
    """One untimed gated sbatch before a timed burst, so the burst measures a gate that has its ledger
    loaded (a fresh ledger's first decision reads every team's facts, about 1 s), then a wait until
    the server's first budget run-out computation (lib.slurm.runouts: a process of its own at a lower
    priority, started by that load and again at most every 5 minutes) has ended."""
    _, _, r = sbatch(argv)
    if r.returncode == 0:
        jobids.append(r.stdout.strip().split(";")[0])
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and any(b"lib.slurm.runouts" in c for c in _cmdlines()):
        time.sleep(0.2)


def _cmdlines():
    for p in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            yield p.read_bytes()
        except OSError:   # ended meanwhile
            continue


def max_held(db: Path) -> dict[str, tuple[int, int]]:
    """team -> (most GPUs its admitted reservations held at one time, its reserved_gpus)."""
    from lib.ledger.connection import open_ledger
    with open_ledger(db, read_only=True) as con:
        quotas = dict(con.execute("SELECT team, reserved_gpus FROM teams").fetchall())
        rows = con.execute("SELECT team, reserved_from, reserved_until, gpus FROM runs "
                           "WHERE reserved_gpu_hours IS NOT NULL").fetchall()
    out = {}
    for team, quota in quotas.items():
        mine = [r[1:] for r in rows if r[0] == team]
        events = sorted([(a, g) for a, _, g in mine] + [(b, -g) for _, b, g in mine if b is not None],
                        key=lambda e: (e[0], e[1]))  # an end before a start at the same instant
        held = peak = 0
        for _, g in events:
            held += g
            peak = max(peak, held)
        out[team] = (peak, int(quota))
    return out


def authority_burst(tmp: Path, lines: list[str], argv_for, n: int, concurrency: int, reads: bool, warm) -> dict:
    """Phase 2b: the burst through a gate server of its own that decides against a fresh PostgreSQL
    (schema and data/teams.toml's policies loaded), on a fresh ledger. {"skipped": why} without PostgreSQL."""
    from lib.authority.store import init_schema
    from lib.gate.terms import utcnow
    from lib.ledger.teams_file import load_teams_file
    from tests.fixtures_postgres import PostgresServer, authority_env, postgres_missing
    from tests.fixtures_slurm import make_slurm_ledger
    why = postgres_missing()
    if why:
        return {"skipped": why}
    pg = PostgresServer()
    sock = tmp / "authority-gate.sock"
    server = None
    try:
        url = pg.url(pg.new_database())
        init_schema(url, load_teams_file()["teams"], utcnow())
        db = make_slurm_ledger(tmp / "authority.duckdb")
        env = {**authority_env(url, "bench"), "PYTHONPATH": str(REPO)}
        server = subprocess.Popen([sys.executable, "-m", "lib.slurm.server", "--socket", str(sock), "--db", str(db)],
                                  cwd=REPO, env=env, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while not sock.exists():
            if server.poll() is not None or time.monotonic() > deadline:
                return {"skipped": "the authority's gate server did not start"}
            time.sleep(0.05)
        CONF.write_text("\n".join([ln for ln in lines if not ln.startswith("TG_GATE_SOCKET=")]
                                  + [f"GATE_DB={db}", f"TG_GATE_SOCKET={sock}"]) + "\n")
        warm()
        reader = DashboardReader(db, reads)   # the same dashboard load as the gated phase's, on this ledger
        reader.start()
        try:
            out = burst(argv_for, n, concurrency)
        finally:
            reader.stop.set()
            reader.join(timeout=30)
        out["reads"], out["read_failures"] = reader.times, reader.failures
        from lib.slurm.wire import flush
        flush(str(sock), str(db.resolve()))
        import psycopg
        with psycopg.connect(url) as con:
            out["holds"] = con.execute("SELECT count(*) FROM training_gate.holds "
                                       "WHERE released_at IS NULL").fetchone()[0]
        out["db"] = db
        return out
    finally:
        if server is not None:
            server.terminate()
            server.wait(60)
        pg.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1000, help="jobs per burst (default 1000)")
    ap.add_argument("--concurrency", type=int, default=16, help="concurrent sbatch callers (default 16)")
    ap.add_argument("--single", type=int, default=30, help="one-at-a-time sbatch per case (default 30)")
    ap.add_argument("--no-dashboard", dest="dashboard", action="store_false",
                    help="no dashboard read during the bursts: the gate's path alone (its rows are left out)")
    ap.add_argument("--on-defer", choices=("hold", "refuse"), default="hold",
                    help="the hook's TG_ON_DEFER for the run: hold (default: deferred jobs accepted held) or refuse")
    args = ap.parse_args()
    if not cluster_ready():
        print(NOT_RUNNING, file=sys.stderr)
        return 1
    sys.path.insert(0, str(REPO))
    from lib.slurm.wire import flush
    from tests.fixtures_slurm import make_slurm_ledger

    tmp = Path(tempfile.mkdtemp(prefix="tg-burst-"))
    db = make_slurm_ledger(tmp / "gate.duckdb")
    saved = CONF.read_text()
    lines = [ln for ln in saved.splitlines() if not ln.startswith(("GATE_DB=", "TG_ON_DEFER="))]
    lines.append(f"TG_ON_DEFER={args.on_defer}")
    CONF.write_text("\n".join(lines + [f"GATE_DB={db}"]) + "\n")
    tag = f"burst{int(time.time())}"
    quotas = {t: q for t, (_, q) in max_held(db).items()}
    teams = sorted(quotas)
    biggest = teams.index(max(teams, key=quotas.get))  # single sbatch: admitted all along

    def gpu_job(i, **changes):
        return [f"--account={teams[i % len(teams)]}", "--gres=gpu:1", "--time=10",
                "--comment=" + json.dumps({**REQUEST, "run_id": f"{tag}-{i}", **changes})]
    jobids: list[str] = []
    reader = DashboardReader(db, args.dashboard)
    try:
        reader.start()
        plain = burst(lambda i: ["--time=10"], args.n, args.concurrency)
        warm_up(gpu_job(biggest, run_id=f"{tag}-w"), jobids)
        gated_from = time.perf_counter()
        gated = burst(gpu_job, args.n, args.concurrency)
        time.sleep(2.5)  # let the reader see the last batch
        reader.stop.set()
        reader.join(timeout=30)
        flush(str(SOCKET), str(Path(db).resolve()))
        shared = authority_burst(tmp, lines, lambda i: gpu_job(i, run_id=f"{tag}-a{i}"), args.n, args.concurrency,
                                 args.dashboard, lambda: warm_up(gpu_job(biggest, run_id=f"{tag}-aw"), jobids))
        # one sbatch at a time, plain and gated (admitted, on a second fresh ledger) taking turns
        CONF.write_text("\n".join(lines + [f"GATE_DB={make_slurm_ledger(tmp / 'single.duckdb')}"]) + "\n")
        single = {"plain": [], "gated": []}
        for i in range(-1, args.single):  # -1: untimed, loads the second ledger into the server
            for label, argv in (("plain", ["--time=10"]), ("gated", gpu_job(biggest, run_id=f"{tag}-s{i}"))):
                took, _, r = sbatch(argv)
                if r.returncode == 0:
                    jobids.append(r.stdout.strip().split(";")[0])
                if i >= 0:
                    single[label].append(took)
                time.sleep(0.1)
        single = {k: statistics.median(v) for k, v in single.items()}
        for r in plain["results"] + gated["results"] + shared.get("results", []):
            if r.returncode == 0:
                jobids.append(r.stdout.strip().split(";")[0])
    finally:
        CONF.write_text(saved)
        for k in range(0, len(jobids), 200):
            subprocess.run(["scancel", *jobids[k:k + 200]], env=ENV, capture_output=True)

    answered = {f"{tag}-{i}": r for i, r in enumerate(gated["results"])
                if "training-gate: admitted" in r.stderr or "training-gate: deferred" in r.stderr
                or "training-gate: rejected" in r.stderr or "training-gate: queued:" in r.stderr}
    admitted = sum(1 for r in answered.values() if "training-gate: admitted" in r.stderr)
    queued = sum(1 for r in answered.values() if r.returncode == 0 and "training-gate: queued:" in r.stderr)
    from lib.ledger.connection import open_ledger
    with open_ledger(db, read_only=True) as con:
        recorded = dict(con.execute("SELECT run_id, count(*) FROM decisions WHERE run_id LIKE ? GROUP BY run_id",
                                    [f"{tag}-%"]).fetchall())
    in_ledger = sum(1 for k in answered if recorded.get(k) == 1)
    twice = sum(1 for v in recorded.values() if v > 1)
    lags = [reader.first_seen[k] - gated["at"][int(k.rsplit("-", 1)[1])]
            for k in answered if k in reader.first_seen]
    unseen = sum(1 for k in answered if k not in reader.first_seen)
    held = max_held(db)
    plain_reads = [d for t, d in zip(reader.started, reader.times) if t < gated_from]
    gated_reads = [d for t, d in zip(reader.started, reader.times) if t >= gated_from]
    over = [t for t, (peak, quota) in held.items() if peak > quota]
    ratio = gated["rate"] / plain["rate"]
    added_ms = (single["gated"] - single["plain"]) * 1000
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"\nburst of {args.n} sbatch (TG_ON_DEFER={args.on_defer}), {args.concurrency} concurrent callers "
          f"({os.cpu_count()} CPUs, load average "
          f"{load} at the end: other work on the machine inflates every number)\n")
    print(f"{'':40s} {'sbatch/s':>9s} {'p50 ms':>8s} {'p95 ms':>8s}")
    phases = [("jobs without GPUs (pass-through)", plain), ("GPU jobs through the gate", gated)]
    if "skipped" not in shared:
        phases.append(("GPU jobs through gate + authority", shared))
    for label, b in phases:
        print(f"{label:40s} {b['rate']:9.1f} {pct(b['lat'], .5) * 1000:8.0f} {pct(b['lat'], .95) * 1000:8.0f}")
    rows = [
        ("gated / pass-through rate", f"{ratio:.2f}", ratio >= 0.5, ">= 0.5"),
        ("gated p95 latency", f"{pct(gated['lat'], .95) * 1000:.0f} ms", pct(gated["lat"], .95) < 1, "< 1 s"),
        ("hook's added median, single sbatch", f"{added_ms:+.1f} ms", added_ms < 5, "< 5 ms"),
        ("answered decisions in the ledger (once)", f"{in_ledger} of {len(answered)} ({admitted} admitted, "
         f"{queued} held, {twice} twice)", in_ledger == len(answered) == args.n and twice == 0, "all"),
        ("most GPUs a team held at once vs quota", ", ".join(f"{t} {p}/{q}" for t, (p, q) in held.items())[:44],
         not over, "<= quota"),
        ("dashboard reads failed", f"{len(reader.failures)} of {len(reader.times)}", not reader.failures, "0"),
        ("slowest dashboard read (pass-through)", f"{max(plain_reads, default=0) * 1000:.0f} ms "
         f"(median {statistics.median(plain_reads or [0]) * 1000:.0f} ms)", max(plain_reads, default=0) < 1, "< 1 s"),
        ("slowest dashboard read (gated)", f"{max(gated_reads, default=0) * 1000:.0f} ms "
         f"(median {statistics.median(gated_reads or [0]) * 1000:.0f} ms)", max(gated_reads, default=0) < 1, "< 1 s"),
        ("decision visible to the dashboard after", f"max {max(lags, default=float('nan')):.2f} s, "
         f"median {statistics.median(lags) if lags else float('nan'):.2f} s ({unseen} never seen)",
         bool(lags) and max(lags) < 2 and not unseen, "< 2 s"),
    ]
    if "skipped" in shared:
        rows.append(("with the authority", f"skipped: {shared['skipped']}"[:44], False, "run"))
    else:
        shared_ratio = shared["rate"] / plain["rate"]
        with open_ledger(shared["db"], read_only=True) as con:
            got = dict(con.execute("SELECT run_id, count(*) FROM decisions GROUP BY run_id").fetchall())
            shared_admits = con.execute("SELECT count(*) FROM decisions WHERE state = 'admit'").fetchone()[0]
        s_answered = [f"{tag}-a{i}" for i, r in enumerate(shared["results"]) if "training-gate: " in r.stderr
                      and any(w in r.stderr for w in ("admitted", "deferred", "rejected", "queued:"))]
        s_in = sum(1 for k in s_answered if got.get(k) == 1)
        s_over = [t for t, (peak, quota) in max_held(shared["db"]).items() if peak > quota]
        rows[2:2] = [
            ("gated + authority / pass-through rate", f"{shared_ratio:.2f}", shared_ratio >= 0.5, ">= 0.5"),
            ("gated + authority p95 latency", f"{pct(shared['lat'], .95) * 1000:.0f} ms",
             pct(shared["lat"], .95) <= 0.3, "<= 300 ms"),
            ("  ... answered in its ledger (once)", f"{s_in} of {len(s_answered)}; holds in PostgreSQL "
             f"{shared['holds']} = admits {shared_admits}", s_in == len(s_answered) == args.n
             and shared["holds"] == shared_admits, "all"),
            ("  ... no team over its quota", "none over" if not s_over else ", ".join(s_over), not s_over, "<= quota"),
            ("  ... dashboard reads failed, slowest", f"{len(shared['read_failures'])} of {len(shared['reads'])}, "
             f"{max(shared['reads'], default=0) * 1000:.0f} ms "
             f"(median {statistics.median(shared['reads'] or [0]) * 1000:.0f} ms)",
             not shared["read_failures"] and max(shared["reads"], default=0) < 1, "0, < 1 s"),
        ]
        rows.insert(1, ("gated p95 latency (goal with authority)", f"{pct(gated['lat'], .95) * 1000:.0f} ms",
                        pct(gated["lat"], .95) <= 0.3, "<= 300 ms"))
    print(f"\n{'measure':42s} {'value':44s} {'goal':>9s}  met")
    if not args.dashboard:
        rows = [r for r in rows if "dashboard" not in r[0]]
    for label, value, ok, goal in rows:
        print(f"{label:42s} {value:44s} {goal:>9s}  {'yes' if ok else 'NO'}")
    if reader.failures:
        print("\nfirst failed read:", reader.failures[0])
    return 0


if __name__ == "__main__":
    sys.exit(main())
