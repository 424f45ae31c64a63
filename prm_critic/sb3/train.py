"""Train SB3 policies (SAC, TQC, PPO; CrossQ on SBX; HER for goal-conditioned tasks) with PRM subgoal rewards.

``train_policy`` builds the env chain of :mod:`prm_critic.sb3.envs` (shaper inside the vector env,
``PRMMonitor`` last), passes the algorithm's ``gamma`` to the shaper (one source of truth), adds
:class:`~prm_critic.sb3.callbacks.PRMStatsCallback` and, when ``eval_freq`` is set,
:class:`~prm_critic.sb3.callbacks.UnshapedSuccessEval` on a separate env without shaper/pruner.
With ``log_dir`` it writes tensorboard + CSV logs, ``eval.csv`` and the final policy checkpoint
``policy.safetensors`` + ``policy.json`` (no pickle; see :mod:`prm_critic.sb3.checkpoint`).
``backend="sbx"`` trains with SBX (JAX) instead of stable-baselines3 (:mod:`prm_critic.sb3.backends`);
everything around the algorithm stays the same.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import json
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from prm_critic import validate
from prm_critic._optional import require
from prm_critic.robotics.spec import TaskSpec, load_spec
from prm_critic.sb3.backends import (
    ALGOS,
    BACKENDS,
    DEFAULT_BACKEND,
    OFF_POLICY,
    algo_class,
    algo_default,
    check_algo_backend,
    check_algo_kwargs,
)
from prm_critic.sb3.envs import (SHAPING_MODES, check_prune, critic_config_fingerprint, critic_fingerprint, critic_reference,
                                 make_vec_train_env, resolve_critic)

if TYPE_CHECKING:  # the callbacks are imported lazily, with stable-baselines3
    from stable_baselines3.common.callbacks import BaseCallback

__all__ = ["ALGOS", "OFF_POLICY", "BACKENDS", "DEFAULT_BACKEND", "algo_class", "algo_default", "check_algo_kwargs",
           "train_policy", "TrainPolicyConfig", "build_model", "predict", "fit_rollout", "planned_steps"]


def _is_goal_env(env) -> bool:
    spaces = require("gymnasium").spaces
    sp = env.observation_space
    return isinstance(sp, spaces.Dict) and {"achieved_goal", "desired_goal"} <= set(sp.spaces)


def build_model(algo: str, env, *, her: bool = False, algo_kwargs: Mapping[str, Any] | None = None,
                seed: int | None = None, verbose: int = 0, tensorboard_log: str | None = None,
                backend: str = DEFAULT_BACKEND, shaped: bool = False):
    """Construct the model of ``algo`` on ``backend`` (``"sb3"`` or ``"sbx"``) for ``env`` (a VecEnv).
    ``her=True`` adds SB3's ``HerReplayBuffer`` (both backends; ``copy_info_dict=True``, so
    relabelled rewards can use what the env keeps in ``info``); with ``shaped=True`` (every env's
    chain holds a :class:`~prm_critic.wrappers.PRMRewardShaper`) it is
    :class:`~prm_critic.sb3.her.PRMHerReplayBuffer` instead, which keeps the shaper's relabelling
    inputs as compact rows and relabels a batch in one vectorised call (same rewards, no per-sample
    deep copy of the info dicts)."""
    cls = algo_class(algo, backend)
    kw = dict(algo_kwargs or {})
    spaces = require("gymnasium").spaces
    policy = kw.pop("policy", "MultiInputPolicy" if isinstance(env.observation_space, spaces.Dict) else "MlpPolicy")
    if her:
        if algo not in OFF_POLICY:
            raise ValueError(f"her: HER needs an off-policy algorithm {list(OFF_POLICY)}, got algo={algo!r}")
        if not _is_goal_env(env):
            raise ValueError("her: HER needs a goal-conditioned env (Dict observation with achieved_goal and "
                             f"desired_goal), got observation space {env.observation_space}")
        her_kw = {"n_sampled_goal": 4, "goal_selection_strategy": "future", **kw.pop("replay_buffer_kwargs", {})}
        her_kw["copy_info_dict"] = True
        if shaped:
            from prm_critic.sb3.her import PRMHerReplayBuffer

            kw["replay_buffer_class"] = PRMHerReplayBuffer
        else:
            kw["replay_buffer_class"] = require("stable_baselines3").HerReplayBuffer
        kw["replay_buffer_kwargs"] = her_kw
    return cls(policy, env, seed=seed, verbose=verbose, tensorboard_log=tensorboard_log, **kw)


def train_policy(task: "str | TaskSpec | None" = None, *, config: TrainPolicyConfig | None = None, **settings: Any):
    """Train a policy on ``task`` with optional PRM shaping, HER, dead-end pruning and demonstrations.

    Args:
        task: built-in spec name, TOML path or :class:`TaskSpec`.
        config: a :class:`TrainPolicyConfig` (with the task); or, instead, its fields as keyword arguments
            (``total_steps`` is required; ``algo``, ``critic``, ``shaping``, ``her``, ... as described there).

    Returns:
        The trained SB3 (or SBX) model. ``model.prm_config`` holds the run's JSON-able configuration,
        with ``backend`` and ``trained_steps`` (the env steps trained, ``model.num_timesteps``).
    """
    if task is not None:
        settings = {"task": task, **settings}
    config = validate.config_from(TrainPolicyConfig, config, **settings)
    with _torch_threads(config.torch_threads):
        return _train(config)


@dataclass(frozen=True, kw_only=True)
class TrainPolicyConfig:
    """The settings of :func:`train_policy`: pass ``config=TrainPolicyConfig(...)`` or these fields as
    keyword arguments. Checked once, here, before anything is built, and passed whole to the run's phases.

    Checked values replace the given ones: ``progress`` is ``progress_bar`` when that older name is
    given, ``prune`` has its defaults filled in, ``critic`` is ``"subgoal"`` for ``shaping="subgoal"``
    without one, and ``early_stop`` has its defaults filled in. ``task`` stays as given:
    :func:`train_policy` resolves it once, when it builds the run.

    Attributes:
        task: built-in spec name, TOML path or :class:`TaskSpec`.
        algo: ``"sac"``, ``"tqc"`` (sb3-contrib on ``backend="sb3"``), ``"ppo"`` (``"sb3"`` only) or
            ``"crossq"`` (``"sbx"`` only).
        critic: ``None``, ``"subgoal"``, a checkpoint path (``.json``/``.safetensors``/``.onnx``) or a
            :class:`BaseCritic`. Needed by ``shaping`` and ``prune``.
        shaping: ``"potential"`` (``F = gamma * Phi(s') - Phi(s)``), ``"subgoal"``, ``"replace"`` or
            ``None`` (sparse, the env's own reward). ``"subgoal"`` with ``critic=None`` uses
            ``critic="subgoal"``.
        scale: multiplier of the shaping term.
        head: critic head used as the potential.
        her: use ``HerReplayBuffer`` (off-policy algorithms, goal-conditioned tasks; not with
            ``shaping="subgoal"``, whose once-per-episode bonus cannot be relabelled).
        prune: ``None`` or ``dict(threshold=..., patience=...)`` for :class:`DeadEndPruner`.
        total_steps: env-step budget (> 0). PPO trains in whole rollouts of ``n_steps * n_envs``
            steps: without ``n_steps`` in ``algo_kwargs`` it is fitted so that the rollouts add up to
            ``total_steps`` (:func:`fit_rollout`). Off-policy algorithms step all ``n_envs`` envs
            ``train_freq`` times between budget checks. When the run cannot stop exactly at
            ``total_steps``, a ``UserWarning`` states the number of steps it will train, also kept
            in ``model.prm_config["budget_note"]`` and the saved policy's metadata; an off-policy
            budget that does not get past ``learning_starts`` (no gradient step) is an error.
        seed: seed of the algorithm and the envs.
        n_envs: number of vector envs.
        eval_freq: evaluate on the unshaped env every ``eval_freq`` env steps (``None``: no eval).
        eval_episodes: episodes per evaluation.
        log_dir: folder for tensorboard/CSV logs, ``eval.csv`` and the ``policy`` checkpoint.
        algo_kwargs: extra constructor arguments of the algorithm (``gamma``, ``batch_size``,
            ``policy_kwargs``, ...). ``gamma`` here is also the shaper's gamma.
        normalize_obs: wrap the vector env in ``VecNormalize(norm_obs=True, norm_reward=False)``
            (running mean/std of the observations, as rl-baselines3-zoo does for Fetch). The reward
            is never normalised, so what the learner stores is exactly the shaped reward; the
            shaper and HER see raw observations. The statistics are saved in the checkpoint; use
            :func:`predict` (or ``model.get_vec_normalize_env().normalize_obs``) on raw observations.
        callbacks: extra SB3 callbacks (their own state is not part of the training checkpoint).
        progress: show a progress bar on stderr over the env steps this run trains (total = the
            budget, ``total_steps``, or the number the algorithm rounds it up to; with rate and ETA).
            On by default, like ``collect`` and ``label`` (CLI: ``--no-progress`` hides it).
        checkpoint_freq: save the whole training state (weights, optimisers, replay buffer,
            VecNormalize statistics, RNGs, callback state; safetensors + JSON, see
            :mod:`prm_critic.sb3.resume`) to ``log_dir/resume`` every ``checkpoint_freq`` env steps
            and at the end (needs ``log_dir``).
        resume: continue from the training state in ``log_dir/resume`` when there is one, up to
            ``total_steps`` in all (a larger ``total_steps`` than before extends a finished run).
            The run's configuration must match the checkpoint's (``total_steps`` aside).
        verbose: SB3's verbosity.
        progress_bar: older name of ``progress`` (``None``: not given).
        backend: ``"sb3"`` (stable-baselines3 / sb3-contrib, torch) or ``"sbx"`` (SBX, JAX; the ``sbx``
            extra): SAC, TQC and CrossQ, same env chain, callbacks and
            evaluation; its policy checkpoint is safetensors + JSON too, and so is its training state
            (``checkpoint_freq`` / ``resume``: the JAX train states, optimiser states and PRNG keys).
        torch_threads: torch intra-op CPU threads while training (restored afterwards); ``None``
            keeps torch's setting. Default 1: SAC's [256, 256] networks train fastest on one thread
            (``benchmarks/rl/training_throughput.py``; torch's default of all cores was several
            times slower on busy cores).
        early_stop: ``None`` or ``dict(threshold=0.8, consecutive=2, min_steps=0)``: stop once the
            last ``consecutive`` evaluations (needs ``eval_freq``) are all at or above
            ``threshold`` and the last was taken at ``min_steps`` or later
            (:class:`~prm_critic.sb3.callbacks.StopOnSuccess`). The step of the stop is
            ``model.prm_config["stopped_early_at"]`` (``None``: ran the whole budget). Not part of the
            resume configuration: a stopped run can be extended with another rule or none.
        scale_schedule: ``None`` (the shaping scale stays ``scale``) or ``dict(end=0.0, steps=N)``:
            the scale moves linearly from ``scale`` at step 0 to ``end`` at step ``N`` and stays there
            (:class:`~prm_critic.sb3.callbacks.ShapingScaleSchedule`), for ``shaping="potential"``
            with ``her=True``, whose replay buffer rescales every sampled reward to the scale of the
            moment. Part of the resume configuration.
        demos: ``None``, a demonstrations folder (its successful episodes, :func:`prm_critic.robotics.demos.load_demos`)
            or :class:`~prm_critic.robotics.demos.Demonstrations`, used without a reward model by
            ``demo_buffer`` and / or ``demo_starts`` (at least one). Its record (folder, count, episodes,
            SHA-256) is ``model.prm_config["demos"]``, part of the resume configuration.
        demo_buffer: replay every demonstration through a copy of the training env chain (same shaper) from
            its exact first state and put its transitions into the replay buffer before training (off-policy,
            ``n_envs=1``; :func:`prm_critic.sb3.demos.add_demos_to_buffer`); the buffer is enlarged by their
            steps so they are never overwritten, and HER relabels them like the learner's own.
        demo_starts: the probability in [0, 1] that a training episode starts from a demonstration state
            (:class:`~prm_critic.wrappers.demo_starts.DemoStarts`; evaluation always starts from the env's reset).
    """

    task: "str | TaskSpec"
    total_steps: int
    algo: str = "sac"
    critic: Any = None
    shaping: str | None = None
    scale: float = 1.0
    head: str = "progress"
    her: bool = False
    prune: Mapping[str, Any] | None = None
    seed: int = 0
    n_envs: int = 1
    eval_freq: int | None = None
    eval_episodes: int = 50
    log_dir: str | os.PathLike | None = None
    algo_kwargs: Mapping[str, Any] | None = None
    normalize_obs: bool = False
    callbacks: list | None = None
    progress: bool = True
    checkpoint_freq: int | None = None
    resume: bool = False
    verbose: int = 0
    progress_bar: bool | None = None
    backend: str = DEFAULT_BACKEND
    torch_threads: int | None = 1
    early_stop: Mapping[str, Any] | None = None
    scale_schedule: Mapping[str, Any] | None = None
    demos: Any = None
    demo_buffer: bool = False
    demo_starts: float = 0.0

    def __post_init__(self) -> None:
        checked = functools.partial(object.__setattr__, self)  # frozen: the checked values replace the given
        progress = self.progress
        if self.progress_bar is not None:
            progress = validate.check_flag("progress_bar", self.progress_bar)  # the older name of progress
        checked("progress", validate.check_flag("progress", progress))
        check_algo_backend(self.algo, self.backend)
        algo_class(self.algo, self.backend)  # the algorithm's package is installed
        for name in ("total_steps", "n_envs", "eval_episodes"):
            validate.positive_int(name, getattr(self, name))
        validate.positive_int("eval_freq", self.eval_freq, allow_none=True)
        validate.positive_int("checkpoint_freq", self.checkpoint_freq, allow_none=True)
        if (self.checkpoint_freq is not None or self.resume) and self.log_dir is None:
            raise ValueError(f"log_dir: checkpoint_freq={self.checkpoint_freq!r} / resume={self.resume!r} need a "
                             "log_dir, got None")
        shaping = self.shaping
        validate.check_choice("shaping", shaping, SHAPING_MODES, allow_none=True)
        validate.check_seed("seed", self.seed)
        validate.check_number("scale", self.scale, positive=True)
        prune = check_prune(self.prune)
        checked("prune", prune)
        if shaping == "subgoal" and self.her:
            raise ValueError("shaping='subgoal' with her=True: the subgoal bonus is paid once per episode and HER's "
                             "relabelled goals cannot reproduce that from one transition; use shaping='potential' "
                             "with HER, or her=False")
        critic = self.critic
        if shaping == "subgoal" and critic is None:
            critic = "subgoal"
            checked("critic", critic)
        if (shaping is not None or prune is not None) and critic is None:
            raise ValueError(f"critic: shaping={shaping!r} / prune={prune} need a critic ('subgoal', a path or a "
                             "BaseCritic), got None")
        if critic is not None and shaping is None and prune is None:
            raise ValueError(f"shaping: a critic ({critic_reference(critic)}) was given but shaping=None and "
                             f"prune=None; choose shaping from {list(SHAPING_MODES)}")
        validate.positive_int("torch_threads", self.torch_threads, allow_none=True)
        checked("early_stop", _check_early_stop(self.early_stop, self.eval_freq))
        checked("scale_schedule", _check_scale_schedule(self.scale_schedule, shaping, self.her))
        checked("demos", _check_demos(self))


@contextlib.contextmanager
def _torch_threads(n: int | None):
    """torch's intra-op threads set to ``n`` (``None``: unchanged) while the block runs."""
    if n is None:
        yield
        return
    torch = require("torch")
    prev = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(prev)


def _check_early_stop(early_stop: Mapping[str, Any] | None, eval_freq: int | None) -> dict[str, Any] | None:
    if early_stop is None:
        return None
    if not isinstance(early_stop, Mapping) or not set(early_stop) <= {"threshold", "consecutive", "min_steps"}:
        raise ValueError(f"early_stop: expected None or a dict with keys threshold, consecutive, min_steps, got "
                         f"{early_stop!r}")
    if eval_freq is None:
        raise ValueError("early_stop: stopping on evaluated success needs eval_freq, got eval_freq=None")
    out = {"threshold": 0.8, "consecutive": 2, "min_steps": 0, **early_stop}
    validate.check_prob("early_stop['threshold']", out["threshold"], noun="a success rate")
    validate.positive_int("early_stop['consecutive']", out["consecutive"], unit="evaluations")
    ms = out["min_steps"]
    if isinstance(ms, bool) or not isinstance(ms, int) or ms < 0:
        raise ValueError(f"early_stop['min_steps']: expected an integer >= 0 (env steps), got {ms!r}")
    return out


def _check_demos(c: "TrainPolicyConfig") -> Any:
    """The run's :class:`~prm_critic.robotics.demos.Demonstrations` (``None`` without), after checking that they
    are used and can be."""
    validate.check_flag("demo_buffer", c.demo_buffer)
    starts = validate.check_prob("demo_starts", c.demo_starts)
    if c.demos is None:
        if c.demo_buffer or starts:
            raise ValueError(f"demos: demo_buffer={c.demo_buffer!r} / demo_starts={c.demo_starts!r} need demonstrations "
                             "(a data folder or load_demos(...)), got demos=None")
        return None
    if not (c.demo_buffer or starts):
        raise ValueError("demos: given, but neither demo_buffer=True nor demo_starts > 0 uses them")
    from prm_critic.robotics.demos import Demonstrations, load_demos

    demos = c.demos if isinstance(c.demos, Demonstrations) else load_demos(c.demos)
    if demos.spec.env_id != load_spec(c.task).env_id:
        raise ValueError(f"demos: demonstrations of {demos.spec.env_id!r} ({str(demos.folder)!r}) cannot train "
                         f"{load_spec(c.task).env_id!r}")
    if c.demo_buffer and (c.algo not in OFF_POLICY or c.n_envs != 1):
        raise ValueError(f"demo_buffer: demonstrations go into an off-policy replay buffer of one env, got algo={c.algo!r}, "
                         f"n_envs={c.n_envs}")
    return demos


def _check_scale_schedule(schedule: Mapping[str, Any] | None, shaping: str | None, her: bool) -> dict[str, Any] | None:
    if schedule is None:
        return None
    if not isinstance(schedule, Mapping) or set(schedule) != {"end", "steps"}:
        raise ValueError(f"scale_schedule: expected None or a dict with keys end, steps, got {schedule!r}")
    if shaping != "potential" or not her:
        raise ValueError(f"scale_schedule: rescales stored rewards in the PRM HER replay buffer, so it needs "
                         f"shaping='potential' and her=True, got shaping={shaping!r}, her={her!r}")
    return {"end": validate.check_number("scale_schedule['end']", schedule["end"], low=0.0),
            "steps": validate.positive_int("scale_schedule['steps']", schedule["steps"], unit="env steps")}


def _train(config: TrainPolicyConfig):
    c = config
    spec = load_spec(c.task)  # the one place the task is resolved: everything below gets the TaskSpec
    kw, gamma, fitted = _fit_algo_kwargs(spec, c)
    # load a path critic once and share it across the vector envs
    critic = c.critic
    is_subgoal = isinstance(critic, str) and critic == "subgoal"
    critic_obj = critic if (critic is None or is_subgoal) else resolve_critic(critic, spec)
    env_kwargs = dict(critic=critic_obj, shaping=c.shaping, scale=float(c.scale), gamma=gamma, head=c.head,
                      prune=c.prune)
    if c.demo_starts:
        env_kwargs["demo_starts"] = {"demos": c.demos, "prob": float(c.demo_starts)}
    if c.demo_buffer:  # room for the demonstrations beside the whole run: they are never overwritten
        kw["buffer_size"] = int(kw["buffer_size"]) + len(c.demos.t)
    venv = make_vec_train_env(spec, c.n_envs, seed=c.seed, **env_kwargs)
    if c.normalize_obs:
        VecNormalize = require("stable_baselines3.common.vec_env").VecNormalize
        venv = VecNormalize(venv, norm_obs=True, norm_reward=False, gamma=gamma)

    log_path = Path(c.log_dir) if c.log_dir is not None else None
    model = build_model(c.algo, venv, her=c.her, algo_kwargs=kw, seed=c.seed, verbose=c.verbose,
                        tensorboard_log=None, backend=c.backend, shaped=c.shaping in ("potential", "replace"))
    total_steps = c.total_steps
    starts = getattr(model, "learning_starts", None)  # off-policy only
    if starts is not None and total_steps <= starts:
        venv.close()
        raise ValueError(
            f"total_steps: {total_steps} env steps do not get past learning_starts={starts} of "
            f"{type(model).__name__}: no gradient step would run and the saved policy would be the "
            f"untrained one; expected total_steps > {starts} (or algo_kwargs learning_starts < {total_steps})")
    if log_path is not None:
        _set_logger(model, log_path, resume=c.resume)
    stats, evaluator, bar, cbs = _train_callbacks(spec, c, log_path)
    stopper = None
    if c.early_stop is not None:
        from prm_critic.sb3.callbacks import StopOnSuccess

        stopper = StopOnSuccess(evaluator, **c.early_stop)
        cbs.insert(cbs.index(evaluator) + 1, stopper)  # right after the evaluation it reads
    model.prm_config = {
        "task": spec.name, "algo": c.algo, "backend": c.backend, "critic": critic_reference(critic),
        "critic_sha256": critic_fingerprint(critic_obj), "critic_config_sha256": critic_config_fingerprint(critic_obj),
        "shaping": c.shaping,
        "scale": float(c.scale), "head": c.head, "her": bool(c.her), "prune": c.prune, "gamma": gamma,
        "total_steps": total_steps, "seed": c.seed, "n_envs": c.n_envs, "normalize_obs": bool(c.normalize_obs),
    }
    if c.scale_schedule is not None:  # absent without one: training states written before it still resume
        model.prm_config["scale_schedule"] = dict(c.scale_schedule)
    if c.demos is not None:  # absent without: training states written before demonstrations still resume
        model.prm_config["demos"] = {**c.demos.record(), "buffer": bool(c.demo_buffer),
                                     "starts": float(c.demo_starts)}
    model.prm_resumed_from = []
    if log_path is not None and (c.checkpoint_freq is not None or c.resume):
        _restore_and_checkpoint(model, venv, log_path / "resume", c, kw=kw, fitted=fitted, stats=stats,
                                evaluator=evaluator, cbs=cbs)
    if c.demo_buffer and not model.prm_resumed_from:  # a resumed buffer holds them already
        from prm_critic.sb3.demos import add_demos_to_buffer
        from prm_critic.sb3.envs import make_train_env

        demo_env: dict[str, Any] = {**env_kwargs, "demo_starts": {"demos": c.demos, "prob": 0.0}, "prune": None}
        model.prm_demo_steps = add_demos_to_buffer(model, c.demos, lambda: make_train_env(spec, **demo_env))
    _learn(model, total_steps, cbs, bar)
    model.prm_config["trained_steps"] = int(model.num_timesteps)
    model.prm_config["early_stop"] = c.early_stop
    model.prm_config["stopped_early_at"] = None if stopper is None else stopper.stopped_at
    model.prm_stats = stats
    model.prm_eval = evaluator
    if log_path is not None:
        from prm_critic.sb3.checkpoint import save_policy

        save_policy(log_path / "policy", model, spec=spec, algo=c.algo, her=c.her, algo_kwargs=kw,
                    extra=model.prm_config)
    return model


def _fit_algo_kwargs(spec: TaskSpec, config: TrainPolicyConfig) -> tuple[dict[str, Any], float, list[str]]:
    """The algorithm's constructor arguments for this run (a checked copy of ``algo_kwargs``, with
    ``gamma`` and the budget-fitted ones filled in), ``gamma``, and the names chosen here to fit the
    budget (not part of the resume config)."""
    algo, algo_kwargs, backend = config.algo, config.algo_kwargs, config.backend
    total_steps, her, n_envs = config.total_steps, config.her, config.n_envs
    kw = copy.deepcopy(check_algo_kwargs(algo, algo_kwargs, backend))  # SB3 mutates policy_kwargs in place
    gamma = float(kw.get("gamma", algo_default(algo, "gamma", backend)))
    kw["gamma"] = gamma
    fitted: list[str] = []  # arguments chosen here to fit the budget (not part of the resume config)
    if algo in OFF_POLICY:
        # the replay buffer never needs to hold more than the whole run
        kw.setdefault("buffer_size", int(min(max(total_steps, 1000), 1_000_000)))
        if her:
            ep = spec.max_episode_steps or _registered_max_steps(spec)
            kw.setdefault("learning_starts", max(int(algo_default(algo, "learning_starts", backend)), (ep or 0) + 1))
    else:
        fitted = fit_rollout(kw, algo, total_steps, n_envs)
    return kw, gamma, fitted


def _set_logger(model, log_path: Path, *, resume: bool) -> None:
    """CSV + tensorboard logs of ``model`` under ``log_path/logs`` (a resumed run keeps the CSV written before)."""
    log_path.mkdir(parents=True, exist_ok=True)
    csv_log = log_path / "logs" / "progress.csv"
    if resume and csv_log.exists() and (log_path / "resume" / "latest.json").exists():
        # SB3's CSV logger truncates its file: keep the part written before this resume
        steps_then = json.loads((log_path / "resume" / "latest.json").read_text()).get("steps")
        os.replace(csv_log, csv_log.with_name(f"progress.until-{steps_then}.csv"))
    logger = require("stable_baselines3.common.logger")
    model.set_logger(logger.configure(str(log_path / "logs"), ["csv", "tensorboard"]))


def _train_callbacks(spec: TaskSpec, config: TrainPolicyConfig, log_path: Path | None):
    """The run's callbacks: the PRM stats, the unshaped evaluation (``None`` without ``eval_freq``), the
    progress bar (``None`` without ``progress``) and all of them in order, the user's included."""
    from prm_critic.sb3.callbacks import PRMStatsCallback, UnshapedSuccessEval

    stats = PRMStatsCallback()
    cbs: list[BaseCallback] = [stats]
    evaluator = None
    if config.eval_freq is not None:
        evaluator = UnshapedSuccessEval(spec, eval_freq=config.eval_freq, n_episodes=config.eval_episodes,
                                        csv_path=(log_path / "eval.csv") if log_path else None)
        cbs.append(evaluator)
    if config.scale_schedule is not None:
        from prm_critic.sb3.callbacks import ShapingScaleSchedule

        cbs.append(ShapingScaleSchedule(float(config.scale), **config.scale_schedule))
    cbs.extend(config.callbacks or [])
    bar = None
    if config.progress:
        from prm_critic.sb3.callbacks import TqdmCallback

        bar = TqdmCallback(config.total_steps, desc=f"train-policy {config.algo} {spec.name}")
        cbs.append(bar)
    return stats, evaluator, bar, cbs


def _learn(model, total_steps: int, cbs: list, bar) -> None:
    """Train ``model`` up to ``total_steps`` env steps in all, warning (at :func:`train_policy`'s caller)
    when the algorithm cannot stop there exactly."""
    remaining = total_steps - int(model.num_timesteps)
    if remaining > 0:
        planned = int(model.num_timesteps) + planned_steps(model, remaining)
        if planned != total_steps:
            note = budget_note(model, total_steps, planned)
            model.prm_config["budget_note"] = note
            warnings.warn(note, UserWarning, stacklevel=3)  # train_policy -> _learn: point at train_policy's caller
        if bar is not None:
            bar.total = planned  # the steps this run will train, not fewer
        try:
            model.learn(total_timesteps=remaining, callback=cbs, reset_num_timesteps=not model.prm_resumed_from)
        finally:
            if bar is not None:
                bar.close()  # also when training stops with an error: no bar left behind on the terminal


def _restore_and_checkpoint(model, venv, state_dir: Path, config: TrainPolicyConfig, *, kw, fitted, stats,
                            evaluator, cbs) -> None:
    """Resume ``model`` (and the callbacks' state) from ``state_dir`` when ``config.resume`` asks and a
    training state is there; with ``config.checkpoint_freq`` append the callback that writes the
    training state."""
    seed, resume, checkpoint_freq = config.seed, config.resume, config.checkpoint_freq
    from prm_critic.sb3.checkpoint import json_kwargs
    from prm_critic.sb3.resume import TrainingStateCheckpoint, latest_training_state, load_training_state

    run_config = {**{k: v for k, v in model.prm_config.items() if k != "total_steps"},
                  "algo_kwargs": json_kwargs({k: v for k, v in kw.items()
                                               if k != "buffer_size" and k not in fitted})[0]}
    run_config = json.loads(json.dumps(run_config))
    state = latest_training_state(state_dir) if resume else None
    if state is not None:
        _check_resume_config(state["extra"].get("config", {}), run_config, state_dir)
        _refuse_refresh_resume(cbs, state_dir)
        load_training_state(state_dir, model)
        stats.load_state_dict(state["extra"]["stats"])
        if evaluator is not None and "eval" in state["extra"]:
            evaluator.load_state_dict(state["extra"]["eval"])
        model.prm_resumed_from = [*state["extra"].get("resumed_from", []), int(model.num_timesteps)]
        venv.seed(seed + int(model.num_timesteps))  # a fresh episode, not a replay of the first one
    if checkpoint_freq is not None:
        def extra():
            out = {"config": run_config, "stats": stats.state_dict(), "resumed_from": model.prm_resumed_from}
            if evaluator is not None:
                out["eval"] = evaluator.state_dict()
            return out

        cbs.append(TrainingStateCheckpoint(state_dir, save_freq=checkpoint_freq, extra_fn=extra))


def fit_rollout(kw: dict[str, Any], algo: str, total_steps: int, n_envs: int) -> list[str]:
    """Fit an on-policy algorithm's rollout to the budget, in place; return the arguments set here.

    PPO trains in whole rollouts of ``n_steps * n_envs`` env steps, so ``learn(total_steps)`` runs
    ``ceil(total_steps / (n_steps * n_envs))`` of them. When ``n_steps`` is not given it is set so
    that the rollouts add up to ``total_steps`` exactly: ``total_steps / n_envs`` when that is at most
    the default (2048), else the largest divisor of it between 512 and 2048. ``batch_size`` (not
    given) becomes the largest divisor of ``n_steps * n_envs`` up to the default (64), so that no
    mini-batch is truncated. When no such ``n_steps`` exists (``total_steps``
    not a multiple of ``n_envs``, or no divisor in range) nothing is changed and :func:`train_policy`
    states the number of steps that will be trained."""
    fitted: list[str] = []
    if "n_steps" in kw or total_steps % n_envs:
        return fitted
    default = int(algo_default(algo, "n_steps"))
    per_env = total_steps // n_envs
    n_steps: int | None
    if per_env <= default:
        n_steps = per_env
    else:
        n_steps = next((d for d in range(default, default // 4 - 1, -1) if per_env % d == 0), None)
    if n_steps is None or n_steps * n_envs < 2:  # SB3 needs a rollout of 2 steps or more
        return fitted
    kw["n_steps"] = n_steps
    fitted.append("n_steps")
    rollout, batch = n_steps * n_envs, int(algo_default(algo, "batch_size"))
    if "batch_size" not in kw and rollout % batch:
        # the largest divisor of the rollout up to the default: no truncated last mini-batch
        kw["batch_size"] = next(d for d in range(min(batch, rollout), 0, -1) if rollout % d == 0)
        fitted.append("batch_size")
    return fitted


def _chunk(model) -> int | None:
    """Env steps the algorithm collects between two checks of the budget (``None``: per episode)."""
    n_envs = int(model.n_envs)
    if hasattr(model, "n_steps") and hasattr(model, "rollout_buffer"):  # on-policy
        return int(model.n_steps) * n_envs
    tf = getattr(model, "train_freq", None)
    if tf is None:
        return n_envs
    unit = getattr(getattr(tf, "unit", None), "value", "step")
    return int(tf.frequency) * n_envs if unit == "step" else None


def planned_steps(model, remaining: int) -> int:
    """Env steps ``model.learn(remaining)`` will run: ``remaining`` rounded up to whole rollouts
    (on-policy: ``n_steps * n_envs``; off-policy: ``train_freq * n_envs``)."""
    chunk = _chunk(model)
    if chunk is None:  # train_freq in episodes: rounded up to whole episodes, not known in advance
        return remaining
    return -(-remaining // chunk) * chunk


def budget_note(model, total_steps: int, planned: int) -> str:
    name = type(model).__name__
    chunk = _chunk(model)
    if hasattr(model, "rollout_buffer"):
        how = f"whole rollouts of n_steps * n_envs = {model.n_steps} * {model.n_envs} = {chunk} env steps"
        fix = f"make total_steps a multiple of {chunk} or set algo_kwargs n_steps"
    else:
        how = f"steps of train_freq * n_envs = {chunk} env steps"
        fix = f"make total_steps a multiple of {chunk}"
    return (f"total_steps={total_steps}: {name} trains in {how}, so this run trains {planned} env steps "
            f"({planned - total_steps} more than asked); {fix}")


def _refuse_refresh_resume(cbs, where: Path) -> None:
    """A critic refreshed during training (:class:`~prm_critic.sb3.refresh.CriticRefreshCallback`) is
    not part of the training state (its weights, optimiser and episode window change as it trains):
    resuming would go on with the critic as it was loaded, a different potential than the one the
    run was trained under. Refused, not guessed."""
    from prm_critic.sb3.refresh import CriticRefreshCallback

    for cb in cbs:
        inner = getattr(cb, "callbacks", [cb])  # a CallbackList holds its callbacks
        if any(isinstance(c, CriticRefreshCallback) for c in inner):
            raise ValueError(f"callbacks: a CriticRefreshCallback cannot resume the training state in {str(where)!r}: "
                             "the refreshed critic, its optimiser and episode window are not part of it, so the run "
                             "would go on under the critic as loaded; expected resume=False (or another log_dir) "
                             "for a run with critic refresh")


def _check_resume_config(saved: Mapping[str, Any], now: Mapping[str, Any], where: Path) -> None:
    saved = {"backend": "sb3", **saved}  # training states written before there was a backend are sb3's
    if "critic_config_sha256" not in saved and now.get("critic_config_sha256") is not None:
        # written before the critic's architecture and layout were hashed: its weights hash still checked
        warnings.warn(f"critic_config_sha256: the training state in {str(where)!r} records only the critic's weights "
                      "hash, so a critic re-saved with the same weights but another architecture or layout is not "
                      "noticed on this resume", UserWarning, stacklevel=3)
        saved["critic_config_sha256"] = now["critic_config_sha256"]
    for key in sorted(set(saved) | set(now)):
        if saved.get(key) != now.get(key):
            raise ValueError(f"{key}: the training state in {str(where)!r} was written with {key}={saved.get(key)!r}, "
                             f"this call has {now.get(key)!r}; resume with the same settings or use another log_dir")


def predict(model, obs, deterministic: bool = True):
    """``model.predict`` on a raw observation (single or batched), normalising it first with the
    model's ``VecNormalize`` statistics when it was trained with ``normalize_obs=True``.

    An observation that does not fit the policy's observation space (another key set, another width:
    an observation of another task) is refused naming the policy's task, the key and both shapes.
    An observation of another task with the same shapes cannot be told from its values: load the
    policy with that task's env (:func:`~prm_critic.sb3.load_policy` checks the env's id).
    """
    _check_obs(model, obs)
    getter = getattr(model, "get_vec_normalize_env", None)  # any object with .predict works too
    vn = getter() if getter is not None else None
    if vn is not None:
        obs = vn.normalize_obs(obs)
    return model.predict(obs, deterministic=deterministic)


def _check_obs(model, obs) -> None:
    """Refuse an observation that does not fit ``model.observation_space`` (single or batched)."""
    import numpy as np

    space: Any = getattr(model, "observation_space", None)
    shapes = getattr(space, "spaces", None)
    task = (getattr(model, "prm_checkpoint", None) or {}).get("task") or getattr(model, "prm_config", {}).get("task")
    whose = f"the policy (task {task!r})" if task else "the policy"
    if isinstance(shapes, Mapping):
        if not isinstance(obs, Mapping) or set(obs) != set(shapes):
            keys = sorted(obs) if isinstance(obs, Mapping) else type(obs).__name__
            raise ValueError(f"obs: {whose} takes a dict with keys {sorted(shapes)}, got {keys}; is it an observation "
                             "of another task?")
        items: list[tuple[str, tuple, tuple]] = [(f"obs[{k!r}]", np.shape(obs[k]), sub.shape) for k, sub in shapes.items()]
    elif getattr(space, "shape", None):
        items = [("obs", np.shape(obs), space.shape)]
    else:
        return
    for name, got, want in items:
        if want is not None and tuple(got[len(got) - len(want):]) != tuple(want) or len(got) > len(want) + 1:
            raise ValueError(f"{name}: {whose} takes shape {tuple(want)} (or a batch of it), got {tuple(got)}; is it "
                             "an observation of another task?")


def _registered_max_steps(spec: TaskSpec) -> int | None:
    gym = require("gymnasium")
    from prm_critic.robotics.make import register_robotics_envs

    register_robotics_envs()
    try:
        return gym.spec(spec.env_id).max_episode_steps
    except Exception:  # pragma: no cover - unknown id is reported by make_env
        return None
