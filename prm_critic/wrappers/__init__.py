"""Gymnasium wrappers that put a process reward model into the RL loop.

* :class:`PRMRewardShaper`: potential-based (or subgoal / replace) reward shaping with a critic.
* :class:`DeadEndPruner`: truncates episodes whose critic score stays below a threshold.
* :class:`PRMRewardShaperVector`: the shaper for gymnasium vector envs (``gym.make_vec``), one
  critic call per vector step.

The stable-baselines3 VecEnv twin is :class:`prm_critic.sb3.VecPRMRewardShaper`
(``prm_critic.wrappers.VecPRMRewardShaper`` still works and warns that it moved).

Classes are imported lazily so that importing this package needs neither gymnasium nor SB3.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

__all__ = ["PRMRewardShaper", "RelabelRows", "DeadEndPruner", "PRMRewardShaperVector"]

_MODULES = {
    "PRMRewardShaper": "prm_critic.wrappers.prm_reward_shaper",
    "RelabelRows": "prm_critic.wrappers.prm_reward_shaper",
    "DeadEndPruner": "prm_critic.wrappers.dead_end_pruner",
    "PRMRewardShaperVector": "prm_critic.wrappers.vector_prm_reward_shaper",
}
_MOVED = {"VecPRMRewardShaper": ("prm_critic.sb3.vec_prm_reward_shaper", "prm_critic.sb3")}


def __getattr__(name: str) -> Any:
    if name in _MODULES:
        return getattr(importlib.import_module(_MODULES[name]), name)
    if name in _MOVED:
        module, public = _MOVED[name]
        warnings.warn(
            f"prm_critic.wrappers.{name} is deprecated: it moved to {public} (from {public} import {name}); "
            "the old name will be removed in a future release",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(module), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(list(globals()) + __all__)
