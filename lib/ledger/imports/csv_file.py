"""The CSV format users write: header and per-row checks, and the staging read into `typed`.

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
"""
from __future__ import annotations

import csv
import difflib
from pathlib import Path

import duckdb

from lib.ledger.imports.columns import (
    BOOL_COLUMNS, CSV_COLUMNS, ENUMS, INTEGER_COLUMNS, MAX_TEXT_CHARS, NUMBER_COLUMNS, REQUIRED_COLUMNS,
    TEXT_COLUMNS, TIME_COLUMNS,
)
from lib.ledger.imports.csv_lines import (
    MAX_LINE_BYTES, _csv_field_limit, _csv_lines, _line_end_problem, _lines_at_offsets, _reject_errors,
    _unreadable,
)
from lib.ledger.imports.merge import Staged, check_and_write
from lib.ledger.imports.report import ImportReport, RowErrors, Steps, _col_order_sql, _err
from lib.gate.terms import TEAM_NAME_REGEX, TEAM_NAME_RULE

# How DuckDB's CSV reader reads each column. The exact pass (a dry run, or any file with a problem)
# reads every column as text and casts numbers in the projection (_typed_expr, TRY_CAST): a cell the
# reader failed to cast would reject its whole line, hiding the line's other problems, while cast
# there 'not a number' is a row rule like the others. The fast pass of a clean import lets the
# reader parse numbers itself (DOUBLE; faster): a bad number is a CAST reject, which sends the file
# to the exact pass.
_NUMERIC = {*NUMBER_COLUMNS, *INTEGER_COLUMNS}
_READ_TYPE = dict.fromkeys(CSV_COLUMNS, "VARCHAR")
_FAST_READ_TYPE = {c: ("DOUBLE" if c in _NUMERIC else "VARCHAR") for c in CSV_COLUMNS}

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


def _check_header(names: list[str], report: ImportReport) -> tuple[bool, bool]:
    """(header ok, rows readable): every header problem goes to report.errors; the rows can still be
    read (and their problems listed) when the only problem is a missing required column other than
    run_id (which places each record on its line)."""
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
    readable = ok
    for req in REQUIRED_COLUMNS:
        if req not in seen:
            report.errors.append(_err(1, req, None, f"required column {req!r} is missing from the header"))
            ok = False
            readable = readable and req != "run_id"
    return ok, readable



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


def _typed_expr(col: str, raw: str, trimmed: str | None, *, numbers_read: bool = False) -> str:
    """SQL turning the column `col` as read (_READ_TYPE) into its typed value (NULL when not valid).

    raw: SQL of the value as read; trimmed: SQL of _trim_sql(raw) when it is already computed, else
    None. Every column is read as text and cast here (TRY_CAST: NULL when not valid, which a row rule
    reports): the reader would reject the whole line on a bad number, ignores a UTC offset and rounds
    2.5 to an INTEGER, all of which are not left to it. numbers_read: the reader parsed the number
    columns itself (_FAST_READ_TYPE), so their raw value is a DOUBLE already.
    """
    q = raw
    t = trimmed or _trim_sql(q)
    if col in TEXT_COLUMNS:
        return f"NULLIF({q}, '')"
    if col in ENUMS:   # = NULLIF(trim(q), ''); a cell holding an allowed value exactly needs no trim
        lit = ", ".join(f"'{v}'" for v in ENUMS[col])
        return f"CASE WHEN {q} IN ({lit}) THEN {q} ELSE NULLIF(trim({q}), '') END"
    if col in NUMBER_COLUMNS:      # the cast itself allows spaces around the number
        return q if numbers_read else f"TRY_CAST({q} AS DOUBLE)"
    if col in INTEGER_COLUMNS:     # as DOUBLE first: 2.5 must be an error, not rounded to 3
        d = q if numbers_read else f"TRY_CAST({q} AS DOUBLE)"
        return f"CASE WHEN {d} = trunc({d}) AND abs({d}) < 2147483648 THEN CAST({d} AS INTEGER) END"
    if col in TIME_COLUMNS:
        # text -> TIMESTAMPTZ (an offset is applied; none means the session's UTC) -> its UTC instant
        # as TIMESTAMP. epoch_us/make_timestamp do that last step faster than a TIMESTAMPTZ ->
        # TIMESTAMP cast (which goes through ICU); +-infinity become NULL, i.e. not a valid time.
        return f"make_timestamp(epoch_us(TRY_CAST({t} AS TIMESTAMPTZ)))"
    if col in BOOL_COLUMNS:
        return f"TRY_CAST({t} AS BOOLEAN)"
    raise KeyError(col)


def _row_checks(cols: list[str], raw_ref: str, typed_ref: str,
                trim_ref: str | None = None, *, numbers_read: bool = False) -> list[tuple[str, str, str]]:
    """(column, condition over the raw text / typed value, message SQL) for each per-row rule.

    raw_ref, typed_ref: format strings naming a column's value as read and typed ({c}: the column);
    trim_ref: one naming an already computed _trim_sql(raw) (columns in _TRIMMED), else None.
    """
    checks = []
    for c in cols:
        raw = raw_ref.format(c=c)
        typ = typed_ref.format(c=c)
        trimmed = trim_ref.format(c=c) if trim_ref and c in _TRIMMED else _trim_sql(raw)
        if c in ENUMS:   # the typed value is NULLIF(trim(raw), '')
            present = f"{typ} IS NOT NULL"
        elif c in _NUMERIC and numbers_read:   # a DOUBLE: the reader made empty cells NULL
            present = f"{raw} IS NOT NULL"
        elif c in _NUMERIC:   # the trim only where the cast failed: an empty cell, or not a number
            present = f"({typ} IS NOT NULL OR {trimmed} IS NOT NULL)"
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
            if c == "team":   # lib.gate.terms.TEAM_NAME, the one rule for team names
                checks.append((c, f"{present} AND NOT regexp_matches({trimmed}, '{TEAM_NAME_REGEX}')",
                               f"'not a valid team name: {TEAM_NAME_RULE.replace(chr(39), chr(39) * 2)}'"))
        elif c in ENUMS:
            allowed = ", ".join(ENUMS[c])
            lit = ", ".join(f"'{v}'" for v in ENUMS[c])
            checks.append((c, f"{present} AND {typ} NOT IN ({lit})",
                           f"'{c} must be one of: {allowed}'"))
        elif c in NUMBER_COLUMNS:
            if not numbers_read:
                checks.append((c, f"{typ} IS NULL AND {trimmed} IS NOT NULL",
                               "'not a number (use digits and a . decimal point, no thousands separator)'"))
            checks.append((c, f"{typ} IS NOT NULL AND NOT isfinite({typ})",
                           "'must be a finite number (NaN and infinity are not allowed)'"))
            checks.append((c, f"{typ} < 0", "'must not be negative'"))
        elif c in INTEGER_COLUMNS:
            checks.append((c, f"{present} AND {typ} IS NULL" if numbers_read
                           else f"{typ} IS NULL AND {trimmed} IS NOT NULL", "'not a whole number'"))
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


def _read_csv_sql(names: list[str], read_type: dict[str, str] = _READ_TYPE) -> str:
    """read_csv(?) of the file: explicit dialect, the header's own (checked) names, rejects stored."""
    columns = "{" + ", ".join("'" + n.replace("'", "''") + f"': '{read_type[n]}'" for n in names) + "}"
    return ("read_csv(?, header = true, delim = ',', quote = '\"', escape = '\"', auto_detect = false, "

            f"columns = {columns}, store_rejects = true, rejects_table = 'reject_errors', "
            f"rejects_scan = 'reject_scans', max_line_size = {MAX_LINE_BYTES}, encoding = 'utf-8')")


def _q(col: str, suffix: str = "") -> str:
    """The quoted SQL name of a column (of the staging query)."""
    return f'"{col}{suffix}"'


def _merge_rules(supplied: set[str]) -> dict[str, str]:
    """The CSV's own merge rule, when the file has estimated_gpu_hours: estimate_source is the file's,
    else the ledger's when the file's estimate is empty or equals the ledger's, else 'stated' when
    the run has an estimate."""
    if "estimated_gpu_hours" not in supplied:
        return {}
    file_src = "t.estimate_source" if "estimate_source" in supplied else "NULL"
    return {"estimate_source": f"COALESCE({file_src}, CASE WHEN t.estimated_gpu_hours IS NULL OR "
                               "t.estimated_gpu_hours = r.estimated_gpu_hours THEN r.estimate_source END, "
                               "CASE WHEN COALESCE(t.estimated_gpu_hours, r.estimated_gpu_hours) IS NOT NULL "
                               "THEN 'stated' END)"}


def import_csv(cur, path: Path, report: ImportReport, create_teams: bool, dry_run: bool,
               steps: Steps, *, exact: bool = True) -> bool:
    """Import the CSV file at `path` (format: module docstring) with `cur`, or say in report.errors why not.

    exact: number every record by its position in the file, which errors and the preview show.
    Without it the staging is faster (it also lets the reader parse numbers), but positions are approximate: the import then stops at the first sign of a problem and
    returns True, and the caller runs it again, exactly, on a fresh cursor. Returns False otherwise.
    """
    names = _read_header(path, report)
    if names is None:
        return False
    header_ok, readable = _check_header(names, report)
    if not readable:
        return False
    if not header_ok and not exact:   # the rows' problems are listed too, at their exact lines
        return True
    steps(0.1, "reading rows")
    present = [n for n in CSV_COLUMNS if n in names]
    try:
        _stage(cur, path, names, present, exact=exact)
    except (duckdb.InvalidInputException, duckdb.ConversionException) as exc:
        report.errors.append(_unreadable(path, exc))
        return False
    n_rows, n_bad = cur.execute("SELECT count(*), count(*) FILTER (_bad) FROM typed_csv").fetchone()
    rejects = cur.execute(
        "SELECT line, line_byte_position, column_idx, column_name, error_type, csv_line, error_message "
        "FROM reject_errors ORDER BY line, column_idx").fetchall()
    if not exact and (n_bad or rejects):
        return True
    report.rows_read = n_rows + len({r[0] for r in rejects})
    if n_rows == 0 and not rejects:
        report.errors.append(_no_rows_error(path))
        return False
    steps(0.3, f"checking {n_rows} rows")
    errors = _flagged_row_errors(cur, present, n_bad) if n_bad else RowErrors()
    reject_lines = _lines_at_offsets(path, [r[1] for r in rejects if r[1] is not None])
    rejected = set(reject_lines.values())
    id_column = names.index("run_id")

    def lines_for(rows: set) -> dict:
        return _csv_lines(cur, path, rows, rejected, id_column) if exact else {}

    header_errors = report.errors   # a missing required column: refused, whatever the rows hold
    report.errors = []
    staged = Staged(supplied=present, rules=_merge_rules(set(present)), errors=errors,
                    reader_errors=header_errors + _reject_errors(path, rejects, reject_lines, len(names)),
                    lines_for=lines_for, drop=("DROP VIEW typed", "DROP TABLE typed_csv"))
    check_and_write(cur, report, staged, create_teams, dry_run, steps)
    return not exact and bool(report.errors)


def _stage(cur, path: Path, names: list[str], present: list[str], *, exact: bool) -> None:
    """Read the file once into the temp table `typed_csv`, and the view `typed` over it.

    Per record: its position `_row` among the records the reader accepted, its typed values, a flag
    `_bad` saying whether any per-row rule is broken, and - for flagged records only - the raw cells.
    Every error is computed from one staging row, so a value is never reported under another record.
    exact: `_row` is numbered straight off the reader, before the projection (whose output order
    DuckDB does not keep), and each line it is mapped to is checked against the file (_csv_lines).
    Otherwise `_row` is the staging table's rowid: unique, but not always the file's order.
    The reader stays parallel: single-threaded, DuckDB 2.0.1 silently drops a record whose quote is
    never closed. Raises duckdb's InvalidInputException or ConversionException when the reader gives
    up on the file.
    """
    fast = not exact   # the fast pass lets the reader parse numbers (_FAST_READ_TYPE)
    checks = _row_checks(present, raw_ref='"{c}__raw"', typed_ref='"{c}"', trim_ref='"{c}__trim"',
                         numbers_read=fast)
    bad_cond = " OR ".join(f"({cond})" for _, cond, _ in checks) or "false"
    read = ", ".join([f'{_q(c)} AS {_q(c, "__raw")}' for c in present]
                     + [f'{_trim_sql(_q(c))} AS {_q(c, "__trim")}' for c in present if c in _TRIMMED])
    typed = ", ".join(f'{_typed_expr(c, _q(c, "__raw"), _q(c, "__trim") if c in _TRIMMED else None, numbers_read=fast)} '
                      f'AS {_q(c)}' for c in present)
    raw_if_bad = ", ".join(f'CASE WHEN _bad THEN {_q(c, "__raw")} END AS {_q(c, "__raw")}' for c in present)
    cols = ", ".join(_q(c) for c in present)
    numbered, row = ("row_number() OVER () - 1 AS _row, ", "_row, ") if exact else ("", "")
    cur.execute(f"CREATE TEMP TABLE typed_csv AS SELECT {row}{cols}, _bad, {raw_if_bad} FROM "
                f"(SELECT *, ({bad_cond}) AS _bad FROM (SELECT *, {typed} FROM "
                f"(SELECT {numbered}{read} FROM "
                f"{_read_csv_sql(names, _FAST_READ_TYPE if fast else _READ_TYPE)})))", [str(path)]).fetchall()
    cur.execute(f"CREATE TEMP VIEW typed AS SELECT {'_row' if exact else 'rowid AS _row'}, {cols} "
                "FROM typed_csv").fetchall()


def _no_rows_error(path: Path) -> dict:
    """The error for a file of which the reader took no record: empty after the header, or unreadable."""
    with open(path, "rb") as f:
        f.readline()
        rest = f.read(4096)
    if rest.strip():
        return _err(2, None, None, "no rows could be read after the header (mixed line "
                                   "endings? save the file again as CSV)")
    return _err(2, None, None, "the file has a header but no rows")


def _flagged_row_errors(cur, present: list[str], n_bad: int) -> RowErrors:
    """Every per-row rule each flagged record of `typed_csv` breaks: (row, column, value, message, None).

    A flagged row must never pass unexplained: if none can be itemised, one error refuses the file."""
    checks = _row_checks(present, raw_ref='f."{c}__raw"', typed_ref='f."{c}"')
    shown = {c: f'f."{c}__raw"' for c in present}
    cur.execute("CREATE TEMP TABLE flagged AS SELECT * EXCLUDE (_bad) FROM typed_csv WHERE _bad").fetchall()
    union = " UNION ALL ".join(f"SELECT f._row, '{c}' AS _col, {shown[c]}, {msg}, NULL::BIGINT "
                               f"FROM flagged f WHERE ({cond})" for c, cond, msg in checks)
    errors = RowErrors()
    errors.query(cur, union, f"_row, {_col_order_sql('_col')}")
    cur.execute("DROP TABLE flagged").fetchall()
    if not errors:
        errors.items = [(None, None, None, f"{n_bad} rows broke a rule that could not be itemised; "
                                           "nothing was imported", None)]
    return errors
