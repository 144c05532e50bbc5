"""lib.planning.recovery: resume, restart or end after a preemption or a budget breach."""
import math

import pytest

from lib.planning.preemption import expected_time
from lib.planning.recovery import decide_recovery, scenario_outcomes

OPTION_KEYS = ("expected_extra_gpu_hours", "expected_lost_work_gpu_hours", "expected_restart_gpu_hours",
               "expected_total_gpu_hours")


def situation(**over):
    s = dict(event="preemption", budget_gpu_hours=400.0, spent_gpu_hours=200.0, gpus=8,
             total_work_gpu_hours=300.0, progress_fraction=0.55, last_valid_checkpoint="ckpt-0500",
             checkpoint_progress_fraction=0.5, restart_h=0.25, mtbf_h=6.0, checkpoint_interval_h=1.0,
             checkpoint_h=5 / 60, restarts_so_far=1, max_restarts=5, failed_steps=0, max_failed_steps=10)
    s.update(over)
    return s


def assert_every_option_is_costed(d, spent):
    assert set(d["options"]) == {"resume", "restart", "end"}
    for name in ("restart", "end"):
        for key in OPTION_KEYS:
            assert d["options"][name][key] >= 0
    assert d["options"]["end"]["expected_extra_gpu_hours"] == 0.0
    assert d["options"]["end"]["expected_total_gpu_hours"] == spent
    if d["options"]["resume"]["available"]:
        for key in OPTION_KEYS:
            assert d["options"]["resume"][key] >= 0
    else:
        assert d["options"]["resume"]["expected_extra_gpu_hours"] is None


def test_resume_when_the_budget_covers_remaining_work_restart_and_lost_work():
    d = decide_recovery(situation())
    assert (d["action"], d["code"]) == ("resume", "resume-from-checkpoint")
    assert d["resume_from"] == "ckpt-0500" and d["stop_reason"] is None and d["blocking"] == []
    assert d["restarts_after"] == 2
    assert d["lost_work_now_gpu_hours"] == pytest.approx(15.0)
    resume = d["options"]["resume"]
    # expected extra = 8 GPUs x billed hours of 150/8 h of work, starting with an interruptible restart
    e = expected_time(150 / 8, 1.0, 5 / 60, 0.25, 6.0, restart_first=True)
    assert resume["expected_extra_gpu_hours"] == pytest.approx(8 * e["expected_billed_hours"])
    assert resume["expected_extra_gpu_hours"] > 150 + 8 * 0.25 + resume["expected_lost_work_gpu_hours"]
    assert resume["expected_extra_gpu_hours"] <= d["remaining_budget_gpu_hours"]
    assert d["options"]["restart"]["expected_extra_gpu_hours"] > resume["expected_extra_gpu_hours"]
    assert_every_option_is_costed(d, 200.0)


def test_restart_when_there_is_no_checkpoint_and_a_full_rerun_fits():
    d = decide_recovery(situation(last_valid_checkpoint=None, budget_gpu_hours=1000.0))
    assert (d["action"], d["code"]) == ("restart", "restart-no-checkpoint")
    assert d["options"]["resume"]["available"] is False
    assert d["options"]["restart"]["expected_work_gpu_hours"] == 300.0
    assert d["options"]["restart"]["fits_budget"] is True
    assert_every_option_is_costed(d, 200.0)


def test_end_when_no_checkpoint_and_a_rerun_does_not_fit():
    d = decide_recovery(situation(last_valid_checkpoint=None))
    assert (d["action"], d["code"], d["stop_reason"]) == ("end", "budget-insufficient", "budget")
    assert "artifact incomplete" in d["message"] and d["artifact_status"] == "incomplete"
    assert_every_option_is_costed(d, 200.0)


def test_end_when_resuming_is_expected_to_overrun_the_budget():
    d = decide_recovery(situation(budget_gpu_hours=360.0))
    assert (d["action"], d["code"]) == ("end", "budget-insufficient")
    assert "ckpt-0500" in d["message"]
    assert d["last_valid_checkpoint"] == "ckpt-0500"
    assert_every_option_is_costed(d, 200.0)


def test_end_when_the_budget_is_spent():
    d = decide_recovery(situation(spent_gpu_hours=400.0))
    assert (d["action"], d["code"], d["stop_reason"]) == ("end", "budget-spent", "budget")
    assert d["remaining_budget_gpu_hours"] == 0.0
    assert "last valid checkpoint kept: ckpt-0500" in d["message"]
    assert_every_option_is_costed(d, 400.0)


def test_end_at_the_restart_limit():
    d = decide_recovery(situation(restarts_so_far=5, max_restarts=5))
    assert (d["action"], d["code"], d["stop_reason"]) == ("end", "restart-limit", "preempted")
    assert d["restarts_after"] == 5
    assert_every_option_is_costed(d, 200.0)


def test_end_at_the_failed_step_limit():
    d = decide_recovery(situation(failed_steps=10, max_failed_steps=10))
    assert (d["action"], d["code"], d["stop_reason"]) == ("end", "failed-step-limit", "failed-steps")
    assert_every_option_is_costed(d, 200.0)


def test_every_blocking_reason_is_listed_in_order():
    d = decide_recovery(situation(event="budget-breach", spent_gpu_hours=410.0, restarts_so_far=5,
                                  failed_steps=12))
    assert [b["code"] for b in d["blocking"]] == ["budget-breach", "budget-spent", "restart-limit",
                                                  "failed-step-limit"]
    assert d["code"] == "budget-breach"


def test_budget_breach_without_an_approved_increase_ends():
    d = decide_recovery(situation(event="budget-breach", spent_gpu_hours=300.0, budget_gpu_hours=1000.0))
    assert (d["action"], d["code"], d["stop_reason"]) == ("end", "budget-breach", "budget")
    assert d["options"]["resume"]["fits_budget"] is True  # it would fit, but a breach needs approval
    assert_every_option_is_costed(d, 300.0)


def test_budget_breach_with_an_approved_increase_resumes_on_the_increased_budget():
    s = situation(event="budget-breach", spent_gpu_hours=400.0, approved_budget_increase_gpu_hours=250.0)
    d = decide_recovery(s)
    assert (d["action"], d["code"]) == ("resume", "resume-from-checkpoint")
    assert d["budget_gpu_hours"] == 650.0 and d["remaining_budget_gpu_hours"] == 250.0
    assert_every_option_is_costed(d, 400.0)
    small = decide_recovery({**s, "approved_budget_increase_gpu_hours": 50.0})
    assert (small["action"], small["code"]) == ("end", "budget-insufficient")


def test_no_further_interruptions_expected_costs_work_checkpoints_and_one_restart():
    d = decide_recovery(situation(mtbf_h=None))
    resume = d["options"]["resume"]
    assert resume["expected_lost_work_gpu_hours"] == 0.0
    assert resume["expected_extra_gpu_hours"] == pytest.approx(150.0 + 8 * (0.25 + 19 * 5 / 60))


def test_remaining_work_can_be_given_directly():
    d = decide_recovery(situation(total_work_gpu_hours=None, remaining_work_gpu_hours=150.0))
    assert d["total_work_gpu_hours"] == pytest.approx(300.0)
    assert d["options"]["resume"]["expected_work_gpu_hours"] == 150.0


@pytest.mark.parametrize("over, name", [
    (dict(event="oops"), "event"), (dict(budget_gpu_hours=-1.0), "budget_gpu_hours"),
    (dict(spent_gpu_hours=math.nan), "spent_gpu_hours"), (dict(gpus=0), "gpus"),
    (dict(gpus=True), "gpus"), (dict(checkpoint_progress_fraction=1.5), "checkpoint_progress_fraction"),
    (dict(restart_h=False), "restart_h"), (dict(max_restarts=-1), "max_restarts"),
    (dict(last_valid_checkpoint=3), "last_valid_checkpoint"), (dict(budget=5), "unknown"),
    (dict(total_work_gpu_hours=None), "total_work_gpu_hours"),
    (dict(approved_budget_increase_gpu_hours=math.inf), "approved_budget_increase_gpu_hours"),
])
def test_bad_situations_raise_value_error_naming_the_key(over, name):
    with pytest.raises(ValueError, match=name):
        decide_recovery(situation(**over))


def test_scenario_outcomes_give_a_distribution_for_each_choice():
    s = situation()
    out = scenario_outcomes(s, runs=4000, seed=1)
    assert out["decision"]["action"] == "resume"
    resume, restart, end = (out["options"][k] for k in ("resume", "restart", "end"))
    expected = out["decision"]["options"]["resume"]["expected_extra_gpu_hours"]
    mean = resume["billed_gpu_hours"]["mean"]
    assert abs(mean - expected) <= 5 * 8 * resume["completion_hours_se"] + 1e-9
    assert resume["billed_gpu_hours"]["p50"] <= resume["billed_gpu_hours"]["p90"] <= \
        resume["billed_gpu_hours"]["p99"]
    assert restart["completion_hours"]["mean"] > resume["completion_hours"]["mean"]
    assert restart["p_budget_breach"] > resume["p_budget_breach"]
    assert 0 <= resume["p_budget_breach"] <= 1
    assert end["expected_total_gpu_hours_mean"] == 200.0
    assert scenario_outcomes({**s, "last_valid_checkpoint": None}, runs=500)["options"]["resume"] is None
    emp = scenario_outcomes({**s, "mtbf_h": None, "lifetimes_h": [0.5, 3.0, 9.0], "wall_limit_h": 30.0},
                            runs=2000)
    assert 0 <= emp["options"]["resume"]["p_wall_breach"] <= 1
