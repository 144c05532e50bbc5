"""Every SQL query the dashboard runs, one function per page (one read-only open per call).

Each function opens the ledger read-only for its one unit of work, runs its queries, closes the
file, and returns plain data: pandas DataFrames and numbers. Nothing keeps a handle between calls,
so the command line and a scheduler's submit hook can write between two page renders. User values
(teams, kinds, dates) are always bound parameters.

Where a row sits in time (the period filters):
- a reservation / run by the start of its reservation window: coalesce(reserved_from, started_at,
  ended_at) ("anchor");
- spend, stops and estimate accuracy by when the run ended (ended_at);
- decisions by decided_at.
Idle reserved capacity (charged to the team that held the reservation), per run, in GPU-hours
(gpus x hours) inside its window [reserved_from, reserved_until]:
- late start  = started_at - reserved_from (started_at clamped into the window);
- early end   = reserved_until - ended_at (ended_at clamped into the window);
- never used  = the whole window, when started_at is NULL and the window has passed.
Estimates with estimate_source = 'requested' are a time limit x GPUs: "requested, not measured".
They are shown marked as such and left out of error statistics.
"""
from __future__ import annotations

import datetime as dt

import pandas as pd

from lib.gate.capacity import fit_for_reasons, held_at, holdings_timeline
from lib.gate.contracts import Reservation
from lib.gate.terms import month_start as month_start_of, next_month_start, utcnow
from lib.dashboard.filters import Filters
from lib.dashboard.labels import ALL_TEAMS
from lib.dashboard.reading import frame, one_row, period_params, reader, used_params
from lib.ledger.state import KNOWN_TEAMS, held_condition, held_reservations

REQUESTED_LABEL = "requested, not measured"
BACKTEST_RUNS = 100           # recent runs per team x kind replayed against the bound they would have had
ROW_LIMIT = 500               # rows a detail table shows at most (totals are always complete)
SCATTER_POINTS = 4000         # points in the predicted-vs-actual chart at most (a fixed sample)
CALENDAR_DAYS = 14            # days the capacity calendar looks ahead, today included
BUDGET_MONTHS = 36            # months the budget month picker offers at most

_ANCHOR = "coalesce(r.reserved_from, r.started_at, r.ended_at)"


def _anchored(where: str) -> str:
    """The runs of the period ($start, $end) by their anchor that also meet `where` (alias r), as a
    subquery aliased r. The period is tested on reserved_from itself, so DuckDB skips the stored row
    groups that lie outside it (zone maps work on a raw column, not on an expression of it); only
    the runs without a reservation start fall back on the started and ended times."""
    return (f"(SELECT * FROM runs r WHERE {where} AND r.reserved_from >= $start AND r.reserved_from < $end "
            f"UNION ALL SELECT * FROM runs r WHERE {where} AND r.reserved_from IS NULL "
            "AND coalesce(r.started_at, r.ended_at) >= $start AND coalesce(r.started_at, r.ended_at) < $end) r")


_H = "(epoch_us({b}) - epoch_us({a})) / 3600e6"          # hours between two timestamps
_IDLE = f"""
  CASE WHEN r.reserved_from IS NULL OR r.reserved_until IS NULL OR r.started_at IS NULL THEN 0
       ELSE r.gpus * greatest(0, {_H.format(a='r.reserved_from', b='least(greatest(r.started_at, r.reserved_from), r.reserved_until)')}) END
    AS late_start_gpu_hours,
  CASE WHEN r.reserved_from IS NULL OR r.reserved_until IS NULL OR r.started_at IS NULL OR r.ended_at IS NULL THEN 0
       ELSE r.gpus * greatest(0, {_H.format(a='least(greatest(r.ended_at, r.started_at, r.reserved_from), r.reserved_until)', b='r.reserved_until')}) END
    AS early_end_gpu_hours,
  CASE WHEN r.reserved_from IS NOT NULL AND r.reserved_until IS NOT NULL AND r.started_at IS NULL
            AND r.reserved_until <= $now
       THEN r.gpus * greatest(0, {_H.format(a='r.reserved_from', b='r.reserved_until')}) ELSE 0 END
    AS never_used_gpu_hours,
  CASE WHEN r.reserved_from IS NULL OR r.reserved_until IS NULL THEN 0
       ELSE r.gpus * greatest(0, {_H.format(a='r.reserved_from', b='r.reserved_until')}) END
    AS window_gpu_hours
"""


# ------------------------------------------------------------------------------------- sidebar

def sidebar_options(db=None) -> dict:
    """Teams (from the policy table and the runs), the span of the data, and the run count."""
    with reader(db) as con:
        teams = frame(con, f"{KNOWN_TEAMS} ORDER BY 1")
        # each time column's own min and max: DuckDB reads them from its statistics, no scan
        span = one_row(con, """SELECT count(*) AS runs,
                              least(min(reserved_from), min(started_at), min(ended_at))::DATE AS first_day,
                              greatest(max(reserved_from), max(started_at), max(ended_at))::DATE AS last_day
                              FROM runs""")
    return {"teams": teams["team"].tolist(), "runs": int(span.get("runs") or 0),
            "first_day": span.get("first_day"), "last_day": span.get("last_day")}


def data_counts(db=None) -> dict:
    """Cheap counts (runs, decisions): shown after an import, and used to tell an empty ledger."""
    with reader(db) as con:
        return one_row(con, "SELECT (SELECT count(*) FROM runs) AS runs, (SELECT count(*) FROM decisions) AS decisions")


# ------------------------------------------------------------------------------------ overview

SPEND_COLUMNS = ("reserved_gpu_hours", "used_gpu_hours", "idle_gpu_hours", "closed_window_gpu_hours", "runs")


def _overview_metrics(con, f: Filters, now: dt.datetime) -> tuple[dict, pd.DataFrame]:
    """(the period's headline numbers, its spend per capacity type). The headline GPU-hours are the
    sums of the per-capacity rows, so money priced per capacity type adds up to them."""
    where, p = f.where("r")
    p.update(period_params(f), now=now)
    by_capacity = frame(con, f"""
      WITH x AS (SELECT r.*, {_IDLE} FROM {_anchored(where)})
      SELECT capacity, coalesce(sum(reserved_gpu_hours), 0) AS reserved_gpu_hours,
             coalesce(sum(actual_gpu_hours), 0) AS used_gpu_hours,
             coalesce(sum(late_start_gpu_hours + early_end_gpu_hours + never_used_gpu_hours)
                      FILTER (WHERE reserved_until <= $now), 0) AS idle_gpu_hours,
             coalesce(sum(window_gpu_hours) FILTER (WHERE reserved_until <= $now), 0) AS closed_window_gpu_hours,
             count(*) AS runs
      FROM x GROUP BY capacity ORDER BY capacity""", p)
    m = {c: (int if c == "runs" else float)(by_capacity[c].sum()) for c in SPEND_COLUMNS}
    measured = "r.estimate_source IS DISTINCT FROM 'requested' AND r.estimated_gpu_hours > 0"
    e = one_row(con, f"""
      SELECT median(r.actual_gpu_hours / r.estimated_gpu_hours) FILTER (WHERE {measured}) AS median_ratio,
             quantile_cont(r.actual_gpu_hours / r.estimated_gpu_hours, 0.9) FILTER (WHERE {measured}) AS p90_ratio,
             count(*) FILTER (WHERE {measured} AND r.actual_gpu_hours IS NOT NULL) AS measured_runs,
             count(*) FILTER (WHERE r.estimate_source = 'requested') AS requested_runs,
             count(*) FILTER (WHERE r.stop_reason = 'budget') AS budget_stopped
      FROM runs r
      WHERE {where} AND r.ended_at >= $start AND r.ended_at < $end""", p)
    dwhere, dp = f.where("d", capacity_col="coalesce(d.request_json->>'capacity', 'stable')")
    dp.update(period_params(f))
    d = one_row(con, f"""SELECT count(*) AS deferred FROM decisions d
                      WHERE d.state = 'defer' AND d.decided_at >= $start AND d.decided_at < $end AND {dwhere}""", dp)
    m.update(e)
    m.update(d)
    m["idle_share"] = (m["idle_gpu_hours"] / m["closed_window_gpu_hours"]) if m["closed_window_gpu_hours"] else None
    return m, by_capacity


def overview(f: Filters, db=None, now: dt.datetime | None = None) -> dict:
    """Headline numbers for the period and the previous period of the same length (and their
    reserved, used and idle GPU-hours per capacity type), deferred requests by reason (both periods),
    and reserved vs used GPU-hours per day and team."""
    now = now or utcnow()
    with reader(db) as con:
        cur, cur_by_capacity = _overview_metrics(con, f, now)
        prev, prev_by_capacity = _overview_metrics(con, f.previous(), now)
        dwhere, dp = f.where("d", capacity_col="coalesce(d.request_json->>'capacity', 'stable')")
        dp.update(start=f.previous().start, mid=f.start, end=f.end)
        reasons = frame(con, f"""
          SELECT reason, count(*) FILTER (WHERE decided_at >= $mid) AS requests,
                 count(*) FILTER (WHERE decided_at < $mid) AS previous_requests
          FROM (SELECT unnest(d.reason_codes) AS reason, d.decided_at FROM decisions d
                WHERE d.state = 'defer' AND d.decided_at >= $start AND d.decided_at < $end AND {dwhere})
          GROUP BY reason ORDER BY requests DESC, reason""", dp)
        where, p = f.where("r")
        p.update(period_params(f))
        daily = frame(con, f"""
          SELECT {_ANCHOR}::DATE AS day, r.team,
                 coalesce(sum(r.reserved_gpu_hours), 0) AS reserved_gpu_hours,
                 coalesce(sum(r.actual_gpu_hours), 0) AS used_gpu_hours
          FROM {_anchored(where)}
          GROUP BY ALL ORDER BY day, r.team""", p)
    return {"current": cur, "previous": prev, "deferred_by_reason": reasons, "daily": daily,
            "spend_by_capacity": cur_by_capacity, "previous_spend_by_capacity": prev_by_capacity}


# -------------------------------------------------------------------------------- reservations

def reservations(f: Filters, db=None, now: dt.datetime | None = None) -> dict:
    """Per team: average reserved GPUs per day against its quota; this month's budget (see
    `monthly_budget`); current and upcoming reservations; overruns; the capacity calendar
    (`capacity_calendar`); and the queue of waiting requests with the earliest time each would fit
    (`waiting`, at most ROW_LIMIT rows of `queue_count`).

    The date filter applies to the charts and tables of the period only: the budget is this month's,
    and the calendar and the queue are "now". The calendar ignores the kind and capacity filters
    (the gate counts every kind against the quota); the queue applies them."""
    now = now or utcnow()
    where, p = f.where("r")
    p.update(period_params(f), now=now)
    twhere, tp = Filters(f.date_from, f.date_to, teams=f.teams).where("t")
    with reader(db) as con:
        # each reservation's days in the period (one row per day it touches), not every day x every reservation
        over_time = frame(con, f"""
          WITH res AS (SELECT r.team, r.gpus, r.reserved_from, r.reserved_until FROM runs r
                  WHERE {where} AND r.reserved_from IS NOT NULL AND r.reserved_until IS NOT NULL
                    AND r.reserved_from < $end AND r.reserved_until > $start),
          each_day AS (SELECT team, gpus, reserved_from, reserved_until,
                              unnest(range(greatest(date_trunc('day', reserved_from), $start::TIMESTAMP),
                                           least(reserved_until, $end::TIMESTAMP), INTERVAL 1 DAY)) AS day FROM res)
          SELECT day::DATE AS day, team,
                 sum(gpus * (epoch_us(least(reserved_until, day + INTERVAL 1 DAY))
                             - epoch_us(greatest(reserved_from, day))) / 86400e6) AS reserved_gpus
          FROM each_day GROUP BY ALL ORDER BY day, team""", p)
        quotas = frame(con, f"SELECT t.team, t.reserved_gpus AS quota_gpus, t.retraining_reserved_gpus, "
                         f"t.monthly_budget_gpu_hours FROM teams t WHERE {twhere} ORDER BY t.team", tp)
        budget = _monthly_budget(con, f, now, now.date())
        cols = ("r.run_id, r.team, r.kind, r.capacity, r.gpus, r.reserved_from, r.reserved_until, "
                "r.reserved_gpu_hours, r.started_at, r.estimated_gpu_hours, "
                f"CASE WHEN r.estimate_source = 'requested' THEN '{REQUESTED_LABEL}' ELSE r.estimate_source END "
                "AS estimate_source")
        current = frame(con, f"""SELECT {cols} FROM runs r WHERE {where} AND r.reserved_gpu_hours IS NOT NULL
                 AND r.ended_at IS NULL AND r.reserved_from <= $now
                 AND (r.reserved_until IS NULL OR r.reserved_until > $now)
                 ORDER BY r.reserved_until NULLS LAST, r.run_id LIMIT {ROW_LIMIT}""", p)
        upcoming = frame(con, f"""SELECT {cols} FROM runs r WHERE {where} AND r.reserved_gpu_hours IS NOT NULL
                 AND r.ended_at IS NULL AND r.reserved_from > $now
                 ORDER BY r.reserved_from, r.run_id LIMIT {ROW_LIMIT}""", p)
        over_base = (f"FROM runs r WHERE {where} AND r.ended_at >= $start AND r.ended_at < $end "
                     "AND r.actual_gpu_hours > r.reserved_gpu_hours")
        overrun_by_team = frame(con, f"""SELECT r.team, count(*) AS runs,
                 sum(r.actual_gpu_hours - r.reserved_gpu_hours) AS overrun_gpu_hours {over_base}
                 GROUP BY r.team ORDER BY overrun_gpu_hours DESC""", p)
        overruns = frame(con, f"""SELECT r.run_id, r.team, r.kind, r.reserved_gpu_hours, r.actual_gpu_hours,
                 r.actual_gpu_hours - r.reserved_gpu_hours AS overrun_gpu_hours, r.stop_reason, r.ended_at,
                 CASE WHEN r.estimate_source = 'requested' THEN '{REQUESTED_LABEL}' ELSE r.estimate_source END
                   AS estimate_source
                 {over_base} ORDER BY overrun_gpu_hours DESC, r.run_id LIMIT {ROW_LIMIT}""", p)
        held = held_reservations(con, now)
        all_quotas = frame(con, "SELECT team, reserved_gpus, retraining_reserved_gpus FROM teams")
        waiting, queue_count = request_queue(con, f, held, all_quotas, now)
    calendar = capacity_calendar(held, quotas, now)
    return {"over_time": over_time, "quotas": quotas, **budget, "current": current, "upcoming": upcoming,
            "overrun_by_team": overrun_by_team, "overruns": overruns, "calendar": calendar,
            "over_committed_teams": sorted(set(calendar.loc[(calendar["over_committed_gpus"] > 0)
                                                            & (calendar["team"] != ALL_TEAMS), "team"])),
            "waiting": waiting, "queue_count": queue_count}


def _monthly_budget(con, f: Filters, now: dt.datetime, month: dt.date) -> dict:
    """{"budget": per team (team filter only): monthly_budget_gpu_hours, consumed_gpu_hours (actual
    GPU-hours of runs that ended in `month`, any day of it), committed_gpu_hours (the current month:
    held reservations' reserved GPU-hours, as the gate counts them; a past month: 0),
    remaining_gpu_hours = budget - consumed - committed; "month": its first day; "current_month"}."""
    twhere, tp = Filters(f.date_from, f.date_to, teams=f.teams).where("t")
    start = month_start_of(dt.datetime.combine(month, dt.time()))
    current = start == month_start_of(now)
    tp.update(now=now, month_start=start, next_month=next_month_start(start))
    committed = (f"""coalesce((SELECT sum(reserved_gpu_hours) FROM runs r WHERE r.team = t.team
                               AND {held_condition("r", "$now")}), 0)""" if current else "0.0")
    budget = frame(con, f"""
      SELECT t.team, t.monthly_budget_gpu_hours,
             coalesce((SELECT sum(actual_gpu_hours) FROM runs r WHERE r.team = t.team
                       AND r.ended_at >= $month_start AND r.ended_at < $next_month), 0) AS consumed_gpu_hours,
             {committed} AS committed_gpu_hours
      FROM teams t WHERE {twhere} ORDER BY t.team""", tp)
    budget["remaining_gpu_hours"] = (budget["monthly_budget_gpu_hours"] - budget["consumed_gpu_hours"]
                                     - budget["committed_gpu_hours"])
    return {"budget": budget, "month": start.date(), "current_month": current}


def monthly_budget(f: Filters, db=None, now: dt.datetime | None = None, *, month: dt.date | None = None) -> dict:
    """The monthly budget of `month` (any day of it; default now's month) per team: see
    `_monthly_budget`. Only the team filter applies."""
    now = now or utcnow()
    with reader(db) as con:
        return _monthly_budget(con, f, now, month or now.date())


def monthly_budget_in(month: dt.date):
    """`monthly_budget` of `month` as a page query (filters, db, now): its qualified name carries the
    month, so the page cache (ui.PageData, keyed by that name) keeps one result per month."""
    def query(f: Filters, db=None, now: dt.datetime | None = None) -> dict:
        return monthly_budget(f, db, now, month=month)
    query.__qualname__ = f"monthly_budget_in({month.isoformat()})"
    return query


def budget_months(first_day: dt.date | None, now: dt.datetime) -> list[dt.date]:
    """The months the budget picker offers (their first days), newest first: now's month back to
    the month of `first_day` (the ledger's first data; None: now's month only), at most BUDGET_MONTHS."""
    month = month_start_of(now).date()
    first = first_day.replace(day=1) if first_day else month
    out = []
    while month >= first and len(out) < BUDGET_MONTHS:
        out.append(month)
        month = (month - dt.timedelta(days=1)).replace(day=1)
    return out


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


# ------------------------------------------------------------------------------ idle capacity

def idle_capacity(f: Filters, db=None, now: dt.datetime | None = None) -> dict:
    """Idle reserved GPU-hours per team and week (week of the reservation start), split by cause;
    the weekly idle share per team; the reservations that wasted most; and idle GPU-hours per team and
    capacity type (what idle money is priced from). Only closed windows (reserved_until <= now) count:
    an open window's idle time is not known yet."""
    now = now or utcnow()
    where, p = f.where("r")
    p.update(period_params(f), now=now)
    with reader(db) as con:
        # the period's closed windows, read by each query straight from runs (the time filter skips
        # the rest of the history; copying them into a table first cost more than reading them thrice)
        idle = f"""WITH idle AS (
          SELECT r.run_id, r.team, r.kind, r.capacity, r.gpus, r.reserved_from, r.reserved_until, r.started_at,
                 r.ended_at, {_IDLE}
          FROM runs r WHERE {where} AND r.reserved_from >= $start AND r.reserved_from < $end
            AND r.reserved_until <= $now)"""
        weekly = frame(con, idle + """
          SELECT date_trunc('week', reserved_from)::DATE AS week, team,
                 sum(late_start_gpu_hours) AS late_start_gpu_hours,
                 sum(early_end_gpu_hours) AS early_end_gpu_hours,
                 sum(never_used_gpu_hours) AS never_used_gpu_hours,
                 sum(window_gpu_hours) AS reserved_gpu_hours
          FROM idle GROUP BY ALL ORDER BY week, team""", p)
        top = frame(con, idle + f"""
          SELECT run_id, team, kind, gpus, reserved_from, reserved_until, started_at, ended_at,
                 late_start_gpu_hours, early_end_gpu_hours, never_used_gpu_hours,
                 late_start_gpu_hours + early_end_gpu_hours + never_used_gpu_hours AS idle_gpu_hours
          FROM idle WHERE late_start_gpu_hours + early_end_gpu_hours + never_used_gpu_hours > 0
          ORDER BY idle_gpu_hours DESC, run_id LIMIT {ROW_LIMIT}""", p)
        by_team_capacity = frame(con, idle + """
          SELECT team, capacity, sum(late_start_gpu_hours + early_end_gpu_hours + never_used_gpu_hours)
                 AS idle_gpu_hours
          FROM idle GROUP BY ALL ORDER BY team, capacity""", p)
    weekly["idle_gpu_hours"] = (weekly["late_start_gpu_hours"] + weekly["early_end_gpu_hours"]
                                + weekly["never_used_gpu_hours"])
    weekly["idle_share"] = (weekly["idle_gpu_hours"] / weekly["reserved_gpu_hours"].where(
        weekly["reserved_gpu_hours"] > 0)).astype("float64")
    by_team = (weekly.groupby("team", as_index=False)[["late_start_gpu_hours", "early_end_gpu_hours",
                                                       "never_used_gpu_hours", "idle_gpu_hours",
                                                       "reserved_gpu_hours"]].sum()
               .sort_values("idle_gpu_hours", ascending=False, ignore_index=True))
    return {"weekly": weekly, "by_team": by_team, "top": top, "by_team_capacity": by_team_capacity}


# --------------------------------------------------------------------------- estimate accuracy

ERROR_SOURCES = ("runtime", "checkpoint overhead", "retries and lost work", "evaluation")


def estimate_accuracy(f: Filters, db=None, now: dt.datetime | None = None, window_days: int = 28) -> dict:
    """Predicted vs actual points (a fixed sample when large), the rolling median of actual /
    estimated per team (trailing `window_days`, one point per week), the error by source, and
    counts of runs whose estimate was requested, not measured."""
    now = now or utcnow()
    where, p = f.where("r")
    p.update(period_params(f), now=now, wstart=f.start - dt.timedelta(days=window_days),
             wdays=window_days)
    with reader(db) as con:
        base = (f"FROM runs r WHERE {where} AND r.ended_at >= $start AND r.ended_at < $end "
                "AND r.estimated_gpu_hours > 0 AND r.actual_gpu_hours > 0")
        counts = one_row(con, f"""SELECT count(*) AS runs,
                 count(*) FILTER (WHERE r.estimate_source = 'requested') AS requested_runs {base}""", p)
        points = frame(con, f"""SELECT * FROM (
                 SELECT r.run_id, r.team, r.kind, r.estimated_gpu_hours, r.actual_gpu_hours, r.stop_reason,
                        CASE WHEN r.estimate_source = 'requested' THEN '{REQUESTED_LABEL}'
                             ELSE coalesce(r.estimate_source, 'unknown') END AS estimate_source {base})
                 USING SAMPLE reservoir({SCATTER_POINTS} ROWS) REPEATABLE (7)""", p)
        rolling = frame(con, f"""
          WITH x AS (SELECT r.team, r.ended_at, r.actual_gpu_hours / r.estimated_gpu_hours AS ratio
                     FROM runs r WHERE {where} AND r.ended_at >= $wstart AND r.ended_at < $end
                       AND r.estimated_gpu_hours > 0 AND r.actual_gpu_hours IS NOT NULL
                       AND r.estimate_source IS DISTINCT FROM 'requested'),
          weeks AS (SELECT w::TIMESTAMP AS week_end FROM range($start::TIMESTAMP + INTERVAL 7 DAY,
                    $end::TIMESTAMP + INTERVAL 7 DAY, INTERVAL 7 DAY) t(w))
          SELECT (least(weeks.week_end, $end::TIMESTAMP) - INTERVAL 1 DAY)::DATE AS day, x.team,
                 median(x.ratio) AS median_ratio, count(*) AS runs
          FROM weeks JOIN x ON x.ended_at < least(weeks.week_end, $end::TIMESTAMP)
                           AND x.ended_at >= least(weeks.week_end, $end::TIMESTAMP) - to_days($wdays::INTEGER)
          GROUP BY ALL ORDER BY day, team""", p)
        sources = frame(con, f"""
          WITH x AS (SELECT r.team,
                 coalesce(r.est_compute_gpu_hours, 0) + coalesce(r.est_data_loading_gpu_hours, 0) AS est_runtime,
                 r.actual_gpu_hours - coalesce(r.act_checkpoint_gpu_hours, 0) - coalesce(r.act_retry_gpu_hours, 0)
                   - coalesce(r.act_eval_gpu_hours, 0) - coalesce(r.act_lost_work_gpu_hours, 0) AS act_runtime,
                 coalesce(r.est_checkpoint_gpu_hours, 0) AS est_ckpt, coalesce(r.act_checkpoint_gpu_hours, 0) AS act_ckpt,
                 coalesce(r.est_restart_gpu_hours, 0) AS est_retry,
                 coalesce(r.act_retry_gpu_hours, 0) + coalesce(r.act_lost_work_gpu_hours, 0) AS act_retry,
                 coalesce(r.est_eval_gpu_hours, 0) AS est_eval, coalesce(r.act_eval_gpu_hours, 0) AS act_eval,
                 r.estimated_gpu_hours
            {base} AND r.estimate_source IS DISTINCT FROM 'requested' AND r.est_compute_gpu_hours IS NOT NULL)
          SELECT team, count(*) AS runs, sum(estimated_gpu_hours) AS estimated_gpu_hours,
                 sum(act_runtime - est_runtime) AS "runtime",
                 sum(act_ckpt - est_ckpt) AS "checkpoint overhead",
                 sum(act_retry - est_retry) AS "retries and lost work",
                 sum(act_eval - est_eval) AS "evaluation"
          FROM x GROUP BY team ORDER BY team""", p)
    long = sources.melt(id_vars=["team", "runs", "estimated_gpu_hours"], value_vars=list(ERROR_SOURCES),
                        var_name="source", value_name="error_gpu_hours")
    long["error_share_of_estimate"] = long["error_gpu_hours"] / long["estimated_gpu_hours"]
    return {"counts": counts, "points": points, "rolling": rolling, "sources": long}


def calibration(f: Filters, db=None, now: dt.datetime | None = None, *, max_runs: int | None = None,
                window_days: int | None = None) -> dict:
    """The calibration the gate applies at `now` per team x kind, with how many runs (and censored
    runs) each rests on, and the drift alarms. Team and kind filters apply; dates do not (the gate
    reads its own window).
    backtest_coverage: how often the gate's team x kind bound (conformal, Tobit, or shifted after a
    change: lib.gate.calibration.backtest) covered the scope's last BACKTEST_RUNS runs when replayed
    from the runs before each; it should sit near the level. adapted_since: where the bound follows a
    change in the cost ratio, the first run after it.
    alarms: the team x kind scopes whose last ALARM_RUNS replayed runs exceeded their bound more often
    than the level allows (lib.gate.calibration.drift_alarm), with since when and what to do.

    Same rows (lib.ledger.calibration_rows.CALIBRATION_ROWS_SQL) and same function as
    lib.ledger.calibration_rows.calibration (what submit and check use): the `max_runs` most recent
    per scope, fed to lib.gate.calibration.calibrate_scopes. Instead of up to three scans per team x
    kind, it reads each scope for every team at once (about 0.5 s instead of 1-2 s on a 1M-run ledger)."""
    from lib.ledger.calibration_rows import (CALIBRATION_ROWS_SQL, CALIBRATION_WINDOW_DAYS, CUT_SQL,
                                             calibration_params, cut_params, newest_cutoffs)
    from lib.gate.calibration import DEFAULT_MAX_RUNS, backtest, calibrate_scopes, drift_alarm
    from lib.gate.terms import KINDS
    now = now or utcnow()
    max_runs = DEFAULT_MAX_RUNS if max_runs is None else max_runs
    window_days = CALIBRATION_WINDOW_DAYS if window_days is None else window_days
    p = {**calibration_params(now, window_days), "max_runs": max_runs}
    cols = "run_id, ended_at, estimated_gpu_hours, actual_gpu_hours, censored"
    with reader(db) as con:
        known = [t for (t,) in con.execute(f"{KNOWN_TEAMS} ORDER BY 1").fetchall()]
        teams = list(f.teams) or known
        # each team x kind's newest rows only (enough for the replay and for the team and
        # everyone scopes, whose newest rows are among their team x kinds' newest)
        cut = newest_cutoffs(con, CALIBRATION_ROWS_SQL, p, max_runs + BACKTEST_RUNS, known)
        sql = f"""CREATE TEMP TABLE cal AS WITH {CUT_SQL}
          SELECT c.* FROM ({CALIBRATION_ROWS_SQL}) c JOIN cut USING (team, kind) WHERE c.ended_at > cut.cut_since"""
        q = {**p, **cut_params(cut, p["since"])}
        con.execute(sql, used_params(sql, q))
        order = "ORDER BY c.ended_at DESC, c.run_id"
        # the max_runs most recent per group: a cheap top-N pass finds each group's cutoff time,
        # then the exact order (ties broken by run_id, as the store does) runs on the few rows left
        by_kind = frame(con, f"""
          WITH cut AS (SELECT team, kind, list_min(max_by(ended_at, ended_at, $max_runs)) AS cutoff
                       FROM cal GROUP BY team, kind)
          SELECT c.team, c.kind, c.run_id, c.ended_at, c.estimated_gpu_hours, c.actual_gpu_hours, c.censored
          FROM cal c JOIN cut ON c.team = cut.team AND c.kind = cut.kind AND c.ended_at >= cut.cutoff
          QUALIFY row_number() OVER (PARTITION BY c.team, c.kind {order}) <= $max_runs""", p)
        by_team = frame(con, f"""
          WITH cut AS (SELECT team, list_min(max_by(ended_at, ended_at, $max_runs)) AS cutoff
                       FROM cal GROUP BY team)
          SELECT c.team, c.run_id, c.ended_at, c.estimated_gpu_hours, c.actual_gpu_hours, c.censored
          FROM cal c JOIN cut ON c.team = cut.team AND c.ended_at >= cut.cutoff
          QUALIFY row_number() OVER (PARTITION BY c.team {order}) <= $max_runs""", p)
        everyone = frame(con, f"SELECT {cols} FROM cal c {order} LIMIT $max_runs", p)
        p["replay"] = max_runs + BACKTEST_RUNS
        replay = frame(con, f"""
          WITH cut AS (SELECT team, kind, list_min(max_by(ended_at, ended_at, $replay)) AS cutoff
                       FROM cal GROUP BY team, kind)
          SELECT c.team, c.kind, c.ended_at, ln(c.actual_gpu_hours / c.estimated_gpu_hours) AS r, c.censored,
                 c.admitted_at AS decided_at
          FROM cal c JOIN cut ON c.team = cut.team AND c.kind = cut.kind AND c.ended_at >= cut.cutoff
          QUALIFY row_number() OVER (PARTITION BY c.team, c.kind {order}) <= $replay
          ORDER BY c.team, c.kind, c.ended_at, c.run_id DESC""", p)
        con.execute("DROP TABLE cal")

    def records(df):
        # oldest first with ties as the store hands them over (its newest-first order, reversed)
        if df is None:
            return []
        df = df.sort_values(["ended_at", "run_id"], ascending=[True, False], kind="stable")
        return [{"estimated_gpu_hours": e, "actual_gpu_hours": a, "censored": c, "ended_at": t}
                for e, a, c, t in zip(df["estimated_gpu_hours"].tolist(), df["actual_gpu_hours"].tolist(),
                                      df["censored"].tolist(), df["ended_at"].dt.to_pydatetime().tolist())]

    kind_groups = dict(list(by_kind.groupby(["team", "kind"])))
    team_groups = dict(list(by_team.groupby("team")))
    replayed, alarmed = {}, {}
    for k, g in replay.groupby(["team", "kind"]):
        # each run replayed from the runs that had ended when it was admitted (reserved or started)
        back = replayed[k] = backtest(g["r"].to_numpy(), g["censored"].to_numpy(bool), window=max_runs,
                                      last=BACKTEST_RUNS, ended_at=g["ended_at"].to_numpy(),
                                      decided_at=g["decided_at"].to_numpy())
        alarmed[k] = drift_alarm(back["outcomes"], list(g["ended_at"])[-len(back["outcomes"]):],
                                 censored=g["censored"].to_numpy(bool))
    rows, alarms = [], []
    for team in teams:
        for kind in (f.kinds or KINDS):
            # lazily, as the store reads them: a later scope is turned into rows only when needed
            cal = calibrate_scopes((scope, records(rows)) for scope, rows in (
                ("team×kind", kind_groups.get((team, kind))), ("team", team_groups.get(team)),
                ("all", everyone)))
            back = replayed.get((team, kind), {})
            rows.append({"team": team, "kind": kind, "factor": cal["factor"],
                         "upper_factor": cal["upper_factor"], "method": cal["method"],
                         "scope": cal["scope"], "runs": cal["n"], "censored_runs": cal["n_censored"],
                         "level": cal["level"], "backtest_checked": back.get("checked", 0),
                         "backtest_coverage": back.get("coverage"),
                         "adapted_since": pd.Timestamp(cal["adapted_since"]) if cal["adapted_since"] else pd.NaT,
                         "note": cal["note"]})
            alarm = alarmed.get((team, kind))
            if alarm and alarm["alarm"]:
                # since when: where the gate's bound found the change, else the first run that went over
                since = pd.Timestamp(cal["adapted_since"]) if cal["adapted_since"] else alarm["since"]
                alarms.append({"team": team, "kind": kind, "recent_exceeded": alarm["message"],
                               "drift_since": since, "what_to_do": DRIFT_ADVICE})
    table = pd.DataFrame(rows, columns=["team", "kind", "factor", "upper_factor", "method", "scope", "runs",
                                        "censored_runs", "level", "backtest_checked", "backtest_coverage",
                                        "adapted_since", "note"])
    table["upper_factor"] = table["upper_factor"].astype("float64")
    table["backtest_coverage"] = table["backtest_coverage"].astype("float64")
    table["adapted_since"] = pd.to_datetime(table["adapted_since"])
    alarms = pd.DataFrame(alarms, columns=["team", "kind", "recent_exceeded", "drift_since", "what_to_do"])
    alarms["drift_since"] = pd.to_datetime(alarms["drift_since"])
    return {"table": table, "alarms": alarms}


DRIFT_ADVICE = "re-run the pilots on the current model and data; check for a model or data change"


# ------------------------------------------------------------------------- stops and promotion

def stops_promotion(f: Filters, db=None, now: dt.datetime | None = None) -> dict:
    """Runs by stop reason; runs stopped at a limit (incomplete, unpromotable) with their last
    valid checkpoint; holdout over-reads; promotion status of the period's production candidates."""
    from lib.gate.promotion import promotion_status
    now = now or utcnow()
    where, p = f.where("r")
    p.update(period_params(f))
    ended = f"FROM runs r WHERE {where} AND r.ended_at >= $start AND r.ended_at < $end"
    with reader(db) as con:
        by_reason = frame(con, f"""SELECT coalesce(r.stop_reason, 'unknown') AS stop_reason, r.team, count(*) AS runs,
                 coalesce(sum(r.actual_gpu_hours), 0) AS actual_gpu_hours {ended} GROUP BY ALL
                 ORDER BY runs DESC, stop_reason, team""", p)
        limit_counts = one_row(con, f"SELECT count(*) AS runs {ended} AND r.stop_reason IN ('budget', 'wall-clock')", p)
        limit_stopped = frame(con, f"""SELECT r.run_id, r.team, r.kind, r.stop_reason, r.actual_gpu_hours,
                 r.budget_gpu_hours, coalesce(r.artifact_status, 'incomplete') AS artifact_status,
                 r.last_valid_checkpoint, r.ended_at
                 {ended} AND r.stop_reason IN ('budget', 'wall-clock') ORDER BY r.ended_at DESC, r.run_id
                 LIMIT {ROW_LIMIT}""", p)
        over_reads = frame(con, f"""SELECT r.run_id, r.team, r.kind, r.holdout_reads,
                 coalesce(r.holdout_allowance, 0) AS holdout_allowance, r.stop_reason, r.ended_at
                 {ended} AND r.holdout_reads > coalesce(r.holdout_allowance, 0)
                 ORDER BY r.holdout_reads - coalesce(r.holdout_allowance, 0) DESC, r.run_id LIMIT {ROW_LIMIT}""", p)
        over_read_count = one_row(con, f"SELECT count(*) AS runs {ended} AND r.holdout_reads > coalesce(r.holdout_allowance, 0)", p)
        candidates = frame(con, f"""SELECT r.* {ended} AND r.kind = 'production'
                 ORDER BY r.ended_at DESC, r.run_id LIMIT {ROW_LIMIT}""", p)
        candidate_count = one_row(con, f"SELECT count(*) AS runs {ended} AND r.kind = 'production'", p)
    promotable, missing = [], []
    for run in candidates.astype(object).where(candidates.notna(), None).to_dict("records"):
        status = promotion_status(run)
        promotable.append(bool(status["promotable"]))
        missing.append("; ".join(status["missing"]))
    promo = candidates[["run_id", "team", "stop_reason", "artifact_status", "full_evaluation",
                        "holdout_reads", "holdout_allowance", "ended_at"]].copy()
    promo.insert(2, "promotable", pd.Series(promotable, index=promo.index, dtype="bool"))
    promo.insert(3, "missing", pd.Series(missing, index=promo.index, dtype="object"))
    return {"by_reason": by_reason, "limit_stopped": limit_stopped, "limit_count": int(limit_counts.get("runs") or 0),
            "over_reads": over_reads, "over_read_count": int(over_read_count.get("runs") or 0),
            "promotion": promo, "candidate_count": int(candidate_count.get("runs") or 0)}
