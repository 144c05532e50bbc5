"""The What-if page's estimate table: one unit per row, and an unknown bound said in words."""
from __future__ import annotations

from lib.dashboard.whatif import UPPER_UNKNOWN, estimate_rows


def decision(upper):
    return {"estimate": {"items_gpu_hours": {"compute": 10.0}, "raw_gpu_hours": 10.0, "median_gpu_hours": 12.0,
                         "upper_gpu_hours": upper, "judged_gpu_hours": 12.0 if upper is None else upper,
                         "judged_at": "median" if upper is None else "upper", "wall_hours": 1.5}}


def test_an_unknown_upper_bound_is_said_in_words_never_none():
    rows = {r["item"]: r for r in estimate_rows(decision(None))}
    upper = rows["calibrated upper bound"]
    assert upper["value"] is None and upper["note"] == UPPER_UNKNOWN
    assert not any("None" in str(r["item"]) + str(r["note"]) for r in rows.values())


def test_a_known_upper_bound_has_no_unknown_note_and_the_wall_clock_is_in_hours():
    rows = {r["item"]: r for r in estimate_rows(decision(15.0))}
    assert rows["calibrated upper bound"] == {"item": "calibrated upper bound", "value": 15.0, "unit": "GPU-h",
                                              "note": ""}
    assert rows["wall clock"]["unit"] == "h"
    assert rows["judged against the budget (calibrated upper bound)"]["value"] == 15.0
