"""The `[pools.<capacity type>]` tables of data/teams.toml (lib.ledger.teams_file): `gpus`, the accelerators
the cluster has of that type, which every team's reservations of that type share (lib.gate.capacity:
`cluster-capacity`). Every problem names its line in the file; what is allowed but worth saying (a pool
smaller than a quota, the overcommit) is a warning.
"""
from __future__ import annotations

from lib.gate.terms import CAPACITIES, INT_MAX, number_problem

POOL_KEYS = ("gpus",)


def _whole_number_problem(value) -> str | None:
    if type(value) is int and value > INT_MAX:
        return f"must be at most {INT_MAX} (the ledger's largest whole number), got {value}"
    return number_problem(value, integral=True)


def _line_of(text: str, table: str, key: str | None = None) -> int | None:
    """The line (1-based) of `key` in the TOML table `table` (a header such as `pools.stable`), or of the
    table's header when no key is given; a dotted key (`stable.gpus = 8` under [pools], or
    `pools.stable.gpus` at the top) is found too. None when not found (e.g. an inline table)."""
    parts = table.split(".")
    current: list[str] = []
    for n, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if line.startswith("["):
            current = [p.strip().strip('"') for p in line.strip("[]").split(".")]
            if key is None and current == parts:
                return n
            continue
        if key is None or "=" not in line:
            continue
        lhs = [p.strip().strip('"') for p in line.split("=", 1)[0].split(".")]
        if current + lhs == parts + [key]:
            return n
    return None


def parse_pools(doc, text: str, problems: list[str]) -> dict[str, int]:
    """The [pools.<capacity type>] tables (absent: no pools), appending every problem, each with its line."""
    if doc is None:
        return {}

    def at(table: str, key: str | None = None) -> str:
        line = _line_of(text, table, key) or _line_of(text, table)
        return f"line {line}: " if line else ""
    if type(doc) is not dict:
        problems.append(f"{at('pools')}[pools] must hold one table per capacity type ([pools.stable] gpus = N), "
                        f"got {doc!r}")
        return {}
    pools = {}
    for name, table in doc.items():
        where = f"pools.{name}"
        if name not in CAPACITIES:
            problems.append(f"{at(where)}[{where}]: unknown capacity type {name!r} (known: {', '.join(CAPACITIES)})")
            continue
        if type(table) is not dict:
            problems.append(f"{at('pools', name)}[{where}] must be a table with gpus = N, got {table!r}")
            continue
        for key in table:
            if key not in POOL_KEYS:
                problems.append(f"{at(where, key)}[{where}] {key}: unknown key (known: {', '.join(POOL_KEYS)}), "
                                f"value {table[key]!r}")
        if "gpus" not in table:
            problems.append(f"{at(where)}[{where}] gpus: required (the accelerators the cluster has of this type)")
            continue
        problem = _whole_number_problem(table["gpus"])
        if problem:
            problems.append(f"{at(where, 'gpus')}[{where}] gpus: {problem}")
            continue
        pools[name] = int(table["gpus"])
    return pools


def pool_warnings(teams: list[dict], pools: dict[str, int]) -> list[str]:
    """What is allowed but worth saying about the pools: a pool smaller than one team's quota (that
    team can never use its whole quota of that type), and each pool's overcommit (the sum of the
    quotas over the pool)."""
    out = []
    quotas = sum(t["reserved_gpus"] for t in teams)
    for name, gpus in sorted(pools.items()):
        small = sorted(t["team"] for t in teams if t["reserved_gpus"] > gpus)
        if small:
            out.append(f"[pools.{name}] gpus = {gpus} is smaller than the quota of "
                       + ", ".join(small) + ": those teams can never hold their whole quota of this type")
        if gpus and quotas > gpus:
            out.append(f"[pools.{name}]: the teams' quotas add up to {quotas} GPUs, {quotas / gpus:.2f}× the "
                       f"{gpus} of the pool (requests within a quota can find no accelerators: cluster-capacity)")
        elif not gpus:
            out.append(f"[pools.{name}] gpus = 0: no request of this type can be admitted")
    return out
