"""Reading the ledger for the dashboard's read models: one read-only open per unit of work, queries
with named parameters bound (never formatted into the text), results fetched whole.

Used by every read model of lib.dashboard (the page queries, costs, recovery inputs) so that each opens,
reads and closes the same way.
"""
from __future__ import annotations

import contextlib

import duckdb
import pandas as pd

from lib.dashboard.filters import Filters
from lib.ledger.connection import LedgerError, ledger_path, open_ledger, used_params


@contextlib.contextmanager
def reader(db):
    """A read-only handle on the ledger. Any DuckDB error while reading raises LedgerError naming
    the file: a damaged block surfaces only when a query reaches it, and DuckDB reports it as an
    IOException, a bare duckdb.Error ("Corrupt database file: computed checksum …") or an internal
    error, depending on where the damage lies."""
    with open_ledger(db, read_only=True) as con:
        try:
            yield con
        except duckdb.Error as exc:
            raise LedgerError(f"cannot read ledger {ledger_path(db)}: {exc}") from exc


def read_frame(con, sql: str, params: dict | None = None) -> pd.DataFrame:
    """Run one query with named parameters, fetched whole into a DataFrame."""
    return con.execute(sql, used_params(sql, params)).df()


def one_row(con, sql: str, params: dict | None = None) -> dict:
    """A one-row query as a dict of plain Python values (empty dict when no row)."""
    rows = con.execute(sql, used_params(sql, params)).fetchall()
    cols = [d[0] for d in con.description]
    return dict(zip(cols, rows[0])) if rows else {}


def period_params(f: Filters) -> dict:
    return {"start": f.start, "end": f.end}
