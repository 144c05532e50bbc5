"""One decided chunk of the demo into the ledger's tables: its admitted runs (in reservation order),
their pilots and every decision (in decision order: the gate's, with the full request as a submit
records it), each table with one INSERT ... SELECT from the registered DataFrame; the runs' strings
(run IDs, teams, kinds, stop reasons, job names, the pilots as JSON) are made in SQL from the chunk's
codes.
"""
from __future__ import annotations

import contextlib

import numpy as np
import pandas as pd

from lib.gate.terms import ARTIFACT_STATUSES, CAPACITIES, KINDS
from lib.ledger.demo.parameters import SOURCES, STOPS
from lib.ledger.imports.columns import CSV_COLUMNS

# the runs columns the demo writes: every column a file can supply, and the row's source and time
RUN_COLUMNS = ", ".join([*CSV_COLUMNS, "source", "updated_at"])
KIND_LETTERS = {"exploratory": "x", "production": "p", "retraining": "r"}   # a demo run ID's letter per kind


def _sql_list(values) -> str:
    return "[" + ", ".join("'" + str(v).replace("'", "''") + "'" for v in values) + "]"


def run_ids(data: dict, rows: np.ndarray) -> list[str]:
    """The run IDs of the generated runs at positions `rows` of the chunk, as insert_chunk's SQL
    makes them: team-k-yymmdd-i, k the kind's letter, yymmdd the submission day, i the row number."""
    runs = data["runs"]
    team = np.array(data["teams"], dtype=object)[runs["team_i"].to_numpy()[rows]]
    kind = np.array([KIND_LETTERS[k] for k in KINDS], dtype=object)[runs["kind_i"].to_numpy()[rows]]
    day = pd.DatetimeIndex(runs["submitted_at"].to_numpy()[rows]).strftime("%y%m%d")
    return [f"{t}-{k}-{d}-{str(i).rjust(7, '0')[:7]}"
            for t, k, d, i in zip(team, kind, day, runs["i"].to_numpy()[rows].tolist())]


def insert_chunk(con, data: dict, names: list[str], snapshots: list[dict], counts: dict, step) -> None:
    """Insert one generated chunk: its runs (in reservation order), pilots, the admit of every run
    and the deferred decisions (in decision order); adds to `counts`."""
    con.register("demo_runs", data["runs"])
    T, K, C, S = (_sql_list(x) for x in (names, KINDS, CAPACITIES, STOPS))
    run_id = (f"{T}[team_i + 1] || '-' || {_sql_list(KIND_LETTERS[k] for k in KINDS)}[kind_i + 1] || '-' || "
              "strftime(submitted_at, '%y%m%d') || '-' || lpad(i::VARCHAR, 7, '0')")
    step(0.05, "inserting runs")
    con.execute(f"""
        CREATE TEMP TABLE demo_ids AS
        SELECT i, {run_id} AS run_id, snap FROM demo_runs""")
    con.register("demo_pilots", data["pilots"])
    con.execute("""
        CREATE TEMP TABLE demo_chunk_pilots AS
        SELECT d.run_id, measured_at, sps AS steps_per_second, wc_sps AS worst_case_steps_per_second,
            wc_share AS worst_case_share, peak_mem AS peak_mem_gb, ckpt_s AS checkpoint_write_s,
            steps AS planned_steps, interval AS checkpoint_interval_steps,
            to_json(struct_pack(gpus := p_gpus, steps_per_second := sps, worst_case_steps_per_second := wc_sps,
                worst_case_share := wc_share, peak_mem_gb := peak_mem, checkpoint_write_s := ckpt_s,
                planned_steps := steps, checkpoint_interval_steps := interval,
                eval_gpu_hours := eval_gh, data_loading_fraction := dl_frac,
                restart_minutes := restart_min))::VARCHAR AS pilot_json
        FROM demo_pilots JOIN demo_ids d USING (i)""")
    con.execute(f"""
        CREATE TEMP TABLE demo_chunk AS
        SELECT d.i, d.run_id, {T}[team_i + 1] AS team, {K}[kind_i + 1] AS kind, {C}[cap_i + 1] AS capacity,
            gpus, gpu_mem_gb, d.snap AS data_snapshot,
            {K}[kind_i + 1] || '-' || {_sql_list(['lm', 'vit', 'asr', 'rank', 'ctr', 'policy', 'rm', 'retr'])}[1 + i % 8]
                || '-v' || (1 + i % 13)::VARCHAR AS job_name,
            est AS estimated_gpu_hours, {_sql_list(SOURCES)}[src_i + 1] AS estimate_source,
            e_comp AS est_compute_gpu_hours, e_ckpt AS est_checkpoint_gpu_hours,
            e_eval AS est_eval_gpu_hours, e_data AS est_data_loading_gpu_hours,
            e_rst AS est_restart_gpu_hours, budget AS budget_gpu_hours, max_rt AS max_runtime_hours,
            reserved_from, reserved_until, reserved_gh AS reserved_gpu_hours, started_at, ended_at,
            actual AS actual_gpu_hours, a_ckpt AS act_checkpoint_gpu_hours, a_retry AS act_retry_gpu_hours,
            a_eval AS act_eval_gpu_hours, a_lost AS act_lost_work_gpu_hours,
            CASE WHEN stop_i >= 0 THEN {S}[stop_i + 1] END AS stop_reason,
            CASE WHEN interrupts >= 0 THEN interrupts END AS interruptions,
            CASE WHEN restarts >= 0 THEN restarts END AS restarts,
            CASE WHEN artifact_i >= 0 THEN {_sql_list(ARTIFACT_STATUSES)}[artifact_i + 1] END AS artifact_status,
            CASE WHEN has_ckpt THEN 'ckpt://' || d.run_id || '/step-' || ckpt_step::VARCHAR END
                AS last_valid_checkpoint,
            CASE WHEN NOT active THEN full_eval END AS full_evaluation,
            CASE WHEN reads >= 0 THEN reads END AS holdout_reads, allow AS holdout_allowance,
            'demo' AS source, coalesce(ended_at, submitted_at) AS updated_at
        FROM demo_runs JOIN demo_ids d USING (i)
        ORDER BY reserved_from, d.run_id""")
    con.execute(f"INSERT INTO runs ({RUN_COLUMNS}) SELECT {RUN_COLUMNS} FROM demo_chunk")
    counts["runs"] += con.execute("SELECT count(*) FROM demo_ids").fetchall()[0][0]
    step(0.25, "inserting pilots")
    con.execute("INSERT INTO pilots (run_id, measured_at, steps_per_second, worst_case_steps_per_second, "
                "worst_case_share, peak_mem_gb, checkpoint_write_s, planned_steps, checkpoint_interval_steps, "
                "pilot_json) SELECT * FROM demo_chunk_pilots")
    counts["pilots"] += len(data["pilots"])
    n_dec, n_def = len(data["decisions"]), int((data["decisions"]["state"] == "defer").sum())
    step(0.35, f"inserting {n_dec:,} decisions ({n_def:,} deferred)")
    con.register("demo_decisions", data["decisions"])
    con.execute("""
        INSERT INTO decisions (decided_at, run_id, team, kind, state, reason_codes, judged_gpu_hours,
            reserved_gpu_hours, policy_version, origin, request_json, decision_json)
        SELECT decided_at, run_id, team, kind, state, reason_codes, judged_gpu_hours, reserved_gpu_hours,
            policy_version, 'demo', request_json, decision_json FROM demo_decisions
        ORDER BY decided_at, run_id""")
    counts["decisions"] += n_dec
    counts["deferred"] += n_def
    counts["active"] += data["active"]
    for name in ("demo_runs", "demo_pilots", "demo_decisions"):
        with contextlib.suppress(Exception):
            con.unregister(name)
    for table in ("demo_ids", "demo_chunk", "demo_chunk_pilots"):
        con.execute(f"DROP TABLE {table}")
