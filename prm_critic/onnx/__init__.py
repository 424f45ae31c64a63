"""ONNX deploy: export critics to one self-contained ``.onnx`` file and run them with onnxruntime.

* :func:`export_state_critic` (torch -> ONNX, opset 18, metadata, parity-checked against torch);
* :class:`OnnxCritic` (a :class:`~prm_critic.critic.BaseCritic` on onnxruntime, CPU/CUDA/TensorRT);
* :func:`read_onnx_metadata`.

``onnx``/``onnxruntime`` come with ``pip install "prm-critic[onnx]"`` (GPU: ``prm-critic[gpu]``).
The runtime does not import torch; the exporter does (imported on first use).
"""

from __future__ import annotations

from prm_critic.onnx._meta import FORMAT, INPUT_NAME, OUTPUT_NAME, OnnxExportError
from prm_critic.onnx.runtime import PROVIDERS, OnnxCritic, OnnxModelError, installed_runtimes

__all__ = [
    "export_state_critic",
    "read_onnx_metadata",
    "OnnxCritic",
    "OnnxModelError",
    "OnnxExportError",
    "installed_runtimes",
    "PROVIDERS",
    "FORMAT",
    "INPUT_NAME",
    "OUTPUT_NAME",
]

_LAZY = {"export_state_critic", "read_onnx_metadata", "parity_check"}


def __getattr__(name: str):
    if name in _LAZY:  # the exporter imports torch; load it on first use only
        from prm_critic.onnx import export

        return getattr(export, name)
    raise AttributeError(f"module 'prm_critic.onnx' has no attribute {name!r}")
