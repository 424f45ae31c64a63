"""Where each observation key lives in the flat critic-input vector (numpy only).

:class:`CriticInputLayout` concatenates a spec's ``critic_input`` keys into one float32 vector per
step and tells where each key and each subgoal expression lives in it;
:func:`success_from_info` reads a step's success flag from ``info`` per the spec. Neither needs
gymnasium, so deployed critics (ONNX) and wrappers can use them without the ``robotics`` extra.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from prm_critic.robotics.spec import ObsExpr, SpecError, TaskSpec

__all__ = ["CriticInputLayout", "success_from_info"]


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
        from prm_critic._optional import require

        gym = require("gymnasium")
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


def success_from_info(spec: TaskSpec, info: Mapping[str, Any], terminated: bool = False) -> bool | None:
    """Success flag of one step from ``info`` per the spec (``None`` when it comes from subgoals)."""
    src = spec.success.source
    if src == "info":
        key = spec.success.key
        if key is None:
            raise KeyError(f"spec {spec.name}: success.key is None; source 'info' needs the info key as a string")
        if key not in info:
            raise KeyError(f"info: missing success key {key!r} (spec {spec.name})")
        return bool(info[key])
    if src == "kitchen_tasks":
        return len(info.get("tasks_to_complete", [1])) == 0
    return None
