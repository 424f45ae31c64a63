"""Truncate episodes that a process reward model judges to be dead ends."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from prm_critic import validate
from prm_critic._optional import require
from prm_critic.critic import BaseCritic
from prm_critic.robotics.layout import CriticInputLayout
from prm_critic.wrappers._common import (
    HEADS, CriticCaller, ObsFlattener, check_critic_arg, check_critic_env, check_critic_space, env_id_of, find_max_episode_steps, resolve_layout,
)

require("gymnasium")  # a missing extra fails here with the exact ``pip install`` to run
import gymnasium as gym  # noqa: E402

__all__ = ["DeadEndPruner"]

_NAN = float("nan")


class DeadEndPruner(gym.Wrapper, gym.utils.RecordConstructorArgs):
    r"""Truncate an episode when the critic says it cannot succeed any more.

    With ``c_t = critic(s_t)[head]`` for the state after step ``t`` and a counter
    ``k_t = k_{t-1} + 1 if c_t < threshold else 0`` (``k_0 = 0`` at reset; ``k_t = k_{t-1}`` when
    ``c_t`` is unknown, see below)::

        truncated_t = truncated_t(env) or k_t >= patience

    The episode is always *truncated*, never *terminated*: under a -1-per-step reward (Fetch) a
    termination would make dead ends attractive, and the learner must keep bootstrapping from the
    pruned state. ``info["prm_pruned"]`` is True on the pruning step (False otherwise) and
    ``info["prm_prune_score"]`` holds ``c_t``.

    ``stats``: ``episodes`` (finished episodes), ``pruned_episodes``, ``steps_saved``
    (``max_episode_steps - elapsed`` summed over pruned episodes; the limit comes from the env's
    ``TimeLimit`` / spec or ``max_episode_steps=``), ``prune_rate`` (= pruned / episodes),
    ``critic_calls`` (the pruner's own calls), ``reused_scores``, ``unknown_scores``, and the own
    caller's ``fallbacks``, ``timeouts``, ``errors``.

    One critic call per step, one deadline policy. Stacked on a :class:`PRMRewardShaper` with the
    SAME critic object and layout (``DeadEndPruner(PRMRewardShaper(env, critic, ...), critic, ...)``),
    the pruner never calls the critic: it reads the shaper's ``info["prm_next_scores"]``, and when the
    shaper's call fell back under its ``deadline_s`` (``info["prm_fallback"]``: late, failed or busy)
    the score of that step is unknown. Alone, the pruner calls the critic itself, with its own
    ``deadline_s`` (same policy as the shaper's: a late or failing call falls back; without a
    deadline critic errors propagate). An unknown score leaves ``k`` unchanged and never prunes
    (``info["prm_prune_score"]`` is NaN, ``stats["unknown_scores"]`` counts it): a slow or failing
    critic neither stalls the loop nor ends episodes. Directly over a :class:`PRMRewardShaper` with
    ANOTHER critic and the same layout (the deploy loop: a learned critic shapes, a ``SubgoalCritic``
    prunes), the pruner calls its critic on the shaper's ``info["prm_next_x"]``, this step's observation
    already flattened and checked the same way, instead of flattening it a second time.

    Critic/env match: as for :class:`PRMRewardShaper` (task by env id, layout against the critic's
    task spec; ``allow_task_mismatch=True`` for a deliberate transfer).

    Args:
        env: a gymnasium env.
        critic: a :class:`~prm_critic.critic.BaseCritic` over flat critic inputs ``(B, D)``.
        threshold: prune below this score, in [0, 1].
        patience: number of consecutive steps below ``threshold`` before pruning (int >= 1).
        head: ``"success"`` (default, the critic's promise) or ``"progress"``.
        layout: :class:`CriticInputLayout`; default the critic's declared ``critic_info().layout``.
        max_episode_steps: the episode limit for ``steps_saved`` (default: found on the env).
        deadline_s: per-call deadline of the pruner's own critic calls in seconds (``None``: call
            synchronously); unused when the scores come from a shaper below.
        allow_task_mismatch: accept a critic made for another task than the env's.
    """

    def __init__(self, env, critic: BaseCritic, *, threshold: float, patience: int, head: str = "success",
                 layout: CriticInputLayout | Mapping | None = None, max_episode_steps: int | None = None,
                 deadline_s: float | None = None, allow_task_mismatch: bool = False):
        gym.utils.RecordConstructorArgs.__init__(
            self, _disable_deepcopy=True, critic=critic, threshold=threshold, patience=patience, head=head,
            layout=layout, max_episode_steps=max_episode_steps, deadline_s=deadline_s,
            allow_task_mismatch=allow_task_mismatch)
        validate.check_one_env("env", env, what="DeadEndPruner", fix=(
            "prune each sub-env: wrap one env, then vectorise "
            "(gym.vector.SyncVectorEnv([lambda: DeadEndPruner(make_env(task), critic, ...)] * n))"))
        gym.Wrapper.__init__(self, env)
        self.critic = check_critic_arg(critic)
        self.threshold = validate.check_prob("threshold", threshold, hint=" (a critic score)")
        self.patience = validate.check_int("patience", patience, minimum=1,
                                           hint=" (consecutive steps below threshold)")
        self.head = validate.check_choice("head", head, HEADS)
        self.layout = resolve_layout(critic, layout)
        check_critic_space(critic, self.layout, env.observation_space, env_id_of(env))
        check_critic_env(critic, self.layout, env_id_of(env), env.observation_space,
                         allow_task_mismatch=allow_task_mismatch, explicit_layout=layout is not None)
        self.allow_task_mismatch = allow_task_mismatch
        self.deadline_s = validate.check_number("deadline_s", deadline_s, positive=True, allow_none=True)
        # None: found on the env (the message says None is accepted)
        self.max_episode_steps = find_max_episode_steps(env) if max_episode_steps is None \
            else validate.positive_int("max_episode_steps", max_episode_steps, allow_none=True)
        self._caller = CriticCaller(self.critic, self.head, self.deadline_s)
        self._flatten = ObsFlattener(self.layout).one  # its per-step function (no call through the instance)
        self._shares_shaper = self._find_shaper_with_same_critic(env)
        # directly over a shaper with the same layout (another critic): its info["prm_next_x"] is this
        # step's observation flattened exactly as self._flatten would (no wrapper in between changes it)
        self._reads_shaper_x = not self._shares_shaper and self._wraps_shaper_with_same_layout(env)
        self._reused = 0
        self._unknown = 0
        self._below = 0
        self._elapsed = 0
        self._active = False
        self._episodes = 0
        self._pruned = 0
        self._saved = 0

    def _find_shaper_with_same_critic(self, env) -> bool:
        from prm_critic.wrappers.prm_reward_shaper import PRMRewardShaper

        e = env
        while isinstance(e, gym.Wrapper):
            if isinstance(e, PRMRewardShaper):
                return e.critic is self.critic and e.layout.to_dict() == self.layout.to_dict()
            e = e.env
        return False

    def _wraps_shaper_with_same_layout(self, env) -> bool:
        from prm_critic.wrappers.prm_reward_shaper import PRMRewardShaper

        return isinstance(env, PRMRewardShaper) and env.layout.to_dict() == self.layout.to_dict()

    @property
    def shares_shaper(self) -> bool:
        """True when the scores come from a :class:`PRMRewardShaper` below (same critic and layout)."""
        return self._shares_shaper

    @property
    def stats(self) -> dict[str, Any]:
        """``episodes``, ``pruned_episodes``, ``steps_saved``, ``prune_rate``, ``critic_calls``,
        ``reused_scores``, ``unknown_scores``, ``fallbacks``, ``timeouts``, ``errors``."""
        c = self._caller.stats
        return {
            "episodes": self._episodes,
            "pruned_episodes": self._pruned,
            "steps_saved": self._saved,
            "prune_rate": self._pruned / self._episodes if self._episodes else 0.0,
            "critic_calls": c["calls"],
            "reused_scores": self._reused,
            "unknown_scores": self._unknown,
            "fallbacks": c["fallbacks"],
            "timeouts": c["timeouts"],
            "errors": c["errors"],
        }

    @property
    def last_error(self) -> BaseException | None:
        """The last exception raised by the pruner's own critic call under a deadline."""
        return self._caller.last_error

    def _score(self, obs, info) -> float | None:
        """This step's score, or ``None`` when unknown (a fallback here or in the shaper below)."""
        if self._shares_shaper:
            if info.get("prm_fallback", False):
                return None  # the shaper's one call of this step fell back: no second call
            scores = info.get("prm_next_scores")
            if type(scores) is not dict and not isinstance(scores, Mapping) or self.head not in scores:
                raise RuntimeError(
                    "info: the PRMRewardShaper below published no 'prm_next_scores' with head "
                    f"{self.head!r} for this step (got {scores!r}); a wrapper between them drops info keys"
                )
            self._reused += 1
            return float(scores[self.head])
        x = info.get("prm_next_x") if self._reads_shaper_x else None
        if type(x) is not np.ndarray:  # the shaper below did not flatten this observation: flattened here
            x = self._flatten(obs)
        return self._caller.one(x)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        obs, info = self.env.reset(seed=seed, options=options)
        self._below = 0
        self._elapsed = 0
        self._active = True
        return obs, info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._elapsed += 1
        c = self._score(obs, info)
        if c is None:
            self._unknown += 1  # k unchanged, no pruning on a step the critic did not score
            pruned = False
        else:
            self._below = self._below + 1 if c < self.threshold else 0
            pruned = bool(self._below >= self.patience and not terminated and not truncated)
        info = info.copy() if type(info) is dict else {**info}  # a copy: the inner env's dict is left as it was
        info["prm_pruned"] = pruned
        info["prm_prune_score"] = _NAN if c is None else c
        if pruned:
            truncated = True
            self._pruned += 1
            if self.max_episode_steps is not None:
                self._saved += max(self.max_episode_steps - self._elapsed, 0)
        if (terminated or truncated) and self._active:
            self._episodes += 1
            self._active = False
        return obs, reward, terminated, truncated, info

    def close(self):
        self._caller.close()
        return super().close()

    def compute_reward(self, achieved_goal, desired_goal, info):
        """The wrapped env's ``compute_reward`` (pruning does not change rewards)."""
        return self.env.get_wrapper_attr("compute_reward")(achieved_goal, desired_goal, info)
