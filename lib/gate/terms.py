"""The project's shared vocabulary and small helpers, each defined once.

Vocabulary: run kinds, capacity types, budget bases, stop reasons, artifact statuses and estimate
sources (the ledger's columns and the request's fields use exactly these strings). Helpers: naive-UTC
time (the convention of requests, decisions and the ledger), calendar-month bounds, "finite number in
range" checks, spreadsheet-formula neutralising, a safe short display of any value (`shown`), and
JSON in and out that never fails on what a hostile request holds (`json_text`, `loads_bounded`).
"""
from __future__ import annotations

import json
import math
import numbers
import re
import reprlib
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
# where a run's estimate came from (the ledger's runs.estimate_source): a pilot, the team's own
# number, or the time limit × GPUs an sacct import fell back on (never used for calibration)
ESTIMATE_SOURCES = ("pilot", "stated", "requested")
# the interruption events (the ledger's interruptions.event) that end an attempt of a run on capacity
# it lost; the other event, "budget", is the gate's own stop
INTERRUPTING_EVENTS = ("preempted", "requeued", "node-fail")
# the gate's time of an interruption and sacct's End of that attempt differ by seconds: within this,
# they are one interruption
ATTEMPT_MATCH_TOLERANCE = timedelta(minutes=1)

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
        return f"must be a team name ({TEAM_NAME_RULE}), got {type(value).__name__} {shown(value)}"
    if TEAM_NAME.fullmatch(value):
        return None
    return f"must be a team name ({TEAM_NAME_RULE}), got {shown(value)}"


# ------------------------------------------------------------------------------------------ time

def ceil_to(t: datetime | None, step: timedelta) -> datetime | None:
    """`t` rounded up to a whole `step` (a second, a minute): a planned start is never shown earlier
    than the moment the request fits."""
    if t is None:
        return None
    base = datetime(t.year, t.month, t.day)
    return base + step * math.ceil((t - base) / step)


def ordinal(n: int) -> str:
    """1st, 2nd, 3rd, 4th, ..., 11th, 12th, 13th, 21st (a place in the gate's line)."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def minute_up(t: datetime) -> str:
    """`t` as ISO text to the minute, rounded up (a time shown to a person: never before the moment)."""
    return ceil_to(t, timedelta(minutes=1)).isoformat(timespec="minutes")


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

FLOAT_MAX = 1.7976931348623157e308  # the largest finite float: an integer beyond it is "too large"

def number_problem(value, minimum: float = 0.0, *, strict: bool = False, integral: bool = False,
                   maximum: float | None = None, below: float | None = None) -> str | None:
    """None when `value` is an int or float (never a bool), finite, ≥ `minimum` (> when `strict`),
    ≤ `maximum`, < `below` and whole when `integral`; else the problem as text ("must be ...", or
    "is too large" for an integer no float can hold). Never raises, whatever the value.

    This is the check of JSON-shaped input (requests, the teams file): plain int/float only.
    """
    kind = type(value)
    if kind is int and not -FLOAT_MAX <= value <= FLOAT_MAX:
        # math.isfinite / float() would raise OverflowError: say what is wrong instead
        return f"is too large ({shown(value)})" + (f"; must be ≤ {maximum:g}" if maximum is not None else "")
    if kind in (int, float) and math.isfinite(value) \
            and (value > minimum if strict else value >= minimum) \
            and (maximum is None or value <= maximum) and (below is None or value < below) \
            and (not integral or value == int(value)):
        return None
    if kind not in (int, float):
        return f"must be a number, got {kind.__name__} {shown(value)}"
    if not math.isfinite(value):
        return f"must be finite, got {value!r}"
    if integral and value != int(value):
        return f"must be a whole number, got {value!r}"
    if value < minimum or (strict and value == minimum):
        return f"must be {'>' if strict else '≥'} {minimum:g}, got {shown(value)}"
    if maximum is not None and value > maximum:
        return f"must be ≤ {maximum:g}, got {shown(value)}"
    return f"must be < {below:g}, got {shown(value)}"


def finite_number(value) -> float | None:
    """`value` as a float when it is a finite real number (not a bool), else None (also for an
    integer too large for a float)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            x = float(value)
        except OverflowError:
            return None
        return x if math.isfinite(x) else None
    return None


def checked_number(name: str, value, *, positive: bool = False, allow_inf: bool = False) -> float:
    """`value` as a float, or InputError naming `name`: a real number (numpy scalars included, never
    a bool), not NaN, ≥ 0 (> 0 when `positive`), finite unless `allow_inf` (then +inf passes).

    The range check is `number_problem`'s; this form also takes numpy/pandas scalars and +inf
    (an interruption-free MTBF), as the planning maths and the ledger's finish record need.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InputError(f"{name} must be a number, got {shown(value)}")
    try:
        x = float(value)
    except OverflowError:
        raise InputError(f"{name} is too large ({shown(value)})") from None
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
        raise InputError(f"{name} must be a whole number, got {shown(value)}")
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


class _Shown(reprlib.Repr):
    """reprlib, bounded in depth and length, that also survives integers of any size."""

    def __init__(self, limit: int):
        super().__init__()
        self.maxlevel, self.maxstring, self.maxlong, self.maxother = 3, limit, limit // 2, limit

    def repr_int(self, x, level):
        if x.bit_length() > 1024:  # beyond every float; repr() of one of 4,300+ digits raises
            return f"{'a negative' if x < 0 else 'an'} integer of more than 300 digits"
        return super().repr_int(x, level)


def shown(value, limit: int = 60) -> str:
    """A short display of any value for a message, never raising: nesting, long strings and long
    integers are cut (about `limit` characters), lone surrogates come out escaped (repr)."""
    text = _Shown(limit).repr(value)
    return text if len(text) <= 3 * limit else text[:3 * limit] + "..."


def text_problem(value: str) -> str | None:
    """None when the string can be written as UTF-8 (the ledger, the journal and every answer must
    hold it); else the problem as text naming the first lone surrogate (U+D800-U+DFFF)."""
    if value.isascii():
        return None
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"must be valid Unicode text, got a lone surrogate ({shown(value[exc.start])}) at character {exc.start}"
    return None


def escape_surrogates(json_str: str) -> str:
    """JSON text (from json.dumps(..., ensure_ascii=False)) with each lone surrogate written as its
    \\uXXXX escape: the same JSON value, now valid UTF-8 (in JSON text a surrogate can only stand
    inside a string literal, where every backslash is already doubled). Other text: each lone
    surrogate as that escape, readable."""
    if json_str.isascii():
        return json_str
    # UTF-8 encodes every other character: only surrogates get backslashreplace's \uXXXX
    return json_str.encode("utf-8", "backslashreplace").decode("utf-8")


HOURS_PER_WEEK = 168
INT_MAX = 2**31 - 1   # the largest value of the ledger's INTEGER columns (reserved_gpus, a window's gpus, ...)
TOO_DEEP = "nested too deeply to read (arrays or inline tables inside each other, hundreds of levels)"
MAX_JSON_DEPTH = 64  # nesting levels a request's JSON may have (a request needs 3)


def _plain(o, depth: int):
    """`o` with what standard JSON cannot hold made text: non-finite floats as "NaN" / "Infinity"
    / "-Infinity", integers too long to print as `shown`, non-string keys as str, and whatever
    lies deeper than `depth` levels as "..."."""
    if isinstance(o, float) and not math.isfinite(o):
        return "NaN" if o != o else ("Infinity" if o > 0 else "-Infinity")
    if isinstance(o, int) and not isinstance(o, bool) and o.bit_length() > 1024:
        return shown(o)
    if isinstance(o, (dict, list, tuple)) and depth <= 0:
        return "..."
    if isinstance(o, dict):
        return {k if isinstance(k, str) else shown(k): _plain(v, depth - 1) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_plain(v, depth - 1) for v in o]
    return o


def json_text(obj, *, sort_keys: bool = False) -> str:
    """`obj` as standard JSON text that is valid UTF-8, for any value a request or decision may hold,
    never raising; datetimes and sets as `json_default` writes them, lone surrogates as \\u escapes.
    What json.dumps cannot write (NaN, ±inf, integers of 4,300+ digits, nesting past the recursion
    limit) is written through `_plain`. Valid plain data comes out exactly as json.dumps writes it."""
    def dumps(o):
        return json.dumps(o, sort_keys=sort_keys, default=json_default, ensure_ascii=False, allow_nan=False)
    try:
        text = dumps(obj)
    except (ValueError, TypeError, RecursionError):
        text = dumps(_plain(obj, MAX_JSON_DEPTH))
    return escape_surrogates(text)


class JSONTooDeep(ValueError):
    """JSON text nested deeper than it may be (`loads_bounded`)."""


_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_BRACKET_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


def json_depth(text: str, stop_above: int | None = None) -> int:
    """How deeply JSON text nests arrays and objects, counted without parsing or recursion (brackets
    inside strings do not count; malformed text may count deeper than a parser would get). With
    `stop_above`, counting stops at the first level deeper than that."""
    brackets = _NOT_BRACKET.sub("", _JSON_STRING.sub("", text)) if "[" in text or "{" in text else ""
    depth = deepest = 0
    for step in map(_BRACKET_STEP.__getitem__, brackets):
        depth += step
        if depth > deepest:
            deepest = depth
            if stop_above is not None and deepest > stop_above:
                break
    return deepest


def _json_int(digits: str) -> int:
    # int() refuses 4,300+ digits (ValueError); any integer that long is "too large" for the gate
    if len(digits) > 4000:
        return -10 ** 4000 if digits.startswith("-") else 10 ** 4000
    return int(digits)


def loads_bounded(text: str, *, max_depth: int = MAX_JSON_DEPTH):
    """Parse JSON text from outside (a request), never failing but with json.JSONDecodeError (not
    JSON) or JSONTooDeep (nested deeper than `max_depth`, refused before parsing: no RecursionError).
    NaN, Infinity and -Infinity are read as floats and integers of any length as ints (beyond
    4,000 digits as ±10**4000), for the request's validation to refuse by field name."""
    if text.count("[") + text.count("{") > max_depth and json_depth(text, max_depth) > max_depth:
        raise JSONTooDeep(f"nested deeper than {max_depth} levels")
    return json.loads(text, parse_constant=float, parse_int=_json_int)
