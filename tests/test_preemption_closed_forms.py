"""Closed forms of lib.planning.preemption pinned against independently derived values."""
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lib.planning.preemption import (best_segment_count, compare_capacity, expected_time, job_mtbf_h,
                            lambert_w0, optimal_interval, segment_lengths)

MIN = 1.0 / 60.0


def seg_time(length, r, m, d=0.0):
    """E[T_seg] = (M + D) e^{R/M} (e^{L/M} - 1), written out independently of the module."""
    return (m + d) * math.exp(r / m) * (math.exp(length / m) - 1.0)


# ---------------------------------------------------------------- Daly's printed optima
@pytest.mark.parametrize("mtbf_h, printed_min, digits", [
    (24.0, 117, 0),
    (6.0, 57, 0),
    (15 * MIN, 9.1, 1),
])
def test_daly_formula_reproduces_the_printed_optima(mtbf_h, printed_min, digits):
    # Daly (FGCS 2006) prints 117, 57 and 9.1 minutes for C = 5 min; his higher-order formula gives them
    tau_min = optimal_interval(5 * MIN, mtbf_h, "daly") / MIN
    assert round(tau_min, digits) == printed_min


@pytest.mark.parametrize("mtbf_h, printed_min", [(24.0, 117), (6.0, 57)])
def test_exact_minimiser_agrees_with_the_printed_optima_to_the_minute(mtbf_h, printed_min):
    assert round(optimal_interval(5 * MIN, mtbf_h, "exact") / MIN) == printed_min


def test_exact_minimiser_at_m_15_min_is_9_17_not_the_printed_9_1():
    # At C/M = 1/3 Daly's formula (9.14 min) and the exact exponential minimiser part at the 2nd digit;
    # the printed 9.1 is Daly's formula. Exact value: 15 (1 + W0(-e^{-4/3})) min.
    exact = optimal_interval(5 * MIN, 15 * MIN, "exact") / MIN
    assert exact == pytest.approx(15 * (1 + lambert_w0(-math.exp(-4 / 3))), rel=1e-12)
    assert exact == pytest.approx(9.1665, abs=5e-4)
    # Young overshoots once C/M is not small
    assert optimal_interval(5 * MIN, 15 * MIN, "young") / MIN == pytest.approx(math.sqrt(150), rel=1e-12)


@pytest.mark.parametrize("c, m", [(5 * MIN, 24.0), (0.1, 3.0), (1.0, 2.0), (2e-6, 1e3)])
def test_young_is_sqrt_2cm(c, m):
    assert optimal_interval(c, m, "young") == pytest.approx(math.sqrt(2 * c * m), rel=1e-15)


def test_daly_falls_back_to_m_when_checkpoint_exceeds_2m():
    assert optimal_interval(5.0, 2.0, "daly") == 2.0
    assert optimal_interval(0.0, 2.0, "daly") == 0.0


def test_infinite_mtbf_never_checkpoints():
    assert optimal_interval(0.1, math.inf, "exact") == math.inf


# ---------------------------------------------------------------- Lambert W0
@pytest.mark.parametrize("x, w", [(0.0, 0.0), (math.e, 1.0), (-1 / math.e, -1.0),
                                  (1.0, 0.5671432904097838), (2 * math.exp(2), 2.0),
                                  (-math.log(2) / 2, -math.log(2))])
def test_lambert_w0_known_values(x, w):
    assert lambert_w0(x) == pytest.approx(w, abs=1e-7 if x == -1 / math.e else 1e-13)


@settings(max_examples=200, deadline=None)
@given(st.floats(min_value=-1 / math.e + 1e-12, max_value=1e12))
def test_lambert_w0_inverts_w_exp_w(x):
    w = lambert_w0(x)
    assert w >= -1.0
    assert w * math.exp(w) == pytest.approx(x, rel=1e-10, abs=1e-13)


def test_lambert_w0_rejects_the_other_branch():
    with pytest.raises(ValueError):
        lambert_w0(-0.5)


# ---------------------------------------------------------------- the exact minimiser is a minimum
def cost_per_work_hour(tau, c, r, m):
    # one segment of tau hours of work: E[T] / tau is the cost per hour of work of a periodic schedule
    return expected_time(tau, tau, c, r, m)["expected_hours"] / tau


@settings(max_examples=60, deadline=None)
@given(c=st.floats(1e-4, 2.0), m=st.floats(0.05, 200.0), r=st.floats(0.0, 1.0))
def test_exact_interval_minimises_expected_time(c, m, r):
    tau = optimal_interval(c, m, "exact")
    best = cost_per_work_hour(tau, c, r, m)
    for factor in (0.9, 0.99, 0.999, 1.001, 1.01, 1.1):
        assert best <= cost_per_work_hour(tau * factor, c, r, m) * (1 + 1e-12)
    for method in ("young", "daly"):
        assert best <= cost_per_work_hour(optimal_interval(c, m, method), c, r, m) * (1 + 1e-12)


@pytest.mark.parametrize("c_over_m", [1e-12, 1e-8, 1e-4, 0.01, 1.0, 10.0])
def test_exact_interval_solves_the_first_order_condition(c_over_m):
    # d/dtau [(e^{(tau+C)/M} - 1) / tau] = 0  <=>  e^{(tau+C)/M} (1 - tau/M) = 1
    m = 1.0
    tau = optimal_interval(c_over_m * m, m, "exact")
    assert 0 < tau < m
    assert tau / m + math.log1p(-tau / m) + c_over_m == pytest.approx(0.0, abs=1e-12 * max(1, c_over_m))
    if c_over_m <= 1e-4:  # small C/M: exact -> Young
        assert tau == pytest.approx(math.sqrt(2 * c_over_m * m), rel=2 * math.sqrt(c_over_m) + 1e-9)


def test_best_segment_count_matches_brute_force():
    for work, c, m in [(24.0, 5 * MIN, 6.0), (24.0, 5 * MIN, 24.0), (3.0, 0.5, 1.0), (100.0, 0.01, 0.5),
                       (1.0, 2.0, 1.0)]:
        brute = min(range(1, 3000), key=lambda n: n * math.expm1((work / n + c) / m))
        assert best_segment_count(work, c, 0.2, m) == brute
    assert best_segment_count(10.0, 0.0, 0.1, 2.0, max_segments=500) == 500
    assert best_segment_count(10.0, 0.1, 0.1, math.inf) == 1


# ---------------------------------------------------------------- expected_time
def test_no_checkpointing_is_one_segment_of_the_whole_work():
    w, r, m = 7.5, 0.2, 3.0
    e = expected_time(w, None, 0.5, r, m)  # checkpoint_h is ignored without checkpoints
    assert e["expected_hours"] == pytest.approx(m * math.exp(r / m) * (math.exp(w / m) - 1), rel=1e-13)
    assert e["expected_interruptions"] == pytest.approx(math.exp(r / m) * (math.exp(w / m) - 1), rel=1e-13)
    assert e["segments"] == 1 and e["checkpoint_hours"] == 0.0
    # an interval past the end with a free checkpoint is the same thing
    assert expected_time(w, 100.0, 0.0, r, m)["expected_hours"] == pytest.approx(e["expected_hours"])


def test_equal_segments_formula():
    w, tau, c, r, m = 24.0, 2.0, 0.1, 0.25, 5.0
    e = expected_time(w, tau, c, r, m)
    assert e["expected_hours"] == pytest.approx(m * math.exp(r / m) * math.expm1((tau + c) / m) * w / tau,
                                                rel=1e-13)
    assert e["segments"] == 12
    assert e["checkpoint_hours"] == pytest.approx(12 * c)


def test_remainder_is_one_shorter_segment_with_its_own_checkpoint():
    w, tau, c, r, m, d = 10.0, 3.0, 0.1, 0.2, 4.0, 0.3
    e = expected_time(w, tau, c, r, m, d)
    assert e["segments"] == 4
    assert e["checkpoint_hours"] == pytest.approx(4 * c)
    want = 3 * seg_time(tau + c, r, m, d) + seg_time(1.0 + c, r, m, d)
    assert e["expected_hours"] == pytest.approx(want, rel=1e-13)
    assert segment_lengths(w, tau, c) == [(pytest.approx(3.1), 3), (pytest.approx(1.1), 1)]


def test_rounding_does_not_create_a_sliver_segment():
    assert expected_time(0.3, 0.1, 0.01, 0.0, 1.0)["segments"] == 3
    assert expected_time(0.7, 0.1, 0.01, 0.0, 1.0)["segments"] == 7
    assert expected_time(24.0, 24.0 / 7, 0.01, 0.0, 1.0)["segments"] == 7


def test_downtime_scales_time_by_m_plus_d_over_m():
    base = expected_time(12.0, 1.5, 0.1, 0.2, 3.0)
    with_d = expected_time(12.0, 1.5, 0.1, 0.2, 3.0, downtime_h=0.5)
    assert with_d["expected_hours"] == pytest.approx(base["expected_hours"] * 3.5 / 3.0, rel=1e-13)
    assert with_d["expected_interruptions"] == pytest.approx(base["expected_interruptions"], rel=1e-13)
    # downtime is not billed
    assert with_d["expected_billed_hours"] == pytest.approx(base["expected_hours"], rel=1e-13)


def test_restart_first_adds_one_interruptible_restart():
    w, tau, c, r, m, d = 6.0, 1.0, 0.05, 0.3, 2.0, 0.1
    a = expected_time(w, tau, c, r, m, d)
    b = expected_time(w, tau, c, r, m, d, restart_first=True)
    assert b["expected_hours"] - a["expected_hours"] == pytest.approx((m + d) * math.expm1(r / m))
    assert b["expected_interruptions"] - a["expected_interruptions"] == pytest.approx(math.expm1(r / m))


def test_no_interruptions_costs_work_plus_checkpoints():
    e = expected_time(10.0, 3.0, 0.1, 0.2, math.inf)
    assert e["expected_hours"] == pytest.approx(10.4)
    assert e["expected_interruptions"] == 0.0


def test_zero_work_costs_nothing():
    assert expected_time(0.0, 1.0, 0.1, 0.2, 1.0)["expected_hours"] == 0.0


@settings(max_examples=150, deadline=None)
@given(w=st.floats(0.01, 100.0), tau=st.floats(0.01, 50.0) | st.none(), c=st.floats(0.0, 1.0),
       r=st.floats(0.0, 1.0), m=st.floats(0.5, 500.0), d=st.floats(0.0, 2.0))
def test_expected_time_is_at_least_work_plus_checkpoints_and_decomposes(w, tau, c, r, m, d):
    e = expected_time(w, tau, c, r, m, d)
    assert e["expected_hours"] >= (w + e["checkpoint_hours"]) * (1 - 1e-12)
    parts = (w + e["checkpoint_hours"] + e["expected_lost_work_hours"] + e["expected_restart_hours"]
             + e["expected_downtime_hours"])
    assert e["expected_hours"] == pytest.approx(parts, rel=1e-9)
    for key in ("expected_lost_work_hours", "expected_restart_hours", "expected_interruptions"):
        assert e[key] >= 0
    # more frequent interruptions never help
    worse = expected_time(w, tau, c, r, m / 2, d)
    assert worse["expected_hours"] >= e["expected_hours"] * (1 - 1e-12)
    assert worse["expected_interruptions"] >= e["expected_interruptions"] * (1 - 1e-12)


@pytest.mark.parametrize("kwargs, name", [
    (dict(work_h=-1.0), "work_h"), (dict(work_h=math.nan), "work_h"), (dict(work_h=math.inf), "work_h"),
    (dict(work_h=True), "work_h"), (dict(work_h="3"), "work_h"), (dict(interval_h=0.0), "interval_h"),
    (dict(interval_h=-2.0), "interval_h"), (dict(checkpoint_h=-0.1), "checkpoint_h"),
    (dict(restart_h=math.nan), "restart_h"), (dict(mtbf_h=0.0), "mtbf_h"), (dict(mtbf_h=False), "mtbf_h"),
    (dict(downtime_h=-1.0), "downtime_h"),
])
def test_bad_input_raises_value_error_naming_the_argument(kwargs, name):
    args = dict(work_h=10.0, interval_h=1.0, checkpoint_h=0.1, restart_h=0.2, mtbf_h=5.0, downtime_h=0.0)
    args.update(kwargs)
    with pytest.raises(ValueError, match=name):
        expected_time(**args)


def test_optimal_interval_rejects_bad_input():
    with pytest.raises(ValueError, match="method"):
        optimal_interval(0.1, 1.0, "guess")
    with pytest.raises(ValueError, match="checkpoint_h"):
        optimal_interval(True, 1.0)
    with pytest.raises(ValueError, match="mtbf_h"):
        optimal_interval(0.1, -1.0)


# ---------------------------------------------------------------- preemptible vs stable
def test_job_mtbf_shrinks_with_size():
    assert job_mtbf_h(50_000.0, 1000) == pytest.approx(50.0)
    with pytest.raises(ValueError, match="n_devices"):
        job_mtbf_h(100.0, 0)
    with pytest.raises(ValueError, match="n_devices"):
        job_mtbf_h(100.0, True)


def test_break_even_ratio_is_consistent():
    args = dict(work_h=24.0, gpus=8, interval_h=1.0, checkpoint_h=5 * MIN, restart_h=0.25, mtbf_h=3.0,
                downtime_h=0.2)
    ref = compare_capacity(price_ratio=0.3, **args)
    be = ref["break_even_ratio"]
    e = expected_time(24.0, 1.0, 5 * MIN, 0.25, 3.0, 0.2)
    assert ref["stable_cost_gpu_hours"] == pytest.approx(8 * (24.0 + 24 * 5 * MIN))
    assert ref["preemptible_billed_gpu_hours"] == pytest.approx(8 * (e["expected_hours"]
                                                                     - 0.2 * e["expected_interruptions"]))
    assert be == pytest.approx(ref["stable_cost_gpu_hours"] / ref["preemptible_billed_gpu_hours"])
    assert 0 < be < 1
    at = compare_capacity(price_ratio=be, **args)
    assert at["preemptible_cost_gpu_hours"] == pytest.approx(at["stable_cost_gpu_hours"], rel=1e-12)
    assert compare_capacity(price_ratio=be * 0.99, **args)["cheaper"] == "preemptible"
    assert compare_capacity(price_ratio=be * 1.01, **args)["cheaper"] == "stable"
    assert ref["expected_delay_hours"] == pytest.approx(e["expected_hours"] - 26.0)
    assert ref["stretch"] == pytest.approx(e["expected_hours"] / 24.0)
    # gpus scale costs, not the ratio
    assert compare_capacity(price_ratio=0.3, **{**args, "gpus": 1})["break_even_ratio"] == pytest.approx(be)


def test_deadline_admits_preemptible_only_while_a_stable_fallback_meets_it():
    args = dict(work_h=10.0, gpus=4, price_ratio=0.3, interval_h=1.0, checkpoint_h=0.1, restart_h=0.5,
                mtbf_h=4.0)
    stable_h = 11.0
    ok = compare_capacity(deadline_h=stable_h + 0.5, **args)["deadline"]
    assert ok["preemptible_admissible"] and ok["fallback_slack_h"] == pytest.approx(0.0, abs=1e-12)
    tight = compare_capacity(deadline_h=stable_h + 0.4, **args)
    assert tight["deadline"]["stable_meets"] and not tight["deadline"]["preemptible_admissible"]
    assert tight["recommendation"] == "stable"
    late = compare_capacity(deadline_h=10.0, **args)["deadline"]
    assert not late["stable_meets"] and not late["preemptible_admissible"]
    assert compare_capacity(**args)["deadline"] is None
    with pytest.raises(ValueError, match="price_ratio"):
        compare_capacity(**{**args, "price_ratio": -0.1})
