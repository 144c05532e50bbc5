"""Stop rules: fixed before results, never reading the holdout; budget stops leave artifacts incomplete."""
import pytest

from lib.gate.stopping import FrozenPolicyError, check_unchanged, evaluate, freeze

POLICY = {"max_wall_clock_hours": 10, "spend_limit_gpu_hours": 100, "max_failed_steps": 3,
          "early_stop": {"metric": "val_loss", "mode": "min", "patience": 2, "min_delta": 0.01}}


def test_continue_within_every_rule():
    r = evaluate(POLICY, {"wall_clock_hours": 1, "spent_gpu_hours": 5, "failed_steps": 0,
                          "metrics": {"val_loss": [1.0, 0.8, 0.6]}})
    assert r["action"] == "continue"


def test_budget_stop_is_incomplete_unpromotable_and_keeps_the_last_checkpoint():
    r = evaluate(POLICY, {"spent_gpu_hours": 100, "last_valid_checkpoint": "ckpt-0900"})
    assert (r["action"], r["stop_reason"], r["artifact_status"], r["promotable"]) == \
        ("stop", "budget", "incomplete", False)
    assert "ckpt-0900" in r["message"] and "not a failed evaluation" in r["message"]


def test_wall_clock_and_failed_steps():
    assert evaluate(POLICY, {"wall_clock_hours": 10})["stop_reason"] == "wall-clock"
    assert evaluate(POLICY, {"failed_steps": 3})["action"] == "continue"
    assert evaluate(POLICY, {"failed_steps": 4})["stop_reason"] == "failed-steps"


@pytest.mark.parametrize("values,mode,stops", [
    ([1.0, 0.9, 0.895, 0.899], "min", True),    # two evaluations without a 0.01 improvement
    ([1.0, 0.9, 0.895, 0.85], "min", False),
    ([0.5, 0.6, 0.7, 0.8], "max", False),
    ([0.5, 0.6, 0.6, 0.605], "max", True),
])
def test_early_stop_follows_keras_patience_and_min_delta(values, mode, stops):
    policy = {"early_stop": {"metric": "val_acc", "mode": mode, "patience": 2, "min_delta": 0.01}}
    r = evaluate(policy, {"metrics": {"val_acc": values}})
    assert (r["action"] == "stop") is stops
    if stops:
        assert r["stop_reason"] == "early-stop" and r["artifact_status"] == "complete"


def test_early_stop_reads_only_its_named_metric():
    policy = {"early_stop": {"metric": "val_loss", "mode": "min", "patience": 1}}
    r = evaluate(policy, {"metrics": {"holdout_loss": [1, 2, 3, 4], "val_loss": [3, 2, 1]}})
    assert r["action"] == "continue"


@pytest.mark.parametrize("metric", ["holdout_accuracy", "test/loss", "final-holdout-f1", "Test_AUC"])
def test_a_rule_on_the_final_holdout_is_refused(metric):
    with pytest.raises(ValueError, match="holdout"):
        freeze({"early_stop": {"metric": metric, "mode": "max", "patience": 2}})


def test_a_frozen_policy_cannot_change_after_admission():
    frozen = freeze(POLICY)
    check_unchanged(frozen, dict(POLICY))
    with pytest.raises(FrozenPolicyError):
        check_unchanged(frozen, {**POLICY, "spend_limit_gpu_hours": 200})
