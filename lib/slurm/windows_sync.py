"""The ledger's cluster windows kept in step with Slurm's reservations, and the `[pools]` tables
proposed from sinfo.

- `WindowWatch`: what the warm gate server holds (lib.slurm.live): the windows Slurm gave at the
  last successful read; when Slurm cannot answer (scontrol missing, failing, slow) the last known
  ones stay, and the failure is logged once (and once more when it recovers), never per decision.
- `sync_windows(db)`: one read written into the ledger (`python -m lib slurm windows --sync`, a
  cron job where no gate server runs).
- `pools_proposal(teams_file)`: the `[pools]` TOML proposed from sinfo, with the teams
  file's preemptible partitions (`python -m lib teams --from-slurm`); nothing is written.
"""
from __future__ import annotations

import time
from typing import Callable, Iterable

from lib.gate.contracts import CapacityWindow
from lib.gate.terms import utcnow
from lib.ledger.audit import Who, command_line
from lib.ledger.cluster_windows import preemptible_partitions, replace_windows
from lib.ledger.connection import check_ledger_file, default_timeout_s, open_ledger
from lib.ledger.teams_file import load_teams_file
from lib.ledger.writer import write_ledger
from lib.slurm.reservations import (SCONTROL_TIMEOUT_S, SlurmClient, SlurmUnavailable, cluster_windows, pools_toml,
                                    read_nodes)

SOURCE = "scontrol"
DEFAULT_INTERVAL_S = 30.0


class WindowWatch:
    """The cluster's windows as last read from Slurm (`windows`, None before the first good read),
    re-read by `refresh` (the gate server calls it every `interval_s` seconds, off the decision
    path; `stop` ends them). `log(text)` hears each failure once until a read succeeds again, and
    each problem line in Slurm's output once."""

    def __init__(self, log: Callable[[str], None], *, interval_s: float = DEFAULT_INTERVAL_S,
                 timeout_s: float = SCONTROL_TIMEOUT_S):
        self.log, self.interval_s, self.timeout_s = log, interval_s, timeout_s
        self.client = SlurmClient(timeout_s)
        self.windows: list[CapacityWindow] | None = None
        self.read_at: float | None = None     # time.monotonic() of the last good read
        self.failing: str | None = None
        self._told: set[str] = set()

    def refresh(self, preemptible: Iterable[str]) -> list[CapacityWindow] | None:
        """Read the windows now; the new list, or None when Slurm did not answer (the last known
        ones stay in `windows`)."""
        try:
            windows, problems = cluster_windows(preemptible, client=self.client)
        except SlurmUnavailable as exc:
            if self.client.stopped:
                return None
            if self.failing is None:
                kept = "none known yet" if self.windows is None else f"{len(self.windows)} known"
                self.log(f"cannot read the cluster's reservations ({exc}); the gate keeps the last known "
                         f"windows ({kept}) and tries again every {self.interval_s:g} s")
            self.failing = str(exc)
            return None
        if self.failing is not None:
            self.log(f"recovered: the cluster's reservations read again ({len(windows)} window(s))")
            self.failing = None
        for problem in problems:
            if problem not in self._told:
                self.log(f"cluster reservations: {problem}")
        self._told = set(problems)
        self.windows, self.read_at = windows, time.monotonic()
        return windows

    def stop(self) -> None:
        """No more reads; a command running now is killed (the gate server is closing)."""
        self.client.stop()


def server_who() -> Who:
    """The audit's writer for the gate server's own syncs: its OS user, origin "slurm"."""
    return {**command_line(), "origin": "slurm"}


def read_cluster_windows(db=None, *, timeout_s: float = SCONTROL_TIMEOUT_S, ledger_timeout_s: float | None = None
                         ) -> tuple[list[CapacityWindow], list[str]]:
    """Slurm's reservations now as windows (pools from the ledger's preemptible partitions; from
    data/teams.toml when there is no ledger yet), and the lines that could not be read.
    SlurmUnavailable when Slurm does not answer."""
    if check_ledger_file(db):
        with open_ledger(db, read_only=True, timeout_s=ledger_timeout_s) as con:
            preemptible = preemptible_partitions(con)
    else:
        preemptible = teams_file_preemptible(None)
    return cluster_windows(preemptible, timeout_s=timeout_s)


def sync_windows(db=None, windows: list[CapacityWindow] | None = None, *, who: Who | None = None,
                 timeout_s: float | None = None) -> bool:
    """Write `windows` (read from Slurm when None) as the ledger's cluster windows, through the
    writers' turn; True when they changed."""
    if windows is None:
        windows, _ = read_cluster_windows(db, ledger_timeout_s=timeout_s)
    with write_ledger(db, default_timeout_s() if timeout_s is None else timeout_s) as con:
        return replace_windows(con, windows, source=SOURCE, who=who)


def teams_file_preemptible(path) -> set[str]:
    """Every partition a team of the teams file (default data/teams.toml) calls preemptible."""
    return {p for t in load_teams_file(path)["teams"] for p in t["preemptible_partitions"]}


def pools_proposal(teams_file=None, *, timeout_s: float = SCONTROL_TIMEOUT_S) -> tuple[str, list[str]]:
    """The `[pools]` TOML proposed from sinfo (partitions typed by the teams file's preemptible
    ones), and sinfo's lines that could not be read. SlurmUnavailable when sinfo does not answer."""
    nodes, problems = read_nodes(timeout_s)
    return pools_toml(nodes, teams_file_preemptible(teams_file), read_at=utcnow()), problems
