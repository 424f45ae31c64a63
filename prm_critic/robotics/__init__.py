"""Robotics side of prm-critic: task specs, env construction, trajectories, labels.

Spec handling and the critic-input layout import nothing heavy; the rest (gymnasium, MuJoCo) is
imported on first use.

The data folder's writer is the module :mod:`prm_critic.robotics.collection` (its function
``collect`` is exported here); ``prm_critic.robotics.collect`` as a module path is a deprecated alias
of it.
"""

from __future__ import annotations

from prm_critic._deprecation import alias_module
from prm_critic._lazy import lazy_exports
from prm_critic.robotics.spec import SubgoalSpec, SuccessSpec, TaskSpec, list_builtin_specs, load_spec

_LAZY = {
    "make_env": "prm_critic.robotics.make",
    "register_robotics_envs": "prm_critic.robotics.make",
    "CriticInputLayout": "prm_critic.robotics.layout",
    "SubgoalCritic": "prm_critic.robotics.subgoals",
    "SubgoalEvaluator": "prm_critic.robotics.subgoals",
    "MazeGeometry": "prm_critic.robotics.subgoals",
    "make_controller": "prm_critic.robotics.controllers",
    "Snapshotter": "prm_critic.robotics.snapshot",
    "register_snapshot_hook": "prm_critic.robotics.snapshot",
    "collect": "prm_critic.robotics.collection",
    "label": "prm_critic.robotics.labels",
    "load_steps": "prm_critic.robotics.dataset",
    "split_episodes": "prm_critic.robotics.dataset",
}

__all__ = ["TaskSpec", "SubgoalSpec", "SuccessSpec", "load_spec", "list_builtin_specs", *_LAZY]


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
alias_module(f"{__name__}.collect", f"{__name__}.collection")
