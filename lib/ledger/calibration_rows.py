"""The finished runs calibration reads, for the gate (one team and kind at a time: `calibration`),
the dashboard and the policy replay (every team at once, through `newest_cutoffs` and `CUT_SQL`).

Each scope reads only its newest runs: runs are stored roughly in the order they arrive, so a
window of the last days (NEWEST_FIRST_DAYS) is tried before the whole calibration window, with the
same answer (`newest_rows`, `newest_cutoffs`).
"""
from __future__ import annotations

from datetime import datetime, timedelta

from lib.gate.calibration import DEFAULT_MAX_RUNS, calibrate_scopes
from lib.gate.contracts import Calibration, CalibrationRow
from lib.gate.terms import CALIBRATION_STOPS, CENSORED_STOPS, KINDS

CALIBRATION_WINDOW_DAYS = 365
# Every team a run names: each write path registers a run's team in `teams` before the run (an
# import refuses an unknown team unless told to create it; the gate decides only for teams with a
# policy; the demo syncs data/teams.toml first), so the small table answers without reading runs.
KNOWN_TEAMS = "SELECT team FROM teams"


# The rows calibration reads, for the gate (one team and kind) and the dashboard (every team at
# once) alike: finished runs in the window ($since, $now] whose estimate was measured or stated (not
# 'requested') and whose stop reason says something about the estimate ($stops; $censored of them
# as censored). Parameters: `calibration_params`.
# CALIBRATION_ROW: which finished runs calibrate, whatever the window (a condition on a runs row).
CALIBRATION_ROW = ("estimated_gpu_hours > 0 AND actual_gpu_hours IS NOT NULL "
                   "AND estimate_source IS DISTINCT FROM 'requested' "
                   "AND list_contains($stops::VARCHAR[], stop_reason)")
CALIBRATION_ROWS_SQL = (
    "SELECT team, kind, run_id, ended_at, estimated_gpu_hours, actual_gpu_hours, "
    "list_contains($censored::VARCHAR[], stop_reason) AS censored, "
    "coalesce(least(reserved_from, started_at), ended_at) AS admitted_at "
    f"FROM runs WHERE ended_at > $since AND ended_at <= $now AND {CALIBRATION_ROW}")
CALIBRATION_ORDER = "ORDER BY ended_at DESC, run_id"  # most recent first; a scope keeps the first max_runs


def calibration_params(now: datetime, window_days: int = CALIBRATION_WINDOW_DAYS) -> dict:
    """The named parameters of CALIBRATION_ROWS_SQL for a calibration at `now`."""
    return {"since": now - timedelta(days=window_days), "now": now,
            "censored": list(CENSORED_STOPS), "stops": list(CALIBRATION_STOPS)}


def calibration(con, team: str, kind: str, now: datetime, *,
                window_days: int = CALIBRATION_WINDOW_DAYS, max_runs: int = DEFAULT_MAX_RUNS) -> Calibration:
    """lib.gate.calibration for `team`'s `kind` runs, reading CALIBRATION_ROWS_SQL one scope at a time
    (team × kind, team, everyone), each scope's `max_runs` most recent rows (`newest_rows`)."""
    params = calibration_params(now, window_days)

    def rows(scope_sql: str, scope_params: dict) -> list[CalibrationRow]:
        sql = (f"SELECT estimated_gpu_hours, actual_gpu_hours, censored, ended_at, admitted_at, kind "
               f"FROM ({CALIBRATION_ROWS_SQL}) WHERE {scope_sql} {CALIBRATION_ORDER} LIMIT $max_runs")
        got = newest_rows(con, sql, {**params, **scope_params, "max_runs": max_runs}, max_runs)
        # oldest first, ties as the store orders them, so the change search reads them in time order
        return [{"estimated_gpu_hours": e, "actual_gpu_hours": a, "censored": c, "ended_at": t,
                 "admitted_at": at, "kind": k} for e, a, c, t, at, k in reversed(got)]

    def scoped():
        yield "team×kind", rows("team = $team AND kind = $kind", {"team": team, "kind": kind})
        yield "team", rows("team = $team", {"team": team})
        yield "all", rows("TRUE", {})
    return calibrate_scopes(scoped())


# Days back from now in which a scope's newest runs are looked for first, before the whole window.
NEWEST_FIRST_DAYS = (7, 28, 112)


def newest_cutoffs(con, rows_sql: str, params: dict, need: int, teams: list[str]) -> dict[tuple[str, str], datetime]:
    """{(team, kind): since} for every team x kind with rows in `rows_sql` (calibration rows with
    team, kind and ended_at, over the window ($since, $now] of `params`): the latest of the
    newest-first starts (NEWEST_FIRST_DAYS before $now) whose window holds `need` of its rows, else
    the whole window's $since. Reading each team x kind from its since on gives its `need` newest
    rows and so every team's and everyone's `need` newest (each of those is among its own team x
    kind's newest). The scopes still short after the widest newest-first start are counted over the
    whole window for their `teams` only, so a busy ledger never reads a year of runs."""
    count = (f"SELECT team, kind, count(*) FROM ({rows_sql}) c "
             "WHERE $teams IS NULL OR list_contains($teams::VARCHAR[], team) GROUP BY ALL")
    starts = [params["now"] - timedelta(days=d) for d in NEWEST_FIRST_DAYS]
    cut: dict[tuple[str, str], datetime] = {}
    for since in [s for s in starts if s > params["since"]] + [params["since"]]:
        whole = since == params["since"]
        short = sorted({t for t in teams for k in KINDS if (t, k) not in cut})
        if not short:
            break
        q = {**params, "since": since, "teams": short if whole else None}
        for team, kind, n in con.execute(count, {k: v for k, v in q.items() if f"${k}" in count}).fetchall():
            if (team, kind) not in cut and (n >= need or whole):
                cut[(team, kind)] = since
    return cut


# newest_cutoffs' answer as a CTE `cut` (team, kind, cut_since); its parameters: `cut_params`
CUT_SQL = ("cut AS (SELECT unnest($cut_team::VARCHAR[]) AS team, unnest($cut_kind::VARCHAR[]) AS kind, "
           "unnest($cut_since::TIMESTAMP[]) AS cut_since)")


def cut_params(cut: dict[tuple[str, str], datetime], since: datetime) -> dict:
    """CUT_SQL's parameters for `cut` (newest_cutoffs), and $since moved to its earliest cutoff
    (`since` when there is none), so a query over calibration rows reads no older runs."""
    return {"since": min(cut.values(), default=since), "cut_team": [t for t, _ in cut],
            "cut_kind": [k for _, k in cut], "cut_since": list(cut.values())}


def newest_rows(con, sql: str, params: dict, limit: int) -> list[tuple]:
    """The rows of `sql` (a query over runs ended after $since, newest first, LIMIT `limit`) with
    $since moved forward to NEWEST_FIRST_DAYS before $now, narrowest first, while that leaves fewer
    than `limit` rows; the last try is the whole window ($since as given). The answer is the same
    as the whole window's: when a narrower window already holds `limit` rows, they are the newest.
    Why: runs are stored roughly in the order they arrive, so DuckDB skips the row groups that end
    before $since (zone maps); a busy scope then costs the few days that hold its newest runs, not
    a year of a 10-million-run history."""
    since, now = params["since"], params["now"]
    for days in NEWEST_FIRST_DAYS:
        nearer = now - timedelta(days=days)
        if nearer <= since:
            break
        got = con.execute(sql, {**params, "since": nearer}).fetchall()
        if len(got) >= limit:
            return got
    return con.execute(sql, params).fetchall()
