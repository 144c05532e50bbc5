"""Where things are in a CSV file: the line of each staged record or reader reject, line-end problems.

Line numbers are the file's lines as an editor shows them (the header is line 1; a quoted field
spanning lines counts all its lines).
"""
from __future__ import annotations

import contextlib
import csv
from pathlib import Path

from lib.ledger.imports.report import _err

MAX_LINE_BYTES = 2 * 1024 * 1024           # DuckDB's reader refuses longer lines (max_line_size)

_REJECT_MESSAGES = {
    "INVALID ENCODING": "not valid UTF-8: save the file as UTF-8 (CSV UTF-8)",
    "MISSING COLUMNS": "line has too few fields (truncated line, or a missing comma?)",
    "TOO MANY COLUMNS": "line has more fields than the header (an unquoted comma in a value?)",
    "UNQUOTED VALUE": "a quoted value is not closed (truncated line, or a stray '\"'?)",
    "LINE SIZE OVER MAXIMUM": f"line longer than {MAX_LINE_BYTES // (1024 * 1024)} MB",
    "CAST": "not a number (use digits and a . decimal point, no thousands separator)",
    "NUL": "line holds NUL bytes: binary data, or a file damaged by a crash or a full disk",
}


@contextlib.contextmanager
def _csv_field_limit():
    """Python's csv module reads fields up to MAX_LINE_BYTES, the longest line DuckDB's reader takes
    (its default, 128 KiB, is lower; no limit would let an unclosed quote hold the rest of the file)."""
    old = csv.field_size_limit(MAX_LINE_BYTES)
    try:
        yield
    finally:
        csv.field_size_limit(old)


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


def _csv_lines(cur, path: Path, rows: set[int], rejected_lines: set[int], id_column: int) -> dict:
    """{staging row: file line} for `rows`, each checked: the record found on that line must have the
    run_id the staging row has. A row that fails the check (the two parsers disagree about the file)
    maps to None rather than to a wrong line."""
    found = _record_lines(path, rows, rejected_lines, id_column)
    ids = dict(cur.execute("SELECT _row, COALESCE(run_id__raw, run_id) FROM typed_csv WHERE _row IN "
                           "(SELECT unnest(?))", [sorted(rows)]).fetchall()) if found else {}
    return {r: line for r, (line, rid) in found.items() if (rid or None) == ids.get(r)}


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
                j = off - pos   # an offset at a line end belongs to the next line
                while j < len(chunk) and chunk[j:j + 1] in (b"\r", b"\n"):
                    j += 1
                result[off] = data_lines + chunk.count(b"\n", 0, j) + 1
                i += 1
            data_lines += chunk.count(b"\n")
            pos = end
        for off in wanted[i:]:
            result[off] = data_lines + 1
    return result


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


def _reject_errors(path: Path, rejects: list[tuple], lines: dict[int, int], n_columns: int) -> list[dict]:
    """The errors for the records DuckDB's reader rejected, one per line and kind (and column, for bad
    numbers and encodings). rejects: reject_errors rows; lines: _lines_at_offsets of their byte
    positions; n_columns: the header's field count."""
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
            bad = next((i for i in range(len(raw)) if not _utf8_prefix_ok(raw[:i + 1])), None)
            value = repr(raw[max(0, (bad or 0) - 20):(bad or 0) + 20]) if bad is not None else repr(raw[:80])
        msg = _REJECT_MESSAGES.get(etype, emsg)
        if etype == "MISSING COLUMNS":
            with contextlib.suppress(Exception):
                n = len(next(csv.reader([text], delimiter=",", quotechar='"')))
                msg = f"line has {n} fields, the header {n_columns} (truncated line, or a missing comma?)"
        if etype == "TOO MANY COLUMNS":
            col_name = None
        out.append(_err(line, col_name, value, msg))
    return out


def _utf8_prefix_ok(data: bytes) -> bool:
    """True when `data` is valid UTF-8, or would be but for a character cut at its end."""
    try:
        data.decode("utf-8")
        return True
    except UnicodeDecodeError as exc:
        return exc.reason == "unexpected end of data"

