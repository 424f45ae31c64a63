"""Load a sibling script of ``benchmarks/rl`` by its path, under a name of its own.

The benchmark folders each have a ``run.py`` and a ``report.py``; importing them as ``run`` / ``report``
from ``sys.path`` picks whichever was imported first in the process (a test session imports both).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def sibling(name: str) -> ModuleType:
    """The module ``benchmarks/rl/<name>.py`` (loaded once per process as ``prm_rl_bench_<name>``)."""
    key = f"prm_rl_bench_{name}"
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(key, Path(__file__).resolve().parent / f"{name}.py")
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        sys.modules[key] = mod
        spec.loader.exec_module(mod)
    return sys.modules[key]
