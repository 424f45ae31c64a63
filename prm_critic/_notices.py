"""Drop the release notice gymnasium-robotics prints to stderr when it is imported.

gymnasium-robotics prints a notice from ``farama_notifications`` on every import (for 1.4.2: the
reward change of the ``AdroitHand*Dense-v1`` environments, which prm-critic does not use).
:func:`quiet_notices` is wrapped around the library's one import of it
(:func:`prm_critic.robotics.make.register_robotics_envs`, which every env the library builds goes
through). Only the exact texts of that table are removed; anything else the import writes to
stderr, and every warning, is passed on unchanged. An import of gymnasium-robotics outside the
library (your own ``import gymnasium_robotics``) prints its notice as usual.
"""

from __future__ import annotations

import contextlib
import io
import sys
from typing import Iterator

__all__ = ["known_notices", "strip_notices", "quiet_notices"]


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
