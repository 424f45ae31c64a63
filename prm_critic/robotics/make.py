"""Build a task's env from its spec, and map observations to the critic-input vector.

``make_env(spec)`` returns a plain gymnasium env with a ``TimeLimit``; for FrankaKitchen it adds
:class:`FlattenGoalsWrapper` so that ``achieved_goal`` / ``desired_goal`` are flat arrays (SB3 and
HER need one level of keys). :class:`CriticInputLayout` and :func:`success_from_info` live in the numpy-only
:mod:`prm_critic.robotics.layout` and are re-exported here.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from prm_critic._optional import require
from prm_critic.robotics.layout import CriticInputLayout, success_from_info
from prm_critic.robotics.spec import SpecError, TaskSpec, load_spec

require("gymnasium")  # a missing extra fails here with the exact ``pip install`` to run
import gymnasium as gym  # noqa: E402

__all__ = ["make_env", "CriticInputLayout", "FlattenGoalsWrapper", "success_from_info", "register_robotics_envs",
           "step_cost"]

_REGISTERED = False


def register_robotics_envs() -> None:
    """Register gymnasium-robotics envs with gymnasium (idempotent)."""
    global _REGISTERED
    if _REGISTERED:
        return
    from prm_critic._notices import quiet_notices

    with quiet_notices():  # its import prints a release notice about envs prm-critic does not use
        gr = require("gymnasium_robotics")
    gym.register_envs(gr)
    _REGISTERED = True


class FlattenGoalsWrapper(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Flatten dict-of-dict goals into arrays, in a fixed task order (FrankaKitchen).

    ``achieved_goal = concat(achieved_goal[t] for t in tasks)``, same for ``desired_goal``.

    The step reward is replaced by a reward that depends on the goals alone, so that HER can
    relabel it: ``r = sum_t [ ||achieved_goal_t - desired_goal_t|| < threshold ]``, the number of
    ``tasks`` completed in the new state (the kitchen's own reward counts each task once, using
    internal state that a relabelled goal cannot reproduce). ``info["kitchen_reward"]`` keeps the
    original. ``compute_reward`` is vectorised over flat goals and matches the step reward.
    """

    def __init__(self, env, tasks, threshold: float = 0.3):
        gym.utils.RecordConstructorArgs.__init__(self, tasks=tuple(tasks), threshold=threshold)
        gym.Wrapper.__init__(self, env)
        tasks = tuple(tasks)
        spaces = env.observation_space.spaces
        for key in ("achieved_goal", "desired_goal"):
            if key not in spaces:
                raise SpecError(f"flatten_goals: env {env.spec.id if env.spec else env} has no {key!r} key")
            missing = [t for t in tasks if t not in spaces[key].spaces]
            if missing:
                raise SpecError(
                    f"flatten_goals: unknown task(s) {missing}; expected names from {sorted(spaces[key].spaces)}"
                )
        self.tasks = tasks
        self.threshold = float(threshold)
        self._sizes = [int(np.prod(spaces["achieved_goal"][t].shape)) for t in self.tasks]
        box = gym.spaces.Box(-np.inf, np.inf, shape=(sum(self._sizes),), dtype=np.float64)
        self.observation_space = gym.spaces.Dict(
            {"observation": spaces["observation"], "achieved_goal": box, "desired_goal": box}
        )

    def _flat(self, d: Mapping[str, np.ndarray]) -> np.ndarray:
        return np.concatenate([np.asarray(d[t], dtype=np.float64).reshape(-1) for t in self.tasks])

    def observation(self, obs):
        return {
            "observation": obs["observation"],
            "achieved_goal": self._flat(obs["achieved_goal"]),
            "desired_goal": self._flat(obs["desired_goal"]),
        }

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        return self.observation(obs), info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        obs = self.observation(obs)
        info = dict(info)
        info["kitchen_reward"] = reward
        reward = self.compute_reward(obs["achieved_goal"], obs["desired_goal"], info)
        return obs, reward, terminated, truncated, info

    def compute_reward(self, achieved_goal, desired_goal, info):
        a = np.asarray(achieved_goal, dtype=np.float64)
        d = np.asarray(desired_goal, dtype=np.float64)
        out = np.zeros(a.shape[:-1], dtype=np.float64)
        start = 0
        for size in self._sizes:
            dist = np.linalg.norm(a[..., start : start + size] - d[..., start : start + size], axis=-1)
            out = out + (dist < self.threshold)
            start += size
        return out if out.ndim else float(out)


def make_env(spec: "str | TaskSpec", *, render_mode: str | None = None, **overrides: Any):
    """Create the gymnasium env described by ``spec`` (a :class:`TaskSpec` or a built-in name).

    ``overrides`` are merged into the spec's ``make_kwargs``.
    """
    spec = load_spec(spec)
    register_robotics_envs()
    kwargs = {**spec.make_kwargs, **overrides}
    if spec.max_episode_steps is not None:
        kwargs.setdefault("max_episode_steps", spec.max_episode_steps)
    if render_mode is not None:
        kwargs["render_mode"] = render_mode
    try:
        env = gym.make(spec.env_id, **kwargs)
    except gym.error.Error as exc:
        raise SpecError(f"env_id: gymnasium could not make {spec.env_id!r}: {exc}") from exc
    if spec.flatten_goals:
        env = FlattenGoalsWrapper(env, spec.flatten_goals)
    return env


def step_cost(spec: "str | TaskSpec", *, seconds: float = 0.2, min_steps: int = 10) -> tuple[float, int | None]:
    """Seconds per ``env.step`` of ``spec`` here and now (uniformly random actions for about ``seconds``,
    at least ``min_steps`` steps, after one untimed step) and the env's time limit (``None``: none).

    What :func:`prm_critic.parallel.choose_executor` weighs a job by: it runs on this machine under its
    present load, so it moves with that load as the job's steps will.
    """
    import time

    env = make_env(spec)
    try:
        env.reset(seed=0)
        env.action_space.seed(0)
        env.step(env.action_space.sample())  # first-step costs (lazy compilation, caches) left out
        n, t0 = 0, time.perf_counter()
        while n < min_steps or time.perf_counter() - t0 < seconds:
            _, _, term, trunc, _ = env.step(env.action_space.sample())
            n += 1
            if term or trunc:
                env.reset()
        step_s = (time.perf_counter() - t0) / n
        limit = getattr(env.spec, "max_episode_steps", None)
    finally:
        env.close()
    return step_s, limit
