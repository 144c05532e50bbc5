"""The Reservations page's read model: reservations against quota over the period, this month's
budget and its burn-down, current reservations (a run past its planned end with no end recorded is
still held and marked: `with_hold_status`) and upcoming ones, overruns, and the forward plan (the
queue, the capacity calendar, the pools: lib.dashboard.queue_and_calendar).
"""
from __future__ import annotations

import datetime as dt

import pandas as pd

from lib.dashboard.budget_queries import budget_of_month, shared_budget
from lib.dashboard.filters import Filters
from lib.dashboard.labels import REQUESTED_LABEL
from lib.dashboard.forecasts import budget_outlook
from lib.dashboard.line_starts import line_starts
from lib.dashboard.queue_and_calendar import forward_view
from lib.dashboard.reading import read_frame, period_params, reader
from lib.dashboard.run_sql import ROW_LIMIT
from lib.gate.contracts import Reservation
from lib.gate.terms import utcnow
from lib.ledger.state import held_condition, held_reservations


OVERRUNNING = "overrunning"
PAST_LIMIT = "no end recorded past its time limit: check the job"


def with_hold_status(current: pd.DataFrame, held: list[Reservation]) -> pd.DataFrame:
    """The `current` reservations (run_id, reserved_until: the planned end) with `hold_status`:
    OVERRUNNING for a started run past its planned end with no end recorded, PAST_LIMIT once it is
    lib.ledger.state.OVERDUE_GRACE_HOURS past its time limit, else empty; and `expected_end`: when
    the gate expects it to end (its planned end, or an overrun's lib.ledger.state.overrun_end; empty:
    no known end). `held`: lib.ledger.state.held_reservations at the same time."""
    by_run = {h["run_id"]: h for h in held}
    rows = [by_run.get(r) for r in current["run_id"]]
    status = ["" if h is None or not h.get("overrun") else PAST_LIMIT if h.get("past_limit") else OVERRUNNING
              for h in rows]
    expected = [None if h is None else h["reserved_until"] for h in rows]
    return current.assign(hold_status=status, expected_end=pd.to_datetime(pd.Series(expected, dtype="object", index=current.index)))


def reservations(f: Filters, db=None, now: dt.datetime | None = None) -> dict:
    """Per team: average reserved GPUs per day against its quota; this month's budget (see
    `monthly_budget`) and its burn-down (`burn`, `burn_path`: lib.dashboard.forecasts, on the plan's
    reservations); current and upcoming reservations; overruns; how often a pool, not a quota,
    deferred a request in the period (`blocked`); and the forward plan (`forward_view`: the queue,
    the calendar, the pools, the expired requests).

    The date filter applies to the charts and tables of the period only: the budget is this month's,
    and the plan starts now. The calendar ignores the kind and capacity filters (the gate counts
    every kind against the quota); the queue applies them."""
    now = now or utcnow()
    where, p = f.where("r")
    p.update(period_params(f), now=now)
    twhere, tp = Filters(f.date_from, f.date_to, teams=f.teams).where("t")
    with reader(db) as con:
        # each reservation's days in the period (one row per day it touches), not every day x every reservation
        over_time = read_frame(con, f"""
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
        quotas = read_frame(con, f"SELECT t.team, t.reserved_gpus AS quota_gpus, t.retraining_reserved_gpus, "
                         f"t.monthly_budget_gpu_hours FROM teams t WHERE {twhere} ORDER BY t.team", tp)
        budget = budget_of_month(con, f, now, now.date())
        cols = ("r.run_id, r.team, r.kind, r.capacity, r.gpus, r.reserved_from, r.reserved_until, "
                "r.reserved_gpu_hours, r.started_at, r.estimated_gpu_hours, "
                f"CASE WHEN r.estimate_source = 'requested' THEN '{REQUESTED_LABEL}' ELSE r.estimate_source END "
                "AS estimate_source")
        # held and started (lib.ledger.state.held_condition): a run past its planned end is still held
        current = read_frame(con, f"""SELECT {cols} FROM runs r WHERE {where} AND {held_condition('r', '$now')}
                 AND coalesce(r.started_at, r.reserved_from) <= $now
                 ORDER BY r.reserved_until NULLS LAST, r.run_id LIMIT {ROW_LIMIT}""", p)
        current = with_hold_status(current, held_reservations(con, now))
        upcoming = read_frame(con, f"""SELECT {cols} FROM runs r WHERE {where} AND r.reserved_gpu_hours IS NOT NULL
                 AND r.ended_at IS NULL AND r.reserved_from > $now
                 ORDER BY r.reserved_from, r.run_id LIMIT {ROW_LIMIT}""", p)
        over_base = (f"FROM runs r WHERE {where} AND r.ended_at >= $start AND r.ended_at < $end "
                     "AND r.actual_gpu_hours > r.reserved_gpu_hours")
        overrun_by_team = read_frame(con, f"""SELECT r.team, count(*) AS runs,
                 sum(r.actual_gpu_hours - r.reserved_gpu_hours) AS overrun_gpu_hours {over_base}
                 GROUP BY r.team ORDER BY overrun_gpu_hours DESC""", p)
        overruns = read_frame(con, f"""SELECT r.run_id, r.team, r.kind, r.reserved_gpu_hours, r.actual_gpu_hours,
                 r.actual_gpu_hours - r.reserved_gpu_hours AS overrun_gpu_hours, r.stop_reason, r.ended_at,
                 CASE WHEN r.estimate_source = 'requested' THEN '{REQUESTED_LABEL}' ELSE r.estimate_source END
                   AS estimate_source
                 {over_base} ORDER BY overrun_gpu_hours DESC, r.run_id LIMIT {ROW_LIMIT}""", p)
        blocked = read_frame(con, f"""SELECT count(*) FILTER (WHERE list_contains(d.reason_codes, 'cluster-capacity')
                   AND NOT list_has_any(d.reason_codes, ['capacity', 'retraining-protection'])) AS by_pool_only,
                 count(*) FILTER (WHERE list_has_any(d.reason_codes, ['capacity', 'retraining-protection']))
                   AS by_quota, count(*) AS deferred
                 FROM decisions d JOIN teams t ON t.team = d.team
                 WHERE d.state = 'defer' AND d.decided_at >= $start AND d.decided_at < $end AND {twhere}""",
                        {**tp, "start": p["start"], "end": p["end"]})
        view = forward_view(con, f, now)
        started = line_starts(con, f)
    calendar = view["calendar"]
    outlook = budget_outlook(f, db, now, view["holdings"])
    budget = shared_budget(budget, f, now)   # the authority's numbers, when the cluster names one
    return {"over_time": over_time, "quotas": quotas, **budget, **outlook, "current": current, "upcoming": upcoming,
            "overrun_by_team": overrun_by_team, "overruns": overruns, "line_starts": started, "blocked": blocked.iloc[0].to_dict(),
            **{k: v for k, v in view.items() if k != "holdings"},
            "over_committed_teams": sorted(set(calendar.loc[calendar["over_committed_gpus"] > 0, "team"]))}
