"""Lazy names of the subpackages resolve to what the docs say, whatever was imported before.

A package attribute loaded on first use (``__getattr__``) must give the documented function or class
even after a submodule of the same name was imported (the import system binds the submodule to the
package under that name), and a light name must not pull in a heavy dependency.
"""

from __future__ import annotations

import importlib
import importlib.util
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
            "prm_critic.onnx": "_LAZY", "prm_critic.wrappers": "_MODULES", "prm_critic.zoo": "_MODULES"}


def _lazy_names():
    for pkg, table in PACKAGES.items():
        for name, module in getattr(importlib.import_module(pkg), table).items():
            yield pkg, name, module


def _resolve(pkg: str, name: str):
    ns: dict = {}
    exec(f"from {pkg} import {name} as got", ns)
    return ns["got"]


def test_every_lazy_name_resolves_to_its_object_after_a_same_named_submodule_import():
    wrong, checked, clashing = [], 0, []
    for pkg, name, module in _lazy_names():
        try:
            want = getattr(importlib.import_module(module), name)
        except ImportError:  # an optional dependency this environment lacks
            continue
        if importlib.util.find_spec(f"{pkg}.{name}") is not None:
            importlib.import_module(f"{pkg}.{name}")  # the submodule of the same name, imported first
            clashing.append(f"{pkg}.{name}")
        for got in (_resolve(pkg, name), getattr(importlib.import_module(pkg), name)):
            if got is not want:
                wrong.append(f"{pkg}.{name}: {got!r}, expected {want!r}")
        checked += 1
    assert not wrong, wrong
    assert "prm_critic.robotics.collect" in clashing and checked > 20
    # the submodule itself stays reachable by its path
    assert importlib.import_module("prm_critic.robotics.collect").__name__ == "prm_critic.robotics.collect"
    from prm_critic.robotics.collect import load_shard  # noqa: F401
    correct(22, f"the {checked} lazy names of the subpackages, `from prm_critic.robotics import collect` after "
                f"its submodule was imported",
            "every name is the documented function or class, never the module of the same name")


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
    importlib.import_module("prm_critic.robotics.collect")
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
