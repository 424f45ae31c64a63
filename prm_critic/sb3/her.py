"""``HerReplayBuffer`` for shaped rewards that keeps what relabelling needs as compact rows.

SB3's ``HerReplayBuffer(copy_info_dict=True)`` stores every step's info dict and deep-copies each
sampled one before relabelling; with :class:`~prm_critic.wrappers.PRMRewardShaper` every info holds
two float32 critic inputs and a nested score dict, so the copies cost about a quarter of training
time, and the shaper then rebuilds arrays from the dicts one sample at a time.
:class:`PRMHerReplayBuffer` keeps, per stored transition, the shaper's critic inputs of s and s',
its termination flag and the shaping term it paid (:class:`~prm_critic.wrappers.RelabelRows`, in
arrays indexed like the replay buffer), and relabels a sampled batch in one vectorised call of
:meth:`PRMRewardShaper.compute_reward_rows`. The rewards are the same numbers as SB3's path through
:meth:`PRMRewardShaper.compute_reward` (tested on real samples).

The rest of each info dict (the env's own keys, without the shaper's ``prm_*`` keys) is kept as a
shallow copy and passed to the base env's ``compute_reward``, shallow-copied again per sample, not
deep-copied: a base ``compute_reward`` that changes arrays inside ``info`` in place would change the
stored ones.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from prm_critic import validate
from prm_critic._optional import require
from prm_critic.wrappers.prm_reward_shaper import RelabelRows

require("stable_baselines3")  # a missing extra fails here with the exact ``pip install`` to run
from stable_baselines3 import HerReplayBuffer  # noqa: E402
from stable_baselines3.common.type_aliases import DictReplayBufferSamples  # noqa: E402

__all__ = ["PRMHerReplayBuffer", "ROW_ARRAYS", "SCALE_ROW"]

#: the per-transition arrays this buffer adds to SB3's, in ``buffer.prm_rows`` (saved with the training state)
ROW_ARRAYS = ("x", "next_x", "terminated", "shaping")
#: the shaping scale each transition was paid at (NaN: no scale schedule), in ``buffer.prm_rows`` too; a
#: training state written before it existed restores without it (NaN: it had no schedule)
SCALE_ROW = "scale"


class PRMHerReplayBuffer(HerReplayBuffer):
    """``HerReplayBuffer`` whose relabelled rewards come from :class:`RelabelRows` (module docstring).

    Takes SB3's arguments; ``copy_info_dict`` is ignored (what relabelling needs is always kept).
    The wrapped env must have a :class:`~prm_critic.wrappers.PRMRewardShaper` in every env's chain
    (``train_policy`` builds one); its width (``relabel_width``) sizes the rows at construction.
    """

    def __init__(self, buffer_size: int, observation_space, action_space, env, device: Any = "auto",
                 n_envs: int = 1, optimize_memory_usage: bool = False, handle_timeout_termination: bool = True,
                 n_sampled_goal: int = 4, goal_selection_strategy: Any = "future", copy_info_dict: bool = True):
        super().__init__(buffer_size, observation_space, action_space, env, device=device, n_envs=n_envs,
                         optimize_memory_usage=optimize_memory_usage,
                         handle_timeout_termination=handle_timeout_termination, n_sampled_goal=n_sampled_goal,
                         goal_selection_strategy=goal_selection_strategy, copy_info_dict=False)
        if env is None:
            raise ValueError("env: PRMHerReplayBuffer needs the VecEnv (it relabels through its shaper), got None")
        width = int(env.get_attr("relabel_width", indices=[0])[0])
        shape = (self.buffer_size, self.n_envs)
        self.prm_rows: dict[str, np.ndarray] = {
            "x": np.zeros((*shape, width), np.float32),
            "next_x": np.zeros((*shape, width), np.float32),
            "terminated": np.zeros(shape, bool),
            "shaping": np.full(shape, np.nan, np.float64),
            SCALE_ROW: np.full(shape, np.nan, np.float64),
        }
        #: the shaping scale paid now (``None``: constant, no schedule; :meth:`set_shaping_scale`)
        self.shaping_scale: float | None = None
        self._built_scale = float(env.get_attr("scale", indices=[0])[0])

    def set_shaping_scale(self, scale: float) -> None:
        """The shaping scale the env pays from now on (set together with the shapers' ``set_scale``,
        by :class:`~prm_critic.sb3.callbacks.ShapingScaleSchedule`). From then on every sampled reward,
        real or relabelled, is the one paid at this scale: a stored transition paid at ``s_then``
        gets ``r - F_then + F_then * scale / s_then`` (potential shaping is linear in the scale)."""
        self.shaping_scale = validate.check_number("scale", scale, low=0.0)

    def _check_shaper_scale(self) -> None:
        """The shaper relabels at its own scale: it must be the one this buffer pays at (the scale it was
        built with, or the schedule's), else stored and relabelled rewards would mix two scales."""
        assert self.env is not None
        shaper = float(self.env.get_attr("scale", indices=[0])[0])
        expected = self._built_scale if self.shaping_scale is None else self.shaping_scale
        if shaper != expected:
            raise RuntimeError(f"shaping scale: the shaper pays scale {shaper}, this replay buffer {expected}; change "
                               "the scale during training with ShapingScaleSchedule (train_policy(scale_schedule=...)), "
                               "which rescales the stored rewards too")

    def _shaping_now(self, shaping: np.ndarray, paid: np.ndarray) -> np.ndarray:
        """``shaping`` (paid at the scales ``paid``) as paid at :attr:`shaping_scale` (unchanged without a
        schedule, and where paid at the current scale)."""
        now = self.shaping_scale
        if now is None:
            return shaping
        if np.isnan(paid).any():
            raise RuntimeError("shaping scale: a stored transition has no recorded scale while a schedule is active "
                               "(stored before the schedule started); its reward cannot be rescaled")
        change = paid != now
        if not change.any():
            return shaping
        if (paid[change] == 0).any():
            raise RuntimeError(f"shaping scale: a transition paid at scale 0 cannot be rescaled to {now} (a schedule "
                               "must not leave 0)")
        out = shaping.copy()
        out[change] = shaping[change] * (now / paid[change])
        return out

    def add(self, obs, next_obs, action, reward, done, infos) -> None:
        if self.env is None:  # a buffer unpickled by SB3 has no env until set_env
            raise ValueError("env: PRMHerReplayBuffer relabels through the VecEnv's shaper, got None "
                             "(a buffer loaded from a pickle: call set_env(env) first)")
        rows = self.env.env_method("relabel_rows", infos, indices=[0])[0]  # checks the prm_* keys are there
        for name, arr in zip(ROW_ARRAYS, rows):
            self.prm_rows[name][self.pos] = arr
        self.prm_rows[SCALE_ROW][self.pos] = np.nan if self.shaping_scale is None else self.shaping_scale
        # the env's own keys, for the base env's compute_reward (shallow: no per-sample deep copy)
        self.infos[self.pos] = [{k: v for k, v in info.items() if not k.startswith("prm_")} for info in infos]
        super().add(obs, next_obs, action, reward, done, infos)

    def _get_real_samples(self, batch_indices: np.ndarray, env_indices: np.ndarray,
                          env=None) -> DictReplayBufferSamples:
        samples = super()._get_real_samples(batch_indices, env_indices, env)
        if self.shaping_scale is None:
            return samples
        paid = self.prm_rows["shaping"][batch_indices, env_indices]
        if np.isnan(paid).any():
            raise RuntimeError("shaping scale: a stored transition does not record the shaping term it was paid "
                               "(no 'prm_shaping' in its info), so its reward cannot be rescaled to the scheduled scale")
        delta = self._shaping_now(paid, self.prm_rows[SCALE_ROW][batch_indices, env_indices]) - paid
        if not delta.any():
            return samples
        rewards = (self.rewards[batch_indices, env_indices] + delta).astype(np.float32)
        return samples._replace(rewards=self.to_torch(self._normalize_reward(rewards.reshape(-1, 1), env)))

    def _get_virtual_samples(self, batch_indices: np.ndarray, env_indices: np.ndarray,
                             env=None) -> DictReplayBufferSamples:
        self._check_shaper_scale()
        obs = {key: o[batch_indices, env_indices, :] for key, o in self.observations.items()}
        next_obs = {key: o[batch_indices, env_indices, :] for key, o in self.next_observations.items()}
        infos = [dict(d) for d in self.infos[batch_indices, env_indices]]
        new_goals = self._sample_goals(batch_indices, env_indices)
        obs["desired_goal"] = new_goals
        next_obs["desired_goal"] = new_goals  # the goal of s' is the relabelled goal too
        rows = RelabelRows(*(self.prm_rows[name][batch_indices, env_indices] for name in ROW_ARRAYS))
        if self.shaping_scale is not None:  # a reused paid term is paid at today's scale
            rows = rows._replace(shaping=self._shaping_now(rows.shaping,
                                                           self.prm_rows[SCALE_ROW][batch_indices, env_indices]))
        assert self.env is not None
        rewards = self.env.env_method("compute_reward_rows", next_obs["achieved_goal"], obs["desired_goal"], rows,
                                      infos, indices=[0])[0].astype(np.float32)
        obs = self._normalize_obs(obs, env)  # type: ignore[assignment]
        next_obs = self._normalize_obs(next_obs, env)  # type: ignore[assignment]
        return DictReplayBufferSamples(
            observations={key: self.to_torch(o) for key, o in obs.items()},
            actions=self.to_torch(self.actions[batch_indices, env_indices]),
            next_observations={key: self.to_torch(o) for key, o in next_obs.items()},
            dones=self.to_torch(
                self.dones[batch_indices, env_indices] * (1 - self.timeouts[batch_indices, env_indices])
            ).reshape(-1, 1),
            rewards=self.to_torch(self._normalize_reward(rewards.reshape(-1, 1), env)),
        )
