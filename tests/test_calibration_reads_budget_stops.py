"""After a cost jump most runs stop at their budget: the calibration reads those stops as evidence,
pools the change across a team's kinds, and keeps its bound right when most runs since are censored."""
import math
from datetime import datetime, timedelta

import numpy as np
import pytest

from lib.gate.calibration import calibrate, calibrate_scopes, scope_bound, window_bound
from lib.gate.calibration_change import find_change, shifted
from lib.gate.tobit import shift_posterior
from tests.fixtures_calibration import budget_stream, team_history
from tests.fixtures_gate import NOW

Z90 = 1.2815515655446004


def _coverage_after(seeds, change: str, first: int, last: int) -> float:
    """Share of runs jump_at+first .. jump_at+last-1 whose true cost stayed under the bound from the runs before."""
    covered = total = 0
    for seed in seeds:
        s = budget_stream(seed, 300 + last, jump_at=300, factor=2.0)
        for i in range(300 + first, 300 + last):
            q = scope_bound(s["r"][:i], s["censored"][:i], change=change)["q"]
            covered += q is not None and s["true"][i] <= q
            total += 1
    return covered / total


def test_a_jump_most_runs_meet_at_their_budget_is_followed_where_the_mean_test_stays_behind():
    s = budget_stream(0, 330, jump_at=300, factor=2.0)
    assert s["censored"][300:].mean() > 0.8 and s["censored"][:300].mean() < 0.25
    b = scope_bound(s["r"], s["censored"])
    assert b["method"] == "shifted" and 297 <= b["since"] <= 306
    # runs 10..40 after the jump, each bounded from the runs before it
    new, old = _coverage_after(range(6), "censored", 5, 35), _coverage_after(range(6), "mean", 5, 35)
    assert new >= 0.85 and old <= new - 0.3


def test_the_shifted_bound_recovers_the_new_level_when_most_runs_since_stopped():
    s = budget_stream(1, 550, jump_at=400, factor=2.0)
    x, c = s["r"], s["censored"]
    assert c[400:].mean() > 0.8
    b = shifted(x, c, np.zeros(len(x), dtype=int), 400, 0, 0.9)
    assert b["delta"] == pytest.approx(math.log(2.0), abs=0.12)
    assert b["q"] == pytest.approx(0.1 + math.log(2.0) + Z90 * 0.3, abs=0.15)
    # the stop values themselves sit far below: their median is what the earlier shifted bound centred on
    assert np.median(x[400:]) < 0.1 + math.log(2.0) - 0.2


def test_a_change_long_past_is_dated_where_it_came_not_where_the_stop_search_begins():
    # 80 runs since a 2x jump, nearly all stopped: the surge search looks at the last 60 runs only,
    # and the runs since the change, refitted on their own, show no further change
    for seed in range(3):
        s = budget_stream(seed, 400, jump_at=320, factor=2.0)
        b = scope_bound(s["r"], s["censored"])
        assert 316 <= b["since"] <= 326 and b["suspected"] is None


def test_when_every_run_since_stopped_the_bound_is_finite_and_above_their_stops():
    s = budget_stream(2, 300)
    cap = 0.1 + math.log(1.4)
    x = np.concatenate([s["r"], np.full(8, cap)])
    c = np.concatenate([s["censored"], np.ones(8, dtype=bool)])
    b = scope_bound(x, c)
    assert b["method"] == "shifted" and b["since"] is not None and b["since"] >= 300
    assert math.isfinite(b["q"]) and b["q"] > cap + 0.3
    grid, weight = shift_posterior(np.full(8, cap), np.ones(8, dtype=bool), 0.1, 0.3)
    assert weight.sum() == pytest.approx(1.0) and weight[0] < 1e-6 and weight[-1] < 1e-6


def test_on_finished_runs_the_shift_posterior_is_the_normal_one():
    rng = np.random.default_rng(3)
    x = 0.5 + 0.3 * rng.standard_normal(200)
    grid, w = shift_posterior(x, np.zeros(200, dtype=bool), 0.1, 0.3)
    mean = float((grid * w).sum())
    sd = math.sqrt(float((w * (grid - mean) ** 2).sum()))
    assert mean == pytest.approx(x.mean() - 0.1, abs=1e-3)
    assert sd == pytest.approx(0.3 / math.sqrt(200), rel=0.03)


def test_a_cost_drop_tightens_the_bound():
    s = budget_stream(4, 330, jump_at=300, factor=0.5)
    before = window_bound(s["r"][:300], s["censored"][:300])["q"]
    b = scope_bound(s["r"], s["censored"])
    assert b["since"] is not None and b["q"] < before - 0.4


def test_steady_streams_with_budget_stops_rarely_find_a_change():
    rng = np.random.default_rng(5)
    checks = found = suspected = 0
    for seed in range(40):
        s = budget_stream(seed, 400, mu=rng.uniform(-0.1, 0.3), sigma=rng.uniform(0.2, 0.45))
        for n in range(300, 401, 20):
            got = find_change(s["r"][:n], s["censored"][:n], np.zeros(n, dtype=int))
            checks += 1
            found += got["change"] is not None
            suspected += got["suspect"] is not None
    assert found / checks <= 0.02 and suspected / checks <= 0.15


def _calibrated(rows, kind):
    return calibrate(rows, "vision", kind, now=NOW)


KINDS = {"exploratory": (0.05, 0.3, 2.0), "production": (0.15, 0.25, 0.3), "retraining": (0.0, 0.3, 0.7)}


def test_a_kind_with_few_runs_since_follows_the_change_its_team_shows():
    rows = team_history(6, KINDS, jump_day=6)
    since = NOW - timedelta(days=6)
    prod = [r for r in rows if r["kind"] == "production"]
    assert sum(r["admitted_at"] >= since for r in prod) <= 2       # too few of its own to see a change
    own_only = _calibrated(prod, "production")
    pooled = _calibrated(rows, "production")
    assert own_only["adapted_since"] is None
    assert pooled["adapted_since"] is not None and "in the team's runs" in pooled["note"]
    assert abs(datetime.fromisoformat(pooled["adapted_since"]) - since) <= timedelta(days=2)
    assert pooled["upper_factor"] > 1.5 * own_only["upper_factor"]
    assert pooled["runs_before_change"] > 0 and pooled["scope"] == "team×kind"
    assert pooled["n"] >= 5 and "runs of the team since the change" in pooled["note"]


def test_a_change_in_one_kind_is_not_forced_on_a_kind_whose_own_runs_say_otherwise():
    rows = team_history(7, {"exploratory": (0.05, 0.3, 3.0), "production": (0.1, 0.25, 1.0)}, jump_day=12,
                        moved=("exploratory",))
    explo, prod = _calibrated(rows, "exploratory"), _calibrated(rows, "production")
    assert explo["adapted_since"] is not None
    assert prod["adapted_since"] is None
    alone = _calibrated([r for r in rows if r["kind"] == "production"], "production")
    assert prod["upper_factor"] == pytest.approx(alone["upper_factor"])


def test_runs_admitted_before_the_change_that_end_after_it_do_not_blur_where_it_is():
    rows = team_history(8, {"exploratory": (0.05, 0.3, 3.0)}, jump_day=8)
    first_new = min(r["admitted_at"] for r in rows if r["admitted_at"] >= NOW - timedelta(days=8))
    late_old = [r for r in rows if r["admitted_at"] < first_new and r["ended_at"] > first_new]
    assert late_old                                                 # in flight when the change came
    cal = _calibrated(rows, "exploratory")
    assert cal["adapted_since"] is not None and "admitted" in cal["note"]
    assert abs(datetime.fromisoformat(cal["adapted_since"]) - first_new) <= timedelta(days=1)
    # without admission times the runs are searched in end order and the change is dated by an end
    ended_only = [{k: v for k, v in r.items() if k != "admitted_at"} for r in rows]
    assert "ended" in _calibrated(ended_only, "exploratory")["note"]


def test_the_team_scope_is_read_with_team_x_kind_and_everyone_only_when_needed():
    rows = team_history(9, KINDS)
    read = []

    def scoped(kind_rows):
        for name, r in (("team×kind", kind_rows), ("team", rows), ("all", rows)):
            read.append(name)
            yield name, r
    cal = calibrate_scopes(scoped([r for r in rows if r["kind"] == "exploratory"]))
    assert cal["scope"] == "team×kind" and read == ["team×kind", "team"]
    read.clear()
    cal = calibrate_scopes(scoped([r for r in rows if r["kind"] == "production"][:3]))
    assert cal["scope"] == "team" and read == ["team×kind", "team"]


def test_the_earlier_change_test_stays_selectable_for_comparison():
    s = budget_stream(10, 320, jump_at=300, factor=2.0)
    earlier, gate = (scope_bound(s["r"], s["censored"], change=c) for c in ("mean", "censored"))
    true_q = 0.1 + math.log(2.0) + Z90 * 0.3                       # the new runs' 90 % quantile
    assert gate["since"] is not None and gate["q"] > true_q
    # the earlier test may see this jump too, but centres its bound on the stop values
    assert earlier["q"] < true_q - 0.25
