"""Atomic, explainable imports of run history into the ledger: a CSV users write, and Slurm `sacct`.

    report = import_runs("history.csv")                       # CSV (format: csv_file's docstring)
    report = import_runs(sacct_bytes, fmt="sacct")              # `sacct --parsable2` output (sacct's)
    report = import_runs("history.csv", dry_run=True)           # validate + preview, write nothing

Atomic: the whole file lands in one transaction (lib.ledger.connection.transaction), or - on any problem - nothing
is written and `report.errors` lists EVERY problem found (capped at MAX_ERRORS, with a last row saying
how many more), each as {"line", "column", "value", "message"}. Line numbers are the file's lines as an
editor shows them (the header is line 1; a quoted field spanning lines counts all its lines).
Re-importing the same file changes nothing (its rows count as `unchanged`); a changed row updates its run
(`updated`). Rows are upserted by run_id with INSERT ... ON CONFLICT (run_id) DO UPDATE.

- `csv_file`: the CSV format and its checks.
- `csv_lines`: file lines of records and rejects.
- `sacct`: every sacct rule.
- `sacct_attempts`: the attempts of a requeued job.
- `merge`: the checks that need the whole file or the ledger, and the write.
- `report`: ImportReport and its error rows.
- `columns`: the runs columns a file can supply.

create_teams=True creates unknown teams in `teams` with a deliberately conservative placeholder policy
(DEFAULT_TEAM_POLICY): no reserved GPUs, every per-job cap 0 and a zero monthly budget, budgets judged at
the upper bound, policy_version 'import-placeholder' - so such a team's history is recorded but nothing
it requests is admitted until a planner gives it a real policy in data/teams.toml.
"""
from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

from lib.ledger.audit import Who, command_line
from lib.ledger.connection import LOCK_TIMEOUT_S, open_ledger
from lib.ledger.imports.columns import CSV_COLUMNS, MAX_TEXT_CHARS, REQUIRED_COLUMNS
from lib.ledger.imports.csv_file import import_csv
from lib.ledger.imports.merge import DEFAULT_TEAM_POLICY, PREVIEW_ROWS
from lib.ledger.imports.report import MAX_ERRORS, ImportReport, Progress, Steps, _cap, _err
from lib.ledger.imports.sacct import SACCT_REQUIRED, XDMOD_FIELDS, import_sacct

__all__ = ["import_runs", "ImportReport", "Progress", "CSV_COLUMNS", "REQUIRED_COLUMNS", "XDMOD_FIELDS",
           "SACCT_REQUIRED", "DEFAULT_TEAM_POLICY", "MAX_IMPORT_BYTES", "MAX_TEXT_CHARS", "MAX_ERRORS",
           "PREVIEW_ROWS"]

MAX_IMPORT_BYTES = 512 * 1024 * 1024      # size limit of one import file (bytes)
IMPORT_MEMORY_LIMIT = "700MB"              # DuckDB's buffer limit while importing (spills beyond)


@contextlib.contextmanager
def _source_path(source):
    """A path to read: `source` itself, or a temporary file holding the given bytes."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        fd, name = tempfile.mkstemp(prefix="gate-import-", suffix=".dat")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(source)
            yield Path(name)
        finally:
            with contextlib.suppress(OSError):
                os.unlink(name)
    else:
        yield Path(source)


def _file_error(path: Path, source) -> dict | None:
    """The error for a file that cannot be read, is larger than MAX_IMPORT_BYTES, or is empty."""
    try:
        size = path.stat().st_size
    except OSError as exc:
        return _err(None, None, str(source), f"cannot read the file: {exc.strerror or exc}")
    if size > MAX_IMPORT_BYTES:
        return _err(None, None, f"{size} bytes", f"file is larger than the import limit of "
                                                 f"{MAX_IMPORT_BYTES // (1024 * 1024)} MB: split it into several files")
    if size == 0:
        return _err(1, None, None, "the file is empty (expected a header line and rows)")
    return None


@contextlib.contextmanager
def _session(con):
    """A fresh cursor for one pass over a file: its own reject tables and temp tables, UTC, and a
    memory limit beyond which staging tables spill to <ledger>.tmp (so a large import stays in bounds)."""
    cur = con.cursor()
    try:
        cur.execute("SET TimeZone = 'UTC'").fetchall()
        cur.execute(f"SET memory_limit = '{IMPORT_MEMORY_LIMIT}'").fetchall()
        yield cur
    finally:
        cur.close()


def import_runs(source, *, fmt: str = "csv", db=None, create_teams: bool = False,
                dry_run: bool = False, progress: Progress | None = None,
                timeout_s: float = LOCK_TIMEOUT_S, who: Who | None = None) -> ImportReport:
    """Import run history from `source` (a path, or the file's bytes) into the ledger `db`.

    fmt: "csv" (csv_file's docstring) or "sacct" (sacct's docstring). Nothing is written when any error
    is found or when dry_run is true; the report then says what would have happened. `progress(fraction,
    message)` is called at a few stages. Raises LedgerLocked / LedgerError when the ledger cannot be
    opened; every problem with the file itself is reported in `errors`, never raised. A written import
    is recorded in the ledger's audit, in the same transaction, as `who` (default: the OS user on the
    command line, lib.ledger.audit.command_line, with the file's name when `source` is a path).
    """
    if fmt not in ("csv", "sacct"):
        raise ValueError(f"fmt must be 'csv' or 'sacct', not {fmt!r}")
    if who is None:
        who = command_line(None if isinstance(source, (bytes, bytearray, memoryview)) else Path(source).name)
    steps = Steps(progress)
    report = ImportReport(fmt=fmt, dry_run=dry_run, who=who)
    with _source_path(source) as path:
        steps(0.0, "checking the file")
        problem = _file_error(path, source)
        if problem:
            report.errors = [problem]
            return report
        with open_ledger(db, read_only=dry_run, timeout_s=timeout_s) as con:
            if fmt == "sacct":
                with _session(con) as cur:
                    import_sacct(cur, path, report, create_teams, dry_run, steps)
            else:   # a dry run shows positions (errors, preview): exact from the start
                with _session(con) as cur:
                    again = import_csv(cur, path, report, create_teams, dry_run, steps, exact=dry_run)
                if again:   # the fast pass saw a problem: find it again, at its exact line
                    report = ImportReport(fmt=fmt, dry_run=dry_run, who=who)
                    with _session(con) as cur:
                        import_csv(cur, path, report, create_teams, dry_run, steps, exact=True)
    report.errors = _cap(report.errors, report.unlisted)
    steps(1.0, "done" if report.written else ("checked (dry run)" if report.ok else "not imported"))
    return report
