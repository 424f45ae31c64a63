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


# --------------------------------------------------------------------------- one validation module
#: names of prm_critic.validate's checks, and the usual names of the same checks under another name
_CHECK_NAMES = {n for n in validate.__all__ if n != "ArgumentError"} | {
    "check_bool", "check_float", "check_positive", "check_nonneg", "check_nonnegative", "check_probability",
    "check_discount", "check_positive_int",
}
#: thin wrappers allowed outside validate.py: (module, function) -> why it exists
_THIN_WRAPPERS = {
    ("prm_critic/langgraph/_common.py", "check_prob"): 'validate.check_prob worded "a float"',
}


def _duplicate_checks(root):
    """``(module, function, line, thin)`` for every function outside validate.py named like one of
    validate's checks (leading underscores ignored); ``thin`` when its body (docstring aside) is one
    ``return validate.<check>(...)``."""
    import ast

    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root.parent).as_posix()
        if rel == "prm_critic/validate.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=rel)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.lstrip("_") in _CHECK_NAMES:
                if any(isinstance(d, ast.Name) and d.id == "overload" or isinstance(d, ast.Attribute)
                       and d.attr == "overload" for d in node.decorator_list):
                    continue  # a typing.overload signature: the implementation below it is the one checked
                body = node.body[1:] if node.body and isinstance(node.body[0], ast.Expr) \
                    and isinstance(node.body[0].value, ast.Constant) else node.body
                call = body[0].value if len(body) == 1 and isinstance(body[0], ast.Return) else None
                thin = isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) \
                    and isinstance(call.func.value, ast.Name) and call.func.value.id == "validate" \
                    and call.func.attr in validate.__all__
                found.append((rel, node.name, node.lineno, thin))
    return found


def _offences(root):
    return [f"{rel}:{line} {name}" + ("" if thin else " (not a thin call into prm_critic.validate)")
            for rel, name, line, thin in _duplicate_checks(root)
            if (rel, name) not in _THIN_WRAPPERS or not thin]


def test_no_private_copy_of_a_validate_check():
    """An argument check that prm_critic.validate has lives there only: no check_int/_check_prob/...
    elsewhere in the package, except the listed thin wrappers (one call into validate)."""
    from pathlib import Path

    import prm_critic

    root = Path(prm_critic.__file__).parent
    assert _offences(root) == [], "use prm_critic.validate (or list a thin wrapper in _THIN_WRAPPERS)"
    listed = {(rel, name) for rel, name, _, _ in _duplicate_checks(root)}
    assert listed == set(_THIN_WRAPPERS), "a listed thin wrapper is gone: remove it from _THIN_WRAPPERS"


def test_the_duplicate_scan_finds_a_copy(tmp_path):
    """The scan above can fail: a private _check_int, a check_flag method and a thin wrapper that
    grew logic are each reported."""
    pkg = tmp_path / "prm_critic"
    (pkg / "langgraph").mkdir(parents=True)
    (pkg / "validate.py").write_text("def check_int(name, v, *, minimum):\n    return v\n")
    (pkg / "collect.py").write_text(
        "def _check_int(name, v, lo):\n    if v < lo:\n        raise ValueError(name)\n    return int(v)\n\n"
        "class A:\n    def check_flag(self, name, v):\n        return bool(v)\n")
    (pkg / "langgraph" / "_common.py").write_text(
        'def check_prob(name, v):\n    """doc"""\n    v = float(v)\n    return validate.check_prob(name, v)\n')
    assert _offences(pkg) == [
        "prm_critic/collect.py:1 _check_int (not a thin call into prm_critic.validate)",
        "prm_critic/collect.py:7 check_flag (not a thin call into prm_critic.validate)",
        "prm_critic/langgraph/_common.py:1 check_prob (not a thin call into prm_critic.validate)",
    ]
    (pkg / "langgraph" / "_common.py").write_text(
        'def check_prob(name, v):\n    """doc"""\n    return validate.check_prob(name, v, noun="a float")\n')
    (pkg / "collect.py").write_text("def _check_nonneg(name, v):\n    return validate.check_number(name, v, low=0.0)\n")
    assert _offences(pkg) == ["prm_critic/collect.py:1 _check_nonneg"]
