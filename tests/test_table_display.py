"""Tables on screen: human headers with units, rounding, long text wrapped whole, and the CSV download
keeping the machine column names."""
from __future__ import annotations

import json

import pytest
from streamlit.testing.v1 import AppTest

from lib.dashboard import labels


def _app(long_text_chars: int):
    import pandas as pd

    import ui
    df = pd.DataFrame({"run_id": ["a"], "reserved_gpu_hours": [12.3456], "idle_share": [0.1234],
                       "fit_note": ["x" * long_text_chars], "earliest_fit": [pd.Timestamp("2026-12-16 10:00")],
                       "some_new_gpu_hours": [1.0]})
    ui.table(df, "t", "dl_t", empty="nothing")


def shown(long_text_chars: int):
    at = AppTest.from_function(_app, args=(long_text_chars,), default_timeout=30).run()
    assert not at.exception
    return at.dataframe[0]


def test_headers_say_what_and_in_which_unit_and_numbers_are_rounded():
    grid = shown(10)
    cols = json.loads(grid.proto.columns)
    assert cols["reserved_gpu_hours"]["label"] == "Reserved (GPU-h)"
    assert cols["reserved_gpu_hours"]["type_config"]["format"] == "%.1f"
    assert cols["earliest_fit"]["label"] == "Earliest fit (UTC)"
    assert "reservation" in cols["earliest_fit"]["help"]          # the glossary entry, where the term appears
    assert cols["some_new_gpu_hours"]["label"] == "Some new (GPU-h)"   # unlisted: the unit read off the name
    assert cols["idle_share"]["type_config"]["format"] == "%.1f%%"
    assert grid.value["idle_share"].iloc[0] == pytest.approx(12.34)  # a share is shown in per cent


def test_long_text_is_wrapped_whole_and_short_text_keeps_one_line_rows():
    assert shown(130).proto.row_height >= 12 + labels_lines(130) * 21
    assert not shown(20).proto.row_height       # default row height: nothing to wrap


def test_text_of_two_lines_gets_rows_tall_enough_for_the_grid_to_wrap_them():
    # Streamlit's grid wraps text only in rows taller than 4rem (64 px); two lines fit in less, so a
    # row sized to its lines alone showed the first line and cut the rest (a fix lost its time)
    two_lines = ui_wrap_chars() + 20
    assert labels_lines(two_lines) == 2
    assert shown(two_lines).proto.row_height > 64


def ui_wrap_chars() -> int:
    import ui
    return ui.WRAP_CHARS


def _mixed():
    import pandas as pd

    import ui
    ui.show_table(pd.DataFrame({"code": ["gpu-cap", "capacity"], "field": ["gpus", None],
                                "requested": [33.0, None], "value": [3353.25, 0.29]}))


def test_a_missing_value_shows_as_an_empty_cell_and_numbers_under_a_text_header_stay_numbers():
    at = AppTest.from_function(_mixed, default_timeout=30).run()
    assert not at.exception
    grid = at.dataframe[0]
    assert grid.proto.HasField("placeholder") and grid.proto.placeholder == ""   # not the grid's "None"
    cols = json.loads(grid.proto.columns)
    assert cols["value"]["type_config"]["format"] == "localized"   # as rounded, not in a wide text column
    assert cols["value"].get("width") != "large"


def labels_lines(chars: int) -> int:
    import ui
    return -(-chars // ui.WRAP_CHARS)


def test_every_column_the_pages_show_has_a_label_written_for_it(page_ledger):
    from lib.dashboard.filters import default_filters
    from tests.fixtures_app import PAGE_QUERIES
    path, now = page_ledger
    f = default_filters(now.date())
    snake = []
    for name, query in PAGE_QUERIES.items():
        for key, value in query(f, path, now).items():
            for col in getattr(value, "columns", []):
                if col not in labels.COLUMN_SPECS:
                    snake.append(f"{name}.{key}.{col}")
    assert not snake, f"columns without a label of their own in lib.dashboard.labels.COLUMNS: {snake}"
