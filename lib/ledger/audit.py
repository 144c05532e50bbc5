"""The audit of who wrote: one row per write that is not a decision (an import, a policy export, a
`teams` load, a run finished, a demo build, a change in the cluster's reservations, a waiting request
cancelled or a cancel refused) in the ledger's
`audit` table, written inside the same transaction as the write it records. Decisions carry their
own `actor` column.

One actor format everywhere: the signed-in identity (e-mail) in the dashboard, "local" for the
dashboard in local mode, and for an OS user (the command line, a Slurm job's submitter, a gate
server's caller) `os_actor`: "NAME (uid N)". origin: "app", "cli", or "slurm" (the gate server's own
writes: the cluster's reservations it syncs).
"""
from __future__ import annotations

import getpass
import os
from typing import TypedDict

from lib.gate.terms import utcnow
from lib.ledger.connection import open_ledger, transaction

AUDITED_ACTIONS = ("import", "policy-export", "teams", "finish", "demo", "recover", "checkpoint", "alert",
           "cluster-windows", "cancel")
AUDITED_ORIGINS = ("app", "cli", "slurm")


class Who(TypedDict):
    """Who is writing, and from where: `actor` (identity) and `origin` ("app" | "cli"), and the name
    of the file the write came from or went to (as its user named it; None when there is none)."""
    actor: str
    origin: str
    file_name: str | None


def os_user(uid: int | None = None) -> str:
    """The OS login name of `uid` (default: this process's user, what the command line records as the
    actor; a server passes its caller's peer uid). A uid with no passwd entry is its number as text."""
    try:
        import pwd  # Unix only: elsewhere the ImportError below falls back to getpass
        return pwd.getpwuid(os.getuid() if uid is None else uid).pw_name
    except ImportError:
        return getpass.getuser() if uid is None else str(uid)
    except KeyError:
        return str(os.getuid() if uid is None else uid)


def unix_groups(user: str) -> list[str]:
    """The names of the Unix groups `user` belongs to (primary and supplementary); [] for an unknown user."""
    try:  # grp and pwd are Unix only: elsewhere the ImportError below means no groups
        import grp
        import pwd
        gids = os.getgrouplist(user, pwd.getpwnam(user).pw_gid)
    except (ImportError, KeyError, OSError):
        return []
    names = []
    for gid in gids:
        try:
            names.append(grp.getgrgid(gid).gr_name)
        except KeyError:
            continue
    return sorted(set(names))


def os_actor(uid: int | None = None, name: str | None = None) -> str:
    """The actor an OS user is recorded as: "NAME (uid N)" (this process's user by default). `name`:
    the login name as a scheduler reported it (a Slurm job's user); without it, looked up from `uid`."""
    uid = os.getuid() if uid is None else uid
    name = name if name else os_user(uid)
    return f"{name} (uid {uid})" if name != str(uid) else f"uid {uid}"


def command_line(file_name: str | None = None) -> Who:
    """The command line's Who: the OS user (`os_actor`)."""
    return {"actor": os_actor(), "origin": "cli", "file_name": file_name}


def record(con, who: Who, action: str, *, fmt: str | None = None, inserted: int | None = None,
           updated: int | None = None, unchanged: int | None = None, detail: str | None = None) -> None:
    """Append one audit row on `con` (inside the caller's transaction): now (UTC), who, what."""
    if action not in AUDITED_ACTIONS:
        raise ValueError(f"unknown audit action {action!r} (known: {', '.join(AUDITED_ACTIONS)})")
    if who["origin"] not in AUDITED_ORIGINS:
        raise ValueError(f"unknown origin {who['origin']!r} (known: {', '.join(AUDITED_ORIGINS)})")
    con.execute("INSERT INTO audit (written_at, actor, origin, action, file_name, format, rows_inserted, "
                "rows_updated, rows_unchanged, detail) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [utcnow(), who["actor"], who["origin"], action, who["file_name"], fmt, inserted, updated,
                 unchanged, detail]).fetchall()


def record_export(db, who: Who, *, detail: str | None = None, timeout_s: float | None = None) -> None:
    """Record a policy export (a proposed teams.toml downloaded from the dashboard) in its own write."""
    with open_ledger(db, timeout_s=timeout_s) as con, transaction(con):
        record(con, who, "policy-export", fmt="toml", detail=detail)
