"""Metadata contract of exported critics (no torch import: the runtime reads it on deploy boxes)."""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Any, Mapping

__all__ = ["FORMAT", "TEXT_FORMAT", "FORMAT_VERSION", "INPUT_NAME", "OUTPUT_NAME", "DEFAULT_OPSET", "RTOL", "ATOL",
           "LABEL_SEMANTICS", "JSON_KEYS", "INT_KEYS", "OnnxExportError", "decode_metadata",
           "HASH_KEY", "scan_onnx", "seal", "check_model_bytes", "seal_onnx"]

FORMAT = "prm-critic/state-critic-onnx"
TEXT_FORMAT = "prm-critic/text-prm-onnx"
FORMAT_VERSION = 1
INPUT_NAME = "obs"
OUTPUT_NAME = "scores"
DEFAULT_OPSET = 18
RTOL = 1e-4
ATOL = 1e-5

#: metadata keys whose values are JSON documents (decoded by :func:`read_onnx_metadata`)
JSON_KEYS = ("layout", "heads", "normalization", "net", "extra", "spec")
#: metadata keys whose values are ints
INT_KEYS = ("obs_dim", "opset", "format_version", "ir_version")

LABEL_SEMANTICS = (
    "scores[:, 0] = progress: how far along the task the step is, in [0, 1]; "
    "scores[:, 1] = success: probability that the task can still be completed from the step, in [0, 1]"
)


class OnnxExportError(ValueError):
    """An export failed: bad arguments, the checker rejected the graph, or onnxruntime disagrees with torch."""


def decode_metadata(raw: Mapping[str, str]) -> dict[str, Any]:
    """Decode the string metadata map of an exported critic (JSON and int fields)."""
    out: dict[str, Any] = dict(raw)
    for k in JSON_KEYS:
        if k in out:
            try:
                out[k] = json.loads(out[k])
            except json.JSONDecodeError as exc:
                raise OnnxExportError(f"metadata {k!r}: expected JSON, got {out[k]!r}") from exc
    for k in INT_KEYS:
        if k in out:
            try:
                out[k] = int(out[k])
            except ValueError as exc:
                raise OnnxExportError(f"metadata {k!r}: expected an int, got {out[k]!r}") from exc
    if out.get("batch") == "1":
        out["batch"] = 1
    for k in ("task", "env_id"):
        if out.get(k) == "":
            out[k] = None
    return out


# ---------------------------------------------------------------------------------------------
# Integrity and single-file checks, without the ``onnx`` package (deploy boxes have onnxruntime only)
# ---------------------------------------------------------------------------------------------

#: metadata key of the content hash every exported critic carries
HASH_KEY = "prm_critic.sha256"
_HASH_LEN = 64
_PLACEHOLDER = "0" * _HASH_LEN

# protobuf field numbers of the ONNX messages walked below (onnx.proto)
_MODEL, _GRAPH, _NODE, _ATTR, _TENSOR, _SPARSE, _FUNCTION, _TRAINING = range(8)
_CHILDREN = {
    _MODEL: {7: _GRAPH, 20: _TRAINING, 25: _FUNCTION},
    _GRAPH: {1: _NODE, 5: _TENSOR, 15: _SPARSE},
    _NODE: {5: _ATTR},
    _ATTR: {5: _TENSOR, 6: _GRAPH, 10: _TENSOR, 11: _GRAPH, 22: _SPARSE, 23: _SPARSE},
    _SPARSE: {1: _TENSOR, 2: _TENSOR},
    _FUNCTION: {7: _NODE},
    _TRAINING: {1: _GRAPH, 2: _GRAPH},
    _TENSOR: {},
}
_MODEL_METADATA, _TENSOR_NAME, _TENSOR_EXTERNAL_DATA, _TENSOR_DATA_LOCATION = 14, 8, 13, 14


class _Malformed(ValueError):
    pass


def _varint(buf: memoryview, i: int, end: int) -> tuple[int, int]:
    out = shift = 0
    while True:
        if i >= end or shift > 63:
            raise _Malformed(f"truncated or overlong varint at byte {i}")
        b = buf[i]
        i += 1
        out |= (b & 0x7F) << shift
        if b < 0x80:
            return out, i
        shift += 7


def _fields(buf: memoryview, start: int, end: int):
    """``(field, wire_type, value_or_start, end_or_None)`` for each field of one protobuf message."""
    i = start
    while i < end:
        key, i = _varint(buf, i, end)
        field, wire = key >> 3, key & 7
        if field == 0:
            raise _Malformed(f"field number 0 at byte {i}")
        if wire == 0:
            val, i = _varint(buf, i, end)
            yield field, wire, val, None
        elif wire == 2:
            n, i = _varint(buf, i, end)
            if i + n > end:
                raise _Malformed(f"field {field} runs past its message ({i + n} > {end})")
            yield field, wire, i, i + n
            i += n
        elif wire in (1, 5):
            i += 8 if wire == 1 else 4
        else:
            raise _Malformed(f"unsupported wire type {wire} at byte {i}")
    if i != end:
        raise _Malformed(f"message overruns its end ({i} > {end})")


class OnnxScan:
    """What :func:`scan_onnx` read from a serialized model: metadata, its byte spans, external tensors."""

    def __init__(self) -> None:
        self.props: dict[str, str] = {}
        self.spans: dict[str, tuple[int, int]] = {}
        self.duplicates: list[str] = []
        self.external: list[str] = []


def scan_onnx(data: bytes) -> OnnxScan:
    """Walk a serialized ``ModelProto`` without the ``onnx`` package.

    Collects the metadata map (``metadata_props``) with the byte span of every value, and the names
    of tensors stored as external data (initializers, sparse initializers, ``Constant`` values,
    nested graphs, functions, training graphs).

    Raises:
        ValueError: the bytes are not a well-formed protobuf message.
    """
    buf = memoryview(data)
    scan = OnnxScan()

    def walk(kind: int, start: int, end: int, depth: int) -> None:
        if depth > 64:
            raise _Malformed("messages nested deeper than 64 levels")
        children = _CHILDREN[kind]
        name = None
        external = False
        for field, wire, a, b in _fields(buf, start, end):
            if kind == _TENSOR:
                if field == _TENSOR_NAME and wire == 2:
                    name = bytes(buf[a:b]).decode("utf-8", "replace")
                elif field == _TENSOR_EXTERNAL_DATA and wire == 2:
                    external = True
                elif field == _TENSOR_DATA_LOCATION and wire == 0 and a == 1:  # TensorProto.EXTERNAL
                    external = True
            elif kind == _MODEL and field == _MODEL_METADATA and wire == 2:
                key = value = None
                span = (a, a)
                for f2, w2, c, d in _fields(buf, a, b):
                    if f2 == 1 and w2 == 2:
                        key = bytes(buf[c:d]).decode("utf-8")
                    elif f2 == 2 and w2 == 2:
                        value, span = bytes(buf[c:d]).decode("utf-8"), (c, d)
                if key is not None:
                    if key in scan.props:
                        scan.duplicates.append(key)
                    scan.props[key] = "" if value is None else value
                    scan.spans[key] = span
            elif field in children and wire == 2:
                walk(children[field], a, b, depth + 1)
        if external:
            scan.external.append(name or "<unnamed tensor>")

    try:
        walk(_MODEL, 0, len(buf), 0)
    except UnicodeDecodeError as exc:
        raise _Malformed(f"metadata is not UTF-8 ({exc})") from exc
    return scan


def _digest(data: bytes, span: tuple[int, int]) -> str:
    import hashlib

    h = hashlib.sha256()
    h.update(memoryview(data)[: span[0]])
    h.update(_PLACEHOLDER.encode())
    h.update(memoryview(data)[span[1]:])
    return h.hexdigest()


def seal(data: bytes) -> bytes:
    """Write the content hash into a serialized model whose metadata holds ``HASH_KEY = "0" * 64``.

    The hash is the SHA-256 of the file with the 64 hex characters of that value set to ``"0"``,
    so it covers every byte of the graph, its weights and the rest of its metadata.
    """
    scan = scan_onnx(data)
    span = scan.spans.get(HASH_KEY)
    if span is None or scan.props[HASH_KEY] != _PLACEHOLDER or HASH_KEY in scan.duplicates:
        raise OnnxExportError(f"export: metadata {HASH_KEY!r} must hold one {_HASH_LEN}-zero placeholder before sealing")
    return bytes(data[: span[0]]) + _digest(data, span).encode() + bytes(data[span[1]:])


def _scan_checked(data: bytes, where: str, fmts: tuple[str, ...], error: type[Exception]) -> OnnxScan:
    """Well-formed, self-contained, one of the prm-critic ``fmts``: the scan, else ``error``."""
    try:
        scan = scan_onnx(data)
    except ValueError as exc:
        raise error(f"path: {where!r} is corrupt or not an ONNX model ({exc})") from exc
    if scan.external:
        raise error(
            f"path: {where!r} keeps tensors {scan.external[:5]} in external data files; expected one self-contained "
            "file (prm-critic exports never use external data, and it refuses to read files named inside a model)"
        )
    got_fmt = scan.props.get("prm_critic.format")
    if got_fmt not in fmts:
        expected = repr(fmts[0]) if len(fmts) == 1 else f"one of {list(fmts)}"
        raise error(
            f"path: {where!r} is an ONNX model but not an exported prm-critic critic "
            f"(metadata 'prm_critic.format' is {got_fmt!r}, expected {expected})"
        )
    if HASH_KEY in scan.duplicates:
        raise error(f"path: {where!r} has metadata {HASH_KEY!r} more than once; the file was altered, re-export it")
    return scan


def check_model_bytes(data: bytes, where: str, *, fmt: str, error: type[Exception], allow_unverified: bool = False,
                      stacklevel: int = 4) -> dict[str, str]:
    """Check a serialized exported critic before any inference session is built; its raw metadata.

    In order: a well-formed model, no tensor stored as external data, the prm-critic ``fmt``, and the
    content hash (``HASH_KEY``; see :func:`seal`). ``allow_unverified=True`` accepts a file without
    a hash (exported by an older prm-critic) and a well-formed file whose hash does not match (e.g.
    re-saved by a graph optimiser such as onnxsim or onnxslim) with a ``RuntimeWarning`` naming both
    hashes (``stacklevel``: where the warning points, counted from this function); :func:`seal_onnx`
    re-seals such a file on purpose.

    Raises:
        ``error``: naming ``where``, what was found and what was expected.
    """
    scan = _scan_checked(data, where, (fmt,), error)
    stored = scan.props.get(HASH_KEY)
    if stored is None:
        if not allow_unverified:
            raise error(
                f"path: {where!r} has no content hash (metadata {HASH_KEY!r}): it was exported by an older prm-critic "
                "(or the entry was removed), so a damaged file cannot be detected. Re-export it with this version, "
                "or pass allow_unverified=True to load it unchecked"
            )
        return scan.props
    actual = _digest(data, scan.spans[HASH_KEY])
    if stored != actual:
        if allow_unverified:
            warnings.warn(
                f"path: {where!r} was modified after export (content hash {actual}, metadata {HASH_KEY!r} records "
                f"{stored}); loading it unverified (allow_unverified=True). If the change is yours (e.g. onnxsim or "
                "onnxslim), re-seal it with `prm-critic export --reseal FILE` (seal_onnx)",
                RuntimeWarning, stacklevel=stacklevel)
            return scan.props
        raise error(
            f"path: {where!r} is corrupt or was modified after export: its content hash is {actual}, but its "
            f"metadata {HASH_KEY!r} records {stored!r}; re-export it, or, if you changed it on purpose (e.g. onnxsim "
            "or onnxslim), re-seal it with `prm-critic export --reseal FILE` (seal_onnx) or load it with "
            "allow_unverified=True"
        )
    return scan.props


def seal_onnx(path: str | os.PathLike, *, out: str | os.PathLike | None = None) -> Path:
    """Re-seal an exported critic on purpose: write the content hash of its current bytes.

    For an export you changed yourself and trust -- e.g. re-saved by a graph optimiser such as
    onnxsim or onnxslim, which keeps the metadata but rewrites the file -- so that it loads verified
    again. Only the 64 hex characters of metadata ``prm_critic.sha256`` change; the file must be a
    well-formed, self-contained prm-critic export (state critic or text PRM) that holds that entry.
    ``out``: where to write (default: ``path`` itself, replaced atomically). Returns the written path.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        OnnxExportError: the file is not a well-formed prm-critic export, keeps external data, or
            has no (or a malformed) ``prm_critic.sha256`` entry (re-export it instead).
    """
    from prm_critic._io import atomic_write_bytes

    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"path: {str(p)!r} does not exist (expected an exported .onnx critic to re-seal)")
    data = p.read_bytes()
    scan = _scan_checked(data, str(p), (FORMAT, TEXT_FORMAT), OnnxExportError)
    span = scan.spans.get(HASH_KEY)
    if span is None or span[1] - span[0] != _HASH_LEN:
        raise OnnxExportError(
            f"path: {str(p)!r} has no {_HASH_LEN}-character content-hash entry (metadata {HASH_KEY!r} is "
            f"{scan.props.get(HASH_KEY)!r}); expected a file exported by this prm-critic version: re-export it")
    sealed = seal(bytes(data[: span[0]]) + _PLACEHOLDER.encode() + bytes(data[span[1]:]))
    target = p if out is None else Path(out)
    atomic_write_bytes(target, sealed)
    return target
