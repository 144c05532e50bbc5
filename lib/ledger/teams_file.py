"""data/teams.toml: the planner-edited team policy, parsed, validated and synced into the ledger.

Layout: a `[defaults]` table (values every team inherits), one `[teams.NAME]` table per team, a
`[[snapshots]]` list (`snapshot`, optional `team` — omitted means every team may use it — and optional
`created_at`), and an optional `[prices]` table. Every problem is reported at once, each naming the
team (or snapshot, or price) and the key.

Each team's `policy_version` is a short hash of its normalized policy (all fields, sorted, numbers as
floats or ints as the schema types them), so changing any number gives the team a new version. A
key added after versions were in use (`scaling_efficiency`, `enforce_spend_limit`, `set_time_limit`)
is hashed only when it differs from its default, so a policy that leaves it alone keeps the version it
had before the key existed.

A team table may also set `colour = "#RRGGBB"`, the team's colour in the dashboard's figures. A
colour is not policy: it is not hashed into `policy_version`, so recolouring a team gives it no new
version and no decision changes meaning.

`[alerts]`: the budget alerts' webhook and thresholds (lib.ledger.alert_settings; not policy).

`[prices]`: `currency` (a 3-letter code such as "USD") and a price per GPU-hour per capacity type
(`stable`, `preemptible`), each optional, finite and >= 0; a price needs the currency. A capacity
type with no price has none in the ledger, and the dashboard shows no money for it (never 0).

`[pools.<capacity type>]`: `gpus`, the accelerators the cluster has of that type (a whole number
>= 0), which every team's reservations of that type share (lib.gate.capacity: `cluster-capacity`).
Without a pool for a type, only quotas limit its requests. A pool smaller than a team's quota is
allowed (a warning, `pool_warnings`). Problems in `[pools]` name their line in the file.
"""
from __future__ import annotations

import hashlib
import json
import re
import sys
import tomllib
from datetime import date, datetime
from pathlib import Path
from typing import TypedDict

from lib.gate.terms import (BUDGET_BASES as BASES, CAPACITIES, INT_MAX, TEAM_NAME_RULE, TOO_DEEP, naive_utc, number_problem,
                            team_name_problem)
from lib.ledger.alert_settings import AlertSettings, parse_alerts
from lib.ledger.audit import record
from lib.ledger.connection import transaction
from lib.ledger.files import NotRegularFile, open_regular
from lib.ledger.teams_pools import parse_pools, pool_warnings

DEFAULT_TEAMS_FILE = Path(__file__).resolve().parents[2] / "data" / "teams.toml"

# policy key -> (kind, default). kind: "int" (whole number >= 0 that fits the ledger's INTEGER column,
# at most INT_MAX), "float" (finite number >= 0 that a DOUBLE holds), "fraction" (a float from 0 to 1),
# "bool" (true or false), "basis", "partitions". Default None = required.
POLICY_FIELDS: dict[str, tuple[str, object]] = {
    "reserved_gpus": ("int", None),
    "retraining_reserved_gpus": ("int", 0),
    "max_gpus_per_job": ("int", None),
    "max_gpu_mem_gb": ("float", None),
    "max_runtime_hours": ("float", None),
    "monthly_budget_gpu_hours": ("float", None),
    "pilot_required_above_gpu_hours": ("float", 50.0),
    "budget_basis_production": ("basis", "upper"),
    "budget_basis_exploratory": ("basis", "median"),
    "budget_basis_retraining": ("basis", "upper"),
    "preemptible_partitions": ("partitions", []),
    # steps/s beyond a pilot's accelerators: each added one adds this share of one (docs/rules.md,
    # Pilot estimates); 1.0 = linear data-parallel scaling
    "scaling_efficiency": ("fraction", 1.0),
    # Slurm: a gated job's time limit stops it at its stop policy's spend limit (lib/slurm/limits.py)
    "enforce_spend_limit": ("bool", True),
    # Slurm: a gated job's time limit lowered to the calibrated upper wall clock plus a margin
    "set_time_limit": ("bool", False),
    # days a deferred request waits in the queue before it expires (the forward plan)
    "queue_max_age_days": ("int", 14),
}
# keys added after policy versions were in use: hashed into policy_version only off their default, so
# adding one gives no team a new version (and no recorded decision a new meaning); NULL in a ledger row
# written before the key existed reads as the default
LATER_KEYS = {"scaling_efficiency": 1.0, "enforce_spend_limit": True, "set_time_limit": False,
              "queue_max_age_days": 14}
POOLS_SOURCE = "teams-file"     # pools rows this file writes (and replaces)
COLOUR_KEY = "colour"          # a team table's display colour: not policy, not in policy_version
COLOUR_RULE = "a 6-digit hex colour such as \"#0072b2\""
COLUMNS = ("team", *POLICY_FIELDS, "policy_version", COLOUR_KEY)
CURRENCY_RULE = "a 3-letter currency code in capitals such as \"USD\""
PRICE_KEYS = ("currency", *CAPACITIES)


class Prices(TypedDict):
    """[prices]: `currency` (3-letter code; None when the file sets no price) and
    `per_gpu_hour`: {capacity type: price per GPU-hour in that currency}, priced capacity types only."""
    currency: str | None
    per_gpu_hour: dict[str, float]


class TeamsFile(TypedDict):
    """The whole validated file: team policies (each with its `colour`, or None), snapshots, prices,
    alert settings (lib.ledger.alert_settings), pools (capacity type -> the cluster's accelerators of
    that type)."""
    teams: list[dict]
    snapshots: list[dict]
    prices: Prices
    alerts: AlertSettings
    pools: dict[str, int]


class TeamsFileError(ValueError):
    """data/teams.toml cannot be used; `problems` lists every problem found (one line each)."""

    def __init__(self, path, problems: list[str]):
        self.path = str(path)
        self.problems = list(problems)
        super().__init__(f"{path}: {problems[0]}" if len(problems) == 1 else
                         f"{path}: {len(problems)} problem(s):\n  " + "\n  ".join(problems))


def _shown(value) -> str:
    """The value as a message shows it: a long integer by its first digits and how many it has."""
    text = repr(value)
    return text if len(text) <= 24 else f"{text[:12]}... ({len(text.lstrip('-'))} digits)"


def _number_problem(value, integral: bool = False) -> str | None:
    """number_problem for a teams-file number, also refusing one too large for its ledger column:
    above INT_MAX for a whole number, beyond a DOUBLE for any other (TOML integers are unbounded
    here)."""
    if type(value) in (int, float) and abs(value) > (INT_MAX if integral else sys.float_info.max):
        if value < 0:
            return f"must be ≥ 0, got {_shown(value)}"
        limit = f"{INT_MAX} (the ledger's largest whole number)" if integral else f"{sys.float_info.max:.1e}"
        return f"must be at most {limit}, got {_shown(value)}"
    return number_problem(value, integral=integral)


def _check_value(kind: str, value):
    """(normalized value, None) or (None, problem text)."""
    if kind in ("int", "float", "fraction"):
        problem = _number_problem(value, integral=kind == "int")
        if problem:
            return None, problem
        if kind == "fraction" and value > 1:
            return None, f"must be at most 1, got {_shown(value)}"
        return (int(value) if kind == "int" else float(value)), None
    if kind == "bool":
        if type(value) is not bool:
            return None, f"must be true or false, got {value!r}"
        return value, None
    if kind == "basis":
        if value not in BASES:
            return None, f"must be one of {', '.join(BASES)}; got {value!r}"
        return value, None
    if kind == "partitions":
        if type(value) is not list or not all(type(v) is str and v.strip() for v in value):
            return None, f"must be a list of partition names, got {value!r}"
        return sorted(set(value)), None
    raise AssertionError(kind)


def colour_problem(value) -> str | None:
    """None for a "#RRGGBB" string, else the problem (naming the value)."""
    if type(value) is str and re.fullmatch(r"#[0-9A-Fa-f]{6}", value):
        return None
    return f"must be {COLOUR_RULE}, got {value!r}"


def _parse_prices(doc, problems: list[str]) -> Prices:
    """The [prices] table (absent: no prices), appending every problem to `problems`."""
    if doc is None:
        return {"currency": None, "per_gpu_hour": {}}
    if type(doc) is not dict:
        problems.append(f"[prices] must be a table, got {doc!r}")
        return {"currency": None, "per_gpu_hour": {}}
    for key in doc:
        if key not in PRICE_KEYS:
            problems.append(f"[prices] {key}: unknown key (known: {', '.join(PRICE_KEYS)}), "
                            f"value {doc[key]!r}")
    per_hour = {}
    for capacity in CAPACITIES:
        if capacity in doc:
            problem = _number_problem(doc[capacity])
            if problem:
                problems.append(f"[prices] {capacity}: price per GPU-hour {problem}")
            else:
                per_hour[capacity] = float(doc[capacity])
    currency = doc.get("currency")
    if currency is not None and not (type(currency) is str and re.fullmatch(r"[A-Z]{3}", currency)):
        problems.append(f"[prices] currency: must be {CURRENCY_RULE}, got {currency!r}")
        currency = None
    elif currency is None and any(c in doc for c in CAPACITIES):
        problems.append(f"[prices] currency: required when a price is set ({CURRENCY_RULE})")
    return {"currency": currency, "per_gpu_hour": per_hour}


def policy_version(policy: dict) -> str:
    """A short, stable hash of a team's normalized policy (policy_version itself excluded; a LATER_KEYS
    key only when set away from its default)."""
    body = {k: policy[k] for k in ("team", *POLICY_FIELDS)
            if k not in LATER_KEYS or policy.get(k, LATER_KEYS[k]) != LATER_KEYS[k]}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _as_timestamp(value):
    if value is None:
        return None, None
    if isinstance(value, datetime):
        try:
            return naive_utc(value), None
        except OverflowError:   # an offset that moves year 1 or 9999 off the calendar
            return None, f"must be a date-time the calendar holds in UTC, got {value.isoformat()}"
    if isinstance(value, date):
        return datetime(value.year, value.month, value.day), None
    if isinstance(value, str):
        try:
            return _as_timestamp(datetime.fromisoformat(value.replace("Z", "+00:00")))
        except ValueError:
            pass
    return None, f"must be a TOML date-time (e.g. 2025-01-31T00:00:00), got {value!r}"


def parse_teams(text: str, path="teams.toml") -> tuple[list[dict], list[dict]]:
    """(teams, snapshots) from the TOML text; raises TeamsFileError listing every problem."""
    parsed = parse_teams_file(text, path)
    return parsed["teams"], parsed["snapshots"]


def parse_teams_file(text: str, path="teams.toml") -> TeamsFile:
    """Teams, snapshots and prices from the TOML text; raises TeamsFileError listing every problem."""
    try:
        doc = tomllib.loads(text)
    except ValueError as exc:  # TOMLDecodeError, or an integer of more digits than Python converts
        raise TeamsFileError(path, [f"not valid TOML: {str(exc).split('; use sys.')[0]}"]) from None
    except RecursionError:   # tomllib reads nested arrays and inline tables by recursion
        raise TeamsFileError(path, [f"not valid TOML: {TOO_DEEP}"]) from None
    problems: list[str] = []
    # [authority] names the shared authority (lib.authority.settings reads and checks it); [pools] the
    # cluster's physical accelerators
    known_top = ("defaults", "teams", "snapshots", "prices", "alerts", "authority", "pools")
    for key in sorted(set(doc) - set(known_top)):
        problems.append(f"top level: unknown key {key!r} (known: {', '.join(known_top)})")

    defaults = doc.get("defaults", {})
    if type(defaults) is not dict:
        problems.append("[defaults] must be a table")
        defaults = {}
    merged_defaults = {k: d for k, (_, d) in POLICY_FIELDS.items() if d is not None}
    for key, value in defaults.items():
        if key not in POLICY_FIELDS:
            problems.append(f"[defaults] {key}: unknown key (known: {', '.join(POLICY_FIELDS)})")
            continue
        norm, err = _check_value(POLICY_FIELDS[key][0], value)
        if err:
            problems.append(f"[defaults] {key}: {err}")
        else:
            merged_defaults[key] = norm

    teams_doc = doc.get("teams", {})
    if type(teams_doc) is not dict or not teams_doc:
        problems.append("[teams]: at least one [teams.NAME] table is required")
        teams_doc = {} if type(teams_doc) is not dict else teams_doc
    teams: list[dict] = []
    for name, table in teams_doc.items():
        where = f"[teams.{name}]"
        if team_name_problem(name):
            problems.append(f"[teams.{name[:100]!r}]: team name {name[:100]!r} is not valid: "
                            f"{TEAM_NAME_RULE}")
        if type(table) is not dict:
            problems.append(f"{where}: must be a table")
            continue
        policy = {"team": name, COLOUR_KEY: None}
        ok = True
        for key in table:
            if key not in POLICY_FIELDS and key != COLOUR_KEY:
                problems.append(f"{where} {key}: unknown key (known: {', '.join(POLICY_FIELDS)}, "
                                f"{COLOUR_KEY})")
                ok = False
        if COLOUR_KEY in table:
            problem = colour_problem(table[COLOUR_KEY])
            if problem:
                problems.append(f"{where} {COLOUR_KEY}: {problem}")
                ok = False
            else:
                policy[COLOUR_KEY] = table[COLOUR_KEY].lower()
        for key, (kind, _) in POLICY_FIELDS.items():
            if key in table:
                norm, err = _check_value(kind, table[key])
                if err:
                    problems.append(f"{where} {key}: {err}")
                    ok = False
                    continue
                policy[key] = norm
            elif key in merged_defaults:
                policy[key] = merged_defaults[key]
            else:
                problems.append(f"{where} {key}: required (set it here or in [defaults])")
                ok = False
        if ok and policy["queue_max_age_days"] < 1:
            problems.append(f"{where} queue_max_age_days: must be at least 1 day, got {policy['queue_max_age_days']}")
            ok = False
        if ok and policy["retraining_reserved_gpus"] > policy["reserved_gpus"]:
            problems.append(
                f"{where} retraining_reserved_gpus: {policy['retraining_reserved_gpus']} is more than "
                f"reserved_gpus {policy['reserved_gpus']}")
            ok = False
        if ok:
            policy["policy_version"] = policy_version(policy)
            teams.append(policy)

    snaps_doc = doc.get("snapshots", [])
    snapshots: list[dict] = []
    if type(snaps_doc) is not list:
        problems.append("snapshots: must be a list of tables ([[snapshots]])")
        snaps_doc = []
    seen: set[str] = set()
    for i, s in enumerate(snaps_doc, start=1):
        where = f"[[snapshots]] #{i}"
        if type(s) is not dict:
            problems.append(f"{where}: must be a table")
            continue
        for key in s:
            if key not in ("snapshot", "team", "created_at"):
                problems.append(f"{where} {key}: unknown key (known: snapshot, team, created_at)")
        name = s.get("snapshot")
        if type(name) is not str or not name.strip():
            problems.append(f"{where} snapshot: required, a non-empty string")
            continue
        where = f"[[snapshots]] {name!r}"
        if name in seen:
            problems.append(f"{where}: listed twice")
        seen.add(name)
        team = s.get("team")
        if team is not None and team not in teams_doc:
            problems.append(f"{where} team: {team!r} is not a team in this file")
        created, err = _as_timestamp(s.get("created_at"))
        if err:
            problems.append(f"{where} created_at: {err}")
        snapshots.append({"snapshot": name, "team": team, "created_at": created})
    prices = _parse_prices(doc.get("prices"), problems)
    alerts = parse_alerts(doc.get("alerts"), set(teams_doc), problems)
    pools = parse_pools(doc.get("pools"), text, problems)
    if problems:
        raise TeamsFileError(path, problems)
    return {"teams": teams, "snapshots": snapshots, "prices": prices, "alerts": alerts, "pools": pools}


def load_teams(path=None) -> tuple[list[dict], list[dict]]:
    """(teams, snapshots) of the teams file (default data/teams.toml), validated."""
    parsed = load_teams_file(path)
    return parsed["teams"], parsed["snapshots"]


def load_teams_file(path=None) -> TeamsFile:
    """Read (read_teams_text) and validate the whole teams file (default data/teams.toml)."""
    p = Path(path) if path else DEFAULT_TEAMS_FILE
    return parse_teams_file(read_teams_text(p), p)


def read_teams_text(path=None) -> str:
    """The teams file's text (default data/teams.toml): a regular file (a FIFO, a directory or a device
    is refused before reading) in UTF-8; TeamsFileError otherwise."""
    p = Path(path) if path else DEFAULT_TEAMS_FILE
    try:
        with open_regular(p) as f:
            return f.read().decode("utf-8-sig")
    except FileNotFoundError:
        raise TeamsFileError(p, ["file not found"]) from None
    except NotRegularFile as exc:
        raise TeamsFileError(p, [exc.strerror]) from None
    except OSError as exc:
        raise TeamsFileError(p, [f"cannot read: {exc.strerror or exc}"]) from None
    except UnicodeDecodeError as exc:
        raise TeamsFileError(p, [f"not UTF-8: {exc}"]) from None


def sync_teams(con, path=None, *, who=None, progress=None) -> dict:
    """Upsert the file's teams and snapshots into the ledger, and replace its prices with the
    file's, and its pools (those the file set before, source POOLS_SOURCE), in one transaction (a file
    that does not validate changes nothing). With `who`
    (lib.ledger.audit.Who), the load is recorded in the audit in that transaction: action "teams",
    the teams inserted / updated / unchanged.

    Teams or snapshots that are in the ledger but not in the file (e.g. created by an import) are
    left alone; a price the file no longer sets is removed. Returns counts: teams_inserted,
    teams_updated (policy or colour changed), teams_unchanged, snapshots_inserted,
    snapshots_updated, snapshots_unchanged, prices (capacity types priced), pools (pools set) and
    warnings (`pool_warnings`). `progress(fraction, message)` (lib.cli.output.ProgressBar), when
    given, hears how far the writes are (a file of thousands of teams takes tens of seconds).
    """
    parsed = load_teams_file(path)
    teams, snapshots, prices = parsed["teams"], parsed["snapshots"], parsed["prices"]
    pools = parsed["pools"]
    counts = dict.fromkeys(("teams_inserted", "teams_updated", "teams_unchanged",
                            "snapshots_inserted", "snapshots_updated", "snapshots_unchanged"), 0)
    with transaction(con):
        existing = {r[0]: (r[1], r[2]) for r in
                    con.execute(f"SELECT team, policy_version, {COLOUR_KEY} FROM teams").fetchall()}
        placeholders = ", ".join("?" for _ in COLUMNS)
        updates = ", ".join(f"{c} = excluded.{c}" for c in COLUMNS if c != "team")
        total = len(teams) + len(snapshots)
        for done, t in enumerate(teams):
            if progress is not None:
                progress(done / max(total, 1), f"team {done + 1:,} of {len(teams):,}")
            if t["team"] not in existing:
                counts["teams_inserted"] += 1
            elif existing[t["team"]] != (t["policy_version"], t[COLOUR_KEY]):
                counts["teams_updated"] += 1
            else:
                counts["teams_unchanged"] += 1
                continue
            con.execute(
                f"INSERT INTO teams ({', '.join(COLUMNS)}) VALUES ({placeholders}) "
                f"ON CONFLICT (team) DO UPDATE SET {updates}",
                [t[c] for c in COLUMNS])
        have = {r[0]: (r[1], r[2]) for r in
                con.execute("SELECT snapshot, team, created_at FROM snapshots").fetchall()}
        for done, s in enumerate(snapshots, len(teams)):
            if progress is not None:
                progress(done / max(total, 1), f"snapshot {done - len(teams) + 1:,} of {len(snapshots):,}")
            old = have.get(s["snapshot"])
            if old is None:
                counts["snapshots_inserted"] += 1
            elif old == (s["team"], s["created_at"]):
                counts["snapshots_unchanged"] += 1
                continue
            else:
                counts["snapshots_updated"] += 1
            con.execute(
                "INSERT INTO snapshots (snapshot, team, created_at) VALUES (?, ?, ?) "
                "ON CONFLICT (snapshot) DO UPDATE SET team = excluded.team, created_at = excluded.created_at",
                [s["snapshot"], s["team"], s["created_at"]])
        con.execute("DELETE FROM prices")
        for capacity, price in prices["per_gpu_hour"].items():
            con.execute("INSERT INTO prices (capacity, price_per_gpu_hour, currency) VALUES (?, ?, ?)",
                        [capacity, price, prices["currency"]])
        con.execute(f"DELETE FROM pools WHERE source = '{POOLS_SOURCE}'")
        for name, gpus in pools.items():
            con.execute("INSERT INTO pools (pool, gpus, source) VALUES (?, ?, ?) ON CONFLICT (pool) DO UPDATE "
                        "SET gpus = excluded.gpus, source = excluded.source", [name, gpus, POOLS_SOURCE])
        if who is not None:
            record(con, who, "teams", fmt="toml", inserted=counts["teams_inserted"],
                   updated=counts["teams_updated"], unchanged=counts["teams_unchanged"],
                   detail=f"snapshots inserted {counts['snapshots_inserted']}, updated "
                          f"{counts['snapshots_updated']}, unchanged {counts['snapshots_unchanged']}")
    if progress is not None:
        progress(1.0, f"{len(teams):,} teams and {len(snapshots):,} snapshots written")
    counts["prices"] = len(prices["per_gpu_hour"])
    counts["pools"] = len(pools)
    counts["warnings"] = pool_warnings(teams, pools)
    return counts
