"""The command line's argument types (argparse `type=` callables): each turns the text into a value or
raises argparse.ArgumentTypeError with what is wrong and the text given, so a bad argument is a usage
error (exit 2, one line on stderr) before any command runs.

Times: ISO 8601 (UTC when no offset), from TIME_MIN up to TIME_END (exclusive): the span the ledger's
imports accept for run times. Outside it no run or decision can be, and a calendar at its far ends
overflows (a day after 9999-12-31 does not exist).
"""
from __future__ import annotations

import argparse
from datetime import datetime, timedelta

from lib.gate.terms import naive_utc, number_problem

TIME_MIN, TIME_END = datetime(2000, 1, 1), datetime(2100, 1, 1)
TIME_RANGE = "2000-01-01 to 2099-12-31, UTC"


def timestamp(text):
    """An ISO-8601 time as naive UTC, within TIME_MIN .. TIME_END."""
    try:
        t = naive_utc(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO-8601 time: {text!r}") from None
    except OverflowError:   # an offset that moves the time past year 1 or 9999
        t = None
    if t is None or not TIME_MIN <= t < TIME_END:
        raise argparse.ArgumentTypeError(f"{text!r} is outside the times the gate takes ({TIME_RANGE})")
    return t


def window_end(text):
    """--to: an ISO time, or a date meaning the end of that day (UTC)."""
    t = timestamp(text)
    return t + timedelta(days=1) if len(text.strip()) == 10 else t


def level(text):
    v = nonneg_float(text)
    if not 0 < v < 1:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1 (exclusive), got {text!r}")
    return v


def nonneg_float(text):
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    problem = number_problem(v)
    if problem:
        raise argparse.ArgumentTypeError(f"{problem} ({text!r})")
    return v + 0.0   # -0 is read as 0.0, never stored as -0.0


def nonneg_int(text):
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text!r}")
    return v


def positive_int(text):
    v = nonneg_int(text.replace("_", ""))
    if v < 1:
        raise argparse.ArgumentTypeError("must be >= 1")
    return v


def weeks(text):
    """--weeks of a forecast: 1 .. lib.planning.forecast.demand.MAX_WEEKS."""
    from lib.planning.forecast.demand import MAX_WEEKS  # here: it brings numpy, which a submit does not need
    v = positive_int(text)
    if v > MAX_WEEKS:
        raise argparse.ArgumentTypeError(f"at most {MAX_WEEKS} weeks ahead, got {text!r}")
    return v
