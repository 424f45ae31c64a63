"""Build a task's env from its spec, and map observations to the critic-input vector.

``make_env(spec)`` returns a plain gymnasium env with a ``TimeLimit``; for FrankaKitchen it adds
:class:`FlattenGoalsWrapper` so that ``achieved_goal`` / ``desired_goal`` are flat arrays (SB3 and
HER need one level of keys). :class:`CriticInputLayout` concatenates the spec's ``critic_input`` keys
into one float32 vector per step and tells where each key and each subgoal expression lives in it.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from prm_critic._optional import require
from prm_critic.robotics.spec import ObsExpr, SpecError, TaskSpec, load_spec

require("gymnasium")  # a missing extra fails here with the exact ``pip install`` to run
import gymnasium as gym  # noqa: E402

__all__ = ["make_env", "CriticInputLayout", "FlattenGoalsWrapper", "success_from_info", "register_robotics_envs"]

_REGISTERED = False


def register_robotics_envs() -> None:
    """Register gymnasium-robotics envs with gymnasium (idempotent)."""
    global _REGISTERED
    if _REGISTERED:
        return
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


class CriticInputLayout:
    """Where each observation key lives in the flat critic-input vector.

    ``critic_input = ["observation", "achieved_goal", "desired_goal"]`` with sizes 25, 3, 3 gives
    ``slices = {"observation": slice(0, 25), "achieved_goal": slice(25, 28), ...}`` and
    ``obs_dim = 31``. For a ``Box`` observation space, the only key is ``"obs"``.
    """

    def __init__(self, keys: tuple[str, ...] | list[str], sizes: Mapping[str, int]):
        self.keys = tuple(keys)
        self.sizes = {k: int(sizes[k]) for k in self.keys}
        self.slices: dict[str, slice] = {}
        start = 0
        for k in self.keys:
            self.slices[k] = slice(start, start + self.sizes[k])
            start += self.sizes[k]
        self.obs_dim = start

    @classmethod
    def from_space(cls, spec: TaskSpec, observation_space) -> "CriticInputLayout":
        sizes: dict[str, int] = {}
        if isinstance(observation_space, gym.spaces.Dict):
            for k in spec.critic_input:
                if k not in observation_space.spaces:
                    raise SpecError(
                        f"critic_input: key {k!r} is not in the observation space; expected keys from "
                        f"{sorted(observation_space.spaces)}"
                    )
                sp = observation_space.spaces[k]
                if not isinstance(sp, gym.spaces.Box):
                    raise SpecError(f"critic_input: key {k!r} must be a Box space, got {type(sp).__name__}")
                sizes[k] = int(np.prod(sp.shape))
        else:
            if tuple(spec.critic_input) != ("obs",):
                raise SpecError(
                    f"critic_input: a Box observation space has the single key 'obs', got {list(spec.critic_input)}"
                )
            sizes["obs"] = int(np.prod(observation_space.shape))
        return cls(spec.critic_input, sizes)

    def to_dict(self) -> dict[str, Any]:
        return {"keys": list(self.keys), "sizes": dict(self.sizes), "obs_dim": self.obs_dim}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "CriticInputLayout":
        return cls(data["keys"], data["sizes"])

    def expr_index(self, expr: ObsExpr) -> slice:
        """Slice of the flat vector that ``expr`` (e.g. ``observation[3:6]``) selects."""
        if expr.key not in self.slices:
            raise SpecError(f"expression {expr}: key {expr.key!r} is not in critic_input {list(self.keys)}")
        base = self.slices[expr.key]
        idx = range(base.start, base.stop)[expr.start : expr.stop]
        if len(idx) == 0:
            raise SpecError(f"expression {expr}: selects nothing from {expr.key!r} of size {self.sizes[expr.key]}")
        return slice(idx.start, idx.stop)

    def flatten(self, obs: Any) -> np.ndarray:
        """Critic input from one observation or a batch.

        Args:
            obs: a dict of arrays (shape ``(d_k,)`` or ``(B, d_k)`` per key) or, for ``["obs"]``,
                an array ``(D,)`` / ``(B, D)``.

        Returns:
            float32 array ``(obs_dim,)`` or ``(B, obs_dim)``.
        """
        if isinstance(obs, Mapping):
            parts = []
            for k in self.keys:
                if k not in obs:
                    raise KeyError(f"obs: missing key {k!r}; expected keys {list(self.keys)}")
                parts.append(np.asarray(obs[k], dtype=np.float32))
            batched = parts[0].ndim == 2
            parts = [p.reshape(p.shape[0], -1) if batched else p.reshape(-1) for p in parts]
            return np.concatenate(parts, axis=-1)
        if self.keys != ("obs",):
            raise TypeError(f"obs: expected a dict with keys {list(self.keys)}, got {type(obs).__name__}")
        return np.asarray(obs, dtype=np.float32)

    def with_desired_goal(self, x: np.ndarray, desired_key: str, goal: np.ndarray) -> np.ndarray:
        """Copy of critic inputs ``x`` ``(B, D)`` with the ``desired_key`` slice replaced by ``goal``."""
        out = np.array(x, dtype=np.float32, copy=True)
        out[..., self.slices[desired_key]] = np.asarray(goal, dtype=np.float32).reshape(out.shape[:-1] + (-1,))
        return out


def success_from_info(spec: TaskSpec, info: Mapping[str, Any], terminated: bool = False) -> bool | None:
    """Success flag of one step from ``info`` per the spec (``None`` when it comes from subgoals)."""
    src = spec.success.source
    if src == "info":
        if spec.success.key not in info:
            raise KeyError(f"info: missing success key {spec.success.key!r} (spec {spec.name})")
        return bool(info[spec.success.key])
    if src == "kitchen_tasks":
        return len(info.get("tasks_to_complete", [1])) == 0
    return None
