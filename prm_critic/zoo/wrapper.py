"""``PRMWrapper``: PRM reward shaping and dead-end pruning as one rl-baselines3-zoo ``env_wrapper``.

rl-baselines3-zoo builds every env (training and evaluation) as::

    gym.make(env_id) -> Monitor(monitor.csv) -> env_wrapper(s) from the hyperparams YAML

so this wrapper sits *above* zoo's ``Monitor`` and, inside it::

    Monitor -> PRMRewardShaper(critic, gamma) -> DeadEndPruner(same critic)  (one critic call per step)

What that means for the logs (``docs/rl_zoo.md``):

* ``monitor.csv`` and ``rollout/ep_rew_mean`` hold the env's own (unshaped) return; the shaped return
  is ``info["prm_episode"]["r"]`` and ``info["episode"]["r_shaped"]`` (logged as
  ``prm/ep_return_shaped`` by :class:`~prm_critic.zoo.PRMZooCallback`).
* An episode this wrapper cuts (pruning) is invisible to the ``Monitor`` below, which would drop it;
  the wrapper ends the Monitor's episode on that step the way the Monitor ends one (a monitor.csv row
  with the env's return up to the cut, ``info["episode"]``), so pruned episodes, failures by
  construction, stay in monitor.csv and in ``rollout/ep_rew_mean``.
* The Monitor's ``info_keywords`` read the env's own info keys (``is_success``); it cannot log this
  wrapper's ``prm_*`` keys, which are added above it, and a ``monitor_kwargs`` asking for one is
  refused at construction.

When zoo builds the env (``ExperimentManager.create_envs`` or ``rl_zoo3.utils.create_test_env`` on
the call stack, in this process), the wrapper reads from zoo what a plain kwarg cannot carry: the
algorithm's ``gamma`` (the hyperparams' ``gamma``, or the algorithm's default), and whether the env
is an evaluation env (``create_envs(eval_env=True)``, and every env of ``enjoy`` /
``record_video``), on which pruning is off.
"""

from __future__ import annotations

import difflib
import inspect
import math
import os
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Any, Mapping, NamedTuple

from prm_critic import validate
from prm_critic._optional import require
from prm_critic.critic import BaseCritic
from prm_critic.robotics.spec import TaskSpec, list_builtin_specs, load_spec
from prm_critic.sb3.envs import CRITIC_NAMES, SHAPING_MODES, check_prune, critic_reference, resolve_critic
from prm_critic.sb3.monitor import step_success

require("gymnasium")  # a missing extra fails here with the exact ``pip install`` to run
import gymnasium as gym  # noqa: E402

__all__ = ["PRMWrapper", "ZooBuild", "find_zoo_build", "resolve_zoo_critic", "CRITIC_FILE_SUFFIXES"]

HEADS = ("progress", "success")
#: the file suffixes ``critic:`` takes as a path (a checkpoint stem without suffix is taken too)
CRITIC_FILE_SUFFIXES = (".onnx", ".json", ".safetensors")
#: the SB3 ``Monitor`` attributes this wrapper uses to end the Monitor's episode on a pruned step
_MONITOR_ATTRS = ("rewards", "needs_reset", "t_start", "info_keywords", "episode_returns", "episode_lengths",
                  "episode_times", "current_reset_info", "results_writer")
# a critic file loaded once per process: (path, size, mtime_ns) of each file -> critic
_LOADED: dict[tuple, BaseCritic] = {}


class ZooBuild(NamedTuple):
    """What rl-baselines3-zoo's call stack says about the env being built (:func:`find_zoo_build`)."""

    #: an evaluation env (``create_envs(eval_env=True)``, ``create_test_env``)
    evaluation: bool
    #: the algorithm's discount, ``None`` when neither the hyperparams nor the algorithm give one
    gamma: float | None
    #: where ``gamma`` came from, for messages (``"the hyperparams' gamma"``, ``"SAC's default gamma"``)
    gamma_source: str
    #: the algorithm's hyperparams as zoo passes them to the model (``None`` when not visible)
    hyperparams: Mapping[str, Any] | None
    #: the algorithm's name in zoo (``"sac"``), ``None`` when not visible
    algo: str | None


def _algo_default_gamma(algo: str | None) -> tuple[float | None, str]:
    if algo is None:
        return None, "the algorithm (not visible)"
    utils = sys.modules.get("rl_zoo3.utils")
    cls = getattr(utils, "ALGOS", {}).get(algo) if utils is not None else None
    if cls is None:
        return None, f"algorithm {algo!r} (not in rl_zoo3.utils.ALGOS)"
    param = inspect.signature(cls).parameters.get("gamma")
    if param is None or param.default is inspect.Parameter.empty:
        return None, f"{cls.__name__} (no gamma argument)"
    return float(param.default), f"{cls.__name__}'s default gamma"


def find_zoo_build() -> ZooBuild | None:
    """What rl-baselines3-zoo is building, read from the call stack, or ``None`` when zoo is not
    building this env in this process (not imported, not on the stack: an env made by hand, or in a
    ``SubprocVecEnv`` worker).

    * ``ExperimentManager.create_envs(n_envs, eval_env, no_log)``: ``evaluation = eval_env``; the
      hyperparams are the ``hyperparams`` of ``setup_experiment`` (the YAML with ``--hyperparams``
      overrides) or the ``kwargs`` of ``objective`` (an optuna trial's sampled values).
    * ``rl_zoo3.utils.create_test_env`` (``enjoy``, ``record_video``): ``evaluation = True``, the
      hyperparams its caller passed (the run's saved ``config.yml``), the algorithm from the nearest
      caller holding ``algo``.

    ``gamma`` is the hyperparams' ``gamma``, else the default of the algorithm's class.
    """
    manager_mod = sys.modules.get("rl_zoo3.exp_manager")
    if manager_mod is None and "rl_zoo3.utils" not in sys.modules:
        return None
    manager_cls = getattr(manager_mod, "ExperimentManager", None)
    frame: FrameType | None = sys._getframe(1)
    manager: Any = None
    evaluation: bool | None = None
    hyper: Any = None
    algo: str | None = None
    try:
        while frame is not None:
            name, loc = frame.f_code.co_name, frame.f_locals
            if evaluation is None:
                if name == "create_envs" and manager_cls is not None and isinstance(loc.get("self"), manager_cls):
                    manager = loc["self"]
                    evaluation = bool(loc.get("eval_env", False))
                    algo = getattr(manager, "algo", None)
                elif name == "create_test_env" and frame.f_globals.get("__name__") == "rl_zoo3.utils":
                    evaluation, hyper = True, loc.get("hyperparams")
            elif manager is not None:
                if loc.get("self") is manager and name in ("setup_experiment", "objective"):
                    hyper = loc.get("hyperparams" if name == "setup_experiment" else "kwargs")
                    break
            elif isinstance(loc.get("algo"), str):
                algo = loc["algo"]
                break
            frame = frame.f_back
    finally:
        del frame
    if evaluation is None:
        return None
    if hyper is None and manager is not None:  # create_envs called after setup_experiment: its hyperparams
        hyper = getattr(manager, "_hyperparams", None)
    hyper = hyper if isinstance(hyper, Mapping) else None
    gamma: float | None
    if hyper is not None and hyper.get("gamma") is not None:
        gamma = validate.check_gamma("hyperparams['gamma']", hyper["gamma"])
        source = "the hyperparams' gamma"
    else:
        gamma, source = _algo_default_gamma(algo)
    return ZooBuild(evaluation, gamma, source, hyper, algo)


def _file_key(paths: list[Path]) -> tuple:
    return tuple((str(p.resolve()), p.stat().st_size, p.stat().st_mtime_ns) for p in paths)


def resolve_zoo_critic(critic: Any, spec: TaskSpec | None, env: Any, *, share: bool = True) -> BaseCritic:
    """``critic:`` of the YAML as a :class:`BaseCritic`.

    A name from :data:`~prm_critic.sb3.envs.CRITIC_NAMES` (``subgoal``: the spec's
    ``SubgoalCritic`` on this env); a path (relative to the working directory) to an ``.onnx`` file
    (``OnnxCritic``) or a critic checkpoint (``.json`` / ``.safetensors`` / their stem: the torch state
    critic), loaded by :func:`~prm_critic.sb3.envs.resolve_critic` once per process and shared by the
    envs that name it (``share=False``: loaded for this env alone); or a :class:`BaseCritic` (from Python). Anything else is refused with one
    error naming the value, the names and the file kinds accepted.
    """
    if isinstance(critic, BaseCritic):
        return critic
    if isinstance(critic, os.PathLike):
        critic = os.fspath(critic)
    accepted = (f"one of {list(CRITIC_NAMES)} or the path of a critic file "
                "(.onnx, or a critic checkpoint .json / .safetensors)")
    if not isinstance(critic, str) or not critic:
        raise validate.ArgumentError(f"critic: expected {accepted}, got {type(critic).__name__} {critic!r}")
    if critic in CRITIC_NAMES:
        if spec is None:
            raise validate.ArgumentError(
                f"spec: critic {critic!r} needs a task spec, and the env has no built-in one "
                f"(built-in specs: {list(list_builtin_specs())}); pass spec: <a built-in name or a TOML path>")
        crit = resolve_critic(critic, spec, env)
        assert crit is not None
        return crit
    p = Path(critic).expanduser()
    if p.suffix == ".onnx":
        files = [p] if p.is_file() else []
    else:
        stem = p.with_suffix("") if p.suffix in (".json", ".safetensors") else p
        files = [f for f in (stem.with_suffix(".json"), stem.with_suffix(".safetensors")) if f.is_file()]
    if not files:
        near = difflib.get_close_matches(critic, list(CRITIC_NAMES), n=1)
        hint = f"; did you mean {near[0]!r}?" if near else ""
        raise validate.ArgumentError(
            f"critic: expected {accepted}, got {critic!r}: not a name, and no such file "
            f"(relative to {os.getcwd()}){hint}")
    key = _file_key(files)
    crit = _LOADED.get(key) if share else None
    if crit is None:
        crit = resolve_critic(str(p), spec, env)
        assert crit is not None
        if share:
            _LOADED[key] = crit
    return crit


def _env_id(env: Any) -> str | None:
    env_id = getattr(getattr(getattr(env, "unwrapped", env), "spec", None), "id", None)
    return env_id if isinstance(env_id, str) and env_id else None


def _task_spec(spec: Any, env: Any) -> TaskSpec | None:
    """``spec:`` (a built-in name or a TOML path), else the one built-in spec of the env's id."""
    if spec is not None:
        return load_spec(spec)
    env_id = _env_id(env)
    if env_id is None:
        return None
    same = [s for s in (load_spec(n) for n in list_builtin_specs()) if s.env_id == env_id]
    if len(same) > 1:
        raise validate.ArgumentError(
            f"spec: env {env_id!r} has several built-in task specs {[s.name for s in same]}; pass spec: <one of them>")
    return same[0] if same else None


def _find_monitor(env: Any) -> Any:
    """The first SB3 ``Monitor`` in ``env``'s wrapper chain, or ``None``."""
    monitor_mod = sys.modules.get("stable_baselines3.common.monitor")
    monitor_cls = getattr(monitor_mod, "Monitor", None)
    e = env
    while monitor_cls is not None and isinstance(e, gym.Wrapper):
        if isinstance(e, monitor_cls):
            return e
        e = e.env
    return None


def _check_her(hyper: Mapping[str, Any] | None, shaping: str | None) -> None:
    """Refuse, at construction, HER settings that would fail at the first relabelled batch."""
    if hyper is None or shaping is None:
        return
    buf = hyper.get("replay_buffer_class")
    names = [c.__name__ for c in getattr(buf, "__mro__", ())]
    if "HerReplayBuffer" not in names:
        return
    if shaping == "subgoal":
        raise validate.ArgumentError(
            "shaping: 'subgoal' with replay_buffer_class HerReplayBuffer: its bonus is paid once per episode, "
            "which one relabelled transition cannot recompute; expected shaping: potential (relabelled exactly)")
    kwargs = hyper.get("replay_buffer_kwargs") or {}
    if "PRMHerReplayBuffer" not in names and not (isinstance(kwargs, Mapping) and kwargs.get("copy_info_dict")):
        raise validate.ArgumentError(
            f"replay_buffer_kwargs: HerReplayBuffer relabels rewards through this wrapper's compute_reward, which "
            f"needs the shaper's info keys; expected copy_info_dict=True in replay_buffer_kwargs, got {dict(kwargs)!r} "
            "(\"dict(goal_selection_strategy='future', n_sampled_goal=4, copy_info_dict=True)\")")


class PRMWrapper(gym.Wrapper, gym.utils.RecordConstructorArgs):
    r"""Shaping and pruning with one critic, from plain keyword arguments (a zoo ``env_wrapper``).

    Builds ``PRMRewardShaper`` (when ``shaping`` is set) and ``DeadEndPruner`` (when ``prune`` is
    set) on ``env`` with the SAME critic object, so the pruner reads the shaper's scores of each
    step (``info["prm_next_scores"]``) and the critic runs once per step for both::

        potential:  r' = r + scale * (gamma * Phi(s') - Phi(s)),  Phi(s) = critic(s)[head],
                    Phi(s') = 0 on a true termination
        pruning:    k_t = k_{t-1} + 1 if critic(s_t)[prune head] < threshold else 0,
                    truncated_t = truncated_t(env) or k_t >= patience

    (``shaping: subgoal`` / ``replace`` as in :class:`~prm_critic.wrappers.PRMRewardShaper`.)

    On an evaluation env (``evaluation``) the pruner is bypassed from the next reset: episodes run
    to the env's own end; the shaping stays.

    ``info`` of each step: the shaper's ``prm_original_reward``, ``prm_shaping``, ``prm_phi``,
    ``prm_next_phi``, ... and the pruner's ``prm_pruned``, ``prm_prune_score``; at an episode's end,
    ``info["prm_episode"] = {r (shaped return), r_original, shaping, l, pruned, success}`` and, added to
    the ``info["episode"]`` of zoo's Monitor below, ``r_shaped``, ``shaping``, ``pruned``. When the
    pruner cuts an episode, the SB3 ``Monitor`` below is ended on that step as it would end itself
    (module docstring).

    Args:
        env: the env (under zoo: ``Monitor(gym.make(env_id))``).
        critic: a name from ``prm_critic.sb3.envs.CRITIC_NAMES`` (``subgoal``), a path to a critic
            file (``.onnx``; a checkpoint ``.json`` / ``.safetensors``), or a ``BaseCritic``
            (:func:`resolve_zoo_critic`).
        gamma: the learner's discount. ``None`` (default): the algorithm's, read from zoo
            (:func:`find_zoo_build`); an error when zoo is not visible. Given while zoo's is
            visible: must be equal, else an error naming both.
        shaping: ``potential`` (default), ``subgoal``, ``replace``, or ``None`` (pruning only).
        scale: multiplier of the shaping term.
        head: the critic head used as ``Phi``: ``progress`` (default) or ``success``.
        prune: ``None`` (default) or ``{threshold, patience[, head]}`` (head default ``success``).
        spec: the task spec (built-in name or TOML path); default the built-in spec of the env's id.
        evaluation: ``None`` (default): zoo's evaluation envs are detected (``False`` when zoo is
            not building the env in this process); ``True`` / ``False``: as given.
            :meth:`set_evaluation` changes it later (``PRMZooCallback`` does so on every
            ``EvalCallback``'s env).
        deadline_s: per-call critic deadline in seconds (``None``: synchronous; see the shaper). A
            critic file is then loaded for this env alone (not shared with the other envs).
        allow_task_mismatch: accept a critic made for another task than the env's.
    """

    def __init__(self, env, critic: Any, *, gamma: float | None = None, shaping: str | None = "potential",
                 scale: float = 1.0, head: str = "progress", prune: Mapping[str, Any] | None = None,
                 spec: Any = None, evaluation: bool | None = None, deadline_s: float | None = None,
                 allow_task_mismatch: bool = False):
        gym.utils.RecordConstructorArgs.__init__(
            self, _disable_deepcopy=True, critic=critic, gamma=gamma, shaping=shaping, scale=scale, head=head,
            prune=prune, spec=spec, evaluation=evaluation, deadline_s=deadline_s,
            allow_task_mismatch=allow_task_mismatch)
        self.shaping = validate.check_choice("shaping", shaping, SHAPING_MODES, allow_none=True)
        self.prune = check_prune(prune)
        if self.shaping is None and self.prune is None:
            raise validate.ArgumentError(
                "shaping: with shaping=None and prune=None the wrapper would leave the env as it is; expected "
                f"shaping in {list(SHAPING_MODES)} or prune: {{threshold: ..., patience: ...}}")
        self.scale = validate.check_number("scale", scale)
        self.head = validate.check_choice("head", head, HEADS)
        if evaluation is not None:
            validate.check_flag("evaluation", evaluation)
        build = find_zoo_build()
        self.zoo_build = build
        self.gamma = self._resolve_gamma(gamma, build)
        self.evaluation = bool(build.evaluation) if evaluation is None and build is not None else bool(evaluation)
        _check_her(build.hyperparams if build is not None else None, self.shaping)
        self.task_spec = _task_spec(spec, env)
        # a deadline runs the critic on a worker thread: a late call may overlap another env's, so no sharing
        self.critic = resolve_zoo_critic(critic, self.task_spec, env, share=deadline_s is None)
        self.critic_ref = critic_reference(critic)

        from prm_critic.wrappers import DeadEndPruner, PRMRewardShaper

        self.shaper = None
        top = env
        if self.shaping is not None:
            assert self.gamma is not None
            top = self.shaper = PRMRewardShaper(
                env, self.critic, gamma=self.gamma, mode=self.shaping, scale=self.scale, head=self.head,
                spec=self.task_spec, deadline_s=deadline_s, allow_task_mismatch=allow_task_mismatch)
        self.pruner = None
        if self.prune is not None:
            top = self.pruner = DeadEndPruner(
                top, self.critic, threshold=self.prune["threshold"], patience=self.prune["patience"],
                head=self.prune.get("head", "success"), deadline_s=deadline_s,
                allow_task_mismatch=allow_task_mismatch)
            if self.shaper is not None and not self.pruner.shares_shaper:  # pragma: no cover - same object by construction
                raise RuntimeError("prune: the pruner does not reuse the shaper's scores; it would call the critic twice")
        gym.Wrapper.__init__(self, top)
        self.monitor = _find_monitor(env)
        if self.monitor is not None:
            self._check_monitor(self.monitor)
        self._success_eval = None
        if self.task_spec is not None and self.task_spec.success.reads_state:
            from prm_critic.robotics.subgoals import SubgoalCritic

            sc = SubgoalCritic(self.task_spec, env)
            self._success_eval = (sc.evaluator, sc.layout)
        self._pruning = False
        self._reset_episode()

    # ------------------------------------------------------------------ construction helpers
    def _resolve_gamma(self, gamma: Any, build: ZooBuild | None) -> float | None:
        if self.shaping is None and gamma is None:
            return None  # pruning only: no shaping term to discount
        zoo_gamma = build.gamma if build is not None else None
        if gamma is None:
            if zoo_gamma is None:
                where = ("rl-baselines3-zoo is not building this env in this process (an env made by hand, or a "
                         "SubprocVecEnv worker)") if build is None else f"{build.gamma_source} is not known"
                raise validate.ArgumentError(
                    f"gamma: not given, and the algorithm's discount is not visible here ({where}); "
                    "expected gamma: <the algorithm's gamma> in the PRMWrapper kwargs")
            return zoo_gamma
        g = validate.check_gamma("gamma", gamma, hint=" equal to the learner's discount")
        if build is not None and zoo_gamma is not None and not math.isclose(g, zoo_gamma, rel_tol=0.0, abs_tol=1e-12):
            raise validate.ArgumentError(
                f"gamma: PRMWrapper's gamma={g} differs from the algorithm's gamma={zoo_gamma} ({build.gamma_source}); "
                "potential-based shaping keeps the optimal policy only with the learner's own discount. "
                "Remove gamma from the PRMWrapper kwargs (it reads the algorithm's) or make the two equal")
        return g

    @staticmethod
    def _check_monitor(monitor: Any) -> None:
        missing = [a for a in _MONITOR_ATTRS if not hasattr(monitor, a)]
        if missing:
            import stable_baselines3

            raise RuntimeError(
                f"env: the SB3 Monitor below has no {missing} (stable-baselines3 {stable_baselines3.__version__}); "
                "PRMWrapper ends its episode on a pruned step through these attributes")
        ours = [k for k in monitor.info_keywords if str(k).startswith("prm_")]
        if ours:
            raise validate.ArgumentError(
                f"monitor_kwargs: info_keywords {ours} are PRMWrapper's info keys, added above zoo's Monitor, which "
                "reads only the env's own keys (it would fail at the first episode end); expected the env's keys "
                "only (e.g. is_success). The shaped return is logged by prm_critic.zoo.PRMZooCallback "
                "(prm/ep_return_shaped) and is in info['prm_episode']")

    # ------------------------------------------------------------------ public API
    def set_evaluation(self, evaluation: bool) -> None:
        """Mark this env as an evaluation env (no pruning) or not, from the next reset."""
        self.evaluation = validate.check_flag("evaluation", evaluation)

    def prm_zoo_settings(self) -> dict[str, Any]:
        """What this wrapper does, for checks and logs (``PRMZooCallback`` reads it through
        ``VecEnv.env_method``): critic, gamma, shaping, scale, head, prune, evaluation, and
        ``pruning`` (whether the current episode can be pruned)."""
        return {"critic": self.critic_ref, "gamma": self.gamma, "shaping": self.shaping, "scale": self.scale,
                "head": self.head, "prune": self.prune, "evaluation": self.evaluation, "pruning": self._pruning}

    @property
    def stats(self) -> dict[str, Any]:
        """``{"shaper": PRMRewardShaper.stats, "pruner": DeadEndPruner.stats}`` (the parts present)."""
        out: dict[str, Any] = {}
        if self.shaper is not None:
            out["shaper"] = self.shaper.stats
        if self.pruner is not None:
            out["pruner"] = self.pruner.stats
        return out

    # ------------------------------------------------------------------ gym API
    def _reset_episode(self) -> None:
        self._ret = 0.0
        self._ret_orig = 0.0
        self._shaping_sum = 0.0
        self._len = 0
        self._success_any = False

    def _active(self) -> Any:
        """The wrapper chain this episode steps: the pruner on top, or (evaluation) what is under it."""
        if self._pruning or self.pruner is None:
            return self.env
        return self.shaper if self.shaper is not None else self.pruner.env

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        self._pruning = self.pruner is not None and not self.evaluation
        self._reset_episode()
        return self._active().reset(seed=seed, options=options)

    def step(self, action):
        obs, reward, terminated, truncated, info = self._active().step(action)
        r = float(reward)
        self._ret += r
        self._ret_orig += float(info.get("prm_original_reward", r))
        self._shaping_sum += float(info.get("prm_shaping", 0.0))
        self._len += 1
        rule_any = self.task_spec is not None and self.task_spec.success.rule == "any"
        if rule_any:
            self._success_any |= self._step_success(info, obs, terminated, truncated)
        if not (terminated or truncated):
            return obs, reward, terminated, truncated, info
        pruned = bool(info.get("prm_pruned", False))
        info = dict(info)
        if pruned and self.monitor is not None and not self.monitor.needs_reset:
            self._end_monitor_episode(info)
        success = self._success_any if rule_any else self._step_success(info, obs, terminated, truncated)
        record = {"r": round(self._ret, 6), "r_original": round(self._ret_orig, 6),
                  "shaping": round(self._shaping_sum, 6), "l": self._len, "pruned": pruned}
        if success is not None:
            record["success"] = success
        info["prm_episode"] = record
        ep = info.get("episode")
        if isinstance(ep, dict):
            ep.update(r_shaped=record["r"], shaping=record["shaping"], pruned=pruned)
        return obs, reward, terminated, truncated, info

    def _step_success(self, info: Mapping[str, Any], obs: Any, terminated: bool, truncated: bool) -> bool | None:
        if self.task_spec is None:
            flag = info.get("is_success")
            return None if flag is None else bool(flag)
        ev, layout = self._success_eval if self._success_eval is not None else (None, None)
        return step_success(self.task_spec, info, obs, terminated, ev, layout, truncated=truncated)

    def _end_monitor_episode(self, info: dict[str, Any]) -> None:
        """End the episode of the SB3 ``Monitor`` below as ``Monitor.step`` ends one (its row in
        monitor.csv, ``info["episode"]``): the pruner truncated it above the Monitor, which never
        saw the end."""
        m = self.monitor
        now = time.time()
        ep_rew, ep_len = sum(m.rewards), len(m.rewards)
        ep_info = {"r": round(ep_rew, 6), "l": ep_len, "t": round(now - m.t_start, 6)}
        for key in m.info_keywords:
            ep_info[key] = info[key]
        m.episode_returns.append(ep_rew)
        m.episode_lengths.append(ep_len)
        m.episode_times.append(now - m.t_start)
        ep_info.update(m.current_reset_info)
        if m.results_writer:
            m.results_writer.write_row(ep_info)
        m.needs_reset = True
        info["episode"] = ep_info

    # ------------------------------------------------------------------ HER
    def compute_reward(self, achieved_goal, desired_goal, info):
        """The shaper's :meth:`~prm_critic.wrappers.PRMRewardShaper.compute_reward` (the env's when
        there is no shaper): what SB3's ``HerReplayBuffer`` relabels with."""
        if self.shaper is not None:
            return self.shaper.compute_reward(achieved_goal, desired_goal, info)
        return self.env.get_wrapper_attr("compute_reward")(achieved_goal, desired_goal, info)

    def _need_shaper(self, what: str):
        if self.shaper is None:
            raise AttributeError(f"{what}: PRMWrapper has no shaper (shaping=None); relabelling rows need one")
        return self.shaper

    @property
    def relabel_width(self) -> int:
        """The shaper's ``relabel_width`` (``prm_critic.sb3.her.PRMHerReplayBuffer``)."""
        return self._need_shaper("relabel_width").relabel_width

    def relabel_rows(self, infos):
        """The shaper's ``relabel_rows`` (``prm_critic.sb3.her.PRMHerReplayBuffer``)."""
        return self._need_shaper("relabel_rows").relabel_rows(infos)

    def compute_reward_rows(self, achieved_goal, desired_goal, rows, infos=None):
        """The shaper's ``compute_reward_rows`` (``prm_critic.sb3.her.PRMHerReplayBuffer``)."""
        return self._need_shaper("compute_reward_rows").compute_reward_rows(achieved_goal, desired_goal, rows, infos)
