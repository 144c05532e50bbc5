"""The command line's forward plan: `python -m lib plan` prints the queue as the gate would serve it from
now on (each waiting request's planned start, what is ahead of it, the codes `check` gives it now), the
calendar of free accelerators per team, capacity type and day, the pools and the expired requests, as
one JSON object (lib.ledger.plan). Reads only."""
from __future__ import annotations

import argparse

from lib.cli.args import TIME_RANGE, timestamp
from lib.cli.output import EXIT_OK, dump_json, say
from lib.planning.plan.data import MAX_PLAN_DAYS as MAX_DAYS


def plan_days(text):
    """--days of a plan: 1 .. MAX_DAYS."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if not 1 <= v <= MAX_DAYS:
        raise argparse.ArgumentTypeError(f"must be from 1 to {MAX_DAYS} days, got {text!r}")
    return v


def cmd_plan(args) -> int:
    from lib.ledger.plan import plan_ledger  # here: it brings numpy (calibration)
    plan = plan_ledger(args.db, as_of=args.as_of, days=args.days, timeout_s=args.timeout)
    out = {"as_of": plan["as_of"], "horizon_days": plan["days"], "horizon_end": plan["horizon_end"],
           "serve_order": plan["serve_order"], "queue": plan["queue"], "days": plan["calendar"],
           "pools": plan["pools"], "expired": plan["expired"]}
    print(dump_json(out))
    planned = sum(r["planned_start"] is not None for r in plan["queue"])
    say(f"plan: {len(plan['queue']):,} waiting request(s), {planned:,} planned to start within {plan['days']} "
        f"day(s) of {plan['as_of']:%Y-%m-%d %H:%M}; {plan['expired']['count']:,} expired; "
        f"{plan['decisions']:,} decisions; nothing written")
    return EXIT_OK


def add_plan_parser(sub, common) -> None:
    s = sub.add_parser("plan", parents=[common],
                       help="the queue, calendar and pools as the gate would serve them from now on, as JSON")
    s.add_argument("--days", type=plan_days, default=14, help=f"days ahead (default 14, at most {MAX_DAYS})")
    s.add_argument("--as-of", type=timestamp, default=None,
                   help=f"plan from this ISO-8601 time ({TIME_RANGE}) instead of now; not before the ledger's "
                        "first run")


PLAN_COMMANDS = {"plan": cmd_plan}
