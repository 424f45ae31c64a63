"""Metadata contract of exported critics (no torch import: the runtime reads it on deploy boxes)."""

from __future__ import annotations

import json
from typing import Any, Mapping

__all__ = ["FORMAT", "FORMAT_VERSION", "INPUT_NAME", "OUTPUT_NAME", "DEFAULT_OPSET", "RTOL", "ATOL",
           "LABEL_SEMANTICS", "JSON_KEYS", "INT_KEYS", "OnnxExportError", "decode_metadata"]

FORMAT = "prm-critic/state-critic-onnx"
FORMAT_VERSION = 1
INPUT_NAME = "obs"
OUTPUT_NAME = "scores"
DEFAULT_OPSET = 18
RTOL = 1e-4
ATOL = 1e-5

#: metadata keys whose values are JSON documents (decoded by :func:`read_onnx_metadata`)
JSON_KEYS = ("layout", "heads", "normalization", "net", "extra", "spec")
#: metadata keys whose values are ints
INT_KEYS = ("obs_dim", "opset", "format_version")

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
