"""Vectorised PRM reward shaping for stable-baselines3 VecEnvs (one critic call per vector step):
:class:`SB3VecPRMRewardShaper`.

For gymnasium vector envs (``gym.make_vec``) use
:class:`~prm_critic.wrappers.GymVectorPRMRewardShaper`.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from prm_critic._optional import require
from prm_critic.critic import BaseCritic
from prm_critic.wrappers._common import (
    SB3_VEC_ENV, ObsFlattener, ShaperBase, ShaperConfig, refuse_env_kind, setup_shaper,
)

require("stable_baselines3.common.vec_env")  # a missing extra fails here with the exact ``pip install`` to run
from stable_baselines3.common import vec_env  # noqa: E402

__all__ = ["SB3VecPRMRewardShaper"]

_NO_ROWS = np.zeros(0, dtype=np.intp)


def _venv_env_id(venv) -> str | None:
    """The gymnasium id of the first sub-env (``None`` when the VecEnv cannot tell)."""
    try:
        spec = venv.get_attr("spec", indices=[0])[0]
    except Exception:  # noqa: BLE001 - a VecEnv without env specs: the task is not checked
        return None
    env_id = getattr(spec, "id", None)
    return env_id if isinstance(env_id, str) and env_id else None


class SB3VecPRMRewardShaper(ShaperBase, vec_env.VecEnvWrapper):
    r"""The stable-baselines3 ``VecEnv`` twin of :class:`~prm_critic.wrappers.PRMRewardShaper`.

    A gymnasium vector env (``gym.make_vec``; refused here, with its name) is wrapped by
    :class:`prm_critic.wrappers.GymVectorPRMRewardShaper`.

    For each env ``i`` of the vector step, with ``Phi`` the critic's ``head`` score::

        terminated_i = done_i and not infos[i]["TimeLimit.truncated"]
        s'_i         = infos[i]["terminal_observation"] if done_i else obs_i
        potential:  r'_i = r_i + scale * (gamma * (0 if terminated_i else Phi(s'_i)) - Phi(s_i))
        subgoal:    r'_i = r_i + subgoal_bonus * #{subgoals first holding in s'_i this episode}
        replace:    r'_i = scale * Phi(s'_i)

    The critic is called ONCE per vector step on a batch ``(n_envs + n_done, D)``: every env's
    returned observation (the reset observation for done envs) plus the terminal observations.
    The batch is validated once, here (NaN/inf, sizes, dtypes, naming the key and env); a critic with
    a batch path ``score_rows(x, check=False)`` (:class:`~prm_critic.onnx.OnnxCritic`) is not asked
    to validate it again. Each env's ``Phi(s)`` is kept across steps and replaced by ``Phi(reset obs)`` at autoreset.
    ``infos[i]`` gets the same ``prm_*`` keys as the single-env shaper (``prm_x`` / ``prm_next_x``
    are read-only rows of the step's batch; ``prm_subgoals`` only with ``info_subgoals=True``). With ``deadline_s`` a late
    or failed call gives zero shaping for the whole step and unknown ``Phi`` (zero shaping next step
    too); ``stats`` counts ``calls``, ``fallbacks``, ``timeouts``, ``errors``, ``busy``.

    Pitfalls (stable-baselines3):

    * Place this wrapper INSIDE ``VecNormalize`` (``VecNormalize(SB3VecPRMRewardShaper(venv))``).
      Off-policy algorithms (SAC, TD3, TQC, DDPG) store ``VecNormalize.get_original_reward()``: a
      reward VecEnvWrapper placed outside ``VecNormalize`` is silently ignored by them; placed
      outside, it would also see normalised observations. A warning is raised when the wrapped
      VecEnv contains a ``VecNormalize``.
    * ``make_vec_env`` puts ``Monitor`` before ``wrapper_class`` and below any VecEnvWrapper:
      ``rollout/ep_rew_mean`` logs the ORIGINAL reward, not the shaped one.
    * HER relabelling calls the envs' ``compute_reward``: VecEnvWrapper rewards never reach
      relabelled samples. For HER use the gym-level ``PRMRewardShaper``.

    Args:
        venv: a stable-baselines3 ``VecEnv``.
        critic, config, **settings: as for :class:`~prm_critic.wrappers.PRMRewardShaper` (a
            :class:`~prm_critic.wrappers.ShaperConfig` or its fields; the task is checked against the first
            sub-env's id).
    """

    def __init__(self, venv, critic: BaseCritic | None = None, *, config: ShaperConfig | None = None, **settings: Any):
        if not isinstance(venv, vec_env.VecEnv):
            raise refuse_env_kind(venv, name="venv", expected=SB3_VEC_ENV)
        super().__init__(venv)
        setup_shaper(self, critic, config, settings, space=venv.observation_space, env_id=_venv_env_id(venv),
                     where="venv")
        if vec_env.unwrap_vec_normalize(venv) is not None:
            warnings.warn(
                "SB3VecPRMRewardShaper wraps a VecNormalize: it sees normalised observations and off-policy "
                "algorithms ignore its reward (they store VecNormalize.get_original_reward()); wrap it inside "
                "VecNormalize instead: VecNormalize(SB3VecPRMRewardShaper(venv, ...))",
                stacklevel=2,
            )
        self._flatten = ObsFlattener(self.layout)
        n = self.num_envs
        self._x = np.zeros((n, self.layout.obs_dim), dtype=np.float32)
        self._x_rows: list[np.ndarray] = list(self._x)
        self._nan = np.full(n, np.nan)
        self._nan.flags.writeable = False
        self._phi = self._nan  # Phi(s) of every env: all NaN (unknown) or all scores, never a mix
        self._claimed: list[set[str]] = [set() for _ in range(n)]
        self._started = False

    def _holds(self, x: np.ndarray) -> np.ndarray | None:
        if not self._eval_subgoals:
            return None
        assert self.evaluator is not None, "setup_shaper refuses mode 'subgoal' and info_subgoals without a subgoal evaluator"
        return self.evaluator.holds(x)

    def reset(self):
        obs = self.venv.reset()
        x = self._flatten.batch(obs)
        phi = self._caller(x)
        x.flags.writeable = False
        self._x = x
        self._x_rows = list(x)
        self._phi = self._nan if phi is None else phi
        h = self._holds(x) if self.config.mode == "subgoal" else None
        self._claimed = [set() if h is None else {n for n, b in zip(self.evaluator.names, h[i]) if b}
                         for i in range(self.num_envs)]
        self._started = True
        return obs

    def step_wait(self):
        if not self._started:
            raise RuntimeError("step: call reset() before step()")
        obs, rews, dones, infos = self.venv.step_wait()
        n = self.num_envs
        x_now = self._flatten.batch(obs)
        dones_b = dones if type(dones) is np.ndarray and dones.dtype == np.bool_ else np.asarray(dones, dtype=bool)
        any_done = np.count_nonzero(dones_b) > 0
        done_idx = np.flatnonzero(dones_b) if any_done else _NO_ROWS
        batch = np.concatenate([x_now, self._terminal_rows(infos, done_idx)]) if any_done else x_now
        scores = self._caller(batch)  # the one critic call of this vector step
        fell_back = scores is None
        # steps without a done env (almost all of them) copy nothing: s' is the returned observation
        x_next, phi_now, phi_next, terminated = x_now, None, None, dones_b
        if not fell_back:
            phi_now = phi_next = scores[:n]
        if any_done:
            x_next = x_now.copy()
            x_next[done_idx] = batch[n:]
            if not fell_back:
                phi_next = phi_now.copy()
                phi_next[done_idx] = scores[n:]
            terminated = dones_b.copy()
            for i in done_idx:
                terminated[i] = not infos[i].get("TimeLimit.truncated", False)
        r = np.asarray(rews, dtype=np.float64)
        h_next = self._holds(x_next)
        shaping = self._shaping(r, phi_next, terminated, any_done, h_next)
        new_rews = (r + shaping).astype(np.asarray(rews).dtype, copy=False)
        self._publish(infos, r, phi_next, shaping, terminated, fell_back, x_now, x_next, h_next)
        # autoreset: Phi(s) of a done env is the score of its reset observation, claims start over
        self._x = x_now
        self._phi = self._nan if fell_back else phi_now
        if any_done and self.config.mode == "subgoal":
            h_now = self._holds(x_now[done_idx])
            for j, i in enumerate(done_idx):
                self._claimed[i] = {nm for nm, b in zip(self.evaluator.names, h_now[j]) if b}
        return obs, new_rews, dones, infos

    def _terminal_rows(self, infos, done_idx: np.ndarray) -> np.ndarray:
        """Critic inputs ``(n_done, D)`` of the done envs' ``infos[i]["terminal_observation"]``."""
        missing = [int(i) for i in done_idx if "terminal_observation" not in infos[i]]
        if missing:
            raise KeyError(f"infos: done env(s) {missing} have no 'terminal_observation' (not an SB3 VecEnv?)")
        return np.stack([self._flatten(infos[i]["terminal_observation"], name=f"infos[{i}]['terminal_observation']")
                         for i in done_idx])

    def _shaping(self, r: np.ndarray, phi_next: np.ndarray | None, terminated: np.ndarray, any_done: bool,
                 h_next: np.ndarray | None) -> np.ndarray:
        """The shaping term ``(n,)`` of this step; 0 where ``Phi`` is unknown (``phi_next`` is ``None``
        when this step's call fell back, ``self._phi`` is all NaN when the previous one did)."""
        n, phi, c = self.num_envs, self._phi, self.config
        if c.mode == "subgoal":
            assert self.evaluator is not None and h_next is not None, "setup_shaper refuses mode 'subgoal' and info_subgoals without a subgoal evaluator"
            shaping = np.zeros(n)
            for i in range(n):
                new = [nm for nm, b in zip(self.evaluator.names, h_next[i]) if b and nm not in self._claimed[i]]
                self._claimed[i].update(new)
                shaping[i] = c.subgoal_bonus * len(new)
            return shaping
        if phi_next is None or phi is self._nan:  # a fallback now or at the previous step: no shaping
            return np.zeros(n)
        if c.mode == "potential":  # scale * (gamma * Phi'(s') - Phi(s)), in place
            shaping = c.gamma * (np.where(terminated, 0.0, phi_next) if any_done else phi_next)
            shaping -= phi
            if self.scale != 1.0:
                shaping *= self.scale
        else:  # replace
            shaping = self.scale * phi_next
            shaping -= r
        return shaping

    def _publish(self, infos, r, phi_next, shaping, terminated, fell_back, x_now, x_next, h_next) -> None:
        """Write this step's ``prm_*`` keys into every env's info dict."""
        n = self.num_envs
        phi_next = self._nan if phi_next is None else phi_next
        # the rows handed out in the infos are views of this step's arrays, which are never written again;
        # the rows of x_now are handed out once more as the next step's prm_x
        x_now.flags.writeable = False
        now_rows = list(x_now)
        if x_next is x_now:
            next_rows = now_rows
        else:
            x_next.flags.writeable = False
            next_rows = list(x_next)
        for info, ri, pi, pni, si, ti, xi, xni in zip(infos, r.tolist(), self._phi.tolist(), phi_next.tolist(),
                                                      shaping.tolist(), terminated.tolist(), self._x_rows, next_rows):
            info["prm_original_reward"] = ri
            info["prm_phi"] = pi
            info["prm_next_phi"] = pni
            info["prm_shaping"] = si
            info["prm_fallback"] = fell_back
            info["prm_terminated"] = ti
            info["prm_x"] = xi
            info["prm_next_x"] = xni
        if self.config.info_subgoals:
            assert self.evaluator is not None, "setup_shaper refuses mode 'subgoal' and info_subgoals without a subgoal evaluator"
            for i in range(n):
                infos[i]["prm_subgoals"] = {nm: bool(b) for nm, b in zip(self.evaluator.names, h_next[i])}
        self._x_rows = now_rows

    def close(self) -> None:
        self._caller.close()
        self.venv.close()
