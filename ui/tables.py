"""Tables: the app's one data grid (`show_table`) and a table with its CSV download (`table`,
`download`). Headers, units, rounding and help come from lib.dashboard.labels; formula-like cells are
neutralised on screen as in the download (lib.dashboard.tables)."""
from __future__ import annotations

import pandas as pd
import streamlit as st

from lib.dashboard import labels
from lib.dashboard.tables import safe_cells, safe_csv_bytes
from lib.gate.terms import neutralise


def download(df: pd.DataFrame, name: str, key: str, label: str = "Download CSV") -> None:
    """A CSV download of the table, formula-like cells neutralised."""
    st.download_button(label, safe_csv_bytes(df), file_name=f"{name}.csv", mime="text/csv", key=key,
                       disabled=df.empty)


def table(df: pd.DataFrame, name: str, key: str, *, empty: str, caption: str | None = None) -> None:
    """A data table (cells shown as text, never markup; human headers with units) with its CSV
    download (machine column names), or an empty-state message saying what to do."""
    if df.empty:
        st.info(empty)
        return
    show_table(df)
    if caption:
        st.caption(caption)
    download(df, name, key)


WRAP_CHARS = 55            # characters a wide text column shows per line
LINE_PX, MAX_LINES = 21, 6
WRAPS_ABOVE_PX = 64        # Streamlit's grid wraps text only in rows taller than 4rem (64 px)
HEADER_PX, ROWS_WHOLE = 36, 10   # a grid of up to ROWS_WHOLE wrapped rows is drawn whole, no inner scroll


def row_height(longest: int) -> int | None:
    """The grid's row height (px) for a longest long-text cell of `longest` characters: None (the
    default, one line) when it fits one line, else its lines (at most MAX_LINES) of LINE_PX and
    above WRAPS_ABOVE_PX, so that the grid wraps even a text of two lines."""
    lines = min(MAX_LINES, -(-longest // WRAP_CHARS))
    return max(12 + LINE_PX * lines, WRAPS_ABOVE_PX + 1) if lines > 1 else None


def show_table(df: pd.DataFrame) -> None:
    """`df` on screen: headers, units, rounding and help from lib.dashboard.labels; long text (reason
    fixes, notes, missing lists) wrapped over up to MAX_LINES lines rather than cut off (`row_height`),
    and a missing value as an empty cell, never "None". The app's one data grid
    (tests/test_grid_export.py checks that no page draws another): formula-like text cells are shown
    neutralised, as the CSV download has them, because the grid's toolbar download and a copy to the
    clipboard take the cells as shown. A key column (labels: the queue's planned start, the burn-down's
    run-out date) is pinned, so it stays in view however wide the table."""
    shown = safe_cells(df)
    config, longest = {}, 0
    for col in df.columns:
        spec = labels.column_spec(str(col))
        config[col], values = _column_config(spec, df[col])
        if values is not None:
            shown[col] = values
        if spec["long"] and len(df) and not pd.api.types.is_numeric_dtype(df[col]):
            longest = max(longest, int(df[col].map(lambda v: len(str(v)) if v is not None else 0).max()))
    height = row_height(longest)
    whole = HEADER_PX + height * len(df) + 2 if height and len(df) <= ROWS_WHOLE else "auto"
    names = {col: neutralise(str(col)) for col in df.columns}   # a team name can be a column name
    st.dataframe(shown.rename(columns=names), hide_index=True, width="stretch", row_height=height, height=whole,
                 placeholder="", column_config={names[col]: c for col, c in config.items()})


def _column_config(spec: labels.ColumnSpec, values: pd.Series):
    """(Streamlit column config, values to show instead or None) for one column."""
    kind = spec["kind"]
    common = dict(label=neutralise(spec["label"]), help=spec["help"], pinned=True if spec["key"] else None)
    numeric = pd.api.types.is_numeric_dtype(values) and not pd.api.types.is_bool_dtype(values)
    if kind == "share" and numeric:
        return st.column_config.NumberColumn(format=f"%.{spec['digits']}f%%", **common), values * 100
    if kind in ("number", "ratio") and numeric:
        return st.column_config.NumberColumn(format=f"%.{spec['digits']}f", **common), None
    if kind == "integer" and numeric:
        return st.column_config.NumberColumn(format="%d", **common), None
    if kind == "datetime" and pd.api.types.is_datetime64_any_dtype(values):
        return st.column_config.DatetimeColumn(format="YYYY-MM-DD HH:mm", **common), None
    if kind == "date":
        return st.column_config.DateColumn(format="YYYY-MM-DD", **common), None
    if kind == "bool" and pd.api.types.is_bool_dtype(values):
        return st.column_config.CheckboxColumn(**common), None
    if numeric:   # numbers under a header written for text (a value of any unit): as rounded, never a wide text column
        return st.column_config.NumberColumn(format="localized", **common), None
    return st.column_config.Column(width="large" if spec["long"] else None, **common), None
