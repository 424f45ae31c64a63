"""Robotics side of prm-critic: task specs, env construction, trajectories, labels.

Spec handling and the critic-input layout import nothing heavy; the rest (gymnasium, MuJoCo) is
imported on first use.

``collect`` is both a function and the submodule that defines it. Importing the submodule binds it to
the package under that name, so such a name is a property of the package's module class: it always
gives the function (``from prm_critic.robotics import collect``, ``robotics.collect(...)``), and the
submodule stays reachable by its path: ``from prm_critic.robotics.collect import load_shard`` and
``importlib.import_module("prm_critic.robotics.collect")`` (``import prm_critic.robotics.collect as m``
binds the attribute, so it gives the function too).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from typing import Any

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


def _function_over_submodule(name: str) -> property:
    def get(module: types.ModuleType) -> Any:
        return getattr(importlib.import_module(_LAZY[name]), name)

    def bind(module: types.ModuleType, value: Any) -> None:
        # the import system binds the submodule of the same name here; the package keeps the function
        if not (isinstance(value, types.ModuleType) and value.__name__ == f"{__name__}.{name}"):
            raise AttributeError(f"prm_critic.robotics.{name} is the function of prm_critic.robotics.{name}; "
                                 f"it cannot be rebound (got {value!r})")

    return property(get, bind)


class _Package(types.ModuleType):
    """The package's module class: lazy names that are also submodule names resolve to the function."""


for _name in _LAZY:
    if importlib.util.find_spec(f"{__name__}.{_name}") is not None:
        setattr(_Package, _name, _function_over_submodule(_name))
sys.modules[__name__].__class__ = _Package
