"""The dashboard across clusters: the ledgers of several clusters read together, and the shared
authority's numbers when the cluster names one (lib.authority).

`GATE_CLUSTER_LEDGERS="a=/srv/a/gate.duckdb,b=/mnt/b/gate.duckdb"` names each cluster's ledger (a
copy, or a file shared read-only); without it the app's own ledger is the one cluster, named
`$GATE_CLUSTER` (else "local"). Each is ATTACHed read-only to one in-memory DuckDB per read
(`ATTACH ... (READ_ONLY)`), and the cluster's name is put on every row. Units: GPU-hours, accelerators.
"""
from __future__ import annotations

import datetime as dt
import os
import time
from pathlib import Path

import duckdb
import pandas as pd

from lib.authority.settings import configured_authority
from lib.authority.url import CLUSTER_NAME, CLUSTER_RULE
from lib.dashboard.filters import Filters
from lib.dashboard.reading import read_frame, period_params
from lib.gate.terms import month_start, next_month_start
from lib.ledger.connection import LedgerError, LedgerLocked, default_timeout_s, ledger_path
from lib.ledger.state import held_condition

LOCAL_CLUSTER = "local"


def cluster_ledgers(path=None, env=None) -> dict[str, Path]:
    """{cluster name: ledger file} from $GATE_CLUSTER_LEDGERS, else {$GATE_CLUSTER or "local": the app's
    ledger}. LedgerError names an entry that is not NAME=PATH or a name that breaks the cluster rule."""
    env = os.environ if env is None else env
    spec = (env.get("GATE_CLUSTER_LEDGERS") or "").strip()
    if not spec:
        return {env.get("GATE_CLUSTER") or LOCAL_CLUSTER: ledger_path(path)}
    out = {}
    for item in (s.strip() for s in spec.split(",") if s.strip()):
        name, sep, file = item.partition("=")
        name = name.strip()
        if not sep or not file.strip():
            raise LedgerError(f"GATE_CLUSTER_LEDGERS: {item!r} is not NAME=PATH")
        if not CLUSTER_NAME.fullmatch(name) or name in out:
            raise LedgerError(f"GATE_CLUSTER_LEDGERS: cluster name {name!r} must be unique, {CLUSTER_RULE}")
        out[name] = Path(file.strip())
    return out


def attach(ledgers: dict[str, Path], timeout_s: float | None = None) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB with each ledger ATTACHed read-only under its cluster's name, and views
    `decisions_all` and `runs_all` over them with a `cluster` column. Waits up to `timeout_s` for a
    ledger another process holds for writing, then raises LedgerLocked."""
    con = duckdb.connect(":memory:", config={"threads": 2, "memory_limit": "2GB"})
    try:
        for name, file in ledgers.items():
            if not file.is_file():
                raise LedgerError(f"cluster {name}: no ledger at {file}")
            _attach_one(con, name, file, default_timeout_s() if timeout_s is None else timeout_s)
        # names follow CLUSTER_NAME (letters, digits, . _ -): safe inside quotes
        con.execute("CREATE TEMP VIEW decisions_all AS " + " UNION ALL ".join(
            f"SELECT '{n}' AS cluster, decided_at, run_id, team, kind, state, reason_codes, reserved_gpu_hours, "
            f"origin FROM \"{n}\".decisions" for n in ledgers))
        con.execute("CREATE TEMP VIEW runs_all AS " + " UNION ALL ".join(
            f"SELECT '{n}' AS cluster, run_id, team, kind, capacity, gpus, reserved_gpu_hours, reserved_from, reserved_until, "
            f"started_at, ended_at, actual_gpu_hours FROM \"{n}\".runs" for n in ledgers))
    except BaseException:
        con.close()
        raise
    return con


def _attach_one(con, name: str, file: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            quoted = str(file).replace("'", "''")   # ATTACH takes no bound parameter
            con.execute(f"ATTACH '{quoted}' AS \"{name}\" (READ_ONLY)")
            return
        except duckdb.Error as exc:
            if "lock" not in str(exc).lower():
                raise LedgerError(f"cluster {name}: cannot read the ledger {file}: {exc}") from None
            if time.monotonic() >= deadline:
                raise LedgerLocked(f"cluster {name}: the ledger {file} is held by another process "
                                   f"(waited {timeout_s:g} s)") from None
            time.sleep(0.05)


def cluster_board(f: Filters, path=None, now: dt.datetime | None = None) -> dict:
    """Every cluster's ledger together: {"clusters": names, "board": per cluster × team the period's
    admits and deferrals, the accelerators and GPU-hours held now and the GPU-hours spent this month;
    "decisions": the period's latest 500 decisions with their cluster; "authority": the shared
    authority's numbers per team (None without one); "authority_error": why they could not be read}."""
    now = now or dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)
    ledgers = cluster_ledgers(path)
    where, params = f.where("d", capacity_col=None)
    params.update(period_params(f), now=now, month_start=month_start(now), next_month=next_month_start(now))
    rwhere, _ = f.where("r", capacity_col="capacity")
    con = attach(ledgers)
    try:
        board = read_frame(con, f"""
          WITH dec AS (SELECT cluster, team, count(*) FILTER (WHERE state = 'admit') AS admitted,
                              count(*) FILTER (WHERE state = 'defer') AS deferred
                       FROM decisions_all d WHERE {where} AND decided_at >= $start AND decided_at < $end
                       GROUP BY ALL),
               held AS (SELECT cluster, team, sum(gpus) AS held_gpus, sum(reserved_gpu_hours) AS held_gpu_hours
                        FROM runs_all r WHERE {rwhere} AND {held_condition('r', '$now')} GROUP BY ALL),
               spent AS (SELECT cluster, team, sum(actual_gpu_hours) AS month_spent_gpu_hours FROM runs_all r
                         WHERE {rwhere} AND ended_at >= $month_start AND ended_at < $next_month GROUP BY ALL)
          SELECT cluster, team, coalesce(admitted, 0) AS admitted, coalesce(deferred, 0) AS deferred,
                 coalesce(held_gpus, 0) AS held_gpus, coalesce(held_gpu_hours, 0) AS held_gpu_hours,
                 coalesce(month_spent_gpu_hours, 0) AS month_spent_gpu_hours
          FROM dec FULL JOIN held USING (cluster, team) FULL JOIN spent USING (cluster, team)
          ORDER BY cluster, team""", params)
        decisions = read_frame(con, f"""
          SELECT cluster, decided_at, run_id, team, kind, state, array_to_string(reason_codes, ', ') AS reasons,
                 reserved_gpu_hours
          FROM decisions_all d WHERE {where} AND decided_at >= $start AND decided_at < $end
          ORDER BY decided_at DESC, cluster, run_id LIMIT 500""", params)
    finally:
        con.close()
    shared, error = authority_board(now, f.teams)
    return {"clusters": list(ledgers), "board": board, "decisions": decisions, "authority": shared,
            "authority_error": error}


def authority_board(now: dt.datetime, teams=()) -> tuple[pd.DataFrame | None, str | None]:
    """(per team: the authority's quota and month budget, accelerators and GPU-hours held by every
    cluster, month spend, budget left; None without an authority), or (None, why) when it cannot be read."""
    from lib.authority.store import status   # here: reads PostgreSQL, and only when the app names an authority
    try:
        authority = configured_authority()
        if authority is None:
            return None, None
        got = status(authority.url, now, policies=True)
    except (LedgerError, ValueError) as exc:   # unreachable (AuthorityUnavailable), a bad setting
        return None, str(exc)
    rows = []
    for team, t in got["teams"].items():
        if teams and team not in teams:
            continue
        policy = t.get("policy") or {}
        budget = policy.get("monthly_budget_gpu_hours")
        rows.append({"team": team, "reserved_gpus": policy.get("reserved_gpus"), "held_gpus": t["held_gpus"],
                     "clusters": ", ".join(f"{c}: {v['gpus']}" for c, v in sorted(t["clusters"].items())),
                     "monthly_budget_gpu_hours": budget, "month_spent_gpu_hours": t["month_spent_gpu_hours"],
                     "committed_gpu_hours": t["held_gpu_hours"],
                     "remaining_gpu_hours": (None if budget is None else
                                             budget - t["month_spent_gpu_hours"] - t["held_gpu_hours"])})
    return pd.DataFrame(rows, columns=["team", "reserved_gpus", "held_gpus", "clusters", "monthly_budget_gpu_hours",
                                       "month_spent_gpu_hours", "committed_gpu_hours", "remaining_gpu_hours"]), None


def only_clusters(data: dict, clusters) -> dict:
    """`data` of `cluster_board` with its board and decisions kept to `clusters` (the page's filter)."""
    keep = set(clusters)
    return {**data, "board": data["board"][data["board"]["cluster"].isin(keep)].reset_index(drop=True),
            "decisions": data["decisions"][data["decisions"]["cluster"].isin(keep)].reset_index(drop=True)}
