"""The command line's line of waiting requests (lib.ledger.queue), for sites without the gate server
(cron):

- `python -m lib queue [--team T] [--now T] [--days N]`: the line as JSON, in the order the gate serves
  it, each request's place and planned start (the forward plan's, the one `plan` prints). Reads only.
- `python -m lib queue admit [--now T]`: records the expiry of every request that waited past its
  team's queue age, then admits every request whose turn has come (actor `gate-queue`); writes
  nothing for a request that does not fit now, so a second run at the same time writes nothing.
- `python -m lib cancel RUN`: takes a waiting request out of the line (actor: the OS user), audited;
  when the access file asks the command line to check (check_command_line), only for a planner or a
  member of the run's team, and a refusal is audited too.
"""
from __future__ import annotations

from datetime import timedelta

from lib.authority.settings import configured_authority
from lib.cli.args import TIME_RANGE, timestamp
from lib.cli.output import EXIT_INVALID, EXIT_OK, dump_json, say
from lib.cli.plan import plan_days
from lib.gate.access import access_path, command_line_access, may, resolve
from lib.gate.request import run_id_problem
from lib.gate.terms import InputError, ceil_to, checked_submit_time, naive_utc
from lib.ledger.audit import command_line, os_user, unix_groups
from lib.ledger.decider_lock import ServerBusy
from lib.slurm.journal import drain_left_over_journal

MINUTE = timedelta(minutes=1)


def cmd_queue(args) -> int:
    if args.action == "admit":
        return cmd_queue_admit(args)
    from lib.ledger.queue import queue_line  # here: the plan brings numpy (calibration)
    out = queue_line(args.db, now=args.now, days=args.days, team=args.team, timeout_s=args.timeout)
    print(dump_json(out))
    rows = out["queue"]
    first = rows[0] if rows else None
    if first is None:
        nxt = "nobody waits" + (f" in team {args.team}" if args.team else "")
    elif first["planned_start"] is None:
        nxt = f"first {first['run_id']}, not planned within {args.days} day(s)"
    else:  # to the minute, rounded up: never earlier than the moment it fits
        start = ceil_to(naive_utc(first["planned_start"]), MINUTE)
        nxt = f"first {first['run_id']}, planned to start {start:%Y-%m-%d %H:%M} UTC"
    shown = f"{len(rows):,} of {out['waiting']:,}" if args.team else f"{out['waiting']:,}"
    say(f"queue: {shown} waiting request(s) at {out['as_of'][:16]}; {nxt}; {out['expired']:,} expired; "
        "nothing written")
    return EXIT_OK


def cmd_queue_admit(args) -> int:
    from lib.ledger.queue import admit_turns  # here: the plan brings numpy (calibration)
    if args.team is not None:
        raise InputError("queue admit serves the whole line in its order: --team is for listing only")
    now = checked_submit_time(args.now)  # a recorded decision is dated now, give or take minutes
    drain_left_over_journal(args.db, timeout_s=args.timeout)  # what a stopped gate server decided comes first
    out = admit_turns(args.db, now=now, timeout_s=args.timeout, authority=configured_authority())
    print(dump_json(out))
    wrote = len(out["admitted"]) + len(out["expired"])
    say(f"queue admit: admitted {len(out['admitted']):,} ({', '.join(r['run_id'] for r in out['admitted']) or 'none'}), "
        f"{len(out['not_admitted']):,} due but not fitting now (nothing written for them), "
        f"{len(out['expired']):,} expired; " + (f"{wrote:,} decision(s) recorded" if wrote else "nothing written"))
    return EXIT_OK


def cmd_cancel(args) -> int:
    from lib.ledger.queue import cancel_waiting, record_refused_cancel, waiting_team  # here: as in cmd_queue
    run_id = args.run_id
    problem = run_id_problem(run_id)
    if problem is not None:
        raise InputError(f"run ID {run_id!r}: {problem}")
    try:  # what a stopped gate server decided comes first (it may have admitted the run)
        drain_left_over_journal(args.db, timeout_s=args.timeout)
    except ServerBusy:  # a running server moves its own journal into the ledger
        pass
    team = waiting_team(args.db, run_id, timeout_s=args.timeout)
    who = command_line()
    refused = cancel_refusal(team)
    if refused:
        record_refused_cancel(args.db, run_id, who, refused, timeout_s=args.timeout)
        say(f"cancel: refused: {refused} (the refusal is audited)")
        return EXIT_INVALID
    out = cancel_waiting(run_id, who, db=args.db, timeout_s=args.timeout)
    print(dump_json(out))
    say(f"cancel: {run_id} of team {out['team']} left the queue (waiting since {out['waiting_since']}); "
        f"recorded as cancelled by {who['actor']}")
    return EXIT_OK


def cancel_refusal(team: str | None, path=None) -> str | None:
    """Why the OS user may not cancel a request of `team` (None: they may). Checked only when the
    access file asks the command line to check (as for submit): then a planner or a member of the
    team may. A guard against mistakes, as submit's is, not a boundary."""
    path = access_path(path)
    access = command_line_access(path)
    if access is None:
        return None
    user = os_user()
    grant = resolve(access, user=user, groups=unix_groups(user))
    if may(grant, "cancel", team):
        return None
    return (f"user {user} may not cancel a request of team {team!r}: the access file {path} makes {user} "
            + (f"a member of {', '.join(grant['teams'])}" if grant["teams"] else "no member of any team")
            + ", and no planner")


def add_queue_parsers(sub, common) -> None:
    s = sub.add_parser("queue", parents=[common],
                       help="the line of waiting requests in serve order (or `queue admit`: admit those whose "
                            "turn has come, expire those that waited too long)")
    s.add_argument("action", nargs="?", choices=("admit",), default=None,
                   help="admit: decide again and admit every request whose turn has come (writes only admits "
                        "and expiries)")
    s.add_argument("--team", default=None, help="list only this team's requests (their places stay the line's)")
    s.add_argument("--now", type=timestamp, default=None,
                   help=f"as of this ISO-8601 time ({TIME_RANGE}) instead of now; for admit, within minutes of "
                        "the present (a recorded decision is dated now)")
    s.add_argument("--days", type=plan_days, default=14, help="days the plan looks ahead for planned starts "
                                                              "(default 14)")

    s = sub.add_parser("cancel", parents=[common],
                       help="take a waiting request out of the queue (recorded and audited)")
    s.add_argument("run_id", help="the run ID of the waiting request")


QUEUE_COMMANDS = {"queue": cmd_queue, "cancel": cmd_cancel}
