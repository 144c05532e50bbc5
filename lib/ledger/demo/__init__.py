"""A realistic, seeded run history for the demo ledger (and benchmarks), two years long by default.

`build_demo(db, runs=10_000, seed=0)` syncs the teams of data/teams.toml, then builds runs ending at
`now` (default: the current UTC minute) CHUNK_RUNS at a time, each chunk a slice of the history in
time: its requests generated with numpy (`runs`: what the history models, `deferrals`: requests drawn
with a flaw), then decided by the gate in time order as they are generated (`decisions`: `decide`
under the state the policy replay gives each request, carried from chunk to chunk), then inserted in
one transaction (`insert`: strings are built in SQL); the next chunk is generated and decided in a
thread while DuckDB inserts this one. The numbers the history is made of are in `parameters`.
Replaying the demo under its own policy (lib.ledger.replay) decides it again as recorded.

Re-running replaces the previous demo rows (source 'demo', origin 'demo') and nothing else.
Same seed and same `now` -> the same ledger. Every build is recorded in the ledger's audit (action
"demo": who built it, and how many runs) in the transaction of its last chunk.

- `parameters`: the numbers the history is made of, as dicts keyed by the vocabulary.
- `runs`: the runs generated with numpy.
- `deferrals`: requests drawn with a flaw, which the gate defers or rejects.
- `decisions`: the gate's decisions of each chunk, in time order.
- `insert`: a chunk into the ledger's tables in one transaction, strings made in SQL.

`ensure_demo_history` is the bootstrap of a new ledger: it builds only into a ledger that holds
nothing yet (`already_holds`), checked under the write lock the build then keeps.
"""
from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path

import numpy as np

from lib.gate.terms import utcnow
from lib.ledger import team_weeks
from lib.ledger.audit import Who, command_line, record
from lib.ledger.connection import open_ledger, transaction
from lib.ledger.demo.decisions import decide_chunk, new_world
from lib.ledger.demo.insert import insert_chunk
from lib.ledger.demo.parameters import COST_SHIFT, HISTORY_DAYS, MIN_DAYS
from lib.ledger.demo.runs import generate
from lib.ledger.teams_file import load_teams, sync_teams

__all__ = ["build_demo", "ensure_demo_history", "already_holds", "NotNew", "generate",
           "DEFAULT_RUNS", "HISTORY_DAYS", "MIN_DAYS", "COST_SHIFT", "CHUNK_RUNS"]

DEFAULT_RUNS = 10_000
# runs generated, decided and inserted at a time by build_demo: a chunk's decisions are held until its
# insert (about 1.3 GB a 100,000 runs), so 200,000 keeps a build under its 4 GB goal
CHUNK_RUNS = 200_000
DECIDING = 0.8           # the share of a chunk's progress its decisions take (the rest: its insert)
DEMO_MEMORY_LIMIT = "1GB"  # DuckDB's buffer limit while building (it writes or spills beyond)


def build_demo(db=None, runs: int = DEFAULT_RUNS, seed: int = 0, progress=None, *, now=None,
               teams_file=None, timeout_s: float = 30.0, days: int = HISTORY_DAYS, who: Who | None = None,
               only_into_new: bool = False) -> dict:
    """Build the demo history of `days` days into the ledger (replacing an earlier demo); returns
    row counts. The same runs over more days are a longer history at a lower daily rate.
    `who` is recorded in the audit as the builder (default: the command line's OS user).
    `only_into_new`: raise NotNew, writing nothing, when the ledger already holds anything.
    Runs are generated and inserted CHUNK_RUNS at a time, one transaction each, so memory stays
    bounded at any size: a build of up to CHUNK_RUNS runs (the default included) is all or nothing;
    a larger one that is interrupted leaves whole chunks, which the next build replaces. Each chunk
    is stored in time order (runs by reservation start, decisions by decision time), as a ledger
    filled over time holds them, so the pages' time filters skip what lies outside them.
    `runs` is how many runs are generated; each is admitted (then counted) unless the gate defers it
    MAX_ATTEMPTS times or no fix helps, which happens only when the teams' quotas cannot hold them."""
    for name, value, least in (("runs", runs, 1), ("days", days, MIN_DAYS)):
        if type(value) is not int or value < least:
            raise ValueError(f"{name} must be a whole number >= {least}, got {value!r}")
    say = progress or (lambda fraction, message: None)
    now = now or utcnow().replace(second=0, microsecond=0)
    teams, snapshots = load_teams(teams_file)
    names = [t["team"] for t in teams]
    chunks = _chunks(runs, seed)
    world = new_world(snapshots, runs, now)   # what the gate has seen so far, from chunk to chunk
    counts = {"runs": 0, "pilots": 0, "decisions": 0, "deferred": 0, "active": 0}
    say(0.02, "writing teams and snapshots")
    with open_ledger(db, read_only=False, timeout_s=timeout_s) as con:
        con.execute("SET enable_progress_bar = false")
        con.execute(f"SET memory_limit = '{DEMO_MEMORY_LIMIT}'")
        if only_into_new and (held := already_holds(con)):
            raise NotNew(f"the ledger already holds {held}")
        counts.update(sync_teams(con, teams_file))
        # the first chunk is generated and decided here, reporting its decisions on the bar (a UI's
        # bar is drawn from this thread only); each next one in a thread while DuckDB, which
        # releases the GIL, inserts this one. A chunk's share of the bar: DECIDING for its
        # decisions, the rest for its insert
        def step(part: float, message: str, k: int, offset: int, size: int) -> None:
            where = f" (runs {offset + 1:,}-{offset + size:,} of {runs:,})" if len(chunks) > 1 else ""
            say(0.05 + 0.9 * (k + part) / len(chunks), message + where)

        def deciding(done: int, of: int) -> None:
            step(DECIDING * done / of, f"deciding requests: {done:,} of {of:,}", 0, 0, chunks[0][0])
        with ThreadPoolExecutor(1) as pool:
            ahead = None
            for k, (size, offset, *_) in enumerate(chunks):
                def inserting(part: float, message: str, k=k, offset=offset, size=size) -> None:
                    step(DECIDING + (1 - DECIDING) * part, message, k, offset, size)
                step(0.0, f"generating {size:,} runs and deciding their requests", k, offset, size)
                data = ahead.result() if ahead else _prepare(teams, snapshots, now, chunks[0], days, world,
                                                             runs, deciding)
                if k + 1 < len(chunks):
                    ahead = pool.submit(_prepare, teams, snapshots, now, chunks[k + 1], days, world, runs, None)
                # one transaction per chunk: DuckDB keeps a transaction's rows (and its key index)
                # in memory until it commits
                with transaction(con):
                    if k == 0:
                        inserting(0.01, "removing the previous demo")
                        counts["deleted_runs"] = con.execute(
                            "SELECT count(*) FROM runs WHERE source = 'demo'").fetchall()[0][0]
                        con.execute("DELETE FROM pilots WHERE run_id IN (SELECT run_id FROM runs WHERE source = 'demo')")
                        con.execute("DELETE FROM runs WHERE source = 'demo'")
                        con.execute("DELETE FROM decisions WHERE origin = 'demo'")
                    insert_chunk(con, data, names, snapshots, counts, inserting)
                    team_weeks.rebuild(con)
                    if k + 1 == len(chunks):
                        record(con, who or command_line(), "demo", inserted=counts["runs"],
                               detail=f"{runs:,} runs over {days} days, seed {seed}; replaced "
                                      f"{counts['deleted_runs']:,} earlier demo runs")
                    inserting(0.95, "committing")
                del data
    say(1.0, f"demo ledger built: {counts['runs']:,} runs")
    return counts


def _chunks(runs: int, seed: int) -> list[tuple[int, int, object, bool, tuple[int, int]]]:
    """(size, offset, seed, last, part) per chunk: one chunk (seeded `seed`, as every build up to
    CHUNK_RUNS is) or CHUNK_RUNS-sized chunks seeded (seed, k), the k-th of K slices of the history
    in time (part (k, K)); the last holds the active runs."""
    sizes = [CHUNK_RUNS] * (runs // CHUNK_RUNS) + ([runs % CHUNK_RUNS] if runs % CHUNK_RUNS else [])
    offsets = np.cumsum([0] + sizes[:-1]).tolist()
    return [(size, int(offset), seed if len(sizes) == 1 else [seed, k], k == len(sizes) - 1, (k, len(sizes)))
            for k, (size, offset) in enumerate(zip(sizes, offsets))]


def _prepare(teams: list[dict], snapshots: list[dict], now: datetime, chunk: tuple, days: int, world,
             total: int, progress) -> dict:
    """One chunk's requests generated (`generate`) and decided in time order under `world`
    (`decisions.decide_chunk`, calling progress(done, of) now and then): its admitted runs, their
    pilots and every decision."""
    size, offset, seed, last, part = chunk
    data = generate(teams, snapshots, size, seed, now, offset=offset, active=last, days=days, part=part,
                    total=total)
    decide_chunk(data, teams, snapshots, now, world, seed, progress)
    return data


class NotNew(Exception):
    """The ledger already holds something, so the demo bootstrap leaves it alone."""


LEDGER_TABLES = frozenset(re.findall(r"CREATE TABLE IF NOT EXISTS (\w+)",
                                     (Path(__file__).parent.parent / "schema.sql").read_text(encoding="utf-8")))


def already_holds(con) -> str | None:
    """What the ledger on `con` holds besides its empty schema ("3 teams", "a table x that is not the
    ledger's", …), or None for a new ledger: no row in any table, no table or view of anyone else,
    nothing in `meta` but the schema version."""
    for schema, name, kind in con.execute(
            "SELECT table_schema, table_name, table_type FROM information_schema.tables "
            "WHERE table_catalog = current_database() ORDER BY ALL").fetchall():
        if schema != "main" or name not in LEDGER_TABLES or kind != "BASE TABLE":
            return f"a {kind.lower()} {schema}.{name} that is not the ledger's"
    first = ("runs", "decisions", "teams")
    for name in [*first, *sorted(LEDGER_TABLES - set(first))]:
        where = " WHERE key <> 'schema_version'" if name == "meta" else ""
        n = con.execute(f"SELECT count(*) FROM {name}{where}").fetchall()[0][0]
        if n:
            return f"{n:,} row(s) in its {name} table"
    return None


def ensure_demo_history(db=None, *, who: Who | None = None, **kwargs) -> bool:
    """Build the default demo into a new ledger (one that does not exist yet, or holds nothing:
    `already_holds`), recording `who` built it; True when it did. A ledger holding anything at all
    (teams, runs, decisions, an audit, tables of someone else) is left as it is: False."""
    try:
        build_demo(db, who=who, only_into_new=True, **kwargs)
    except NotNew:
        return False
    return True
