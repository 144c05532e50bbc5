"""A warm gate server's per-team facts read ahead at its start (lib.slurm.live.LiveGate): the server
listens once its ledger's policies, reservations and journal are loaded, and a thread then reads what
`team_state` reads for every team and kind (month spend, snapshots, calibration, interruption rate),
WARM_CHUNK at a time, each chunk in one turn of the ledger lock, so a decision seldom waits for its
team's first read (nor finds the ledger held by an import then). A team a decision needs first is read
at once by the decision itself (LiveGate.team_facts)."""
from __future__ import annotations

from lib.gate.terms import KINDS, utcnow
from lib.ledger.connection import open_ledger

WARM_CHUNK = 6   # (team, kind) facts read per turn of the ledger lock (~25 ms each)


def warm_facts(live, chunk: int = WARM_CHUNK) -> None:
    """Read `live`'s (a LiveGate) facts of every team and kind not read yet. Facts read before a reload
    land in the dict that reload dropped, never in its fresh one."""
    keys = [(t, k) for t in sorted(live.policies) for k in KINDS]
    for i in range(0, len(keys), chunk):
        if live._stop.is_set():
            return
        try:
            with live._ledger_mu:
                into, now = live._team_facts, utcnow()
                todo = [key for key in keys[i:i + chunk] if key not in into]
                if not todo:
                    continue
                with open_ledger(live.db, read_only=True, timeout_s=live.timeout_s) as con:
                    got = {key: live._read_facts(con, *key, now) for key in todo}
        except Exception:   # a ledger held by an import: those teams are read on first need
            continue
        for key, facts in got.items():
            into.setdefault(key, facts)
