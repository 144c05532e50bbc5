"""Atomic, explainable imports of run history into the ledger: a CSV users write, and Slurm `sacct`.

    report = import_runs("history.csv")                       # CSV (the format below)
    report = import_runs(sacct_bytes, fmt="sacct")              # `sacct --parsable2` output
    report = import_runs("history.csv", dry_run=True)           # validate + preview, write nothing

Atomic: the whole file lands in one transaction (lib.ledger.connection.transaction), or - on any problem - nothing
is written and `report.errors` lists EVERY problem found (capped at MAX_ERRORS, with a last row saying
how many more), each as {"line", "column", "value", "message"}. Line numbers are the file's lines as an
editor shows them (the header is line 1; a quoted field spanning lines counts all its lines).
Re-importing the same file changes nothing (its rows count as `unchanged`); a changed row updates its run
(`updated`). Rows are upserted by run_id with INSERT ... ON CONFLICT (run_id) DO UPDATE.

CSV format (template: data/runs_template.csv)
--------------------------------------------
UTF-8 (with or without BOM), comma-separated, '"' quotes (a '"' inside quotes is doubled), LF or CRLF
line ends; quoted fields may hold commas and line breaks. The first line is the header. Column names are
the `runs` columns users can supply (CSV_COLUMNS, any order); run_id, team, kind, gpus are required, the
others may be left out of the header. An unknown header name is an error naming it and the closest known
name: a renamed column is never silently mapped. Values:

- run_id, team, data_snapshot, job_name, last_valid_checkpoint: text, at most MAX_TEXT_CHARS characters.
  Stored exactly as written: HTML or SQL is plain text (never executed or rendered), and cells starting
  with = + - @ are kept unchanged, so EXPORTS MUST NEUTRALISE formula-like cells (e.g. prefix a ').
- kind: exploratory | production | retraining.  capacity: stable | preemptible (default stable).
  estimate_source: pilot | stated | requested (default 'stated' when the file brings an estimate).
  stop_reason: completed | early-stop | budget | wall-clock | failed-steps | preempted | failed |
  cancelled | out-of-memory | node-fail | requeued (empty: unfinished).
  artifact_status: complete | incomplete | none.
- numbers (GPU-hours, hours, GB): finite and >= 0 ('.' decimal point; NaN and inf are errors).
- gpus, interruptions, restarts, holdout_reads, holdout_allowance: whole numbers >= 0.
- reserved_from, reserved_until, started_at, ended_at: ISO 8601 date-times, e.g. 2024-05-01T13:00:00Z;
  an offset is converted to UTC, a time without offset is taken as UTC; years 2000-2099.
  Order: reserved_from <= started_at <= ended_at and reserved_from <= reserved_until (checked on the
  run as it will be stored, i.e. after merging with what the ledger already holds).
- full_evaluation: true/false (also yes/no, 1/0).
- A run_id may appear once per file. Teams must exist in the ledger (see create_teams).

Merging with the ledger: the estimate and the observed spend of a run live on the same run_id whichever
file brings them. run_id, team, kind and gpus (required) take the file's value. EVERY optional column
behaves as COALESCE(file, ledger): an empty cell or an absent column never erases a value the ledger
holds (so a file of actuals does not wipe the estimate a pilot recorded, and vice versa); the CSV import
cannot clear a stored value. `source` keeps the source that created the run; updated_at is set on change.

Slurm format: see `_parse_sacct` (fields, run id rule, mapping, merge rules).

create_teams=True creates unknown teams in `teams` with a deliberately conservative placeholder policy
(DEFAULT_TEAM_POLICY): no reserved GPUs, every per-job cap 0 and a zero monthly budget, budgets judged at
the upper bound, policy_version 'import-placeholder' - so such a team's history is recorded but nothing
it requests is admitted until a planner gives it a real policy in data/teams.toml.
"""
from __future__ import annotations

import contextlib
import csv
import datetime as dt
import difflib
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import duckdb
import pandas as pd

from lib.ledger.connection import DEFAULT_TIMEOUT_S, open_ledger, transaction
from lib.gate.request import CAPACITIES, KINDS
from lib.gate.stopping import ARTIFACT_STATUSES, STOP_REASONS

MAX_IMPORT_BYTES = 512 * 1024 * 1024      # size limit of one import file (bytes)
MAX_TEXT_CHARS = 1000                      # longest text value accepted in a field (characters)
MAX_ERRORS = 1000                          # errors listed before one summary row
PREVIEW_ROWS = 50
IMPORT_MEMORY_LIMIT = "700MB"              # DuckDB's buffer limit while importing (spills beyond)
MAX_LINE_BYTES = 2 * 1024 * 1024           # DuckDB's reader refuses longer lines (max_line_size)

TEXT_COLUMNS = ["run_id", "team", "data_snapshot", "job_name", "last_valid_checkpoint"]
ENUMS = {
    "kind": KINDS,
    "capacity": CAPACITIES,
    "estimate_source": ("pilot", "stated", "requested"),
    "stop_reason": STOP_REASONS,
    "artifact_status": ARTIFACT_STATUSES,
}
NUMBER_COLUMNS = [
    "gpu_mem_gb", "estimated_gpu_hours", "est_compute_gpu_hours", "est_checkpoint_gpu_hours",
    "est_eval_gpu_hours", "est_data_loading_gpu_hours", "est_restart_gpu_hours", "budget_gpu_hours",
    "max_runtime_hours", "reserved_gpu_hours", "actual_gpu_hours", "act_checkpoint_gpu_hours",
    "act_retry_gpu_hours", "act_eval_gpu_hours", "act_lost_work_gpu_hours",
]
INTEGER_COLUMNS = ["gpus", "interruptions", "restarts", "holdout_reads", "holdout_allowance"]
TIME_COLUMNS = ["reserved_from", "reserved_until", "started_at", "ended_at"]
BOOL_COLUMNS = ["full_evaluation"]

# The runs columns a file can supply, in the ledger's order (source and updated_at are the importer's).
CSV_COLUMNS = [
    "run_id", "team", "kind", "capacity", "gpus", "gpu_mem_gb", "data_snapshot", "job_name",
    "estimated_gpu_hours", "estimate_source", "est_compute_gpu_hours", "est_checkpoint_gpu_hours",
    "est_eval_gpu_hours", "est_data_loading_gpu_hours", "est_restart_gpu_hours", "budget_gpu_hours",
    "max_runtime_hours", "reserved_from", "reserved_until", "reserved_gpu_hours", "started_at",
    "ended_at", "actual_gpu_hours", "act_checkpoint_gpu_hours", "act_retry_gpu_hours",
    "act_eval_gpu_hours", "act_lost_work_gpu_hours", "stop_reason", "interruptions", "restarts",
    "artifact_status", "last_valid_checkpoint", "full_evaluation", "holdout_reads", "holdout_allowance",
]
REQUIRED_COLUMNS = ["run_id", "team", "kind", "gpus"]
_SQL_TYPE = {
    **{c: "VARCHAR" for c in TEXT_COLUMNS}, **{c: "VARCHAR" for c in ENUMS},
    **{c: "DOUBLE" for c in NUMBER_COLUMNS}, **{c: "INTEGER" for c in INTEGER_COLUMNS},
    **{c: "TIMESTAMP" for c in TIME_COLUMNS}, **{c: "BOOLEAN" for c in BOOL_COLUMNS},
}
assert set(_SQL_TYPE) == set(CSV_COLUMNS)
# how DuckDB's CSV reader reads each column (see _typed_expr)
_READ_TYPE = {c: ("DOUBLE" if c in NUMBER_COLUMNS or c in INTEGER_COLUMNS else "VARCHAR") for c in CSV_COLUMNS}

DEFAULT_TEAM_POLICY = {
    "reserved_gpus": 0, "retraining_reserved_gpus": 0, "max_gpus_per_job": 0, "max_gpu_mem_gb": 0.0,
    "max_runtime_hours": 0.0, "monthly_budget_gpu_hours": 0.0, "pilot_required_above_gpu_hours": 0.0,
    "budget_basis_production": "upper", "budget_basis_exploratory": "upper",
    "budget_basis_retraining": "upper", "preemptible_partitions": [],
    "policy_version": "import-placeholder",
}

Progress = Callable[[float, str], None]


@dataclass
class ImportReport:
    """What an import did (or, with errors or dry_run, would have done: then nothing was written)."""
    fmt: str
    inserted: int = 0
    updated: int = 0
    unchanged: int = 0
    errors: list = field(default_factory=list)       # [{"line", "column", "value", "message"}]
    preview: pd.DataFrame | None = None              # first PREVIEW_ROWS rows as they would be stored
    rows_read: int = 0                               # data rows (CSV) / job lines (sacct) read
    dry_run: bool = False
    written: bool = False                            # True only when the transaction committed
    teams_created: list = field(default_factory=list)
    skipped: int = 0                                 # sacct: job lines without GPUs, folded steps
    notes: list = field(default_factory=list)        # non-blocking remarks
    unlisted: int = 0                                # errors counted but not itemised (beyond the cap)

    @property
    def ok(self) -> bool:
        return not self.errors


class _Abort(Exception):
    """Raised inside the transaction to roll it back (errors found, or dry run)."""


def _noop(_fraction: float, _message: str) -> None:
    pass


def _err(line, column, value, message) -> dict:
    if isinstance(value, str) and len(value) > 200:
        value = value[:200] + f"... ({len(value)} characters)"
    return {"line": line, "column": column, "value": value, "message": message}


def _cap(errors: list, unlisted: int = 0) -> list:
    """The errors in file order, at most MAX_ERRORS, then one row saying how many more there are
    (`unlisted`: errors found by a count but not fetched)."""
    errors = sorted(errors, key=lambda e: (e["line"] if e["line"] is not None else 0,
                                           _col_order(e["column"])))
    more = max(0, len(errors) - MAX_ERRORS) + unlisted
    if more:
        errors = errors[:MAX_ERRORS] + [_err(None, None, None,
                                             f"... and {more} more errors not listed (fix these first)")]
    return errors


def _limited(cur, sql: str, order: str = "1", params=()) -> tuple[list, int]:
    """(the first MAX_ERRORS * 2 rows of `sql` in `order`, how many more rows it has)."""
    rows = cur.execute(f"SELECT *, count(*) OVER () FROM ({sql}) ORDER BY {order} LIMIT {MAX_ERRORS * 2}",
                       list(params)).fetchall()
    total = rows[0][-1] if rows else 0
    return [r[:-1] for r in rows], total - len(rows)


def _add(errors: list, rows: list, unlisted: int) -> int:
    """Append `rows` to `errors`; return `unlisted` (the matching rows that were not fetched)."""
    errors += rows
    return unlisted


def _col_order_sql(column: str) -> str:
    """SQL ordering error rows by their column's place in CSV_COLUMNS (`column`: its SQL)."""
    return f"list_position({[*CSV_COLUMNS]!r}, {column})"


def _col_order(column) -> int:
    try:
        return CSV_COLUMNS.index(column)
    except ValueError:
        return -1 if column is None else len(CSV_COLUMNS)


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


def import_runs(source, *, fmt: str = "csv", db=None, create_teams: bool = False,
                dry_run: bool = False, progress: Progress | None = None,
                timeout_s: float = DEFAULT_TIMEOUT_S) -> ImportReport:
    """Import run history from `source` (a path, or the file's bytes) into the ledger `db`.

    fmt: "csv" (module docstring) or "sacct" (`_parse_sacct`). Nothing is written when any error is
    found or when dry_run is true; the report then says what would have happened. `progress(fraction,
    message)` is called at a few stages. Raises LedgerLocked / LedgerError when the ledger cannot be
    opened; every problem with the file itself is reported in `errors`, never raised.
    """
    if fmt not in ("csv", "sacct"):
        raise ValueError(f"fmt must be 'csv' or 'sacct', not {fmt!r}")
    progress = progress or _noop
    report = ImportReport(fmt=fmt, dry_run=dry_run)
    with _source_path(source) as path:
        progress(0.0, "checking the file")
        try:
            size = path.stat().st_size
        except OSError as exc:
            report.errors = [_err(None, None, str(source), f"cannot read the file: {exc.strerror or exc}")]
            return report
        if size > MAX_IMPORT_BYTES:
            report.errors = [_err(None, None, f"{size} bytes",
                                  f"file is larger than the import limit of "
                                  f"{MAX_IMPORT_BYTES // (1024 * 1024)} MB: split it into several files")]
            return report
        if size == 0:
            report.errors = [_err(1, None, None, "the file is empty (expected a header line and rows)")]
            return report
        with open_ledger(db, read_only=dry_run, timeout_s=timeout_s) as con:
            cur = con.cursor()      # fresh connection state: its own rejects tables and temp tables
            try:
                cur.execute("SET TimeZone = 'UTC'").fetchall()
                # staging tables spill to <ledger>.tmp beyond this, keeping the peak under 1 GB
                cur.execute(f"SET memory_limit = '{IMPORT_MEMORY_LIMIT}'").fetchall()
                if fmt == "csv":
                    _import_csv(cur, path, report, create_teams, dry_run, progress)
                else:
                    _import_sacct(cur, path, report, create_teams, dry_run, progress)
            finally:
                cur.close()
    report.errors = _cap(report.errors, report.unlisted)
    progress(1.0, "done" if report.written else ("checked (dry run)" if report.ok else "not imported"))
    return report


# ----------------------------------------------------------------------------------------------- CSV

_NOT_CSV = [   # (leading bytes, what the file is)
    (b"\x1f\x8b", "a gzip-compressed file: decompress it first (gunzip) and import the CSV inside"),
    (b"PK\x03\x04", "a ZIP archive (an Excel .xlsx workbook is one): save or extract it as CSV"),
    (b"SQLite format 3\x00", "an SQLite database, not a CSV file"),
    (b"PAR1", "a Parquet file, not a CSV file"),
]


def _read_header(path: Path, report: ImportReport) -> list[str] | None:
    with open(path, "rb") as f:
        head = f.read(min(MAX_LINE_BYTES, path.stat().st_size))
    for magic, what in _NOT_CSV:
        if head.startswith(magic):
            report.errors.append(_err(1, None, repr(head[:8]), f"this is {what}"))
            return None
    if head[8:12] == b"DUCK":
        report.errors.append(_err(1, None, repr(head[:12]), "this is a DuckDB database, not a CSV file"))
        return None
    text_head = head.split(b"\n", 1)[0]
    if b"\r" in text_head.rstrip(b"\r"):
        problem = _line_end_problem(path)
        report.errors.append(_err(1, None, None, problem[1] if problem else "the header line holds a CR"))
        return None
    if b"\x00" in text_head:
        report.errors.append(_err(1, None, repr(text_head[:40]), "the header holds NUL bytes: this is "
                                                                  "binary data, not a CSV file"))
        return None
    try:
        first = text_head.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        report.errors.append(_err(1, None, repr(text_head[max(0, exc.start - 10):exc.end + 10]),
                                  "the header is not valid UTF-8: save the file as UTF-8 (CSV UTF-8)"))
        return None
    try:
        with _csv_field_limit():
            names = next(csv.reader([first.rstrip("\r")], delimiter=",", quotechar='"', strict=True), [])
    except csv.Error as exc:
        report.errors.append(_err(1, None, first[:200], f"the header is not a CSV line ({exc})"))
        return None
    if not names or all(not n.strip() for n in names):
        report.errors.append(_err(1, None, None, "the first line is empty: expected the header "
                                                 f"(e.g. {','.join(REQUIRED_COLUMNS)})"))
        return None
    if len(names) == 1:
        for delim, label in ((";", "semicolons"), ("\t", "tabs"), ("|", "'|'")):
            if delim in names[0]:
                report.errors.append(_err(1, None, names[0][:200],
                                          f"the header is one column containing {label}: this file uses "
                                          f"{label} as separator; save it comma-separated"))
                return None
    return names


def _check_header(names: list[str], report: ImportReport) -> bool:
    ok = True
    seen: dict[str, int] = {}
    for i, name in enumerate(names, start=1):
        if name in seen:
            report.errors.append(_err(1, name, name, f"column {name!r} appears twice in the header "
                                                     f"(columns {seen[name]} and {i})"))
            ok = False
            continue
        seen[name] = i
        if name not in CSV_COLUMNS and name.strip().lower() in CSV_COLUMNS:
            known = name.strip().lower()
            report.errors.append(_err(1, known, name, f"column {name!r} (column {i}) must be written "
                                                      f"{known!r}: lower case, no spaces around it"))
            seen.setdefault(known, i)   # one error per column: it is not also 'missing'
            ok = False
        elif name not in CSV_COLUMNS:
            close = difflib.get_close_matches(name.strip().lower(), CSV_COLUMNS, n=1, cutoff=0.5)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            if not name.strip():
                msg = f"header column {i} has no name"
            else:
                msg = f"unknown column {name!r} (column {i}){hint} Known columns: see data/runs_template.csv"
            report.errors.append(_err(1, name, name, msg))
            ok = False
    for req in REQUIRED_COLUMNS:
        if req not in seen:
            report.errors.append(_err(1, req, None, f"required column {req!r} is missing from the header"))
            ok = False
    return ok


def _trim_sql(raw: str) -> str:
    """SQL equal to NULLIF(trim(raw), ''), without calling trim when it cannot change the value.

    trim strips space characters (' ', and non-ASCII spaces such as U+00A0) at both ends. When the
    first and the last character are printable ASCII other than space ('!'..'~'; the first byte of a
    multi-byte character is above '~') there is nothing to strip and the value is not empty, so raw
    itself is the answer - as it is for most cells. trim allocates a new string per row; this does not.
    """
    return (f"CASE WHEN ascii({raw}) BETWEEN 33 AND 126 AND right({raw}, 1) BETWEEN '!' AND '~' "
            f"THEN {raw} ELSE NULLIF(trim({raw}), '') END")


# columns whose checks or typed value need the trimmed text (see _trim_sql)
_TRIMMED = {"run_id", "team", *TIME_COLUMNS, *BOOL_COLUMNS}


def _typed_expr(col: str, raw: str | None = None, trimmed: str | None = None) -> str:
    """SQL turning the column `col` as read (_READ_TYPE) into its typed value (NULL when not valid).

    raw: SQL of the value as read (default: the column itself); trimmed: SQL of _trim_sql(raw) when
    it is already computed. Numbers are parsed by the CSV reader itself (fast; unparsable text is a
    CAST reject). Times and booleans are read as text and cast here: the reader ignores a UTC offset
    and rounds 2.5 to an INTEGER, both silently, so those are not left to it.
    """
    q = raw or f'"{col}"'
    t = trimmed or _trim_sql(q)
    if col in TEXT_COLUMNS:
        return f"NULLIF({q}, '')"
    if col in ENUMS:   # = NULLIF(trim(q), ''); a cell holding an allowed value exactly needs no trim
        lit = ", ".join(f"'{v}'" for v in ENUMS[col])
        return f"CASE WHEN {q} IN ({lit}) THEN {q} ELSE NULLIF(trim({q}), '') END"
    if col in NUMBER_COLUMNS:      # read as DOUBLE by DuckDB's reader (bad text: a CAST reject)
        return q
    if col in INTEGER_COLUMNS:     # read as DOUBLE too: 2.5 must be an error, not rounded to 3
        return f"CASE WHEN {q} = trunc({q}) AND abs({q}) < 2147483648 THEN CAST({q} AS INTEGER) END"
    if col in TIME_COLUMNS:
        # text -> TIMESTAMPTZ (an offset is applied; none means the session's UTC) -> its UTC instant
        # as TIMESTAMP. epoch_us/make_timestamp do that last step ~5x faster than a TIMESTAMPTZ ->
        # TIMESTAMP cast (which goes through ICU); +-infinity become NULL, i.e. not a valid time.
        return f"make_timestamp(epoch_us(TRY_CAST({t} AS TIMESTAMPTZ)))"
    if col in BOOL_COLUMNS:
        return f"TRY_CAST({t} AS BOOLEAN)"
    raise KeyError(col)


def _row_checks(cols: list[str], raw_ref="s.\"{c}\"", typed_ref="t.\"{c}\"",
                trim_ref=None) -> list[tuple[str, str, str]]:
    """(column, condition over the raw text / typed value, message SQL) for each per-row rule.

    trim_ref: format string naming an already computed _trim_sql(raw) (columns in _TRIMMED).
    """
    checks = []
    for c in cols:
        raw = raw_ref(c) if callable(raw_ref) else raw_ref.format(c=c)
        typ = typed_ref.format(c=c)
        trimmed = trim_ref.format(c=c) if trim_ref and c in _TRIMMED else _trim_sql(raw)
        if _READ_TYPE[c] == "DOUBLE":
            present = f"{raw} IS NOT NULL"
        elif c in ENUMS:   # the typed value is NULLIF(trim(raw), '')
            present = f"{typ} IS NOT NULL"
        else:
            present = f"{trimmed} IS NOT NULL"
        if c in REQUIRED_COLUMNS:
            checks.append((c, f"NOT ({present})", f"'{c} is required'"))
        if c in TEXT_COLUMNS:
            checks.append((c, f"length({raw}) > {MAX_TEXT_CHARS}",
                           f"'text longer than {MAX_TEXT_CHARS} characters (' || length({raw}) || ')'"))
            checks.append((c, f"contains({raw}, chr(0))", "'holds a NUL byte (binary data?)'"))
            if c in ("run_id", "team"):
                checks.append((c, f"{present} AND {raw} <> {trimmed}",
                               f"'{c} has leading or trailing spaces'"))
        elif c in ENUMS:
            allowed = ", ".join(ENUMS[c])
            lit = ", ".join(f"'{v}'" for v in ENUMS[c])
            checks.append((c, f"{present} AND {typ} NOT IN ({lit})",
                           f"'{c} must be one of: {allowed}'"))
        elif c in NUMBER_COLUMNS:
            checks.append((c, f"{typ} IS NOT NULL AND NOT isfinite({typ})",
                           "'must be a finite number (NaN and infinity are not allowed)'"))
            checks.append((c, f"{typ} < 0", "'must not be negative'"))
        elif c in INTEGER_COLUMNS:
            checks.append((c, f"{present} AND {typ} IS NULL", "'not a whole number'"))
            checks.append((c, f"{typ} < 0", "'must not be negative'"))
        elif c in TIME_COLUMNS:
            checks.append((c, f"{typ} IS NULL AND {present}",
                           "'not a valid date-time (use ISO 8601, e.g. 2024-05-01T13:00:00Z)'"))
            checks.append((c, f"{typ} IS NOT NULL AND NOT ({typ} >= TIMESTAMP '2000-01-01' "
                              f"AND {typ} < TIMESTAMP '2100-01-01')",
                           "'date outside 2000-2099 (a typo?)'"))
        elif c in BOOL_COLUMNS:
            checks.append((c, f"{typ} IS NULL AND {present}", "'must be true or false'"))
    return checks


def _record_lines(path: Path, wanted: set[int], rejected_lines: set[int],
                  id_column: int) -> dict[int, tuple[int, str]]:
    """{staging row: (line the record starts on, its run_id cell)} for the `wanted` rows.

    Staging row k is the k-th record (0-based, after the header) that DuckDB did not reject, so the
    file is walked with Python's csv module, skipping blank lines and the records starting on a
    `rejected_lines` line. The run_id cell lets the caller check that both parsers saw the same
    record. Fields are bounded by MAX_LINE_BYTES (as DuckDB's reader is): a longer field, e.g. an
    unclosed quote swallowing the rest of the file, ends the walk instead of growing memory.
    """
    found: dict[int, tuple[int, str]] = {}
    if not wanted:
        return found
    last = max(wanted)
    with _csv_field_limit():
        with open(path, encoding="utf-8-sig", errors="surrogateescape", newline="") as f:
            reader = csv.reader(f, delimiter=",", quotechar='"', doublequote=True, strict=False)
            prev, row = 0, -1
            with contextlib.suppress(csv.Error):
                for rec in reader:
                    start, prev = prev + 1, reader.line_num
                    if not rec or start == 1 or start in rejected_lines:
                        continue
                    row += 1
                    if row in wanted:
                        found[row] = (start, rec[id_column] if id_column < len(rec) else "")
                        if row >= last:
                            break
    return found


@contextlib.contextmanager
def _csv_field_limit():
    """Python's csv module reads fields up to MAX_LINE_BYTES, the longest line DuckDB's reader takes
    (its default, 128 KiB, is lower; no limit would let an unclosed quote hold the rest of the file)."""
    old = csv.field_size_limit(MAX_LINE_BYTES)
    try:
        yield
    finally:
        csv.field_size_limit(old)


def _lines_at_offsets(path: Path, offsets: list[int]) -> dict[int, int]:
    """Line number (1-based) of each byte offset, skipping line-end bytes the offset may point at."""
    result = {}
    wanted = sorted(set(offsets))
    if not wanted:
        return result
    with open(path, "rb") as f:
        data_lines = 0
        pos = 0
        i = 0
        while i < len(wanted):
            chunk = f.read(8 * 1024 * 1024)
            if not chunk:
                break
            end = pos + len(chunk)
            while i < len(wanted) and wanted[i] < end:
                off = wanted[i]
                k = off - pos
                # an offset at a line end belongs to the next line
                j = k
                while j < len(chunk) and chunk[j:j + 1] in (b"\r", b"\n"):
                    j += 1
                result[off] = data_lines + chunk.count(b"\n", 0, j) + 1
                i += 1
            data_lines += chunk.count(b"\n")
            pos = end
        for off in wanted[i:]:
            result[off] = data_lines + 1
    return result


def _utf8_ok(data: bytes, partial: bool = False) -> bool:
    try:
        data.decode("utf-8")
        return True
    except UnicodeDecodeError as exc:
        return partial and exc.reason == "unexpected end of data"


_REJECT_MESSAGES = {
    "INVALID ENCODING": "not valid UTF-8: save the file as UTF-8 (CSV UTF-8)",
    "MISSING COLUMNS": "line has too few fields (truncated line, or a missing comma?)",
    "TOO MANY COLUMNS": "line has more fields than the header (an unquoted comma in a value?)",
    "UNQUOTED VALUE": "a quoted value is not closed (truncated line, or a stray '\"'?)",
    "LINE SIZE OVER MAXIMUM": f"line longer than {MAX_LINE_BYTES // (1024 * 1024)} MB",
    "CAST": "not a number (use digits and a . decimal point, no thousands separator)",
    "NUL": "line holds NUL bytes: binary data, or a file damaged by a crash or a full disk",
}


def _read_csv_sql(names: list[str]) -> str:
    """read_csv(?) of the file: explicit dialect, the header's own (checked) names, rejects stored."""
    columns = "{" + ", ".join("'" + n.replace("'", "''") + f"': '{_READ_TYPE[n]}'" for n in names) + "}"
    return ("read_csv(?, header = true, delim = ',', quote = '\"', escape = '\"', auto_detect = false, "

            f"columns = {columns}, store_rejects = true, rejects_table = 'reject_errors', "
            f"rejects_scan = 'reject_scans', max_line_size = {MAX_LINE_BYTES}, encoding = 'utf-8')")


def _q(col: str, suffix: str = "") -> str:
    """The quoted SQL name of a column (of the staging query)."""
    return f'"{col}{suffix}"'


def _import_csv(cur, path: Path, report: ImportReport, create_teams: bool, dry_run: bool,
                progress: Progress) -> None:
    names = _read_header(path, report)
    if names is None or not _check_header(names, report):
        return
    progress(0.1, "reading rows")
    present = [n for n in CSV_COLUMNS if n in names]
    # ONE read of the file into ONE staging table, `typed_csv`: per record its position `_row` among
    # the records the reader accepted, its typed values, a flag `_bad` saying whether any per-row rule
    # is broken, and - for flagged records only - the raw cells. Every error is computed from one
    # staging row, so a value is never reported under another record. `_row` is numbered straight off
    # the reader, before the projection (whose output order DuckDB does not keep), and each line it is
    # mapped to is checked against the file (_csv_lines). The reader stays parallel: single-threaded,
    # DuckDB 2.0.1 silently drops a record whose quote is never closed.
    checks = _row_checks(present, raw_ref='"{c}__raw"', typed_ref='"{c}"', trim_ref='"{c}__trim"')
    bad_cond = " OR ".join(f"({cond})" for _, cond, _ in checks) or "false"
    read = ", ".join([f'{_q(c)} AS {_q(c, "__raw")}' for c in present]
                     + [f'{_trim_sql(_q(c))} AS {_q(c, "__trim")}' for c in present if c in _TRIMMED])
    typed = ", ".join(f'{_typed_expr(c, _q(c, "__raw"), _q(c, "__trim") if c in _TRIMMED else None)} '
                      f'AS {_q(c)}' for c in present)
    raw_if_bad = ", ".join(f'CASE WHEN _bad THEN {_q(c, "__raw")} END AS {_q(c, "__raw")}' for c in present)
    try:
        cur.execute(f"CREATE TEMP TABLE typed_csv AS SELECT _row, {', '.join(_q(c) for c in present)}, _bad, "
                    f"{raw_if_bad} FROM (SELECT *, ({bad_cond}) AS _bad FROM (SELECT *, {typed} FROM "
                    f"(SELECT row_number() OVER () - 1 AS _row, {read} FROM {_read_csv_sql(names)})))",
                    [str(path)]).fetchall()
    except (duckdb.InvalidInputException, duckdb.ConversionException) as exc:
        report.errors.append(_unreadable(path, exc))
        return
    cur.execute(f"CREATE TEMP VIEW typed AS SELECT _row, {', '.join(_q(c) for c in present)} "
                "FROM typed_csv").fetchall()
    n_rows, n_bad = cur.execute("SELECT count(*), count(*) FILTER (_bad) FROM typed_csv").fetchone()
    rejects = cur.execute(
        "SELECT line, line_byte_position, column_idx, column_name, error_type, csv_line, error_message "
        "FROM reject_errors ORDER BY line, column_idx").fetchall()
    report.rows_read = n_rows + len({r[0] for r in rejects})

    if n_rows == 0 and not rejects:
        with open(path, "rb") as f:
            f.readline()
            rest = f.read(4096)
        if rest.strip():
            report.errors.append(_err(2, None, None, "no rows could be read after the header (mixed line "
                                                     "endings? save the file again as CSV)"))
        else:
            report.errors.append(_err(2, None, None, "the file has a header but no rows"))
        return
    progress(0.3, f"checking {n_rows} rows")

    row_errors: list = []
    unlisted = 0
    if n_bad:   # every per-row rule each flagged record breaks: (row, column, value, message, None)
        checks = _row_checks(present, raw_ref='f."{c}__raw"', typed_ref='f."{c}"')
        shown = {c: (f'CASE WHEN f."{c}__raw" = trunc(f."{c}__raw") AND abs(f."{c}__raw") < 1e18 '
                     f'THEN CAST(f."{c}__raw" AS BIGINT)::VARCHAR ELSE f."{c}__raw"::VARCHAR END'
                     if c in INTEGER_COLUMNS else f'f."{c}__raw"::VARCHAR') for c in present}
        cur.execute("CREATE TEMP TABLE flagged AS SELECT * EXCLUDE (_bad) FROM typed_csv WHERE _bad").fetchall()
        union = " UNION ALL ".join(f"SELECT f._row, '{c}' AS _col, {shown[c]}, {msg}, NULL::BIGINT "
                                   f"FROM flagged f WHERE ({cond})" for c, cond, msg in checks)
        row_errors, unlisted = _limited(cur, union, f"_row, {_col_order_sql('_col')}")
        cur.execute("DROP TABLE flagged").fetchall()
        if not row_errors:  # a flagged row must never pass unexplained: refuse rather than write it
            row_errors = [(None, None, None, f"{n_bad} rows broke a rule that could not be itemised; "
                                             "nothing was imported", None)]

    rejected_lines = set(_lines_at_offsets(path, [r[1] for r in rejects if r[1] is not None]).values())
    _common_checks_and_write(
        cur, report, present, row_errors, create_teams, dry_run, progress, unlisted=unlisted,
        lines_for=lambda rows: _csv_lines(cur, path, rows, rejected_lines, names.index("run_id")),
        extra_errors=lambda: _reject_errors(path, rejects, names))


def _csv_lines(cur, path: Path, rows: set[int], rejected_lines: set[int], id_column: int) -> dict:
    """{staging row: file line} for `rows`, each checked: the record found on that line must have the
    run_id the staging row has. A row that fails the check (the two parsers disagree about the file)
    maps to None rather than to a wrong line."""
    rows = {r for r in rows if r is not None}
    if not rows:
        return {}
    found = _record_lines(path, rows, rejected_lines, id_column)
    ids = dict(cur.execute("SELECT _row, COALESCE(run_id__raw, run_id) FROM typed_csv WHERE _row IN "
                           "(SELECT unnest(?))", [sorted(rows)]).fetchall()) if found else {}
    return {r: line for r, (line, rid) in found.items() if (rid or None) == ids.get(r)}


def _unreadable(path: Path, exc: Exception) -> dict:
    """The error for a file DuckDB's CSV reader gave up on, with the line where the file goes wrong."""
    where = _line_end_problem(path)
    if where:
        return _err(where[0], None, None, where[1])
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return _err(None, None, None, f"the file cannot be read as CSV: {first.removeprefix('Invalid Input Error: ')}")


def _line_end_problem(path: Path) -> tuple[int, str] | None:
    """(line, message) for the first line whose line end differs from the header's, else None.

    A CSV file has one kind of line end: LF, or CRLF. A file edited with two tools can mix them, and
    CR alone (classic Mac OS) is no line end to a CSV reader at all."""
    with open(path, "rb") as f:
        head = f.read(MAX_LINE_BYTES)
    nl, cr = head.find(b"\n"), head.find(b"\r")
    if cr != -1 and (nl == -1 or cr < nl - 1):
        return 1, "lines end with CR alone (classic Mac line ends): save the file with LF or CRLF line ends"
    if nl == -1:
        return None
    crlf = head[nl - 1:nl] == b"\r"
    header_end, other = ("CRLF", "LF alone") if crlf else ("LF", "CR")
    line, before = 1, b""
    with open(path, "rb") as f:
        while chunk := f.read(8 * 1024 * 1024):
            bad = -1
            if not crlf:
                bad = chunk.find(b"\r")
            elif chunk.count(b"\n") != chunk.count(b"\r\n") + (before == b"\r" and chunk[:1] == b"\n"):
                pos = chunk.find(b"\n")
                while pos != -1 and bad == -1:
                    if (chunk[pos - 1:pos] if pos else before) != b"\r":
                        bad = pos
                    pos = chunk.find(b"\n", pos + 1)
            if bad != -1:
                return (line + chunk.count(b"\n", 0, bad),
                        f"this line ends with {other} while the header ends with {header_end}: the file "
                        "mixes line ends; save it again as CSV")
            line += chunk.count(b"\n")
            before = chunk[-1:]
    return None


def _reject_errors(path: Path, rejects, names) -> list[dict]:
    lines = _lines_at_offsets(path, [r[1] for r in rejects if r[1] is not None])
    out, seen = [], set()
    for rline, byte_pos, col_idx, col_name, etype, csv_line, emsg in rejects:
        line = lines.get(byte_pos, rline)
        text = (csv_line or "").lstrip("\r\n")
        if "\x00" in text:   # a run of NUL bytes: one error for the line, whatever the reader made of it
            etype, col_name, col_idx = "NUL", None, None
        key = (line, etype, col_name if etype in ("CAST", "INVALID ENCODING") else None)
        if key in seen:
            continue
        seen.add(key)
        value = None
        if etype in ("INVALID ENCODING", "UNQUOTED VALUE", "CAST") and col_idx:
            with contextlib.suppress(Exception):
                fields = next(csv.reader([text], delimiter=",", quotechar='"'))
                value = fields[col_idx - 1] if col_idx - 1 < len(fields) else None
        elif etype in ("TOO MANY COLUMNS", "MISSING COLUMNS", "LINE SIZE OVER MAXIMUM", "NUL"):
            value = text[:200]
        if etype == "INVALID ENCODING" and byte_pos is not None:
            with open(path, "rb") as f:   # show the offending bytes, not DuckDB's replacement text
                f.seek(byte_pos)
                raw = f.read(400).lstrip(b"\r\n").split(b"\n", 1)[0]
            bad = next((i for i in range(len(raw)) if not _utf8_ok(raw[:i + 1], partial=True)), None)
            value = repr(raw[max(0, (bad or 0) - 20):(bad or 0) + 20]) if bad is not None else repr(raw[:80])
        msg = _REJECT_MESSAGES.get(etype, emsg)
        if etype == "MISSING COLUMNS":
            with contextlib.suppress(Exception):
                n = len(next(csv.reader([text], delimiter=",", quotechar='"')))
                msg = f"line has {n} fields, the header {len(names)} (truncated line, or a missing comma?)"
        if etype == "TOO MANY COLUMNS":
            col_name = None
        out.append(_err(line, col_name, value, msg))
    return out


# ------------------------------------------------------------------------------- shared merge / write

def _merge_expr(col: str, fmt: str, supplied: set[str]) -> str:
    """SQL for the value a run will hold: t = the file's row, r = the ledger's row (NULL when new)."""
    if col == "estimate_source" and fmt == "csv" and "estimated_gpu_hours" in supplied:
        file_src = "t.estimate_source" if col in supplied else "NULL"
        return (f"COALESCE({file_src}, CASE WHEN t.estimated_gpu_hours IS NULL OR "
                "t.estimated_gpu_hours = r.estimated_gpu_hours THEN r.estimate_source END, "
                "CASE WHEN COALESCE(t.estimated_gpu_hours, r.estimated_gpu_hours) IS NOT NULL "
                "THEN 'stated' END)")
    if col not in supplied:
        return "COALESCE(r.capacity, 'stable')" if col == "capacity" else f"r.{col}"
    if fmt == "sacct":
        keep_measured = "(r.estimated_gpu_hours IS NOT NULL AND r.estimate_source IS DISTINCT FROM 'requested')"
        keep_reservation = "(r.reserved_gpu_hours IS NOT NULL AND r.source <> 'sacct')"
        if col == "kind":
            return "COALESCE(r.kind, t.kind)"
        if col in ("estimated_gpu_hours", "estimate_source"):
            return f"CASE WHEN {keep_measured} THEN r.{col} ELSE COALESCE(t.{col}, r.{col}) END"
        if col in ("reserved_from", "reserved_until", "reserved_gpu_hours"):
            return f"CASE WHEN {keep_reservation} THEN r.{col} ELSE COALESCE(t.{col}, r.{col}) END"
    if col in REQUIRED_COLUMNS:
        return f"t.{col}"
    if col == "capacity":   # an empty cell on a new run: the default (runs.capacity is NOT NULL)
        return "COALESCE(t.capacity, r.capacity, 'stable')"
    return f"COALESCE(t.{col}, r.{col})"


_LEDGER_REF = re.compile(r"\br\.(\w+)")


def _as_new(expr: str) -> str:
    """A _merge_expr for a run the ledger does not hold: every ledger value (r.<col>) is NULL."""
    return _LEDGER_REF.sub("NULL", expr)


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


def _common_checks_and_write(cur, report: ImportReport, supplied_cols: list[str], raw_errors: list,
                             create_teams: bool, dry_run: bool, progress: Progress, *,
                             lines_for: Callable[[set], dict], extra_errors: Callable[[], list] | None = None,
                             unlisted: int = 0) -> None:
    """Rules needing the whole file or the ledger, then the write - on the temp table/view `typed`.

    raw_errors: rows (staging row, column, value, message, other row) found so far; `unlisted` more
    were counted but not fetched. lines_for(rows) -> {row: file line} (called only when there are
    errors to report; a row it cannot place is reported without a line). extra_errors() -> errors
    already in report form (the CSV reader's rejects).

    Nothing here materialises a merged copy of the file: the merged values (_merge_expr) are computed
    inside the statements that need them. One pass over `typed` LEFT JOIN runs counts new / updated /
    unchanged rows and time-order violations; details are queried only when there are violations.
    New run ids are a plain INSERT ... SELECT from `typed`; only changed existing runs are upserted.
    """
    fmt = report.fmt
    supplied = set(supplied_cols)
    now = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)
    with contextlib.suppress(_Abort), transaction(cur):
        progress(0.5, "comparing with the ledger")
        # duplicates of run_id inside the file: every later occurrence names the first line
        n_rows, n_dupes = cur.execute(
            "SELECT count(*), count(run_id) - count(DISTINCT run_id) FROM typed").fetchone()
        if n_dupes:
            unlisted += _add(raw_errors, *_limited(
                cur, "SELECT _row, 'run_id', run_id, 'duplicate run_id: also on line {other}', first_row FROM ("
                "  SELECT _row, run_id, min(_row) OVER (PARTITION BY run_id) AS first_row, "
                "         count(*) OVER (PARTITION BY run_id) AS n FROM typed WHERE run_id IS NOT NULL"
                ") WHERE n > 1 AND _row <> first_row"))
        # unknown teams: one error per team, at its first line
        unknown = cur.execute(
            "SELECT team, first_row, n FROM (SELECT team, min(_row) AS first_row, count(*) AS n FROM typed "
            "WHERE team IS NOT NULL GROUP BY team) g "
            "WHERE NOT EXISTS (SELECT 1 FROM teams x WHERE x.team = g.team) ORDER BY 2").fetchall()
        if unknown and not create_teams:
            for team, first, n in unknown:
                raw_errors.append((first, "team", team,
                                   f"unknown team {team!r} ({n} row{'s' if n != 1 else ''}): add it to "
                                   "data/teams.toml, or import with create teams", None))
        elif unknown:
            cols = ["team", *DEFAULT_TEAM_POLICY]
            for team, _first, _n in ([] if dry_run else unknown):
                cur.execute(f"INSERT INTO teams ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                            [team, *DEFAULT_TEAM_POLICY.values()]).fetchall()
            report.teams_created = [u[0] for u in unknown]

        if fmt == "sacct":
            # capacity from the team's preemptible partitions (known only now that teams exist)
            cur.execute(
                "UPDATE typed SET capacity = CASE WHEN len(list_filter(str_split(_partition, ','), "
                "lambda p: NOT list_contains(COALESCE(x.preemptible_partitions, []::VARCHAR[]), trim(p)))) = 0 "
                "AND _partition IS NOT NULL THEN 'preemptible' ELSE 'stable' END "
                "FROM teams x WHERE x.team = typed.team").fetchall()
            cur.execute("UPDATE typed SET capacity = 'stable' WHERE capacity IS NULL").fetchall()

        exprs = {c: _merge_expr(c, fmt, supplied) for c in CSV_COLUMNS}
        changed = " OR ".join(f"({e}) IS DISTINCT FROM r.{c}" for c, e in exprs.items())
        merged_cols = ", ".join(f"{e} AS {c}" for c, e in exprs.items())

        def merged(rows: str = "typed") -> str:
            """The runs as they would be stored (not materialised), with their status."""
            return (f"SELECT t._row, CASE WHEN r.run_id IS NULL THEN 'new' WHEN {changed} THEN 'updated' "
                    f"ELSE 'unchanged' END AS _status, {merged_cols} "
                    f"FROM {rows} t LEFT JOIN runs r ON r.run_id = t.run_id")

        any_order_bad = " OR ".join(f"({cond})" for _, _, cond, _ in _ORDER_CHECKS)
        n_updated, n_unchanged, n_order_bad = cur.execute(
            "SELECT count(*) FILTER (_status = 'updated'), count(*) FILTER (_status = 'unchanged'), "
            f"count(*) FILTER ({any_order_bad}) FROM ({merged()}) m").fetchone()
        if n_order_bad:
            for col, other, cond, msg in _ORDER_CHECKS:
                src = col if col in supplied else other
                unlisted += _add(raw_errors, *_limited(
                    cur, f"SELECT m._row, '{src}', m.{src}::VARCHAR, {msg}, NULL FROM ({merged()}) m "
                    f"WHERE {cond}"))

        if n_updated:  # what the gate admitted is not for an import to change behind its back
            # (compared as the run would be stored: sacct keeps the ledger's kind for a known run)
            for col in _ADMITTED_COLUMNS:
                unlisted += _add(raw_errors, *_limited(
                    cur, f"SELECT t._row, '{col}', ({exprs[col]})::VARCHAR, 'run ' || r.run_id || ' holds a "
                    f"reservation the gate admitted with {col} ' || r.{col} || '; an import may not change it "
                    f"(finish the run, or submit a new run ID)', NULL FROM typed t JOIN runs r "
                    f"ON r.run_id = t.run_id WHERE r.source = 'submit' AND r.reserved_gpu_hours IS NOT NULL "
                    f"AND ({exprs[col]}) IS DISTINCT FROM r.{col}"))

        report.inserted = n_rows - n_updated - n_unchanged
        report.updated = n_updated
        report.unchanged = n_unchanged
        report.preview = cur.execute(
            f"SELECT _status AS status, * EXCLUDE (_row, _status) FROM "
            f"({merged(f'(SELECT * FROM typed ORDER BY _row LIMIT {PREVIEW_ROWS})')}) ORDER BY _row").df()

        extra = extra_errors() if extra_errors else []
        if raw_errors or extra or unlisted:
            lines = lines_for({r for e in raw_errors for r in (e[0], e[4])})
            for row, col, value, msg, other in raw_errors:
                if other is not None:
                    msg = msg.replace("{other}", str(lines.get(other, "?")))
                if row is not None and row not in lines:
                    msg += f" (record {row + 1} after the header; its line could not be determined)"
                report.errors.append(_err(lines.get(row), col, value, msg))
            report.errors += extra
            report.unlisted = unlisted
            report.inserted = report.updated = report.unchanged = 0
            report.teams_created = []
            raise _Abort
        if dry_run:
            raise _Abort

        progress(0.7, f"writing {report.inserted} new and {report.updated} changed runs")
        cols = ", ".join(CSV_COLUMNS)
        if report.updated:    # changed runs: upsert; `source` keeps the run's creator
            cur.execute(f"CREATE TEMP TABLE changed AS SELECT {merged_cols} FROM typed t "
                        f"JOIN runs r ON r.run_id = t.run_id WHERE {changed}").fetchall()
            sets = ", ".join(f"{c} = EXCLUDED.{c}" for c in CSV_COLUMNS if c != "run_id")
            cur.execute(f"INSERT INTO runs ({cols}, source, updated_at) SELECT {cols}, ?, ? FROM changed "
                        f"ON CONFLICT (run_id) DO UPDATE SET {sets}, updated_at = EXCLUDED.updated_at",
                        [fmt, now]).fetchall()
            cur.execute("DROP TABLE changed").fetchall()
        if report.inserted:   # new run ids (checked absent inside this transaction): a plain append
            new_cols = ", ".join(f"{_as_new(e)} AS {c}" for c, e in exprs.items())
            only_new = ("" if not (report.updated or report.unchanged) else
                        " WHERE NOT EXISTS (SELECT 1 FROM runs x WHERE x.run_id = t.run_id)")
            cur.execute(f"INSERT INTO runs ({cols}, source, updated_at) SELECT {new_cols}, ?, ? "
                        f"FROM typed t{only_new}", [fmt, now]).fetchall()
        # free the staging memory before the commit (a failing statement would abort the transaction,
        # so drop only what exists: a view over typed_csv for CSV, a table for sacct)
        is_view = cur.execute("SELECT count(*) FROM duckdb_views() WHERE view_name = 'typed' "
                              "AND temporary").fetchone()[0]
        cur.execute("DROP VIEW typed" if is_view else "DROP TABLE typed").fetchall()
        cur.execute("DROP TABLE IF EXISTS typed_csv").fetchall()
        report.written = True
        progress(0.95, "committing")
    if not report.written:
        report.teams_created = report.teams_created if dry_run else []


# --------------------------------------------------------------------------------------------- sacct

XDMOD_FIELDS = [
    "jobid", "jobidraw", "cluster", "partition", "qos", "account", "group", "gid", "user", "uid",
    "submit", "eligible", "start", "end", "elapsed", "exitcode", "state", "nnodes", "ncpus", "reqcpus",
    "reqmem", "reqtres", "alloctres", "timelimit", "nodelist", "jobname",
]
SACCT_REQUIRED = ["jobid", "account", "partition", "state", "start", "end", "elapsed", "timelimit"]
_STATE_MAP = {
    "COMPLETED": "completed", "TIMEOUT": "wall-clock", "DEADLINE": "wall-clock",
    "PREEMPTED": "preempted", "CANCELLED": "cancelled", "REVOKED": "cancelled", "FAILED": "failed",
    "OUT_OF_MEMORY": "out-of-memory", "NODE_FAIL": "node-fail", "BOOT_FAIL": "node-fail",
    "REQUEUED": "requeued",
}
_UNFINISHED = {"RUNNING", "PENDING", "SUSPENDED", "COMPLETING", "CONFIGURING", "RESIZING",
               "REQUEUE_HOLD", "REQUEUE_FED", "SIGNALING", "STAGE_OUT", "STOPPED", "RESV_DEL_HOLD",
               "SPECIAL_EXIT", "UPDATE_DB", "POWER_UP_NODE", "LAUNCH_FAILED"}
_JOBID = re.compile(r"^(?P<job>\d+(?:_(?:\d+|\[[0-9,\-%:]+\])|\+\d+)?)(?:\.(?P<step>[A-Za-z0-9_]+))?$")
_RUN_ID_IN_NAME = re.compile(r"^run_id=(.+)$")
_NEVER = {"", "unknown", "none", "n/a"}


def _slurm_duration_h(text: str) -> float | None:
    """Slurm duration ([D-]HH:MM:SS, D-HH, D-HH:MM, MM, MM:SS) in hours; ValueError when malformed."""
    days = 0
    rest = text
    if "-" in text:
        d, rest = text.split("-", 1)
        days = int(d)
        parts = [float(p) for p in rest.split(":")]
        if not 1 <= len(parts) <= 3:
            raise ValueError(text)
        parts += [0.0] * (3 - len(parts))
        h, m, s = parts
    else:
        parts = [float(p) for p in rest.split(":")]
        if len(parts) == 1:
            h, m, s = 0.0, parts[0], 0.0
        elif len(parts) == 2:
            h, (m, s) = 0.0, parts
        elif len(parts) == 3:
            h, m, s = parts
        else:
            raise ValueError(text)
    if days < 0 or min(h, m, s) < 0 or m >= 60 or s >= 60:
        raise ValueError(text)
    return days * 24 + h + m / 60 + s / 3600


def _slurm_time(text: str) -> dt.datetime | None:
    if text.strip().lower() in _NEVER:
        return None
    value = dt.datetime.fromisoformat(text.strip())
    if value.tzinfo is not None:
        value = value.astimezone(dt.timezone.utc).replace(tzinfo=None)
    if not dt.datetime(2000, 1, 1) <= value < dt.datetime(2100, 1, 1):
        raise ValueError(text)
    return value


def _tres_gpus(text: str) -> int | None:
    """GPUs in a TRES string (gres/gpu=N, or the sum of gres/gpu:TYPE=N); None when it names none."""
    total = typed = None
    for item in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(item)
        if key == "gres/gpu":
            total = int(value)
        elif key.startswith("gres/gpu:"):
            typed = (typed or 0) + int(value)
    return total if total is not None else typed


def _parse_sacct(path: Path, report: ImportReport) -> list[dict]:
    """Parse `sacct --parsable2` output into run rows (dicts with '_row' = the file line).

    Fields: any order, extra fields ignored, when the first line is a header (it names JobID); without
    a header exactly the Open XDMoD list XDMOD_FIELDS in that order. Needed: SACCT_REQUIRED and
    AllocTRES or ReqTRES. Times are taken as UTC (run sacct with TZ=UTC).
    Mapping: Account -> team; GPUs from gres/gpu=N (or the sum of gres/gpu:TYPE=N) in AllocTRES, ReqTRES
    when it was never allocated (AllocTRES empty); jobs with no GPU are skipped (counted in `skipped`).
    actual_gpu_hours = Elapsed x GPUs for finished jobs (0 for jobs that never ran; NULL while running).
    stop_reason from State (COMPLETED completed, TIMEOUT/DEADLINE wall-clock, PREEMPTED preempted,
    CANCELLED [by N] cancelled, FAILED failed, OUT_OF_MEMORY out-of-memory, NODE_FAIL/BOOT_FAIL node-fail,
    REQUEUED requeued; RUNNING, PENDING and other live states: unfinished, no end).
    Reservation: reserved_from = Eligible (else Submit; never after Start), reserved_until =
    (Start, else reserved_from) + Timelimit, reserved_gpu_hours = Timelimit x GPUs; max_runtime_hours =
    Timelimit (UNLIMITED / Partition_Limit: unknown, so no reservation end and no requested estimate).
    Estimate: Timelimit x GPUs with estimate_source 'requested' - used only when the ledger holds no
    pilot/stated estimate for the run (that one is kept). kind: the ledger's kind for a known run, else
    QOS or partition when named exploratory/production/retraining, else 'exploratory'.
    capacity: preemptible when the partition is in the team's preemptible_partitions.
    Run id: JobName 'run_id=X' -> X; JobName equal to a run id already in the ledger -> that run
    (the submit hook names admitted jobs after their run id); otherwise 'slurm-<JobID>'.
    Steps (123.batch, 123.extern, 123.0) fold into their job line (a step without its job line is an
    error); array tasks (123_4) and het components (123+0) are runs of their own.
    A reservation the gate recorded (source other than sacct) is kept; kind, too; other fields sacct
    knows (times, GPUs, actuals, stop reason, partition) take sacct's value, empty ones keep the ledger's.
    """
    rows: list[dict] = []
    raw = path.read_bytes()
    if raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    lines = raw.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    header = None
    fields = XDMOD_FIELDS
    start = 0
    first_idx = next((i for i, l in enumerate(lines) if l.strip()), None)
    if first_idx is None:
        report.errors.append(_err(1, None, None, "the file is empty (expected sacct --parsable2 output)"))
        return rows
    first = lines[first_idx].rstrip(b"\r").decode("utf-8", "replace")
    names = [n.strip().lower() for n in first.split("|")]
    if "jobid" in names:
        header = names
        fields = names
        start = first_idx + 1
        missing = [f for f in SACCT_REQUIRED if f not in names]
        if "alloctres" not in names and "reqtres" not in names:
            missing.append("alloctres")
        if missing:
            report.errors.append(_err(first_idx + 1, ", ".join(missing), first[:200],
                                      "sacct header lacks required field(s): " + ", ".join(missing)))
            return rows
        dupes = sorted({n for n in names if names.count(n) > 1 and n})
        if dupes:
            report.errors.append(_err(first_idx + 1, ", ".join(dupes), first[:200],
                                      "sacct header names a field twice"))
            return rows
    elif "," in first and "|" not in first:
        report.errors.append(_err(first_idx + 1, None, first[:200],
                                  "this looks like a CSV file, not sacct --parsable2 output ('|'-separated)"))
        return rows
    idx = {n: i for i, n in enumerate(fields)}
    n_fields = len(fields)

    jobs: dict[str, int] = {}
    steps: list[tuple[int, str]] = []
    for i in range(start, len(lines)):
        lineno = i + 1
        bline = lines[i].rstrip(b"\r")
        if not bline.strip():
            continue
        try:
            text = bline.decode("utf-8")
        except UnicodeDecodeError as exc:
            report.errors.append(_err(lineno, None, repr(bline[max(0, exc.start - 10):exc.end + 10]),
                                      "not valid UTF-8"))
            continue
        parts = text.split("|")
        if header and [p.strip().lower() for p in parts] == header:
            continue  # repeated header (concatenated outputs)
        if len(parts) != n_fields:
            hint = " (a '|' inside a job name?)" if len(parts) > n_fields else " (truncated line?)"
            what = "the header's" if header else "Open XDMoD's (no header line)"
            report.errors.append(_err(lineno, None, text[:200],
                                      f"line has {len(parts)} fields, {what} {n_fields}{hint}"))
            continue
        get = lambda name: parts[idx[name]].strip() if name in idx else ""  # noqa: E731
        jobid = get("jobid")
        m = _JOBID.match(jobid)
        if not m:
            report.errors.append(_err(lineno, "jobid", jobid, "not a Slurm job id (like 123, 123_4, "
                                                              "123+0 or 123.batch)"))
            continue
        if m.group("step"):
            steps.append((lineno, m.group("job")))
            continue
        report.rows_read += 1
        if m.group("job") in jobs:
            report.errors.append(_err(lineno, "jobid", jobid,
                                      f"job {jobid} also on line {jobs[m.group('job')]}"))
            continue
        jobs[m.group("job")] = lineno
        row = _sacct_row(lineno, m.group("job"), get, idx, report)
        if row is not None:
            rows.append(row)
    for lineno, job in steps:
        if job not in jobs:
            report.errors.append(_err(lineno, "jobid", job, f"step of job {job}, whose job line is not in "
                                                            "the file (export jobs with their steps)"))
        else:
            report.skipped += 1
    return rows


def _sacct_row(lineno: int, job: str, get, idx, report: ImportReport) -> dict | None:
    errors_before = len(report.errors)

    def bad(name, value, message):
        report.errors.append(_err(lineno, name, value, message))

    times = {}
    for name in ("submit", "eligible", "start", "end"):
        value = get(name)
        try:
            times[name] = _slurm_time(value) if name in idx else None
        except ValueError:
            bad(name, value, "not a valid time (like 2024-05-01T13:00:00, Unknown or None)")
    try:
        elapsed_h = _slurm_duration_h(get("elapsed") or "0")
    except ValueError:
        bad("elapsed", get("elapsed"), "not a valid duration (like 1-02:03:04 or 02:03:04)")
        elapsed_h = None
    limit_text = get("timelimit")
    limit_h = None
    if limit_text.upper() not in ("UNLIMITED", "PARTITION_LIMIT", "INVALID", "", "UNKNOWN", "NONE"):
        try:
            limit_h = _slurm_duration_h(limit_text)
        except ValueError:
            bad("timelimit", limit_text, "not a valid time limit (like 1-00:00:00, UNLIMITED)")
    gpus = None
    tres_field = "alloctres" if get("alloctres") else "reqtres"
    try:
        gpus = _tres_gpus(get(tres_field))
    except ValueError:
        bad(tres_field, get(tres_field), "not a TRES list (like cpu=8,gres/gpu=2,mem=64G)")
    state_text = get("state")
    state = state_text.split(" ")[0].rstrip("+").upper()
    if state in _STATE_MAP:
        stop_reason = _STATE_MAP[state]
    elif state in _UNFINISHED:
        stop_reason = None
    else:
        bad("state", state_text, "unknown Slurm job state")
        stop_reason = None
    account = get("account")
    if not account:
        bad("account", account, "account is empty (it names the team)")
    for name in ("jobname", "account", "partition"):
        if len(get(name)) > MAX_TEXT_CHARS:
            bad(name, get(name), f"text longer than {MAX_TEXT_CHARS} characters")
        elif "\x00" in get(name):
            bad(name, get(name), "holds a NUL byte (binary data?)")
    if len(report.errors) > errors_before:
        return None
    if not gpus:
        report.skipped += 1
        return None
    finished = stop_reason is not None
    started, ended = times.get("start"), times.get("end") if finished else None
    reserved_from = times.get("eligible") or times.get("submit")
    if reserved_from and started and reserved_from > started:
        reserved_from = started
    base = started or reserved_from
    qos, partition = get("qos").lower(), get("partition")
    kind = qos if qos in ENUMS["kind"] else (partition.lower() if partition.lower() in ENUMS["kind"]
                                             else "exploratory")
    return {
        "_row": lineno, "_jobid": job, "_jobname": get("jobname") or None,
        "_partition": partition or None,
        "team": account, "kind": kind, "gpus": gpus, "job_name": get("jobname") or None,
        "estimated_gpu_hours": limit_h * gpus if limit_h is not None else None,
        "estimate_source": "requested" if limit_h is not None else None,
        "max_runtime_hours": limit_h,
        "reserved_from": reserved_from,
        "reserved_until": base + dt.timedelta(hours=limit_h) if base and limit_h is not None else None,
        "reserved_gpu_hours": limit_h * gpus if limit_h is not None else None,
        "started_at": started, "ended_at": ended,
        "actual_gpu_hours": (elapsed_h or 0.0) * gpus if finished else None,
        "stop_reason": stop_reason,
    }


_SACCT_SUPPLIED = ["run_id", "team", "kind", "capacity", "gpus", "job_name", "estimated_gpu_hours",
                   "estimate_source", "max_runtime_hours", "reserved_from", "reserved_until",
                   "reserved_gpu_hours", "started_at", "ended_at", "actual_gpu_hours", "stop_reason"]


def _import_sacct(cur, path: Path, report: ImportReport, create_teams: bool, dry_run: bool,
                  progress: Progress) -> None:
    import pyarrow as pa

    progress(0.1, "reading sacct lines")
    rows = _parse_sacct(path, report)
    if report.errors:
        return
    if not rows:
        report.errors.append(_err(None, None, None, "no job lines with GPUs in the file"
                                  + (f" ({report.skipped} lines skipped: steps or jobs without GPUs)"
                                     if report.skipped else "")))
        return
    if report.skipped:
        report.notes.append(f"{report.skipped} lines skipped: job steps folded into their job, "
                            "or jobs without GPUs")
    progress(0.3, f"checking {len(rows)} jobs")
    ts = pa.timestamp("us")
    schema = pa.schema([
        ("_row", pa.int64()), ("_jobid", pa.string()), ("_jobname", pa.string()),
        ("_partition", pa.string()), ("team", pa.string()), ("kind", pa.string()),
        ("gpus", pa.int32()), ("job_name", pa.string()), ("estimated_gpu_hours", pa.float64()),
        ("estimate_source", pa.string()), ("max_runtime_hours", pa.float64()),
        ("reserved_from", ts), ("reserved_until", ts), ("reserved_gpu_hours", pa.float64()),
        ("started_at", ts), ("ended_at", ts), ("actual_gpu_hours", pa.float64()),
        ("stop_reason", pa.string()),
    ])
    table = pa.Table.from_pylist(rows, schema=schema)
    cur.register("sacct_rows", table)
    cur.execute(
        "CREATE TEMP TABLE typed AS SELECT s._row, "
        "CASE WHEN regexp_matches(s._jobname, '^run_id=.+$') THEN regexp_extract(s._jobname, '^run_id=(.+)$', 1) "
        "     WHEN r.run_id IS NOT NULL THEN r.run_id ELSE 'slurm-' || s._jobid END AS run_id, "
        "s.* EXCLUDE (_row, _jobid, _jobname), NULL::VARCHAR AS capacity "
        "FROM sacct_rows s LEFT JOIN runs r ON r.run_id = s._jobname").fetchall()
    cur.unregister("sacct_rows")
    # the resolved kind of a known run is merged in _merge_expr (ledger's kind wins)
    raw_errors = cur.execute(
        f"SELECT _row, 'run_id', run_id, 'run id longer than {MAX_TEXT_CHARS} characters', NULL "
        f"FROM typed WHERE length(run_id) > {MAX_TEXT_CHARS}").fetchall()
    _common_checks_and_write(cur, report, _SACCT_SUPPLIED, raw_errors, create_teams, dry_run, progress,
                             lines_for=lambda rows: {r: r for r in rows})
