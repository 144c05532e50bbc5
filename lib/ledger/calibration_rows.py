"""The finished runs calibration reads, for the gate (one team and kind at a time: `calibration`),
the dashboard and the policy replay (every team at once, through `newest_cutoffs` and `CUT_SQL`).

Each scope reads only its newest runs: runs are stored roughly in the order they arrive, so a
window of the last days (NEWEST_FIRST_DAYS) is tried before the whole calibration window, with the
same answer (`newest_rows`, `newest_cutoffs`).
"""
from __future__ import annotations

import hashlib
from collections import OrderedDict
from datetime import datetime, timedelta
from typing import Iterable, Iterator

import pandas as pd

from lib.gate.calibration import DEFAULT_MAX_RUNS, calibrate_scopes
from lib.gate.contracts import Calibration, CalibrationRow
from lib.gate.terms import CALIBRATION_STOPS, CENSORED_STOPS, KINDS
from lib.ledger.connection import used_params

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


_CALIBRATED: OrderedDict[str, Calibration] = OrderedDict()   # ScopeRows.calibrate's, least recently used first
_CALIBRATED_KEPT = 512


class ScopeRows:
    """Every team's calibration rows at `now`, read at once: each team x kind's, each team's and
    everyone's `max_runs` most recent (the scopes `calibration` reads one at a time), and with
    `replay` > 0 each team x kind's `max_runs + replay` most recent as log ratios in time order
    (`replay_frame`, for lib.gate.backtest.backtest). A few queries in all, whatever the number
    of team x kinds asked about: the dashboard's calibration table and the forward plan's
    calibrations read this way, and give what `calibration` gives for each team x kind."""

    def __init__(self, con, now: datetime, *, max_runs: int = DEFAULT_MAX_RUNS,
                 window_days: int = CALIBRATION_WINDOW_DAYS, replay: int = 0):
        p = {**calibration_params(now, window_days), "max_runs": max_runs}
        known = [t for (t,) in con.execute(f"{KNOWN_TEAMS} ORDER BY 1").fetchall()]
        # each team x kind's newest rows only (enough for the replay and for the team and everyone
        # scopes, whose newest rows are among their team x kinds' newest)
        cut = newest_cutoffs(con, CALIBRATION_ROWS_SQL, p, max_runs + replay, known)
        sql = (f"CREATE OR REPLACE TEMP TABLE cal AS WITH {CUT_SQL} SELECT c.* FROM ({CALIBRATION_ROWS_SQL}) c "
               "JOIN cut USING (team, kind) WHERE c.ended_at > cut.cut_since")
        con.execute(sql, used_params(sql, {**p, **cut_params(cut, p["since"])}))
        try:
            self.by_kind = self._newest(con, "team, kind", "$max_runs", p)
            self.by_team = self._newest(con, "team", "$max_runs", p)
            self.everyone = con.execute(f"SELECT {self._COLS} FROM cal c {self._ORDER} LIMIT $max_runs",
                                        {"max_runs": max_runs}).df()
            self.replay_frame = con.execute(f"""
              WITH cut AS (SELECT team, kind, list_min(max_by(ended_at, ended_at, $n)) AS cutoff
                           FROM cal GROUP BY team, kind)
              SELECT c.team, c.kind, c.ended_at, ln(c.actual_gpu_hours / c.estimated_gpu_hours) AS r,
                     c.censored, c.admitted_at AS decided_at
              FROM cal c JOIN cut ON c.team = cut.team AND c.kind = cut.kind AND c.ended_at >= cut.cutoff
              QUALIFY row_number() OVER (PARTITION BY c.team, c.kind {self._ORDER}) <= $n
              ORDER BY c.team, c.kind, c.ended_at, c.run_id DESC""", {"n": max_runs + replay}).df() \
                if replay else None
        finally:
            con.execute("DROP TABLE IF EXISTS cal")
        self._kinds = dict(list(self.by_kind.groupby(["team", "kind"])))
        self._teams = dict(list(self.by_team.groupby("team")))
        self._made: dict = {}
        self._digests: dict[int, bytes] = {}   # by id() of this object's own frames, which it keeps

    _COLS = "c.team, c.kind, c.run_id, c.ended_at, c.admitted_at, c.estimated_gpu_hours, c.actual_gpu_hours, c.censored"
    _ORDER = "ORDER BY c.ended_at DESC, c.run_id"   # the store's order, as CALIBRATION_ORDER

    @classmethod
    def _newest(cls, con, group: str, n: str, p: dict) -> pd.DataFrame:
        # the n most recent per group: a cheap top-N pass finds each group's cutoff time, then the
        # exact order (ties broken by run_id, as the store does) runs on the few rows left
        on = " AND ".join(f"c.{g} = cut.{g}" for g in group.split(", "))
        sql = f"""
          WITH cut AS (SELECT {group}, list_min(max_by(ended_at, ended_at, {n})) AS cutoff FROM cal GROUP BY {group})
          SELECT {cls._COLS} FROM cal c JOIN cut ON {on} AND c.ended_at >= cut.cutoff
          QUALIFY row_number() OVER (PARTITION BY {", ".join(f"c.{g}" for g in group.split(", "))} {cls._ORDER}) <= {n}"""
        return con.execute(sql, used_params(sql, p)).df()

    @staticmethod
    def _records(df: pd.DataFrame | None) -> list[CalibrationRow]:
        # oldest first with ties as the store hands them over (its newest-first order, reversed)
        if df is None:
            return []
        df = df.sort_values(["ended_at", "run_id"], ascending=[True, False], kind="stable")
        return [{"estimated_gpu_hours": e, "actual_gpu_hours": a, "censored": c, "ended_at": t, "admitted_at": at,
                 "kind": k}
                for e, a, c, t, at, k in zip(df["estimated_gpu_hours"].tolist(), df["actual_gpu_hours"].tolist(),
                                             df["censored"].tolist(), df["ended_at"].dt.to_pydatetime().tolist(),
                                             df["admitted_at"].dt.to_pydatetime().tolist(), df["kind"].tolist())]

    def calibrate(self, team: str, kind: str) -> Calibration:
        """calibrate_scopes(self.scoped(team, kind)), remembered in this process by the rows it may
        read (the team x kind's, the team's and everyone's): the forward plan and the calibration
        table calibrate the same team x kinds from the same rows within one page."""
        key = hashlib.sha256(b"".join((self._digest(self._kinds.get((team, kind))),
                                       self._digest(self._teams.get(team)), self._digest(self.everyone))))
        key = key.hexdigest()
        if (known := _CALIBRATED.get(key)) is None:
            known = _CALIBRATED[key] = calibrate_scopes(self.scoped(team, kind))
            while len(_CALIBRATED) > _CALIBRATED_KEPT:
                _CALIBRATED.popitem(last=False)
        _CALIBRATED.move_to_end(key)
        return dict(known)

    def _digest(self, df: pd.DataFrame | None) -> bytes:
        if df is None:
            return b"-"
        if (seen := self._digests.get(id(df))) is None:
            rows = pd.util.hash_pandas_object(df, index=False).to_numpy()
            seen = self._digests[id(df)] = hashlib.sha256(rows.tobytes()).digest()
        return seen

    def scoped(self, team: str, kind: str) -> Iterator[tuple[str, list[CalibrationRow]]]:
        """calibrate_scopes' scopes for `team`'s `kind`, lazily: a team's rows (read with each of its
        kinds) and everyone's are made into rows once, when first needed."""
        yield "team×kind", self._records(self._kinds.get((team, kind)))
        for scope, key, df in (("team", team, self._teams.get(team)), ("all", None, self.everyone)):
            if (scope, key) not in self._made:
                self._made[(scope, key)] = self._records(df)
            yield scope, self._made[(scope, key)]


def calibrations(con, pairs: Iterable[tuple[str, str]], now: datetime, *,
                 max_runs: int = DEFAULT_MAX_RUNS) -> dict[tuple[str, str], Calibration]:
    """{(team, kind): `calibration(con, team, kind, now, max_runs=max_runs)`} for every pair, from one
    ScopeRows read (what the forward plan needs for every waiting request's team x kind)."""
    pairs = sorted(set(pairs))
    if not pairs:
        return {}
    rows = ScopeRows(con, now, max_runs=max_runs)
    return {(t, k): rows.calibrate(t, k) for t, k in pairs}
