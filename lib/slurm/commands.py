"""The command line's Slurm commands (`python -m lib`, parsed in lib.cli): what they read from the
cluster, what they print and their exit codes. `say` prints a line on stderr, `dump` turns a value
into the command line's JSON.

- `slurm windows [--sync]`: the cluster's reservations as capacity windows (JSON on stdout); with
  --sync also written into the ledger (lib.slurm.windows_sync.sync_windows).
- `teams --from-slurm`: the `[capacity]` table proposed from sinfo (TOML on stdout); nothing is
  written: the planner reviews it like code and puts it in data/teams.toml.

Exit 0, or 3 when Slurm does not answer (nothing written then; the ledger keeps the windows it has).
"""
from __future__ import annotations

from typing import Callable

from lib.ledger.connection import upgrade_ledger
from lib.slurm.reservations import SlurmUnavailable
from lib.slurm.windows_sync import SOURCE, capacity_proposal, read_cluster_windows, sync_windows

EXIT_OK, EXIT_FAILURE = 0, 3


def windows_command(db, *, sync: bool, timeout_s: float, say: Callable[[str], None],
                    dump: Callable[[object], str]) -> int:
    """`slurm windows [--sync]` on ledger `db` (pools from its teams' preemptible partitions)."""
    if sync:
        upgrade_ledger(db, timeout_s=timeout_s)  # a ledger of an older schema gains the windows' table
    try:
        windows, problems = read_cluster_windows(db, ledger_timeout_s=timeout_s)
    except SlurmUnavailable as exc:
        say(f"slurm windows: cannot read the cluster's reservations: {exc}; nothing written")
        return EXIT_FAILURE
    for problem in problems:
        say(f"slurm windows: {problem}")
    changed = sync_windows(db, windows, timeout_s=timeout_s) if sync else None
    print(dump(windows))
    say(f"slurm windows: {len(windows)} window(s) from {SOURCE}" + (
        "" if changed is None else "; written into the ledger" if changed else "; the ledger has them already"))
    return EXIT_OK


def capacity_command(teams_file, *, say: Callable[[str], None]) -> int:
    """`teams --from-slurm [--file F]`: the proposed [capacity] TOML, partitions typed by the file's
    preemptible ones."""
    try:
        text, problems = capacity_proposal(teams_file)
    except SlurmUnavailable as exc:
        say(f"teams --from-slurm: cannot read the cluster's nodes: {exc}")
        return EXIT_FAILURE
    for problem in problems:
        say(f"teams --from-slurm: {problem}")
    print(text, end="")
    say("teams --from-slurm: proposed [capacity] printed; nothing written (review it, then add it to the teams file)")
    return EXIT_OK
