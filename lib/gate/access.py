"""data/access.toml: who may do what, a reviewed file beside the team policy. Parsed and resolved here,
pure (no Streamlit, no ledger): the dashboard, the command line and the gate server all ask this module.

Roles, most powerful first (a person matched by several gets the first):

- `planner`: imports run history, edits and exports proposed policies, runs the what-if (and, on the
  command line, `cancel` of a waiting request) for any team, sees every team;
- `member` of one or more teams: runs the what-if (and, on the command line, `submit` and `cancel`) for
  those teams; sees every team's dashboards, or only their own teams' when `members_see = "own-teams"`;
- `viewer`: read-only dashboards of every team.

Layout::

    [access]
    unknown = "viewer"            # a signed-in person the file does not name: "viewer" or "none" (no entry)
    members_see = "every-team"    # or "own-teams"
    groups_claim = "groups"       # the identity provider's claim that lists a person's groups
    check_command_line = false    # true: `python -m lib submit` (and `cancel`) only for the OS user's teams

    [planners]                    # each of these tables: any of emails, users, groups
    emails = ["ana@example.org"]  # matched case-insensitively against the signed-in e-mail
    users = ["ana"]               # OS login names (the command line, the gate server)
    groups = ["capacity-planners"]  # the group claim in the app, Unix groups on the command line

    [viewers]                     # named viewers (useful with unknown = "none")
    [teams.vision]                # members of team `vision`

A malformed file is refused as a whole (AccessFileError) with every problem, each with its line.
"""
from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path
from typing import Iterable, Literal, TypedDict

from lib.gate.terms import TOO_DEEP, InputError, team_name_problem

DEFAULT_ACCESS_FILE = Path(__file__).resolve().parents[2] / "data" / "access.toml"
ROLES = ("planner", "member", "viewer")
ACTIONS = ("import", "policy", "what-if", "submit", "cancel")
UNKNOWN_CHOICES = ("viewer", "none")
MEMBERS_SEE = ("every-team", "own-teams")
PRINCIPAL_KEYS = ("emails", "users", "groups")
SETTINGS = {"unknown": "viewer", "members_see": "every-team", "groups_claim": "groups",
            "check_command_line": False}

Role = Literal["planner", "member", "viewer"]


class Principals(TypedDict):
    """Who a table of the file names: lower-cased e-mails, OS user names, group names."""
    emails: frozenset[str]
    users: frozenset[str]
    groups: frozenset[str]


class Access(TypedDict):
    """The validated file: its [access] settings and who each role is."""
    unknown: str                 # "viewer" | "none"
    members_see: str             # "every-team" | "own-teams"
    groups_claim: str
    check_command_line: bool
    planners: Principals
    viewers: Principals
    teams: dict[str, Principals]


class Grant(TypedDict):
    """What one person may do: `role` (None: no entry at all), the teams they are a member of, and
    `sees` — the teams whose dashboards they see (None: every team)."""
    identity: str
    role: Role | None
    teams: tuple[str, ...]
    sees: tuple[str, ...] | None


class AccessFileError(ValueError):
    """The access file cannot be used; `problems` lists every problem, each as "line N: reason"."""

    def __init__(self, path, problems: list[str]):
        self.path = str(path)
        self.problems = list(problems)
        super().__init__(f"{path}: {len(problems)} problem(s):\n  " + "\n  ".join(problems))


def access_path(path: str | os.PathLike | None = None) -> Path:
    """The access file: `path`, else $GATE_ACCESS, else data/access.toml."""
    if path:
        return Path(path)
    env = os.environ.get("GATE_ACCESS")
    return Path(env) if env else DEFAULT_ACCESS_FILE


def load_access_file(path: str | os.PathLike | None = None) -> Access:
    """Read and validate the access file (see the module docstring). AccessFileError for a missing,
    unreadable or malformed file."""
    p = access_path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise AccessFileError(p, ["the file does not exist: create it (see data/access.toml)"]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise AccessFileError(p, [f"cannot read it: {getattr(exc, 'strerror', None) or exc}"]) from None
    return parse_access(text, p)


def parse_access(text: str, path: str | os.PathLike = "access.toml") -> Access:
    """Validate the text of an access file; AccessFileError (naming `path`) lists every problem."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise AccessFileError(path, [_toml_problem(exc)]) from None
    except RecursionError:   # tomllib reads nested arrays and inline tables by recursion
        raise AccessFileError(path, [f"not valid TOML: {TOO_DEEP}"]) from None
    problems: list[str] = []
    where = _Lines(text)
    for key in doc:
        if key not in ("access", "planners", "viewers", "teams"):
            problems.append(f"line {where.table(key)}: [{key}] is not a known table "
                            "(known: access, planners, viewers, teams)")
    settings = _settings(_table(doc, "access", where, problems), where, problems)
    planners = _principals(_table(doc, "planners", where, problems), "planners", where, problems)
    viewers = _principals(_table(doc, "viewers", where, problems), "viewers", where, problems)
    teams = {}
    for team, body in _table(doc, "teams", where, problems).items():
        name = f"teams.{team}"
        if type(body) is not dict:
            problems.append(f"line {where.key('teams', team)}: teams.{team} must be a table [teams.{team}]")
            continue
        bad_name = team_name_problem(team)
        if bad_name:
            problems.append(f"line {where.table(name)}: [teams.{team}] the team name {bad_name}")
            continue
        teams[team] = _principals(body, name, where, problems)
    if problems:
        raise AccessFileError(path, problems)
    return {**settings, "planners": planners, "viewers": viewers, "teams": teams}


def resolve(access: Access, *, email: str | None = None, user: str | None = None,
            groups: Iterable[str] = ()) -> Grant:
    """What a person may do: matched by e-mail (case-insensitive), OS user name and groups. Planner
    beats member beats a named viewer; anyone else is `access["unknown"]` (viewer, or no role)."""
    mail = (email or "").strip().lower()
    group_set = frozenset(groups)

    def named(p: Principals) -> bool:
        return bool((mail and mail in p["emails"]) or (user and user in p["users"]) or p["groups"] & group_set)

    identity = email or user or "unknown"
    member_of = tuple(sorted(t for t, p in access["teams"].items() if named(p)))
    if named(access["planners"]):
        return {"identity": identity, "role": "planner", "teams": member_of, "sees": None}
    if member_of:
        sees = member_of if access["members_see"] == "own-teams" else None
        return {"identity": identity, "role": "member", "teams": member_of, "sees": sees}
    if named(access["viewers"]) or access["unknown"] == "viewer":
        return {"identity": identity, "role": "viewer", "teams": (), "sees": None}
    return {"identity": identity, "role": None, "teams": (), "sees": ()}


def everyone(identity: str) -> Grant:
    """The grant of local mode (no sign-in configured, loopback only): a single user with every role."""
    return {"identity": identity, "role": "planner", "teams": (), "sees": None}


def may(grant: Grant, action: str, team: str | None = None) -> bool:
    """Whether the grant allows `action` (one of ACTIONS): import and policy (edit, replay, export)
    are the planners'; the what-if and `cancel` (a waiting request taken out of the queue) are a
    planner's for any team and a member's for their teams; `submit` (the command line) is for a
    member's own teams only — not every team a planner plans."""
    if action not in ACTIONS:
        raise ValueError(f"unknown action {action!r} (known: {', '.join(ACTIONS)})")
    role = grant["role"]
    if action in ("import", "policy"):
        return role == "planner"
    if action in ("what-if", "cancel"):
        return role == "planner" or (role == "member" and (team is None or team in grant["teams"]))
    return team in grant["teams"]


def command_line_access(path: str | os.PathLike | None = None) -> Access | None:
    """The access file (`access_path`) when it asks the command line to check the OS user
    (`check_command_line`); None when there is no such file or it does not ask. InputError (every
    problem, as AccessFileError lists them) for a file that cannot be used: bad input to the command."""
    p = access_path(path)
    if not p.exists():
        return None
    try:
        access = load_access_file(p)
    except AccessFileError as exc:
        raise InputError(str(exc)) from None
    return access if access["check_command_line"] else None


def teams_for(access: Access, user: str, groups: Iterable[str] = ()) -> tuple[str, ...]:
    """The teams an OS user (with their Unix groups) may submit for: those the access file names the
    user or one of the groups in. What the gate server calls with the caller's peer credentials."""
    return resolve(access, user=user, groups=groups)["teams"]


def _settings(doc: dict, where: "_Lines", problems: list[str]) -> dict:
    out = dict(SETTINGS)
    for key, value in doc.items():
        line = where.key("access", key)
        if key not in SETTINGS:
            problems.append(f"line {line}: [access] {key} is not a known setting (known: {', '.join(SETTINGS)})")
        elif key == "unknown" and value not in UNKNOWN_CHOICES:
            problems.append(f"line {line}: [access] unknown must be \"viewer\" or \"none\", got {value!r}")
        elif key == "members_see" and value not in MEMBERS_SEE:
            problems.append(f"line {line}: [access] members_see must be \"every-team\" or \"own-teams\", "
                            f"got {value!r}")
        elif key == "groups_claim" and (type(value) is not str or not value.strip()):
            problems.append(f"line {line}: [access] groups_claim must be a claim name, got {value!r}")
        elif key == "check_command_line" and type(value) is not bool:
            problems.append(f"line {line}: [access] check_command_line must be true or false, got {value!r}")
        else:
            out[key] = value
    return out


def _principals(doc: dict, table: str, where: "_Lines", problems: list[str]) -> Principals:
    out: dict[str, frozenset[str]] = {k: frozenset() for k in PRINCIPAL_KEYS}
    for key, value in doc.items():
        line = where.key(table, key)
        if key not in PRINCIPAL_KEYS:
            problems.append(f"line {line}: [{table}] {key} is not a known key (known: {', '.join(PRINCIPAL_KEYS)})")
            continue
        if type(value) is not list or not all(type(v) is str and v.strip() for v in value):
            problems.append(f"line {line}: [{table}] {key} must be a list of non-empty strings, got {value!r}")
            continue
        if key == "emails":
            bad = [v for v in value if not re.fullmatch(r"[^@\s]+@[^@\s]+", v.strip())]
            if bad:
                problems.append(f"line {line}: [{table}] emails: {bad[0]!r} is not an e-mail address")
                continue
            value = [v.strip().lower() for v in value]
        out[key] = frozenset(v.strip() for v in value)
    return out  # type: ignore[return-value]


def _table(doc: dict, key: str, where: "_Lines", problems: list[str]) -> dict:
    value = doc.get(key, {})
    if type(value) is not dict:
        problems.append(f"line {where.key('', key)}: {key} must be a table [{key}], got {value!r}")
        return {}
    return value


def _toml_problem(exc: tomllib.TOMLDecodeError) -> str:
    """tomllib's message ends with "(at line L, column C)": lead with the line instead."""
    m = re.search(r"^(.*) \(at line (\d+), column (\d+)\)$", str(exc))
    if m:
        return f"line {m[2]}, column {m[3]}: not valid TOML: {m[1]}"
    return f"not valid TOML: {exc}"


class _Lines:
    """Line numbers of tables and keys in the file's text (tomllib keeps none): the first line that
    opens the table, or sets the key inside it; 1 when not found (a key set with a dotted name)."""

    def __init__(self, text: str):
        self.lines = text.splitlines()

    def table(self, name: str) -> int:
        for i, line in enumerate(self.lines, 1):
            m = re.match(r"\s*\[\[?\s*([^\]]+?)\s*\]", line)
            if m and (m[1] == name or m[1].startswith(name + ".")):
                return i
        return self.key("", name)

    def key(self, table: str, key: str) -> int:
        current = ""
        for i, line in enumerate(self.lines, 1):
            m = re.match(r"\s*\[\[?\s*([^\]]+?)\s*\]", line)
            if m:
                current = m[1].replace('"', "")
                if table and current == f"{table}.{key}":
                    return i
                continue
            k = re.match(r"\s*\"?([A-Za-z0-9_.@-]+)\"?\s*=", line)
            if k and current == table and k[1] == key:
                return i
        return 1
