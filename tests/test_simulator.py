"""lib.planning.simulate against the closed forms, exact hand-worked cases and itself."""
import math

import numpy as np
import pytest

from lib.planning.preemption import expected_time
from lib.planning.simulate import simulate, simulate_reference

RUNS = 20_000

CASES = [
    # work_h, interval_h, checkpoint_h, restart_h, mtbf_h, downtime_h, restart_first
    (24.0, 1.0, 5 / 60, 0.25, 6.0, 0.1, False),
    (24.0, 1.0, 5 / 60, 0.25, 1.35, 0.0, False),
    (3.0, None, 0.0, 0.1, 4.0, 0.0, False),
    (10.0, 3.0, 0.2, 0.3, 2.0, 0.5, False),
    (8.0, 2.0, 0.1, 0.5, 3.0, 0.0, True),
]


def within(samples, expected, k=4.0):
    se = np.std(samples, ddof=1) / math.sqrt(len(samples))
    return abs(np.mean(samples) - expected) <= k * se + 1e-12


@pytest.mark.parametrize("w, tau, c, r, m, d, rf", CASES)
def test_agrees_with_the_closed_form_within_sampling_error(w, tau, c, r, m, d, rf):
    sim = simulate(w, tau, c, r, 4, mtbf_h=m, downtime_h=d, runs=RUNS, seed=11, restart_first=rf,
                   return_samples=True)
    e = expected_time(w, tau, c, r, m, d, restart_first=rf)
    s = sim["samples"]
    assert within(s["completion_hours"], e["expected_hours"])
    assert abs(sim["completion_hours"]["mean"] - e["expected_hours"]) <= 4 * sim["completion_hours_se"]
    assert within(s["interruptions"], e["expected_interruptions"])
    assert within(s["lost_work_hours"], e["expected_lost_work_hours"])
    assert within(s["restart_hours"], e["expected_restart_hours"])
    assert within(s["billed_gpu_hours"], 4 * e["expected_billed_hours"])


def test_empirical_exponential_sample_agrees_too():
    m = 2.0
    lifetimes = np.random.default_rng(5).exponential(m, 200_000)
    sim = simulate(12.0, 1.0, 0.1, 0.2, 8, lifetimes_h=lifetimes, runs=RUNS, seed=3)
    e = expected_time(12.0, 1.0, 0.1, 0.2, m)
    # 5 SE: the finite lifetime sample adds a little on top of the simulation's own error
    assert abs(sim["completion_hours"]["mean"] - e["expected_hours"]) <= 5 * sim["completion_hours_se"]
    assert sim["lifetime_mean_h"] == pytest.approx(m, rel=0.01)


def test_deterministic_lifetimes_follow_the_renewal_rules_by_hand():
    # lifetimes of exactly 2.5 h, segments of 1 h without checkpoint cost, no restart:
    # each lifetime completes 2 segments and loses 0.5 h -> 4 interruptions, then 2 h to finish
    sim = simulate(10.0, 1.0, 0.0, 0.0, 2, lifetimes_h=[2.5], runs=10, seed=0)
    assert sim["completion_hours"]["p99"] == pytest.approx(4 * 2.5 + 2.0)
    assert sim["interruptions"]["mean"] == 4
    assert sim["lost_work_hours"]["mean"] == pytest.approx(4 * 0.5)
    assert sim["billed_gpu_hours"]["mean"] == pytest.approx(2 * 12.0)
    # with a 0.5 h restart (first start has none): 2.5 | 0.5+2 | 0.5+2 | 0.5+2 | 0.5+2 done
    sim = simulate(10.0, 1.0, 0.0, 0.5, 1, lifetimes_h=[2.5], runs=10, seed=0, downtime_h=1.0)
    assert sim["completion_hours"]["mean"] == pytest.approx(2.5 + 3 * 2.5 + 2.5 + 4 * 1.0)
    assert sim["billed_gpu_hours"]["mean"] == pytest.approx(12.5)
    assert sim["interruptions"]["mean"] == 4
    assert sim["lost_work_hours"]["mean"] == pytest.approx(0.5)


def test_lifetime_shorter_than_the_restart_never_finishes():
    with pytest.raises(ValueError, match="max_rounds"):
        simulate(5.0, 1.0, 0.0, 1.0, 1, lifetimes_h=[0.5, 1.5], runs=10, max_rounds=50)
    with pytest.raises(ValueError, match="mtbf_h"):
        simulate(100.0, None, 0.0, 0.0, 1, mtbf_h=1.0, runs=10)


def test_plain_python_reference_agrees_with_the_vectorised_simulator():
    args = (24.0, 1.0, 5 / 60, 0.25, 8)
    ref = simulate_reference(*args, mtbf_h=3.0, downtime_h=0.1, runs=3000, seed=1)
    vec = simulate(*args, mtbf_h=3.0, downtime_h=0.1, runs=RUNS, seed=1)
    se = math.hypot(np.std(ref["completion_hours"]) / math.sqrt(3000), vec["completion_hours_se"])
    assert abs(np.mean(ref["completion_hours"]) - vec["completion_hours"]["mean"]) <= 4 * se
    det_ref = simulate_reference(10.0, 1.0, 0.0, 0.5, 1, lifetimes_h=[2.5], downtime_h=1.0, runs=3)
    assert det_ref["completion_hours"] == [pytest.approx(16.5)] * 3


def test_breach_probabilities_are_probabilities_and_monotone_in_the_limit():
    common = dict(mtbf_h=2.0, downtime_h=0.1, runs=5000, seed=7)
    budgets = [0.0, 150.0, 200.0, 220.0, 250.0, 400.0, math.inf]
    p = [simulate(20.0, 1.0, 0.1, 0.2, 8, budget_gpu_hours=b, **common)["p_budget_breach"] for b in budgets]
    assert all(0.0 <= x <= 1.0 for x in p)
    assert p == sorted(p, reverse=True)
    assert p[0] == 1.0 and p[-1] == 0.0 and 0 < p[3] < 1
    walls = [20.0, 25.0, 30.0, 1000.0]
    q = [simulate(20.0, 1.0, 0.1, 0.2, 8, wall_limit_h=x, **common)["p_wall_breach"] for x in walls]
    assert all(0.0 <= x <= 1.0 for x in q) and q == sorted(q, reverse=True) and q[-1] == 0.0
    assert simulate(20.0, 1.0, 0.1, 0.2, 8, **common)["p_budget_breach"] is None


def test_seeded_runs_reproduce():
    a = simulate(24.0, 1.0, 0.1, 0.2, 4, mtbf_h=3.0, runs=2000, seed=42)
    b = simulate(24.0, 1.0, 0.1, 0.2, 4, mtbf_h=3.0, runs=2000, seed=42)
    c = simulate(24.0, 1.0, 0.1, 0.2, 4, mtbf_h=3.0, runs=2000, seed=43)
    assert a == b
    assert a["completion_hours"] != c["completion_hours"]


def test_never_interrupted_job_takes_work_plus_checkpoints():
    sim = simulate(10.0, 3.0, 0.1, 0.2, 2, mtbf_h=math.inf, runs=100, budget_gpu_hours=20.0)
    assert sim["completion_hours"]["p99"] == pytest.approx(10.4)
    assert sim["billed_gpu_hours"]["mean"] == pytest.approx(20.8)
    assert sim["p_budget_breach"] == 1.0
    assert sim["interruptions"]["mean"] == 0


@pytest.mark.parametrize("kwargs, name", [
    (dict(mtbf_h=1.0, lifetimes_h=[1.0]), "exactly one"), (dict(), "exactly one"),
    (dict(lifetimes_h=[1.0, -2.0]), "lifetimes_h"), (dict(lifetimes_h=[]), "lifetimes_h"),
    (dict(lifetimes_h=[1.0, math.nan]), "lifetimes_h"), (dict(mtbf_h=1.0, gpus=True), "gpus"),
    (dict(mtbf_h=1.0, runs=0), "runs"), (dict(mtbf_h=1.0, work_h=-1.0), "work_h"),
    (dict(mtbf_h=1.0, budget_gpu_hours=math.nan), "budget_gpu_hours"),
])
def test_bad_input_raises_value_error(kwargs, name):
    args = dict(work_h=5.0, interval_h=1.0, checkpoint_h=0.1, restart_h=0.1, gpus=2, runs=10)
    args.update(kwargs)
    with pytest.raises(ValueError, match=name):
        simulate(**args)
