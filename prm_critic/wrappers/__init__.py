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

from prm_critic import _deprecation

__all__ = ["PRMRewardShaper", "RelabelRows", "DeadEndPruner", "GymVectorPRMRewardShaper"]

_MODULES = {
    "PRMRewardShaper": "prm_critic.wrappers.prm_reward_shaper",
    "RelabelRows": "prm_critic.wrappers.prm_reward_shaper",
    "DeadEndPruner": "prm_critic.wrappers.dead_end_pruner",
    "GymVectorPRMRewardShaper": "prm_critic.wrappers.vector_prm_reward_shaper",
}
__getattr__ = _deprecation.module_getattr(__name__, {
    "PRMRewardShaperVector": ("prm_critic.wrappers.PRMRewardShaperVector is deprecated: it is "
                              "prm_critic.wrappers.GymVectorPRMRewardShaper now (from prm_critic.wrappers import "
                              "GymVectorPRMRewardShaper); the old name will be removed in a future release",
                              "prm_critic.wrappers.vector_prm_reward_shaper:GymVectorPRMRewardShaper"),
    "VecPRMRewardShaper": ("prm_critic.wrappers.VecPRMRewardShaper is deprecated: it is "
                           "prm_critic.sb3.SB3VecPRMRewardShaper now (from prm_critic.sb3 import "
                           "SB3VecPRMRewardShaper); the old name will be removed in a future release",
                           "prm_critic.sb3.vec_prm_reward_shaper:SB3VecPRMRewardShaper"),
}, lazy=_MODULES)


def __dir__() -> list[str]:
    return sorted(list(globals()) + __all__)
