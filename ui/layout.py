"""Rows that wrap: `row(n)` gives n cells of a fixed width side by side, continued on the next line
when the page is too narrow for them all. st.columns(n) instead shares the width out, so at 800 px
beside the sidebar a metric's value reads "USD…", its label is cut and a select box truncates its
options; a cell here keeps the width its content needs at every screen width. The bottom of the kit
with ui.text: it imports no other module of ui/.
"""
from __future__ import annotations

from typing import Sequence

import streamlit as st
from streamlit.delta_generator import DeltaGenerator

CELL_PX = 210   # a metric: its label and a compact value (lib.dashboard.costs.money_text)


def row(n: int, width: int = CELL_PX) -> Sequence[DeltaGenerator]:
    """`n` cells of `width` px in one row that wraps, each used like a column
    (`c = ui.row(4); c[0].metric(...)`)."""
    line = st.container(horizontal=True)
    return [line.container(width=width) for _ in range(n)]
