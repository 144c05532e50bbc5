"""Bad files are bad input: every one is refused with a line and a plain message, and nothing is written.

Covers large files (row identity must come from the file, not from the reader's thread schedule),
files no CSV reader takes (mixed or CR-only line ends, NUL bytes, gzip), and the error list's own
honesty (true counts, one error per header column).
"""
from __future__ import annotations

import gzip

import pytest

from lib.ledger.imports import CSV_COLUMNS, MAX_ERRORS, import_runs
from tests.fixtures_imports import HEADER, dump
from tests.fixtures_ledger import run_cli

ROW = "r{i},vision,production,2,10,9.5,2024-05-01T10:00:00Z,2024-05-01T15:00:00Z,a"



def _rows(n: int) -> list[str]:
    return [ROW.format(i=i) for i in range(n)]


def write_template_rows(path, n: int, bad: dict[int, tuple[str, str]]) -> None:
    """n rows with every template column; `bad` puts {line: (column, cell)} into the file."""
    cols = CSV_COLUMNS
    with open(path, "w", encoding="utf-8") as f:
        f.write(",".join(cols) + "\n")
        for i in range(n):
            line = i + 2
            cells = dict.fromkeys(cols, "")
            cells.update(run_id=f"r{i:07d}", team="vision" if i % 2 else "nlp", kind="exploratory",
                         gpus=str(1 + i % 8), estimated_gpu_hours=f"{1 + i % 50}.5",
                         started_at=f"2025-01-{1 + i % 28:02d}T10:00:00Z",
                         ended_at=f"2025-01-{1 + i % 28:02d}T12:00:00Z",
                         actual_gpu_hours=f"{i % 37}.25", stop_reason="completed", job_name=f"job {i}")
            if line in bad:
                cells[bad[line][0]] = bad[line][1]
            f.write(",".join(cells[c] for c in cols) + "\n")


def test_bad_cells_in_a_300k_row_file_are_reported_at_their_own_lines_every_time(import_ledger, tmp_path):
    bad = {100001: ("ended_at", "2025-13-45 25:61:00"), 150001: ("kind", "exploratry"),
           200001: ("gpus", "2.5"), 250001: ("actual_gpu_hours", "-3.5"), 299999: ("job_name", "x\x00y")}
    # and two problems only the whole file shows: a run_id seen before, an end before its start
    whole_file = {120001: ("ended_at", "2025-01-01T09:00:00Z"), 280001: ("run_id", "r0000000")}
    path = tmp_path / "big.csv"
    write_template_rows(path, 300_000, {**bad, **whole_file})
    before = dump(import_ledger)
    expected = sorted([(line, col, value) for line, (col, value) in bad.items()]
                      + [(120001, "ended_at", "2025-01-01 09:00:00"), (280001, "run_id", "r0000000")])
    for dry_run in (False, True, False):   # the reader is parallel: the answer must not depend on its schedule
        r = import_runs(path, db=import_ledger, dry_run=dry_run)
        assert not r.written and r.inserted == 0
        assert [(e["line"], e["column"], e["value"]) for e in r.errors] == expected
        assert {e["line"]: e["message"] for e in r.errors}[280001] == "duplicate run_id: also on line 2"
    assert dump(import_ledger) == before


def test_a_file_whose_only_problems_need_the_whole_file_names_their_lines(import_ledger, tmp_path):
    path = tmp_path / "big.csv"
    write_template_rows(path, 200_000, {150001: ("run_id", "r0000010")})
    r = import_runs(path, db=import_ledger)
    assert [(e["line"], e["message"]) for e in r.errors] == [(150001, "duplicate run_id: also on line 12")]
    assert not r.written


def test_a_cell_that_fails_its_cast_is_never_stored_as_empty(import_ledger, tmp_path):
    path = tmp_path / "big.csv"
    write_template_rows(path, 120_000, {60001: ("ended_at", "2025-13-45 25:61:00")})
    r = import_runs(path, db=import_ledger)
    assert [(e["line"], e["column"]) for e in r.errors] == [(60001, "ended_at")]
    assert not r.written


def test_the_count_of_errors_not_listed_is_the_true_count(import_ledger):
    n = 5 * MAX_ERRORS
    text = HEADER + "\n" + "\n".join(ROW.format(i=i).replace("production", "prod") for i in range(n)) + "\n"
    r = import_runs(text.encode(), db=import_ledger)
    assert len(r.errors) == MAX_ERRORS + 1
    assert r.errors[-1]["message"] == f"... and {n - MAX_ERRORS} more errors not listed (fix these first)"


def _bad_file_cases():
    rows = _rows(5)
    lf = HEADER + "\n" + "\n".join(rows) + "\n"
    return {
        "one CRLF line in an LF file": (
            (HEADER + "\n" + rows[0] + "\n" + rows[1] + "\r\n" + "\n".join(rows[2:]) + "\n").encode(), 3,
            "mixes line ends"),
        "one LF line in a CRLF file": (
            (HEADER + "\r\n" + "\r\n".join(rows[:3]) + "\n" + "\r\n".join(rows[3:]) + "\r\n").encode(), 4,
            "mixes line ends"),
        "CR-only line ends": ((HEADER + "\r" + "\r".join(rows) + "\r").encode(), 1, "CR alone"),
        "a line longer than the reader's limit": (
            (HEADER + "\n" + rows[0] + "\n" + rows[1].replace(",a", "," + "x" * (3 * 1024 * 1024))
             + "\n").encode(), 3, "line longer than"),
        "a header field longer than Python's csv field limit": (
            (HEADER + ',"' + "h" * 200_000 + '"\n' + rows[0] + "\n").encode(), 1, "unknown column"),
        "NUL-filled lines": ((HEADER + "\n" + rows[0] + "\n").encode() + (b"\x00" * 300 + b"\n") * 3, 3,
                             "NUL bytes"),
        "a NUL-filled tail": ((HEADER + "\n" + rows[0] + "\n").encode() + b"\x00" * 70_000, 3, "NUL bytes"),
        "gzip named .csv": (gzip.compress(lf.encode()), 1, "gzip"),
    }


@pytest.mark.parametrize("name", list(_bad_file_cases()))
def test_a_file_no_csv_reader_takes_exits_2_with_a_line(import_ledger, tmp_path, name):
    data, line, needle = _bad_file_cases()[name]
    path = tmp_path / "bad.csv"
    path.write_bytes(data)
    before = dump(import_ledger)
    p = run_cli("import", path, db=import_ledger)
    assert p.returncode == 2, p.stderr
    assert "gate failure" not in p.stderr and "Traceback" not in p.stderr
    assert p.stderr.startswith(f"line {line},"), p.stderr[:300]
    assert needle in p.stderr.splitlines()[0]
    assert dump(import_ledger) == before


def test_nul_bytes_in_text_cells_are_refused(import_ledger):
    text = (HEADER + "\n" + ROW.format(i=0) + "\n" + "r\x001,vision,production,2,1,,,,a\x00b\n").encode()
    r = import_runs(text, db=import_ledger)
    assert [(e["line"], e["column"]) for e in r.errors] == [(3, "run_id"), (3, "job_name")]
    assert all("NUL" in e["message"] for e in r.errors)


def test_an_unclosed_quote_is_reported_where_it_opens_and_the_line_walk_stays_bounded(import_ledger, tmp_path):
    rows = _rows(40_000)
    rows[1] = rows[1].replace(",a", ',"a')           # line 3: the rest of the file is inside this quote
    rows[30_000] = rows[30_000].replace("production", "prod")
    path = tmp_path / "unclosed.csv"
    path.write_text(HEADER + "\n" + "\n".join(rows) + "\n")
    r = import_runs(path, db=import_ledger)
    assert not r.written
    assert r.errors[0]["line"] == 3 and "not closed" in r.errors[0]["message"]


def test_a_duplicate_after_a_multi_line_record_names_the_right_line(import_ledger):
    rows = _rows(8)
    rows[2] = rows[2].replace(",a", ',"two\nlines"')   # lines 4-5
    rows[6] = rows[6].replace("r6", "r1")              # line 9, first seen on line 3
    r = import_runs((HEADER + "\n" + "\n".join(rows) + "\n").encode(), db=import_ledger)
    assert [(e["line"], e["message"]) for e in r.errors] == [(9, "duplicate run_id: also on line 3")]


def test_an_upper_case_or_padded_header_gives_one_error_per_column(import_ledger):
    header = HEADER.replace("run_id", " run_id ").replace("team", "TEAM")
    r = import_runs((header + "\n" + ROW.format(i=0) + "\n").encode(), db=import_ledger)
    assert [(e["line"], e["column"], e["value"]) for e in r.errors] == [(1, "run_id", " run_id "),
                                                                       (1, "team", "TEAM")]
    assert "must be written 'run_id'" in r.errors[0]["message"]
