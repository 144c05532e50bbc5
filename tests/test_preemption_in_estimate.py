"""A preemptible request is priced with the interruptions preemptible capacity has shown in the
ledger (per GPU-hour, the team's own rate when it has enough runs, else everyone's), or the stated
number when that is larger; the itemised estimate shows both."""
from datetime import timedelta

import pytest

from lib.dashboard.whatif import estimate_rows
from lib.gate.admission import decide
from lib.gate.estimate import estimate_request, from_pilot
from lib.gate.request import validate
from lib.ledger.connection import open_ledger
from lib.ledger.deciding import check_request
from lib.ledger.state import MIN_RATE_RUNS, interruption_rate
from tests.fixtures_gate import NOW, PILOT, policy, request, state
from tests.fixtures_ledger import tiny_request

RATE = {"per_gpu_hour": 0.05, "scope": "team", "runs": 40, "gpu_hours": 800.0, "interruptions": 40}


def raw_request(**changes):
    """A preemptible request with a pilot, stating no interruptions."""
    return request(**{"pilot": dict(PILOT), "estimated_gpu_hours": ..., "capacity": "preemptible",
                      "expected_interruptions": 0, **changes})


def pilot_request(**changes):
    """raw_request validated (defaulted), as estimate_request takes it."""
    req, problems = validate(raw_request(**changes))
    assert not problems
    return req


def _priced(req, n):
    return from_pilot(req["pilot"], gpus=req["gpus"], expected_interruptions=n, checkpoint_supported=True,
                      skip_full_evaluation=False)


def test_a_preemptible_request_stating_no_interruptions_is_priced_with_the_observed_rate():
    req = pilot_request()
    est = estimate_request(req, RATE)
    bare = _priced(req, 0)
    assert bare["items_gpu_hours"]["restarts_and_lost_work"] == 0.0
    expect = est["interruptions"]
    assert expect["stated"] == 0 and expect["rate"] == RATE
    assert expect["from_ledger"] == pytest.approx(0.05 * bare["raw_gpu_hours"])
    assert expect["used"] == expect["from_ledger"] > 0
    assert est["items_gpu_hours"] == _priced(req, expect["used"])["items_gpu_hours"]
    assert est["items_gpu_hours"]["restarts_and_lost_work"] > 0
    assert est["raw_gpu_hours"] > bare["raw_gpu_hours"]


def test_a_larger_stated_number_is_kept():
    req = pilot_request(expected_interruptions=9)
    est = estimate_request(req, RATE)
    assert est["interruptions"]["used"] == 9 and est["interruptions"]["from_ledger"] < 9
    assert est["items_gpu_hours"] == _priced(req, 9)["items_gpu_hours"]


def test_stable_capacity_and_a_ledger_without_preemptible_runs_change_nothing():
    req = pilot_request(capacity="stable")
    assert estimate_request(req, RATE) == {**_priced(req, 0), "source": "pilot"}
    est = estimate_request(pilot_request(), None)
    assert est["interruptions"] == {"stated": 0, "from_ledger": None, "used": 0, "rate": None}
    assert est["items_gpu_hours"]["restarts_and_lost_work"] == 0.0


def test_decide_prices_the_state_interruption_rate_and_the_what_if_shows_both_numbers():
    s = {**state(), "interruption_rate": RATE}
    decision = decide(raw_request(), policy(), s)
    est = decision["estimate"]
    assert est["interruptions"]["used"] > 0
    assert est["raw_gpu_hours"] == pytest.approx(sum(est["items_gpu_hours"].values()))
    rows = {r["item"]: r for r in estimate_rows(decision)}
    assert rows["expected interruptions: stated"]["value"] == 0
    assert rows["expected interruptions: from the ledger"]["value"] == est["interruptions"]["from_ledger"]
    assert "0.05 per GPU-hour" in rows["expected interruptions: from the ledger"]["note"]
    assert rows["expected interruptions: used"]["value"] == est["interruptions"]["used"]


def _preemptible_runs(con, team, n, gpu_hours, interruptions, start=0):
    for i in range(n):
        con.execute(
            "INSERT INTO runs (run_id, team, kind, gpus, capacity, actual_gpu_hours, interruptions, ended_at, "
            "stop_reason, source, updated_at) VALUES (?, ?, 'exploratory', 2, 'preemptible', ?, ?, ?, "
            "'completed', 'test', ?)",
            [f"{team}-p{start + i}", team, gpu_hours, interruptions, NOW - timedelta(days=1 + i % 300), NOW])


def test_the_ledger_rate_is_the_team_s_with_enough_runs_else_everyone_s(tiny_ledger):
    with open_ledger(tiny_ledger) as con:
        assert interruption_rate(con, "tiny", NOW) is None
        _preemptible_runs(con, "other", 30, 10.0, 1)            # 30 interruptions in 300 GPU-h
        _preemptible_runs(con, "tiny", MIN_RATE_RUNS - 1, 10.0, 3)
        few = interruption_rate(con, "tiny", NOW)
        assert few["scope"] == "all" and few["runs"] == 30 + MIN_RATE_RUNS - 1
        assert few["per_gpu_hour"] == pytest.approx((30 + 3 * (MIN_RATE_RUNS - 1)) / (10.0 * few["runs"]))
        _preemptible_runs(con, "tiny", 1, 10.0, 3, start=MIN_RATE_RUNS)
        own = interruption_rate(con, "tiny", NOW)
        assert own == {"per_gpu_hour": pytest.approx(0.3), "scope": "team", "runs": MIN_RATE_RUNS,
                       "gpu_hours": 10.0 * MIN_RATE_RUNS, "interruptions": 3 * MIN_RATE_RUNS,
                       "source": "counts"}
        # outside the window or on stable capacity: not counted
        con.execute("UPDATE runs SET capacity = 'stable' WHERE team = 'other'")
        assert interruption_rate(con, "other", NOW)["scope"] == "all"
        assert interruption_rate(con, "tiny", NOW + timedelta(days=400)) is None


def test_check_request_prices_the_interruptions_the_ledger_observed(tiny_ledger):
    with open_ledger(tiny_ledger) as con:
        _preemptible_runs(con, "tiny", MIN_RATE_RUNS, 10.0, 2)
    req = tiny_request(1, capacity="preemptible", expected_interruptions=0, pilot=dict(PILOT),
                       estimated_gpu_hours=..., budget_gpu_hours=500, max_runtime_hours=40)
    req = {k: v for k, v in req.items() if v is not ...}
    decision = check_request(req, db=tiny_ledger, now=NOW)
    expect = decision["estimate"]["interruptions"]
    assert expect["rate"]["scope"] == "team" and expect["rate"]["per_gpu_hour"] == pytest.approx(0.2)
    assert expect["used"] == expect["from_ledger"] > 0
    assert decision["estimate"]["items_gpu_hours"]["restarts_and_lost_work"] > 0
