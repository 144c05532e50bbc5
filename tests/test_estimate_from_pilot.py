"""Pilot estimates: itemised GPU-hours with margins, worst-case shapes at their own rate."""
import pytest

from lib.gate.estimate import ITEMS, from_pilot, from_stated
from tests.fixtures_gate import PILOT


def est(**changes):
    pilot = {**PILOT, **changes}
    return from_pilot(pilot, gpus=2, expected_interruptions=0, checkpoint_supported=True,
                      skip_full_evaluation=False)


def test_items_sum_to_the_total_and_are_gpu_hours():
    e = est()
    assert set(e["items_gpu_hours"]) == set(ITEMS)
    assert sum(e["items_gpu_hours"].values()) == pytest.approx(e["raw_gpu_hours"])
    assert e["wall_hours"] == pytest.approx(e["raw_gpu_hours"] / 2)
    # 36 000 steps: 90 % at 5 steps/s = 1.8 h, 10 % at 2.5 steps/s = 0.4 h, on 2 GPUs
    assert e["items_gpu_hours"]["compute_typical"] == pytest.approx(3.6)
    assert e["items_gpu_hours"]["compute_worst_case"] == pytest.approx(0.8)
    # 10 checkpoints × 30 s on 2 GPUs
    assert e["items_gpu_hours"]["checkpoint"] == pytest.approx(10 * 30 / 3600 * 2)
    # stalls are 5 % of wall time: 4.4 × 0.05 / 0.95
    assert e["items_gpu_hours"]["data_loading"] == pytest.approx(4.4 * 0.05 / 0.95)


def test_worst_case_shapes_raise_the_estimate_above_the_pilot_mean():
    typical_only = est(worst_case_share=0.0)
    with_tail = est(worst_case_share=0.2, worst_case_steps_per_second=1.0)
    assert with_tail["raw_gpu_hours"] > typical_only["raw_gpu_hours"]


def test_interruptions_cost_restart_time_and_lost_work_less_with_checkpoints():
    base = dict(gpus=2, expected_interruptions=3, skip_full_evaluation=False)
    ckpt = from_pilot(PILOT, checkpoint_supported=True, **base)["items_gpu_hours"]["restarts_and_lost_work"]
    none = from_pilot(PILOT, checkpoint_supported=False, **base)["items_gpu_hours"]["restarts_and_lost_work"]
    # 3 interruptions × 2 GPUs × (5 min + half a segment: a tenth of 2.2 h / 0.95, plus a 30 s write)
    assert ckpt == pytest.approx(3 * 2 * (5 / 60 + (2.2 / 0.95 / 10 + 30 / 3600) / 2))
    # without checkpoints an interruption loses half the whole run on average
    assert none == pytest.approx(3 * 2 * (5 / 60 + (2.2 / 0.95) / 2))


def test_exploratory_may_skip_full_evaluation():
    kept = from_pilot(PILOT, gpus=2, expected_interruptions=0, checkpoint_supported=True,
                      skip_full_evaluation=False)
    skipped = from_pilot(PILOT, gpus=2, expected_interruptions=0, checkpoint_supported=True,
                         skip_full_evaluation=True)
    assert kept["raw_gpu_hours"] - skipped["raw_gpu_hours"] == pytest.approx(PILOT["eval_gpu_hours"])


def test_stated_estimates_have_one_item():
    e = from_stated(40.0, gpus=4)
    assert e == {"items_gpu_hours": {"stated": 40.0}, "raw_gpu_hours": 40.0, "wall_hours": 10.0}
