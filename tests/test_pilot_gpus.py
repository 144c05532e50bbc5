"""A pilot measured on another number of accelerators than the request asks for: its steps/s are
scaled (linearly below the pilot's count, by the team's scaling_efficiency above it), so the GPU-hours
do not fall and the wall clock grows with fewer accelerators; the decision says so, and every fix that
suggests another accelerator count states what `decide` gives for it and never leads past the runtime cap."""
from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from lib.gate.admission import decide
from lib.gate.estimate import from_pilot
from lib.ledger.teams_file import TeamsFileError, parse_teams
from tests.fixtures_gate import PILOT, policy, request, reservation, state

# the README's example pilot (The request format)
README_PILOT = {"steps_per_second": 3.2, "worst_case_steps_per_second": 1.9, "worst_case_share": 0.08,
                "peak_mem_gb": 71, "checkpoint_write_s": 45, "planned_steps": 200000,
                "checkpoint_interval_steps": 5000, "eval_gpu_hours": 6, "data_loading_fraction": 0.04,
                "restart_minutes": 8}
COMPUTE = ("compute_typical", "compute_worst_case", "data_loading", "checkpoint")
# room for everything but the check a test is about; judged at the raw estimate (no calibration)
ROOMY = dict(max_gpus_per_job=64, reserved_gpus=64, retraining_reserved_gpus=0, max_runtime_hours=1000.0,
             monthly_budget_gpu_hours=1e6, budget_basis_production="raw", budget_basis_exploratory="raw")


def readme_request(gpus: int, pilot_gpus: int | None = None, **changes) -> dict:
    pilot = {**README_PILOT, **({"gpus": pilot_gpus} if pilot_gpus is not None else {})}
    return request(**{"kind": "production", "gpus": gpus, "budget_gpu_hours": 1000, "max_runtime_hours": 200,
                      "expected_interruptions": 1, "estimated_gpu_hours": ..., "pilot": pilot, **changes})


def estimate(gpus: int, pilot_gpus: int | None = None, efficiency: float | None = None, **changes) -> dict:
    pol = policy(**ROOMY, **({"scaling_efficiency": efficiency} if efficiency is not None else {}))
    d = decide(readme_request(gpus, pilot_gpus, **changes), pol, state(hist=[]))
    assert d["state"] == "admit", d["reasons"]
    return d["estimate"]


def test_the_readme_pilot_on_half_its_accelerators_costs_the_same_gpu_hours_over_twice_the_wall_clock():
    on_16 = estimate(16)
    on_8 = estimate(8, pilot_gpus=16)
    assert on_16["raw_gpu_hours"] == pytest.approx(325, abs=1) and on_16["wall_hours"] == pytest.approx(20.3, abs=0.1)
    # the compute, loading and checkpoint GPU-hours are the pilot's; only the restart's idle time is on fewer
    for item in COMPUTE:
        assert on_8["items_gpu_hours"][item] == pytest.approx(on_16["items_gpu_hours"][item])
    assert on_8["raw_gpu_hours"] == pytest.approx(on_16["raw_gpu_hours"], rel=0.01)
    assert on_8["wall_hours"] == pytest.approx(2 * on_16["wall_hours"], rel=0.01)
    assert on_8["wall_hours"] == pytest.approx(40.5, abs=0.1)
    # the pilot measured on 8 is another pilot: half the GPU-hours (what the gate assumed before pilot.gpus)
    assert estimate(8)["raw_gpu_hours"] < 0.6 * on_16["raw_gpu_hours"]


def test_a_pilot_without_gpus_is_taken_as_measured_on_the_requests_accelerators():
    for gpus in (1, 8, 16):
        plain = decide(readme_request(gpus), policy(**ROOMY), state(hist=[]))
        same = decide(readme_request(gpus, pilot_gpus=gpus), policy(**ROOMY), state(hist=[]))
        assert plain == same
        assert not [n for n in plain["notes"] if n["code"] == "gpus-differ-from-pilot"]


def test_the_decision_notes_when_the_request_and_the_pilot_differ_in_accelerators():
    d = decide(readme_request(8, pilot_gpus=16), policy(**ROOMY), state(hist=[]))
    [n] = [n for n in d["notes"] if n["code"] == "gpus-differ-from-pilot"]
    assert "16" in n["message"] and "8" in n["message"] and f"{d['estimate']['wall_hours']:.1f} h" in n["message"]


@settings(max_examples=200, deadline=None)
@given(pilot_gpus=st.integers(1, 256), gpus=st.integers(1, 256), efficiency=st.floats(0, 1),
       ckpt=st.booleans())
def test_fewer_accelerators_than_the_pilot_never_lower_the_compute_gpu_hours_and_never_shorten_the_wall(
        pilot_gpus, gpus, efficiency, ckpt):
    def items(g):
        e = from_pilot({**PILOT, "gpus": pilot_gpus}, gpus=g, expected_interruptions=0, checkpoint_supported=ckpt,
                       skip_full_evaluation=False, scaling_efficiency=efficiency)
        return sum(e["items_gpu_hours"][k] for k in COMPUTE), e["wall_hours"]
    gpu_h, wall = items(gpus)
    pilot_gpu_h, pilot_wall = items(pilot_gpus)
    if gpus <= pilot_gpus:
        assert gpu_h >= pilot_gpu_h * (1 - 1e-9)
        assert wall >= pilot_wall * (1 - 1e-9)
    else:   # more accelerators: never fewer GPU-hours either (scaling costs, it never saves)
        assert gpu_h >= pilot_gpu_h * (1 - 1e-9)
        if efficiency == 1.0 and not ckpt:
            assert gpu_h == pytest.approx(pilot_gpu_h)


def test_scaling_efficiency_below_one_makes_the_accelerators_beyond_the_pilot_cost_gpu_hours():
    linear, half = estimate(32, pilot_gpus=16), estimate(32, pilot_gpus=16, efficiency=0.5)
    # each of the 16 added accelerators brings half of one: 1.5× the pilot's steps/s on 2× the accelerators
    assert half["items_gpu_hours"]["compute_typical"] == pytest.approx(linear["items_gpu_hours"]["compute_typical"] * 2 / 1.5)
    assert half["wall_hours"] > linear["wall_hours"]
    # below the pilot's count the efficiency changes nothing: no credit for running on fewer
    assert estimate(8, pilot_gpus=16, efficiency=0.5) == estimate(8, pilot_gpus=16)
    # the worst-case rate scales the same way
    assert half["items_gpu_hours"]["compute_worst_case"] == pytest.approx(
        linear["items_gpu_hours"]["compute_worst_case"] * 2 / 1.5)


def test_the_runtime_cap_refuses_the_longer_wall_clock_of_fewer_accelerators():
    pol = policy(**{**ROOMY, "max_runtime_hours": 36.0})
    assert decide(readme_request(16, max_runtime_hours=36), pol, state(hist=[]))["state"] == "admit"
    d = decide(readme_request(8, pilot_gpus=16, max_runtime_hours=36), pol, state(hist=[]))
    assert [r["code"] for r in d["reasons"]] == ["runtime-cap"]
    assert d["reasons"][0]["requested"] == pytest.approx(d["estimate"]["wall_hours"], abs=0.01)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "8", None, 2**31])
def test_a_bad_pilot_gpus_is_rejected_naming_the_field(bad):
    d = decide(readme_request(8, pilot={**README_PILOT, "gpus": bad}), policy(**ROOMY), state(hist=[]))
    assert d["state"] == "reject" and [r["field"] for r in d["reasons"]] == ["pilot.gpus"]


TEAM = """[teams.vision]
reserved_gpus = 16
max_gpus_per_job = 8
max_gpu_mem_gb = 80
max_runtime_hours = 72
monthly_budget_gpu_hours = 5000
"""


def test_the_teams_file_takes_a_scaling_efficiency_from_0_to_1_defaulting_to_linear():
    [plain], _ = parse_teams(TEAM)
    [one], _ = parse_teams(TEAM + "scaling_efficiency = 1\n")
    [lower], _ = parse_teams(TEAM + "scaling_efficiency = 0.9\n")
    assert plain["scaling_efficiency"] == one["scaling_efficiency"] == 1.0 and lower["scaling_efficiency"] == 0.9
    assert plain["policy_version"] == one["policy_version"] != lower["policy_version"]
    for bad in ("1.5", "-0.1", '"high"', "nan", "inf"):
        with pytest.raises(TeamsFileError) as exc:
            parse_teams(TEAM + f"scaling_efficiency = {bad}\n")
        assert any("[teams.vision] scaling_efficiency" in p for p in exc.value.problems), exc.value.problems


# ---------------------------------------------------------------- fixes that suggest another GPU count

def decided_on(req: dict, reason: dict, pol: dict, s: dict) -> dict:
    """The request the fix leads to (its alternative count, the pilot's own kept), decided."""
    changed = {**req, "gpus": reason["alternative"]["gpus"]}
    if "pilot" in req:
        changed["pilot"] = {**req["pilot"], "gpus": req["pilot"].get("gpus", req["gpus"])}
    return decide(changed, pol, s)


def test_the_capacity_fix_states_the_wall_clock_and_estimate_of_fewer_accelerators():
    """The issue's case: a 16-GPU pilot, 8 accelerators free: the fix says ~40 h, not ~20 h."""
    pol = policy(**{**ROOMY, "reserved_gpus": 24})
    s = state([reservation(gpus=16, hours_left=30)], hist=[])
    req = readme_request(16)
    d = decide(req, pol, s)
    [r] = d["reasons"]
    assert r["code"] == "capacity" and r["alternative"]["gpus"] == 8
    other = decided_on(req, r, pol, s)
    assert other["state"] == "admit"
    assert r["alternative"]["wall_hours"] == pytest.approx(other["estimate"]["wall_hours"], abs=0.01)
    assert r["alternative"]["judged_gpu_hours"] == pytest.approx(other["estimate"]["judged_gpu_hours"], abs=0.01)
    assert f"{other['estimate']['wall_hours']:.1f} h wall clock" in r["fix"]
    assert f"{other['estimate']['judged_gpu_hours']:.1f} GPU-h" in r["fix"]
    assert "8 fewer accelerators" in r["fix"]


def test_a_capacity_fix_never_suggests_fewer_accelerators_the_runtime_cap_would_refuse():
    pol = policy(**{**ROOMY, "reserved_gpus": 24, "max_runtime_hours": 36.0})
    s = state([reservation(gpus=16, hours_left=30)], hist=[])
    req = readme_request(16, max_runtime_hours=36)
    [r] = decide(req, pol, s)["reasons"]
    assert r["code"] == "capacity"
    assert "fewer accelerators (≤" not in r["fix"] and "above the per-job runtime cap 36 h" in r["fix"]
    assert "when running reservations end" in r["fix"]   # waiting is the fix left
    assert "runtime-cap" in [x["code"] for x in decided_on(req, r, pol, s)["reasons"]]


def test_the_gpu_cap_fix_states_what_the_cap_gives_or_says_it_does_not_fit_the_runtime_cap():
    req = readme_request(16, max_runtime_hours=36)
    pol = policy(**{**ROOMY, "max_gpus_per_job": 8})
    [r] = decide(req, pol, state(hist=[]))["reasons"]
    assert r["code"] == "gpu-cap" and r["alternative"]["gpus"] == 8
    assert "max_runtime_hours ≥ 40.6" in r["fix"]   # the limit the longer run needs, within the cap
    assert decide({**req, "gpus": 8, "pilot": {**req["pilot"], "gpus": 16}, "max_runtime_hours": 40.6},
                  pol, state(hist=[]))["state"] == "admit"
    pol = policy(**{**ROOMY, "max_gpus_per_job": 8, "max_runtime_hours": 36.0})
    [r] = decide(req, pol, state(hist=[]))["reasons"]
    assert "fewer accelerators (≤" not in r["fix"] and "would not help" in r["fix"]


held = st.lists(st.builds(reservation, run_id=st.text(min_size=1, max_size=4), gpus=st.integers(1, 12),
                          hours_left=st.floats(0.5, 100)), max_size=4)


@settings(max_examples=150, deadline=None)
@given(gpus=st.integers(1, 32), pilot_gpus=st.integers(1, 32), steps=st.integers(1000, 400_000),
       cap_gpus=st.integers(1, 24), runtime_cap=st.floats(2, 80), efficiency=st.floats(0, 1),
       reservations=held, kind=st.sampled_from(["exploratory", "retraining"]))
def test_every_fix_with_another_gpu_count_is_what_decide_gives_and_never_past_the_runtime_cap(
        gpus, pilot_gpus, steps, cap_gpus, runtime_cap, efficiency, reservations, kind):
    pol = policy(**{**ROOMY, "reserved_gpus": 24, "retraining_reserved_gpus": 4, "max_gpus_per_job": cap_gpus,
                    "max_runtime_hours": runtime_cap, "scaling_efficiency": efficiency})
    s = state(reservations, hist=[])
    req = request(kind=kind, gpus=gpus, budget_gpu_hours=1e5, max_runtime_hours=min(runtime_cap, 24.0),
                  estimated_gpu_hours=..., pilot={**README_PILOT, "planned_steps": steps, "gpus": pilot_gpus})
    for r in decide(req, pol, s)["reasons"]:
        if "alternative" not in r:
            continue
        other = decided_on(req, r, pol, s)
        assert r["alternative"]["wall_hours"] == pytest.approx(other["estimate"]["wall_hours"], abs=0.01)
        assert r["alternative"]["judged_gpu_hours"] == pytest.approx(other["estimate"]["judged_gpu_hours"], abs=0.01)
        refused_for_runtime = "runtime-cap" in [x["code"] for x in other["reasons"]]
        # the fix says so exactly when the count it names would be refused for runtime
        assert refused_for_runtime == ("above the per-job runtime cap" in r["fix"]), r["fix"]
        if refused_for_runtime:
            assert "fewer accelerators (≤" not in r["fix"]
        else:
            assert f"{other['estimate']['wall_hours']:.1f} h wall clock" in r["fix"]
