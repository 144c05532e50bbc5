"""The forward plan's reads from the ledger: the queue of waiting requests (`read_queue`) and everything
else the plan reads (`read_plan_inputs`), all as the gate would read them at `as_of`. Below the
deciders (lib.ledger.deciding reads the line through it before an in-process admit).

The queue: every run ID whose latest decision of the last QUEUE_DAYS days is a deferral that waiting
cures (every reason's: lib.gate.capacity.cured_by_waiting) and that has not been booked since
(reserved, started or ended). Such a request waits since its first deferral in
those days (after the queue's own rejection that ended an earlier wait of the same run ID: cancelled,
or expired), and expires `queue_max_age_days` (its team's policy) after it: an expired request is
counted and listed apart, never planned, whether or not `python -m lib queue admit` has recorded its
expiry yet (lib.ledger.queue). A request deferred longer ago and never decided again has left the
queue, so the queue costs the last QUEUE_DAYS of decisions, not the whole history.
"""
from __future__ import annotations

import json
from datetime import datetime, timedelta

from lib.gate.capacity import LINE_CURES, MONTH_CURES, WAIT_CURES
from lib.gate.reasons import QUEUE_LEFT_CODES
from lib.gate.terms import KINDS, month_start
from lib.ledger.calibration_scopes import ScopeRows, calibrations
from lib.ledger.cluster_windows import read_windows
from lib.ledger.replay import ledger_policies
from lib.ledger.state import BOOKED, held_reservations, interruption_rates, pool_sizes
from lib.ledger.teams_file import LATER_KEYS
from lib.planning.plan.data import PlanInputs, WaitingRequest

QUEUE_DAYS = 90          # a deferred request not decided again for this many days has left the queue
EXPIRED_SHOWN = 500      # expired requests listed (all are counted)

# Into the temp table `plan_queue`: the waiting requests at $as_of, expired ones included (see the
# module docstring). An admit books its run, so the latest decision that matters is among the others;
# a run booked after a deferral was written after it, so after the horizon. A wait ends with the
# queue's own rejection (QUEUE_LEFT_CODES: cancelled, or its expiry recorded): a later deferral of the
# same run ID waits anew. A recorded expiry still counts as expired (since it waited in the line
# since its decision's `waiting_since`), never as waiting.
_LEFT = "[" + ", ".join(f"'{c}'" for c in QUEUE_LEFT_CODES) + "]"
# a deferral waits in the queue only when waiting cures every one of its reasons (lib.gate.capacity)
_CURES = "[" + ", ".join(f"'{c}'" for c in sorted(WAIT_CURES | MONTH_CURES | LINE_CURES)) + "]"


def _waits(alias: str) -> str:
    """SQL: the decision `alias` is a deferral that waiting cures."""
    return (f"({alias}.state = 'defer' AND len({alias}.reason_codes) > 0 "
            f"AND list_has_all({_CURES}, {alias}.reason_codes))")


_QUEUE_SQL = f"""CREATE OR REPLACE TEMP TABLE plan_queue AS
  WITH recent AS (
    SELECT x.decision_id, x.run_id, x.decided_at, x.state,
           x.state = 'reject' AND list_has_any(x.reason_codes, {_LEFT}) AS left_line,
           {_waits('x')} AS waits
    FROM decisions x
    WHERE x.decided_at >= $horizon AND x.state <> 'admit' AND x.run_id IS NOT NULL),
  lefts AS (SELECT run_id, max(decided_at) AS left_at FROM recent WHERE left_line GROUP BY run_id),
  waiting AS (
    SELECT x.run_id,
           min(x.decided_at) FILTER (WHERE x.waits AND (l.left_at IS NULL OR x.decided_at > l.left_at))
             AS waiting_since,
           max_by(x.decision_id, (x.decided_at, x.decision_id)) AS decision_id
    FROM recent x LEFT JOIN lefts l ON l.run_id = x.run_id
    WHERE NOT EXISTS (SELECT 1 FROM runs r WHERE r.run_id = x.run_id AND {BOOKED} AND r.updated_at >= $horizon)
    GROUP BY x.run_id),
  queued AS (
    SELECT d.*, coalesce(w.waiting_since, TRY_CAST(d.decision_json->>'waiting_since' AS TIMESTAMP)) AS since,
           coalesce(t.queue_max_age_days, $max_age) AS max_age
    FROM waiting w JOIN decisions d ON d.decision_id = w.decision_id LEFT JOIN teams t ON t.team = d.team
    WHERE d.decided_at >= $horizon
      AND ({_waits('d')} OR (d.state = 'reject' AND list_contains(d.reason_codes, 'queue-expired'))))
  SELECT run_id, team, kind, coalesce(request_json->>'capacity', 'stable') AS capacity,
         TRY_CAST(request_json->>'gpus' AS INTEGER) AS gpus, since AS waiting_since,
         CASE WHEN state = 'defer' THEN since + to_days(max_age)
              ELSE least(since + to_days(max_age), decided_at) END AS expires_at,
         request_json, state = 'reject' AS expiry_recorded
  FROM queued WHERE since IS NOT NULL"""


def _parse(text: str | None) -> dict | None:
    try:
        obj = json.loads(text) if text else None
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None


def first_run_at(con) -> datetime | None:
    """The earliest time any run of the ledger was reserved, started or ended (None: no runs)."""
    # each column's own minimum: DuckDB reads it from its statistics, no scan
    return con.execute("SELECT least(min(reserved_from), min(started_at), min(ended_at)) FROM runs").fetchone()[0]


def read_queue(con, as_of: datetime, exclude: str | None = None, *,
               unrecorded: bool = False) -> tuple[list[WaitingRequest], dict]:
    """(the requests waiting at as_of and not expired, {count, rows, counts}: those expired, newest
    expiry first, at most EXPIRED_SHOWN rows, and counted per team, kind and capacity type).
    `exclude`: a run ID left out (the request being checked). `unrecorded`: the expired dict also
    has "unrecorded", every expired request whose expiry the ledger has not recorded yet (WaitingRequest
    rows, run-ID order; lib.ledger.queue records them)."""
    p = {"horizon": as_of - timedelta(days=QUEUE_DAYS), "max_age": LATER_KEYS["queue_max_age_days"]}
    con.execute(_QUEUE_SQL, p)
    try:
        cols = "run_id, team, kind, capacity, gpus, waiting_since, expires_at"
        live = con.execute(f"SELECT {cols}, request_json FROM plan_queue WHERE expires_at > $as_of "
                           "AND run_id IS DISTINCT FROM $exclude ORDER BY run_id", {"as_of": as_of, "exclude": exclude}).fetchall()
        counts = con.execute("SELECT team, kind, capacity, count(*) FROM plan_queue WHERE expires_at <= $as_of "
                             "AND run_id IS DISTINCT FROM $exclude GROUP BY ALL ORDER BY ALL",
                             {"as_of": as_of, "exclude": exclude}).fetchall()
        expired = con.execute(f"SELECT {cols} FROM plan_queue WHERE expires_at <= $as_of AND run_id IS DISTINCT FROM "
                              "$exclude ORDER BY expires_at DESC, run_id LIMIT $n",
                              {"as_of": as_of, "exclude": exclude, "n": EXPIRED_SHOWN}).fetchall()
        pending = con.execute(f"SELECT {cols}, request_json FROM plan_queue WHERE expires_at <= $as_of "
                              "AND NOT expiry_recorded ORDER BY run_id", {"as_of": as_of}).fetchall() if unrecorded else []
    finally:
        con.execute("DROP TABLE IF EXISTS plan_queue")
    names = cols.split(", ")
    waiting: list[WaitingRequest] = [{**dict(zip(names, r[:7])), "request": _parse(r[7])} for r in live]
    out = {"count": sum(n for *_, n in counts), "rows": [dict(zip(names, r)) for r in expired],
           "counts": [{"team": t, "kind": k, "capacity": c, "requests": n} for t, k, c, n in counts]}
    if unrecorded:
        out["unrecorded"] = [{**dict(zip(names, r[:7])), "request": _parse(r[7])} for r in pending]
    return waiting, out


def read_plan_inputs(con, as_of: datetime, *, exclude: str | None = None, also: tuple[str, str] | None = None,
                     scopes: ScopeRows | None = None) -> tuple[PlanInputs, dict]:
    """(the plan's inputs at as_of, the expired requests: see `read_queue`). `exclude`: a run ID left
    out of the queue; `also`: a (team, kind) whose calibration is read besides the queue's (a request
    checked against the plan); `scopes`: the calibration rows at as_of, when the caller read them
    already."""
    waiting, expired = read_queue(con, as_of, exclude)
    policies = ledger_policies(con)
    pairs = {(w["team"], w["kind"]) for w in waiting if w["team"] in policies and w["kind"] in KINDS}
    if also is not None and also[0] in policies and also[1] in KINDS:
        pairs.add(also)
    spent = {(team, month): float(hours or 0.0) for team, month, hours in con.execute(
        "SELECT team, date_trunc('month', ended_at)::TIMESTAMP, sum(actual_gpu_hours) FROM runs "
        "WHERE ended_at >= ? GROUP BY ALL", [month_start(as_of)]).fetchall()}
    snapshots: dict = {}
    for snap, team in con.execute("SELECT snapshot, team FROM snapshots").fetchall():
        snapshots.setdefault(team, set()).add(snap)
    # the interruption rate prices only preemptible requests' estimates
    teams = sorted({t for t, _ in pairs} if any(w["capacity"] == "preemptible" for w in waiting)
                   or also is not None else set())
    inputs: PlanInputs = {
        "as_of": as_of, "policies": policies, "held": held_reservations(con, as_of), "waiting": waiting,
        "spent": spent, "snapshots": snapshots,
        "calibrations": calibrations(con, pairs, as_of, scopes=scopes),
        "interruption_rates": interruption_rates(con, teams, as_of) if teams else {},
        "pools": pool_sizes(con), "windows": read_windows(con, as_of)}
    return inputs, expired


def anyone_waiting(con, as_of: datetime) -> bool:
    """Whether any request may wait in the queue at as_of: a deferral that waiting cures within the last
    QUEUE_DAYS (one indexed read; `read_queue` tells which wait)."""
    return con.execute(f"SELECT EXISTS (SELECT 1 FROM decisions x WHERE decided_at >= ? AND {_waits('x')})",
                       [as_of - timedelta(days=QUEUE_DAYS)]).fetchone()[0]
