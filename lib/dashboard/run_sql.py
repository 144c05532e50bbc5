"""The SQL the dashboard's read models share: where a run sits in time, its idle reserved GPU-hours,
and how many rows a detail table shows.

Every read model opens the ledger read-only for its one unit of work (lib.dashboard.reading), runs
its queries, closes the file, and returns plain data: pandas DataFrames and numbers. Nothing keeps a
handle between calls, so the command line and a scheduler's submit hook can write between two page
renders. User values (teams, kinds, dates) are always bound parameters.

Where a row sits in time (the period filters):
- a reservation / run by the start of its reservation window: coalesce(reserved_from, started_at,
  ended_at) (`ANCHOR`);
- spend, stops and estimate accuracy by when the run ended (ended_at);
- decisions by decided_at.
Idle reserved capacity (charged to the team that held the reservation), per run, in GPU-hours
(gpus x hours) inside its window [reserved_from, reserved_until] (`IDLE_GPU_HOURS`):
- late start  = started_at - reserved_from (started_at clamped into the window);
- early end   = reserved_until - ended_at (ended_at clamped into the window);
- never used  = the whole window, when started_at is NULL and the window has passed.
Estimates with estimate_source = 'requested' are a time limit x GPUs: "requested, not measured"
(lib.dashboard.labels.REQUESTED_LABEL). They are shown marked as such and left out of error statistics.
"""
from __future__ import annotations

ROW_LIMIT = 500               # rows a detail table shows at most (totals are always complete)

ANCHOR = "coalesce(r.reserved_from, r.started_at, r.ended_at)"


def anchored(where: str) -> str:
    """The runs of the period ($start, $end) by their anchor that also meet `where` (alias r), as a
    subquery aliased r. The period is tested on reserved_from itself, so DuckDB skips the stored row
    groups that lie outside it (zone maps work on a raw column, not on an expression of it); only
    the runs without a reservation start fall back on the started and ended times."""
    return (f"(SELECT * FROM runs r WHERE {where} AND r.reserved_from >= $start AND r.reserved_from < $end "
            f"UNION ALL SELECT * FROM runs r WHERE {where} AND r.reserved_from IS NULL "
            "AND coalesce(r.started_at, r.ended_at) >= $start AND coalesce(r.started_at, r.ended_at) < $end) r")


_H = "(epoch_us({b}) - epoch_us({a})) / 3600e6"          # hours between two timestamps
IDLE_GPU_HOURS = f"""
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
