"""Reward shaping with a process reward model (a critic's per-step score as the potential)."""

from __future__ import annotations

from typing import Any, Mapping, NamedTuple, Sequence

import numpy as np

from prm_critic._optional import require
from prm_critic.critic import BaseCritic
from prm_critic.robotics.label_rewards import potential_shaping
from prm_critic.wrappers._common import (
    SINGLE_ENV, ObsFlattener, ShaperBase, ShaperConfig, env_id_of, env_kind, goal_keys, refuse_env_kind, setup_shaper,
)

require("gymnasium")  # a missing extra fails here with the exact ``pip install`` to run
import gymnasium as gym  # noqa: E402

__all__ = ["PRMRewardShaper", "RelabelRows"]

_NEEDED_INFO = ("prm_x", "prm_next_x", "prm_terminated")
_NAN = float("nan")


class PRMRewardShaper(ShaperBase, gym.Wrapper, gym.utils.RecordConstructorArgs):
    r"""Add a critic-based shaping term to the env reward.

    ``Phi(s)`` is the critic's ``head`` score of ``s``'s critic input ``x = layout.flatten(obs)``.

    * ``mode="potential"`` (default; Ng, Harada & Russell 1999, preserves the optimal policy when
      ``gamma`` is the learner's discount)::

          r' = r + scale * (gamma * Phi'(s') - Phi(s)),   Phi'(s') = 0 if terminated else Phi(s')

      ``Phi(s')`` is kept on truncation (time limit, :class:`DeadEndPruner`): the learner bootstraps
      there. Only a true termination zeroes it.
    * ``mode="subgoal"``: ``r' = r + subgoal_bonus * #{subgoals that hold in s' for the first time
      this episode}`` (needs a spec with subgoals: ``critic.spec`` or ``spec=``). Not potential-based.
    * ``mode="replace"``: ``r' = scale * Phi(s')`` (the env reward is dropped).

    ``info`` gets ``prm_original_reward``, ``prm_phi`` (Phi(s)), ``prm_next_phi`` (Phi(s'), the
    critic's score even when terminated), ``prm_next_scores`` (``{head: score}`` of s', absent after a
    fallback), ``prm_shaping`` (``r' - r``), ``prm_fallback``,
    ``prm_terminated``, ``prm_x`` / ``prm_next_x`` (float32 critic inputs of s and s', what HER
    relabelling needs) and, with ``info_subgoals=True``, ``prm_subgoals`` (``{name: bool}`` for s').

    Per-step cost: one validated flatten of the observation (the critic does not validate it again),
    one critic call on its batch-1 path (``score_one`` when the critic has one, e.g.
    :class:`~prm_critic.onnx.OnnxCritic`), the shaping arithmetic and the info keys above. Subgoals
    are evaluated only in ``mode="subgoal"`` (the bonus needs them) or with ``info_subgoals=True``.

    Goal-conditioned envs: :meth:`compute_reward` is vectorised and consistent with the step reward:
    ``base_env.compute_reward(ag, g, info) + F`` where ``F`` is the shaping term recomputed with
    the desired-goal slice of ``prm_x`` / ``prm_next_x`` replaced by ``g`` (and the achieved-goal
    slice of ``prm_next_x`` by ``ag``); when ``(ag, g)`` equal the stored ones (as float32, the
    critic's input precision) the cached ``prm_shaping`` is reused, so the step reward and
    ``compute_reward`` agree exactly. With SB3's ``HerReplayBuffer`` pass
    ``replay_buffer_kwargs=dict(copy_info_dict=True)``. ``subgoal`` mode and HER do not mix: the
    bonus is paid once per episode, the first time a subgoal holds, and whether a subgoal already held
    earlier in the episode under a relabelled goal depends on every earlier state, which one
    transition's info does not hold. So in ``subgoal`` mode :meth:`compute_reward` returns the step
    reward for the stored goals (exact) and raises ``ValueError`` for a relabelled goal; use
    ``mode="potential"`` with HER.

    Deadline (``deadline_s``): the critic runs on one worker thread; a call that is late (or fails,
    or the worker is still busy with a late call) falls back: shaping 0, reward unchanged,
    ``Phi`` unknown so the next transition's shaping is 0 too, ``info["prm_fallback"] = True``, and
    ``stats`` counts ``calls``, ``fallbacks``, ``timeouts``, ``errors`` (and ``busy``). Without a
    deadline critic errors propagate. Invalid observations (NaN/inf, wrong size or dtype) always
    raise, naming the observation key.

    Args:
        env: a gymnasium env (Dict or Box observations).
        critic: a :class:`~prm_critic.critic.BaseCritic` over flat critic inputs ``(B, D)``.
        config: a :class:`~prm_critic.wrappers.ShaperConfig` (with the critic); or, instead, its fields as
            keyword arguments: ``gamma`` (REQUIRED, the learner's discount), ``mode``, ``scale``, ``head``,
            ``layout``, ``spec``, ``subgoal_bonus``, ``deadline_s``, ``fallback``, ``allow_task_mismatch``,
            ``info_subgoals``. The shaper reads ``self.config``.

    Critic/env match (checked here, at construction): a critic that records its task
    (``critic.spec``, ``critic.meta["spec"]``, ``meta["task"]``/``meta["env_id"]``) must be for the
    env's id (``env.unwrapped.spec.id``) unless ``allow_task_mismatch=True``; and the layout must be
    the one the critic's task spec gives on this env (same field names, order and widths; without a
    spec, the env's built-in spec when it has the same keys), else the error names the first field
    that differs. An explicit ``layout=`` must equal the critic's own layout when it has one.
    """

    def __init__(self, env, critic: BaseCritic | None = None, *, config: ShaperConfig | None = None, **settings: Any):
        if env_kind(env) not in (SINGLE_ENV, None):  # a vector env: name its shaper, not gymnasium's TypeError
            raise refuse_env_kind(env, name="env", expected=SINGLE_ENV)
        gym.Wrapper.__init__(self, env)
        setup_shaper(self, critic, config, settings, space=env.observation_space, env_id=env_id_of(env), env=env)
        # recorded (not copied: the critic is shared) so that env.spec.make() can rebuild the stack
        gym.utils.RecordConstructorArgs.__init__(self, _disable_deepcopy=True, config=self.config)
        self._flatten = ObsFlattener(self.layout).one  # its per-step function (no call through the instance)
        # (achieved, desired) keys; a critic whose input lacks them is goal-independent under relabelling
        self.goal_keys = goal_keys(self.config.task_spec, env.observation_space)
        self._x: np.ndarray | None = None
        self._phi: float | None = None
        self._claimed: set[str] = set()
        self._subgoal_names = tuple(self.evaluator.names) if self.evaluator is not None else ()

    # ------------------------------------------------------------------ helpers
    def _subgoals(self, x: np.ndarray) -> dict[str, bool] | None:
        if self.evaluator is None:
            return None
        return dict(zip(self._subgoal_names, self.evaluator.holds_one(x)))

    # ------------------------------------------------------------------ gym API
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        obs, info = self.env.reset(seed=seed, options=options)
        self._x = self._flatten(obs)
        self._phi = self._caller.one(self._x)
        self._claimed = set()
        if self.config.mode == "subgoal":
            sg = self._subgoals(self._x)
            assert sg is not None  # mode "subgoal": setup_shaper refuses a spec without an evaluator
            self._claimed = {n for n, b in sg.items() if b}
        info = dict(info)
        info["prm_phi"] = float("nan") if self._phi is None else self._phi
        info["prm_fallback"] = self._phi is None
        return obs, info

    def step(self, action):
        x = self._x
        if x is None:
            raise RuntimeError("step: call reset() before step()")
        obs, reward, terminated, truncated, info = self.env.step(action)
        x_next = self._flatten(obs)
        caller = self._caller
        phi_next = caller.one(x_next)
        heads = caller.last_heads
        phi = self._phi
        r = float(reward)
        c = self.config
        mode = c.mode
        subgoals = self._subgoals(x_next) if self._eval_subgoals else None
        if mode == "subgoal":  # needs no critic call to be right
            assert subgoals is not None  # mode "subgoal" evaluates them (setup_shaper)
            new = [n for n, b in subgoals.items() if b and n not in self._claimed]
            self._claimed.update(new)
            shaping = c.subgoal_bonus * len(new)
        elif phi_next is None or phi is None:  # fell back: no shaping this step
            shaping = 0.0
        elif mode == "potential":
            # potential_shaping's formula on floats (no numpy call on the per-step path)
            shaping = self.scale * (c.gamma * (0.0 if terminated else phi_next) - phi)
        else:  # replace
            shaping = self.scale * phi_next - r
        # a copy (the inner env's dict is left as it was) and the keys set one by one: the same dict as
        # {**info, "prm_original_reward": r, ...}, without building a second dict to merge
        info = info.copy() if type(info) is dict else {**info}
        info["prm_original_reward"] = r
        info["prm_phi"] = _NAN if phi is None else phi
        info["prm_next_phi"] = _NAN if phi_next is None else phi_next
        info["prm_shaping"] = float(shaping)
        info["prm_fallback"] = phi_next is None
        info["prm_terminated"] = bool(terminated)
        info["prm_x"] = x
        info["prm_next_x"] = x_next
        if c.info_subgoals:
            info["prm_subgoals"] = subgoals
        if heads is not None:  # every head of s' (a DeadEndPruner on top reuses it)
            info["prm_next_scores"] = heads
        self._x = x_next
        self._phi = phi_next
        return obs, r + shaping, terminated, truncated, info

    def close(self):
        self._caller.close()
        return super().close()

    # ------------------------------------------------------------------ HER
    def compute_reward(self, achieved_goal, desired_goal, info):
        """Shaped goal-conditioned reward, vectorised like the base env's.

        Args:
            achieved_goal: ``(k,)`` or ``(B, k)``: the achieved goal of s'.
            desired_goal: ``(k,)`` or ``(B, k)``: the (possibly relabelled) goal.
            info: a dict (one transition), or an array/list of ``B`` dicts (SB3's HerReplayBuffer
                with ``copy_info_dict=True``), each holding this wrapper's ``prm_*`` keys.

        Returns:
            a float for one transition, a float64 array ``(B,)`` for a batch.

        Raises:
            ValueError: in ``mode="subgoal"``, for a goal that differs from the stored one (the
                once-per-episode bonus cannot be relabelled from one transition).
        """
        if self.goal_keys is None:
            raise AttributeError(
                "compute_reward: the wrapped env is not goal-conditioned (no achieved_goal/desired_goal keys)"
            )
        base_fn = self.env.get_wrapper_attr("compute_reward")
        base = np.asarray(base_fn(achieved_goal, desired_goal, info), dtype=np.float64)
        ag = np.asarray(achieved_goal, dtype=np.float32)
        dg = np.asarray(desired_goal, dtype=np.float32)
        single = dg.ndim <= 1
        ag2 = ag.reshape(1 if single else ag.shape[0], -1)
        dg2 = dg.reshape(1 if single else dg.shape[0], -1)
        n = dg2.shape[0]
        if isinstance(info, Mapping):
            infos: Sequence[Mapping] = [info] * n
        else:
            infos = list(np.asarray(info, dtype=object).reshape(-1)) if not isinstance(info, list) else info
            if len(infos) != n:
                raise ValueError(f"info: expected {n} info dicts (one per goal), got {len(infos)}")
        base = np.broadcast_to(base.reshape(-1), (n,))
        shaping = self._shaping_for_goals(ag2, dg2, infos, base)
        out = base + shaping
        return float(out[0]) if single else out

    @property
    def relabel_width(self) -> int:
        """Width of the critic inputs in :class:`RelabelRows` (the layout's flat size)."""
        return self.layout.obs_dim

    def relabel_rows(self, infos: Sequence[Mapping]) -> "RelabelRows":
        """What relabelling needs of ``infos`` (this wrapper's step infos), as compact rows: the
        float32 critic inputs of s and s', whether s' was a true termination, and the shaping term
        paid at that step. A replay buffer can keep these instead of the info dicts
        (:class:`~prm_critic.sb3.her.PRMHerReplayBuffer`) and pass them to :meth:`compute_reward_rows`."""
        for inf in infos:
            if not isinstance(inf, Mapping) or any(k not in inf for k in _NEEDED_INFO):
                got = sorted(inf) if isinstance(inf, Mapping) else type(inf).__name__
                raise ValueError(
                    f"info: compute_reward needs this wrapper's {list(_NEEDED_INFO)} in every info dict, got {got}; "
                    "with stable-baselines3's HerReplayBuffer pass replay_buffer_kwargs=dict(copy_info_dict=True)"
                )
        if not infos:
            w = self.layout.obs_dim
            return RelabelRows(np.zeros((0, w), np.float32), np.zeros((0, w), np.float32), np.zeros(0, bool),
                               np.zeros(0, np.float64))
        return RelabelRows(
            x=np.stack([np.asarray(inf["prm_x"], dtype=np.float32).reshape(-1) for inf in infos]),
            next_x=np.stack([np.asarray(inf["prm_next_x"], dtype=np.float32).reshape(-1) for inf in infos]),
            terminated=np.array([bool(inf["prm_terminated"]) for inf in infos], dtype=bool),
            shaping=np.array([float(inf.get("prm_shaping", _NAN)) for inf in infos], dtype=np.float64),
        )

    def compute_reward_rows(self, achieved_goal: np.ndarray, desired_goal: np.ndarray, rows: "RelabelRows",
                            infos: Sequence[Mapping] | None = None) -> np.ndarray:
        """:meth:`compute_reward` for a batch whose shaping inputs come as :class:`RelabelRows`
        (from :meth:`relabel_rows`) instead of info dicts: ``base_env.compute_reward(ag, g, infos) + F``,
        float64 ``(B,)``, the same numbers as :meth:`compute_reward` on the infos the rows came from.
        ``infos`` go to the base env's ``compute_reward`` only (``None``: ``B`` empty dicts)."""
        if self.goal_keys is None:
            raise AttributeError(
                "compute_reward: the wrapped env is not goal-conditioned (no achieved_goal/desired_goal keys)"
            )
        ag = np.asarray(achieved_goal, dtype=np.float32)
        dg = np.asarray(desired_goal, dtype=np.float32)
        n = dg.shape[0] if dg.ndim > 1 else 1
        ag2, dg2 = ag.reshape(n, -1), dg.reshape(n, -1)
        for name, a in (("x", rows.x), ("next_x", rows.next_x), ("terminated", rows.terminated),
                        ("shaping", rows.shaping)):
            if a.shape[0] != n:
                raise ValueError(f"rows.{name}: expected {n} rows (one per goal), got {a.shape[0]}")
        if infos is None:
            infos = [{} for _ in range(n)]
        base_fn = self.env.get_wrapper_attr("compute_reward")
        base = np.asarray(base_fn(achieved_goal, desired_goal, infos), dtype=np.float64)
        base = np.broadcast_to(base.reshape(-1), (n,))
        return base + self._shaping_rows(ag2, dg2, rows, base)

    def _shaping_for_goals(self, ag: np.ndarray, dg: np.ndarray, infos: Sequence[Mapping],
                           base: np.ndarray) -> np.ndarray:
        return self._shaping_rows(ag, dg, self.relabel_rows(infos), base)

    def _shaping_rows(self, ag: np.ndarray, dg: np.ndarray, rows: "RelabelRows", base: np.ndarray) -> np.ndarray:
        assert self.goal_keys is not None  # compute_reward raises before calling this without goal keys
        ach_key, des_key = self.goal_keys
        des_sl = self.layout.slices.get(des_key)
        ach_sl = self.layout.slices.get(ach_key)
        n = dg.shape[0]
        # a goal pair equal to the stored one (as float32) reuses the shaping paid at that step
        same = ~np.isnan(rows.shaping)
        if des_sl is not None:
            same &= (rows.next_x[:, des_sl] == dg).all(axis=1)
        if ach_sl is not None:
            same &= (rows.next_x[:, ach_sl] == ag).all(axis=1)
        shaping = np.where(same, rows.shaping, 0.0)
        todo = np.flatnonzero(~same)
        if todo.size == 0:
            return shaping
        x = rows.x[todo]  # fancy indexing: copies, the stored rows stay as they are
        xn = rows.next_x[todo]
        if des_sl is not None:
            x[:, des_sl] = dg[todo]
            xn[:, des_sl] = dg[todo]
        if ach_sl is not None:
            xn[:, ach_sl] = ag[todo]
        term = rows.terminated[todo]
        k = int(todo.size)
        if self.config.mode == "subgoal":
            i = int(todo[0])
            raise ValueError(
                f"compute_reward: mode='subgoal' cannot relabel goals ({k} of {n} goals differ from the stored "
                f"ones, first at index {i}: desired goal {dg[i].tolist()}): its bonus is paid once per episode, the "
                "first time each subgoal holds, and under a new goal that depends on every earlier state of the "
                "episode, which one transition's info does not hold. With HER (HerReplayBuffer) use "
                "mode='potential' (relabelled exactly), or train without HER"
            )
        phi = self._caller.direct(np.concatenate([x, xn]))
        phi_s, phi_n = phi[:k], phi[k:]
        if self.config.mode == "potential":
            shaping[todo] = potential_shaping(phi_s, phi_n, term, gamma=self.config.gamma, scale=self.scale)
        else:  # replace: r' = scale * Phi(s'), expressed as a shaping term on top of the base reward
            shaping[todo] = self.scale * phi_n - base[todo]
        return shaping


class RelabelRows(NamedTuple):
    """One row per transition of what :meth:`PRMRewardShaper.compute_reward_rows` needs: the critic
    inputs of s and s' (float32 ``(B, D)``), whether s' was a true termination (bool ``(B,)``) and
    the shaping term paid at that step (float64 ``(B,)``; NaN: not known, always recomputed)."""

    x: np.ndarray
    next_x: np.ndarray
    terminated: np.ndarray
    shaping: np.ndarray
