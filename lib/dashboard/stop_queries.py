"""The Stops and promotion page's read model: runs by stop reason, runs stopped at a limit, holdout
over-reads, and whether the period's production candidates may be promoted.
"""
from __future__ import annotations

import datetime as dt

import pandas as pd

from lib.dashboard.filters import Filters
from lib.dashboard.reading import read_frame, one_row, period_params, reader
from lib.dashboard.run_sql import ROW_LIMIT
from lib.gate.promotion import promotion_status
from lib.gate.terms import utcnow


def stops_promotion(f: Filters, db=None, now: dt.datetime | None = None) -> dict:
    """Runs by stop reason; runs stopped at a limit (incomplete, unpromotable) with their last
    valid checkpoint; holdout over-reads; promotion status of the period's production candidates."""
    now = now or utcnow()
    where, p = f.where("r")
    p.update(period_params(f))
    ended = f"FROM runs r WHERE {where} AND r.ended_at >= $start AND r.ended_at < $end"
    with reader(db) as con:
        by_reason = read_frame(con, f"""SELECT coalesce(r.stop_reason, 'unknown') AS stop_reason, r.team, count(*) AS runs,
                 coalesce(sum(r.actual_gpu_hours), 0) AS actual_gpu_hours {ended} GROUP BY ALL
                 ORDER BY runs DESC, stop_reason, team""", p)
        limit_counts = one_row(con, f"SELECT count(*) AS runs {ended} AND r.stop_reason IN ('budget', 'wall-clock')", p)
        limit_stopped = read_frame(con, f"""SELECT r.run_id, r.team, r.kind, r.stop_reason, r.actual_gpu_hours,
                 r.budget_gpu_hours, coalesce(r.artifact_status, 'incomplete') AS artifact_status,
                 r.last_valid_checkpoint, r.ended_at
                 {ended} AND r.stop_reason IN ('budget', 'wall-clock') ORDER BY r.ended_at DESC, r.run_id
                 LIMIT {ROW_LIMIT}""", p)
        over_reads = read_frame(con, f"""SELECT r.run_id, r.team, r.kind, r.holdout_reads,
                 coalesce(r.holdout_allowance, 0) AS holdout_allowance, r.stop_reason, r.ended_at
                 {ended} AND r.holdout_reads > coalesce(r.holdout_allowance, 0)
                 ORDER BY r.holdout_reads - coalesce(r.holdout_allowance, 0) DESC, r.run_id LIMIT {ROW_LIMIT}""", p)
        over_read_count = one_row(con, f"SELECT count(*) AS runs {ended} AND r.holdout_reads > coalesce(r.holdout_allowance, 0)", p)
        candidates = read_frame(con, f"""SELECT r.* {ended} AND r.kind = 'production'
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
