"""Properties of the decision that must hold for every request (hypothesis)."""
import math

import pytest
from hypothesis import given, settings, strategies as st

from lib.gate.admission import admit_training, decide
from lib.gate.request import FIELDS as REQUEST_FIELDS, PILOT_FIELDS as PILOT_KEYS
from tests.fixtures_gate import PILOT, history, policy, request, reservation, state

finite = st.floats(min_value=0, max_value=1e4, allow_nan=False, allow_infinity=False)
bad_number = st.one_of(st.just(math.nan), st.just(math.inf), st.just(-math.inf),
                       st.floats(max_value=-1e-9, allow_nan=False), st.booleans(), st.text(max_size=3),
                       st.none())
held = st.lists(st.builds(reservation, run_id=st.text(min_size=1, max_size=5),
                          kind=st.sampled_from(["exploratory", "production", "retraining"]),
                          gpus=st.integers(1, 8), gpu_hours=finite,
                          hours_left=st.one_of(st.none(), st.floats(0, 100))), max_size=5)
requests = st.builds(
    lambda kind, gpus, est, budget, ckpt, intr, cap, mem, runtime, use_pilot, steps: request(
        kind=kind, gpus=gpus, budget_gpu_hours=budget, checkpoint_supported=ckpt,
        expected_interruptions=intr, capacity=cap, gpu_mem_gb=mem, max_runtime_hours=runtime,
        **({"estimated_gpu_hours": ..., "pilot": {**PILOT, "planned_steps": steps}} if use_pilot
           else {"estimated_gpu_hours": est})),
    kind=st.sampled_from(["exploratory", "production", "retraining"]), gpus=st.integers(1, 16),
    est=finite, budget=finite, ckpt=st.booleans(), intr=st.floats(0, 10), cap=st.sampled_from(["stable", "preemptible"]),
    mem=st.floats(1, 160), runtime=st.floats(0.1, 200), use_pilot=st.booleans(), steps=st.integers(1, 10**6))
states = st.builds(lambda h, spent, ratios: state(h, spent=spent, hist=history(ratios=ratios)),
                   held, finite, st.lists(st.floats(0.2, 5), max_size=15))
numeric_fields = st.sampled_from(["gpus", "gpu_mem_gb", "max_runtime_hours", "budget_gpu_hours",
                                  "expected_interruptions", "estimated_gpu_hours"])


@settings(max_examples=300, deadline=None)
@given(field=numeric_fields, bad=bad_number, s=states)
def test_no_non_finite_or_negative_input_is_ever_admitted(field, bad, s):
    d = decide(request(**{field: bad}), policy(), s)
    assert d["state"] == "reject"
    assert d["reasons"][0]["field"] == field


@settings(max_examples=200, deadline=None)
@given(field=st.sampled_from(["steps_per_second", "planned_steps", "peak_mem_gb", "checkpoint_write_s",
                              "eval_gpu_hours", "worst_case_share"]), bad=bad_number)
def test_no_bad_pilot_number_is_ever_admitted(field, bad):
    d = decide(request(estimated_gpu_hours=..., pilot={**PILOT, field: bad}), policy(), state())
    assert d["state"] == "reject" and d["reasons"][0]["field"] == f"pilot.{field}"


@settings(max_examples=300, deadline=None)
@given(req=requests, s=states, extra=st.floats(0, 1e5))
def test_raising_the_budget_never_turns_an_admit_into_a_budget_deferral(req, s, extra):
    before = decide(req, policy(), s)
    after = decide({**req, "budget_gpu_hours": req["budget_gpu_hours"] + extra}, policy(), s)
    if before["state"] == "admit":
        assert after["state"] == "admit"
    assert "budget" not in {r["code"] for r in after["reasons"]} - {r["code"] for r in before["reasons"]}


@settings(max_examples=300, deadline=None)
@given(req=requests, s=states)
def test_adding_checkpoint_support_never_adds_no_recovery(req, s):
    without = decide({**req, "checkpoint_supported": False}, policy(), s)
    with_ = decide({**req, "checkpoint_supported": True}, policy(), s)
    assert "no-recovery" not in {r["code"] for r in with_["reasons"]}
    assert {r["code"] for r in with_["reasons"]} <= {r["code"] for r in without["reasons"]} | {"budget", "period-budget", "runtime-cap", "no-pilot"}


@settings(max_examples=300, deadline=None)
@given(req=requests, s=states)
def test_every_deferral_carries_a_reason_with_a_fix(req, s):
    d = decide(req, policy(), s)
    if d["state"] != "admit":
        assert d["reasons"]
        assert all(r["fix"] and r["message"] for r in d["reasons"])
    else:
        assert d["reasons"] == [] and d["reserved_gpu_hours"] >= 0


@settings(max_examples=300, deadline=None)
@given(req=requests, s=states, experiments=held)
def test_retraining_is_never_deferred_for_capacity_experiments_hold(req, s, experiments):
    req = {**req, "kind": "retraining"}
    experiments = [{**r, "kind": "exploratory"} for r in experiments]
    alone = decide(req, policy(), s)
    crowded = decide(req, policy(), {**s, "reservations": s["reservations"] + experiments})
    capacity_codes = {"capacity", "retraining-protection"}
    assert {r["code"] for r in crowded["reasons"]} & capacity_codes == \
        {r["code"] for r in alone["reasons"]} & capacity_codes


@settings(max_examples=300, deadline=None)
@given(est=finite, budget=finite, ckpt=st.booleans(), intr=st.integers(0, 10))
def test_decide_agrees_with_the_source_function_on_its_own_checks(est, budget, ckpt, intr):
    """With nothing else in play, the full decision reaches the four-argument verdict."""
    src = admit_training(est, budget, ckpt, intr)
    d = decide(request(estimated_gpu_hours=est, budget_gpu_hours=budget, checkpoint_supported=ckpt,
                       expected_interruptions=intr),
               policy(pilot_required_above_gpu_hours=1e9, monthly_budget_gpu_hours=1e9,
                      max_runtime_hours=1e9), state(hist=[]))
    assert d["state"] == src["state"]
    if src["state"] == "defer":
        assert src["reason"] in {r["code"] for r in d["reasons"]}
    else:
        assert d["reserved_gpu_hours"] == src["reserved_gpu_hours"]


json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-5, 10**6), st.floats(allow_nan=True),
              st.text(max_size=5), st.sampled_from(["exploratory", "production", "stable", "   "])),
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.text(max_size=4), inner, max_size=2),
    max_leaves=4)


@settings(max_examples=500, deadline=None)
@given(base=st.sampled_from([request(), request(estimated_gpu_hours=..., pilot=PILOT)]),
       field=st.sampled_from(sorted(set(REQUEST_FIELDS) | {"pilot", "unknown"})),
       pilot_field=st.sampled_from(sorted(PILOT_KEYS) + ["unknown"]), value=json_values,
       where=st.sampled_from(["top", "pilot", "drop"]))
def test_validate_never_crashes_and_names_a_field_for_every_problem(base, field, pilot_field, value, where):
    """Any JSON value in any field: a normalised request, or problems that each name their field."""
    from lib.gate.request import validate
    req = dict(base)
    if where == "top":
        req[field] = value
    elif where == "pilot" and "pilot" in req:
        req["pilot"] = {**req["pilot"], pilot_field: value}
    else:
        req.pop(field, None)
    normalised, problems = validate(req)
    assert (normalised is None) == bool(problems)
    assert all(p["code"] == "invalid-request" and p.get("field") for p in problems), problems
    if normalised is not None:
        assert set(req) <= set(normalised)


extreme = st.one_of(st.floats(min_value=5e-324, max_value=1e-300), st.floats(min_value=1e300, max_value=1e308),
                    st.sampled_from([5e-324, 1e-310, 1e308, 1.7e308]))


@settings(max_examples=300, deadline=None)
@given(field=st.sampled_from(["steps_per_second", "worst_case_steps_per_second", "checkpoint_write_s",
                              "eval_gpu_hours", "restart_minutes"]),
       value=extreme, steps=st.one_of(st.integers(1, 10**6), st.just(2**63 - 1)),
       loading=st.floats(0, 0.99), interruptions=st.floats(0, 1e6))
def test_extreme_but_finite_pilot_numbers_never_admit_a_non_finite_reservation(field, value, steps,
                                                                               loading, interruptions):
    """Each number finite, together overflowing: a reject or a finite decision, never a crash."""
    pilot = {**PILOT, field: value, "planned_steps": steps, "data_loading_fraction": loading}
    d = decide(request(estimated_gpu_hours=..., pilot=pilot, expected_interruptions=interruptions),
               policy(), state(hist=[]))
    if d["state"] == "admit":
        assert math.isfinite(d["reserved_gpu_hours"]) and d["reserved_gpu_hours"] >= 0
    if d["estimate"] is not None:
        assert math.isfinite(d["estimate"]["judged_gpu_hours"])


@pytest.mark.parametrize("field,value", [("holdout_allowance", 2**31), ("gpus", 2**31)])
def test_whole_numbers_beyond_the_ledger_columns_reject(field, value):
    d = decide(request(**{field: value}), policy(), state())
    assert d["state"] == "reject" and d["reasons"][0]["field"] == field


def _outcome(d: dict) -> tuple:
    return d["state"], [r["code"] for r in d["reasons"]], d["reserved_gpu_hours"], d["estimate"]


@settings(max_examples=300, deadline=None)
@given(req=requests, s=states, pool_gpus=st.one_of(st.none(), st.integers(0, 40)), cap=st.integers(1, 16),
       quota=st.integers(0, 40))
def test_a_decision_without_its_explanations_is_the_same_decision(req, s, pool_gpus, cap, quota):
    """explain=False (what a replay and the forward plan ask for) leaves out only the fixes' alternative
    counts and fit times: the state, every code in its order, the reservation and the estimate agree."""
    p = {**policy(), "max_gpus_per_job": cap, "reserved_gpus": quota}
    p["retraining_reserved_gpus"] = min(p["retraining_reserved_gpus"], quota)
    if pool_gpus is not None:
        s = {**s, "pools": {"stable": {"name": "stable", "gpus": pool_gpus, "windows": [],
                                       "reservations": [{**r, "team": "vision"} for r in s["reservations"]]}}}
    full, bare = decide(req, p, s), decide(req, p, s, explain=False)
    assert _outcome(bare) == _outcome(full)
    assert all(r.get("alternative") is None for r in bare["reasons"])
