"""The settings a caller sends the warm gate server (the "c:" keys of lib.slurm.wire), checked before
anything is decided: the server takes nothing a caller sends on trust.

| setting | requests | accepted values |
| --- | --- | --- |
| `op` | command line | check, submit, flush (absent: a hook request, a job description in "f:" keys) |
| `request` | check, submit | the request JSON (parsed by the server with the request) |
| `db` | all | the ledger (absent: the server's $GATE_DB, else data/gate.duckdb) |
| `timeout_s` | all | seconds to wait for a ledger the server has not loaded yet: finite, > 0, ≤ 60 (default 5) |
| `on_failure` | hook | refuse, accept-and-flag (any other value is taken as refuse, and the flag log says so) |
| `on_defer` | hook | refuse keeps refusing deferred jobs; anything else holds what only time cures (lib.slurm.holds) |
| `default_partition` | hook | partition names (letters, digits, '.', '_', '-'), comma-separated |
| `origin` | check, submit | cli, slurm, app, kueue, hook (the command line's --origin choices; default cli) |
| `now` | check, submit | ISO-8601 time; for submit within lib.gate.terms.SUBMIT_CLOCK_WINDOW of the server's clock |
| `flag_log`, `socket` | hook | ignored: the server writes only its own $TG_FLAG_LOG, read at its start |

Anything else, or a setting a request of that kind does not take (a hook request is dated by the
server's clock and recorded as origin slurm), is refused naming the setting and its value.
"""
from __future__ import annotations

import math
import re

from lib.gate.terms import InputError, checked_submit_time, naive_utc

ORIGINS = ("cli", "slurm", "app", "kueue", "hook")
OPS = ("check", "submit", "flush")
DEFAULT_TIMEOUT_S, MAX_TIMEOUT_S = 5.0, 60.0
IGNORED = ("flag_log", "socket")  # job_submit.lua and the hook send them; the server has its own
TAKEN = {  # op -> the settings such a request takes (None: a hook request)
    None: ("db", "timeout_s", "on_failure", "default_partition", "on_defer") + IGNORED,
    "check": ("op", "request", "db", "timeout_s", "origin", "now"),
    "submit": ("op", "request", "db", "timeout_s", "origin", "now"),
    "flush": ("op", "db", "timeout_s"),
}
PARTITIONS = re.compile(r"[A-Za-z0-9._-]{1,128}(,[A-Za-z0-9._-]{1,128}){0,63}")


class SettingError(InputError):
    """A setting a caller sent is not acceptable: the request is refused, never decided, whatever
    the failure policy (the hook's exit 3; exit 2 for the command line's requests)."""


def _bad(key: str, value, rule: str) -> SettingError:
    shown = repr(value) if len(repr(value)) <= 100 else repr(value)[:97] + "..."
    return SettingError(f"setting {key}={shown}: {rule}")


def caller_settings(config: dict) -> dict:
    """`config` (the text lib.slurm.wire.decode_request gives) checked, without the ignored keys:
    timeout_s a float, now a naive-UTC datetime or None. SettingError names the first bad one."""
    op = config.get("op")
    if op is not None and op not in OPS:
        raise _bad("op", op, f"must be one of {', '.join(OPS)}")
    taken = TAKEN[op]
    for key in config:
        if key not in taken:
            kind = f"an op={op} request" if op else "a hook request (a job description)"
            raise _bad(key, config[key], f"not a setting of {kind}; it takes {', '.join(taken)}")
    out = {k: v for k, v in config.items() if k not in IGNORED}
    out["timeout_s"] = _timeout(config.get("timeout_s"))
    origin = config.get("origin")
    if origin is not None and origin not in ORIGINS:
        raise _bad("origin", origin, f"must be one of {', '.join(ORIGINS)}")
    partition = config.get("default_partition")
    if partition is not None and not PARTITIONS.fullmatch(partition):
        raise _bad("default_partition", partition,
                   "must be partition names (letters, digits, '.', '_', '-'), comma-separated")
    if config.get("now") is not None:
        out["now"] = _now(config["now"], recorded=op == "submit")
    return out


def _timeout(value) -> float:
    if value is None:
        return DEFAULT_TIMEOUT_S
    try:
        x = float(value)
    except (TypeError, ValueError):
        x = math.nan
    if not (math.isfinite(x) and 0 < x <= MAX_TIMEOUT_S):
        raise _bad("timeout_s", value, f"must be a finite number of seconds, > 0 and ≤ {MAX_TIMEOUT_S:g}")
    return x


def _now(value, *, recorded: bool):
    try:
        now = naive_utc(value)
    except (TypeError, ValueError, OverflowError):
        raise _bad("now", value, "must be an ISO-8601 time") from None
    if recorded:  # a decision to record is dated at the present, within the clock window
        try:
            checked_submit_time(now)
        except InputError as exc:
            raise _bad("now", value, str(exc)) from None
    return now
