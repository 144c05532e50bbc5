"""Team colours: the old palette hash against the perceptual assignment (lib.dashboard.figure_kit), side
by side, for data/teams.toml's 8 set colours plus a number of teams without one.

    python bench/bench_team_colours.py [--new 0 4 12 24] [--repeat 5]

For each count of new teams: the time of one `team_colours` call cold (its caches cleared: what the
first figure of a process pays) and cached (every later figure), and the least CIEDE2000 distance
between any two teams' colours, which a planner sees as how alike two legend entries can look.
Old: a SHA-256 of the name picks one of 14 palette colours (the rule before the perceptual one).
"""
from __future__ import annotations

import argparse
import hashlib
import itertools
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lib.dashboard import figure_kit  # noqa: E402

SET_COLOURS = {"nlp-research": "#332288", "vision": "#CC6677", "speech": "#44AA99", "safety": "#999933",
               "ads": "#882255", "search": "#88CCEE", "ranking": "#117733", "robotics": "#AA4499"}
OLD_PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
               "#7f7f7f", "#bcbd22", "#17becf", "#393b79", "#637939", "#8c6d31", "#843c39"]


def old_team_colours(teams, explicit):
    def hashed(team):
        digest = hashlib.sha256(str(team).encode("utf-8")).digest()
        return OLD_PALETTE[int.from_bytes(digest[:8], "big") % len(OLD_PALETTE)]
    return {t: explicit.get(t) or hashed(t) for t in sorted(set(teams))}


def clear() -> None:
    figure_kit._assigned.cache_clear()
    figure_kit._candidates.cache_clear()
    figure_kit.lab.cache_clear()


def timed(fn, repeat: int, cold: bool) -> float:
    times = []
    for _ in range(repeat):
        if cold:
            clear()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def least_distance(colours: dict) -> float:
    return min(figure_kit.colour_distance(a, b) for a, b in itertools.combinations(colours.values(), 2))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--new", type=int, nargs="+", default=[0, 4, 12, 24])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    print(f"{'new teams':>9} | {'old cold ms':>11} {'new cold ms':>11} {'new cached ms':>13} | "
          f"{'old least ΔE00':>14} {'new least ΔE00':>14}")
    for n in args.new:
        teams = [*SET_COLOURS, *(f"new-team-{i}" for i in range(n))]
        old = timed(lambda: old_team_colours(teams, SET_COLOURS), args.repeat, cold=False)
        cold = timed(lambda: figure_kit.team_colours(teams, SET_COLOURS), args.repeat, cold=True)
        figure_kit.team_colours(teams, SET_COLOURS)
        cached = timed(lambda: figure_kit.team_colours(teams, SET_COLOURS), args.repeat, cold=False)
        print(f"{n:>9} | {old * 1e3:>11.3f} {cold * 1e3:>11.1f} {cached * 1e3:>13.3f} | "
              f"{least_distance(old_team_colours(teams, SET_COLOURS)):>14.1f} "
              f"{least_distance(figure_kit.team_colours(teams, SET_COLOURS)):>14.1f}")
    print(f"new rule: at least {figure_kit.MIN_DISTANCE:g} while the readable colours have room; "
          f"the set colours' own least distance is {least_distance(SET_COLOURS):.1f}")


if __name__ == "__main__":
    main()
