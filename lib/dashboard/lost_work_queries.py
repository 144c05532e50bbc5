"""The Recovery planner's lost work, no Streamlit: the GPU-hours lost to interruptions per team and
capacity type, measured from the ledger's interruptions (`recover`, and the attempts of requeued
jobs an sacct import brings), beside what the planner's closed form expects for the same
interruptions (lib.planning.preemption.expected_time). Units: GPU-hours (`_gpu_hours`), hours (`_h`).
"""
from __future__ import annotations

import datetime as dt
import math

import pandas as pd

from lib.dashboard.filters import Filters
from lib.dashboard.reading import read_frame, period_params, reader
from lib.dashboard.recovery_view import default_restart_h, finished_runs_cte
from lib.gate.terms import INTERRUPTING_EVENTS
from lib.planning.preemption import expected_time

GROUP_COLUMNS = ["team", "capacity", "runs", "attempts", "with_checkpoint", "from_sacct", "attempts_gpu_hours",
                 "lost_gpu_hours", "expected_lost_gpu_hours", "modelled_attempts"]
_EVENTS = ", ".join(f"'{e}'" for e in INTERRUPTING_EVENTS)


def _pilot(field: str) -> str:
    return f"TRY_CAST(json_extract_string(d.request_json, '$.pilot.{field}') AS DOUBLE) AS {field}"


# the period's interrupted attempts (an interrupting event in the dates, of a run the filters select)
_ATTEMPTS = f"""
SELECT i.run_id, r.team, r.capacity, r.gpus, i.attempt_gpu_hours, i.lost_gpu_hours, i.source,
       EXISTS (SELECT 1 FROM checkpoints c WHERE c.run_id = i.run_id
               AND c.saved_at BETWEEN i.attempt_started_at AND i.occurred_at) AS with_checkpoint
FROM interruptions i JOIN runs r ON r.run_id = i.run_id
WHERE {{where}} AND i.occurred_at >= $start AND i.occurred_at < $end AND i.event IN ({_EVENTS}) AND r.gpus > 0"""

# per run of those attempts: what the closed form needs (its work, checkpointing and restart)
_RUNS = f"""
WITH att AS (SELECT DISTINCT i.run_id FROM ({_ATTEMPTS}) i),
life AS (SELECT run_id, count(*) FILTER (WHERE event IN ({_EVENTS})) AS events,
                sum(attempt_gpu_hours) AS attempt_gpu_hours, sum(lost_gpu_hours) AS lost_gpu_hours
         FROM interruptions WHERE run_id IN (SELECT run_id FROM att) GROUP BY run_id),
saves AS (SELECT run_id, count(*) AS n, epoch(max(saved_at) - min(saved_at)) / 3600.0 AS span_h
          FROM checkpoints WHERE run_id IN (SELECT run_id FROM att) GROUP BY run_id),
adm AS (SELECT run_id, arg_max(request_json, decided_at) AS request_json FROM decisions
        WHERE state = 'admit' AND run_id IN (SELECT run_id FROM att) GROUP BY run_id)
SELECT r.run_id, r.team, r.capacity, r.gpus, r.est_compute_gpu_hours, r.actual_gpu_hours, r.estimated_gpu_hours,
       r.est_restart_gpu_hours, r.est_checkpoint_gpu_hours,
       r.ended_at IS NOT NULL AS finished, l.events, l.attempt_gpu_hours, l.lost_gpu_hours,
       s.n AS checkpoints, s.span_h, {_pilot('steps_per_second')}, {_pilot('checkpoint_interval_steps')},
       {_pilot('checkpoint_write_s')}, {_pilot('restart_minutes')}
FROM runs r JOIN att USING (run_id) JOIN life l USING (run_id)
LEFT JOIN saves s USING (run_id) LEFT JOIN adm d USING (run_id)"""

# the planner's MTBF per team x capacity and pooled per capacity (recovery_view.recovery_inputs' rule)
_MTBF = """
SELECT team, capacity, grouping(team) = 1 AS pooled,
       CASE WHEN sum(interruptions) > 0 THEN sum(run_hours) / sum(interruptions) END AS mtbf_h
FROM fin GROUP BY GROUPING SETS ((team, capacity), (capacity))"""


def _num(value) -> float | None:
    return None if value is None or pd.isna(value) else float(value)


def run_model(run: dict, mtbf_h: float | None) -> dict:
    """The closed form's inputs for one interrupted run (hours) and its expected lost work per
    interruption, in GPU-hours (NaN when the model cannot say: no work or no MTBF).

    W (useful work, the first of these above 0, / gpus): est_compute_gpu_hours; actual - lost once
    finished; the estimate less its restart and checkpoint items; the attempts' GPU-hours. tau (work between checkpoints): the admitted pilot's
    checkpoint_interval_steps / steps_per_second, else the mean gap between the run's checkpoint
    records less C, else None (no checkpointing: every interruption loses the work since the start).
    C: the pilot's checkpoint_write_s, else 0. R: the pilot's restart_minutes, else default_restart_h.
    M: `mtbf_h` (the team's, else everyone's, on that capacity), else the run's own attempt hours per
    interruption. Expected loss per interruption = GPUs x E[lost work] / E[interruptions]."""
    g = float(run["gpus"])
    lost = _num(run["lost_gpu_hours"]) or 0.0
    actual = _num(run["actual_gpu_hours"]) if run["finished"] else None
    estimate = _num(run["estimated_gpu_hours"])
    candidates = (_num(run["est_compute_gpu_hours"]), actual - lost if actual is not None else None,
                  estimate - (_num(run["est_restart_gpu_hours"]) or 0.0) - (_num(run["est_checkpoint_gpu_hours"]) or 0.0)
                  if estimate is not None else None, _num(run["attempt_gpu_hours"]))
    work_h = next((w for w in candidates if w is not None and w > 0), 0.0) / g
    c_h = (_num(run["checkpoint_write_s"]) or 0.0) / 3600.0
    sps, steps = _num(run["steps_per_second"]), _num(run["checkpoint_interval_steps"])
    if sps and steps:
        tau_h, tau_source = steps / sps / 3600.0, "pilot"
    elif (run["checkpoints"] or 0) >= 2 and (_num(run["span_h"]) or 0) > 0:
        tau_h, tau_source = max(run["span_h"] / (run["checkpoints"] - 1) - c_h, 1e-6), "checkpoints"
    else:
        tau_h, tau_source = None, "none"
    minutes = _num(run["restart_minutes"])
    r_h = minutes / 60.0 if minutes is not None else default_restart_h(g)
    m_h = mtbf_h if mtbf_h is not None and math.isfinite(mtbf_h) and mtbf_h > 0 else None
    if m_h is None and run["events"]:
        m_h = (_num(run["attempt_gpu_hours"]) or 0.0) / g / run["events"] or None
    per = math.nan
    if work_h > 0 and m_h:
        try:
            e = expected_time(work_h, tau_h, c_h, r_h, m_h)
        except (ValueError, OverflowError):
            e = None
        if e and e["expected_interruptions"] > 0 and math.isfinite(e["expected_lost_work_hours"]):
            per = g * e["expected_lost_work_hours"] / e["expected_interruptions"]
    return {"work_h": work_h, "interval_h": tau_h, "interval_source": tau_source, "checkpoint_h": c_h,
            "restart_h": r_h, "mtbf_h": m_h, "expected_lost_per_interruption_gpu_hours": per}


def lost_work(f: Filters, db=None, now: dt.datetime | None = None) -> dict:
    """GPU-hours lost to interruptions in the period, measured and expected, per team x capacity.

    Attempts: the ledger's interruption events (preempted, requeued, node-fail) that occurred in the
    dates, of runs the team, kind and capacity filters select. Measured: each attempt's
    lost_gpu_hours as recorded (the attempt's GPU-hours less the work kept at the last checkpoint
    recorded within it, else the whole attempt; or the number `recover` was given). with_checkpoint:
    attempts with a checkpoint record saved within them; from_sacct: attempts only an sacct import
    saw. Expected: each attempt's run model (`run_model`, with the MTBF the planner's rates give its
    team and capacity), summed over the attempts it can model (modelled_attempts).
    Returns {"groups": DataFrame (GROUP_COLUMNS), "runs": DataFrame (one row per interrupted run:
    run_id, team, capacity, gpus, attempts, lost_gpu_hours, expected_lost_gpu_hours and the model's
    inputs)}."""
    where, p = f.where("r")
    p.update(period_params(f))
    with reader(db) as con:
        attempts = read_frame(con, _ATTEMPTS.format(where=where), p)
        if attempts.empty:
            return {"groups": pd.DataFrame(columns=GROUP_COLUMNS), "runs": pd.DataFrame()}
        runs = read_frame(con, _RUNS.format(where=where), p)
        mtbf = read_frame(con, finished_runs_cte(where) + _MTBF, p)
    by_group = {(None if pooled else t, c): m
                for t, c, pooled, m in zip(mtbf["team"], mtbf["capacity"], mtbf["pooled"], mtbf["mtbf_h"])}
    per_run = attempts.groupby("run_id")["lost_gpu_hours"].agg(["size", "sum"]).to_dict("index")
    models = []
    for run in runs.to_dict("records"):
        m = _num(by_group.get((run["team"], run["capacity"])))
        if m is None:
            m = _num(by_group.get((None, run["capacity"])))
        model = run_model(run, m)
        n = int(per_run[run["run_id"]]["size"])
        models.append({"run_id": run["run_id"], "team": run["team"], "capacity": run["capacity"],
                       "gpus": int(run["gpus"]), "attempts": n, "lost_gpu_hours": float(per_run[run["run_id"]]["sum"]),
                       "expected_lost_gpu_hours": n * model["expected_lost_per_interruption_gpu_hours"], **model})
    runs_out = pd.DataFrame(models)
    att = attempts.assign(with_checkpoint=attempts["with_checkpoint"].astype(bool),
                          from_sacct=attempts["source"] == "sacct")
    groups = att.groupby(["team", "capacity"], as_index=False).agg(
        runs=("run_id", "nunique"), attempts=("run_id", "size"), with_checkpoint=("with_checkpoint", "sum"),
        from_sacct=("from_sacct", "sum"), attempts_gpu_hours=("attempt_gpu_hours", "sum"),
        lost_gpu_hours=("lost_gpu_hours", "sum"))
    modelled = runs_out[runs_out["expected_lost_gpu_hours"].notna()]
    expected = modelled.groupby(["team", "capacity"], as_index=False).agg(
        expected_lost_gpu_hours=("expected_lost_gpu_hours", "sum"), modelled_attempts=("attempts", "sum"))
    groups = groups.merge(expected, on=["team", "capacity"], how="left")
    groups["modelled_attempts"] = groups["modelled_attempts"].fillna(0).astype("int64")
    for col in ("runs", "attempts", "with_checkpoint", "from_sacct"):
        groups[col] = groups[col].astype("int64")
    for col in ("attempts_gpu_hours", "lost_gpu_hours", "expected_lost_gpu_hours"):
        groups[col] = groups[col].astype("float64")
    return {"groups": groups[GROUP_COLUMNS].sort_values(["team", "capacity"], ignore_index=True), "runs": runs_out}
