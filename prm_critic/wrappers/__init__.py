"""Gymnasium wrappers that put a process reward model into the RL loop.

* :class:`PRMRewardShaper`: potential-based (or subgoal / replace) reward shaping with a critic;
  its settings (and its vector twins') are a :class:`ShaperConfig` or its fields as keywords.
* :class:`DeadEndPruner`: truncates episodes whose critic score stays below a threshold.
* :class:`GymVectorPRMRewardShaper`: the shaper for gymnasium vector envs (``gym.make_vec``), one
  critic call per vector step.

The stable-baselines3 VecEnv twin is :class:`prm_critic.sb3.SB3VecPRMRewardShaper`. Each vector
shaper refuses the other kind of env, naming the shaper that wraps it.

Classes are imported lazily so that importing this package needs neither gymnasium nor SB3.
"""

from __future__ import annotations

from prm_critic._lazy import lazy_exports

__all__ = ["PRMRewardShaper", "ShaperConfig", "RelabelRows", "DeadEndPruner", "GymVectorPRMRewardShaper"]

_LAZY = {
    "PRMRewardShaper": "prm_critic.wrappers.prm_reward_shaper",
    "RelabelRows": "prm_critic.wrappers.prm_reward_shaper",
    "DeadEndPruner": "prm_critic.wrappers.dead_end_pruner",
    "GymVectorPRMRewardShaper": "prm_critic.wrappers.vector_prm_reward_shaper",
    "ShaperConfig": "prm_critic.wrappers._common",
}
__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
