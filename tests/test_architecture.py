"""The library's layers (docs/architecture.md): `lint-imports` checks the contracts in pyproject.toml,
so a pytest run catches an import that breaks a layer, not only CI."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _lint_imports() -> str:
    exe = shutil.which("lint-imports") or str(Path(sys.executable).with_name("lint-imports"))
    if not Path(exe).is_file():
        pytest.skip("import-linter is not installed (pip install -e \".[dev]\")")
    return exe


def _run(root: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(root))
    return subprocess.run([_lint_imports(), "--no-cache"], cwd=root, env=env, capture_output=True, text=True,
                          timeout=300)


def test_library_keeps_its_layers():
    res = _run(ROOT)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    assert "0 broken" in res.stdout


def test_a_layer_break_fails_the_check(tmp_path):
    """A data-layer module importing an integration (robotics -> sb3) and the deployed runtime
    importing gymnasium's env module are each reported, with the offending module and line."""
    shutil.copytree(ROOT / "prm_critic", tmp_path / "prm_critic",
                    ignore=shutil.ignore_patterns("__pycache__", "_specs"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    with open(tmp_path / "prm_critic" / "robotics" / "labels.py", "a") as f:
        f.write("\n\ndef _uses_training():\n    from prm_critic.sb3 import train_policy\n\n    return train_policy\n")
    with open(tmp_path / "prm_critic" / "onnx" / "runtime.py", "a") as f:
        f.write("\n\ndef _uses_env():\n    from prm_critic.robotics.make import make_env\n\n    return make_env\n")
    res = _run(tmp_path)
    assert res.returncode != 0
    assert "prm_critic.robotics is not allowed to import prm_critic.sb3" in res.stdout, res.stdout[-4000:]
    assert "prm_critic.robotics.labels -> prm_critic.sb3" in res.stdout
    assert "prm_critic.onnx.runtime is not allowed to import prm_critic.robotics.make" in res.stdout


def test_require_refuses_the_library_s_own_modules():
    from prm_critic._optional import require

    with pytest.raises(ValueError, match=r"require\(\) is for third-party optional dependencies, got "
                                         r"'prm_critic.wrappers'"):
        require("prm_critic.wrappers")


def test_deprecations_go_through_one_helper():
    """Every deprecation (an old name, an old module, an old keyword) warns through
    ``prm_critic._deprecation``: no other module of the package raises a DeprecationWarning itself."""
    own = [p for p in sorted((ROOT / "prm_critic").rglob("*.py"))
           if p.name != "_deprecation.py" and "DeprecationWarning" in p.read_text(encoding="utf-8")]
    assert not own, f"DeprecationWarning outside prm_critic/_deprecation.py: {own}"


def test_old_import_paths_still_work():
    from prm_critic.integrity import CheckpointError
    from prm_critic.robotics.layout import CriticInputLayout

    models_checkpoint = pytest.importorskip("prm_critic.models.checkpoint")
    assert models_checkpoint.CheckpointError is CheckpointError
    pytest.importorskip("gymnasium")
    from prm_critic.robotics.make import CriticInputLayout as OldLayout

    assert OldLayout is CriticInputLayout


def test_one_lazy_export_mechanism():
    """Every module ``__getattr__`` of the package comes from ``prm_critic._lazy.lazy_exports`` (directly
    or through ``prm_critic._deprecation``), and no module replaces its own module class."""
    own_getattr, class_swap = [], []
    for p in sorted((ROOT / "prm_critic").rglob("*.py")):
        tree = ast.parse(p.read_text(encoding="utf-8"))
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in ("__getattr__", "__dir__"):
                own_getattr.append(f"{p.relative_to(ROOT)}:{node.lineno}")
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Attribute) and t.attr == "__class__"
                                                    for t in node.targets):
                class_swap.append(f"{p.relative_to(ROOT)}:{node.lineno}")
    assert not own_getattr, f"module __getattr__ / __dir__ written by hand (use prm_critic._lazy.lazy_exports): {own_getattr}"
    assert not class_swap, f"a module class swapped: {class_swap}"


# --------------------------------------------------------------------------- long parameter lists
#: a private function with this many parameters or more takes a config object instead
_MAX_PARAMS = 10


def _long_private_functions(package: Path) -> list[str]:
    """``"path:line name (k parameters)"`` for every private function of ``package`` (a name with a
    leading underscore, not a dunder, or any function of a private module such as ``_common.py``)
    with ``_MAX_PARAMS`` parameters or more, ``self`` / ``cls`` not counted."""
    found = []
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package.parent)
        private_module = any(part.startswith("_") and not part.startswith("__") for part in rel.parts)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(rel))):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            a = node.args
            k = len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs)
            first = (a.posonlyargs + a.args)[:1]
            if first and first[0].arg in ("self", "cls"):
                k -= 1
            private = node.name.startswith("_") and not node.name.startswith("__")
            if k >= _MAX_PARAMS and (private or private_module):
                found.append(f"{rel.as_posix()}:{node.lineno} {node.name} ({k} parameters)")
    return found


def test_no_private_function_takes_a_long_parameter_list():
    """Long parameter lists are frozen config dataclasses, checked once in ``__post_init__`` and
    passed whole (docs/architecture.md); public entry points (``train_policy``, the shapers) take the
    config or its fields as keywords (``validate.config_from``)."""
    found = _long_private_functions(ROOT / "prm_critic")
    assert not found, (f"private functions with {_MAX_PARAMS} or more parameters (pass a frozen config "
                       f"dataclass instead): {found}")


def test_the_parameter_count_check_names_the_offender(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    ten = ", ".join(f"a{i}" for i in range(9))
    (pkg / "mod.py").write_text(
        f"def _long(self_not_first, {ten}):\n    pass\n\n"  # 10 parameters: reported
        f"def public({ten}, b):\n    pass\n\n"  # public: not reported
        f"class C:\n    def _method(self, {ten}):\n        pass\n\n"  # 9 without self: not reported
        f"    def __init__(self, {ten}, b):\n        pass\n")  # dunder of a public module: not reported
    (pkg / "sub" / "_private.py").write_text(f"def helper(*, {ten}, b):\n    pass\n")
    assert _long_private_functions(pkg) == ["pkg/mod.py:1 _long (10 parameters)",
                                            "pkg/sub/_private.py:1 helper (10 parameters)"]
