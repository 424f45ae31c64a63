"""PRM reward shaping for gymnasium vector envs (``gym.make_vec``; one critic call per vector step):
:class:`GymVectorPRMRewardShaper`."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from prm_critic._optional import require
from prm_critic.critic import BaseCritic
from prm_critic.robotics.label_rewards import potential_shaping
from prm_critic.wrappers._common import (
    GYM_VECTOR_ENV, ObsFlattener, ShaperBase, ShaperConfig, env_id_of, refuse_env_kind, setup_shaper,
)

require("gymnasium")  # a missing extra fails here with the exact ``pip install`` to run
import gymnasium as gym  # noqa: E402

__all__ = ["GymVectorPRMRewardShaper"]

_NO_ROWS = np.zeros(0, dtype=np.intp)

_KEYS = ("prm_original_reward", "prm_phi", "prm_next_phi", "prm_shaping", "prm_fallback", "prm_terminated",
         "prm_x", "prm_next_x")


def _rows_of_next(v: np.ndarray, n: int, done_idx: np.ndarray) -> np.ndarray:
    """``(n,)`` values of s' from a batch ``v`` ``(n + n_done,)``: the first ``n``, with the done
    sub-envs' entries taken from the final observations' rows that follow (a fresh array)."""
    a = v[:n].copy()
    if len(done_idx):
        a[done_idx] = v[n:]
    return a


class GymVectorPRMRewardShaper(ShaperBase, gym.vector.VectorWrapper):
    r"""The gymnasium vector twin of :class:`~prm_critic.wrappers.PRMRewardShaper`.

    Wraps a ``gymnasium.vector.VectorEnv`` (``gym.make_vec(...)``, ``SyncVectorEnv``,
    ``AsyncVectorEnv``); a stable-baselines3 ``VecEnv`` (refused here, with its name) is wrapped by
    :class:`prm_critic.sb3.SB3VecPRMRewardShaper`. For each sub-env ``i`` of a vector step, with ``Phi`` the critic's ``head``
    score of the critic input of a state::

        potential:  r'_i = r_i + scale * (gamma * (0 if terminated_i else Phi(s'_i)) - Phi(s_i))
        subgoal:    r'_i = r_i + subgoal_bonus * #{subgoals first holding in s'_i this episode}
        replace:    r'_i = scale * Phi(s'_i)

    ``Phi(s')`` is kept on truncation; only a true termination zeroes it, as in the single-env shaper.
    The critic is called ONCE per vector step, on a batch of every sub-env's observation (plus the
    final observations of the sub-envs that ended, in same-step autoreset mode).

    Autoreset (gymnasium 1.x, ``env.metadata["autoreset_mode"]``):

    * ``NEXT_STEP`` (the default of ``gym.make_vec``): the step after a sub-env ended returns its
      reset observation (reward 0, the action ignored). That step is no transition: its reward is
      left as the env gives it (shaping 0, ``info["_prm_shaping"][i]`` False) and ``Phi(s)`` of the
      next step is the score of the reset observation. ``Phi`` is never differenced across the
      episode boundary.
    * ``SAME_STEP``: the step that ends returns the reset observation and the last one in
      ``info["final_obs"]``; ``s'_i`` is the final observation and ``Phi(s)`` of the next step the
      score of the reset observation.
    * ``DISABLED`` is refused (the wrapper cannot see the partial resets).

    ``info`` gets, as arrays over sub-envs (with gymnasium's ``_key`` masks, False on the no-op
    autoreset steps): ``prm_original_reward``, ``prm_phi``, ``prm_next_phi``, ``prm_shaping``,
    ``prm_fallback``, ``prm_terminated``, ``prm_x`` / ``prm_next_x`` (``(n, D)`` float32, read-only),
    and with ``info_subgoals=True`` ``prm_subgoals`` (``{name: (n,) bool}``). With ``deadline_s`` a
    late or failed call gives zero shaping for the whole step and unknown ``Phi`` (zero shaping next
    step too); ``stats`` counts ``calls``, ``fallbacks``, ``timeouts``, ``errors``, ``busy``.

    Args:
        env: a ``gymnasium.vector.VectorEnv`` with Dict or Box single observations.
        critic, config, **settings: as for :class:`~prm_critic.wrappers.PRMRewardShaper` (a
            :class:`~prm_critic.wrappers.ShaperConfig` or its fields; the task is checked against
            ``env.spec.id``; ``maze_path`` subgoals need a ``SubgoalCritic``).
    """

    def __init__(self, env, critic: BaseCritic | None = None, *, config: ShaperConfig | None = None, **settings: Any):
        if not isinstance(env, gym.vector.VectorEnv):
            raise refuse_env_kind(env, name="env", expected=GYM_VECTOR_ENV)
        super().__init__(env)
        AutoresetMode = gym.vector.AutoresetMode
        mode_ar = env.metadata.get("autoreset_mode", AutoresetMode.NEXT_STEP)
        mode_ar = AutoresetMode(mode_ar) if isinstance(mode_ar, str) else mode_ar
        if mode_ar not in (AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP):
            raise ValueError(
                f"env: autoreset_mode {mode_ar!r} is not supported; expected AutoresetMode.NEXT_STEP or SAME_STEP "
                "(with DISABLED the partial resets happen outside the wrapper)"
            )
        self.same_step = mode_ar == AutoresetMode.SAME_STEP
        setup_shaper(self, critic, config, settings, space=env.single_observation_space, env_id=env_id_of(env),
                     where="vector env's single")
        self._flatten = ObsFlattener(self.layout)
        n = self.num_envs
        self._x = np.zeros((n, self.layout.obs_dim), dtype=np.float32)
        self._phi = np.full(n, np.nan)
        self._claimed: list[set[str]] = [set() for _ in range(n)]
        self._autoreset = np.zeros(n, dtype=bool)
        self._started = False

    def _claims(self, x: np.ndarray) -> list[set[str]]:
        ev = self.evaluator
        assert ev is not None  # mode "subgoal" only, for which setup_shaper refuses a missing evaluator
        return [{nm for nm, b in zip(ev.names, row) if b} for row in ev.holds(x)]

    def reset(self, *, seed: int | list[int] | None = None, options: dict | None = None):
        # Sync/AsyncVectorEnv take a list of seeds; VectorEnv.reset is annotated int | None
        obs, info = self.env.reset(seed=seed, options=options)  # type: ignore[arg-type]
        x = self._flatten.batch(obs)
        phi = self._caller(x)
        x.flags.writeable = False
        self._x = x
        self._phi = np.full(self.num_envs, np.nan) if phi is None else phi
        self._claimed = self._claims(x) if self.config.mode == "subgoal" else [set() for _ in range(self.num_envs)]
        self._autoreset = np.zeros(self.num_envs, dtype=bool)
        self._started = True
        info = dict(info)
        info["prm_phi"] = self._phi.copy()
        info["prm_fallback"] = np.full(self.num_envs, phi is None)
        return obs, info

    def step(self, actions):
        if not self._started:
            raise RuntimeError("step: call reset() before step()")
        obs, rews, terms, truncs, infos = self.env.step(actions)
        n = self.num_envs
        x_now = self._flatten.batch(obs)
        terminated = np.asarray(terms, dtype=bool)
        done = terminated | np.asarray(truncs, dtype=bool)
        done_idx = np.flatnonzero(done) if self.same_step else _NO_ROWS
        batch = np.concatenate([x_now, self._final_rows(infos, done_idx)]) if len(done_idx) else x_now
        scores = self._caller(batch)  # the one critic call of this vector step
        heads = self._caller.last_heads
        fell_back = scores is None
        x_next = x_now
        if len(done_idx):
            x_next = x_now.copy()
            x_next[done_idx] = batch[n:]
        phi_now, phi_next = self._next_scores(scores, done_idx)
        r = np.asarray(rews, dtype=np.float64)
        phi = self._phi
        live = ~self._autoreset  # False: the no-op step that returned a reset observation (NEXT_STEP)
        h_next = self.evaluator.holds(x_next) if self._eval_subgoals else None
        shaping = self._shaping(r, phi, phi_next, terminated, live, h_next)
        new_rews = (r + shaping).astype(np.asarray(rews).dtype, copy=False)
        x_now.flags.writeable = False
        x_next.flags.writeable = False
        infos = dict(infos)
        values = (r, phi.copy(), phi_next.copy(), shaping, np.full(n, fell_back), terminated & live, self._x, x_next)
        for k, v in zip(_KEYS, values):
            infos[k] = v
            infos["_" + k] = live
        if heads is not None:  # every head of s' (the scores of x_next)
            infos["prm_next_scores"] = {h: _rows_of_next(v, n, done_idx) for h, v in heads.items()}
            infos["_prm_next_scores"] = live
        if self.config.info_subgoals:
            infos["prm_subgoals"] = {nm: h_next[:, j].copy() for j, nm in enumerate(self.evaluator.names)}
            infos["_prm_subgoals"] = live
        self._advance(x_now, phi_now, done, done_idx)
        return obs, new_rews, terms, truncs, infos

    def _final_rows(self, infos: Mapping, done_idx: np.ndarray) -> np.ndarray:
        """Critic inputs ``(n_done, D)`` of ``info["final_obs"]`` of the sub-envs that ended (SAME_STEP)."""
        final = infos.get("final_obs")
        if final is None:
            raise KeyError(f"info: sub-envs {done_idx.tolist()} ended but info has no 'final_obs' "
                           "(expected in autoreset_mode SAME_STEP)")
        return np.stack([self._flatten(final[i], name=f"info['final_obs'][{i}]") for i in done_idx])

    def _next_scores(self, scores: np.ndarray | None, done_idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(Phi of the returned observations, Phi(s'))``, each ``(n,)``; NaN after a fallback."""
        n = self.num_envs
        if scores is None:
            phi_now = np.full(n, np.nan)
            return phi_now, phi_now
        phi_now = scores[:n]
        return phi_now, _rows_of_next(scores, n, done_idx) if len(done_idx) else phi_now

    def _shaping(self, r: np.ndarray, phi: np.ndarray, phi_next: np.ndarray, terminated: np.ndarray,
                 live: np.ndarray, h_next: np.ndarray | None) -> np.ndarray:
        """The shaping term ``(n,)``: 0 on no-op autoreset steps and where ``Phi`` is unknown (NaN)."""
        n, c = self.num_envs, self.config
        if c.mode == "subgoal":
            shaping = np.zeros(n)
            ev = self.evaluator
            assert ev is not None and h_next is not None  # mode "subgoal": setup_shaper refuses a missing evaluator
            for i in np.flatnonzero(live):
                new = [nm for nm, b in zip(ev.names, h_next[i]) if b and nm not in self._claimed[i]]
                self._claimed[i].update(new)
                shaping[i] = c.subgoal_bonus * len(new)
        else:
            if c.mode == "potential":
                shaping = potential_shaping(phi, phi_next, terminated, gamma=c.gamma, scale=self.scale)
            else:  # replace
                shaping = self.scale * phi_next - r
            shaping[np.isnan(phi) | np.isnan(phi_next)] = 0.0
        shaping[~live] = 0.0
        return shaping

    def _advance(self, x_now: np.ndarray, phi_now: np.ndarray, done: np.ndarray, done_idx: np.ndarray) -> None:
        """Next step: Phi(s) is the score of the observation returned now (the reset observation for
        sub-envs that reset this step in SAME_STEP mode, or that will be replaced by one in NEXT_STEP
        mode); subgoal claims start over on reset observations."""
        self._x = x_now
        self._phi = phi_now
        if self.same_step:
            if len(done_idx) and self.config.mode == "subgoal":
                for j, c in zip(done_idx, self._claims(x_now[done_idx])):
                    self._claimed[j] = c
        else:
            if self.config.mode == "subgoal" and self._autoreset.any():  # reset observations: claims start over
                idx = np.flatnonzero(self._autoreset)
                for j, c in zip(idx, self._claims(x_now[idx])):
                    self._claimed[j] = c
            self._autoreset = done

    def close(self, **kwargs):
        self._caller.close()
        return super().close(**kwargs)
