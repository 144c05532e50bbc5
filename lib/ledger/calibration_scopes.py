"""Every team's calibration at once (`ScopeRows`, `calibrations`): the dashboard's calibration table
and the forward plan calibrate every team x kind from a few queries, not a few per team x kind, and
give what lib.ledger.calibration_rows.calibration gives for each.

Calibrations and the backtests' replayed bounds are kept by content in files beside the ledger
(lib.planning.content_store): keyed by a digest of the rows they were made from and of the code
that made them, so an entry is never stale; a page that finds its rows unchanged reads the result
back instead of fitting again.
"""
from __future__ import annotations

import hashlib
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Iterable, Iterator

import pandas as pd

from lib.gate import backtest, calibration, calibration_change, tobit
from lib.gate.calibration import DEFAULT_MAX_RUNS, calibrate_scopes
from lib.gate.contracts import Calibration, CalibrationRow
from lib.ledger.calibration_rows import (CALIBRATION_ROWS_SQL, CALIBRATION_WINDOW_DAYS, CUT_SQL, KNOWN_TEAMS,
                                         calibration_params, cut_params, newest_cutoffs)
from lib.ledger.connection import used_params
from lib.planning import content_store

CALIBRATIONS_SUFFIX = ".calibrations.json"   # beside the ledger: ScopeRows.calibrate's
CALIBRATIONS_KEPT = 2_000                     # calibrations kept (about 400 bytes each)
CALIBRATIONS_FORMAT = 1


@lru_cache(maxsize=1)
def calibration_code() -> bytes:
    """What a calibration or a replayed bound depends on besides its rows: the source of the code
    that computes it."""
    h = hashlib.sha256()
    for module in (calibration, calibration_change, tobit, backtest):
        h.update(Path(module.__file__).read_bytes())
    return h.digest()


def ledger_file(con) -> Path | None:
    """The file of the ledger `con` reads (None for a ledger in memory)."""
    (path,) = con.execute("SELECT path FROM duckdb_databases() WHERE database_name = current_database()").fetchone()
    return Path(path) if path and path != ":memory:" else None


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
        self.teams = known = [t for (t,) in con.execute(f"{KNOWN_TEAMS} ORDER BY 1").fetchall()]   # with a policy
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
        self._ledger = ledger_file(con)
        self._file = self.beside(CALIBRATIONS_SUFFIX)
        self._memo = content_store.load(self._file, CALIBRATIONS_FORMAT) if self._file is not None else {}
        self._changed = False

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
        """calibrate_scopes(self.scoped(team, kind)), kept by content (`keep` writes them beside the
        ledger): under the digest of the team x kind's and the team's rows and the calibration code,
        with everyone's rows' digest too when everyone's scope was read. A calibration whose rows
        have not changed since it was made is read back, not made again."""
        key = hashlib.sha256(calibration_code() + self._digest(self._kinds.get((team, kind)))
                             + self._digest(self._teams.get(team))).hexdigest()
        everyone = self._digest(self.everyone).hex()
        if (known := self._memo.get(key)) is not None and known[1] in (None, everyone):
            return dict(known[0])
        read = []

        def tracked():
            for scope, rows in self.scoped(team, kind):
                read.append(scope)
                yield scope, rows
        cal = calibrate_scopes(tracked())
        self._memo.pop(key, None)         # the most recently made last: the store keeps the last ones
        self._memo[key] = [dict(cal), everyone if "all" in read else None]
        self._changed = True
        return cal

    def beside(self, suffix: str) -> Path | None:
        """The file `suffix` beside the ledger these rows were read from (None for a ledger in memory)."""
        return None if self._ledger is None else self._ledger.with_name(self._ledger.name + suffix)

    def keep(self) -> None:
        """Write the calibrations made beside the ledger (when any was made and the ledger is a file)."""
        if self._changed and self._file is not None:
            content_store.save(self._file, self._memo, CALIBRATIONS_FORMAT, CALIBRATIONS_KEPT)
            self._changed = False

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


def calibrations(con, pairs: Iterable[tuple[str, str]], now: datetime, *, max_runs: int = DEFAULT_MAX_RUNS,
                 scopes: ScopeRows | None = None) -> dict[tuple[str, str], Calibration]:
    """{(team, kind): `calibration(con, team, kind, now, max_runs=max_runs)`} for every pair, from one
    ScopeRows read (what the forward plan needs for every waiting request's team x kind); `scopes`:
    that read when the caller made it already (at `now`, with `max_runs`)."""
    pairs = sorted(set(pairs))
    if not pairs:
        return {}
    rows = scopes if scopes is not None else ScopeRows(con, now, max_runs=max_runs)
    out = {(t, k): rows.calibrate(t, k) for t, k in pairs}
    rows.keep()
    return out
