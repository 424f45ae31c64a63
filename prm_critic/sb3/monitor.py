"""``PRMMonitor``: SB3's ``Monitor`` that also records the original (unshaped) return and PRM stats.

SB3's ``Monitor`` sums the reward it sees. Placed *after* the reward shaper it logs the shaped
return, the one the learner optimises::

    r          = sum_t r_t                                   (shaped, what SB3 stores and logs)
    r_original = sum_t info_t["prm_original_reward"]         (falls back to r_t without a shaper)
    phi_mean   = mean_t info_t["prm_phi"]                    (NaN without a shaper)
    shaping    = sum_t info_t["prm_shaping"]                 (0 without a shaper)
    pruned     = info_T.get("prm_pruned", False)             (the dead-end pruner truncated it)
    success    = the spec's success rule over the episode    (``rule="final"``: last step;
                                                              ``"any"``: any step)
    subgoals   = {name: any_t subgoal held at step t}

All of these land in ``info["episode"]`` at the end of an episode, so they reach
``model.ep_info_buffer`` and the callbacks.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from prm_critic._optional import require
from prm_critic.robotics.layout import CriticInputLayout, success_from_info
from prm_critic.robotics.spec import TaskSpec, load_spec

require("gymnasium")  # a missing extra fails here with the exact ``pip install`` to run
require("stable_baselines3.common.monitor")
from stable_baselines3.common.monitor import Monitor  # noqa: E402

__all__ = ["PRMMonitor", "step_success"]


def step_success(spec: TaskSpec, info: Mapping[str, Any], obs: Any, terminated: bool,
                 evaluator=None, layout: CriticInputLayout | None = None, *, truncated: bool = False) -> bool:
    """Success flag of one step per the spec's success source (:mod:`prm_critic.robotics.success`)."""
    flag = success_from_info(spec, info, terminated, truncated)
    if flag is not None:
        return bool(flag)
    if evaluator is None or layout is None:
        raise ValueError(f"spec {spec.name!r}: success source {spec.success.source!r} needs a SubgoalEvaluator "
                         "and layout")
    x = layout.flatten(obs)[None, :]
    return bool(evaluator.all_hold(x)[0])


def _subgoal_flags(value: Any) -> dict[str, bool] | None:
    if value is None:
        return None
    if isinstance(value, Mapping):
        return {str(k): bool(np.any(v)) for k, v in value.items()}
    arr = np.asarray(value).reshape(-1)
    return {str(i): bool(v) for i, v in enumerate(arr)}


class PRMMonitor(Monitor):
    """Monitor placed after the PRM reward wrappers (see module docstring for the formulas).

    Args:
        env: the (possibly shaped / pruned) env.
        spec: the task spec (success rule and source).
        filename, info_keywords: as in ``Monitor``.
    """

    def __init__(self, env, spec: "str | TaskSpec", filename: str | None = None, info_keywords: tuple[str, ...] = ()):
        super().__init__(env, filename=filename, info_keywords=tuple(info_keywords))
        self.task_spec = load_spec(spec)
        self._evaluator = None
        self._layout = None
        if self.task_spec.success.reads_state:
            from prm_critic.robotics.subgoals import SubgoalCritic

            crit = SubgoalCritic(self.task_spec, env.unwrapped if hasattr(env, "unwrapped") else env)
            self._evaluator, self._layout = crit.evaluator, crit.layout
        self._reset_stats()

    def _reset_stats(self) -> None:
        self._orig = 0.0
        self._phi_sum = 0.0
        self._phi_n = 0
        self._shaping = 0.0
        self._success_any = False
        self._success_last = False
        self._subgoals: dict[str, bool] = {}

    def reset(self, **kwargs):
        self._reset_stats()
        return super().reset(**kwargs)

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        self._orig += float(info.get("prm_original_reward", reward))
        if "prm_phi" in info:
            self._phi_sum += float(np.mean(info["prm_phi"]))
            self._phi_n += 1
        if "prm_shaping" in info:
            self._shaping += float(np.mean(info["prm_shaping"]))
        flags = _subgoal_flags(info.get("prm_subgoals"))
        if flags:
            for k, v in flags.items():
                self._subgoals[k] = self._subgoals.get(k, False) or v
        ok = step_success(self.task_spec, info, obs, terminated, self._evaluator, self._layout, truncated=truncated)
        self._success_any |= ok
        self._success_last = ok
        if "episode" in info:
            ep = info["episode"]
            ep["r_original"] = round(self._orig, 6)
            ep["phi_mean"] = self._phi_sum / self._phi_n if self._phi_n else float("nan")
            ep["shaping"] = round(self._shaping, 6)
            ep["pruned"] = bool(info.get("prm_pruned", False))
            ep["success"] = self._success_any if self.task_spec.success.rule == "any" else self._success_last
            ep["subgoals"] = dict(self._subgoals)
        return obs, reward, terminated, truncated, info
