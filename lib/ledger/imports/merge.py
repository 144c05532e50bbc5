"""The checks that need the whole file or the ledger, and the write; shared by both formats.

A format stages its file in the temp table or view `typed`: per run, `_row` (its staging row) and
the runs columns the file supplies. Nothing here materialises a merged copy of the file: the value a
run will hold (_merge_expr) is computed inside each statement that needs it. One pass over `typed`
LEFT JOIN runs counts new / updated / unchanged runs and time-order violations; details are queried
only when there are violations. New run ids are a plain INSERT ... SELECT from `typed`; only changed
existing runs are upserted (INSERT ... ON CONFLICT (run_id) DO UPDATE).
"""
from __future__ import annotations

import contextlib
import datetime as dt
import re
from dataclasses import dataclass
from typing import Callable

from lib.gate.terms import utcnow
from lib.ledger import audit, team_weeks
from lib.ledger.connection import transaction
from lib.ledger.imports.columns import CSV_COLUMNS, REQUIRED_COLUMNS
from lib.ledger.imports.report import Abort, ImportReport, RowErrors, Steps, _err

PREVIEW_ROWS = 50

DEFAULT_TEAM_POLICY = {
    "reserved_gpus": 0, "retraining_reserved_gpus": 0, "max_gpus_per_job": 0, "max_gpu_mem_gb": 0.0,
    "max_runtime_hours": 0.0, "monthly_budget_gpu_hours": 0.0, "pilot_required_above_gpu_hours": 0.0,
    "budget_basis_production": "upper", "budget_basis_exploratory": "upper",
    "budget_basis_retraining": "upper", "preemptible_partitions": [],
    "policy_version": "import-placeholder",
}

# the columns a gate-admitted reservation was judged on: an import may add actuals, never change these
_ADMITTED_COLUMNS = ("team", "kind", "gpus")

# time order, checked on the run as it will be stored: (column, the other column, condition, message)
_ORDER_CHECKS = [
    ("started_at", "reserved_from", "m.reserved_from > m.started_at",
     "'started_at ' || m.started_at || ' is before reserved_from ' || m.reserved_from"),
    ("ended_at", "started_at", "m.started_at > m.ended_at",
     "'ended_at ' || m.ended_at || ' is before started_at ' || m.started_at"),
    ("reserved_until", "reserved_from", "m.reserved_from > m.reserved_until",
     "'reserved_until ' || m.reserved_until || ' is before reserved_from ' || m.reserved_from"),
]

_LEDGER_REF = re.compile(r"\br\.(\w+)")


@dataclass
class Staged:
    """A file staged in `typed`, with what the shared checks need to know about it.

    supplied: the runs columns the file brings. rules: {column: SQL of its merged value} where the
    format has its own merge rule (t = the file's row, r = the ledger's, NULL for a new run).
    errors: errors found so far on staging rows. reader_errors: errors already placed on file lines.
    lines_for(rows) -> {staging row: file line}, called only when there are errors (a row it cannot
    place is reported without a line); None when each staging row is its file line.
    drop: statements freeing the staging tables before the commit.
    attempts: interruptions staged in the temp table `attempts` (sacct: interrupted attempts of
    requeued jobs, lib.ledger.imports.sacct_attempts), appended with the runs; 0: none.
    """
    supplied: list[str]
    rules: dict[str, str]
    errors: RowErrors
    reader_errors: list
    lines_for: Callable[[set[int]], dict[int, int]] | None
    drop: tuple[str, ...]
    attempts: int = 0


def _merge_expr(col: str, supplied: set[str], rules: dict[str, str]) -> str:
    """SQL for the value a run will hold: the format's rule, else the file's value for a required
    column, else COALESCE(file, ledger) (capacity defaults to 'stable')."""
    if col in rules:
        return rules[col]
    if col not in supplied:
        return "COALESCE(r.capacity, 'stable')" if col == "capacity" else f"r.{col}"
    if col in REQUIRED_COLUMNS:
        return f"t.{col}"
    if col == "capacity":   # an empty cell on a new run: the default (runs.capacity is NOT NULL)
        return "COALESCE(t.capacity, r.capacity, 'stable')"
    return f"COALESCE(t.{col}, r.{col})"


def _as_new(expr: str) -> str:
    """A _merge_expr for a run the ledger does not hold: every ledger value (r.<col>) is NULL."""
    return _LEDGER_REF.sub("NULL", expr)


class _Merged:
    """SQL of the runs as they would be stored, per column and as a query (never materialised)."""

    def __init__(self, staged: Staged):
        supplied = set(staged.supplied)
        self.exprs = {c: _merge_expr(c, supplied, staged.rules) for c in CSV_COLUMNS}
        self.changed = " OR ".join(f"({e}) IS DISTINCT FROM r.{c}" for c, e in self.exprs.items())
        self.columns = ", ".join(f"{e} AS {c}" for c, e in self.exprs.items())

    def query(self, rows: str = "typed") -> str:
        """The merged runs of `rows` (SQL of staging rows), with _row and their _status."""
        return (f"SELECT t._row, CASE WHEN r.run_id IS NULL THEN 'new' WHEN {self.changed} THEN 'updated' "
                f"ELSE 'unchanged' END AS _status, {self.columns} "
                f"FROM {rows} t LEFT JOIN runs r ON r.run_id = t.run_id")


def check_and_write(cur, report: ImportReport, staged: Staged, create_teams: bool, dry_run: bool,
                    steps: Steps) -> None:
    """Check `typed` against itself and the ledger, then write it - all in one transaction.

    Any error (or dry_run) rolls the transaction back: report.errors then lists every error and the
    counts are zero (dry run: the counts and preview say what would have been written)."""
    now = utcnow()
    errors = staged.errors
    with contextlib.suppress(Abort), transaction(cur):
        steps(0.5, "comparing with the ledger")
        n_rows = _duplicate_run_ids(cur, errors)
        if "team" in staged.supplied:   # absent: a missing required column, already refused
            _unknown_teams(cur, report, errors, create_teams, dry_run)
        merged = _Merged(staged)
        n_updated, n_unchanged = _count_and_check_order(cur, merged, set(staged.supplied), errors)
        if n_updated:
            _admitted_runs_unchanged(cur, merged, errors)
        report.inserted = n_rows - n_updated - n_unchanged
        report.updated = n_updated
        report.unchanged = n_unchanged
        report.preview = cur.execute(
            f"SELECT _status AS status, * EXCLUDE (_row, _status) FROM "
            f"({merged.query(f'(SELECT * FROM typed ORDER BY _row LIMIT {PREVIEW_ROWS})')}) ORDER BY _row").df()
        if errors or staged.reader_errors:
            _refuse(report, staged)
        if dry_run:
            raise Abort
        steps(0.7, f"writing {report.inserted} new and {report.updated} changed runs")
        _write(cur, report, merged, now)
        if staged.attempts:
            _write_attempts(cur, report, now)
        if report.who is not None:
            audit.record(cur, report.who, "import", fmt=report.fmt, inserted=report.inserted,
                         updated=report.updated, unchanged=report.unchanged)
        for sql in staged.drop:   # free the staging memory before the commit
            cur.execute(sql).fetchall()
        report.written = True
        steps(0.95, "committing")


def _duplicate_run_ids(cur, errors: RowErrors) -> int:
    """Count the staged rows; every later occurrence of a run_id is an error naming the first's line."""
    n_rows, n_dupes = cur.execute(
        "SELECT count(*), count(run_id) - count(DISTINCT run_id) FROM typed").fetchone()
    if n_dupes:
        errors.query(
            cur, "SELECT _row, 'run_id', run_id, 'duplicate run_id: also on line {other}', first_row FROM ("
            "  SELECT _row, run_id, min(_row) OVER (PARTITION BY run_id) AS first_row, "
            "         count(*) OVER (PARTITION BY run_id) AS n FROM typed WHERE run_id IS NOT NULL"
            ") WHERE n > 1 AND _row <> first_row")
    return n_rows


def _unknown_teams(cur, report: ImportReport, errors: RowErrors, create_teams: bool, dry_run: bool) -> None:
    """Teams missing from the ledger: one error per team at its first row, or (create_teams) created
    with DEFAULT_TEAM_POLICY (listed in report.teams_created; not inserted in a dry run)."""
    unknown = cur.execute(
        "SELECT team, first_row, n FROM (SELECT team, min(_row) AS first_row, count(*) AS n FROM typed "
        "WHERE team IS NOT NULL GROUP BY team) g "
        "WHERE NOT EXISTS (SELECT 1 FROM teams x WHERE x.team = g.team) ORDER BY 2").fetchall()
    if unknown and not create_teams:
        for team, first, n in unknown:
            errors.items.append((first, "team", team,
                                 f"unknown team {team!r} ({n} row{'s' if n != 1 else ''}): add it to "
                                 "data/teams.toml, or import with create teams", None))
    elif unknown:
        cols = ["team", *DEFAULT_TEAM_POLICY]
        report.teams_created = [u[0] for u in unknown]
        for team in ([] if dry_run else report.teams_created):
            cur.execute(f"INSERT INTO teams ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                        [team, *DEFAULT_TEAM_POLICY.values()]).fetchall()


def _count_and_check_order(cur, merged: _Merged, supplied: set[str], errors: RowErrors) -> tuple[int, int]:
    """(updated, unchanged) runs, in one pass that also counts time-order violations; each violation
    is an error on the column the file supplied (else the other column of the pair)."""
    any_order_bad = " OR ".join(f"({cond})" for _, _, cond, _ in _ORDER_CHECKS)
    n_updated, n_unchanged, n_order_bad = cur.execute(
        "SELECT count(*) FILTER (_status = 'updated'), count(*) FILTER (_status = 'unchanged'), "
        f"count(*) FILTER ({any_order_bad}) FROM ({merged.query()}) m").fetchone()
    if n_order_bad:
        for col, other, cond, msg in _ORDER_CHECKS:
            src = col if col in supplied else other
            errors.query(cur, f"SELECT m._row, '{src}', m.{src}::VARCHAR, {msg}, NULL "
                              f"FROM ({merged.query()}) m WHERE {cond}")
    return n_updated, n_unchanged


def _admitted_runs_unchanged(cur, merged: _Merged, errors: RowErrors) -> None:
    """An error for each run the gate admitted (source 'submit', with a reservation) whose team,
    kind or GPUs the import would change, compared as the run would be stored."""
    for col in _ADMITTED_COLUMNS:
        expr = merged.exprs[col]
        errors.query(
            cur, f"SELECT t._row, '{col}', ({expr})::VARCHAR, 'run ' || r.run_id || ' holds a "
            f"reservation the gate admitted with {col} ' || r.{col} || '; an import may not change it "
            f"(finish the run, or submit a new run ID)', NULL FROM typed t JOIN runs r "
            f"ON r.run_id = t.run_id WHERE r.source = 'submit' AND r.reserved_gpu_hours IS NOT NULL "
            f"AND ({expr}) IS DISTINCT FROM r.{col}")


def _refuse(report: ImportReport, staged: Staged) -> None:
    """Put every error on its file line into report.errors, zero the counts, and roll back (Abort)."""
    items = staged.errors.items
    rows = {r for e in items for r in (e[0], e[4]) if r is not None}
    lines = staged.lines_for(rows) if staged.lines_for else {r: r for r in rows}
    for row, col, value, msg, other in items:
        if other is not None:
            msg = msg.replace("{other}", str(lines.get(other, "?")))
        if row is not None and row not in lines:
            msg += f" (record {row + 1} after the header; its line could not be determined)"
        report.errors.append(_err(lines.get(row), col, value, msg))
    report.errors += staged.reader_errors
    report.unlisted = staged.errors.unlisted
    report.inserted = report.updated = report.unchanged = 0
    report.teams_created = []
    raise Abort


def _write(cur, report: ImportReport, merged: _Merged, now: dt.datetime) -> None:
    """Upsert the changed runs (`source` keeps the run's creator), then append the new ones; both
    stamped updated_at = now and, for new runs, source = the file's format."""
    cols = ", ".join(CSV_COLUMNS)
    # the weekly usage (team_weeks) of the weeks its runs leave and join; a large import rebuilds it
    rebuild = report.updated + report.inserted > team_weeks.REFRESH_AT_MOST
    weeks = team_weeks.weeks_of(cur, "SELECT run_id FROM typed") if report.updated and not rebuild else set()
    if report.updated:
        cur.execute(f"CREATE TEMP TABLE changed AS SELECT {merged.columns} FROM typed t "
                    f"JOIN runs r ON r.run_id = t.run_id WHERE {merged.changed}").fetchall()
        sets = ", ".join(f"{c} = EXCLUDED.{c}" for c in CSV_COLUMNS if c != "run_id")
        cur.execute(f"INSERT INTO runs ({cols}, source, updated_at) SELECT {cols}, ?, ? FROM changed "
                    f"ON CONFLICT (run_id) DO UPDATE SET {sets}, updated_at = EXCLUDED.updated_at",
                    [report.fmt, now]).fetchall()
        cur.execute("DROP TABLE changed").fetchall()
    if report.inserted:   # new run ids (checked absent inside this transaction): a plain append
        new_cols = ", ".join(f"{_as_new(e)} AS {c}" for c, e in merged.exprs.items())
        only_new = ("" if not (report.updated or report.unchanged) else
                    " WHERE NOT EXISTS (SELECT 1 FROM runs x WHERE x.run_id = t.run_id)")
        cur.execute(f"INSERT INTO runs ({cols}, source, updated_at) SELECT {new_cols}, ?, ? "
                    f"FROM typed t{only_new}", [report.fmt, now]).fetchall()
    if rebuild:
        team_weeks.rebuild(cur)
    elif report.updated or report.inserted:
        team_weeks.refresh(cur, weeks | team_weeks.weeks_of(cur, "SELECT run_id FROM typed"))


def _write_attempts(cur, report: ImportReport, now: dt.datetime) -> None:
    """Append the interruptions staged in `attempts` (no decision: action and decision_json NULL),
    source = the file's format, recorded now by the importing actor."""
    cur.execute("INSERT INTO interruptions (run_id, event, occurred_at, attempt, attempt_started_at, "
                "attempt_gpu_hours, lost_gpu_hours, source, recorded_at, actor) "
                "SELECT run_id, event, occurred_at, attempt, attempt_started_at, attempt_gpu_hours, "
                "lost_gpu_hours, ?, ?, ? FROM attempts ORDER BY _row",
                [report.fmt, now, report.who["actor"] if report.who else None]).fetchall()
