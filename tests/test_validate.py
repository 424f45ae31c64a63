"""The shared argument checks (prm_critic.validate) and the library entry points that use them."""

from __future__ import annotations

import numpy as np
import pytest

from prm_critic import validate
from prm_critic.validate import ArgumentError


def test_argument_error_is_both_a_value_and_a_type_error():
    with pytest.raises(ValueError, match=r"n_envs: expected a positive integer, got 0"):
        validate.positive_int("n_envs", 0)
    with pytest.raises(TypeError, match=r"n_envs: expected a positive integer, got '2'"):
        validate.positive_int("n_envs", "2")


@pytest.mark.parametrize("check, bad", [
    (lambda v: validate.positive_int("n", v), True),
    (lambda v: validate.check_int("n", v, minimum=0), False),
    (lambda v: validate.check_number("x", v), True),
    (lambda v: validate.check_prob("p", v), True),
    (lambda v: validate.check_gamma("gamma", v), True),
    (lambda v: validate.check_seed("seed", v), False),
])
def test_bools_are_not_numbers(check, bad):
    with pytest.raises(ArgumentError, match=repr(bad)):
        check(bad)


def test_numpy_scalars_are_accepted_and_returned_as_python_types():
    assert type(validate.positive_int("n", np.int64(3))) is int
    assert type(validate.check_prob("p", np.float32(0.5))) is float
    assert validate.check_gamma("gamma", np.float64(1.0)) == 1.0


@pytest.mark.parametrize("value", [0.0, 1.5, float("nan"), float("inf")])
def test_gamma_outside_the_half_open_unit_interval(value):
    with pytest.raises(ArgumentError, match=r"gamma: expected a number in \(0, 1\]"):
        validate.check_gamma("gamma", value)


def test_non_finite_numbers_are_refused():
    with pytest.raises(ArgumentError, match=r"scale: expected a finite number > 0, got inf"):
        validate.check_number("scale", float("inf"), positive=True)
    assert validate.check_number("scale", None, allow_none=True) is None


def test_int_hint_is_in_both_messages():
    hint = " (consecutive steps below threshold)"
    with pytest.raises(ValueError, match=r"patience: expected an int >= 1 \(consecutive steps below threshold\), got 0$"):
        validate.check_int("patience", 0, minimum=1, hint=hint)
    with pytest.raises(TypeError, match=r"patience: expected an int >= 1 \(consecutive steps below threshold\), "
                                        r"got float 2\.0$"):
        validate.check_int("patience", 2.0, minimum=1, hint=hint)
    assert validate.check_int("patience", np.int32(2), minimum=1, hint=hint) == 2


def test_choice_names_the_near_miss():
    with pytest.raises(ArgumentError, match=r"algo: expected one of \['sac', 'tqc', 'ppo'\], got 'sax'; did you mean 'sac'\?"):
        validate.check_choice("algo", "sax", ("sac", "tqc", "ppo"))
    assert validate.check_choice("shaping", None, ("potential",), allow_none=True) is None


def test_flag_refuses_truthy_values():
    with pytest.raises(ArgumentError, match=r"progress: expected True or False, got 1"):
        validate.check_flag("progress", 1)


def test_file_must_exist(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"critic: file '.*nope.onnx' does not exist"):
        validate.check_file("critic", tmp_path / "nope.onnx")
    f = tmp_path / "ok.json"
    f.write_text("{}")
    assert validate.check_file("critic", str(f)) == f


def test_train_policy_uses_the_shared_checks():
    """train_policy's argument errors come from prm_critic.validate (a near miss is named; an
    infinite scale, accepted before, is refused)."""
    pytest.importorskip("stable_baselines3")
    from prm_critic.sb3 import train_policy

    with pytest.raises(ArgumentError, match=r"algo: .*got 'sca'; did you mean 'sac'\?"):
        train_policy("PointMaze_UMaze-v3", algo="sca", total_steps=10)
    with pytest.raises(ArgumentError, match=r"scale: expected a finite number > 0, got inf"):
        train_policy("PointMaze_UMaze-v3", critic="subgoal", shaping="potential", scale=float("inf"), total_steps=10)

