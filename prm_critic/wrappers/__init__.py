"""Gymnasium / stable-baselines3 wrappers that put a process reward model into the RL loop.

* :class:`PRMRewardShaper`: potential-based (or subgoal / replace) reward shaping with a critic.
* :class:`DeadEndPruner`: truncates episodes whose critic score stays below a threshold.
* :class:`VecPRMRewardShaper`: the vectorised twin of the shaper (one critic call per vector step).

Classes are imported lazily so that importing this package needs neither gymnasium nor SB3.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["PRMRewardShaper", "DeadEndPruner", "VecPRMRewardShaper"]

_MODULES = {
    "PRMRewardShaper": "prm_critic.wrappers.prm_reward_shaper",
    "DeadEndPruner": "prm_critic.wrappers.dead_end_pruner",
    "VecPRMRewardShaper": "prm_critic.wrappers.vec_prm_reward_shaper",
}


def __getattr__(name: str) -> Any:
    if name in _MODULES:
        return getattr(importlib.import_module(_MODULES[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(list(globals()) + __all__)
