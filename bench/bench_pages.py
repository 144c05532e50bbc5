"""Dashboard page render times on a 10 000-run and a 1 000 000-run demo ledger, side by side.

    python bench/bench_pages.py [--runs 10000 1000000] [--repeat 3] [--out bench/out] [--pages reservations ...]

For each ledger (built once into --out with lib.ledger.demo.build_demo when missing) and each page:
- first render: caches cleared, then the whole app run (entry script + sidebar + page) under
  Streamlit's AppTest, i.e. every query of the page and its figures (Reservations: its capacity
  calendar and the queue of every waiting request included);
- cached rerender: the same page run again (query results and figures cached);
- for Reservations also "reservations, other month": picking last month in the budget's month
  picker (a new query for that month, the rest of the page as before).
Times are the median of --repeat runs (seconds). Also printed: the cost of one read-only open of
the ledger and of one what-if check (lib.ledger.service.check_request). Targets: first < 2 s, cached < 0.3 s.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("GATE_DEMO", "0")

PAGES = ["overview", "reservations", "idle_capacity", "forecast", "estimate_accuracy", "what_if",
         "recovery_planner", "upload", "stops_promotion", "policy_replay"]
FIRST_TARGET_S, CACHED_TARGET_S = 2.0, 0.3
OTHER_MONTH = "reservations, other month"   # row: picking last month in the budget month picker


def ledger_for(runs: int, out: Path) -> Path:
    from lib.ledger.demo import build_demo
    path = out / (f"demo_{runs // 1000}k.duckdb" if runs < 1_000_000 else f"demo_{runs // 1_000_000}m.duckdb")
    if not path.exists():
        t = time.perf_counter()
        print(f"building {runs:,}-run demo ledger at {path} ...", flush=True)
        build_demo(path, runs=runs)
        print(f"  built in {time.perf_counter() - t:.1f} s", flush=True)
    return path


def time_pages(path: Path, repeat: int, pages: list[str] = PAGES) -> dict:
    """{page: (first, cached)} median seconds, and {OTHER_MONTH: (picked, None)} for Reservations."""
    import datetime as dt

    import streamlit as st
    from streamlit.testing.v1 import AppTest

    from tests.fixtures_app import page_script

    os.environ["GATE_DB"] = str(path)
    results = {}
    for page in pages:
        firsts, cached, picked = [], [], []
        for _ in range(repeat):
            st.cache_data.clear()
            st.cache_resource.clear()
            at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
            at.run()                                  # lands on the default page
            st.cache_data.clear()
            st.cache_resource.clear()
            at.switch_page(page_script(page))
            t = time.perf_counter()
            at.run()
            firsts.append(time.perf_counter() - t)
            if at.exception:
                raise RuntimeError(f"{page}: {at.exception[0].value}")
            t = time.perf_counter()
            at.run()
            cached.append(time.perf_counter() - t)
            if page == "reservations":
                picker = at.selectbox(key="res_budget_month")
                last_month = (picker.value - dt.timedelta(days=1)).replace(day=1)
                t = time.perf_counter()
                picker.set_value(last_month).run()
                picked.append(time.perf_counter() - t)
                if at.exception:
                    raise RuntimeError(f"{page}, {last_month:%B %Y}: {at.exception[0].value}")
        results[page] = (statistics.median(firsts), statistics.median(cached))
        if picked:
            results[OTHER_MONTH] = (statistics.median(picked), None)
    return results


def open_cost_s(path: Path, n: int = 20) -> float:
    from lib.ledger.connection import open_ledger
    t = time.perf_counter()
    for _ in range(n):
        with open_ledger(path, read_only=True) as con:
            con.execute("SELECT 1").fetchall()
    return (time.perf_counter() - t) / n


def check_cost_s(path: Path) -> float:
    from lib.ledger.service import check_request
    req = {"run_id": "bench-whatif", "team": "vision", "kind": "exploratory", "gpus": 4, "gpu_mem_gb": 40,
           "max_runtime_hours": 12, "budget_gpu_hours": 100, "checkpoint_supported": True,
           "expected_interruptions": 0, "data_snapshot": "common-crawl-2025-04", "capacity": "stable",
           "estimated_gpu_hours": 40}
    t = time.perf_counter()
    check_request(req, db=path)
    return time.perf_counter() - t


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, nargs="+", default=[10_000, 1_000_000])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "out",
                    help="folder of the demo ledgers (built there when missing)")
    ap.add_argument("--pages", nargs="+", choices=PAGES, default=PAGES, help="the pages to time (default: all)")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)

    # warm the process up (imports of streamlit, plotly, pandas) so the first page is not charged for them
    ledgers = {n: ledger_for(n, args.out) for n in args.runs}
    time_pages(ledgers[args.runs[0]], 1, args.pages)

    table, extra = {}, {}
    for n, path in ledgers.items():
        print(f"timing {n:,} runs ...", flush=True)
        table[n] = time_pages(path, args.repeat, args.pages)
        extra[n] = (open_cost_s(path), check_cost_s(path))

    cols = [f"{n:,} runs" for n in args.runs]
    head = f"{'page':<28}" + "".join(f"{c + ' first':>24}{c + ' cached':>24}" for c in cols)
    print()
    print(head)
    print("-" * len(head))
    misses = []
    for page in args.pages:
        line = f"{page:<28}"
        for n in args.runs:
            first, cached = table[n][page]
            line += f"{first:>23.3f}s{cached:>23.3f}s"
            if n == max(args.runs) and (first >= FIRST_TARGET_S or cached >= CACHED_TARGET_S):
                misses.append(f"{page} ({n:,} runs): first {first:.2f} s, cached {cached:.2f} s")
        print(line)
    if "reservations" in args.pages:
        line = f"{OTHER_MONTH:<28}"
        for n in args.runs:
            picked = table[n][OTHER_MONTH][0]
            line += f"{picked:>23.3f}s{'':>24}"
            if n == max(args.runs) and picked >= FIRST_TARGET_S:
                misses.append(f"{OTHER_MONTH} ({n:,} runs): {picked:.2f} s")
        print(line)
    print("-" * len(head))
    print(f"{'read-only open':<28}" + "".join(f"{extra[n][0]:>23.3f}s{'':>24}" for n in args.runs))
    print(f"{'what-if check':<28}" + "".join(f"{extra[n][1]:>23.3f}s{'':>24}" for n in args.runs))
    print(f"\ntargets on the largest ledger: first render < {FIRST_TARGET_S} s, cached rerender < {CACHED_TARGET_S} s")
    print("all pages meet them" if not misses else "missed: " + "; ".join(misses))
    return 0


if __name__ == "__main__":
    sys.exit(main())
