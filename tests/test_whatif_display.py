"""The What-if page: the request its form builds (the gate's own fields and types), and its estimate
table (one unit per row, an unknown bound said in words)."""
from __future__ import annotations

import json

from lib.dashboard.whatif import UPPER_UNKNOWN, request_from_form, estimate_rows
from lib.gate.request import validate

# the form's values as the widgets give them: whole numbers typed into float inputs among them
FORM = {"run_id": " whatif-1 ", "team": "vision", "kind": "production", "capacity": "preemptible", "gpus": 8.0,
        "gpu_mem_gb": 80.0, "max_runtime_hours": 24.0, "budget_gpu_hours": 200.0, "checkpoint_supported": 1,
        "expected_interruptions": 0.5, "data_snapshot": "imagenet-21k-2024", "holdout_allowance": 2.0,
        "estimate_from": "pilot", "steps_per_second": 2.0, "worst_case_steps_per_second": 0.0,
        "worst_case_share": 0.0, "peak_mem_gb": 60.0, "planned_steps": 50_000.0, "checkpoint_write_s": 30.0,
        "checkpoint_interval_steps": 2000.0, "eval_gpu_hours": 4.0, "data_loading_fraction": 0.05,
        "restart_minutes": 5.0, "estimated_gpu_hours": 40.0, "max_wall_clock_hours": 30.0,
        "spend_limit_gpu_hours": 0.0, "max_failed_steps": 50.0, "skip_full_evaluation": False,
        "early_stop_metric": "val_loss", "early_stop_mode": "", "early_stop_patience": 3.0,
        "early_stop_min_delta": 0}


def test_the_form_builds_the_request_check_reads_with_the_gates_fields_and_types():
    request = request_from_form(FORM)
    assert json.dumps(request) == json.dumps({   # the same fields, order and JSON types (8, not 8.0)
        "run_id": "whatif-1", "team": "vision", "kind": "production", "gpus": 8, "gpu_mem_gb": 80.0,
        "max_runtime_hours": 24.0, "budget_gpu_hours": 200.0, "checkpoint_supported": True,
        "expected_interruptions": 0.5, "capacity": "preemptible", "data_snapshot": "imagenet-21k-2024",
        "pilot": {"steps_per_second": 2.0, "worst_case_share": 0.0, "peak_mem_gb": 60.0,
                  "checkpoint_write_s": 30.0, "planned_steps": 50000, "checkpoint_interval_steps": 2000,
                  "eval_gpu_hours": 4.0, "data_loading_fraction": 0.05, "restart_minutes": 5.0},
        "stop_policy": {"max_wall_clock_hours": 30.0, "max_failed_steps": 50,
                        "early_stop": {"metric": "val_loss", "mode": "min", "patience": 3, "min_delta": 0.0}},
        "holdout_allowance": 2})
    assert validate(request)[1] == []


def test_a_stated_estimate_and_zeros_leave_the_optional_fields_out():
    request = request_from_form({**FORM, "estimate_from": "estimate", "data_snapshot": " ", "holdout_allowance": 0,
                             "max_wall_clock_hours": 0.0, "max_failed_steps": 0, "early_stop_metric": ""})
    assert request["estimated_gpu_hours"] == 40.0
    assert not {"pilot", "stop_policy", "data_snapshot", "holdout_allowance"} & request.keys()
    assert validate(request)[1] == []


def decision(upper):
    return {"estimate": {"items_gpu_hours": {"compute": 10.0}, "raw_gpu_hours": 10.0, "median_gpu_hours": 12.0,
                         "upper_gpu_hours": upper, "judged_gpu_hours": 12.0 if upper is None else upper,
                         "judged_at": "median" if upper is None else "upper", "wall_hours": 1.5}}


def test_an_unknown_upper_bound_is_said_in_words_never_none():
    rows = {r["item"]: r for r in estimate_rows(decision(None))}
    upper = rows["calibrated upper bound"]
    assert upper["value"] is None and upper["note"] == UPPER_UNKNOWN
    assert not any("None" in str(r["item"]) + str(r["note"]) for r in rows.values())


def test_a_known_upper_bound_has_no_unknown_note_and_the_wall_clock_is_in_hours():
    rows = {r["item"]: r for r in estimate_rows(decision(15.0))}
    assert rows["calibrated upper bound"] == {"item": "calibrated upper bound", "value": 15.0, "unit": "GPU-h",
                                              "note": ""}
    assert rows["wall clock"]["unit"] == "h"
    assert rows["judged against the budget (calibrated upper bound)"]["value"] == 15.0
