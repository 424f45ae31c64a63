"""Robotics side of prm-critic: task specs, env construction, trajectories, labels.

Spec handling imports nothing heavy; the rest (gymnasium, MuJoCo) is imported on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

from prm_critic.robotics.spec import SubgoalSpec, SuccessSpec, TaskSpec, list_builtin_specs, load_spec

_LAZY = {
    "make_env": "prm_critic.robotics.make",
    "CriticInputLayout": "prm_critic.robotics.make",
    "SubgoalCritic": "prm_critic.robotics.subgoals",
    "SubgoalEvaluator": "prm_critic.robotics.subgoals",
    "MazeGeometry": "prm_critic.robotics.subgoals",
    "make_controller": "prm_critic.robotics.controllers",
    "Snapshotter": "prm_critic.robotics.snapshot",
    "collect": "prm_critic.robotics.collect",
    "label": "prm_critic.robotics.labels",
    "load_steps": "prm_critic.robotics.dataset",
    "split_episodes": "prm_critic.robotics.dataset",
}

__all__ = ["TaskSpec", "SubgoalSpec", "SuccessSpec", "load_spec", "list_builtin_specs", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'prm_critic.robotics' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
