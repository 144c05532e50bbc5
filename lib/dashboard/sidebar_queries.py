"""What the sidebar's filters offer (the teams, the span of the data) and the ledger's counts."""
from __future__ import annotations

from lib.dashboard.reading import read_frame, one_row, reader
from lib.ledger.calibration_rows import KNOWN_TEAMS


def sidebar_options(db=None) -> dict:
    """Teams (from the policy table and the runs), the span of the data, and the run count."""
    with reader(db) as con:
        teams = read_frame(con, f"{KNOWN_TEAMS} ORDER BY 1")
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
