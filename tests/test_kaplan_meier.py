"""Kaplan-Meier lifetimes for the Recovery planner: runs that ended without an interruption count as
right-censored lifetimes, so the lifetimes are not biased short."""
import math

import numpy as np
import pytest

from lib.planning.lifetimes import kaplan_meier, km_sample


def test_the_curve_matches_a_hand_computed_example():
    # lifetimes 2, 3, 3+, 3, 5, 6+, 8 hours (+: censored)
    #   t = 2: 7 at risk, 1 interruption: S = 6/7
    #   t = 3: 6 at risk (the one censored at 3 h still counts), 2 interruptions: S = 6/7 x 4/6 = 4/7
    #   t = 5: 3 at risk, 1: S = 4/7 x 2/3 = 8/21;  6+ leaves;  t = 8: 1 at risk, 1: S = 0
    steps = kaplan_meier([(2, 1, 0), (3, 2, 1), (5, 1, 0), (6, 0, 1), (8, 1, 0)])
    assert [(s["t"], s["at_risk"], s["events"]) for s in steps] == [(2, 7, 1), (3, 6, 2), (5, 3, 1), (8, 1, 1)]
    assert [s["survival"] for s in steps] == pytest.approx([6 / 7, 4 / 7, 8 / 21, 0.0])


def test_the_sample_takes_the_curve_s_quantiles_and_an_exponential_tail():
    # 2, 3, 4+ hours: S(2) = 2/3, S(3) = 1/3; MTBF = 9 h / 2 = 4.5 h beyond 3 h
    sample = km_sample([(2, 1, 0), (3, 1, 0), (4, 0, 1)], 6)
    u = [(i + 0.5) / 6 for i in range(6)]
    assert sample[:4] == [2.0, 2.0, 3.0, 3.0]
    assert sample[4:] == pytest.approx([3 + 4.5 * math.log((1 / 3) / (1 - v)) for v in u[4:]])
    assert km_sample([(5, 0, 3)], 10) == []   # no interruption: no curve


def test_censored_lifetimes_remove_the_short_bias_of_interrupted_ones_only():
    # exponential lifetimes (mean 10 h) on runs of 2-30 h: most runs end before an interruption
    rng = np.random.default_rng(3)
    hours = rng.uniform(2, 30, 4000)
    counts = rng.poisson(hours / 10.0)
    # as the ledger gives them: n interruptions in h hours are n gaps of h / (n + 1), one more censored
    groups = [(h / (n + 1), n, 1) for h, n in zip(hours, counts)]
    observed = [t for t, e, _ in groups for _ in range(int(e))]
    km = km_sample(groups, 4000)
    assert np.mean(observed) < 7.0                    # interrupted gaps alone: biased short
    assert np.mean(km) == pytest.approx(10.0, rel=0.1)
    with pytest.raises(ValueError):
        kaplan_meier([(0.0, 1, 0)])
