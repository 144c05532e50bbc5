"""What waits and what is committed ahead: the request queue with the earliest time each waiting
request would fit, and the capacity calendar (accelerators committed per team and day ahead), both
from the reservations the gate counts against quotas (lib.gate.capacity).
"""
from __future__ import annotations

import datetime as dt

import pandas as pd

from lib.dashboard.filters import Filters
from lib.dashboard.labels import ALL_TEAMS
from lib.dashboard.reading import frame, used_params
from lib.dashboard.run_sql import ROW_LIMIT
from lib.gate.capacity import fit_for_reasons, held_at, holdings_timeline
from lib.gate.contracts import Reservation

CALENDAR_DAYS = 14            # days the capacity calendar looks ahead, today included


QUEUE_DAYS = 90   # a deferred request not decided again for this many days has left the queue


def _waiting_requests(con, f: Filters, now: dt.datetime) -> None:
    """Into the temp table `queue`: the requests waiting now, whatever the period filter: the run
    ID's latest decision of the last QUEUE_DAYS is a deferral and no run under that ID holds a
    reservation (admitted since). A
    request deferred longer ago and never decided again has left the queue (its team gave up on
    it or resubmitted it under another ID); so the queue costs the last QUEUE_DAYS of decisions,
    not the whole history. Team, kind and capacity filters apply to that latest request;
    first_deferred_at is the run ID's first deferral in those days."""
    dwhere, dp = f.where("d", capacity_col="coalesce(d.request_json->>'capacity', 'stable')")
    dp["horizon"] = now - dt.timedelta(days=QUEUE_DAYS)
    # An admit books its run, so the latest decision that matters is among the others; a run booked
    # after a deferral (by the gate or an import) was written after it, so after the horizon.
    sql = f"""CREATE OR REPLACE TEMP TABLE queue AS
      WITH recent AS (
        SELECT x.decision_id, x.run_id, x.decided_at, x.state FROM decisions x
        WHERE x.decided_at >= $horizon AND x.state <> 'admit' AND x.run_id IS NOT NULL),
      waiting AS (
        SELECT x.run_id, min(x.decided_at) FILTER (WHERE x.state = 'defer') AS first_deferred_at,
               max_by(x.decision_id, (x.decided_at, x.decision_id)) AS decision_id
        FROM recent x
        WHERE NOT EXISTS (SELECT 1 FROM runs r WHERE r.run_id = x.run_id AND r.reserved_gpu_hours IS NOT NULL
                          AND r.updated_at >= $horizon)
        GROUP BY x.run_id)
      SELECT d.run_id, d.team, d.kind, coalesce(d.request_json->>'capacity', 'stable') AS capacity,
             TRY_CAST(d.request_json->>'gpus' AS INTEGER) AS gpus,
             array_to_string(d.reason_codes, ', ') AS reason_codes, w.first_deferred_at
      FROM waiting w JOIN decisions d ON d.decision_id = w.decision_id
      WHERE d.decided_at >= $horizon AND d.state = 'defer' AND {dwhere}"""
    con.execute(sql, used_params(sql, dp))


def request_queue(con, f: Filters, held: list[Reservation], quotas: pd.DataFrame, now: dt.datetime,
                  limit: int | None = None) -> tuple[pd.DataFrame, int]:
    """(the first `limit` (default ROW_LIMIT) requests of the queue, how many wait in all): the
    waiting requests (`_waiting_requests`) with `waited_hours` (hours from the first deferral to
    `now`), `earliest_fit` and `fit_note` (`earliest_fits`, reckoned once per distinct team, kind,
    GPUs and reasons), ordered by earliest fit (never last), then longest wait, then run ID. The
    ordering and the limit run in DuckDB, so a long queue is never fetched whole."""
    _waiting_requests(con, f, now)
    keys = frame(con, "SELECT team, kind, gpus, reason_codes, count(*) AS requests FROM queue GROUP BY ALL")
    fits = earliest_fits(keys, held, quotas, now)
    out = frame(con, """
      WITH fit AS (SELECT unnest($team::VARCHAR[]) AS team, unnest($kind::VARCHAR[]) AS kind,
                          unnest($gpus::INTEGER[]) AS gpus, unnest($codes::VARCHAR[]) AS reason_codes,
                          unnest($fit::TIMESTAMP[]) AS earliest_fit, unnest($note::VARCHAR[]) AS fit_note)
      SELECT q.*, fit.earliest_fit, fit.fit_note FROM queue q
      JOIN fit ON fit.team = q.team AND fit.kind = q.kind AND fit.gpus IS NOT DISTINCT FROM q.gpus
              AND fit.reason_codes = q.reason_codes
      ORDER BY fit.earliest_fit NULLS LAST, q.first_deferred_at, q.run_id LIMIT $limit""",
                {"team": fits["team"].tolist(), "kind": fits["kind"].tolist(),
                 "gpus": [None if pd.isna(g) else int(g) for g in fits["gpus"]],
                 "codes": fits["reason_codes"].tolist(),
                 "fit": [None if pd.isna(t) else t.to_pydatetime() for t in fits["earliest_fit"]],
                 "note": [None if pd.isna(n) else n for n in fits["fit_note"]],
                 "limit": ROW_LIMIT if limit is None else limit})
    con.execute("DROP TABLE queue")
    out.insert(out.columns.get_loc("first_deferred_at") + 1, "waited_hours",
               ((now - out["first_deferred_at"]).dt.total_seconds() / 3600.0).astype("float64"))
    return out, int(keys["requests"].sum())


def capacity_calendar(held: list[Reservation], quotas: pd.DataFrame, now: dt.datetime,
                      days: int = CALENDAR_DAYS) -> pd.DataFrame:
    """Accelerators committed per team and day for `days` days from now's day (UTC), and per day
    over the teams (team = ALL_TEAMS).

    committed_gpus: the peak held during the day by the team's `held` reservations (every admitted,
    unfinished one, those starting later included, each from now until its reserved_until), read
    from lib.gate.capacity.holdings_timeline, the timeline the gate's earliest fit reads; holdings
    only fall, so the peak is what is held at the day's start (at now, today). quota_gpus and
    retraining_reserved_gpus from the team's policy (`quotas`: team, quota_gpus,
    retraining_reserved_gpus; only these teams are shown); free_gpus = quota - committed, never
    below 0; over_committed_gpus = committed - quota when above it, else 0. The ALL_TEAMS row sums
    each column (free: the teams' free accelerators, one team's spare never covers another)."""
    by_team: dict[str, list[Reservation]] = {}
    for r in held:
        by_team.setdefault(r["team"], []).append(r)
    today = dt.datetime.combine(now.date(), dt.time())
    starts = [max(now, today + dt.timedelta(days=i)) for i in range(days)]
    rows = []
    for q in quotas.itertuples():
        timeline = holdings_timeline(now, by_team.get(q.team, []))
        for start in starts:
            committed = held_at(timeline, start)
            rows.append({"day": start.date(), "team": q.team, "committed_gpus": committed,
                         "quota_gpus": int(q.quota_gpus), "retraining_reserved_gpus": int(q.retraining_reserved_gpus),
                         "free_gpus": max(0, int(q.quota_gpus) - committed),
                         "over_committed_gpus": max(0, committed - int(q.quota_gpus))})
    cols = ["day", "team", "committed_gpus", "quota_gpus", "retraining_reserved_gpus", "free_gpus",
            "over_committed_gpus"]
    cal = pd.DataFrame(rows, columns=cols)
    if cal.empty:
        return cal
    total = cal.groupby("day", as_index=False)[cols[2:]].sum()
    total.insert(1, "team", ALL_TEAMS)
    cal = pd.concat([cal, total[cols]], ignore_index=True)
    cal = cal.assign(_total=cal["team"] == ALL_TEAMS).sort_values(["day", "_total", "team"], kind="stable")
    cal["day"] = pd.to_datetime(cal["day"])
    return cal.drop(columns="_total").reset_index(drop=True)


def earliest_fits(waiting: pd.DataFrame, held: list[Reservation], quotas: pd.DataFrame,
                  now: dt.datetime) -> pd.DataFrame:
    """Add `earliest_fit` and `fit_note` to deferred requests (team, kind, gpus, reason_codes as
    "code, code"): lib.gate.capacity.fit_for_reasons over the reservations that count against quotas
    (`held`, lib.ledger.state.held_reservations), the same rule as the fix of the gate's capacity
    reasons. Computed once per distinct (team, kind, GPUs, reasons)."""
    q = {row.team: (int(row.reserved_gpus), int(row.retraining_reserved_gpus)) for row in quotas.itertuples()}
    by_team: dict[str, list[Reservation]] = {}
    for r in held:
        by_team.setdefault(r["team"], []).append(r)
    keys = ["team", "kind", "gpus", "reason_codes"]
    distinct = waiting[keys].drop_duplicates()
    fits, notes = [], []
    for team, kind, gpus, codes in distinct.itertuples(index=False):
        if team not in q or pd.isna(gpus):
            at, note = None, "unknown team or GPU count"
        else:
            at, note = fit_for_reasons(now, codes.split(", ") if codes else [], kind, *q[team],
                                       by_team.get(team, []), int(gpus))
        fits.append(at)
        notes.append(note)
    distinct = distinct.assign(earliest_fit=pd.to_datetime(pd.Series(fits, index=distinct.index, dtype="object")),
                               fit_note=pd.Series(notes, index=distinct.index, dtype="object"))
    return waiting.merge(distinct, on=keys, how="left")
