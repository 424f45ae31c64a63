"""Private helpers shared by the PRM env wrappers: the shapers' shared argument checks (through
:mod:`prm_critic.validate`), layout resolution, the critic/env match check (task and layout), and
a critic caller with an optional deadline. Observations are flattened by the layout's
:class:`~prm_critic.robotics.layout.ObsFlattener`.
"""

from __future__ import annotations

import functools
import inspect
import math
import threading
import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from prm_critic import validate
from prm_critic.critic import BaseCritic, OneRowCritic, RowsCritic, fast_path
# ObsFlattener: the layout's flattener, imported from here by the wrappers
from prm_critic.robotics.layout import CriticInputLayout, ObsFlattener  # noqa: F401
from prm_critic.robotics.spec import SpecError, TaskSpec, list_builtin_specs, load_spec

if TYPE_CHECKING:
    from prm_critic.robotics.subgoals import SubgoalEvaluator

__all__: list[str] = []

HEADS = ("progress", "success")
MODES = ("potential", "subgoal", "replace")
FALLBACKS = ("zero",)
#: added to the shapers' ``gamma`` message
GAMMA_HINT = " equal to the learner's discount (e.g. model.gamma)"


def check_critic_arg(critic: Any) -> BaseCritic:
    if not isinstance(critic, BaseCritic):
        raise TypeError(f"critic: expected a prm_critic.BaseCritic over flat critic inputs (B, D), got {type(critic).__name__}")
    return critic


def resolve_layout(critic: BaseCritic, layout: CriticInputLayout | Mapping | None) -> CriticInputLayout:
    """``layout`` argument, else the critic's declared ``critic_info().layout``, else a clear error."""
    if layout is None:
        layout = critic.critic_info().layout
    if layout is None:
        raise ValueError(
            f"layout: the critic ({type(critic).__name__}) carries no layout (critic_info().layout is None); "
            "pass layout=CriticInputLayout.from_space(spec, env.observation_space)"
        )
    if isinstance(layout, Mapping):
        layout = CriticInputLayout.from_dict(layout)
    if not isinstance(layout, CriticInputLayout):
        raise TypeError(f"layout: expected a CriticInputLayout or its to_dict(), got {type(layout).__name__}")
    obs_dim = critic.obs_dim
    if obs_dim is not None and int(obs_dim) != layout.obs_dim:
        raise ValueError(
            f"critic: obs_dim {obs_dim} does not match the layout's obs_dim {layout.obs_dim} "
            f"(keys {dict(layout.sizes)}); the critic was built for another observation layout"
        )
    return layout


def check_layout_space(layout: CriticInputLayout, space: Any, where: str = "env") -> None:
    """Raise a clear error when the env's observation space does not match ``layout``."""
    import gymnasium as gym

    if isinstance(space, gym.spaces.Dict):
        for k in layout.keys:
            if k not in space.spaces:
                raise ValueError(
                    f"layout: key {k!r} is not in the {where} observation space; expected keys from {sorted(space.spaces)}"
                )
            # the ignore: shape is None only for non-array sub-spaces (Text, Graph); int() raises then, as before
            size = int(np.prod(space.spaces[k].shape))  # type: ignore[arg-type]
            if size != layout.sizes[k]:
                raise ValueError(
                    f"layout: key {k!r} has size {layout.sizes[k]} in the critic layout but {size} in the {where} "
                    f"observation space (shape {space.spaces[k].shape})"
                )
    elif isinstance(space, gym.spaces.Box):
        if layout.keys != ("obs",):
            raise ValueError(
                f"layout: the {where} observation space is a Box, so the layout must be ['obs'], got {list(layout.keys)}"
            )
        size = int(np.prod(space.shape))
        if size != layout.obs_dim:
            raise ValueError(
                f"layout: obs_dim {layout.obs_dim} does not match the {where} observation of shape {space.shape} "
                f"(size {size})"
            )
    else:
        raise TypeError(f"env: expected a Box or Dict observation space, got {type(space).__name__}")


def check_critic_space(critic: BaseCritic, layout: CriticInputLayout, space: Any, env_id: str | None,
                       where: str = "env") -> None:
    """:func:`check_layout_space`, whose error also names the critic's task and the env's when the
    critic declares one (another task's critic usually has other input widths)."""
    try:
        check_layout_space(layout, space, where=where)
    except ValueError as exc:
        task, critic_env, _ = critic_task(critic)
        if task is None and critic_env is None:
            raise
        made = f"task {task!r}" + (f" (env id {critic_env!r})" if critic_env not in (None, task) else "")
        env = f"env {env_id!r}" if env_id is not None else "an env without a registered id"
        raise ValueError(f"{exc}; the critic was made for {made}, but the {where} is {env}") from exc


def _fields(layout: CriticInputLayout) -> list[tuple[str, int]]:
    return [(k, layout.sizes[k]) for k in layout.keys]


def first_layout_difference(got: CriticInputLayout, expected: CriticInputLayout) -> str | None:
    """``None`` when both layouts have the same fields (names, order, widths), else a sentence
    naming the first field that differs."""
    a, b = _fields(got), _fields(expected)
    for i in range(max(len(a), len(b))):
        fa = a[i] if i < len(a) else None
        fb = b[i] if i < len(b) else None
        if fa != fb:
            show = lambda f: "nothing" if f is None else f"{f[0]!r} (width {f[1]})"  # noqa: E731
            return f"field {i} is {show(fa)} where {show(fb)} was expected"
    return None


@functools.lru_cache(maxsize=None)
def _builtin_specs_for(env_id: str) -> tuple[TaskSpec, ...]:
    out = []
    for name in list_builtin_specs():
        try:
            s = load_spec(name)
        except SpecError:  # pragma: no cover - the built-in specs are tested
            continue
        if s.env_id == env_id:
            out.append(s)
    return tuple(out)


def critic_task(critic: BaseCritic) -> tuple[str | None, str | None, TaskSpec | None]:
    """``(task name, env id, task spec)`` the critic was made for, each ``None`` when unknown.

    Read from the critic's declaration, :meth:`~prm_critic.critic.BaseCritic.critic_info`: its
    ``spec`` (a :class:`TaskSpec`, or its ``to_dict()`` as checkpoints store it), ``task`` and
    ``env_id``. A bare built-in task name gives its env id.
    """
    info = critic.critic_info()
    spec = info.spec
    if not isinstance(spec, TaskSpec):
        doc, spec = spec, None
        if isinstance(doc, Mapping):
            try:
                spec = load_spec(dict(doc))
            except SpecError as exc:
                raise ValueError(f"critic: the declared spec (meta['spec']) is not a valid task spec ({exc})") from exc
    task = info.task or (spec.name if spec is not None else None)
    env_id = info.env_id or (spec.env_id if spec is not None else None)
    if env_id is None and isinstance(task, str) and task in list_builtin_specs():
        spec = load_spec(task)
        env_id = spec.env_id
    return task, env_id, spec


#: the kinds of env a shaper can wrap (:func:`prm_critic.validate.env_kind`), and the shaper of each
#: (named by the refusal of another kind)
SINGLE_ENV, GYM_VECTOR_ENV, SB3_VEC_ENV = validate.SINGLE_ENV, validate.GYM_VECTOR_ENV, validate.SB3_VEC_ENV
env_kind = validate.env_kind
SHAPER_FOR = {
    SINGLE_ENV: "prm_critic.wrappers.PRMRewardShaper",
    GYM_VECTOR_ENV: "prm_critic.wrappers.GymVectorPRMRewardShaper",
    SB3_VEC_ENV: "prm_critic.sb3.SB3VecPRMRewardShaper",
}


def refuse_env_kind(env: Any, *, name: str, expected: str) -> validate.ArgumentError:
    """The error for an ``env`` that is not of the ``expected`` kind: names what it is and the shaper
    that wraps that kind (raise it where the shaper's own ``isinstance`` check failed)."""
    kind = env_kind(env)
    got = type(env).__name__ + (f", a {kind}" if kind is not None else "")
    hint = ""
    if kind is not None and kind != expected:
        hint = f"; wrap it with {SHAPER_FOR[kind]}"
        if kind == SINGLE_ENV:
            hint += (", or vectorise it first: DummyVecEnv([lambda: env])" if expected == SB3_VEC_ENV
                     else ", or make a vector env with gym.make_vec(...)")
    return validate.ArgumentError(f"{name}: expected a {expected} for {SHAPER_FOR[expected].rsplit('.', 1)[1]}, "
                                  f"got {got}{hint}")


def env_id_of(env: Any) -> str | None:
    """The gymnasium id of ``env`` (``env.unwrapped.spec.id``), or ``None`` for an unregistered env."""
    for e in (getattr(env, "unwrapped", None), env):
        env_id = getattr(getattr(e, "spec", None), "id", None)
        if isinstance(env_id, str) and env_id:
            return env_id
    return None


def check_critic_env(critic: BaseCritic, layout: CriticInputLayout, env_id: str | None, space: Any, *,
                     allow_task_mismatch: bool, explicit_layout: bool, stacklevel: int = 3) -> None:
    """Refuse a critic made for another task than the env's, or a layout that is not the one the
    critic's task spec gives on this env.

    * Task: the critic's env id (:func:`critic_task`) must equal ``env_id`` unless
      ``allow_task_mismatch`` (a deliberate transfer). Unknown on either side: not checked.
    * Layout: the fields (names, order, widths) of ``layout`` must equal
      ``CriticInputLayout.from_space(critic's spec, space)``; without a critic spec, those of the
      env's built-in spec when it has the same keys; an explicit ``layout=`` must also equal the
      critic's own layout (``critic_info().layout``). The error names the first
      differing field.
    """
    validate.check_flag("allow_task_mismatch", allow_task_mismatch)
    task, critic_env, spec = critic_task(critic)
    if critic_env is None and not allow_task_mismatch:
        what = "declares no task" if task is None else f"declares task {task!r} but no env id"
        # stacklevel: the warning points at the code that built the wrapper
        warnings.warn(
            f"critic: the {type(critic).__name__} {what} (critic_info()), so the task/env check was skipped; "
            "declare it by overriding critic_info() to return CriticInfo(task=..., env_id=...), or pass "
            "allow_task_mismatch=True when any task is meant", UserWarning, stacklevel=stacklevel)
    if critic_env is not None and env_id is not None and critic_env != env_id and not allow_task_mismatch:
        raise ValueError(
            f"critic: made for task {task!r} (env id {critic_env!r}), but the env is {env_id!r}; its scores "
            f"do not carry over to another task. Use a critic for {env_id!r}, or pass "
            "allow_task_mismatch=True for a deliberate transfer"
        )
    if explicit_layout:
        own = resolve_layout(critic, None) if _has_own_layout(critic) else None
        if own is not None:
            diff = first_layout_difference(layout, own)
            if diff is not None:
                raise ValueError(
                    f"layout: the layout passed does not match the critic's own layout: {diff} "
                    f"(passed {_fields(layout)}, critic {_fields(own)})"
                )
    source = None
    if spec is not None:
        source = f"its task spec {spec.name!r}"
    elif env_id is not None:
        same = [s for s in _builtin_specs_for(env_id) if set(s.critic_input) == set(layout.keys)]
        if len({s.critic_input for s in same}) == 1:
            spec, source = same[0], f"the built-in spec {same[0].name!r} of {env_id!r}"
    if spec is None:
        return
    try:
        expected = CriticInputLayout.from_space(spec, space)
    except SpecError as exc:
        raise ValueError(f"layout: {source} does not fit this env's observation space ({exc})") from exc
    diff = first_layout_difference(layout, expected)
    if diff is not None:
        raise ValueError(
            f"layout: the critic's layout is not the one {source} gives on this env: {diff} "
            f"(critic {_fields(layout)}, expected {_fields(expected)}); the critic would read the wrong "
            "part of every observation"
        )


def _has_own_layout(critic: BaseCritic) -> bool:
    return critic.critic_info().layout is not None


def resolve_spec(critic: BaseCritic, spec: Any) -> TaskSpec | None:
    if spec is not None:
        return load_spec(spec)
    s = critic.critic_info().spec
    return s if isinstance(s, TaskSpec) else None


@dataclass(frozen=True, kw_only=True)
class ShaperConfig:
    """The settings of :class:`~prm_critic.wrappers.PRMRewardShaper` and its vector twins
    (:class:`~prm_critic.wrappers.GymVectorPRMRewardShaper`, :class:`~prm_critic.sb3.SB3VecPRMRewardShaper`):
    pass ``config=ShaperConfig(...)`` or these fields as keyword arguments. Checked once, here; checked
    values replace the given ones (``gamma``, ``scale``, ``subgoal_bonus`` and ``deadline_s`` become
    floats). What needs the env (its observation space, its id, its maze) is checked by the shaper.

    Attributes:
        critic: a :class:`~prm_critic.critic.BaseCritic` over flat critic inputs ``(B, D)``.
        gamma: REQUIRED, the learner's discount, in (0, 1].
        mode: ``"potential"``, ``"subgoal"`` or ``"replace"``.
        scale: multiplier of the shaping term (finite).
        head: critic head used as ``Phi``: ``"progress"`` or ``"success"``.
        layout: :class:`CriticInputLayout` (or its dict); default the critic's declared
            ``critic_info().layout``. What it resolves to is ``critic_layout``.
        spec: task spec (name, path, dict or ``TaskSpec``); default ``critic_info().spec`` if any.
            What it resolves to (or ``None``) is ``task_spec``.
        subgoal_bonus: bonus per newly reached subgoal (``mode="subgoal"``).
        deadline_s: per-call critic deadline in seconds (``None``: call synchronously).
        fallback: what a late or failed call gives; only ``"zero"`` (no shaping) is supported.
        allow_task_mismatch: accept a critic made for another task than the env's (a deliberate
            transfer); by default that is an error.
        info_subgoals: also evaluate the spec's subgoals on every step and report them in
            ``info["prm_subgoals"]`` (needs a spec with subgoals). Off by default: it costs a
            subgoal evaluation per step that only fills the info dict.
    """

    critic: BaseCritic
    gamma: float
    mode: str = "potential"
    scale: float = 1.0
    head: str = "progress"
    layout: CriticInputLayout | Mapping | None = None
    spec: Any = None
    subgoal_bonus: float = 1.0
    deadline_s: float | None = None
    fallback: str = "zero"
    allow_task_mismatch: bool = False
    info_subgoals: bool = False
    critic_layout: CriticInputLayout = field(init=False, repr=False)
    task_spec: TaskSpec | None = field(init=False, repr=False)

    def __post_init__(self) -> None:
        checked = functools.partial(object.__setattr__, self)  # frozen: the checked values replace the given
        checked("info_subgoals", validate.check_flag("info_subgoals", self.info_subgoals))
        critic = check_critic_arg(self.critic)
        checked("gamma", validate.check_gamma("gamma", self.gamma, hint=GAMMA_HINT))
        checked("mode", validate.check_choice("mode", self.mode, MODES))
        checked("head", validate.check_choice("head", self.head, HEADS))
        checked("scale", validate.check_number("scale", self.scale))
        checked("subgoal_bonus", validate.check_number("subgoal_bonus", self.subgoal_bonus))
        checked("deadline_s", validate.check_number("deadline_s", self.deadline_s, positive=True, allow_none=True))
        checked("fallback", validate.check_choice("fallback", self.fallback, FALLBACKS))
        checked("critic_layout", resolve_layout(critic, self.layout))
        checked("allow_task_mismatch", validate.check_flag("allow_task_mismatch", self.allow_task_mismatch))
        checked("task_spec", resolve_spec(critic, self.spec))


def setup_shaper(obj: ShaperBase, critic: BaseCritic | None, config: ShaperConfig | None, settings: Mapping[str, Any],
                 *, space: Any, env_id: str | None, where: str = "env", env: Any = None) -> None:
    """The construction shared by :class:`PRMRewardShaper` and its vector twins: set ``obj.config``
    (``config``, or a :class:`ShaperConfig` of ``critic`` and the keyword ``settings``), check the
    observation ``space`` (one env's) against the layout and the critic against the env, attach the
    subgoal evaluator and the critic caller (``obj._caller``)."""
    if config is None or critic is not None:
        settings = {"critic": critic, **settings}
    obj.config = config = validate.config_from(ShaperConfig, config, **settings)
    obj.scale = config.scale
    check_not_shaped(obj, where=where)
    check_critic_space(config.critic, config.critic_layout, space, env_id, where=where)
    check_critic_env(config.critic, config.critic_layout, env_id, space, allow_task_mismatch=config.allow_task_mismatch,
                     explicit_layout=config.layout is not None, stacklevel=4)
    check_make_kwargs(config.task_spec, env, stacklevel=4)
    attach_subgoal_evaluator(obj, env)
    obj._caller = CriticCaller(config.critic, config.head, config.deadline_s)


def _inner_envs(env: Any) -> list:
    """The envs ``env`` wraps directly: a gymnasium wrapper's ``env``, an SB3 ``VecEnvWrapper``'s
    ``venv``, a ``DummyVecEnv``'s ``envs`` (a subprocess vector env's envs cannot be seen)."""
    own = getattr(env, "__dict__", {})  # the env's own attributes: no lookup forwarded down the chain
    envs = own.get("envs")
    return [own[name] for name in ("env", "venv") if name in own] + (list(envs) if isinstance(envs, (list, tuple)) else [])


def shapers_in(env: Any) -> list["ShaperBase"]:
    """Every PRM reward shaper in ``env``'s wrapper chain, ``env`` included (gymnasium wrappers, SB3
    ``VecEnvWrapper`` s and the envs of a ``DummyVecEnv``; a subprocess vector env's envs cannot be seen)."""
    todo, found, seen = [env], [], 0
    while todo and seen < 10_000:
        e = todo.pop()
        seen += 1
        if isinstance(e, ShaperBase):
            found.append(e)
        todo.extend(_inner_envs(e))
    return found


def check_not_shaped(obj: Any, *, where: str = "env") -> None:
    """Refuse a shaper around an env that is already shaped (anywhere down its wrapper chain): the
    second shaper would shape the shaped reward again and report it as ``prm_original_reward``."""
    for inner in _inner_envs(obj):
        for env in shapers_in(inner)[:1]:
            raise validate.ArgumentError(
                f"{where}: already wrapped by a {type(env).__name__} (gamma={env.gamma}, mode={env.mode!r}, critic "
                f"{type(env.critic).__name__}); a second {type(obj).__name__} (gamma={obj.gamma}, critic "
                f"{type(obj.critic).__name__}) would shape the shaped reward again and report it as "
                "info['prm_original_reward']; expected one shaper per env (give the env before shaping, or combine "
                "the critics into one)")


#: make-kwargs mismatches already warned about in this process: (spec, key, env value)
_WARNED_MAKE_KWARGS: set = set()


def _plain(v: Any) -> Any:
    return [_plain(x) for x in v] if isinstance(v, (list, tuple)) else v


def check_make_kwargs(spec: TaskSpec | None, env: Any, *, stacklevel: int = 3) -> None:
    """Warn (once per mismatch) when ``env`` was made without its task spec's ``make_kwargs`` (plain
    ``gym.make(env_id)``: a PointMaze that keeps going after its goal, a kitchen with other tasks),
    naming both values. An env not made by ``gym.make`` records no kwargs and is not checked."""
    if spec is None or not spec.make_kwargs or env is None:
        return
    base = getattr(env, "unwrapped", None)
    env_spec = getattr(base, "spec", None)
    made = getattr(env_spec, "kwargs", None)
    if not isinstance(made, Mapping):
        return
    params: Mapping[str, inspect.Parameter]
    try:
        params = inspect.signature(type(base)).parameters
    except (TypeError, ValueError):
        params = {}
    diffs = []
    for key, want in spec.make_kwargs.items():
        if key in made:
            got = made[key]
        elif key in params and params[key].default is not inspect.Parameter.empty:
            got = params[key].default
        else:
            got = "(not given)"
        if _plain(got) != _plain(want) and (spec.name, key, repr(got)) not in _WARNED_MAKE_KWARGS:
            _WARNED_MAKE_KWARGS.add((spec.name, key, repr(got)))
            diffs.append(f"{key}={got!r} in the env, {want!r} in the spec")
    if diffs:
        warnings.warn(
            f"env: {getattr(env_spec, 'id', '?')!r} was made without the make_kwargs of task spec {spec.name!r} ("
            + "; ".join(diffs) + "); the critic's scores and the spec's success rule assume the spec's. Make it with "
            f"prm_critic.robotics.make_env({spec.name!r}), or gym.make(env_id, **spec.make_kwargs)",
            UserWarning, stacklevel=stacklevel)


class CallerStats:
    """``stats`` and ``last_error`` of a wrapper's critic caller (``self._caller``)."""

    _caller: CriticCaller

    @property
    def stats(self) -> dict[str, int]:
        """Critic-call counters: ``calls``, ``fallbacks``, ``timeouts``, ``errors``, ``busy``."""
        return dict(self._caller.stats)

    @property
    def last_error(self) -> BaseException | None:
        """The last exception raised by the critic under a deadline (``None`` if none)."""
        return self._caller.last_error


class ShaperBase(CallerStats):
    """What the reward shapers (single env, gymnasium vector, SB3 VecEnv) have in common: their
    settings ``config`` (a :class:`ShaperConfig`), the ``scale`` paid now (``config.scale`` until
    :meth:`set_scale`), the subgoal ``evaluator`` (set by :func:`setup_shaper`) and :class:`CallerStats`.
    ``critic``, ``gamma``, ``mode`` and ``layout`` (the resolved ``config.critic_layout``) read the config."""

    config: ShaperConfig
    scale: float
    evaluator: SubgoalEvaluator | None
    _eval_subgoals: bool

    @property
    def critic(self) -> BaseCritic:
        return self.config.critic

    @property
    def gamma(self) -> float:
        return self.config.gamma

    @property
    def mode(self) -> str:
        return self.config.mode

    @property
    def layout(self) -> CriticInputLayout:
        return self.config.critic_layout

    def set_scale(self, scale: float) -> None:
        """Pay ``scale * F`` from the next step on (a finite number >= 0; the constructor's ``scale``
        must be > 0, a schedule may end at 0). A replay buffer that stores shaped rewards must rescale
        them to match (:class:`~prm_critic.sb3.her.PRMHerReplayBuffer` does, through
        :class:`~prm_critic.sb3.callbacks.ShapingScaleSchedule`)."""
        self.scale = validate.check_number("scale", scale, low=0.0)


def attach_subgoal_evaluator(obj: ShaperBase, env: Any = None) -> None:
    """Set ``obj.evaluator`` (for ``obj.config.task_spec``) and ``obj._eval_subgoals`` for a shaper.

    The critic's own evaluator is reused when it evaluates the same spec on inputs of the same width;
    otherwise one is built (``maze_path`` subgoals need the maze of ``env``: a single env, not a
    vector one). ``mode="subgoal"`` and ``info_subgoals=True`` without an evaluator are refused.
    """
    c = obj.config
    obj.evaluator = None
    ts = c.task_spec
    if ts is not None and ts.subgoals:
        info = c.critic.critic_info()
        ev = info.evaluator
        if ev is not None and info.spec is ts and ev.layout.obs_dim == c.critic_layout.obs_dim:
            obj.evaluator = ev
        else:
            needs_maze = any(s.kind == "maze_path" for s in ts.subgoals)
            if not needs_maze or env is not None:
                from prm_critic.robotics.subgoals import MazeGeometry, SubgoalEvaluator

                obj.evaluator = SubgoalEvaluator(ts, c.critic_layout, MazeGeometry.from_env(env) if needs_maze else None)
    for what, wanted in (("mode 'subgoal'", c.mode == "subgoal"), ("info_subgoals=True", c.info_subgoals)):
        if wanted and obj.evaluator is None:
            raise ValueError(
                f"spec: {what} needs a task spec with [[subgoals]] (critic.spec or spec=...; maze_path "
                f"subgoals in a vector env need a SubgoalCritic), got "
                f"{None if ts is None else ts.name + ('' if ts.subgoals else ' without subgoals')}"
            )
    obj._eval_subgoals = c.mode == "subgoal" or c.info_subgoals

def goal_keys(spec: TaskSpec | None, space: Any) -> tuple[str, str] | None:
    """``(achieved_key, desired_key)`` for a goal-conditioned observation space, else ``None``."""
    import gymnasium as gym

    if spec is not None and spec.goal_keys is not None:
        return spec.goal_keys
    if isinstance(space, gym.spaces.Dict) and "achieved_goal" in space.spaces and "desired_goal" in space.spaces:
        return ("achieved_goal", "desired_goal")
    return None


# The deadline worker is hand-built rather than a one-thread concurrent.futures.ThreadPoolExecutor:
# `python -m benchmarks.wrappers_overhead --rounds 4 --steps 200 --vec-steps 20 --cold-hot-steps 300
# --out docs/wrappers_overhead.md` (2 cores at load 8, constant critic, deadline_s=1, both interleaved)
# measured the executor's hand-over (wrapper p50) at 52.7 against this worker's 44.1 µs per step on
# PointMaze_UMaze-v3 and 7.52 against 6.88 ms on FetchPush-v4 (docs/wrappers_overhead.md; an earlier run
# of the same command: 37.4 against 19.4 µs, 6.98 against 6.64 ms); the stepping thread's CPU time
# differed either way. The executor's thread is also joined at interpreter exit, so a critic call that
# never returns would keep the process from exiting; this worker's thread is a daemon.
class _Worker:
    """One daemon thread that runs one call at a time, handed over with two bare locks (no future,
    no queue): ``submit`` then ``wait(timeout)``; a call still running after its timeout keeps the
    worker ``busy`` until :meth:`poll` sees it finished (its result is dropped)."""

    def __init__(self) -> None:
        self._req = threading.Lock()
        self._req.acquire()
        self._done = threading.Lock()
        self._done.acquire()
        self._fn: Any = None
        self._arg: Any = None
        self.result: Any = None
        self.error: BaseException | None = None
        self.busy = False
        self._thread = threading.Thread(target=self._loop, name="prm-critic", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while True:
            self._req.acquire()
            fn = self._fn
            if fn is None:
                return
            try:
                self.result, self.error = fn(self._arg), None
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                self.result, self.error = None, exc
            self._done.release()

    def submit(self, fn, arg) -> None:
        self._fn, self._arg = fn, arg
        self.busy = True
        self._req.release()

    def wait(self, timeout: float) -> bool:
        if self._done.acquire(timeout=timeout):
            self.busy = False
            return True
        return False

    def poll(self) -> bool:
        """True when idle (a late call that has finished since is dropped)."""
        if self.busy and self._done.acquire(blocking=False):
            self.busy = False
        return not self.busy

    def close(self) -> None:
        self._fn = None
        try:
            self._req.release()  # wakes the thread (now, or after the call it is running): it exits
        except RuntimeError:  # already released: the thread has not picked up the last call yet
            pass


def _takes_check(fn: Any) -> bool:
    """``fn`` is callable and takes the ``check`` keyword."""
    if not callable(fn):
        return False
    try:
        return "check" in inspect.signature(fn).parameters
    except (TypeError, ValueError):  # pragma: no cover - builtins without a signature
        return False


class CriticCaller:
    """Calls the critic for ``head`` either directly or, with ``deadline_s``, on one worker thread
    with a timeout. ``__call__`` (a batch ``(B, D)``) returns the ``(B,)`` float64 scores and
    :meth:`one` (one row ``(D,)``) a float, or ``None`` when the call fell back (timeout, exception,
    non-finite output, or the worker still busy with a late call). Without a deadline, errors
    propagate.

    :meth:`one` uses the critic's batch-1 path ``score_one(x) -> (progress, success)`` when it has
    one (an :class:`~prm_critic.onnx.OnnxCritic`: preallocated, bound buffers), else
    ``score(x[None])``; ``__call__`` uses ``score_rows(x) -> (B, 2)`` when the critic has it, else
    ``score(x)``. Rows given to either are validated by the caller (:class:`ObsFlattener`); a critic
    whose fast path takes ``check=`` is told not to validate them again.
    """

    def __init__(self, critic: BaseCritic, head: str, deadline_s: float | None):
        self.critic = critic
        self.head = head
        self.deadline_s = deadline_s
        self.stats = {"calls": 0, "fallbacks": 0, "timeouts": 0, "errors": 0, "busy": 0}
        self.last_error: BaseException | None = None
        #: every head of the last call: ``{head: (B,) float64}`` after ``__call__``, ``{head: float}``
        #: after :meth:`one`; ``None`` after a fallback
        self.last_heads: dict[str, Any] | None = None
        self._worker: _Worker | None = None
        # the critic's fast paths, only where they give score's result (not one inherited past an overridden
        # score); one that takes ``check=`` is called with check=False (its rows are checked already)
        self._score_one = fast_path(critic, "score_one") if isinstance(critic, OneRowCritic) else None
        self._score_rows = fast_path(critic, "score_rows") if isinstance(critic, RowsCritic) else None
        self._one_check, self._rows_check = _takes_check(self._score_one), _takes_check(self._score_rows)
        self._col = HEADS.index(head)

    def _run(self, x: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        if self._score_rows is not None:
            out = np.asarray(self._score_rows(x, check=False) if self._rows_check else self._score_rows(x), np.float64)
            if out.shape != (x.shape[0], 2):
                raise ValueError(f"critic: score_rows returned shape {out.shape}, expected ({x.shape[0]}, 2)")
            v = out[:, self._col]
            heads = {"progress": out[:, 0], "success": out[:, 1]}
        else:
            scores = self.critic.score(x)
            v = np.asarray(scores.get(self.head), dtype=np.float64).reshape(-1)
            if v.shape != (x.shape[0],):
                raise ValueError(f"critic: head {self.head!r} returned shape {v.shape}, expected ({x.shape[0]},)")
            heads = {h: np.asarray(scores.get(h), dtype=np.float64).reshape(-1) for h in HEADS}
        if not math.isfinite(v.sum()) and not np.isfinite(v).all():
            raise ValueError(f"critic: head {self.head!r} returned non-finite scores {v}")
        return v, heads

    def _run_one(self, x: np.ndarray) -> tuple[float, dict[str, float]]:
        if self._score_one is None:
            vb, hb = self._run(x[None, :])
            return float(vb[0]), {h: float(a[0]) for h, a in hb.items()}
        progress, success = self._score_one(x, check=False) if self._one_check else self._score_one(x)
        heads = {"progress": float(progress), "success": float(success)}
        v = heads[self.head]
        if not math.isfinite(v):
            raise ValueError(f"critic: head {self.head!r} returned a non-finite score {v}")
        return v, heads

    def direct(self, x: np.ndarray) -> np.ndarray:
        """Synchronous call without deadline or fallback (used offline, e.g. HER relabelling)."""
        return self._run(x)[0]

    def __call__(self, x: np.ndarray) -> np.ndarray | None:
        """Scores ``(B,)`` of ``self.head`` or ``None`` (fell back); ``self.last_heads`` then holds
        every head of this call (``None`` after a fallback)."""
        if self.deadline_s is None:
            self.stats["calls"] += 1
            self.last_heads = None
            out, self.last_heads = self._run(x)
            return out
        return self._call(self._run, x)

    def one(self, x: np.ndarray) -> float | None:
        """Score of ``self.head`` for one validated critic input ``x`` ``(D,)``, or ``None`` (fell
        back); ``self.last_heads`` then holds ``{head: float}`` (``None`` after a fallback)."""
        if self.deadline_s is not None:
            return self._call(self._run_one, x)
        self.stats["calls"] += 1
        self.last_heads = None
        out, self.last_heads = self._run_one(x)
        return out

    def _call(self, run, x):
        """``run(x)`` on the worker within ``deadline_s``, or ``None`` (fell back)."""
        self.stats["calls"] += 1
        self.last_heads = None
        w = self._worker
        if w is None:
            w = self._worker = _Worker()
        if not w.poll():
            # a late call is still running: never queue behind it, never wait for it
            self.stats["busy"] += 1
            self.stats["fallbacks"] += 1
            return None
        w.submit(run, x)
        if not w.wait(self.deadline_s):
            self.stats["timeouts"] += 1
            self.stats["fallbacks"] += 1
            return None
        if w.error is not None:
            if not isinstance(w.error, Exception):  # KeyboardInterrupt, SystemExit: not a critic failure
                raise w.error
            self.last_error = w.error
            w.error = None
            self.stats["errors"] += 1
            self.stats["fallbacks"] += 1
            return None
        out, self.last_heads = w.result
        w.result = None
        return out

    def close(self) -> None:
        if self._worker is not None:
            self._worker.close()
            self._worker = None


def find_max_episode_steps(env: Any) -> int | None:
    """The episode step limit of ``env``: a ``TimeLimit`` in the wrapper chain, else ``env.spec``."""
    e = env
    while e is not None:
        mes = getattr(e, "_max_episode_steps", None)
        if isinstance(mes, int) and mes > 0:
            return mes
        e = getattr(e, "env", None)
    spec = getattr(env, "spec", None)
    mes = getattr(spec, "max_episode_steps", None)
    return int(mes) if isinstance(mes, int) and mes > 0 else None
