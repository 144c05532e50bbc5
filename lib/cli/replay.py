"""The command line's policy replay: `python -m lib replay` decides a past window's recorded requests again
under a proposed teams file and/or other pool sizes (`--pool TYPE=N`, a capacity what-if), beside the
baseline (the ledger's own policy and pools, replayed by the same engine) and the decisions as recorded,
as one JSON object (lib.ledger.replay). Reads only."""
from __future__ import annotations

import argparse

from lib.cli.args import TIME_RANGE, level, timestamp, window_end
from lib.cli.output import EXIT_OK, dump_json, progress_for, say
from lib.gate.terms import CAPACITIES, InputError
from lib.ledger.teams_file import load_teams_file
from lib.gate.terms import INT_MAX


def pool_size(text):
    """--pool TYPE=N: a capacity type and its accelerators (a whole number, 0 .. INT_MAX)."""
    name, sep, count = text.partition("=")
    name = name.strip()
    if not sep:
        raise argparse.ArgumentTypeError(f"expected TYPE=N (e.g. stable=256), got {text!r}")
    if name not in CAPACITIES:
        raise argparse.ArgumentTypeError(f"unknown capacity type {name!r} in {text!r} (known: {', '.join(CAPACITIES)})")
    try:
        n = int(count.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"N must be a whole number of accelerators, got {text!r}") from None
    if not 0 <= n <= INT_MAX:
        raise argparse.ArgumentTypeError(f"N must be from 0 to {INT_MAX} accelerators, got {text!r}")
    return name, n


def pools_given(pairs) -> dict[str, int] | None:
    """The --pool options as capacity type -> accelerators; InputError when a type is given twice."""
    pools: dict[str, int] = {}
    for name, n in pairs or ():
        if name in pools:
            raise InputError(f"--pool {name} given twice ({name}={pools[name]} and {name}={n})")
        pools[name] = n
    return pools or None


def cmd_replay(args) -> int:
    """The window's recorded requests decided again under the proposal, as JSON: counts recorded,
    baseline and proposed, agreement, excluded requests and why, per-team results. Reads only."""
    from lib.ledger.replay import replay_ledger  # here: it brings numpy (calibration)
    pools = pools_given(args.pool)
    proposed = load_teams_file(args.policy)["teams"] if args.policy else []
    levels = {t["team"]: args.calibration_level for t in proposed} if args.calibration_level else None
    result = replay_ledger(args.db, proposed, start=args.start, end=args.end, levels=levels, pools=pools,
                           refresh=args.calibration_refresh, progress=progress_for(args), timeout_s=args.timeout)
    print(dump_json(result))
    say(f"replay: {result['requests']:,} requests, {result['excluded']['count']:,} excluded; baseline "
        f"{result['baseline']}, proposed {result['proposed']} (pools {result['pools']['proposed'] or 'none'}); "
        f"agreement with the record: baseline {result['baseline_agreement']}, proposed {result['agreement']}; "
        "nothing written")
    return EXIT_OK


def add_replay_parser(sub, common) -> None:
    s = sub.add_parser("replay", parents=[common],
                       help="replay a window's recorded requests under a proposed teams file or pool sizes, "
                            "beside the current policy, as JSON")
    s.add_argument("--policy", default=None,
                   help="the proposed policy, a regular file in the teams.toml format (default: the ledger's)")
    s.add_argument("--pool", action="append", type=pool_size, default=None, metavar="TYPE=N",
                   help=f"replay with N accelerators of capacity type TYPE ({', '.join(CAPACITIES)}) instead of "
                        "the ledger's [pools]; repeatable, once per type")
    s.add_argument("--from", dest="start", type=timestamp, default=None,
                   help=f"window start, ISO-8601 date or time ({TIME_RANGE}; default: 4 weeks before --to)")
    s.add_argument("--to", dest="end", type=window_end, default=None,
                   help=f"window end, ISO-8601 time, or a date (through its end) ({TIME_RANGE}; default: now)")
    s.add_argument("--calibration-level", type=level, default=None,
                   help="calibration level of the proposed teams' bounds (default 0.9)")
    s.add_argument("--calibration-refresh", choices=("auto", "exact", "daily"), default="auto",
                   help="recompute calibration whenever its runs change, or once a day (auto: exact up "
                        "to 20,000 requests)")


REPLAY_COMMANDS = {"replay": cmd_replay}
