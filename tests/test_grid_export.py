"""The data grid's own export is as safe as the app's CSV download. Streamlit's grid has a toolbar
"Download as CSV" (and copies cells to the clipboard) that writes the cells as shown, so a run ID or
team name such as =HYPERLINK(...) would reach a spreadsheet as a formula. Every grid the app draws goes
through ui.show_table, which shows formula-like text cells (and column names) with the same leading
quote the CSV download gives them; no page draws a grid any other way."""
from __future__ import annotations

import ast
from pathlib import Path

import pandas as pd
from streamlit.testing.v1 import AppTest

from lib.dashboard.tables import safe_frame
from lib.gate.terms import FORMULA_START
from tests.fixtures_app import PAGES, ROOT, page_script
from tests.fixtures_hostile import HOSTILE

TIMEOUT_S = 60
FORMULAS = ['=HYPERLINK("https://example.invalid","x")', "+1+1", "-2+3", "@SUM(A1)", "\tx", "\rx"]


def _hostile_table():
    import pandas as pd

    import ui
    ui.table(pd.DataFrame({"run_id": ["=HYPERLINK(\"https://example.invalid\",\"x\")", "+1+1", "-2+3",
                                      "@SUM(A1)", "\tx", "\rx", "plain-run"],
                           "actual_gpu_hours": [-1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0],
                           "=cmd|' /C calc'!A0": ["a", "b", "c", "d", "e", "f", "g"]}),
             "t", "dl_t", empty="nothing")


def formula_like(df: pd.DataFrame) -> list:
    """The text cells and column names of `df` that a spreadsheet would run as a formula."""
    found = [c for c in df.columns if isinstance(c, str) and c.startswith(FORMULA_START)]
    for col in df.columns:
        found += [v for v in df[col] if isinstance(v, str) and v.startswith(FORMULA_START)]
    return found


def test_the_grid_shows_formula_like_cells_as_the_csv_download_has_them():
    at = AppTest.from_function(_hostile_table, default_timeout=TIMEOUT_S).run()
    assert not at.exception, [e.value for e in at.exception]
    (grid,) = at.dataframe
    shown = grid.value
    assert formula_like(shown) == []
    assert list(shown["run_id"]) == ["'" + v for v in FORMULAS] + ["plain-run"]
    assert list(shown["actual_gpu_hours"]) == [-1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]   # numbers stay numbers
    assert "'=cmd|' /C calc'!A0" in shown.columns
    # the cells the grid holds (what its toolbar download writes) are those of the app's CSV download
    download = safe_frame(pd.DataFrame({"run_id": FORMULAS + ["plain-run"]}))
    assert list(shown["run_id"]) == list(download["run_id"])
    assert at.get("download_button"), "the app's own download stays beside the grid"


def test_no_grid_on_any_page_holds_a_formula_like_cell(hostile_ledger):
    neutralised = 0
    for page in PAGES:
        at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=TIMEOUT_S).run()
        at.sidebar.multiselect(key="f_teams").set_value(HOSTILE).run()
        at.switch_page(page_script(page)).run()
        assert not at.exception, (page, [e.value for e in at.exception])
        for grid in at.dataframe:
            assert formula_like(grid.value) == [], page
            neutralised += sum(str(v).startswith("'=") for col in grid.value.columns for v in grid.value[col])
    assert neutralised, "no grid showed a hostile team or run ID: the test reached nothing"


# Streamlit elements with a built-in data export (the grid's CSV download, a chart's table view)
EXPORTING = {"dataframe", "data_editor", "table", "line_chart", "bar_chart", "area_chart",
             "scatter_chart", "altair_chart", "vega_lite_chart"}


def grid_calls(path: Path) -> list[str]:
    """Where `path` calls a Streamlit element that exports data (ui.table is the kit's own), and
    st.write of anything but text (st.write draws a DataFrame as a grid)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        name, owner = node.func.attr, node.func.value
        if name in EXPORTING and not (isinstance(owner, ast.Name) and owner.id == "ui"):
            found.append(f"{path.name}:{node.lineno} .{name}(")
        elif name == "write" and not all(isinstance(a, (ast.Constant, ast.JoinedStr)) for a in node.args):
            found.append(f"{path.name}:{node.lineno} .write(")
    return found


def test_every_grid_is_drawn_by_ui_show_table():
    files = [ROOT / "app.py", *sorted((ROOT / "ui").glob("*.py")), *sorted((ROOT / "pages").glob("*.py"))]
    calls = [c for f in files for c in grid_calls(f)]
    show_table = next(n for n in ast.parse((ROOT / "ui" / "tables.py").read_text()).body
                      if isinstance(n, ast.FunctionDef) and n.name == "show_table")
    allowed = {f"tables.py:{n.lineno} .dataframe(" for n in ast.walk(show_table)
               if isinstance(n, ast.Call) and getattr(n.func, "attr", None) == "dataframe"}
    assert len(allowed) == 1
    assert [c for c in calls if c not in allowed] == []
