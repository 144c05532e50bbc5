"""Money on a page: an amount short enough for a headline metric beside the sidebar of an 800 px
screen ("USD 157.3k", never "USD…"), close to the amount, and in whole units where asked."""
from __future__ import annotations

import re

import pytest
from hypothesis import given, strategies as st

from lib.dashboard.costs import COMPACT_FROM, money_text

SCALE = {"": 1, "k": 1e3, "M": 1e6, "B": 1e9}
WIDEST = len("USD 999.9k")   # what a metric's place shows whole at 800 px (tests/test_browser_narrow.py)


def read_back(text: str) -> float:
    number, suffix = re.fullmatch(r"[A-Z]{3} (-?[\d,.]+)([kMB]?)", text).groups()
    return float(number.replace(",", "")) * SCALE[suffix]


@pytest.mark.parametrize("amount, shown", [(0, "USD 0"), (9_876.4, "USD 9,876"), (12_345, "USD 12.3k"),
                                           (157_290, "USD 157.3k"), (1_234_567, "USD 1.2M"),
                                           (2.5e9, "USD 2.5B")])
def test_small_amounts_are_whole_and_large_ones_compact(amount, shown):
    assert money_text(amount, "USD") == shown


@given(st.floats(min_value=0, max_value=999e9))
def test_compact_money_is_short_and_close_to_the_amount(amount):
    text = money_text(amount, "USD")
    assert len(text) <= WIDEST
    # whole units, else one decimal of k/M/B: within half a unit of the last digit shown
    unit = 1.0 if amount < COMPACT_FROM else SCALE[text[-1]] / 10
    assert abs(read_back(text) - amount) <= unit / 2 * (1 + 1e-9)
    if amount >= COMPACT_FROM:   # the largest scale the amount reaches: never "1,000.0k"
        assert 1.0 <= read_back(text) / SCALE[text[-1]] < 1000


def test_whole_units_on_request_for_a_tooltip_or_a_table():
    assert money_text(157_290.4, "EUR", whole=True) == "EUR 157,290"
