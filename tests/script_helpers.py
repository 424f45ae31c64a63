"""Shared by the tests of benchmark scripts: load a script of the repository as a module."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[1]


def load_script(relpath: str, name: str) -> ModuleType:
    """The script ``REPO/relpath`` executed as module ``name`` (registered in ``sys.modules``, so that
    its dataclasses and pickled names resolve)."""
    spec = importlib.util.spec_from_file_location(name, REPO / relpath)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod
