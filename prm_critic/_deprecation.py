"""How prm-critic deprecates something: one warning function and one module ``__getattr__`` factory.

* an old name or location of a class or function: :func:`module_getattr` (the module's
  ``__getattr__`` returns the current object and warns with the old name's message);
* a deprecated module: :func:`warn` at the top of the module (warns when it is imported);
* a deprecated keyword argument: :func:`warn` where the function reads it.

Every warning is a ``DeprecationWarning`` that points at the user's line, with a message naming
what to use instead.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any, Callable, Mapping

__all__ = ["warn", "module_getattr"]


def warn(message: str, *, stacklevel: int = 2) -> None:
    """``warnings.warn(message, DeprecationWarning, stacklevel=stacklevel)`` as if called where this
    is called (``stacklevel=2``: the caller of the function that calls this)."""
    warnings.warn(message, DeprecationWarning, stacklevel=stacklevel + 1)


def module_getattr(module: str, old: Mapping[str, tuple[str, str]],
                   lazy: Mapping[str, str] | None = None) -> Callable[[str], Any]:
    """A module ``__getattr__`` for deprecated names (and, optionally, lazily imported current ones).

    Args:
        module: the module's ``__name__`` (for the ``AttributeError`` of an unknown name).
        old: deprecated name -> ``(message, "package.module:name")``: the object it now is, imported
            when the old name is read, with a ``DeprecationWarning`` of ``message`` at the reader's line.
        lazy: current name -> the module it is imported from when first read (no warning).
    """
    lazy = dict(lazy or {})
    old = dict(old)

    def __getattr__(name: str) -> Any:
        if name in lazy:
            return getattr(importlib.import_module(lazy[name]), name)
        if name in old:
            message, target = old[name]
            warn(message, stacklevel=2)
            where, _, attr = target.partition(":")
            return getattr(importlib.import_module(where), attr)
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return __getattr__
