"""The shared vocabulary and helpers of lib.gate.terms, and the contracts that spell it out."""
from __future__ import annotations

import datetime as dt
import json
import math
import re
import typing

import numpy as np
import pytest

from lib.gate import contracts, terms


def test_the_contracts_literals_are_the_vocabulary():
    assert typing.get_args(contracts.Kind) == terms.KINDS
    assert typing.get_args(contracts.Capacity) == terms.CAPACITIES
    assert typing.get_args(contracts.BudgetBasis) == terms.BUDGET_BASES


@pytest.mark.parametrize("text", ["=1+1", "+x", "-2", "@SUM(A1)", "\tx", "\rx", "plain", "a=b", "", "'=x"])
def test_the_sql_pattern_and_the_python_check_neutralise_the_same_cells(text):
    assert bool(re.match(terms.FORMULA_PREFIX_REGEX, text)) == (terms.neutralise(text) != text)


def test_naive_utc_and_month_bounds():
    assert terms.naive_utc("2026-06-15T14:00:00+02:00") == dt.datetime(2026, 6, 15, 12)
    assert terms.naive_utc("2026-06-15T12:00:00Z") == dt.datetime(2026, 6, 15, 12)
    assert terms.naive_utc(None) is None and terms.utcnow().tzinfo is None
    assert terms.month_start(dt.datetime(2026, 12, 31, 23)) == dt.datetime(2026, 12, 1)
    assert terms.next_month_start(dt.datetime(2026, 12, 31, 23)) == dt.datetime(2027, 1, 1)


def test_the_number_checks_agree():
    for bad in (True, "1", None, math.nan, math.inf, -1.0):
        assert terms.number_problem(bad) is not None
        with pytest.raises(terms.InputError):
            terms.checked_number("x", bad)
    assert terms.checked_number("x", np.float64(2.5)) == 2.5  # numpy scalars, for the planning maths
    assert terms.checked_number("mtbf_h", math.inf, allow_inf=True) == math.inf
    with pytest.raises(terms.InputError, match="x must be > 0"):
        terms.checked_number("x", 0, positive=True)
    assert terms.checked_count("n", np.int64(3)) == 3 and terms.checked_count("n", 4.0) == 4
    with pytest.raises(terms.InputError, match="whole number"):
        terms.checked_count("n", 2.5)
    assert terms.finite_number(3) == 3.0 and terms.finite_number(math.nan) is None


def test_json_default_serialises_times_and_sets():
    out = json.dumps({"t": dt.datetime(2026, 6, 15, 12), "d": dt.date(2026, 6, 15), "s": {"b", "a"}},
                     default=terms.json_default, sort_keys=True)
    assert out == '{"d": "2026-06-15", "s": ["a", "b"], "t": "2026-06-15T12:00:00"}'
