"""How prm-critic deprecates something: one warning function, over the one lazy-export mechanism.

* an old name or location of a class or function: :func:`module_getattr` (the module's
  ``__getattr__`` returns the current object and warns with the old name's message);
* an old module path: :func:`alias_module`;
* a deprecated keyword argument: :func:`warn` where the function reads it.

Every warning is a ``DeprecationWarning`` that points at the user's line, with a message naming
what to use instead. Names are resolved by :func:`prm_critic._lazy.lazy_exports`.
"""

from __future__ import annotations

import importlib.machinery
import sys
import types
import warnings
from typing import Any, Callable, Mapping

from prm_critic._lazy import lazy_exports

__all__ = ["warn", "module_getattr", "alias_module"]


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
    return lazy_exports(module, lazy, deprecated=old, warn=warn)[0]


def alias_module(old: str, new: str) -> types.ModuleType:
    """Keep the module path ``old`` importable as a deprecated alias of ``new``.

    ``sys.modules[old]`` becomes a module whose public names are read from ``new``, each read warning
    (``from old import name`` and ``importlib.import_module(old)`` work). There is no file at ``old``:
    an imported file would be bound to its package under its name, hiding a package attribute of that
    name (``prm_critic.robotics.collect``, the function, over the module that defined it).
    """
    if old in sys.modules:
        return sys.modules[old]
    alias = types.ModuleType(old, f"Deprecated alias of :mod:`{new}`.")
    alias.__spec__ = importlib.machinery.ModuleSpec(old, None)
    alias.__dict__["__getattr__"], alias.__dict__["__dir__"] = lazy_exports(old, moved_to=new, warn=warn)
    sys.modules[old] = alias
    return alias
