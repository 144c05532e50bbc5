"""What an import reports: ImportReport, its error rows and their cap, and progress reporting."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import pandas as pd

from lib.ledger.imports.columns import CSV_COLUMNS

MAX_ERRORS = 1000                          # errors listed before one summary row

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
    who: dict | None = None                          # lib.ledger.audit.Who: recorded with the write

    @property
    def ok(self) -> bool:
        return not self.errors


@dataclass
class Steps:
    """Passes progress (fraction 0..1, message) to `callback` when the caller gave one."""
    callback: Progress | None = None

    def __call__(self, fraction: float, message: str) -> None:
        if self.callback is not None:
            self.callback(fraction, message)


class Abort(Exception):
    """Raised inside the import's transaction to roll it back (errors found, or dry run)."""


def _err(line, column, value, message) -> dict:
    """One error row; a text value longer than 200 characters is cut, saying its full length."""
    if isinstance(value, str) and len(value) > 200:
        value = value[:200] + f"... ({len(value)} characters)"
    return {"line": line, "column": column, "value": value, "message": message}


def _col_order(column) -> int:
    """Place of an error's column: no column first, then CSV_COLUMNS order, then other names."""
    try:
        return CSV_COLUMNS.index(column)
    except ValueError:
        return -1 if column is None else len(CSV_COLUMNS)


def _col_order_sql(column: str) -> str:
    """SQL ordering error rows by their column's place in CSV_COLUMNS (`column`: its SQL)."""
    return f"list_position({[*CSV_COLUMNS]!r}, {column})"


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


@dataclass
class RowErrors:
    """Errors found on staging rows, before they are placed on file lines.

    items: (staging row, column, value, message, other row or None); a message may name the other
    row's line as '{other}'. unlisted: errors counted by a query but not fetched (beyond the cap).
    """
    items: list = field(default_factory=list)
    unlisted: int = 0

    def __bool__(self) -> bool:
        return bool(self.items or self.unlisted)

    def query(self, cur, sql: str, order: str = "1") -> None:
        """Add the first MAX_ERRORS * 2 rows of `sql` (error tuples) in `order`; count the rest."""
        rows = cur.execute(f"SELECT *, count(*) OVER () FROM ({sql}) ORDER BY {order} "
                           f"LIMIT {MAX_ERRORS * 2}").fetchall()
        total = rows[0][-1] if rows else 0
        self.items += [r[:-1] for r in rows]
        self.unlisted += total - len(rows)
