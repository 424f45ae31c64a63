"""Gymnasium wrappers that put a process reward model into the RL loop.

* :class:`PRMRewardShaper`: potential-based (or subgoal / replace) reward shaping with a critic.
* :class:`DeadEndPruner`: truncates episodes whose critic score stays below a threshold.
* :class:`GymVectorPRMRewardShaper`: the shaper for gymnasium vector envs (``gym.make_vec``), one
  critic call per vector step.

The stable-baselines3 VecEnv twin is :class:`prm_critic.sb3.SB3VecPRMRewardShaper`. Each vector
shaper refuses the other kind of env, naming the shaper that wraps it. The old names still work and
warn: ``PRMRewardShaperVector`` (now ``GymVectorPRMRewardShaper``) and ``VecPRMRewardShaper`` (now
``prm_critic.sb3.SB3VecPRMRewardShaper``; it moved to ``prm_critic.sb3`` before it was renamed).

Classes are imported lazily so that importing this package needs neither gymnasium nor SB3.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

__all__ = ["PRMRewardShaper", "RelabelRows", "DeadEndPruner", "GymVectorPRMRewardShaper"]

_MODULES = {
    "PRMRewardShaper": "prm_critic.wrappers.prm_reward_shaper",
    "RelabelRows": "prm_critic.wrappers.prm_reward_shaper",
    "DeadEndPruner": "prm_critic.wrappers.dead_end_pruner",
    "GymVectorPRMRewardShaper": "prm_critic.wrappers.vector_prm_reward_shaper",
}
#: deprecated name -> (module, current name, where to import the current name from)
_DEPRECATED = {
    "PRMRewardShaperVector": ("prm_critic.wrappers.vector_prm_reward_shaper", "GymVectorPRMRewardShaper",
                              "prm_critic.wrappers"),
    "VecPRMRewardShaper": ("prm_critic.sb3.vec_prm_reward_shaper", "SB3VecPRMRewardShaper", "prm_critic.sb3"),
}


def __getattr__(name: str) -> Any:
    if name in _MODULES:
        return getattr(importlib.import_module(_MODULES[name]), name)
    if name in _DEPRECATED:
        module, new, public = _DEPRECATED[name]
        warnings.warn(
            f"prm_critic.wrappers.{name} is deprecated: it is {public}.{new} now (from {public} import {new}); "
            "the old name will be removed in a future release",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(module), new)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(list(globals()) + __all__)
