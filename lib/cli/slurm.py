"""The command line's Slurm commands: what the gate reads from the cluster itself.

- `slurm windows [--sync]`: the cluster's reservations as capacity windows (JSON on stdout); with
  --sync also written into the ledger (lib.slurm.windows_sync.sync_windows), a ledger of an older
  schema upgraded first.
- `teams --from-slurm [--file F]` (the flag of lib.cli's `teams`): the `[pools]` table proposed from
  sinfo (TOML on stdout); nothing is written: the planner reviews it like code and puts it in
  data/teams.toml.

Exit 0, or 3 when Slurm does not answer (nothing written then; the ledger keeps the windows it has).
"""
from __future__ import annotations

from lib.cli.output import EXIT_FAILURE, EXIT_OK, dump_json, say
from lib.ledger.connection import upgrade_ledger
from lib.slurm.reservations import SlurmUnavailable
from lib.slurm.windows_sync import SOURCE, pools_proposal, read_cluster_windows, sync_windows


def cmd_slurm(args) -> int:
    """`slurm windows [--sync]` on the ledger (pools from its teams' preemptible partitions)."""
    if args.sync:
        upgrade_ledger(args.db, timeout_s=args.timeout)  # a ledger of an older schema gains the windows' table
    try:
        windows, problems = read_cluster_windows(args.db, ledger_timeout_s=args.timeout)
    except SlurmUnavailable as exc:
        say(f"slurm windows: cannot read the cluster's reservations: {exc}; nothing written")
        return EXIT_FAILURE
    for problem in problems:
        say(f"slurm windows: {problem}")
    changed = sync_windows(args.db, windows, timeout_s=args.timeout) if args.sync else None
    print(dump_json(windows))
    say(f"slurm windows: {len(windows)} window(s) from {SOURCE}" + (
        "" if changed is None else "; written into the ledger" if changed else "; the ledger has them already"))
    return EXIT_OK


def cmd_teams_from_slurm(args) -> int:
    """`teams --from-slurm [--file F]`: the proposed pools (TOML), partitions typed by the file's
    preemptible ones."""
    try:
        text, problems = pools_proposal(args.file)
    except SlurmUnavailable as exc:
        say(f"teams --from-slurm: cannot read the cluster's nodes: {exc}")
        return EXIT_FAILURE
    for problem in problems:
        say(f"teams --from-slurm: {problem}")
    print(text, end="")
    say("teams --from-slurm: the proposed pools printed; nothing written (review them, then add them to the "
        "teams file)")
    return EXIT_OK


def add_slurm_parser(sub, common) -> None:
    s = sub.add_parser("slurm", parents=[common], help="the cluster's reservations as capacity windows (JSON)")
    s.add_argument("what", choices=("windows",))
    s.add_argument("--sync", action="store_true", help="also write them into the ledger")


SLURM_COMMANDS = {"slurm": cmd_slurm}
