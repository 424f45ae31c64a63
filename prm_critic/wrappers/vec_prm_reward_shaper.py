"""Deprecated location of :class:`~prm_critic.sb3.VecPRMRewardShaper`.

The stable-baselines3 VecEnv shaper lives in :mod:`prm_critic.sb3.vec_prm_reward_shaper`; this
module re-exports it and will be removed in a future release. For gymnasium vector envs use
:class:`prm_critic.wrappers.PRMRewardShaperVector`.
"""

from __future__ import annotations

import warnings

from prm_critic.sb3.vec_prm_reward_shaper import VecPRMRewardShaper

__all__ = ["VecPRMRewardShaper"]

warnings.warn(
    "prm_critic.wrappers.vec_prm_reward_shaper is deprecated: import VecPRMRewardShaper from prm_critic.sb3 "
    "(from prm_critic.sb3 import VecPRMRewardShaper)",
    DeprecationWarning,
    stacklevel=2,
)
