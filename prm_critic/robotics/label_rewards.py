r"""Rewards from step labels: a label family's labels as the rewards of an offline-RL data set.

A label family (:mod:`prm_critic.robotics.families`) gives each collected step ``t`` one label
``label_t``: its estimate of the state ``s_t`` the step starts from (``subgoal``: the subgoal progress
of ``s_t``; ``mc`` / ``mc_bisect``: the fraction of continuations from ``s_t`` that succeed;
``outcome``: the episode's discounted success). That label is the potential ``Phi(s_t)``. For an
episode of ``T`` transitions ``(s_t, a_t, r_t, s_{t+1})``, ``t = 0 .. T-1``, there are ``T`` labels
and one reward per transition:

* ``reward="prm_<family>"``: ``reward_t = label_t`` -- the label of step ``t`` is the reward of
  transition ``t`` (the value of the state the action was taken in; a discounting learner credits
  the action through the bootstrapped value of ``s_{t+1}``).
* ``reward="prm_<family>"`` with ``shaping="potential"`` (Ng, Harada & Russell 1999; the formula of
  :class:`prm_critic.wrappers.PRMRewardShaper` with ``scale=1``, :func:`potential_shaping`)::

      reward_t = r_t + gamma * Phi'(s_{t+1}) - Phi(s_t)
      Phi(s_t) = label_t,   Phi'(s_{t+1}) = label_{t+1}                                  for t < T-1
      Phi'(s_T) = 0                   if the last transition is a true termination
      Phi'(s_T) = label_{T-1}         otherwise (truncation): s_T has no label; the learner
                                      bootstraps there, so its potential is kept, held at the
                                      last label (the shaping term of that transition is
                                      (gamma - 1) * label_{T-1})

  ``gamma`` should be the offline learner's discount: only then is the shaping policy-invariant.

Every label used must be a finite number; an unlabelled step (``mask`` False, e.g. ``mc`` with
``stride > 1``), NaN or inf is refused, naming the family, the episode, the step and the value.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from prm_critic import validate

__all__ = ["ENV_REWARD", "SHAPINGS", "ORIGINAL_REWARD_KEY", "reward_choices", "check_reward", "potential_shaping",
           "episode_rewards", "LabelHash"]

#: the reward choice that keeps the env reward
ENV_REWARD = "env"
#: the shaping choices (``None``: the labels are the rewards)
SHAPINGS = ("potential",)
#: the info key that keeps the env reward when the rewards are replaced (the key PRMRewardShaper uses)
ORIGINAL_REWARD_KEY = "prm_original_reward"
_PREFIX = "prm_"
_GAMMA_HINT = " (the discount of the offline learner that trains on the rewards)"


def reward_choices() -> tuple[str, ...]:
    """``"env"`` and ``"prm_<family>"`` for every registered label family, in registration order."""
    from prm_critic.robotics.families import label_families

    return (ENV_REWARD, *(_PREFIX + f for f in label_families()))


def check_reward(reward: Any, shaping: Any = None, gamma: Any = None) -> tuple[str | None, str | None, float | None]:
    """Check a reward choice; returns ``(family, shaping, gamma)`` (``family`` is ``None`` for ``"env"``).

    Raises:
        ArgumentError: ``reward`` is not ``"env"`` or ``"prm_<family>"`` of a registered family (the
            choices are named), ``shaping`` is not ``None`` or ``"potential"``, shaping without a
            ``reward`` family or without ``gamma``, ``gamma`` outside (0, 1], or ``gamma`` without
            shaping (it would not be used).
    """
    choices = reward_choices()
    validate.check_choice("reward", reward, choices)
    shaping = validate.check_choice("shaping", shaping, SHAPINGS, allow_none=True)
    family = None if reward == ENV_REWARD else reward[len(_PREFIX):]
    if shaping is not None and family is None:
        raise validate.ArgumentError(f"shaping: {shaping!r} shapes the env reward with a label family's labels; "
                                     f"expected reward='prm_<family>' (one of {list(choices[1:])}), got reward={reward!r}")
    if shaping is None:
        if gamma is not None:
            raise validate.ArgumentError(f"gamma: only the potential shaping uses a discount; expected gamma=None "
                                         f"without shaping='potential', got gamma={gamma!r}")
        return family, None, None
    if gamma is None:
        raise validate.ArgumentError(f"gamma: shaping {shaping!r} needs the discount gamma, a number in (0, 1]"
                                     f"{_GAMMA_HINT}, got None")
    return family, shaping, validate.check_gamma("gamma", gamma, hint=_GAMMA_HINT)


def potential_shaping(phi: Any, phi_next: Any, terminated: Any, *, gamma: float, scale: float = 1.0) -> np.ndarray:
    """The potential-based shaping term ``scale * (gamma * Phi'(s') - Phi(s))``, element-wise (float64),
    with ``Phi'(s') = 0`` where ``terminated`` (a true termination) and ``Phi(s')`` otherwise.

    The one formula of the reward shapers (:class:`prm_critic.wrappers.PRMRewardShaper` and its
    vector twins) and of the label rewards of an offline data set (:func:`episode_rewards`)."""
    return scale * (gamma * np.where(terminated, 0.0, phi_next) - phi)


def episode_rewards(labels: np.ndarray, env_reward: np.ndarray, terminated: np.ndarray, *, shaping: str | None,
                    gamma: float | None) -> np.ndarray:
    """The ``(T,)`` float64 rewards of one episode from its ``T`` finite labels (see the module's mapping).

    Args:
        labels: ``(T,)`` the labels of ``s_0 .. s_{T-1}`` (checked finite by the caller).
        env_reward: ``(T,)`` the env rewards ``r_t``.
        terminated: ``(T,)`` bool, true terminations.
        shaping, gamma: as returned by :func:`check_reward`.
    """
    phi = np.asarray(labels, dtype=np.float64)
    if shaping is None:
        return phi.copy()
    assert gamma is not None  # check_reward refuses shaping without gamma
    phi_next = np.append(phi[1:], phi[-1:])  # s_T has no label: held at label_{T-1} unless terminated
    return np.asarray(env_reward, dtype=np.float64) + potential_shaping(phi, phi_next, np.asarray(terminated, bool),
                                                                       gamma=gamma)


class LabelHash:
    """SHA-256 of the labels used, episode by episode: the little-endian float32 bytes of each
    episode's ``(T,)`` labels, in export order (``hexdigest()``)."""

    def __init__(self) -> None:
        self._h = hashlib.sha256()

    def update(self, labels: np.ndarray) -> None:
        self._h.update(np.ascontiguousarray(labels, dtype="<f4").tobytes())

    def hexdigest(self) -> str:
        return self._h.hexdigest()
