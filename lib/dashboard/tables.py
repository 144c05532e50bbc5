"""Tables leaving the dashboard: CSV bytes that spreadsheets cannot mistake for formulas.

A cell starting with = + - @ (or a tab / carriage return) is read by spreadsheet programs as a
formula; run IDs, job names and team names come from users and uploads, so every text cell that
starts that way is prefixed with a single quote. Numbers are left as numbers (a negative number is
not a formula). The same cells on screen carry the same quote (`safe_cells`): the grid's own CSV
download and a copy to the clipboard take the cells as shown.
"""
from __future__ import annotations

import pandas as pd

from lib.gate.terms import neutralise


def safe_cells(df: pd.DataFrame) -> pd.DataFrame:
    """A copy of `df` with every formula-like text cell neutralised; column names as they were."""
    out = df.copy()
    for col in out.columns:
        if out[col].dtype == object or pd.api.types.is_string_dtype(out[col]):
            out[col] = out[col].map(neutralise).astype(object)
    return out


def safe_frame(df: pd.DataFrame) -> pd.DataFrame:
    """A copy of `df` with every formula-like text cell neutralised (column names too)."""
    out = safe_cells(df)
    out.columns = [neutralise(str(c)) for c in out.columns]
    return out


def safe_csv_bytes(df: pd.DataFrame) -> bytes:
    """UTF-8 CSV of `df` with formula-like cells neutralised, no index."""
    return safe_frame(df).to_csv(index=False).encode("utf-8")


_MD_SPECIAL = "\\`*_{}[]()#+-.!|<>~$:="


def escape_markdown(text) -> str:
    """`text` with every Markdown / HTML-significant character backslash-escaped, so user text
    (team names, run IDs, file names) put into a Streamlit caption or alert shows as typed."""
    return "".join("\\" + ch if ch in _MD_SPECIAL else ch for ch in str(text))
