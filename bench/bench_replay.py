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
lib.planning.replay.kept). The kept file is bench/out/replay_demo_1m.duckdb.replay-passes.json.

`--phases ROUNDS` splits the next what-if (the changed pool, kept passes) into its parts, timed by the
progress the replay reports in one process: reading the window, digesting it and reading the kept file,
the proposal's pass, the report. Then it times the proposal's pass alone in a process of its own, first
(each request's JSON parsed, validated, calibrations fitted) and ROUNDS times again with all of that
done: the least a pass over this window costs with this engine. `--compiled ROUNDS` times those warm
passes with the engine's modules (COMPILED: the gate's decision and the replay's pass) as they are and
compiled by Cython from the same source into a copy outside the tree, alternated, each in its own
process (it needs `pip install cython setuptools`, which the project does not depend on).

The search is timed as the page runs it (the window read, the bisection, the sizes shown around the
size found), twice, each in its own process: with nothing kept ("search"), and after the pool replays,
with the calibrations they kept beside the ledger ("search-kept").
"""
from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TARGETS = {"1m": (30.0, 1024.0), "10k": (3.0, None), "pool": (5.0, None), "search": (60.0, None)}
POOL_CHANGE = 0.75        # the changed pool: this share of every quota together
SEARCH_SLACK = 0.005      # the search's target: the deferral share with every quota's worth of accelerators, + this
COMPILED = ("lib/gate/admission.py", "lib/gate/calibration.py", "lib/gate/capacity.py", "lib/gate/estimate.py",
            "lib/gate/reasons.py", "lib/gate/request.py", "lib/gate/stopping.py", "lib/gate/terms.py",
            "lib/planning/holdings.py", "lib/planning/replay/passes.py", "lib/planning/replay/history.py",
            "lib/planning/replay/report.py", "lib/planning/replay/world.py")


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
    a deferral share SEARCH_SLACK above the one at the search's ceiling (lib.planning.replay.search.smallest_pool;
    that first replay is not timed). A case ending in "-collecting" runs as the case before it with the
    cyclic garbage collector left running (gc.disable made a no-op, so lib.planning.replay.collector pauses
    nothing): the code as it was before that pause, in the same run."""
    if case.endswith("-collecting"):
        import gc
        gc.disable = lambda: None
        case = case.removesuffix("-collecting")
    from lib.dashboard.replay_view import pool_size_rows
    from lib.planning.replay.passes import replay_proposal
    from lib.planning.replay.search import search_ceiling, sizes_beside, smallest_pool
    from lib.ledger.replay import DEFAULT_WINDOW, kept_file, read_window, replay_ledger
    end, quotas = window_end(path)
    if case.startswith("search"):
        data = read_window(path, start=end - DEFAULT_WINDOW, end=end)
        top = search_ceiling(data.policies, data.world.get("pools", {}), "stable")
        share = replay_proposal(data.requests, data.policies, data.world,
                                pools={"stable": top})["overall"]["deferral_share"]
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
        sizes = found["sizes"]
        searched, replays = time.perf_counter() - t, sizes.replays
        pool_size_rows(sizes, sizes_beside(found))
        detail = (f"share <= {target['limit']:.3f}: N={found['found']} of <= {found['ceiling']}: "
                  f"{searched:.1f} s, {replays} replays; around +{sizes.replays - replays}")
        requests = len(data.requests)
    return {"requests": requests, "seconds": time.perf_counter() - t, "cpu": time.process_time() - cpu,
            "peak_mb": peak_rss_mb(), "detail": detail}


def in_process(*args: str) -> dict:
    """`python -m bench.bench_replay ARGS` in a process of its own: the JSON it prints last."""
    out = subprocess.run([sys.executable, "-m", "bench.bench_replay", *args], cwd=ROOT, capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def what_if(path: Path, case: str) -> dict:
    """what_if_case in its own process."""
    return in_process("--what-if", str(path), case)


def window_end(path: Path):
    """A second after the ledger's last decision, and every team's quota summed (accelerators)."""
    from lib.ledger.connection import open_ledger
    with open_ledger(path, read_only=True, create=False) as con:
        end = con.execute("SELECT max(decided_at) FROM decisions").fetchone()[0] + timedelta(seconds=1)
        return end, con.execute("SELECT sum(reserved_gpus) FROM teams").fetchone()[0]


def phases_case(path: Path) -> dict:
    """The next what-if (pool-kept's replay) in this process, each part's seconds: from the progress the
    replay reports, the window read (until "replaying"), its digest and the kept file (until the
    proposal's first request), the proposal's pass (until "replay done") and the report (until it returns)."""
    from lib.ledger.replay import DEFAULT_WINDOW, replay_ledger
    end, quotas = window_end(path)
    marks: dict[str, float] = {}

    def progress(fraction, message):
        for mark in ("replaying", "proposed: 0 of", "replay done"):
            if message.startswith(mark):
                marks.setdefault(mark, time.perf_counter())
    t = time.perf_counter()
    result = replay_ledger(path, start=end - DEFAULT_WINDOW, end=end, pools={"stable": int(quotas * POOL_CHANGE)},
                           progress=progress, keep=True)
    done = time.perf_counter()
    at = [t, marks["replaying"], marks["proposed: 0 of"], marks["replay done"], done]
    return {"requests": result["requests"], "parts": [b - a for a, b in zip(at, at[1:])], "seconds": done - t}


def pass_case(path: Path, rounds: int, lib_root: Path) -> dict:
    """The next what-if's proposal pass alone, with the lib of `lib_root`, in this process: its first
    run (JSON parsed, requests validated, calibrations fitted) and `rounds` more with all that done."""
    sys.path.insert(0, str(lib_root))
    from lib.ledger.replay import DEFAULT_WINDOW, read_window
    from lib.planning.replay.passes import replay_proposal
    end, quotas = window_end(path)
    data = read_window(path, start=end - DEFAULT_WINDOW, end=end)
    requests, world, policies = data.requests, data.world, data.policies
    fitted: dict = {}
    seconds = []
    for _ in range(rounds + 1):
        t = time.perf_counter()
        replay_proposal(requests, policies, world, pools={"stable": int(quotas * POOL_CHANGE)}, fitted=fitted)
        seconds.append(time.perf_counter() - t)
    import lib.planning.replay.passes as engine
    return {"requests": len(requests), "first": seconds[0], "again": seconds[1:],
            "compiled": not engine.__file__.endswith(".py")}


def show_phases(path: Path, rounds: int) -> None:
    """phases_case after pool-kept's setup, then pass_case, each in its own process: a table of seconds,
    microseconds a request, and the 5 s goal beside the total."""
    what_if(path, "pool-kept")   # the kept passes and fits in place, not timed
    r = in_process("--phases-of", str(path))
    n = r["requests"]
    names = ("read the window", "digest it, read the kept file", "the proposal's pass", "the report")
    print(f"the next what-if over {n:,} requests (stable at {POOL_CHANGE:g} of the quotas; baseline and record kept)")
    print(f"{'part':<44}{'seconds':>9}{'µs/request':>12}")
    for name, s in zip(names, r["parts"]):
        print(f"{name:<44}{s:>9.2f}{s / n * 1e6:>12.1f}")
    print(f"{'total (goal < 5 s)':<44}{r['seconds']:>9.2f}{r['seconds'] / n * 1e6:>12.1f}")
    p = in_process("--pass", str(path), str(rounds), str(ROOT))
    print("\nthe proposal's pass alone, in a process of its own")
    print(f"{'the first (parse, validate, fit)':<44}{p['first']:>9.2f}{p['first'] / n * 1e6:>12.1f}")
    for k, s in enumerate(p["again"]):
        print(f"{f'again, all that done ({k + 1})':<44}{s:>9.2f}{s / n * 1e6:>12.1f}")


def compiled_copy() -> Path:
    """A copy of lib/ outside the tree with the COMPILED modules built by Cython beside their source."""
    try:
        import Cython  # noqa: F401
        import setuptools  # noqa: F401
    except ImportError:
        sys.exit("--compiled needs Cython and setuptools: pip install cython setuptools")
    root = Path(tempfile.mkdtemp(prefix="replay-compiled-"))
    shutil.copytree(ROOT / "lib", root / "lib", ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    build = ("from setuptools import setup; from Cython.Build import cythonize; "
             f"setup(ext_modules=cythonize({list(COMPILED)!r}, quiet=True, compiler_directives="
             "{'language_level': 3, 'annotation_typing': False, 'binding': True}), "
             "script_args=['build_ext', '--inplace'])")
    print(f"compiling {len(COMPILED)} modules with Cython into {root} ...", flush=True)
    subprocess.run([sys.executable, "-c", build], cwd=root, check=True, capture_output=True)
    return root


def compare_compiled(path: Path, rounds: int) -> None:
    """The warm proposal pass (pass_case) with the engine as it is and compiled, alternated, each in its
    own process: seconds side by side and their ratio."""
    root = compiled_copy()
    try:
        print(f"{'round':>5}{'as it is s':>12}{'compiled s':>12}{'ratio':>7}   (each the faster of 2 warm passes)")
        for k in range(rounds):
            pure = in_process("--pass", str(path), "2", str(ROOT))
            built = in_process("--pass", str(path), "2", str(root))
            assert built["compiled"] and not pure["compiled"]
            a, b = min(pure["again"]), min(built["again"])
            print(f"{k + 1:>5}{a:>12.2f}{b:>12.2f}{b / a:>7.2f}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def compare_collector(path: Path, rounds: int, skip_search: bool) -> None:
    """The kept what-ifs with the collector running (as before lib.planning.replay.collector) and paused,
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
    ap.add_argument("--phases", type=int, metavar="ROUNDS", default=0,
                    help="only split the next what-if into its parts, and time its pass ROUNDS more times warm")
    ap.add_argument("--compiled", type=int, metavar="ROUNDS", default=0,
                    help="only compare the warm pass as it is and compiled by Cython, alternated, ROUNDS times")
    ap.add_argument("--phases-of", metavar="LEDGER", help=argparse.SUPPRESS)
    ap.add_argument("--pass", dest="pass_", nargs=3, metavar=("LEDGER", "ROUNDS", "LIB_ROOT"), help=argparse.SUPPRESS)
    ap.add_argument("--one", nargs=2, metavar=("LEDGER", "REQUESTS"), help=argparse.SUPPRESS)
    ap.add_argument("--what-if", nargs=2, metavar=("LEDGER", "CASE"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one_case(Path(args.one[0]), int(args.one[1]) or None)))
        return
    if args.what_if:
        print(json.dumps(what_if_case(Path(args.what_if[0]), args.what_if[1])))
        return
    if args.phases_of:
        print(json.dumps(phases_case(Path(args.phases_of))))
        return
    if args.pass_:
        print(json.dumps(pass_case(Path(args.pass_[0]), int(args.pass_[1]), Path(args.pass_[2]))))
        return
    if args.phases:
        show_phases(ledger_for(1_000_000, args.out), args.phases)
        return
    if args.compiled:
        compare_compiled(ledger_for(1_000_000, args.out), args.compiled)
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
