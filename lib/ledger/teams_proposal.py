"""A proposed team policy as a teams file (data/teams.toml), for the Policy replay page's downloads.

`proposal_text` edits the current file's text through tomlkit's round trip: only the keys a proposal
changes are written, and everything else (comments, `[defaults]`, order, layout, integers) stays as
the planners wrote it; a key the team inherits is added to that team's own table. `propose` applies
a planner's edits to the ledger's policies, validated by the teams-file rules. `proposal_file` is the
download: the file edited when it holds the policies the ledger has (what the replay compared
against), else the whole proposal written from the ledger (`teams_text`), and why.
"""
from __future__ import annotations

import math
from pathlib import Path

import tomlkit
from tomlkit.items import Float, Table

from lib.ledger.teams_file import (COLOUR_KEY, DEFAULT_TEAMS_FILE, POLICY_FIELDS, TeamsFileError, parse_teams_file,
                                   read_teams_text)

PROPOSAL = "proposed policy"   # the name the proposal's problems are reported under


def _number(value, old=None):
    """`value` as the teams file writes it: a float that is a whole number as an integer, unless the
    key it replaces (`old`) was written as a float."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer() and not isinstance(old, Float):
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool) and isinstance(old, Float):
        return float(value)
    return value


def proposal_text(edits: dict[str, dict], text: str | None = None) -> str:
    """The teams file `text` (default: data/teams.toml's) with `edits` (team -> {policy field or
    colour: new value}) written into each team's `[teams.NAME]` table: a key the table has is changed
    in place (its comment kept), a key it inherits from `[defaults]` (or the built-in default) is
    added after the table's last key. An edit that gives a team the value it already has changes
    nothing. Every other line is left as it is. Raises TeamsFileError listing every problem: of the
    file as it is, a team it has no table for, or of the proposal (an unknown key, a value out of
    range)."""
    text = read_teams_text() if text is None else text
    current = {t["team"]: t for t in parse_teams_file(text)["teams"]}
    missing = sorted(set(edits) - set(current))
    if missing:
        raise TeamsFileError(PROPOSAL, [f"[teams.{t}]: not in the teams file, so the proposal cannot edit it"
                                        for t in missing])
    doc = tomlkit.parse(text)
    for team, changes in edits.items():
        table = doc["teams"][team]
        for key, value in changes.items():
            if key in current[team] and value == current[team][key]:
                continue
            if key in table:
                table[key] = _number(value, table[key])
            else:
                _add(table, key, _number(value))
    out = tomlkit.dumps(doc)
    parse_teams_file(out, PROPOSAL)
    return out


def _add(table, key: str, value) -> None:
    """`key = value` added to a team's table after its last key, before the blank lines and comments
    that end it (those belong to what follows, e.g. the next section's comment)."""
    body = table.value.body if isinstance(table, Table) else []   # an inline table ends at its last key
    keyed = [i for i, (k, _) in enumerate(body) if k is not None]
    if keyed and keyed[-1] < len(body) - 1:
        # tomlkit's public add would append after those comments
        table.value._insert_at(keyed[-1] + 1, key, value)
    else:
        table[key] = value


def teams_text(teams: list[dict], snapshots=(), prices: dict | None = None) -> str:
    """A whole teams file for these team policies (every policy field written out, and a team's colour
    when it has one), snapshots and prices, through tomlkit; lib.ledger.teams_file.parse_teams reads
    it back as the same policies and versions. For a proposal whose base is not the teams file."""
    doc = tomlkit.document()
    doc.add(tomlkit.comment("Team policy for Training Gate (python -m lib teams --file THIS_FILE)."))
    doc.add(tomlkit.nl())
    all_teams = tomlkit.table(is_super_table=True)
    for t in teams:
        table = tomlkit.table()
        for key in POLICY_FIELDS:
            table.add(key, _number(t[key]))
        if t.get(COLOUR_KEY):
            table.add(COLOUR_KEY, t[COLOUR_KEY])
        all_teams.add(t["team"], table)
    doc.add("teams", all_teams)
    if snapshots:
        doc.add(tomlkit.nl())
        doc.add("snapshots", tomlkit.aot())
        for s in snapshots:
            doc["snapshots"].append({k: s[k] for k in ("snapshot", "team", "created_at") if s.get(k) is not None})
    if prices and prices.get("per_gpu_hour"):
        doc.add(tomlkit.nl())
        doc.add("prices", {"currency": prices["currency"],
                           **{c: float(p) for c, p in sorted(prices["per_gpu_hour"].items())}})
    return tomlkit.dumps(doc)


def propose(policies: dict[str, dict], edits: dict[str, dict]) -> list[dict]:
    """The ledger's team `policies` with a planner's `edits` (team -> {policy field: value}) applied,
    validated by the teams-file rules (raises TeamsFileError listing every problem), with their new
    policy versions. Every team is returned, edited or not."""
    merged = []
    for team, policy in sorted(policies.items()):
        p = {k: policy[k] for k in ("team", *POLICY_FIELDS)}
        p.update(edits.get(team, {}))
        merged.append(p)
    return parse_teams_file(teams_text(merged), PROPOSAL)["teams"]


def proposal_file(policies: dict[str, dict], proposed: list[dict], snapshots=(), prices: dict | None = None,
                  path=None) -> tuple[str, str | None]:
    """(the teams.toml to download, None) for the `proposed` policies (`propose`) of the ledger's
    `policies`: the teams file at `path` (default data/teams.toml) with only the changed keys written
    (`proposal_text`), when every team of that file has the policy version the ledger has and every
    changed team is in it, so that loading the download changes what the replay changed and nothing
    else. Otherwise (teams_text of `proposed`, snapshots and prices; why the file was not the base)."""
    p = Path(path) if path else DEFAULT_TEAMS_FILE
    changed = {t["team"]: t for t in proposed if t["policy_version"] != policies[t["team"]]["policy_version"]}
    try:
        text = read_teams_text(p)
        in_file = {t["team"]: t["policy_version"] for t in parse_teams_file(text, p)["teams"]}
    except TeamsFileError as exc:
        why = f"{p.name} cannot be the proposal's base ({'; '.join(exc.problems)})"
    else:
        differ = sorted(t for t, v in in_file.items() if t not in policies or policies[t]["policy_version"] != v)
        absent = sorted(set(changed) - set(in_file))
        if not differ and not absent:
            return proposal_text({t: {k: c[k] for k in POLICY_FIELDS} for t, c in changed.items()}, text), None
        how = [f"differs for {', '.join(differ)}"] * bool(differ) + [f"has no {', '.join(absent)}"] * bool(absent)
        why = f"{p.name} does not hold the ledger's policies ({'; '.join(how)})"
    return teams_text(proposed, snapshots, prices), (
        f"{why}, so this proposal is written from the ledger: every key of every team, without the file's "
        "comments and [defaults].")
