"""Checkpoint integrity: the SHA-256 a checkpoint's JSON records for its weights file, and the
error every checkpoint loader raises (numpy-free, torch-free: text PRMs, state critics and policies
share it)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Mapping

__all__ = ["CheckpointError", "UnverifiedConfigWarning", "sha256_bytes", "check_sha256", "config_sha256", "read_format_doc", "check_folder_hashes",
           "check_config_sha256"]


class CheckpointError(ValueError):
    """A checkpoint is missing, corrupt, or not in the prm-critic format its loader expects."""


class UnverifiedConfigWarning(UserWarning):
    """A checkpoint from an older version whose JSON (architecture, metadata) no hash covers."""


def sha256_bytes(data: bytes) -> str:
    """Hex SHA-256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def check_sha256(data: bytes, expected: Any, *, file: Path, doc: Path, field: str, allow_unverified: bool) -> None:
    """Check ``data`` (the bytes of ``file``) against the hash ``expected`` read from ``doc[field]``.

    ``expected=None``: a checkpoint from an older version; refused unless ``allow_unverified``.

    Raises:
        CheckpointError: no hash (and not ``allow_unverified``), a malformed hash, or a mismatch.
    """
    if expected is None:
        if allow_unverified:
            return
        raise CheckpointError(
            f"checkpoint: {str(doc)!r} records no {field!r} for {file.name} (written by an older prm-critic), so a "
            "damaged weights file cannot be detected; load it once with allow_unverified=True and save it again "
            "with this version (or pass allow_unverified=True to accept it unchecked)"
        )
    if not isinstance(expected, str) or len(expected) != 64 or any(c not in "0123456789abcdef" for c in expected):
        raise CheckpointError(f"checkpoint: {str(doc)!r} field {field!r} is {expected!r}; expected a 64-digit hex SHA-256")
    actual = sha256_bytes(data)
    if actual != expected:
        raise CheckpointError(
            f"checkpoint: {str(file)!r} is corrupt or was modified after saving: its SHA-256 is {actual}, but "
            f"{doc.name} field {field!r} records {expected}"
        )


def config_sha256(doc: Mapping[str, Any], field: str) -> str:
    """Hex SHA-256 of the JSON document ``doc`` without its own hash ``field`` (keys sorted, compact
    separators), so the hash does not depend on how the file is indented."""
    body = {k: v for k, v in doc.items() if k != field}
    return sha256_bytes(json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode())


def check_config_sha256(doc: Mapping[str, Any], *, path: Path, field: str) -> None:
    """Check the document ``doc`` (read from ``path``) against the hash it records in ``doc[field]``.

    Raises:
        CheckpointError: no hash, a malformed hash, or a document changed after saving.
    """
    expected = doc.get(field)
    if expected is None:
        raise CheckpointError(
            f"checkpoint: {str(path)!r} records no {field!r} although its format_version "
            f"{doc.get('format_version')!r} always writes one; the file was changed after saving (save the critic "
            f"again, or restore the file)"
        )
    if not isinstance(expected, str) or len(expected) != 64 or any(c not in "0123456789abcdef" for c in expected):
        raise CheckpointError(f"checkpoint: {str(path)!r} field {field!r} is {expected!r}; expected a 64-digit hex SHA-256")
    actual = config_sha256(doc, field)
    if actual != expected:
        raise CheckpointError(
            f"checkpoint: {str(path)!r} was changed after saving: its content (architecture, metadata) hashes to "
            f"{actual}, but its field {field!r} records {expected}; restore the file or save the critic again"
        )


def read_format_doc(path: Path, *, fmt: str, noun: str, prefix: str = "checkpoint", newest: int,
                    newer: str = "checkpoint") -> dict[str, Any]:
    """The JSON object in ``path`` whose ``format`` field is ``fmt`` and whose ``format_version`` is an int
    from 1 to ``newest``.

    Raises:
        CheckpointError: ``"<prefix>: '<path>' is not valid JSON (...)"``, ``"... is <noun> (format
            <found>, expected <fmt>)"`` for valid JSON that is not such a document, or ``"... has
            format_version <v>; this prm-critic reads 1 to <newest> (a newer <newer> needs a newer prm-critic)"``.
    """
    try:
        doc = json.loads(Path(path).read_bytes())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"{prefix}: {str(path)!r} is not valid JSON ({exc})") from exc
    if not isinstance(doc, dict) or doc.get("format") != fmt:
        got = doc.get("format") if isinstance(doc, dict) else None
        raise CheckpointError(f"{prefix}: {str(path)!r} is {noun} (format {got!r}, expected {fmt!r})")
    version = doc.get("format_version")
    if isinstance(version, bool) or not isinstance(version, int) or not 1 <= version <= newest:
        raise CheckpointError(f"{prefix}: {str(path)!r} has format_version {version!r}; this prm-critic reads 1 to "
                              f"{newest} (a newer {newer} needs a newer prm-critic)")
    return doc


def check_folder_hashes(d: Path, hashes: Mapping[str, Any], *, doc: Path, field: str) -> dict[str, bytes]:
    """The bytes of each file that ``hashes`` (``doc``'s ``field``) names inside the folder ``d``, each
    checked against its SHA-256.

    Raises:
        CheckpointError: a name leaving ``d``, a malformed hash or a mismatch.
        FileNotFoundError: a named file is missing.
    """
    from prm_critic._io import UnsafePathError, resolve_inside

    out = {}
    for name, digest in hashes.items():
        try:
            f = resolve_inside(d, name, what=f"checkpoint: {str(doc)!r} field {field!r}")
        except UnsafePathError as exc:
            raise CheckpointError(str(exc)) from exc
        if not f.is_file():
            raise FileNotFoundError(f"path: {str(f)!r} does not exist ({doc.name} records it in {field!r})")
        out[name] = f.read_bytes()
        check_sha256(out[name], digest, file=f, doc=doc, field=f"{field}[{name!r}]", allow_unverified=False)
    return out
