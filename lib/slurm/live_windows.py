"""The cluster's windows in the warm gate server (lib.slurm.live.LiveGate, which takes this class in):
its Slurm reservations, read from Slurm every `windows_interval_s` seconds by a thread off the
decisions' lock (lib.slurm.windows_sync.WindowWatch), and a set that changed written into the ledger
as a batch is (the ledger's copy until Slurm's first answer)."""
from __future__ import annotations

from datetime import datetime

from lib.gate.contracts import CapacityWindow
from lib.ledger.cluster_windows import replace_windows
from lib.ledger.writer import write_ledger
from lib.slurm.windows_sync import SOURCE, server_who


class LiveWindows:
    """The windows part of LiveGate: it reads `window_watch`, `ledger_windows`, `policies`, and writes
    through the gate's ledger lock and change stamp."""

    def capacity_windows(self, now: datetime) -> list[CapacityWindow]:
        """The cluster's windows not yet ended at `now`: Slurm's at its last answer, else the ledger's."""
        known = self.window_watch.windows if self.window_watch is not None else None
        return [w for w in (self.ledger_windows if known is None else known) if w["end"] > now]

    def _windows_loop(self) -> None:
        while True:
            try:
                self.sync_windows()
            except Exception as exc:  # a locked ledger, a full disk: the windows in memory still count
                self._trouble("windows", exc)
            else:
                self._recovered("windows", f"the cluster's windows are written into {self.db} again")
            if self._stop.wait(self.window_watch.interval_s):
                return

    def sync_windows(self) -> bool:
        """Read the cluster's windows from Slurm now (the last known stay when it does not answer);
        write a set that changed into the ledger (True), as a batch is written."""
        preemptible = {p for policy in self.policies.values() for p in policy.get("preemptible_partitions") or ()}
        windows = self.window_watch.refresh(preemptible)
        if windows is None or windows == self._windows_written:
            return False
        with self._ledger_mu:
            if self._stop.is_set():
                return False  # closing: the ledger lock is about to be let go
            with write_ledger(self.db, self.timeout_s) as con:
                if self._stamp() != self._sig:
                    self._stale = True  # someone else wrote since we looked: reload
                changed = replace_windows(con, windows, source=SOURCE, who=server_who())
                con.execute("CHECKPOINT")  # so closing changes nothing after the stamp
                self._sig = self._stamp()
            self.ledger_windows = self._windows_written = windows
        return changed
