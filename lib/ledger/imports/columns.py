"""The `runs` columns an import can supply, grouped by the kind of value each holds."""
from __future__ import annotations

from lib.gate.terms import ARTIFACT_STATUSES, CAPACITIES, KINDS, STOP_REASONS

MAX_TEXT_CHARS = 1000                      # longest text value accepted in a field (characters)

TEXT_COLUMNS = ["run_id", "team", "data_snapshot", "job_name", "last_valid_checkpoint"]
ENUMS = {
    "kind": KINDS,
    "capacity": CAPACITIES,
    "estimate_source": ("pilot", "stated", "requested"),
    "stop_reason": STOP_REASONS,
    "artifact_status": ARTIFACT_STATUSES,
}
NUMBER_COLUMNS = [
    "gpu_mem_gb", "estimated_gpu_hours", "est_compute_gpu_hours", "est_checkpoint_gpu_hours",
    "est_eval_gpu_hours", "est_data_loading_gpu_hours", "est_restart_gpu_hours", "budget_gpu_hours",
    "max_runtime_hours", "reserved_gpu_hours", "actual_gpu_hours", "act_checkpoint_gpu_hours",
    "act_retry_gpu_hours", "act_eval_gpu_hours", "act_lost_work_gpu_hours",
]
INTEGER_COLUMNS = ["gpus", "interruptions", "restarts", "holdout_reads", "holdout_allowance"]
TIME_COLUMNS = ["reserved_from", "reserved_until", "started_at", "ended_at"]
BOOL_COLUMNS = ["full_evaluation"]

# The runs columns a file can supply, in the ledger's order (source and updated_at are the importer's).
CSV_COLUMNS = [
    "run_id", "team", "kind", "capacity", "gpus", "gpu_mem_gb", "data_snapshot", "job_name",
    "estimated_gpu_hours", "estimate_source", "est_compute_gpu_hours", "est_checkpoint_gpu_hours",
    "est_eval_gpu_hours", "est_data_loading_gpu_hours", "est_restart_gpu_hours", "budget_gpu_hours",
    "max_runtime_hours", "reserved_from", "reserved_until", "reserved_gpu_hours", "started_at",
    "ended_at", "actual_gpu_hours", "act_checkpoint_gpu_hours", "act_retry_gpu_hours",
    "act_eval_gpu_hours", "act_lost_work_gpu_hours", "stop_reason", "interruptions", "restarts",
    "artifact_status", "last_valid_checkpoint", "full_evaluation", "holdout_reads", "holdout_allowance",
]
REQUIRED_COLUMNS = ["run_id", "team", "kind", "gpus"]

_GROUPS = [TEXT_COLUMNS, list(ENUMS), NUMBER_COLUMNS, INTEGER_COLUMNS, TIME_COLUMNS, BOOL_COLUMNS]
assert sorted(c for g in _GROUPS for c in g) == sorted(CSV_COLUMNS), "each column in exactly one group"
