"""Promotion is separate from admission: only complete production candidates with evidence pass."""
import pytest

from lib.gate.promotion import promotion_status

GOOD = {"kind": "production", "full_evaluation": True, "stop_reason": "completed",
        "artifact_status": "complete", "holdout_reads": 1, "holdout_allowance": 2}


def test_a_complete_production_candidate_is_promotable():
    assert promotion_status(GOOD) == {"promotable": True, "missing": []}
    assert promotion_status({**GOOD, "stop_reason": "early-stop"})["promotable"]


@pytest.mark.parametrize("change,why", [
    ({"kind": "exploratory"}, "not a production candidate"),
    ({"full_evaluation": False}, "no full evaluation"),
    ({"stop_reason": "budget", "artifact_status": "incomplete"}, "never promotable"),
    ({"stop_reason": "wall-clock", "artifact_status": "incomplete"}, "never promotable"),
    ({"stop_reason": "failed"}, "not completed"),
    ({"stop_reason": None}, "not finished"),
    ({"artifact_status": "incomplete"}, "not complete"),
    ({"holdout_reads": 3}, "beyond its allowance of 2"),
])
def test_each_refusal_says_why(change, why):
    s = promotion_status({**GOOD, **change})
    assert not s["promotable"]
    assert any(why in m for m in s["missing"]), s["missing"]


def test_exploratory_runs_without_evidence_list_everything_they_lack():
    s = promotion_status({"kind": "exploratory", "full_evaluation": False, "stop_reason": "completed",
                          "artifact_status": "complete"})
    assert len(s["missing"]) == 2
