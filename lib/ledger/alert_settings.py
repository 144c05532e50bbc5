"""data/teams.toml `[alerts]`: where budget alerts go and when they are raised (not policy: no
alert setting changes a team's policy_version).

    [alerts]
    webhook = "https://hooks.example.org/T0/B0/XXXX"   # optional; $GATE_ALERT_WEBHOOK wins
    budget_percent = [80, 100]   # spend of the month's budget, percent (default [80, 100])
    runout = ["p50"]             # projected run-out before month end at P50 and/or P90 (default ["p50"])

    [alerts.teams.vision]        # a team's own thresholds, instead of the ones above
    budget_percent = [50, 80, 100]
    runout = []

Every problem is reported at once, each naming the table and the key. A webhook URL never carries
credentials before its host (`https://user:password@host/...`): it is refused, and no message shows it.
"""
from __future__ import annotations

import os
from typing import TypedDict
from urllib.parse import urlsplit

from lib.gate.terms import InputError

RUNOUT_LEVELS = ("p50", "p90")
DEFAULT_BUDGET_PERCENT = (80.0, 100.0)
DEFAULT_RUNOUT = ("p50",)
WEBHOOK_ENV = "GATE_ALERT_WEBHOOK"
_KEYS = ("webhook", "budget_percent", "runout", "teams")
_TEAM_KEYS = ("budget_percent", "runout")


class Thresholds(TypedDict):
    budget_percent: list[float]   # percent of the month's budget spent, ascending
    runout: list[str]             # of RUNOUT_LEVELS


class AlertSettings(TypedDict):
    webhook: str | None           # from the file; `webhook_url` prefers the environment
    default: Thresholds
    teams: dict[str, Thresholds]  # teams with thresholds of their own


def webhook_problem(url) -> str | None:
    """Why `url` cannot be a webhook (None when it can): http or https with a host, no user name or
    password before the host. The answer never quotes the URL (its userinfo, path or query may hold a
    secret)."""
    if type(url) is not str or not url.strip():
        return "must be a non-empty string"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError:
        return "must be an http:// or https:// URL with a host"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "must be an http:// or https:// URL with a host"
    if "@" in parts.netloc:
        return ("must not carry a user name or password before the host (user:password@): a client would "
                "send them to the receiver and messages could show them; put the receiver's token where it "
                "expects it (its path or query)")
    return None


def shown_webhook(url: str) -> str:
    """The webhook as messages show it: scheme and host only (a path or query often holds a secret)."""
    parts = urlsplit(url)
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{parts.hostname}{port}/…"


def _thresholds(table: dict, where: str, base: Thresholds, problems: list[str]) -> Thresholds:
    out: Thresholds = {"budget_percent": list(base["budget_percent"]), "runout": list(base["runout"])}
    if "budget_percent" in table:
        values = table["budget_percent"]
        if type(values) is not list or any(type(v) not in (int, float) or isinstance(v, bool)
                                           or not 0 < v <= 1000 for v in values):
            problems.append(f"{where} budget_percent: must be a list of numbers above 0 and at most 1000, "
                            f"got {values!r}")
        else:
            out["budget_percent"] = sorted({float(v) for v in values})
    if "runout" in table:
        values = table["runout"]
        if type(values) is not list or any(v not in RUNOUT_LEVELS for v in values):
            problems.append(f"{where} runout: must be a list of {', '.join(map(repr, RUNOUT_LEVELS))}, got {values!r}")
        else:
            out["runout"] = [v for v in RUNOUT_LEVELS if v in values]
    return out


def parse_alerts(doc, team_names, problems: list[str]) -> AlertSettings:
    """The [alerts] table (absent: the defaults, no webhook), appending every problem to `problems`."""
    base: Thresholds = {"budget_percent": list(DEFAULT_BUDGET_PERCENT), "runout": list(DEFAULT_RUNOUT)}
    settings: AlertSettings = {"webhook": None, "default": base, "teams": {}}
    if doc is None:
        return settings
    if type(doc) is not dict:
        problems.append(f"[alerts] must be a table, got {doc!r}")
        return settings
    for key in doc:
        if key not in _KEYS:
            problems.append(f"[alerts] {key}: unknown key (known: {', '.join(_KEYS)})")
    if "webhook" in doc:
        problem = webhook_problem(doc["webhook"])
        if problem:
            problems.append(f"[alerts] webhook: {problem}")
        else:
            settings["webhook"] = doc["webhook"]
    settings["default"] = _thresholds(doc, "[alerts]", base, problems)
    teams = doc.get("teams", {})
    if type(teams) is not dict:
        problems.append("[alerts.teams] must be a table of [alerts.teams.NAME] tables")
        return settings
    for name, table in teams.items():
        where = f"[alerts.teams.{name}]"
        if name not in team_names:
            problems.append(f"{where}: {name!r} is not a team in this file")
            continue
        if type(table) is not dict:
            problems.append(f"{where}: must be a table")
            continue
        for key in table:
            if key not in _TEAM_KEYS:
                problems.append(f"{where} {key}: unknown key (known: {', '.join(_TEAM_KEYS)})")
        settings["teams"][name] = _thresholds(table, where, settings["default"], problems)
    return settings


def webhook_url(settings: AlertSettings) -> str | None:
    """Where alerts are sent: $GATE_ALERT_WEBHOOK when set, else the file's [alerts] webhook (checked
    when the file was read). InputError, naming the variable but not its value, when the variable's
    URL cannot be a webhook (webhook_problem)."""
    url = os.environ.get(WEBHOOK_ENV)
    if not url:
        return settings["webhook"]
    problem = webhook_problem(url)
    if problem:
        raise InputError(f"${WEBHOOK_ENV}: {problem}")
    return url


def thresholds_for(settings: AlertSettings, team: str) -> Thresholds:
    return settings["teams"].get(team, settings["default"])
