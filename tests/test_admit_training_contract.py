"""The source document's four-argument admission function, kept exactly — minus its NaN hole."""
import math

import pytest

from lib.gate.admission import admit_training


def test_the_source_documents_three_asserts():
    assert admit_training(18.5, 23, True, 2)["state"] == "admit"
    assert admit_training(28, 23, True, 2)["reason"] == "budget"
    assert admit_training(18.5, 23, False, 2)["reason"] == "no-recovery"


def test_same_returned_dicts_as_the_source():
    assert admit_training(18.5, 23, True, 2) == {"state": "admit", "reserved_gpu_hours": 18.5}
    assert admit_training(28, 23, True, 2) == {"state": "defer", "reason": "budget"}
    assert admit_training(18.5, 23, False, 2) == {"state": "defer", "reason": "no-recovery"}
    assert admit_training(18.5, 23, False, 0) == {"state": "admit", "reserved_gpu_hours": 18.5}


def test_budget_is_checked_before_recovery_as_in_the_source():
    assert admit_training(28, 23, False, 2) == {"state": "defer", "reason": "budget"}


@pytest.mark.parametrize("position,name", [(0, "estimated_gpu_hours"), (1, "budget_gpu_hours"),
                                           (3, "expected_interruptions")])
@pytest.mark.parametrize("bad", [-1, -0.5, math.nan, math.inf, -math.inf, True, False, "3", None, [1]])
def test_bad_numbers_raise_value_error_naming_the_argument(position, name, bad):
    args = [18.5, 23, True, 2]
    args[position] = bad
    with pytest.raises(ValueError, match=name):
        admit_training(*args)


def test_nan_estimate_is_not_admitted_unlike_the_source():
    # the source's min() check lets NaN through and admits it: we raise instead
    with pytest.raises(ValueError, match="finite"):
        admit_training(math.nan, 23, True, 2)


def test_non_integral_interruption_count_raises():
    with pytest.raises(ValueError, match="expected_interruptions must be a whole number"):
        admit_training(18.5, 23, True, 1.5)
    assert admit_training(18.5, 23, True, 2.0)["state"] == "admit"


@pytest.mark.parametrize("bad", [1, 0, "yes", None])
def test_checkpoint_supported_must_be_a_bool(bad):
    with pytest.raises(ValueError, match="checkpoint_supported"):
        admit_training(18.5, 23, bad, 2)
