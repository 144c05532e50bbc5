"""The command line's `authority` commands, for a cluster that shares its teams' budgets with others
through one PostgreSQL database (lib.authority): `init` (create the schema, load the teams file's
policies), `status` (what the authority holds now) and `sync` (this ledger and the authority brought
into agreement). The authority is the one `$GATE_AUTHORITY` / `$GATE_CLUSTER` (or the teams file's
`[authority]`) names; its URL is shown with its password as ***.
"""
from __future__ import annotations

from lib.authority.settings import SYNC_GRACE_S, configured_authority
from lib.authority.store import init_schema, status
from lib.cli.args import nonneg_float
from lib.cli.output import EXIT_OK, dump_json, say
from lib.gate.terms import InputError, utcnow
from lib.ledger.teams_file import load_teams_file
from lib.slurm.journal import drain_left_over_journal


def _authority(args):
    authority = configured_authority(teams_file=getattr(args, "teams_file", None))
    if authority is None:
        raise InputError("no authority named: set GATE_AUTHORITY=postgresql://ROLE@HOST/DATABASE and "
                         "GATE_CLUSTER=NAME (or an [authority] table in the teams file)")
    return authority


def cmd_authority(args) -> int:
    authority = _authority(args)
    now = utcnow()
    if args.action == "init":
        teams = load_teams_file(args.teams_file)["teams"]
        counts = init_schema(authority.url, teams, now)
        print(dump_json(counts))
        say(f"authority init: schema {'created' if counts['created'] else 'present'}; teams inserted "
            f"{counts['teams_inserted']}, updated {counts['teams_updated']}, unchanged {counts['teams_unchanged']}")
    elif args.action == "status":
        out = status(authority.url, now)
        print(dump_json(out))
        say(f"authority status: schema version {out['schema_version']}, {len(out['teams'])} team(s)")
    else:
        from lib.authority.sync import sync_ledger  # here: it brings numpy (the ledger's calibration)
        # a stopped gate server's journal first, so its decisions count
        drain_left_over_journal(args.db, timeout_s=args.timeout)
        counts = sync_ledger(authority, args.db, now=now, grace_s=args.grace_s, timeout_s=args.timeout)
        authority.close()
        print(dump_json(counts))
        say(f"authority sync ({authority.cluster}): holds added {counts['holds_added']}, released "
            f"{counts['holds_released']}; spend recorded for {counts['spend_recorded']} run(s)")
    return EXIT_OK


def add_authority_parser(sub, common) -> None:
    s = sub.add_parser("authority", parents=[common],
                       help="the authority several clusters share ($GATE_AUTHORITY): init, status, sync")
    s.add_argument("action", choices=("init", "status", "sync"))
    s.add_argument("--teams-file", default=None, help="teams file whose policies init loads (default data/teams.toml)")
    s.add_argument("--grace-s", type=nonneg_float, default=SYNC_GRACE_S,
                   help=f"sync: release holds the ledger lacks only once they are this old (default {SYNC_GRACE_S:g} s)")


AUTHORITY_COMMANDS = {"authority": cmd_authority}
