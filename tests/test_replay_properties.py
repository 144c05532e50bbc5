"""Properties of policy replay (lib.planning.replay.passes) over small replay worlds built as plain data.

Monotonic in the limits: when the replayed requests do not interact (each one's reservation window
has passed before the next, and none ran, so none spends or calibrates), a proposal that only raises
quotas, budgets or caps never adds a deferral for capacity, budget or caps, and one that only lowers
them never removes one. When admitted runs do interact, raising a quota can defer a later request
(the last test shows one), which is why the properties are stated for non-interacting requests.
"""
from __future__ import annotations

import json
from datetime import datetime, timedelta

from hypothesis import given, settings, strategies as st

from lib.planning.replay.passes import NOT_SENT, replay

T0 = datetime(2026, 6, 3, 9, 0)
SPACING = timedelta(hours=400)   # longer than any reservation window below (wall <= 60 h x calibration)
LIMIT_CODES = {"capacity", "retraining-protection", "budget", "period-budget", "gpu-cap", "memory-cap",
               "runtime-cap"}


def base_policy(reserved=8, set_aside=2, per_job=8, mem=80.0, runtime=48.0, monthly=1000.0) -> dict:
    return {"team": "t", "reserved_gpus": reserved, "retraining_reserved_gpus": set_aside,
            "max_gpus_per_job": per_job, "max_gpu_mem_gb": mem, "max_runtime_hours": runtime,
            "monthly_budget_gpu_hours": monthly, "pilot_required_above_gpu_hours": 1000.0,
            "budget_basis_production": "upper", "budget_basis_exploratory": "median",
            "budget_basis_retraining": "upper", "preemptible_partitions": [], "policy_version": "p"}


def recorded(i: int, at: datetime, request: dict, state="admit", codes=(), reserved=None) -> dict:
    return {"decision_id": i, "decided_at": at, "run_id": request["run_id"], "team": request["team"],
            "kind": request["kind"], "request_json": json.dumps(request), "state": state,
            "reason_codes": list(codes), "reserved_gpu_hours": reserved}


def world(holds=(), history=12, runs=None) -> dict:
    """Background: long holds crossing the window, spend this month, and `history` finished runs
    (ratio 1.1-1.5) before the window, so calibration has a bound."""
    ends = [(T0 - timedelta(days=30 - i), "t", "exploratory" if i % 2 else "production", 10.0 * (1.1 + 0.04 * i),
             (10.0, False), None) for i in range(history)]
    hold_list = [{"start": T0 - timedelta(days=1), "release": T0 + timedelta(days=400),
                  "reservation": {"run_id": f"bg-{i}", "team": "t", "kind": kind, "gpus": gpus,
                                  "reserved_gpu_hours": 5.0 * gpus, "reserved_from": T0 - timedelta(days=1),
                                  "reserved_until": T0 + timedelta(days=400)}}
                 for i, (kind, gpus) in enumerate(holds)]
    return {"holdings": hold_list, "ends": ends, "runs": runs or {}, "snapshots": {None: {"snap"}}}


def request(i: int, kind: str, gpus: int, mem: float, runtime: float, est: float, budget: float) -> dict:
    return {"run_id": f"r-{i}", "team": "t", "kind": kind, "gpus": gpus, "gpu_mem_gb": mem,
            "max_runtime_hours": runtime, "budget_gpu_hours": budget, "checkpoint_supported": True,
            "expected_interruptions": 0, "capacity": "stable", "data_snapshot": "snap",
            "estimated_gpu_hours": est, **({"holdout_allowance": 1} if kind == "production" else {})}


requests_st = st.lists(st.tuples(
    st.sampled_from(["exploratory", "production", "retraining"]), st.integers(1, 16),
    st.sampled_from([40.0, 80.0, 120.0]), st.floats(1, 60), st.floats(0.5, 40), st.floats(0.5, 3.0)),
    min_size=1, max_size=8)
policy_st = st.tuples(st.integers(0, 16), st.integers(0, 16), st.integers(1, 16),
                      st.sampled_from([40.0, 80.0]), st.floats(5, 60), st.floats(0, 3000))
raise_st = st.tuples(st.integers(0, 8), st.integers(0, 8), st.sampled_from([0.0, 40.0]),
                     st.floats(0, 50), st.floats(0, 2000))
holds_st = st.lists(st.tuples(st.sampled_from(["exploratory", "retraining"]), st.integers(1, 6)), max_size=3)


def codes_per_request(reqs, policy, holds) -> list[set]:
    rows = [recorded(i, T0 + i * SPACING, request(i, k, g, m, rt, wall * g, wall * g * b))
            for i, (k, g, m, rt, wall, b) in enumerate(reqs)]
    result = replay(rows, {"t": policy}, world(holds), refresh="exact")
    assert result["excluded"]["count"] == 0, result["excluded"]
    by_id = {}
    for c in result["changed_requests"]:
        by_id[c["decision_id"]] = set(c["proposed_reasons"]) & LIMIT_CODES
    # requests not listed as changed kept the recorded state (admit, no reasons)
    return [by_id.get(i, set()) for i in range(len(rows))]


def policies(base, up):
    reserved, set_aside, per_job, mem, runtime, monthly = base
    set_aside = min(set_aside, reserved)
    d_res, d_job, d_mem, d_rt, d_month = up
    low = base_policy(reserved, set_aside, per_job, mem, runtime, monthly)
    high = base_policy(reserved + d_res, set_aside, per_job + d_job, mem + d_mem, runtime + d_rt, monthly + d_month)
    return low, high


@settings(max_examples=80, deadline=None)
@given(requests_st, policy_st, raise_st, holds_st)
def test_raising_limits_never_adds_and_lowering_never_removes_a_limit_deferral(reqs, base, up, holds):
    """Going from `low` to `high` raises quotas, budgets and caps; going back lowers them: each
    request's limit deferrals under `high` are a subset of those under `low`."""
    low, high = policies(base, up)
    for under_low, under_high in zip(codes_per_request(reqs, low, holds), codes_per_request(reqs, high, holds)):
        assert under_high <= under_low, (under_low, under_high)


def test_an_admitted_run_holds_for_its_recorded_duration_from_the_replayed_admission():
    """A request deferred in reality and admitted 10 h later ran for 5 h after that admission: under a
    policy that admits it at once it holds its accelerators for those 5 h from then, and spends its
    actual when it ends. Requests 4 h and 6 h later see it holding, then gone (and its spend)."""
    big = request(0, "exploratory", 6, 80.0, 20, 180.0, 300.0)   # a 30-hour reservation window
    runs = {"r-0": {"run_id": "r-0", "team": "t", "kind": "exploratory", "gpus": 6,
                    "reserved_until": T0 + timedelta(hours=40), "reserved_gpu_hours": 180.0,
                    "started_at": T0 + timedelta(hours=10), "ended_at": T0 + timedelta(hours=15),
                    "actual_gpu_hours": 30.0, "admitted_at": T0 + timedelta(hours=10), "controlled": True,
                    "booked_at": None, "calibration": None}}
    rows = [recorded(0, T0, big, "defer", ["capacity"]),
            recorded(1, T0 + timedelta(hours=4), request(1, "exploratory", 4, 80.0, 2, 2.0, 10.0)),
            recorded(2, T0 + timedelta(hours=6), request(2, "exploratory", 4, 80.0, 2, 2.0, 10.0)),
            recorded(3, T0 + timedelta(hours=10), big)]
    policy = base_policy(reserved=8, set_aside=0, monthly=1000.0)
    result = replay(rows, {"t": policy}, world(history=0, runs=runs), refresh="exact")
    changed = {c["decision_id"]: c for c in result["changed_requests"]}
    assert changed[0]["proposed_state"] == "admit"
    assert changed[1]["proposed_reasons"] == ["capacity"]          # 6 held + 4 > 8
    assert 2 not in changed                                      # released after 5 h: admitted
    # its retry, admitted in reality, is not sent: the run is booked already, and holds once
    assert 3 not in changed and [(e["decision_id"], e["why"]) for e in result["excluded"]["requests"]] == [(3, NOT_SENT)]
    team = result["teams"][0]["proposed"]
    assert team["used_gpu_hours"] == 30.0 and team["budget_breaches"] == 0   # 30 used of 180 reserved


def test_a_request_deferred_in_the_replay_consumes_nothing():
    """Admitted in reality (holding 8 of 8 and spending 900 of 1000), deferred under a lower per-job
    cap: the next request then sees neither the holding nor the spend."""
    first = request(0, "exploratory", 8, 80.0, 20, 16.0, 100.0)
    runs = {"r-0": {"run_id": "r-0", "team": "t", "kind": "exploratory", "gpus": 8,
                    "reserved_until": T0 + timedelta(hours=30), "reserved_gpu_hours": 16.0,
                    "started_at": T0, "ended_at": T0 + timedelta(hours=2), "actual_gpu_hours": 900.0,
                    "admitted_at": T0, "controlled": True, "booked_at": None, "calibration": None}}
    rows = [recorded(0, T0, first, reserved=16.0),
            recorded(1, T0 + timedelta(hours=1), request(1, "exploratory", 4, 80.0, 2, 8.0, 100.0),
                     "defer", ["capacity"]),
            recorded(2, T0 + timedelta(hours=3), request(2, "exploratory", 4, 80.0, 2, 160.0, 300.0),
                     "defer", ["period-budget"])]
    policy = base_policy(reserved=8, set_aside=0, per_job=4, monthly=1000.0)
    result = replay(rows, {"t": policy}, world(history=0, runs=runs), refresh="exact")
    changed = {c["decision_id"]: c for c in result["changed_requests"]}
    assert changed[0]["proposed_reasons"] == ["gpu-cap"]
    assert changed[1]["proposed_state"] == "admit" and changed[2]["proposed_state"] == "admit"


def test_raising_a_quota_can_defer_a_later_request_when_admitted_runs_interact():
    """Why the monotonic properties above keep requests apart: with quota 4 the 5-GPU request can never
    fit and two 4-GPU requests each fit; with quota 5 it is admitted and holds 5, deferring both."""
    rows = [recorded(0, T0, request(0, "exploratory", 5, 80.0, 20, 50.0, 100.0), "defer", ["capacity"]),
            recorded(1, T0 + timedelta(hours=1), request(1, "exploratory", 4, 80.0, 2, 4.0, 10.0)),
            recorded(2, T0 + timedelta(hours=2), request(2, "exploratory", 4, 80.0, 2, 4.0, 10.0))]
    low = base_policy(reserved=4, set_aside=0, per_job=8)
    high = base_policy(reserved=5, set_aside=0, per_job=8)
    assert replay(rows, {"t": low}, world(history=0))["teams"][0]["proposed"]["deferrals_by_reason"] == {"capacity": 1}
    assert replay(rows, {"t": high}, world(history=0))["teams"][0]["proposed"]["deferrals_by_reason"] == {"capacity": 2}


def test_a_run_the_record_admitted_and_the_replay_defers_is_retried_at_its_earliest_fit():
    """Admitted in reality at once, deferred under a quota that a 6-GPU holder fills until T0 + 5 h: the
    record has no later retry of it, so the replay sends one at its earliest fit. Admitted then, it
    holds for its recorded duration from that admission, and a request during that time sees it."""
    holder = request(0, "exploratory", 6, 80.0, 20, 30.0, 300.0)
    late = request(1, "exploratory", 4, 80.0, 20, 8.0, 300.0)
    runs = {"r-0": {"run_id": "r-0", "team": "t", "kind": "exploratory", "gpus": 6,
                    "reserved_until": T0 + timedelta(hours=30), "reserved_gpu_hours": 30.0, "started_at": T0,
                    "ended_at": T0 + timedelta(hours=5), "actual_gpu_hours": 30.0, "admitted_at": T0,
                    "controlled": True, "booked_at": None, "calibration": None},
            "r-1": {"run_id": "r-1", "team": "t", "kind": "exploratory", "gpus": 4,
                    "reserved_until": T0 + timedelta(hours=40), "reserved_gpu_hours": 8.0,
                    "started_at": T0 + timedelta(hours=1), "ended_at": T0 + timedelta(hours=3),
                    "actual_gpu_hours": 8.0, "admitted_at": T0 + timedelta(hours=1), "controlled": True,
                    "booked_at": None, "calibration": None}}
    probe = request(2, "exploratory", 6, 80.0, 20, 1.0, 300.0)
    rows = [recorded(0, T0, holder), recorded(1, T0 + timedelta(hours=1), late),
            recorded(2, T0 + timedelta(hours=6), probe)]
    result = replay(rows, {"t": base_policy(reserved=8, set_aside=0)}, world(history=0, runs=runs), refresh="exact")
    changed = {c["decision_id"]: c for c in result["changed_requests"]}
    assert changed[1]["proposed_reasons"] == ["capacity"]           # 6 held + 4 > 8 until T0 + 5 h
    team = result["teams"][0]["proposed"]
    assert team["admit"] == 2 and team["defer"] == 2                # r-1's retry admitted at T0 + 5 h
    assert team["used_gpu_hours"] == 30.0 + 8.0
    # r-1 holds 4 from T0 + 5 h for its recorded 2 h: the probe at T0 + 6 h does not fit beside it
    assert changed[2]["proposed_reasons"] == ["capacity"]
    # without a fit inside the window (it ends at the last request) no retry is sent
    short = replay(rows[:2], {"t": base_policy(reserved=8, set_aside=0)}, world(history=0, runs=runs),
                   refresh="exact")
    assert short["teams"][0]["proposed"]["admit"] == 1 and short["teams"][0]["proposed"]["defer"] == 1
