"""Overview's read model: the period's headline numbers against the previous period's, spend per
capacity type, deferred requests by reason, and reserved against used GPU-hours per day and team.
"""
from __future__ import annotations

import datetime as dt

import pandas as pd

from lib.dashboard.filters import Filters
from lib.dashboard.reading import read_frame, one_row, period_params, reader
from lib.dashboard.run_sql import ANCHOR, IDLE_GPU_HOURS, anchored
from lib.gate.terms import utcnow


SPEND_COLUMNS = ("reserved_gpu_hours", "used_gpu_hours", "idle_gpu_hours", "closed_window_gpu_hours", "runs")


def _overview_metrics(con, f: Filters, now: dt.datetime) -> tuple[dict, pd.DataFrame]:
    """(the period's headline numbers, its spend per capacity type). The headline GPU-hours are the
    sums of the per-capacity rows, so money priced per capacity type adds up to them."""
    where, p = f.where("r")
    p.update(period_params(f), now=now)
    by_capacity = read_frame(con, f"""
      WITH x AS (SELECT r.*, {IDLE_GPU_HOURS} FROM {anchored(where)})
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
        reasons = read_frame(con, f"""
          SELECT reason, count(*) FILTER (WHERE decided_at >= $mid) AS requests,
                 count(*) FILTER (WHERE decided_at < $mid) AS previous_requests
          FROM (SELECT unnest(d.reason_codes) AS reason, d.decided_at FROM decisions d
                WHERE d.state = 'defer' AND d.decided_at >= $start AND d.decided_at < $end AND {dwhere})
          GROUP BY reason ORDER BY requests DESC, reason""", dp)
        where, p = f.where("r")
        p.update(period_params(f))
        daily = read_frame(con, f"""
          SELECT {ANCHOR}::DATE AS day, r.team,
                 coalesce(sum(r.reserved_gpu_hours), 0) AS reserved_gpu_hours,
                 coalesce(sum(r.actual_gpu_hours), 0) AS used_gpu_hours
          FROM {anchored(where)}
          GROUP BY ALL ORDER BY day, r.team""", p)
    return {"current": cur, "previous": prev, "deferred_by_reason": reasons, "daily": daily,
            "spend_by_capacity": cur_by_capacity, "previous_spend_by_capacity": prev_by_capacity}
