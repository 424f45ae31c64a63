"""Lazy names of the subpackages resolve to what the docs say, whatever was imported before.

A package attribute loaded on first use (``__getattr__``) must give the documented function or class,
so no lazy name is also the name of a submodule (the import system binds an imported submodule to the
package under its name), and a light name must not pull in a heavy dependency.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest

from faults import correct

pytestmark = pytest.mark.fault

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"prm_critic.robotics": "_LAZY", "prm_critic.text": "_LAZY", "prm_critic.llm": "_LAZY",
            "prm_critic.onnx": "_LAZY", "prm_critic.wrappers": "_LAZY", "prm_critic.zoo": "_LAZY"}


def _lazy_names():
    for pkg, table in PACKAGES.items():
        for name, module in getattr(importlib.import_module(pkg), table).items():
            yield pkg, name, module


def _resolve(pkg: str, name: str):
    ns: dict = {}
    exec(f"from {pkg} import {name} as got", ns)
    return ns["got"]


def test_every_lazy_name_resolves_to_its_object_and_none_is_a_submodule():
    wrong, checked, clashing = [], 0, []
    for pkg, name, module in _lazy_names():
        try:
            want = getattr(importlib.import_module(module), name)
        except ImportError:  # an optional dependency this environment lacks
            continue
        if name in {m.name for m in pkgutil.iter_modules(importlib.import_module(pkg).__path__)}:
            clashing.append(f"{pkg}.{name}")
        for got in (_resolve(pkg, name), getattr(importlib.import_module(pkg), name)):
            if got is not want:
                wrong.append(f"{pkg}.{name}: {got!r}, expected {want!r}")
        checked += 1
    assert not wrong, wrong
    assert not clashing, f"lazy names that are also submodules: {clashing}"
    assert checked > 20
    # the module that defines collect; its old path is a deprecated alias that leaves the function alone
    import prm_critic.robotics.collection as collection
    from prm_critic.robotics import collect

    assert collection.__name__ == "prm_critic.robotics.collection" and collect is collection.collect
    with pytest.warns(DeprecationWarning, match=r"prm_critic\.robotics\.collect is deprecated: it is "
                                                r"prm_critic\.robotics\.collection now"):
        from prm_critic.robotics.collect import load_shard
    assert load_shard is collection.load_shard
    assert _resolve("prm_critic.robotics", "collect") is collection.collect
    correct(22, f"the {checked} lazy names of the subpackages, `from prm_critic.robotics import collect` after "
                f"the old module path was imported",
            "every name is the documented function or class, never a module; no lazy name is a submodule")


_DOC_CALL = re.compile(r"\b(robotics|onnx|text|llm|wrappers)\.([A-Za-z_]\w*)\(")
_DOC_IMPORT = re.compile(r"from (prm_critic\.(?:robotics|onnx|text|llm|wrappers)) import ([\w, ]+)")


def test_names_the_docs_use_are_what_the_docs_call():
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "docs" / "readme").glob("*.md"))]
    seen = set()
    for f in docs:
        text = f.read_text(encoding="utf-8")
        for pkg, name in _DOC_CALL.findall(text):
            seen.add((f"prm_critic.{pkg}", name, f.name))
        for pkg, names in _DOC_IMPORT.findall(text):
            seen.update((pkg, n.strip(), f.name) for n in names.split(",") if n.strip())
    assert ("prm_critic.robotics", "collect", "architecture.md") in seen
    wrong = []
    for pkg, name, doc in sorted(seen):
        try:
            got = _resolve(pkg, name)
        except ImportError:
            continue
        if isinstance(got, types.ModuleType):
            wrong.append(f"{doc}: {pkg}.{name} is the module {got.__name__}, not a function or class")
    assert not wrong, wrong
    correct(22, "names imported or called from the subpackages in README.md and docs/",
            f"all {len(seen)} are functions or classes, none a module")


def test_layout_from_the_robotics_package_does_not_import_gymnasium():
    code = ("import sys; from prm_critic.robotics import CriticInputLayout; "
            "print(CriticInputLayout.__module__, 'gymnasium' in sys.modules, 'mujoco' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["prm_critic.robotics.layout", "False", "False"], out.stdout + out.stderr
    correct(22, "from prm_critic.robotics import CriticInputLayout",
            "the numpy-only layout module; gymnasium and MuJoCo not imported")
