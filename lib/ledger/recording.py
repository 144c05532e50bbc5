"""Recording decisions in the ledger: each decision appended with its request, and an admit booked
as a reservation (its runs row, its pilot). Every way a decision reaches the ledger writes through
`record_decisions`: an in-process submit (lib.ledger.deciding.submit_request) and the gate server's
batches (lib.ledger.batch.apply_batch) alike.
"""
from __future__ import annotations

from datetime import datetime, timedelta

from lib.gate.contracts import Decision, Request, Reservation
from lib.gate.terms import finite_number, json_text


def canonical_json(obj) -> str:
    """The JSON a decision and its request are recorded as: sorted keys, so equal dicts give equal text."""
    return json_text(obj, sort_keys=True)


# estimate item columns <- item keys that decide() may use (first match wins)
_EST_ITEMS = {
    "est_compute_gpu_hours": ("compute",),   # compute_typical + compute_worst_case
    "est_checkpoint_gpu_hours": ("checkpoint",),
    "est_eval_gpu_hours": ("eval", "evaluation"),
    "est_data_loading_gpu_hours": ("data_loading", "data-loading", "dataloading"),
    "est_restart_gpu_hours": ("restart", "restarts", "lost_work", "restarts_and_lost_work"),
}


def estimate_items(items: dict | None) -> dict:
    """Map an estimate's itemised GPU-hours onto the runs table's est_* columns (summing parts).

    A stated estimate has no items (its only key is 'stated'): its est_* columns stay NULL.
    """
    out = dict.fromkeys(_EST_ITEMS)
    for key, value in (items or {}).items():
        v = finite_number(value)
        if v is None:
            continue
        k = key.lower().removesuffix("_gpu_hours")
        for col, names in _EST_ITEMS.items():
            if any(k == n or k.startswith(n) for n in names):
                out[col] = (out[col] or 0.0) + v
                break
    return out


def booked_reservation(request: Request, decision: Decision, now: datetime) -> Reservation:
    """The reservation an admit decided at `now` books (as `held_reservations` reads it back):
    from `now` for the estimate's wall-clock hours (else the request's max_runtime_hours)."""
    est = decision["estimate"] or {}
    wall_h = finite_number(est.get("wall_hours")) or finite_number(request["max_runtime_hours"])
    return {"run_id": request["run_id"], "team": request["team"], "kind": request["kind"],
            "gpus": int(request["gpus"]), "reserved_gpu_hours": finite_number(decision["reserved_gpu_hours"]),
            # whole seconds: schedulers report start times in whole seconds, and a job started in the
            # second it was admitted must not look as if it started before its reservation
            "reserved_from": now.replace(microsecond=0),
            "reserved_until": now + timedelta(hours=wall_h) if wall_h is not None else None,
            "capacity": request["capacity"]}


def record_decision(con, request: Request, decision: Decision, origin: str, now: datetime, *,
                    actor: str | None = None) -> None:
    """Append the decision (`actor`: who asked, when known); on admit, book the run. A replayed
    decision is already recorded: no-op."""
    record_decisions(con, [(request, decision, origin, now, actor)])


_DECISION_COLS = ("decided_at", "run_id", "team", "kind", "state", "reason_codes", "judged_gpu_hours",
                  "reserved_gpu_hours", "policy_version", "origin", "request_json", "decision_json", "actor")
_PILOT_COLS = ("run_id", "measured_at", "steps_per_second", "worst_case_steps_per_second", "worst_case_share",
               "peak_mem_gb", "checkpoint_write_s", "planned_steps", "checkpoint_interval_steps", "pilot_json")


def record_decisions(con, decided: list[tuple[Request, Decision, str, datetime, str | None]]) -> None:
    """`record_decision` for many (request, decision, origin, decided_at, actor), in order, with one
    multi-row statement per table: DuckDB's cost is per statement, so a batch of many decisions costs
    about what one costs."""
    decided = [d for d in decided if d[1].get("replayed") is not True]
    if not decided:
        return
    rows, runs, pilots = [], [], []
    for request, decision, origin, now, actor in decided:
        est = decision["estimate"] or {}
        req = request if isinstance(request, dict) else {}
        rows.append([now, decision["run_id"], decision["team"], decision["kind"], decision["state"],
                     [r["code"] for r in decision["reasons"]], finite_number(est.get("judged_gpu_hours")),
                     finite_number(decision["reserved_gpu_hours"]), decision["policy_version"], origin,
                     canonical_json(request), canonical_json(decision), actor])
        if decision["state"] != "admit":
            continue
        runs.append(_booked_run_row(req, decision, now))
        pilot = req.get("pilot")
        if isinstance(pilot, dict):
            pilots.append([req["run_id"], now, finite_number(pilot["steps_per_second"]),
                           finite_number(pilot.get("worst_case_steps_per_second")),
                           finite_number(pilot.get("worst_case_share")), finite_number(pilot["peak_mem_gb"]),
                           finite_number(pilot.get("checkpoint_write_s")), _int(pilot["planned_steps"]),
                           _int(pilot.get("checkpoint_interval_steps")), canonical_json(pilot)])
    _insert_rows(con, "decisions", _DECISION_COLS, rows)
    if runs:
        cols = list(runs[0])
        # a plain INSERT, not INSERT ... ON CONFLICT (several times slower in DuckDB); a row that
        # exists (an imported estimate) is updated
        existing = {r[0] for r in con.execute("SELECT run_id FROM runs WHERE list_contains(?, run_id)",
                                              [[r["run_id"] for r in runs]]).fetchall()}
        for row in runs:
            if row["run_id"] in existing:
                con.execute(f"UPDATE runs SET {', '.join(f'{c} = ?' for c in cols[1:])} WHERE run_id = ?",
                            [row[c] for c in cols[1:]] + [row["run_id"]])
        _insert_rows(con, "runs", cols, [[row[c] for c in cols] for row in runs if row["run_id"] not in existing])
    _insert_rows(con, "pilots", _PILOT_COLS, pilots)


def _booked_run_row(req: dict, decision: Decision, now: datetime) -> dict:
    """The runs row an admit writes (the reservation and the estimate)."""
    est = decision["estimate"] or {}
    held = booked_reservation(req, decision, now)
    return {
        "run_id": req["run_id"], "team": req["team"], "kind": req["kind"],
        "capacity": req["capacity"], "gpus": held["gpus"],
        "gpu_mem_gb": finite_number(req["gpu_mem_gb"]), "data_snapshot": req.get("data_snapshot"),
        "job_name": req.get("note"),
        "estimated_gpu_hours": finite_number(est["raw_gpu_hours"]),
        "estimate_source": est["source"], **estimate_items(est["items_gpu_hours"]),
        "budget_gpu_hours": finite_number(req["budget_gpu_hours"]),
        "max_runtime_hours": finite_number(req["max_runtime_hours"]),
        "reserved_from": held["reserved_from"], "reserved_until": held["reserved_until"],
        "reserved_gpu_hours": held["reserved_gpu_hours"],
        "holdout_allowance": int(req.get("holdout_allowance") or 0),
        "source": "submit", "updated_at": now,
    }


def _insert_rows(con, table: str, cols, rows: list[list], chunk: int = 200) -> None:
    """INSERT the rows in order, `chunk` rows per statement."""
    one = "(" + ", ".join("?" for _ in cols) + ")"
    for k in range(0, len(rows), chunk):
        part = rows[k:k + chunk]
        con.execute(f"INSERT INTO {table} ({', '.join(cols)}) VALUES {', '.join(one for _ in part)}",
                    [v for row in part for v in row])


def _int(x):
    v = finite_number(x)
    return int(v) if v is not None else None

