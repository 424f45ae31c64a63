"""ONNX deploy: export critics to one self-contained ``.onnx`` file and run them with onnxruntime.

* :func:`export_state_critic` (torch -> ONNX, opset 18, metadata, parity-checked against torch);
* :class:`OnnxCritic` (a :class:`~prm_critic.critic.BaseCritic` on onnxruntime, CPU/CUDA/TensorRT);
* :class:`NumpyMLPCritic`: the same exported MLP critic file run with numpy alone, the batch-1 fast
  path for small critics in a control loop (no onnxruntime per-call cost);
* :func:`read_onnx_metadata`;
* :func:`seal_onnx`: re-seal an export you changed on purpose (e.g. re-saved by onnxsim);
* :func:`export_text_prm` / :class:`OnnxTextCritic`: the text PRM (MiniLM) on onnxruntime.

``onnx``/``onnxruntime`` come with the ``onnx`` extra (GPU: the ``gpu`` extra).
The runtime does not import torch; the exporter does (imported on first use).
"""

from __future__ import annotations

from prm_critic._lazy import lazy_exports
from prm_critic.onnx._meta import FORMAT, INPUT_NAME, OUTPUT_NAME, OnnxExportError, seal_onnx
from prm_critic.onnx.runtime import PROVIDERS, OnnxCritic, OnnxModelError, installed_runtimes

__all__ = [
    "export_state_critic",
    "export_subgoal_critic",
    "read_onnx_metadata",
    "export_text_prm",
    "OnnxTextCritic",
    "OnnxCritic",
    "NumpyMLPCritic",
    "UnsupportedGraphError",
    "OnnxModelError",
    "OnnxExportError",
    "installed_runtimes",
    "seal_onnx",
    "PROVIDERS",
    "FORMAT",
    "INPUT_NAME",
    "OUTPUT_NAME",
]

# the exporters import torch, the numpy critic onnx: they are loaded on first use only
_LAZY = {
    "export_state_critic": "prm_critic.onnx.export",
    "export_subgoal_critic": "prm_critic.onnx.export",
    "read_onnx_metadata": "prm_critic.onnx.export",
    "parity_check": "prm_critic.onnx.export",
    "export_text_prm": "prm_critic.onnx.text",
    "OnnxTextCritic": "prm_critic.onnx.text",
    "NumpyMLPCritic": "prm_critic.onnx.fast",
    "UnsupportedGraphError": "prm_critic.onnx.fast",
}

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
