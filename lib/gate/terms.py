"""The project's shared vocabulary and small helpers, each defined once.

Vocabulary: run kinds, capacity types, budget bases, stop reasons and artifact statuses (the ledger's
columns and the request's fields use exactly these strings). Helpers: naive-UTC time (the convention
of requests, decisions and the ledger), calendar-month bounds, "finite number in range" checks,
spreadsheet-formula neutralising and JSON serialisation of the values decisions hold.
"""
from __future__ import annotations

import math
import numbers
import re
from datetime import date, datetime, timedelta, timezone


class InputError(ValueError):
    """A value given by the user (a request file, a command-line value, a finish record) is not
    acceptable. Raised on purpose; the command line answers it with exit code 2."""


# ------------------------------------------------------------------------------------ vocabulary

KINDS = ("exploratory", "production", "retraining")
CAPACITIES = ("stable", "preemptible")
BUDGET_BASES = ("raw", "median", "upper")  # the estimate a kind is judged at (docs/rules.md, Admission)

# how a run stopped (the ledger's runs.stop_reason; NULL while unfinished)
STOP_REASONS = ("completed", "early-stop", "budget", "wall-clock", "failed-steps", "preempted",
                "failed", "cancelled", "out-of-memory", "node-fail", "requeued")
COMPLETE_STOPS = ("completed", "early-stop")                # the artifact is complete
INCOMPLETE_STOPS = ("budget", "wall-clock", "failed-steps")  # deliberate stops: incomplete, unpromotable
CENSORED_STOPS = ("budget", "wall-clock")  # the actual is only a lower bound on what the run needed
CALIBRATION_STOPS = COMPLETE_STOPS + CENSORED_STOPS  # stops whose actual says something about the estimate
ARTIFACT_STATUSES = ("complete", "incomplete", "none")

# A team name, wherever one enters (teams file, CSV and sacct imports, requests): 1-64 characters,
# ASCII letters, digits, '-', '_' and '.', the first a letter or a digit (a leading '-' reads as a
# command-line option and starts a spreadsheet formula; a leading '.' is a hidden file name).
TEAM_NAME_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}"
TEAM_NAME = re.compile(TEAM_NAME_PATTERN)   # use TEAM_NAME.fullmatch
TEAM_NAME_REGEX = "^" + TEAM_NAME_PATTERN + "$"   # the same test for DuckDB's regexp_matches (RE2)
TEAM_NAME_RULE = ("1-64 characters: letters, digits, '-', '_' or '.', starting with a letter or "
                  "a digit")


def team_name_problem(value) -> str | None:
    """None when `value` is a valid team name (TEAM_NAME), else the problem as text."""
    if type(value) is not str:
        return f"must be a team name ({TEAM_NAME_RULE}), got {type(value).__name__} {value!r}"
    if TEAM_NAME.fullmatch(value):
        return None
    return f"must be a team name ({TEAM_NAME_RULE}), got {value[:100]!r}"


# ------------------------------------------------------------------------------------------ time

def utcnow() -> datetime:
    """Now as a naive UTC datetime."""
    return datetime.now(timezone.utc).replace(tzinfo=None)


def naive_utc(t: datetime | str | None) -> datetime | None:
    """`t` (a datetime, or ISO-8601 text with optional offset or Z) as a naive UTC datetime.

    A value without an offset is taken as UTC already; None stays None. ValueError for text that
    is not ISO 8601.
    """
    if t is None:
        return None
    if isinstance(t, str):
        t = datetime.fromisoformat(t.replace("Z", "+00:00"))
    if t.tzinfo is not None:
        t = t.astimezone(timezone.utc).replace(tzinfo=None)
    return t


# How far a recorded decision's time may stand from the clock of the process recording it. A decision
# is judged against the reservations held and the month's spend at its time; one dated elsewhere
# would be judged against another moment's state and then hold accelerators now (a decision dated
# 2099 sees no reservation of today, yet its own reservation counts from today on). A what-if
# (`check`) writes nothing and may take any time.
SUBMIT_CLOCK_WINDOW = timedelta(minutes=5)


def checked_submit_time(now: datetime | None, clock: datetime | None = None) -> datetime | None:
    """`now` when it lies within SUBMIT_CLOCK_WINDOW of `clock` (default: utcnow()), None for None;
    InputError naming both times otherwise. For callers across a process boundary that ask to
    record a decision at a time of their choosing (`submit --now`, the gate server's c:now)."""
    if now is None:
        return None
    clock = clock or utcnow()
    if abs(now - clock) > SUBMIT_CLOCK_WINDOW:
        minutes = int(SUBMIT_CLOCK_WINDOW.total_seconds() // 60)
        raise InputError(f"a decision to record must be dated within {minutes} minutes of the present "
                         f"({clock.isoformat(timespec='seconds')} UTC), got {now.isoformat()}; use `check` "
                         "for a what-if at another time")
    return now


def month_start(now: datetime) -> datetime:
    """First instant of `now`'s calendar month (naive UTC)."""
    return datetime(now.year, now.month, 1)


def next_month_start(now: datetime) -> datetime:
    """First instant of the calendar month after `now`'s (naive UTC)."""
    return datetime(now.year + (now.month == 12), now.month % 12 + 1, 1)


# --------------------------------------------------------------------------------------- numbers

def number_problem(value, minimum: float = 0.0, *, strict: bool = False, integral: bool = False,
                   maximum: float | None = None, below: float | None = None) -> str | None:
    """None when `value` is an int or float (never a bool), finite, ≥ `minimum` (> when `strict`),
    ≤ `maximum`, < `below` and whole when `integral`; else the problem as text ("must be ...").

    This is the check of JSON-shaped input (requests, the teams file): plain int/float only.
    """
    if type(value) in (int, float) and math.isfinite(value) \
            and (value > minimum if strict else value >= minimum) \
            and (maximum is None or value <= maximum) and (below is None or value < below) \
            and (not integral or value == int(value)):
        return None
    if type(value) not in (int, float):
        return f"must be a number, got {type(value).__name__} {value!r}"
    if not math.isfinite(value):
        return f"must be finite, got {value!r}"
    if integral and value != int(value):
        return f"must be a whole number, got {value!r}"
    if value < minimum or (strict and value == minimum):
        return f"must be {'>' if strict else '≥'} {minimum:g}, got {value!r}"
    if maximum is not None and value > maximum:
        return f"must be ≤ {maximum:g}, got {value!r}"
    return f"must be < {below:g}, got {value!r}"


def finite_number(value) -> float | None:
    """`value` as a float when it is a finite real number (not a bool), else None."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def checked_number(name: str, value, *, positive: bool = False, allow_inf: bool = False) -> float:
    """`value` as a float, or InputError naming `name`: a real number (numpy scalars included, never
    a bool), not NaN, ≥ 0 (> 0 when `positive`), finite unless `allow_inf` (then +inf passes).

    The range check is `number_problem`'s; this form also takes numpy/pandas scalars and +inf
    (an interruption-free MTBF), as the planning maths and the ledger's finish record need.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InputError(f"{name} must be a number, got {value!r}")
    x = float(value)
    if allow_inf and x == math.inf:
        return x
    problem = number_problem(x, strict=positive)
    if problem:
        raise InputError(f"{name} {problem}")
    return x


def checked_count(name: str, value, *, minimum: int = 1) -> int:
    """`value` as an int, or InputError naming `name`: a whole real number (an integral float or
    numpy integer passes, a bool never) ≥ `minimum`."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InputError(f"{name} must be a whole number, got {value!r}")
    x = int(value) if isinstance(value, numbers.Integral) else float(value)
    problem = number_problem(x, minimum, integral=True)
    if problem:
        raise InputError(f"{name} {problem}")
    return int(x)


# ------------------------------------------------------------------------------ text and JSON out

FORMULA_START = ("=", "+", "-", "@", "\t", "\r")  # a spreadsheet runs a cell starting so as a formula
_CLASS_ESCAPES = {"\t": r"\t", "\r": r"\r", "-": r"\-", "^": r"\^", "]": r"\]", "\\": r"\\"}
# the same test as a regular expression (Python re and DuckDB's RE2 alike), for SQL exports
FORMULA_PREFIX_REGEX = "^[" + "".join(_CLASS_ESCAPES.get(c, c) for c in FORMULA_START) + "]"


def neutralise(value):
    """The value, with a leading ' when it is text that starts like a formula."""
    if isinstance(value, str) and value.startswith(FORMULA_START):
        return "'" + value
    return value


def json_default(o):
    """JSON for the values decisions and rows hold: datetimes and dates as ISO 8601, sets as sorted
    lists, anything else as its str()."""
    if isinstance(o, (datetime, date)):
        return o.isoformat()
    if isinstance(o, (set, frozenset)):
        return sorted(o)
    return str(o)
