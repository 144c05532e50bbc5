"""The connection to the shared authority (PostgreSQL, through psycopg 3) and its schema: `connect`,
`init_schema`, `status`. Every error leaves here with the URL's password redacted.

Errors: `AuthorityURLError` (a malformed URL, an sslmode libpq does not know),
`AuthorityDatabaseMissing` (a server without the database named) and `AuthoritySchemaError` (a
database without the schema, or with a newer one) are the operator's input to fix: exit 2 on the
command line and at a gate server's start.
`AuthorityUnavailable` (the server cannot be reached, or broke off) is a gate failure: exit 3, and
the deciders refuse (lib.authority.offline says what else they may do).
"""
from __future__ import annotations

import re
from pathlib import Path

from lib.authority.url import AuthoritySettingError, check_url, parameters, redact, shown_authority
from lib.gate.terms import InputError, month_start, next_month_start
from lib.ledger.connection import LedgerError

AUTHORITY_SCHEMA_VERSION = 1
_NO_DATABASE = re.compile(r'FATAL:\s+database "[^"]*" does not exist')   # libpq's words (3D000)
SCHEMA_SQL = Path(__file__).with_name("schema.sql")
CONNECT_TIMEOUT_S = 5      # libpq's connect_timeout when the URL sets none
LOCK_TIMEOUT_MS = 30_000   # the longest a decider waits for another's team lock
STATEMENT_TIMEOUT_MS = LOCK_TIMEOUT_MS + 10_000   # the longest PostgreSQL lets one statement run
# a TCP connection whose peer stops answering is dropped: after 10 s unacknowledged (tcp_user_timeout,
# ms), and an idle one is probed after 10 s, every 5 s, given up after 3 probes (keepalives)
TCP_BOUNDS = {"keepalives": 1, "keepalives_idle": 10, "keepalives_interval": 5, "keepalives_count": 3,
              "tcp_user_timeout": 10_000}


class AuthorityUnavailable(LedgerError):
    """The authority cannot be reached or broke off mid-way: nothing was decided against it."""


class AuthorityDatabaseMissing(AuthoritySettingError):
    """The server answers, but the database the URL names does not exist there (exit 2: fix the URL, or
    create the database)."""


class AuthoritySchemaError(InputError):
    """The authority's database has no Training Gate schema, or a newer one than this program's."""


def connect(url: str, *, cluster: str = "", check_schema: bool = True, connect_timeout_s: int | None = None,
            statement_timeout_ms: int = STATEMENT_TIMEOUT_MS):
    """An autocommit psycopg connection to the authority (transactions are explicit), its schema
    version checked. Every round trip is bounded: connect_timeout (`connect_timeout_s`, else the
    URL's, else CONNECT_TIMEOUT_S; libpq's least is 2 s), TCP_BOUNDS where the URL sets none, and
    `statement_timeout_ms` (lock waits: LOCK_TIMEOUT_MS at most). A stopped server answers none of
    them: lib.authority.deadline bounds that. Raises AuthoritySettingError (AuthorityURLError,
    AuthorityDatabaseMissing), AuthoritySchemaError or
    AuthorityUnavailable."""
    url = check_url(url)
    # here: psycopg costs a few hundred ms to import, and only a gate that names an authority needs it
    import psycopg
    params = parameters(url)
    extra = {"application_name": f"training-gate {cluster}".strip()}
    if connect_timeout_s is not None:
        extra["connect_timeout"] = max(2, int(connect_timeout_s))
    elif "connect_timeout" not in params:
        extra["connect_timeout"] = CONNECT_TIMEOUT_S
    host = params.get("host") or params.get("hostaddr") or ""
    if host and not host.startswith("/"):   # TCP: they mean nothing on a Unix socket
        extra.update({k: v for k, v in TCP_BOUNDS.items() if k not in params})
    try:
        con = psycopg.connect(url, autocommit=True, **extra)
    except psycopg.Error as exc:
        if getattr(exc, "sqlstate", None) == "3D000" or _NO_DATABASE.search(str(exc)):
            raise AuthorityDatabaseMissing(
                f"the authority {shown_authority(url)} names database {params.get('dbname')!r}, which does not exist "
                "on that server: correct the URL, or create the database (createdb) and then run "
                "`python -m lib authority init`") from None
        raise AuthorityUnavailable(f"the authority {shown_authority(url)} cannot be reached: {_text(exc, url)}") from None
    try:
        con.execute(f"SET lock_timeout = {min(LOCK_TIMEOUT_MS, int(statement_timeout_ms))}")
        con.execute(f"SET statement_timeout = {int(statement_timeout_ms)}")
        if check_schema:
            check_version(con, url)
    except BaseException:
        con.close()
        raise
    return con


def _text(exc: Exception, url: str) -> str:
    return redact(" ".join(str(exc).split()), url) or type(exc).__name__


def schema_version(con) -> int | None:
    """The schema version the database holds; None when it has no Training Gate schema."""
    row = con.execute("SELECT to_regclass('training_gate.meta') IS NOT NULL").fetchone()
    if not row[0]:
        return None
    row = con.execute("SELECT value FROM training_gate.meta WHERE key = 'schema_version'").fetchone()
    return int(row[0]) if row else None


def check_version(con, url: str) -> int:
    """The schema version, when this program can use it; AuthoritySchemaError otherwise."""
    import psycopg  # here: see connect
    try:
        version = schema_version(con)
    except psycopg.Error as exc:
        raise AuthorityUnavailable(f"the authority {shown_authority(url)}: {_text(exc, url)}") from None
    if version is None:
        raise AuthoritySchemaError(f"the authority {shown_authority(url)} has no Training Gate schema: create it with "
                                   "`python -m lib authority init` (as a role that may create schemas)")
    if version > AUTHORITY_SCHEMA_VERSION:
        raise AuthoritySchemaError(f"the authority {shown_authority(url)} has schema version {version}, newer than this "
                                   f"program's {AUTHORITY_SCHEMA_VERSION}: upgrade Training Gate on this cluster")
    return version


def init_schema(url: str, teams: list[dict], now) -> dict:
    """Create the schema when missing (idempotent; refused for a newer one) and load the teams'
    policies (a changed policy moves its team's version on). Returns counts."""
    from psycopg.types.json import Jsonb  # here: see connect
    con = connect(url, check_schema=False)
    try:
        with con.transaction():
            version = schema_version(con)
            if version is not None and version > AUTHORITY_SCHEMA_VERSION:
                raise AuthoritySchemaError(f"the authority {shown_authority(url)} has schema version {version}, newer "
                                           f"than this program's {AUTHORITY_SCHEMA_VERSION}: nothing changed")
            con.execute(SCHEMA_SQL.read_text(encoding="utf-8"))
            counts = {"created": version is None, "teams_inserted": 0, "teams_updated": 0, "teams_unchanged": 0}
            old = {r[0]: r[1] for r in con.execute(
                "SELECT team, policy->>'policy_version' FROM training_gate.teams").fetchall()}
            for policy in teams:
                team = policy["team"]
                if old.get(team) == policy["policy_version"]:
                    counts["teams_unchanged"] += 1
                    continue
                counts["teams_inserted" if team not in old else "teams_updated"] += 1
                con.execute("INSERT INTO training_gate.teams (team, policy, updated_at) VALUES (%s, %s, %s) "
                            "ON CONFLICT (team) DO UPDATE SET policy = excluded.policy, "
                            "version = training_gate.teams.version + 1, updated_at = excluded.updated_at",
                            [team, Jsonb(policy_json(policy)), now])
    except Exception as exc:
        if isinstance(exc, (AuthoritySchemaError, AuthorityUnavailable, AuthoritySettingError)):
            raise
        raise AuthorityUnavailable(f"the authority {shown_authority(url)}: {_text(exc, url)}") from None
    finally:
        con.close()
    return counts


def policy_json(policy: dict) -> dict:
    """A teams-file policy as the authority keeps it (team, the policy fields, policy_version)."""
    return {k: (list(v) if isinstance(v, (list, tuple)) else v) for k, v in policy.items() if k != "colour"}


def status(url: str, now, *, policies: bool = False) -> dict:
    """What the authority holds now: schema version, and per team its policy version (with
    `policies`, the policy itself), the GPUs and GPU-hours held (by cluster) and this month's spend."""
    con = connect(url)
    try:
        version = schema_version(con)
        teams = {r[0]: {"policy_version": r[1], "version": r[2], "held_gpus": 0, "held_gpu_hours": 0.0,
                        "clusters": {}, "month_spent_gpu_hours": 0.0, **({"policy": r[3]} if policies else {})}
                 for r in con.execute("SELECT team, policy->>'policy_version', version, policy "
                                      "FROM training_gate.teams ORDER BY team").fetchall()}
        for team, cluster, n, gpus, hours in con.execute(
                "SELECT team, cluster, count(*), sum(gpus), sum(reserved_gpu_hours) FROM training_gate.holds "
                "WHERE released_at IS NULL AND (reserved_until IS NULL OR reserved_until > %s OR reserved_from <= %s) "
                "GROUP BY team, cluster ORDER BY team, cluster", [now, now]).fetchall():
            t = teams.setdefault(team, {"policy_version": None, "version": None, "held_gpus": 0,
                                        "held_gpu_hours": 0.0, "clusters": {}, "month_spent_gpu_hours": 0.0})
            t["held_gpus"] += int(gpus)
            t["held_gpu_hours"] += float(hours)
            t["clusters"][cluster] = {"holds": int(n), "gpus": int(gpus), "gpu_hours": float(hours)}
        for team, spent in con.execute(
                "SELECT team, sum(gpu_hours) FROM training_gate.spend WHERE ended_at >= %s AND ended_at < %s "
                "GROUP BY team", [month_start(now), next_month_start(now)]).fetchall():
            if team in teams:
                teams[team]["month_spent_gpu_hours"] = float(spent)
    finally:
        con.close()
    return {"authority": shown_authority(url), "schema_version": version, "teams": teams}
