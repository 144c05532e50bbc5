"""Policy replay speed: 100,000 recorded requests of a 1,000,000-run demo ledger, and a 4-week window of
the default 10,000-run demo, each replayed under the ledger's own policy; then the capacity what-if over
a 4-week window of the 1,000,000-run demo: one replay with a changed pool (the baseline beside it), and
the search for the smallest stable pool meeting a deferral-share target (the share with every quota's worth
of accelerators, plus half a point: a target the search can reach, so it bisects all the way).

    python -m bench.bench_replay [--out bench/out] [--requests 100000] [--skip-search]

The ledgers are built once into --out with lib.ledger.demo.build_demo (replay_demo_10k.duckdb,
replay_demo_1m.duckdb) when missing. Each case runs in its own process, so its peak memory (the
process's peak resident set, VmHWM in /proc/self/status: Python and DuckDB together) is its own
(resource.getrusage's ru_maxrss would carry the builder's peak across exec). Times are
wall-clock seconds from opening the ledger to the finished result (lib.ledger.replay.replay_ledger),
and the CPU seconds of that process (on a shared machine the wall clock also counts other work).
Calibration: refresh "auto" = exact (recomputed whenever a scope it read changed) up to 20,000
requests, else once per (team, kind, day). Targets: 100,000 requests < 30 s and < 1 GB; 4 weeks < 3 s;
a changed pool over 4 weeks of the 1,000,000-run demo < 5 s; the smallest-pool search < 60 s.

The changed pool is timed three ways, each in its own process: without the kept passes (every pass
run), cold (keep=True, the kept file beside the ledger removed first: every pass run and kept), and
with the kept passes (keep=True again: a window replayed before runs only the proposal's pass;
lib.planning.replay_kept). The kept file is bench/out/replay_demo_1m.duckdb.replay-passes.json.

The search is timed as the page runs it (the window read, the bisection, the sizes shown around the
size found), twice, each in its own process: with nothing kept ("search"), and after the pool replays,
with the calibrations they kept beside the ledger ("search-kept").
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TARGETS = {"1m": (30.0, 1024.0), "10k": (3.0, None), "pool": (5.0, None), "search": (60.0, None)}
POOL_CHANGE = 0.75        # the changed pool: this share of every quota together
SEARCH_SLACK = 0.005      # the search's target: the deferral share with every quota's worth of accelerators, + this


def ledger_for(runs: int, out: Path) -> Path:
    from lib.ledger.demo import build_demo
    path = out / ("replay_demo_1m.duckdb" if runs >= 1_000_000 else f"replay_demo_{runs // 1000}k.duckdb")
    if not path.exists():
        out.mkdir(parents=True, exist_ok=True)
        t = time.perf_counter()
        print(f"building {runs:,}-run demo ledger at {path} ...", flush=True)
        build_demo(path, runs=runs)
        print(f"  built in {time.perf_counter() - t:.1f} s", flush=True)
    return path


def peak_rss_mb() -> float:
    """This process's peak resident set size in MB (VmHWM), else ru_maxrss where /proc is missing."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def one_case(path: Path, requests: int | None) -> dict:
    """Replay the last `requests` decisions (None: the 4 weeks up to the last decision); in this process."""
    from lib.ledger.connection import open_ledger
    from lib.ledger.replay import DEFAULT_WINDOW, replay_ledger
    t, cpu = time.perf_counter(), time.process_time()
    with open_ledger(path, read_only=True, create=False) as con:
        end = con.execute("SELECT max(decided_at) FROM decisions").fetchone()[0] + timedelta(seconds=1)
        if requests:
            start = con.execute("SELECT decided_at FROM decisions ORDER BY decided_at DESC LIMIT 1 OFFSET ?",
                                [requests - 1]).fetchone()[0]
        else:
            start = end - DEFAULT_WINDOW
    result = replay_ledger(path, start=start, end=end)
    seconds, cpu = time.perf_counter() - t, time.process_time() - cpu
    return {"requests": result["requests"], "replayable": result["replayable"], "seconds": seconds, "cpu": cpu,
            "peak_mb": peak_rss_mb(),
            "refresh": result["calibration_refresh"], "calibrations": result["calibrations_computed"],
            "agreement": result["agreement"]}


def what_if_case(path: Path, case: str) -> dict:
    """A 4-week window up to the last decision, in this process: "pool", one replay with the stable pool
    at POOL_CHANGE of the quotas (its baseline beside it); "search", the smallest stable pool meeting
    a deferral share SEARCH_SLACK above the one at the search's ceiling (lib.dashboard.replay_view.smallest_pool;
    that first replay is not timed). A case ending in "-collecting" runs as the case before it with the
    cyclic garbage collector left running (gc.disable made a no-op, so lib.planning.collector pauses
    nothing): the code as it was before that pause, in the same run."""
    if case.endswith("-collecting"):
        import gc
        gc.disable = lambda: None
        case = case.removesuffix("-collecting")
    from lib.dashboard.replay_view import around, pool_rows, search_ceiling, smallest_pool
    from lib.planning.replay import replay_proposal
    from lib.ledger.connection import open_ledger
    from lib.ledger.replay import DEFAULT_WINDOW, kept_file, read_window, replay_ledger
    with open_ledger(path, read_only=True, create=False) as con:
        end = con.execute("SELECT max(decided_at) FROM decisions").fetchone()[0] + timedelta(seconds=1)
        quotas = con.execute("SELECT sum(reserved_gpus) FROM teams").fetchone()[0]
    if case.startswith("search"):
        data = read_window(path, start=end - DEFAULT_WINDOW, end=end)
        top = search_ceiling(data[2], data[1].get("pools", {}), "stable")
        share = replay_proposal(data[0], data[2], data[1], pools={"stable": top})["overall"]["deferral_share"]
        target = {"measure": "deferral_share", "limit": share + SEARCH_SLACK}
    if case == "pool-cold":
        kept_file(path).unlink(missing_ok=True)
    t, cpu = time.perf_counter(), time.process_time()
    if case.startswith("pool"):
        n = int(quotas * POOL_CHANGE)
        ran: set[str] = set()

        def progress(fraction, message):
            if ":" in message:
                ran.add(message.split(":")[0])
        result = replay_ledger(path, start=end - DEFAULT_WINDOW, end=end, pools={"stable": n}, progress=progress,
                               keep=case != "pool")
        detail = (f"stable={n}: admits {result['baseline']['admit']:,} -> {result['proposed']['admit']:,}, "
                  f"ran {'+'.join(m for m in ('proposed', 'baseline', 'recorded') if m in ran)}")
        requests = result["requests"]
    else:   # the page's search: the window read, the search, and the sizes shown around the one found
        data = read_window(path, start=end - DEFAULT_WINDOW, end=end)
        found = smallest_pool(data, "stable", target, kept=kept_file(path) if case == "search-kept" else None)
        searched, replays = time.perf_counter() - t, found["sizes"].replays
        pool_rows(found["sizes"], around(found["found"], found["ceiling"]))
        detail = (f"share <= {target['limit']:.3f}: N={found['found']} of <= {found['ceiling']}: "
                  f"{searched:.1f} s, {replays} replays; around +{found['sizes'].replays - replays}")
        requests = len(data[0])
    return {"requests": requests, "seconds": time.perf_counter() - t, "cpu": time.process_time() - cpu,
            "peak_mb": peak_rss_mb(), "detail": detail}


def what_if(path: Path, case: str) -> dict:
    """what_if_case in its own process."""
    out = subprocess.run([sys.executable, "-m", "bench.bench_replay", "--what-if", str(path), case],
                         cwd=ROOT, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def compare_collector(path: Path, rounds: int, skip_search: bool) -> None:
    """The kept what-ifs with the collector running (as before lib.planning.collector) and paused,
    alternated in one run, each in its own process: seconds side by side and their ratio."""
    print(f"{'case':<12}{'round':>6}{'collecting s':>14}{'paused s':>10}{'ratio':>7}{'peak MB':>15}")
    for case in ("pool-kept",) + (() if skip_search else ("search-kept",)):
        what_if(path, case)   # the kept passes and fits in place, not timed
        for k in range(rounds):
            before, after = what_if(path, case + "-collecting"), what_if(path, case)
            print(f"{case:<12}{k + 1:>6}{before['seconds']:>14.2f}{after['seconds']:>10.2f}"
                  f"{after['seconds'] / before['seconds']:>7.2f}{before['peak_mb']:>8.0f}/{after['peak_mb']:.0f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "out")
    ap.add_argument("--requests", type=int, default=100_000)
    ap.add_argument("--skip-search", action="store_true", help="leave out the smallest-pool search (minutes)")
    ap.add_argument("--collector", type=int, metavar="ROUNDS", default=0,
                    help="only compare the kept what-ifs with the garbage collector paused and running, "
                         "alternated, ROUNDS times")
    ap.add_argument("--one", nargs=2, metavar=("LEDGER", "REQUESTS"), help=argparse.SUPPRESS)
    ap.add_argument("--what-if", nargs=2, metavar=("LEDGER", "CASE"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one_case(Path(args.one[0]), int(args.one[1]) or None)))
        return
    if args.what_if:
        print(json.dumps(what_if_case(Path(args.what_if[0]), args.what_if[1])))
        return
    if args.collector:
        compare_collector(ledger_for(1_000_000, args.out), args.collector, args.skip_search)
        return
    cases = [("1m", ledger_for(1_000_000, args.out), args.requests),
             ("10k", ledger_for(10_000, args.out), 0)]
    print(f"{'ledger':<9}{'window':<18}{'requests':>10}{'seconds':>9}{'CPU s':>7}{'peak MB':>9}  calibration"
          f"{'':<14}{'target':>20}")
    for name, path, n in cases:
        out = subprocess.run([sys.executable, "-m", "bench.bench_replay", "--one", str(path), str(n)],
                             cwd=ROOT, capture_output=True, text=True, check=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        limit_s, limit_mb = TARGETS[name]
        met = r["seconds"] < limit_s and (limit_mb is None or r["peak_mb"] < limit_mb)
        target = f"< {limit_s:g} s" + (f", < {limit_mb:g} MB" if limit_mb else "") + (": met" if met else ": MISSED")
        window = f"last {n:,}" if n else "4 weeks"
        print(f"{name + ' runs':<9}{window:<18}{r['requests']:>10,}{r['seconds']:>9.2f}{r['cpu']:>7.1f}{r['peak_mb']:>9.0f}  "
              f"{r['refresh']} ({r['calibrations']:,} fits){'':<4}{target:>20}")
    print(f"\n{'what-if':<11}{'window':<18}{'requests':>10}{'seconds':>9}{'CPU s':>7}{'peak MB':>9}  {'detail':<52}"
          f"{'target':>16}")
    for case in ("pool", "pool-cold", "pool-kept") + (() if args.skip_search else ("search", "search-kept")):
        r = what_if(cases[0][1], case)
        limit_s = TARGETS[case.split("-")[0]][0]
        target = f"< {limit_s:g} s: " + ("met" if r["seconds"] < limit_s else "MISSED")
        print(f"{case:<11}{'4 weeks, 1m runs':<18}{r['requests']:>10,}{r['seconds']:>9.2f}{r['cpu']:>7.1f}"
              f"{r['peak_mb']:>9.0f}  {r['detail']:<52}{target:>16}")
    print("\npool: no kept passes (keep=False, every pass run); pool-cold: keep=True with no kept file (every "
          "pass run, then kept); pool-kept: keep=True after pool-cold (the baseline and recorded passes and the "
          "calibrations read back); search: the page's search with nothing kept (the window read, the bisection, "
          "then the sizes shown around the one found; its detail says the bisection's own seconds and replays, "
          "and the replays the sizes around it added); search-kept: the same after the pool replays, with the "
          "calibrations they kept beside the ledger")


if __name__ == "__main__":
    main()
