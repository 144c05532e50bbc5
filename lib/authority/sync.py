"""A cluster's ledger and the authority brought into agreement (`python -m lib authority sync`, and
the gate server when the authority is back after an outage).

- holds: every reservation this ledger holds that the authority lacks is added (those admitted
  within the offline share while it was unreachable, or held before the cluster named an
  authority); every hold of this cluster that the ledger no longer holds (its run ended, or no
  decision reached the ledger: a process that died between the two commits) and older than
  `grace_s` is released as "reconciled".
- spend: the spend of every run of this ledger that ended in the month of `now` (or the month
  before) is recorded, once per run, so imported history counts too.

Each hold and spend is keyed (cluster, run ID): running it twice changes nothing the second time.
"""
from __future__ import annotations

from datetime import datetime, timedelta

from lib.authority.facts import BUMP_SQL, HOLD_SQL, Authority
from lib.authority.settings import SYNC_GRACE_S
from lib.gate.terms import month_start
from lib.ledger.connection import open_ledger
from lib.ledger.state import held_reservations


def sync_ledger(authority: Authority, db=None, *, now: datetime, grace_s: float = SYNC_GRACE_S,
                timeout_s: float = 10.0) -> dict:
    """Bring the authority in line with the ledger `db` of `authority.cluster` (see the module docstring);
    counts of what changed."""
    since = month_start(month_start(now) - timedelta(days=1))
    with open_ledger(db, read_only=True, timeout_s=timeout_s) as con:
        held = held_reservations(con, now)
        ended = con.execute(
            "SELECT run_id, team, ended_at, actual_gpu_hours FROM runs WHERE ended_at >= ? AND ended_at <= ? "
            "AND actual_gpu_hours IS NOT NULL", [since, now]).fetchall()
    counts = {"holds_added": 0, "holds_released": 0, "spend_recorded": 0}
    with authority.transaction() as pg:
        theirs = {r[0]: r[1] for r in pg.execute(
            "SELECT run_id, held_at FROM training_gate.holds WHERE cluster = %s AND released_at IS NULL",
            [authority.cluster]).fetchall()}
        teams = set()
        for r in held:
            if r["run_id"] not in theirs:
                pg.execute(HOLD_SQL, [authority.cluster, r["run_id"], r["team"], r["kind"], r["gpus"],
                                      r["reserved_gpu_hours"], r["reserved_from"], r["reserved_until"], now, True])
                counts["holds_added"] += 1
                teams.add(r["team"])
        ours = {r["run_id"] for r in held}
        stale = [run_id for run_id, at in theirs.items()
                 if run_id not in ours and at <= now - timedelta(seconds=grace_s)]
        if stale:
            for (team,) in pg.execute(
                    "UPDATE training_gate.holds SET released_at = %s, released_why = 'reconciled' "
                    "WHERE cluster = %s AND run_id = ANY(%s) AND released_at IS NULL RETURNING team",
                    [now, authority.cluster, stale]).fetchall():
                counts["holds_released"] += 1
                teams.add(team)
        for run_id, team, ended_at, hours in ended:
            row = pg.execute(
                "INSERT INTO training_gate.spend (cluster, run_id, team, ended_at, gpu_hours, recorded_at) "
                "VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (cluster, run_id) DO UPDATE SET "
                "team = excluded.team, ended_at = excluded.ended_at, gpu_hours = excluded.gpu_hours, "
                "recorded_at = excluded.recorded_at WHERE (training_gate.spend.team, training_gate.spend.ended_at, "
                "training_gate.spend.gpu_hours) IS DISTINCT FROM (excluded.team, excluded.ended_at, "
                "excluded.gpu_hours) RETURNING 1",
                [authority.cluster, run_id, team, ended_at, float(hours), now]).fetchone()
            if row is not None:
                counts["spend_recorded"] += 1
                teams.add(team)
        for team in sorted(teams):
            pg.execute(BUMP_SQL, [team])
    return counts
