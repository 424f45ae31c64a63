"""File helpers: atomic writes (a kill never leaves a half-written file behind), file names
read from JSON kept inside their folder, and checkpoint file names. Standard library only."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path, PurePosixPath, PureWindowsPath

__all__ = ["atomic_write_bytes", "resolve_inside", "UnsafePathError", "checkpoint_paths"]

# the process umask, read once at import (os.umask can only be read by setting it)
_UMASK = os.umask(0o022)
os.umask(_UMASK)


def atomic_write_bytes(path: "str | os.PathLike", data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (temp file in the same folder, fsync, ``os.replace``)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_UMASK)  # what open() would give, not mkstemp's owner-only 0600
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def checkpoint_paths(path: "str | os.PathLike") -> tuple[Path, Path]:
    """``(weights.safetensors, config.json)`` for a checkpoint path or stem.

    ``critic``, ``critic.json`` and ``critic.safetensors`` all give
    ``(critic.safetensors, critic.json)``.
    """
    p = Path(path)
    if p.suffix in (".safetensors", ".json"):
        p = p.with_suffix("")
    return p.with_suffix(".safetensors"), p.with_suffix(".json")


class UnsafePathError(ValueError):
    """A file name read from a document points outside the folder it must stay in."""


def resolve_inside(folder: "str | os.PathLike", name: object, *, what: str) -> Path:
    """``folder / name`` for a relative file name read from a document (a checkpoint JSON, a manifest).

    ``name`` must be a non-empty relative path that stays inside ``folder``: absolute paths, drive
    letters, ``..`` components, backslashes and NUL bytes are refused. ``what`` names the document
    and the field (``"'weights' in /runs/critic.json"``) for the error message. Symbolic links are not
    followed: a link inside ``folder`` is the user's choice, a ``../`` in a document is not.

    Raises:
        UnsafePathError: naming ``what``, the value and what was expected.
    """
    expected = f"expected a relative file name inside {str(folder)!r}"
    if not isinstance(name, str) or not name.strip():
        raise UnsafePathError(f"{what}: got {name!r}; {expected}")
    if "\x00" in name or "\\" in name:
        raise UnsafePathError(f"{what}: {name!r} contains a NUL byte or a backslash; {expected}")
    posix, win = PurePosixPath(name), PureWindowsPath(name)
    if posix.is_absolute() or win.is_absolute() or win.drive:
        raise UnsafePathError(f"{what}: {name!r} is an absolute path (or names a drive); {expected}")
    if any(part == ".." for part in posix.parts):
        raise UnsafePathError(f"{what}: {name!r} leaves its folder (a '..' component); {expected}")
    return Path(folder) / posix
