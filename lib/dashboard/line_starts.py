"""The requests the gate's line started: each one admitted at its turn after waiting, with the start its
last deferral planned for it beside the moment it was admitted and the moment its run started, so a
planner sees whether the line kept its promise. Read from the decisions: an admit that carries
`waiting_since` (the queue's own admit: `python -m lib queue admit`, the gate server's queue keeper)
and the `planned_start` its latest deferral named. Hours: `waited_hours` (waiting since -> admitted),
`late_hours` (planned start -> admitted; negative: earlier than planned).
"""
from __future__ import annotations

import pandas as pd

from lib.dashboard.filters import Filters
from lib.dashboard.reading import read_frame
from lib.dashboard.run_sql import ROW_LIMIT

LINE_START_COLUMNS = ["admitted_at", "run_id", "team", "kind", "gpus", "planned_start", "started_at",
                      "waiting_since", "waited_hours", "late_hours"]


def line_starts(con, f: Filters) -> pd.DataFrame:
    """The queue's admits of the period (decided within it; the team and kind filters apply), newest
    first, at most ROW_LIMIT rows (LINE_START_COLUMNS)."""
    where, p = f.where("d", capacity_col=None)
    return read_frame(con, f"""
      WITH admits AS (
        SELECT d.run_id, d.team, d.kind, d.decided_at AS admitted_at,
               TRY_CAST(d.request_json->>'gpus' AS INTEGER) AS gpus,
               TRY_CAST(d.decision_json->>'waiting_since' AS TIMESTAMP) AS waiting_since
        FROM decisions d
        WHERE d.state = 'admit' AND d.decided_at >= $start AND d.decided_at < $end AND {where}
          AND d.decision_json->>'waiting_since' IS NOT NULL),
      promised AS (
        SELECT a.run_id, max_by(TRY_CAST(x.decision_json->>'planned_start' AS TIMESTAMP), x.decided_at) AS planned_start
        FROM admits a JOIN decisions x ON x.run_id = a.run_id AND x.state = 'defer' AND x.decided_at <= a.admitted_at
        GROUP BY a.run_id)
      SELECT a.admitted_at, a.run_id, a.team, a.kind, a.gpus, p.planned_start, r.started_at, a.waiting_since,
             epoch(a.admitted_at - a.waiting_since) / 3600.0 AS waited_hours,
             epoch(a.admitted_at - p.planned_start) / 3600.0 AS late_hours
      FROM admits a LEFT JOIN promised p USING (run_id) LEFT JOIN runs r USING (run_id)
      ORDER BY a.admitted_at DESC, a.run_id LIMIT {ROW_LIMIT}""", {**p, "start": f.start, "end": f.end})
