"""Policy replay over the ledger: read a window's recorded requests and the history they need, then
decide them again under proposed team policies (lib.planning.replay.passes). Opens the ledger read-only
and never writes. Also what a proposal is made from (`ledger_teams_file`: the ledger's policies, snapshots
and prices; lib.ledger.teams_proposal writes the proposal as a teams file).
"""
from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

from lib.gate.calibration import DEFAULT_MAX_RUNS, DEFAULT_WINDOW_DAYS
from lib.gate.contracts import Policy
from lib.gate.terms import InputError, month_start, naive_utc, utcnow
from lib.ledger.connection import ledger_path, open_ledger
from lib.ledger.calibration_rows import (CALIBRATION_ROW, CALIBRATION_ROWS_SQL, CUT_SQL, KNOWN_TEAMS, calibration_params,
                                         cut_params, newest_cutoffs)
from lib.ledger.cluster_windows import read_windows
from lib.ledger.state import MEASURED_EVENTS, MIN_RATE_RUNS, pool_sizes, run_interruptions, team_policy
from lib.ledger.teams_file import COLOUR_KEY
from lib.planning.replay.collector import collector_paused
from lib.planning.replay.data import (BackgroundHolding, RecordedRequest, RecordedWorld, ReplayResult, ReplayWindow,
                                      RunRecord)
from lib.planning.replay.kept import KEPT_SUFFIX
from lib.planning.replay.passes import replay

DEFAULT_WINDOW = timedelta(weeks=4)
_US = timedelta(microseconds=1)
_FAR_PAST, _FAR_FUTURE = datetime(1970, 1, 1), datetime(9999, 1, 1)

# the runs lib.ledger.state.interruption_rate counts (given their end is in its window): their
# interruptions as it counts them, else NULL; needs _MEASURED joined to the run r
_RATE_INTERRUPTIONS = ("CASE WHEN r.capacity = 'preemptible' AND r.actual_gpu_hours > 0 "
                       f"THEN {run_interruptions('r', 'm')} END")
_MEASURED = f"LEFT JOIN {MEASURED_EVENTS} m ON m.run_id = r.run_id"

# the run IDs the window's requests control: named by a request in the window and admitted inside
# it (or never admitted); every other run is background, as recorded
_NAMED = """
WITH win AS (SELECT DISTINCT run_id FROM decisions
             WHERE decided_at >= $start AND decided_at < $end AND run_id IS NOT NULL),
adm AS (SELECT run_id, max(decided_at) AS admitted_at FROM decisions
        WHERE state = 'admit' AND run_id IN (SELECT run_id FROM win) GROUP BY run_id)
SELECT r.*, coalesce(a.admitted_at, r.reserved_from) AS admitted_at,
       (r.reserved_gpu_hours IS NULL OR coalesce(a.admitted_at, r.reserved_from) IS NULL
        OR coalesce(a.admitted_at, r.reserved_from) >= $start) AS controlled
FROM runs r JOIN win USING (run_id) LEFT JOIN adm a USING (run_id)
"""
# read_world reads the named runs once into this temp table; the queries after it start with:
_CONTROLLED = ("WITH named AS (SELECT * FROM replay_named), "
               "controlled AS (SELECT run_id FROM replay_named WHERE controlled)")
# a calibration row's (estimate, censored) from a runs row's own columns (NULL: not a calibration row)
_CALIBRATION_FLAGS = (f"CASE WHEN ended_at IS NOT NULL AND {CALIBRATION_ROW} THEN estimated_gpu_hours END, "
                      f"CASE WHEN ended_at IS NOT NULL AND {CALIBRATION_ROW} "
                      "THEN list_contains($censored::VARCHAR[], stop_reason) END")


def window_bounds(start=None, end=None, now=None) -> tuple[datetime, datetime]:
    """[start, end) of a replay window (naive UTC): end defaults to now, start to 4 weeks before end."""
    end = naive_utc(end) or naive_utc(now) or utcnow()
    start = naive_utc(start) or end - DEFAULT_WINDOW
    if start >= end:
        raise InputError(f"the window starts ({start.isoformat()}) at or after it ends ({end.isoformat()})")
    return start, end


def ledger_policies(con) -> dict[str, Policy]:
    """Every team's policy in the ledger, team -> Policy."""
    return {t: team_policy(con, t) for (t,) in con.execute("SELECT team FROM teams ORDER BY team").fetchall()}


def _calibration_flag_sql(name: str) -> str:
    """CALIBRATION_ROWS_SQL (the gate's rule for which finished runs calibrate) as a CTE `name`."""
    return f"{name} AS ({CALIBRATION_ROWS_SQL})"


def read_world(con, start: datetime, end: datetime, *, max_runs: int = DEFAULT_MAX_RUNS,
               window_days: int = DEFAULT_WINDOW_DAYS) -> tuple[list[RecordedRequest], RecordedWorld]:
    """(requests, world) for a replay of [start, end): the window's decisions in time order, the runs
    they name, the background reservations and run ends the replay world keeps, and the snapshots.

    Background ends before `start` are only those the replay can still need: the runs that ended in
    start's month (period spend), of the calibration rows in the 365 days before, the `max_runs` most
    recent of each scope (older ones are never among the most recent again), and the preemptible
    runs of the interruption rate that leave its window during the replay (those that stay in it
    all along are summed per team in `rate_base`)."""
    p = {"start": start, "end": end}
    requests: list[RecordedRequest] = [
        {"decision_id": r[0], "decided_at": r[1], "run_id": r[2], "team": r[3], "kind": r[4],
         "request_json": r[5], "state": r[6], "reason_codes": list(r[7] or []), "reserved_gpu_hours": r[8]}
        for r in con.execute(
            "SELECT decision_id, decided_at, run_id, team, kind, request_json, state, reason_codes, "
            "reserved_gpu_hours FROM decisions WHERE decided_at >= $start AND decided_at < $end "
            "ORDER BY decided_at, decision_id", p).fetchall()]

    con.execute(f"CREATE OR REPLACE TEMP TABLE replay_named AS {_NAMED}", p)
    try:
        return requests, _read_world(con, start, end, p, max_runs, window_days)
    finally:
        con.execute("DROP TABLE IF EXISTS replay_named")


def _read_world(con, start: datetime, end: datetime, p: dict, max_runs: int, window_days: int) -> RecordedWorld:
    """read_world's world, once the named runs are in the temp table replay_named."""
    def run(sql: str, params: dict):
        return con.execute(sql, {k: v for k, v in params.items() if f"${k}" in sql})
    flags = calibration_params(_FAR_FUTURE)
    runs: dict[str, RunRecord] = {}
    for r in con.execute(
            "SELECT r.run_id, team, kind, gpus, reserved_until, reserved_gpu_hours, started_at, "
            f"ended_at, actual_gpu_hours, admitted_at, controlled, {_CALIBRATION_FLAGS}, "
            f"{_RATE_INTERRUPTIONS}, r.capacity FROM replay_named r {_MEASURED}",
            {"stops": flags["stops"], "censored": flags["censored"]}).fetchall():
        runs[r[0]] = {"run_id": r[0], "team": r[1], "kind": r[2], "gpus": r[3], "reserved_until": r[4],
                      "reserved_gpu_hours": r[5], "started_at": r[6], "ended_at": r[7],
                      "actual_gpu_hours": r[8], "admitted_at": r[9], "controlled": bool(r[10]),
                      "booked_at": None if r[10] else (r[9] or r[6] or r[7] or _FAR_PAST),
                      "calibration": (r[11], bool(r[12])) if r[11] is not None else None,
                      "interruptions": r[13], "capacity": r[14]}

    first_month = month_start(start)
    window = timedelta(days=window_days)
    # calibration rows that ended in the window before start: each scope's most recent (older ones are
    # never among the most recent again), each team x kind read from its newest_cutoffs start on
    pre = calibration_params(start - _US, window_days)
    background = (f"{_CONTROLLED}, {_calibration_flag_sql('cal')} SELECT * FROM cal "
                  "WHERE run_id NOT IN (SELECT run_id FROM controlled)")
    cut = newest_cutoffs(con, background, pre, max_runs, [t for (t,) in con.execute(KNOWN_TEAMS).fetchall()])
    top = [r[0] for r in run(
        f"{_CONTROLLED}, {_calibration_flag_sql('cal')}, {CUT_SQL} "
        "SELECT run_id FROM cal JOIN cut USING (team, kind) "
        "WHERE cal.ended_at > cut.cut_since AND run_id NOT IN (SELECT run_id FROM controlled) "
        "QUALIFY (row_number() OVER (PARTITION BY team, kind ORDER BY ended_at DESC, run_id) <= $max_runs "
        "OR row_number() OVER (PARTITION BY team ORDER BY ended_at DESC, run_id) <= $max_runs "
        "OR row_number() OVER (ORDER BY ended_at DESC, run_id) <= $max_runs)",
        {**pre, **cut_params(cut, pre["since"]), "max_runs": max_runs}).fetchall()] if cut else []
    # background ends, one by one: from start's month on (spend), those top rows, and the rate's runs
    # that leave its window during the replay; the rate's runs that stay in it all along are summed
    flags = calibration_params(end, window_days)
    flags["since"] = start - window - _US
    stay_from = end - window
    rows = run(
        f"{_CONTROLLED} "
        f"SELECT r.ended_at, r.team, r.kind, r.actual_gpu_hours, {_CALIBRATION_FLAGS}, r.run_id, "
        f"{_RATE_INTERRUPTIONS} AS rate_n FROM runs r {_MEASURED} "
        "WHERE r.ended_at > $since AND r.ended_at <= $end AND r.run_id NOT IN (SELECT run_id FROM controlled) "
        "AND (r.ended_at >= $month OR r.run_id IN (SELECT unnest($top::VARCHAR[])) "
        f"OR ({_RATE_INTERRUPTIONS} IS NOT NULL AND r.ended_at <= $stay_from))",
        {"since": flags["since"], "end": end, "stops": flags["stops"], "censored": flags["censored"],
         "month": first_month, "top": top, "stay_from": stay_from}).fetchall()
    # end order; ties newest-run-ID-first so each scope's last rows are the SQL's first (ended_at DESC, run_id)
    rows.sort(key=lambda r: r[6], reverse=True)
    rows.sort(key=lambda r: r[0])
    ends = [(r[0], r[1], r[2], r[3], (r[4], bool(r[5])) if r[4] is not None else None,
             r[7] if r[7] is not None and not stay_from < r[0] < start else None) for r in rows]
    # the GPU-hours summed in run ID order (a plain sum adds in whatever order the threads finish, so its
    # last bits, and a kept replay's key, would change from one read to the next)
    rate_base = {r[0]: (int(r[1]), float(r[2]), int(r[3])) for r in run(
        f"{_CONTROLLED} SELECT r.team, count(*), list_sum(list(r.actual_gpu_hours ORDER BY r.run_id)), "
        f"sum({_RATE_INTERRUPTIONS}) FROM runs r {_MEASURED} "
        f"WHERE {_RATE_INTERRUPTIONS} IS NOT NULL AND r.ended_at > $stay_from AND r.ended_at < $start "
        "AND r.run_id NOT IN (SELECT run_id FROM controlled) GROUP BY r.team",
        {**p, "stay_from": stay_from}).fetchall()}

    holdings: list[BackgroundHolding] = [
        {"start": r[5] or _FAR_PAST, "release": r[7],
         "reservation": {"run_id": r[0], "team": r[1], "kind": r[2], "gpus": int(r[3]),
                         "reserved_gpu_hours": float(r[4]), "reserved_from": r[5], "reserved_until": r[6],
                         "capacity": r[8]}}
        for r in run(
            f"{_CONTROLLED} SELECT run_id, team, kind, gpus, reserved_gpu_hours, reserved_from, "
            "CASE WHEN reserved_until IS NULL OR ended_at > reserved_until THEN coalesce(ended_at, reserved_until) "
            "ELSE reserved_until END, ended_at AS release, capacity FROM runs "
            "WHERE reserved_gpu_hours IS NOT NULL AND run_id NOT IN (SELECT run_id FROM controlled) "
            # held at start (lib.ledger.state.held_condition: a started run until it ends), one column at
            # a time so DuckDB skips the row groups that ended before
            "AND (ended_at IS NULL OR ended_at > $start) "
            "AND (reserved_until IS NULL OR reserved_until > $start OR coalesce(started_at, reserved_from) <= $start) "
            "AND (reserved_from IS NULL OR reserved_from < $end) "
            "ORDER BY reserved_from NULLS FIRST, run_id", p).fetchall()]
    snapshots: dict = {}
    for snap, team in con.execute("SELECT snapshot, team FROM snapshots").fetchall():
        snapshots.setdefault(team, set()).add(snap)
    return {"holdings": holdings, "ends": ends, "runs": runs, "snapshots": snapshots,
            "rate_base": rate_base, "min_rate_runs": MIN_RATE_RUNS,
            "pools": pool_sizes(con), "windows": read_windows(con, start)}


READ_MEMORY_LIMIT = "256MB"   # DuckDB's buffer limit while a replay reads its world


@collector_paused()
def replay_ledger(db=None, proposed: list[dict] | None = None, *, start=None, end=None, now=None,
                  levels: dict[str, float] | None = None, refresh="auto", progress=None,
                  timeout_s: float = 10.0, pools: dict[str, int] | None = None, keep: bool = False) -> ReplayResult:
    """Replay the ledger's recorded requests of [start, end) (default: the 4 weeks up to now) under
    the `proposed` team policies (teams-file dicts; every other team keeps its ledger policy), with
    calibration `levels` per team and the pools `pools` (capacity type -> accelerators, instead of
    the ledger's [pools]); and beside it the baseline, the ledger's own policies and pools replayed by
    the same engine (one pass when the proposal is the same). Opens the ledger read-only and never
    writes it. keep: keep the passes that do not depend on the proposal (and the calibrations fitted)
    in the file `kept_file` beside the ledger, so that a later replay of the same window (another pool,
    another proposal) runs only the proposal's pass (lib.planning.replay.kept); same result either way."""
    if progress:
        progress(0.0, "reading the ledger")
    return replay_read(read_window(db, start=start, end=end, now=now, timeout_s=timeout_s), proposed,
                       levels=levels, refresh=refresh, pools=pools, progress=progress,
                       kept=kept_file(db) if keep else None)


def kept_file(db=None) -> Path:
    """The file beside the ledger `db` that keeps replay passes by content (lib.planning.replay.kept)."""
    path = ledger_path(db)
    return path.with_name(path.name + KEPT_SUFFIX)


def replay_read(window: ReplayWindow, proposed: list[dict] | None = None, *, levels=None, refresh="auto",
                pools=None, progress=None, kept: Path | None = None) -> ReplayResult:
    """`replay_ledger` on a window already read (`read_window`), so that several proposals over one window
    read the ledger once. kept: see lib.planning.replay.passes.replay."""
    policies = dict(window.policies)
    for t in proposed or ():
        policies[t["team"]] = {k: v for k, v in t.items() if k != COLOUR_KEY}
    say = progress or (lambda fraction, message: None)
    say(0.05, f"replaying {len(window.requests):,} requests")
    return replay(window.requests, policies, window.world, levels=levels, refresh=refresh, window=window.span,
                  progress=say, baseline=window.policies, pools=pools, kept=kept)


@collector_paused()
def read_window(db=None, *, start=None, end=None, now=None, timeout_s: float = 10.0) -> ReplayWindow:
    """The window [start, end) of a replay, read once: its recorded requests, their world, the ledger's
    policies and the window's span."""
    start, end = window_bounds(start, end, now)
    with open_ledger(db, read_only=True, timeout_s=timeout_s, create=False) as con:
        current = ledger_policies(con)
        # DuckDB's cache of the blocks read is not needed once the world is in Python's hands
        con.execute(f"SET memory_limit = '{READ_MEMORY_LIMIT}'")
        requests, world = read_world(con, start, end)
    return ReplayWindow(requests, world, current, {"from": start, "to": end})


def ledger_teams_file(db=None, *, timeout_s: float = 10.0) -> tuple[dict[str, dict], list[dict], dict]:
    """(policies, snapshots, prices) as the ledger holds them, for a downloadable teams.toml."""
    with open_ledger(db, read_only=True, timeout_s=timeout_s, create=False) as con:
        policies = ledger_policies(con)
        colours = dict(con.execute(f"SELECT team, {COLOUR_KEY} FROM teams").fetchall())
        snaps = [{"snapshot": s, "team": t, "created_at": c} for s, t, c in con.execute(
            "SELECT snapshot, team, created_at FROM snapshots ORDER BY snapshot").fetchall()]
        price_rows = con.execute("SELECT capacity, price_per_gpu_hour, currency FROM prices").fetchall()
    for team, colour in colours.items():
        if team in policies:
            policies[team][COLOUR_KEY] = colour
    prices = {"currency": price_rows[0][2] if price_rows else None,
              "per_gpu_hour": {c: p for c, p, _ in price_rows}}
    return policies, snaps, prices


def held_p90(db=None, *, start: datetime, end: datetime, timeout_s: float = 10.0) -> dict[str, int]:
    """Per team of the ledger: the 90th percentile (nearest rank) of the accelerators its reservations
    held over [start, end), sampled at every hour's start (a reservation holds from reserved_from until
    its run ended, as the gate holds it: lib.ledger.state.held_condition; a team holding nothing in an
    hour counts 0)."""
    sql = """
    WITH hours AS (SELECT unnest(generate_series($start, $end - INTERVAL 1 MICROSECOND, INTERVAL 1 HOUR)) AS t),
    spans AS (SELECT team, gpus, reserved_from AS s, coalesce(ended_at, $end) AS e
              FROM runs WHERE reserved_gpu_hours IS NOT NULL AND reserved_from < $end
              AND (ended_at IS NULL OR ended_at > $start)),
    held AS (SELECT h.t, sp.team, sum(sp.gpus) AS gpus FROM hours h JOIN spans sp ON sp.s <= h.t AND sp.e > h.t
             GROUP BY ALL)
    SELECT tm.team, quantile_disc(coalesce(held.gpus, 0), 0.9)
    FROM teams tm CROSS JOIN hours h LEFT JOIN held ON held.team = tm.team AND held.t = h.t
    GROUP BY tm.team ORDER BY tm.team"""
    with open_ledger(db, read_only=True, timeout_s=timeout_s, create=False) as con:
        return {team: int(gpus or 0) for team, gpus in con.execute(sql, {"start": start, "end": end}).fetchall()}
