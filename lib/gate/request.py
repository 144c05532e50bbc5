"""The request format and its validation: every field problem found at once, never a crash.

A request is a plain dict (parsed JSON). `validate(request)` returns `(normalized, problems)`: the
request with defaults filled in, and a list of `invalid-request` reasons, one per bad field, each
naming the field (dotted for nested ones, e.g. `pilot.steps_per_second`). Numbers must be real
finite numbers: bools, strings, None, NaN and ±inf are refused, and so are integers beyond any float
("too large"). Text must be valid Unicode (no lone surrogate) and of bounded length, every string
field its own bound. Any value at all, however large, long or deeply nested, gives problems, never
an exception: messages show values cut short (lib.gate.terms.shown), unknown fields are named
(the first MAX_UNKNOWN_NAMED of them) and never read.
"""
from __future__ import annotations

import re
from datetime import datetime

from lib.gate.contracts import Reason, Request, StopPolicy
from lib.gate.reasons import reason
from lib.gate.terms import (CAPACITIES, KINDS, escape_surrogates, naive_utc, number_problem, shown, team_name_problem,
                            text_problem)

HOLDOUT_METRIC_WORDS = frozenset({"holdout", "test"})  # a stop rule may read neither (docs/rules.md, Stop rules)

INT32_MAX = 2**31 - 1  # whole-number fields land in the ledger's INTEGER / BIGINT columns
INT64_MAX = 2**63 - 1
MAX_UNKNOWN_NAMED = 10  # unknown fields named one by one; past these, one problem counts the rest
MAX_FIELD_NAME = 80     # characters of an unknown field's name a problem repeats


def number(minimum=0.0, *, strict=False, integral=False, maximum=None, below=None):
    """A check: None for a finite real number in range (never a bool), else the problem as text
    (lib.gate.terms.number_problem)."""
    def check(value):
        return number_problem(value, minimum, strict=strict, integral=integral, maximum=maximum,
                              below=below)
    check.integral = integral   # what NUMBER_FIELDS and WHOLE_NUMBER_FIELDS are read from
    return check


def text(max_len=200):
    """A check: None for a non-empty string of valid Unicode of at most `max_len` characters."""
    def check(value):
        if type(value) is not str or not value.strip():
            return f"must be a non-empty string, got {_got(value)}"
        return _text_bounds(value, max_len)
    return check


def _text_bounds(value: str, max_len: int):
    if len(value) > max_len:
        return f"must be at most {max_len} characters, got {len(value)}"
    return text_problem(value)


def _got(value) -> str:
    """How a problem shows a value it refuses: its JSON type when that is not a string, and the value
    itself cut short."""
    return shown(value) if type(value) is str else f"{type(value).__name__} {shown(value)}"


def _bool(value):
    return None if type(value) is bool else f"must be true or false, got {_got(value)}"


def _choice(options):
    def check(value):
        return None if type(value) is str and value in options else \
            f"must be one of {', '.join(options)}; got {_got(value)}"
    return check


def _optional_text(max_len=200):
    def check(value):
        if value is None:
            return None
        return f"must be a string, got {_got(value)}" if type(value) is not str else _text_bounds(value, max_len)
    return check


def _time(value):
    if type(value) is str and len(value) <= 64 and _parse_time(value):
        return None
    return f"must be an ISO-8601 time, got {_got(value)}"


# field -> check(value) -> problem text or None. Order = the order problems are reported in.
_REQUIRED = {
    "run_id": text(),
    "team": team_name_problem,   # lib.gate.terms.TEAM_NAME
    "kind": _choice(KINDS),
    "gpus": number(1, integral=True, maximum=INT32_MAX),
    "gpu_mem_gb": number(strict=True),
    "max_runtime_hours": number(strict=True),
    "budget_gpu_hours": number(),
    "checkpoint_supported": _bool,
    "expected_interruptions": number(),
    "capacity": _choice(CAPACITIES),
}
_OPTIONAL = {
    # missing or null is not malformed: the gate defers it with `no-snapshot`
    "data_snapshot": _optional_text(),
    "estimated_gpu_hours": number(),
    "pilot": None,        # checked by _check_pilot
    "stop_policy": None,  # checked by _check_stop_policy
    "skip_full_evaluation": _bool,
    "holdout_allowance": number(integral=True, maximum=INT32_MAX),
    "submitted_at": _time,
    "note": text(2000),
}
PILOT_FIELDS = {
    "gpus": number(1, integral=True, maximum=INT32_MAX),   # the pilot's accelerators; default: the request's
    "steps_per_second": number(strict=True),
    "worst_case_steps_per_second": number(strict=True),
    "worst_case_share": number(maximum=1),
    "peak_mem_gb": number(strict=True),
    "checkpoint_write_s": number(),
    "planned_steps": number(1, integral=True, maximum=INT64_MAX),
    "checkpoint_interval_steps": number(1, integral=True, maximum=INT64_MAX),
    "eval_gpu_hours": number(),
    "data_loading_fraction": number(below=1),
    "restart_minutes": number(),
}
PILOT_DEFAULTS = {"worst_case_share": 0.0, "checkpoint_write_s": 0.0, "eval_gpu_hours": 0.0,
                  "data_loading_fraction": 0.0, "restart_minutes": 5.0}
PILOT_REQUIRED = ("steps_per_second", "planned_steps", "peak_mem_gb")
_PILOT_REQUIRED = dict.fromkeys(PILOT_REQUIRED).keys()  # ordered, and set-comparable
_EARLY_STOP_REQUIRED = dict.fromkeys(("metric", "mode")).keys()
STOP_FIELDS = {
    "max_wall_clock_hours": number(strict=True),
    "spend_limit_gpu_hours": number(strict=True),
    "max_failed_steps": number(integral=True, maximum=INT32_MAX),
    "early_stop": None,
}
EARLY_STOP_MODES = ("min", "max")
EARLY_STOP_FIELDS = {
    "metric": text(),
    "mode": _choice(EARLY_STOP_MODES),
    "patience": number(integral=True, maximum=INT32_MAX),
    "min_delta": number(),
}
_SPEC = {**_REQUIRED, **_OPTIONAL}
run_id_problem = _REQUIRED["run_id"]  # None for a run ID the gate can look up
_UNKNOWN = object()
_REQUIRED_NAMES = _REQUIRED.keys()
FIELDS = tuple(_SPEC)
REQUIRED_FIELDS = tuple(_REQUIRED)
# Field names at every depth (request, pilot, stop_policy, early_stop) by type, read from the checks
# above: for code that builds a request from typed-in values (the what-if form). The one name used at
# two depths, `gpus` (request and pilot), is a whole number at both.
_ALL_SPECS = (_SPEC, PILOT_FIELDS, STOP_FIELDS, EARLY_STOP_FIELDS)
NUMBER_FIELDS = frozenset(name for spec in _ALL_SPECS for name, check in spec.items() if hasattr(check, "integral"))
WHOLE_NUMBER_FIELDS = frozenset(name for spec in _ALL_SPECS for name, check in spec.items()
                                if getattr(check, "integral", False))
BOOLEAN_FIELDS = frozenset(name for spec in _ALL_SPECS for name, check in spec.items() if check is _bool)


def echoed(value):
    """A request's run_id, team or kind as its decision repeats it: the value itself when it is plain
    short data (valid text of at most 200 characters, a 64-bit integer, a float, a bool, null), else a
    short display of it (terms.shown). So a decision on any request can be written (journal, ledger),
    answered and printed."""
    kind = type(value)
    if value is None or kind in (bool, float) or (kind is int and -INT64_MAX - 1 <= value <= INT64_MAX):
        return value
    if kind is str and len(value) <= 200 and text_problem(value) is None:
        return value
    return shown(value)


def _parse_time(value) -> datetime | None:
    """An ISO-8601 text as a naive UTC datetime; None for anything else."""
    if type(value) is not str:
        return None
    try:
        return naive_utc(value)
    except (ValueError, OverflowError):  # OverflowError: an offset that moves year 1 or 9999 out of range
        return None


def _problem(field, text):
    return reason("invalid-request", f"{field} {text}", fix=f"correct {field} and resubmit", field=field)


def field_label(name) -> str:
    """A field name as a problem names it: escaped where it is not valid Unicode, cut short."""
    if type(name) is not str:
        return shown(name)
    label = escape_surrogates(name)
    return label if len(label) <= MAX_FIELD_NAME else label[:MAX_FIELD_NAME] + "..."


def _check_fields(obj, spec, prefix, problems, *, required=(), allow_unknown=False):
    if type(obj) is not dict:
        problems.append(_problem(prefix.rstrip(".") or "request", f"must be a JSON object, got {_got(obj)}"))
        return
    if required and not required <= obj.keys():
        for name in required:
            if name not in obj:
                problems.append(_problem(prefix + name, "is required"))
    unknown = 0
    for name, value in obj.items():
        check = spec.get(name, _UNKNOWN)
        if check is _UNKNOWN:
            unknown += 1
            if not allow_unknown and unknown <= MAX_UNKNOWN_NAMED:
                bad_name = " (and its name is not valid Unicode text)" if type(name) is str and text_problem(name) else ""
                problems.append(_problem(prefix + field_label(name),
                                         f"is not a known field{bad_name} (known: {', '.join(sorted(spec))})"))
            continue
        if check is not None:
            text = check(value)
            if text:
                problems.append(_problem(prefix + name, text))
    if not allow_unknown and unknown > MAX_UNKNOWN_NAMED:
        where = prefix.rstrip(".") or "request"
        problems.append(_problem(where, f"has {unknown - MAX_UNKNOWN_NAMED} more unknown fields"))


def _check_pilot(pilot, problems):
    _check_fields(pilot, PILOT_FIELDS, "pilot.", problems, required=_PILOT_REQUIRED)


def reads_holdout(metric: str) -> bool:
    """True when a metric name reads the final holdout (a word 'holdout' or 'test' in it)."""
    return bool(HOLDOUT_METRIC_WORDS & set(re.split(r"[^a-z0-9]+", metric.lower())))


def _check_stop_policy(policy, problems):
    _check_fields(policy, STOP_FIELDS, "stop_policy.", problems)
    if type(policy) is dict and "early_stop" in policy:
        es = policy["early_stop"]
        _check_fields(es, EARLY_STOP_FIELDS, "stop_policy.early_stop.", problems,
                      required=_EARLY_STOP_REQUIRED)
        metric = es.get("metric") if type(es) is dict else None
        if type(metric) is str and reads_holdout(metric):
            problems.append(reason(
                "invalid-request",
                f"stop_policy.early_stop.metric {shown(metric)} reads the final holdout; early stopping "
                "must use a development metric",
                fix="name a validation (development) metric, e.g. 'val_loss'",
                field="stop_policy.early_stop.metric"))


def validate_stop_policy(policy: StopPolicy) -> list[Reason]:
    """The invalid-request reasons of a stop policy on its own (empty when valid)."""
    problems: list[dict] = []
    _check_stop_policy(policy, problems)
    return problems


def _check_production(request: dict, problems: list) -> None:
    """A production candidate may not skip full evaluation, and its pilot must budget it."""
    if request.get("skip_full_evaluation") is True:
        problems.append(reason(
            "invalid-request", "a production candidate may not skip full evaluation",
            fix="set skip_full_evaluation to false and budget the evaluation (pilot.eval_gpu_hours)",
            field="skip_full_evaluation"))
        return
    pilot = request.get("pilot")
    if type(pilot) is dict and pilot.get("eval_gpu_hours", 0) == 0:
        problems.append(reason(
            "invalid-request", "a production candidate's pilot must budget its full evaluation",
            fix="set pilot.eval_gpu_hours to the measured cost of the full evaluation (> 0)",
            field="pilot.eval_gpu_hours"))


_DEFAULTS = {"data_snapshot": None, "skip_full_evaluation": False, "holdout_allowance": 0,
             "submitted_at": None}


def validate(request) -> tuple[Request | None, list[Reason]]:
    """Check a request; return (normalized request with defaults, invalid-request reasons)."""
    problems: list[dict] = []
    if type(request) is not dict:
        return None, [_problem("request", f"must be a JSON object, got {type(request).__name__}")]
    has_est = "estimated_gpu_hours" in request
    has_pilot = "pilot" in request
    _check_fields(request, _SPEC, "", problems, required=_REQUIRED_NAMES)
    if has_est == has_pilot:
        problems.append(_problem("estimated_gpu_hours", "or pilot is required, exactly one of them"))
    if has_pilot:
        _check_pilot(request["pilot"], problems)
    if "stop_policy" in request:
        _check_stop_policy(request["stop_policy"], problems)
    if request.get("kind") == "production":
        _check_production(request, problems)
    if problems:
        return None, problems
    return normalized(request), []


def normalized(request: dict) -> Request:
    """A request `validate` found no problem with, with its defaults filled in (what validate returns
    for it). Only for such a request: anything else may raise."""
    has_pilot = "pilot" in request
    out = {**_DEFAULTS, **request}
    if "submitted_at" in request:
        out["submitted_at"] = _parse_time(request["submitted_at"])
    if has_pilot:
        pilot = out["pilot"] = {**PILOT_DEFAULTS, **request["pilot"]}
        if "checkpoint_interval_steps" not in pilot:
            pilot["checkpoint_interval_steps"] = pilot["planned_steps"]
        if "worst_case_steps_per_second" not in pilot:
            pilot["worst_case_steps_per_second"] = pilot["steps_per_second"]
        if "gpus" not in pilot:
            pilot["gpus"] = out["gpus"]
    return out
