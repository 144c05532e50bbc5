"""The full decision: every failing check at once, in the documented order, each with a fix."""
import json

import pytest

from lib.gate.admission import decide
from lib.gate.reasons import CODES, ORDER
from tests.fixtures_gate import NOW, PILOT, history, policy, request, reservation, state


def codes(decision):
    return [r["code"] for r in decision["reasons"]]


def test_a_request_within_every_limit_is_admitted_with_its_reservation():
    d = decide(request(), policy(), state())
    assert d["state"] == "admit", d["reasons"]
    assert d["reasons"] == []
    assert d["reserved_gpu_hours"] == pytest.approx(d["estimate"]["judged_gpu_hours"])
    assert d["policy_version"] == "test-v1"
    assert d["estimate"]["source"] == "stated"
    json.dumps(d)  # the decision is plain JSON-able data


def test_exploratory_is_judged_at_the_median_production_at_the_upper_bound():
    hist = history(kind="exploratory", ratios=[1.2] * 10 + [2.0, 2.0]) + \
        history(kind="production", ratios=[1.2] * 10 + [2.0, 2.0])
    ex = decide(request(kind="exploratory"), policy(), state(hist=hist))
    pr = decide(request(kind="production"), policy(), state(hist=hist))
    assert ex["estimate"]["judged_at"] == "median"
    assert ex["estimate"]["judged_gpu_hours"] == pytest.approx(18.5 * 1.2)
    assert pr["estimate"]["judged_at"] == "upper"
    assert pr["estimate"]["judged_gpu_hours"] == pytest.approx(18.5 * 2.0)
    assert ex["state"] == "admit" and pr["state"] == "defer" and codes(pr) == ["budget"]


def test_policy_can_change_the_basis():
    hist = history(ratios=[1.2] * 10 + [2.0, 2.0])
    d = decide(request(), policy(budget_basis_exploratory="upper"), state(hist=hist))
    assert d["estimate"]["judged_at"] == "upper"
    d = decide(request(), policy(budget_basis_exploratory="raw"), state(hist=hist))
    assert d["estimate"]["judged_gpu_hours"] == pytest.approx(18.5)


def test_unknown_bound_is_said_not_invented():
    d = decide(request(kind="production"), policy(), state(hist=history(ratios=[1.0] * 3)))
    assert d["estimate"]["upper_gpu_hours"] is None
    assert d["estimate"]["judged_at"] == "median"
    assert [n["code"] for n in d["notes"]] == ["calibration-unknown"]
    assert "bound unknown" in d["notes"][0]["message"]


def test_every_failing_check_comes_back_in_the_documented_order():
    req = request(data_snapshot="nowhere", estimated_gpu_hours=900.0, budget_gpu_hours=100,
                  gpus=12, gpu_mem_gb=120, max_runtime_hours=100, checkpoint_supported=False,
                  capacity="preemptible")
    d = decide(req, policy(), state(reservations=[reservation(gpus=10)], spent=4500.0,
                                    hist=history(ratios=[1.0] * 3)))
    assert d["state"] == "defer"
    assert codes(d) == ["no-snapshot", "no-pilot", "budget", "period-budget", "gpu-cap", "memory-cap",
                        "runtime-cap", "no-recovery", "capacity", "retraining-protection"]
    assert codes(d) == sorted(codes(d), key=ORDER.__getitem__)
    for r in d["reasons"]:
        assert r["code"] in CODES and r["message"] and r["fix"]
    assert d["reserved_gpu_hours"] is None


def test_reasons_carry_the_numbers_and_a_fix():
    d = decide(request(estimated_gpu_hours=28.0), policy(), state(hist=[]))
    (r,) = d["reasons"]
    assert (r["code"], r["requested"], r["limit"], r["unit"]) == ("budget", 28.0, 23, "GPU-h")
    assert "budget_gpu_hours ≥ 28.0" in r["fix"]


def test_period_budget_counts_committed_reservations():
    held = reservation(gpus=2, gpu_hours=990.0)
    d = decide(request(), policy(monthly_budget_gpu_hours=1000.0), state(reservations=[held], hist=[]))
    (r,) = d["reasons"]
    assert r["code"] == "period-budget" and r["in_use"] == pytest.approx(990.0)
    assert "≤ 10.0 GPU-h" in r["fix"] and "2027-01-01" in r["fix"]
    assert decide(request(), policy(monthly_budget_gpu_hours=1010.0),
                  state(reservations=[held], hist=[]))["state"] == "admit"


def test_missing_snapshot_and_unknown_snapshot_defer():
    assert codes(decide(request(data_snapshot=None), policy(), state())) == ["no-snapshot"]
    assert codes(decide(request(data_snapshot=...), policy(), state())) == ["no-snapshot"]
    assert codes(decide(request(data_snapshot="other"), policy(), state())) == ["no-snapshot"]


def test_no_pilot_above_the_threshold():
    d = decide(request(estimated_gpu_hours=60.0, budget_gpu_hours=100), policy(), state(hist=[]))
    assert codes(d) == ["no-pilot"]
    d = decide(request(estimated_gpu_hours=..., pilot=PILOT, budget_gpu_hours=100), policy(), state(hist=[]))
    assert "no-pilot" not in codes(d)


def test_pilot_peak_memory_must_fit_the_accelerator():
    pilot = {**PILOT, "peak_mem_gb": 90.0}
    d = decide(request(estimated_gpu_hours=..., pilot=pilot, gpu_mem_gb=80, budget_gpu_hours=500),
               policy(), state(hist=[]))
    assert codes(d) == ["memory"]
    assert "gpu_mem_gb ≥ 90" in d["reasons"][0]["fix"]


def test_no_recovery_on_preemptible_capacity_even_without_expected_interruptions():
    d = decide(request(checkpoint_supported=False, expected_interruptions=0, capacity="preemptible"),
               policy(), state(hist=[]))
    assert codes(d) == ["no-recovery"]
    d = decide(request(checkpoint_supported=False, expected_interruptions=0), policy(), state(hist=[]))
    assert d["state"] == "admit"


def test_capacity_fix_names_fewer_accelerators_and_when_reservations_end():
    held = [reservation("a", gpus=6, hours_left=3), reservation("b", gpus=6, hours_left=1)]
    d = decide(request(gpus=6, kind="retraining"), policy(retraining_reserved_gpus=0), state(held, hist=[]))
    assert d["state"] == "admit"  # retraining ignores experiments' holdings
    d = decide(request(gpus=6), policy(retraining_reserved_gpus=0), state(held, hist=[]))
    (r,) = d["reasons"]
    assert r["code"] == "capacity" and r["in_use"] == 12 and r["limit"] == 16
    assert "2 fewer accelerators" in r["fix"]
    assert (NOW.replace(hour=13)).isoformat(timespec="minutes") in r["fix"]


def test_experiments_never_take_the_retraining_set_aside():
    d = decide(request(gpus=8), policy(), state([reservation(gpus=6)], hist=[]))
    assert codes(d) == ["retraining-protection"]  # 6 + 8 = 14 ≤ 16 reserved, but > 12 left to experiments


def test_retraining_is_not_deferred_for_capacity_experiments_hold():
    held = [reservation("exp", gpus=12)]
    d = decide(request(kind="retraining", gpus=8, budget_gpu_hours=100), policy(), state(held, hist=[]))
    assert d["state"] == "admit"
    assert d["preempts_experiment_gpus"] == 4


def test_retraining_is_deferred_when_retraining_alone_fills_the_quota():
    held = [reservation("rt", kind="retraining", gpus=12)]
    d = decide(request(kind="retraining", gpus=8, budget_gpu_hours=100), policy(), state(held, hist=[]))
    assert codes(d) == ["capacity"]


@pytest.mark.parametrize("field,value", [
    ("gpus", 0), ("gpus", 1.5), ("gpus", True), ("gpus", "2"), ("budget_gpu_hours", float("nan")),
    ("budget_gpu_hours", float("inf")), ("estimated_gpu_hours", -1), ("kind", "urgent"),
    ("capacity", "spot"), ("checkpoint_supported", 1), ("expected_interruptions", None),
    ("team", ""), ("submitted_at", "yesterday"), ("surprise", 1),
])
def test_invalid_fields_reject_naming_the_field(field, value):
    d = decide(request(**{field: value}), policy(), state())
    assert d["state"] == "reject"
    assert [r["field"] for r in d["reasons"]] == [field]
    assert d["reserved_gpu_hours"] is None


def test_all_invalid_fields_are_reported_at_once():
    d = decide(request(gpus=-1, kind="x", run_id=...), policy(), state())
    assert {r["field"] for r in d["reasons"]} == {"gpus", "kind", "run_id"}


@pytest.mark.parametrize("payload", [None, [], "text", 3, {"pilot": "fast"}])
def test_non_object_payloads_reject_and_never_crash(payload):
    assert decide(payload, policy(), state())["state"] == "reject"


def test_estimate_and_pilot_together_reject():
    d = decide(request(pilot=PILOT), policy(), state())
    assert d["state"] == "reject" and d["reasons"][0]["field"] == "estimated_gpu_hours"


def test_stop_policy_reading_the_holdout_is_refused_and_a_valid_one_is_fingerprinted():
    bad = {"early_stop": {"metric": "holdout_accuracy", "mode": "max", "patience": 3}}
    d = decide(request(stop_policy=bad), policy(), state())
    assert d["state"] == "reject" and d["reasons"][0]["field"] == "stop_policy.early_stop.metric"
    good = {"max_wall_clock_hours": 24, "early_stop": {"metric": "val_loss", "mode": "min", "patience": 3}}
    d = decide(request(stop_policy=good), policy(), state())
    assert d["state"] == "admit" and len(d["stop_policy_fingerprint"]) == 16


def test_production_may_not_skip_full_evaluation():
    d = decide(request(kind="production", skip_full_evaluation=True), policy(), state())
    assert d["state"] == "reject" and d["reasons"][0]["field"] == "skip_full_evaluation"
    d = decide(request(kind="production", estimated_gpu_hours=..., pilot={**PILOT, "eval_gpu_hours": 0}),
               policy(), state())
    assert d["state"] == "reject" and d["reasons"][0]["field"] == "pilot.eval_gpu_hours"


def test_unknown_team_rejects():
    d = decide(request(team="ghosts"), policy(), state())
    assert d["state"] == "reject" and d["reasons"][0]["field"] == "team"
    assert decide(request(), None, state())["state"] == "reject"


def test_runtime_cap_reads_the_estimated_wall_clock_too():
    d = decide(request(estimated_gpu_hours=20.0, gpus=1, max_runtime_hours=10, budget_gpu_hours=30),
               policy(max_runtime_hours=12), state(hist=[]))
    assert codes(d) == ["runtime-cap"]
    [n] = [n for n in d["notes"] if n["code"] == "walltime-exceeds-limit"]
    assert "would stop on wall clock" in n["message"]
