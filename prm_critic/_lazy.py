"""How a prm-critic module exports names it imports on first use: one PEP 562 module ``__getattr__``.

A package lists its lazy names and the module each comes from::

    __getattr__, __dir__ = lazy_exports(__name__, {"make_env": "prm_critic.robotics.make", ...})

so that importing the package imports none of its heavy dependencies (gymnasium, torch, onnx, ...).
Old names and old module paths go through the same function, from :mod:`prm_critic._deprecation`
(``module_getattr``, ``alias_module``), which passes the warning to give. A lazy name is never also
the name of a submodule of its package (the import system binds an imported submodule to its package
under its name, which would hide the function); ``tests/test_faults_lazy_names.py`` checks it.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any, Callable, Mapping

__all__ = ["lazy_exports"]


def lazy_exports(module: str, names: Mapping[str, str] | None = None, *,
                 deprecated: Mapping[str, tuple[str, str]] | None = None, moved_to: str | None = None,
                 warn: Callable[..., None] | None = None) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A module's ``__getattr__`` and ``__dir__`` for names imported when first read.

    Args:
        module: the module's ``__name__``.
        names: name -> the module that defines it (imported on first read).
        deprecated: old name -> ``(message, "package.module:name")``: the object it now is, read after
            ``warn(message, stacklevel=...)`` pointing at the reader's line.
        moved_to: every other public name is read from this module, after ``warn`` names it (the
            module itself moved there).
        warn: the warning to give on reading a ``deprecated`` name or a name ``moved_to``.
    """
    names, deprecated = dict(names or {}), dict(deprecated or {})
    if (deprecated or moved_to) and warn is None:
        raise TypeError(f"lazy_exports({module!r}): deprecated names and moved_to need warn=")

    def say(message: str) -> None:  # at the line that read the name: say <- __getattr__ <- the reader
        assert warn is not None
        warn(message, stacklevel=3)

    def __getattr__(name: str) -> Any:
        if name in names:
            return getattr(importlib.import_module(names[name]), name)
        if name in deprecated:
            message, target = deprecated[name]
            say(message)
            where, _, attr = target.partition(":")
            return getattr(importlib.import_module(where), attr)
        if moved_to is not None and not name.startswith("__"):
            say(f"{module} is deprecated: it is {moved_to} now (from {moved_to} import {name}); "
                f"the old path will be removed in a future release")
            return getattr(importlib.import_module(moved_to), name)
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        here = sys.modules[module].__dict__
        return sorted({*here, *here.get("__all__", ()), *names})

    return __getattr__, __dir__
