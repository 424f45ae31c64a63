"""Drop the release notices some dependencies print to stderr when they are imported.

gymnasium-robotics prints a notice from ``farama_notifications`` on every import (for 1.4.2: the
reward change of the ``AdroitHand*Dense-v1`` environments, which prm-critic does not use). Only the
exact texts of that table are removed; anything else the import writes to stderr, and every warning,
is passed on unchanged.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.abc
import importlib.machinery
import io
import sys
from types import ModuleType
from typing import Iterator

__all__ = ["NOISY_MODULES", "known_notices", "strip_notices", "quiet_notices", "import_quietly",
           "install_import_filter"]

#: Top-level modules that print a notice on import.
NOISY_MODULES = ("gymnasium_robotics",)


def known_notices() -> list[str]:
    """The exact notice texts of ``farama_notifications`` (empty when it is not installed)."""
    try:
        from farama_notifications import notifications
    except Exception:
        return []
    out: list[str] = []
    for per_version in notifications.values():
        if isinstance(per_version, dict):
            out.extend(str(v) for v in per_version.values())
    return out


def strip_notices(text: str) -> str:
    """``text`` without the known notices (each with its line end)."""
    for note in known_notices():
        text = text.replace(note + "\n", "").replace(note, "")
    return text


@contextlib.contextmanager
def quiet_notices() -> Iterator[None]:
    """Capture stderr, then write back everything but the known notices."""
    buf = io.StringIO()
    try:
        with contextlib.redirect_stderr(buf):
            yield
    finally:
        rest = strip_notices(buf.getvalue())
        if rest:
            sys.stderr.write(rest)


def import_quietly(module: str) -> ModuleType:
    """``importlib.import_module(module)`` without the known notices on stderr."""
    if module in sys.modules:
        return sys.modules[module]
    with quiet_notices():
        return importlib.import_module(module)


class _QuietLoader(importlib.abc.Loader):
    def __init__(self, inner):
        self.inner = inner

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module):
        with quiet_notices():
            self.inner.exec_module(module)

    def __getattr__(self, name):  # get_resource_reader, is_package, ... of the real loader
        return getattr(self.inner, name)


class _QuietFinder(importlib.abc.MetaPathFinder):
    """Imports :data:`NOISY_MODULES` (top level only) through :func:`quiet_notices`."""

    def find_spec(self, fullname, path, target=None):
        if fullname not in NOISY_MODULES:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _QuietLoader(spec.loader)
        return spec


def install_import_filter() -> None:
    """Make later imports of :data:`NOISY_MODULES` quiet, whoever imports them (the CLI calls
    this; idempotent). Modules already imported are not affected."""
    if not any(isinstance(f, _QuietFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _QuietFinder())
