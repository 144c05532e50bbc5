"""Which authority a cluster decides against, if any: `configured_authority()`.

`$GATE_AUTHORITY` (a postgresql:// URL or libpq key=value pairs) and `$GATE_CLUSTER` (this cluster's name), else the
`[authority]` table of the teams file (`url`, `cluster`; the environment wins key by key). Neither
set: None, and every decider uses its embedded ledger alone, as without this package.
"""
from __future__ import annotations

import os
import tomllib

from lib.authority.url import AuthoritySettingError, check_cluster, check_url
from lib.gate.terms import TOO_DEEP
from lib.ledger.teams_file import DEFAULT_TEAMS_FILE

KEYS = ("url", "cluster", "offline_share")
SYNC_GRACE_S = 600.0   # `authority sync` releases a hold the ledger lacks only once it is this old


def file_settings(path=None) -> dict:
    """The `[authority]` table of the teams file ({} when there is none, or no file)."""
    p = path or DEFAULT_TEAMS_FILE
    try:
        with open(p, "rb") as f:
            doc = tomllib.load(f)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise AuthoritySettingError(f"{p}: cannot read its [authority] table: {exc}") from None
    except RecursionError:   # tomllib reads nested arrays and inline tables by recursion
        raise AuthoritySettingError(f"{p}: cannot read its [authority] table: {TOO_DEEP}") from None
    table = doc.get("authority", {})
    if type(table) is not dict:
        raise AuthoritySettingError(f"{p}: authority must be a table ([authority])")
    for key in table:
        if key not in KEYS:
            raise AuthoritySettingError(f"{p}: [authority] {key}: unknown key (known: {', '.join(KEYS)})")
    return table


def authority_settings(env=None, teams_file=None) -> dict:
    """{url, cluster, offline_share} from the environment, else the teams file; url None when none is named."""
    env = os.environ if env is None else env
    table = file_settings(teams_file) if not env.get("GATE_AUTHORITY") or not env.get("GATE_CLUSTER") else {}
    share = env.get("GATE_AUTHORITY_OFFLINE_SHARE", table.get("offline_share"))
    return {"url": env.get("GATE_AUTHORITY") or table.get("url") or None,
            "cluster": env.get("GATE_CLUSTER") or table.get("cluster"),
            "offline_share": offline_share(share)}


def offline_share(value) -> float | None:
    """The share (0 < s ≤ 1) of a team's quota and month budget this cluster may admit alone while the
    authority cannot be reached; None (the default) refuses instead."""
    if value is None or value == "" or value == "refuse":
        return None
    try:
        share = float(value)
    except (TypeError, ValueError):
        share = float("nan")
    if not 0 < share <= 1:
        raise AuthoritySettingError(f"GATE_AUTHORITY_OFFLINE_SHARE must be a number in (0, 1] or 'refuse', "
                                    f"got {value!r}")
    return share


def configured_authority(env=None, teams_file=None):
    """The lib.authority.facts.Authority this cluster names, or None. Raises AuthoritySettingError
    (exit 2) for a malformed URL or a missing cluster name; connects only when first used."""
    s = authority_settings(env, teams_file)
    if s["url"] is None:
        return None
    if not s["cluster"]:
        raise AuthoritySettingError("GATE_AUTHORITY is set but GATE_CLUSTER is not: name this cluster "
                                    "(each cluster's holds and decisions carry its name)")
    check_url(s["url"])
    check_cluster(s["cluster"])
    # here: deciding brings numpy (calibration), which a command line without an authority never needs
    from lib.authority.facts import Authority
    return Authority(s["url"], s["cluster"], offline_share=s["offline_share"])
