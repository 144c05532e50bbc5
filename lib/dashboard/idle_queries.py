"""The Idle reserved capacity page's read model: idle reserved GPU-hours by week, team, cause and
capacity type, and the reservations that wasted most.
"""
from __future__ import annotations

import datetime as dt

from lib.dashboard.filters import Filters
from lib.dashboard.reading import read_frame, period_params, reader
from lib.dashboard.run_sql import IDLE_GPU_HOURS, ROW_LIMIT
from lib.gate.terms import utcnow


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
                 r.ended_at, {IDLE_GPU_HOURS}
          FROM runs r WHERE {where} AND r.reserved_from >= $start AND r.reserved_from < $end
            AND r.reserved_until <= $now)"""
        weekly = read_frame(con, idle + """
          SELECT date_trunc('week', reserved_from)::DATE AS week, team,
                 sum(late_start_gpu_hours) AS late_start_gpu_hours,
                 sum(early_end_gpu_hours) AS early_end_gpu_hours,
                 sum(never_used_gpu_hours) AS never_used_gpu_hours,
                 sum(window_gpu_hours) AS reserved_gpu_hours
          FROM idle GROUP BY ALL ORDER BY week, team""", p)
        top = read_frame(con, idle + f"""
          SELECT run_id, team, kind, gpus, reserved_from, reserved_until, started_at, ended_at,
                 late_start_gpu_hours, early_end_gpu_hours, never_used_gpu_hours,
                 late_start_gpu_hours + early_end_gpu_hours + never_used_gpu_hours AS idle_gpu_hours
          FROM idle WHERE late_start_gpu_hours + early_end_gpu_hours + never_used_gpu_hours > 0
          ORDER BY idle_gpu_hours DESC, run_id LIMIT {ROW_LIMIT}""", p)
        by_team_capacity = read_frame(con, idle + """
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
