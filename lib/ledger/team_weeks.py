"""team_weeks: each team's GPU-hours per week, kept beside runs so the forecast reads a few hundred
rows instead of the whole history.

A week is the Monday (UTC) of the week a run started; a run counts its actual GPU-hours once it has
ended, else its reserved GPU-hours (runs that never started count nowhere): the live weekly usage
the demand forecast rests on (lib.ledger.forecast.weekly_usage). Every write that can change
it recomputes the weeks it touched from runs, inside its own transaction: an import (the weeks of
its runs before and after), a finished run (its week), the demo build (all). An admit books a run
that has not started, so it changes no week. `rebuild` recomputes every week: what a write path
keeps must equal it (tests/test_team_weeks.py).
"""
from __future__ import annotations

from datetime import date, timedelta

WEEK = "date_trunc('week', started_at)::DATE"
GPU_HOURS = ("sum(CASE WHEN ended_at IS NOT NULL THEN coalesce(actual_gpu_hours, 0) "
             "ELSE coalesce(reserved_gpu_hours, 0) END)")
REFRESH_AT_MOST = 2000   # runs a write may change and recompute only their weeks; one changing more rebuilds all
REBUILD = ("DELETE FROM team_weeks",
           f"INSERT INTO team_weeks SELECT team, {WEEK}, {GPU_HOURS} FROM runs WHERE started_at IS NOT NULL GROUP BY ALL")


def rebuild(con) -> None:
    """Recompute every team's every week from runs."""
    for statement in REBUILD:
        con.execute(statement).fetchall()


def weeks_of(con, run_ids_sql: str, params=None) -> set[tuple[str, date]]:
    """The (team, week) of the runs whose IDs `run_ids_sql` (a query of one column) gives, as they
    stand now (started runs only)."""
    return set(con.execute(f"SELECT DISTINCT team, {WEEK} FROM runs WHERE started_at IS NOT NULL "
                           f"AND run_id IN ({run_ids_sql})", params or []).fetchall())


def refresh(con, weeks: set[tuple[str, date]]) -> None:
    """Recompute these (team, week) rows from runs (reading only the runs that started in their span)."""
    if not weeks:
        return
    teams, mondays = [t for t, _ in weeks], [w for _, w in weeks]
    p = {"teams": teams, "weeks": mondays, "first": min(mondays), "end": max(mondays) + timedelta(days=7)}
    con.execute("DELETE FROM team_weeks WHERE (team, week) IN "
                "(SELECT unnest($teams::VARCHAR[]), unnest($weeks::DATE[]))", {"teams": teams, "weeks": mondays}).fetchall()
    con.execute(f"""INSERT INTO team_weeks
        WITH wanted AS (SELECT unnest($teams::VARCHAR[]) AS team, unnest($weeks::DATE[]) AS week)
        SELECT r.team, {WEEK} AS week, {GPU_HOURS}
        FROM runs r SEMI JOIN wanted w ON w.team = r.team AND w.week = {WEEK}
        WHERE r.started_at >= $first AND r.started_at < $end GROUP BY ALL""", p).fetchall()
