"""Deprecated location of :class:`~prm_critic.sb3.SB3VecPRMRewardShaper` (formerly ``VecPRMRewardShaper``).

The stable-baselines3 VecEnv shaper lives in :mod:`prm_critic.sb3.vec_prm_reward_shaper`; this
module re-exports it under its old name and will be removed in a future release. For gymnasium
vector envs use :class:`prm_critic.wrappers.GymVectorPRMRewardShaper`.
"""

from __future__ import annotations

from prm_critic import _deprecation
from prm_critic.sb3.vec_prm_reward_shaper import SB3VecPRMRewardShaper

__all__ = ["VecPRMRewardShaper"]

#: the old name, the same class
VecPRMRewardShaper = SB3VecPRMRewardShaper

_deprecation.warn(
    "prm_critic.wrappers.vec_prm_reward_shaper is deprecated: import SB3VecPRMRewardShaper (formerly "
    "VecPRMRewardShaper) from prm_critic.sb3 (from prm_critic.sb3 import SB3VecPRMRewardShaper)",
    stacklevel=2,
)
