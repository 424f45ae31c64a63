"""File helpers: atomic writes (a kill never leaves a half-written file behind), file names
read from JSON kept inside their folder, and checkpoint file names. Standard library only."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any, Sequence

__all__ = ["atomic_write_bytes", "resolve_inside", "UnsafePathError", "checkpoint_paths", "OutputExistsError",
           "claim_output", "setting_diffs", "read_record", "write_record", "record_diffs"]

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


class OutputExistsError(ValueError):
    """An output folder (or checkpoint stem) already holds another run's files."""


class _Missing:
    def __repr__(self) -> str:
        return "(not recorded)"


_MISSING = _Missing()


def setting_diffs(name: str, old: Any, new: Any) -> list[tuple[str, Any, Any]]:
    """``(dotted name, old value, new value)`` of every leaf where two recorded settings differ:
    nested dicts (a spec, a layout) are compared key by key and lists of one length item by item
    (``spec.max_episode_steps``, ``spec.subgoals[1].threshold``), so a refusal names the field that
    changed rather than the whole record. A key present on one side only differs from
    ``(not recorded)``."""
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[tuple[str, Any, Any]] = []
        for key in list(old) + [k for k in new if k not in old]:
            out += setting_diffs(f"{name}.{key}" if name else str(key), old.get(key, _MISSING),
                                 new.get(key, _MISSING))
        return out
    if isinstance(old, (list, tuple)) and isinstance(new, (list, tuple)) and len(old) == len(new):
        return [d for i, (o, n) in enumerate(zip(old, new)) for d in setting_diffs(f"{name}[{i}]", o, n)]
    return [] if old == new else [(name, old, new)]


def claim_output(where: "str | os.PathLike", owned: Sequence["str | os.PathLike"], diffs: "list | None", *,
                 overwrite: bool, what: str, held: str = "a run") -> bool:
    """The one rule for a command's output: resume the same run, refuse another, or replace it whole.

    Args:
        where: the output folder or checkpoint stem (for the message; it must not be an existing file
            when it is a folder the caller writes into: the caller checks that).
        owned: every path this command writes there (files and folders) except its run record, which
            the caller rewrites: a record with no output beside it (a run refused before it wrote
            anything) holds nothing to keep. Only these paths are ever removed.
        diffs: ``setting_diffs`` of the run recorded there against this one (``[]``: the same run),
            or ``None`` when no record is there.
        overwrite: replace what is there: remove every existing ``owned`` path first.
        what: the option or argument naming the output (``"--out"``, ``"out_dir"``).
        held: what is there, for the message (``"data collected"``, ``"a critic trained"``).

    Returns:
        ``True`` when the same run is there to resume (``diffs == []`` and files present), ``False``
        for a fresh start (nothing there, or replaced with ``overwrite``).

    Raises:
        OutputExistsError: files of another run are there (settings that differ, or files without
            a record of their settings) and ``overwrite`` is false; the message names each difference.
    """
    present = [Path(p) for p in owned if Path(p).exists() or Path(p).is_symlink()]
    if not present:
        return False
    if diffs == [] and not overwrite:
        return True
    if not overwrite:
        if diffs is None:
            why = (f"already holds {held} whose settings were not recorded ("
                   + ", ".join(p.name for p in present[:4]) + (", ..." if len(present) > 4 else "") + ")")
        else:
            shown = "; ".join(f"{n}: {o!r} there, {v!r} in this run" for n, o, v in diffs[:6])
            more = f"; and {len(diffs) - 6} more" if len(diffs) > 6 else ""
            why = f"already holds {held} with other settings ({len(diffs)} differ: {shown}{more})"
        raise OutputExistsError(f"{what}: {str(where)!r} {why}; re-run with its settings to resume it, use another "
                                "folder, or pass --overwrite (overwrite=True) to replace it whole")
    for p in present:
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        else:
            p.unlink()
    return False


def read_record(path: "str | os.PathLike") -> "dict | None":
    """A JSON run record written by :func:`write_record`; ``None`` when there is none."""
    p = Path(path)
    if not p.exists():
        return None
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise OutputExistsError(f"run record {str(p)!r} is not valid JSON ({exc}); delete it, or pass --overwrite "
                                "(overwrite=True) to replace that run whole") from None
    if not isinstance(doc, dict):
        raise OutputExistsError(f"run record {str(p)!r}: expected a JSON object, got {type(doc).__name__}; "
                                "pass --overwrite (overwrite=True) to replace that run whole")
    return doc


def write_record(path: "str | os.PathLike", settings: dict) -> None:
    """Write a run record (the settings that make a run this run), atomically."""
    atomic_write_bytes(path, (json.dumps(settings, indent=1, sort_keys=True) + "\n").encode())


def record_diffs(path: "str | os.PathLike", settings: dict) -> "list | None":
    """:func:`setting_diffs` of the run record at ``path`` against ``settings``; ``None`` without a record."""
    old = read_record(path)
    return None if old is None else setting_diffs("", old, json.loads(json.dumps(settings)))
