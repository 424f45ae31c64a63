"""Declarative task specs: ordered subgoals, success signal, goal keys, critic input layout.

A spec is a small TOML file (or a dict). The built-in ones live in the project's ``envs/specs/``
folder and ship inside the wheel. A spec for your own env is about ten lines::

    [task]
    name = "FetchPush-v4"
    env_id = "FetchPush-v4"
    critic_input = ["observation", "achieved_goal", "desired_goal"]
    goal_keys = ["achieved_goal", "desired_goal"]
    success = { source = "info", key = "is_success", rule = "final" }
    controller = { name = "fetch_push" }

    [[subgoals]]
    name = "gripper_near_object"
    a = "observation[0:3]"
    b = "observation[3:6]"
    threshold = 0.05
    scale = 0.3

    [[subgoals]]
    name = "object_at_goal"
    a = "achieved_goal"
    b = "desired_goal"
    threshold = 0.05
    scale = 0.3

Subgoal ``kind = "distance"`` (default) holds when ``||a - b|| < threshold``; inside the current
subgoal, progress grows as ``clip(1 - ||a - b|| / scale, 0, 1)``. ``a`` and ``b`` are expressions
``key`` or ``key[start:stop]`` over the keys named in ``critic_input``. Other kinds
(``maze_path``) are evaluated by :mod:`prm_critic.robotics.subgoals`.

An *approach point* replaces ``b`` by the point ``offset`` beyond ``b`` on the line from
``behind`` through ``b``::

    b* = b + offset * (b - behind) / ||b - behind||        (b* = b where b == behind)

e.g. ``behind = "desired_goal"``, ``offset = 0.06`` is the spot behind the block from which a push
moves it towards the goal. A pusher touching the block sits there for the whole push, so the
subgoal keeps holding while the block moves (with ``b`` = the block itself the gripper-block
distance straddles the threshold mid-push and the potential drops).

Unknown or misspelled fields raise :class:`SpecError` naming the field (with a suggestion).
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Mapping

try:
    import tomllib  # Python >= 3.11
except ImportError:  # pragma: no cover - Python 3.10: the `tomli` backport, a declared dependency there
    try:
        import tomli as tomllib
    except ImportError as exc:
        raise ImportError(
            "prm_critic.robotics reads TOML task specs and needs `tomllib` (Python >= 3.11) or the "
            "`tomli` backport on Python 3.10, which is missing: pip install \"tomli>=2\""
        ) from exc

__all__ = ["SpecError", "SubgoalSpec", "SuccessSpec", "TaskSpec", "load_spec", "list_builtin_specs", "ObsExpr"]


class SpecError(ValueError):
    """A task spec is invalid (unknown field, bad value, unknown task)."""


_EXPR = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_ ]*?)\s*(?:\[\s*(-?\d*)\s*:\s*(-?\d*)\s*\])?\s*$")


@dataclass(frozen=True)
class ObsExpr:
    """A parsed ``key`` or ``key[start:stop]`` expression over the critic-input keys."""

    key: str
    start: int | None = None
    stop: int | None = None

    @classmethod
    def parse(cls, text: str, where: str) -> "ObsExpr":
        m = _EXPR.match(text) if isinstance(text, str) else None
        if not m:
            raise SpecError(f"{where}: expected an expression like 'observation[0:3]' or 'desired_goal', got {text!r}")
        key, a, b = m.group(1), m.group(2), m.group(3)
        return cls(key, int(a) if a else None, int(b) if b else None)

    def __str__(self) -> str:
        if self.start is None and self.stop is None:
            return self.key
        return f"{self.key}[{'' if self.start is None else self.start}:{'' if self.stop is None else self.stop}]"


def _check_fields(data: Mapping[str, Any], allowed: set[str], required: set[str], where: str) -> None:
    if not isinstance(data, Mapping):
        raise SpecError(f"{where}: expected a table of fields, got {type(data).__name__} {data!r}")
    for k in data:
        if k not in allowed:
            close = difflib.get_close_matches(k, sorted(allowed), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f"; expected one of {sorted(allowed)}"
            raise SpecError(f"{where}: unknown field {k!r}{hint}")
    for k in sorted(required):
        if k not in data:
            raise SpecError(f"{where}: missing required field {k!r}")


def _num(v: Any, where: str, *, positive: bool = False) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise SpecError(f"{where}: expected a number, got {v!r}")
    if positive and not v > 0:
        raise SpecError(f"{where}: expected a number > 0, got {v!r}")
    return float(v)


SUBGOAL_KINDS = ("distance", "maze_path")


@dataclass(frozen=True)
class SubgoalSpec:
    """One ordered subgoal.

    Attributes:
        name: identifier reported in ``info["prm_subgoals"]``.
        kind: ``"distance"`` or ``"maze_path"``.
        a, b: the two points compared (``||a - b||``), as :class:`ObsExpr`.
        threshold: the subgoal holds when the distance is below it.
        scale: distance over which progress inside the subgoal goes from 0 to 1.
        behind, offset: optional approach point (``distance`` subgoals only): ``b`` is replaced by
            ``b + offset * (b - behind) / ||b - behind||`` (see the module docstring).
    """

    name: str
    a: ObsExpr
    b: ObsExpr
    threshold: float
    scale: float
    kind: str = "distance"
    behind: ObsExpr | None = None
    offset: float = 0.0

    _FIELDS = frozenset({"name", "kind", "a", "b", "threshold", "scale", "behind", "offset"})

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str) -> "SubgoalSpec":
        _check_fields(data, set(cls._FIELDS), {"name", "a", "b", "threshold"}, where)
        kind = data.get("kind", "distance")
        if kind not in SUBGOAL_KINDS:
            raise SpecError(f"{where}.kind: expected one of {list(SUBGOAL_KINDS)}, got {kind!r}")
        threshold = _num(data["threshold"], f"{where}.threshold", positive=True)
        scale = _num(data.get("scale", 10 * threshold), f"{where}.scale", positive=True)
        name = data["name"]
        if not isinstance(name, str) or not name:
            raise SpecError(f"{where}.name: expected a non-empty string, got {name!r}")
        behind, offset = data.get("behind"), 0.0
        if ("behind" in data) != ("offset" in data):
            have, need = ("behind", "offset") if "behind" in data else ("offset", "behind")
            raise SpecError(f"{where}.{need}: an approach point needs both 'behind' and 'offset'; "
                            f"got {have} = {data[have]!r} without {need}")
        if behind is not None:
            if kind != "distance":
                raise SpecError(f"{where}.behind: approach points apply to kind 'distance' subgoals, got kind {kind!r}")
            behind = ObsExpr.parse(behind, f"{where}.behind")
            offset = _num(data["offset"], f"{where}.offset", positive=True)
        return cls(
            name=name,
            a=ObsExpr.parse(data["a"], f"{where}.a"),
            b=ObsExpr.parse(data["b"], f"{where}.b"),
            threshold=threshold,
            scale=scale,
            kind=kind,
            behind=behind,
            offset=offset,
        )

    def to_dict(self) -> dict[str, Any]:
        d = {"name": self.name, "kind": self.kind, "a": str(self.a), "b": str(self.b),
             "threshold": self.threshold, "scale": self.scale}
        if self.behind is not None:
            d.update(behind=str(self.behind), offset=self.offset)
        return d


SUCCESS_SOURCES = ("info", "subgoals", "kitchen_tasks")
SUCCESS_RULES = ("final", "any")


@dataclass(frozen=True)
class SuccessSpec:
    """Where an episode's success comes from.

    ``source="info"``: ``info[key]`` (Fetch ``is_success``, PointMaze ``success``);
    ``source="subgoals"``: all subgoals hold (for envs without a success flag, e.g. Pusher);
    ``source="kitchen_tasks"``: FrankaKitchen's ``tasks_to_complete`` is empty.
    ``rule="final"``: the episode succeeded if the last step succeeded; ``"any"``: if any step did.
    """

    source: str = "info"
    key: str | None = None
    rule: str = "final"

    _FIELDS = frozenset({"source", "key", "rule"})

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str) -> "SuccessSpec":
        _check_fields(data, set(cls._FIELDS), {"source"}, where)
        src = data["source"]
        if src not in SUCCESS_SOURCES:
            raise SpecError(f"{where}.source: expected one of {list(SUCCESS_SOURCES)}, got {src!r}")
        rule = data.get("rule", "final")
        if rule not in SUCCESS_RULES:
            raise SpecError(f"{where}.rule: expected one of {list(SUCCESS_RULES)}, got {rule!r}")
        key = data.get("key")
        if src == "info" and not isinstance(key, str):
            raise SpecError(f"{where}.key: source 'info' needs the info key as a string, got {key!r}")
        return cls(source=src, key=key, rule=rule)

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "key": self.key, "rule": self.rule}


_TASK_FIELDS = {
    "name", "env_id", "make_kwargs", "max_episode_steps", "critic_input", "goal_keys",
    "flatten_goals", "success", "controller", "description", "progress",
}

#: how subgoal progress combines the subgoals (``prm_critic.robotics.subgoals`` module docstring)
PROGRESS_MODES = ("ladder", "mean")


@dataclass(frozen=True)
class TaskSpec:
    """A robot task: how to build the env, what the critic sees, subgoals and success.

    Attributes:
        name: spec name (``load_spec(name)``), usually the env id.
        env_id: the gymnasium id passed to ``gymnasium.make``.
        make_kwargs: extra keyword arguments for ``gymnasium.make``.
        max_episode_steps: TimeLimit override (``None``: the registered default).
        critic_input: observation keys, in order, concatenated into the critic input vector.
            For a plain ``Box`` observation space use ``["obs"]``.
        goal_keys: ``(achieved_key, desired_key)`` for goal-conditioned envs, else ``None``.
        flatten_goals: for dict-of-dict goals (FrankaKitchen): the task names, in order, whose goal
            vectors are concatenated into flat ``achieved_goal`` / ``desired_goal`` arrays.
        success: :class:`SuccessSpec`.
        subgoals: ordered :class:`SubgoalSpec` tuple.
        controller: behaviour controller: ``{"name": ..., **params}``.
        progress: how subgoal progress combines the subgoals: ``"ladder"`` (default: the highest
            subgoal that holds plus closeness to the next one) or ``"mean"`` (mean closeness over
            all subgoals, 1 for those that hold; no stage to fall back from).
    """

    name: str
    env_id: str
    critic_input: tuple[str, ...]
    success: SuccessSpec
    subgoals: tuple[SubgoalSpec, ...]
    make_kwargs: dict[str, Any] = field(default_factory=dict)
    max_episode_steps: int | None = None
    goal_keys: tuple[str, str] | None = None
    flatten_goals: tuple[str, ...] | None = None
    controller: dict[str, Any] = field(default_factory=lambda: {"name": "random"})
    description: str = ""
    progress: str = "ladder"

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "spec") -> "TaskSpec":
        _check_fields(data, {"task", "subgoals"}, {"task"}, where)
        t = data["task"]
        w = f"{where}.task"
        _check_fields(t, _TASK_FIELDS, {"name", "env_id", "critic_input", "success"}, w)
        crit = t["critic_input"]
        if not isinstance(crit, list) or not crit or not all(isinstance(k, str) for k in crit):
            raise SpecError(f"{w}.critic_input: expected a non-empty list of observation keys, got {crit!r}")
        goal_keys = t.get("goal_keys")
        if goal_keys is not None:
            if not (isinstance(goal_keys, list) and len(goal_keys) == 2 and all(isinstance(k, str) for k in goal_keys)):
                raise SpecError(f"{w}.goal_keys: expected [achieved_key, desired_key], got {goal_keys!r}")
            goal_keys = tuple(goal_keys)
        flat = t.get("flatten_goals")
        if flat is not None:
            if not (isinstance(flat, list) and flat and all(isinstance(k, str) for k in flat)):
                raise SpecError(f"{w}.flatten_goals: expected a non-empty list of task names, got {flat!r}")
            flat = tuple(flat)
        mes = t.get("max_episode_steps")
        if mes is not None and (isinstance(mes, bool) or not isinstance(mes, int) or mes <= 0):
            raise SpecError(f"{w}.max_episode_steps: expected a positive integer, got {mes!r}")
        mk = t.get("make_kwargs", {})
        if not isinstance(mk, Mapping):
            raise SpecError(f"{w}.make_kwargs: expected a table, got {mk!r}")
        ctrl = t.get("controller", {"name": "random"})
        if not isinstance(ctrl, Mapping) or not isinstance(ctrl.get("name"), str):
            raise SpecError(f"{w}.controller: expected a table with a 'name' string, got {ctrl!r}")
        raw_sub = data.get("subgoals", [])
        if not isinstance(raw_sub, list):
            raise SpecError(f"{where}.subgoals: expected a list of tables ([[subgoals]]), got {raw_sub!r}")
        subgoals = tuple(SubgoalSpec.from_dict(s, f"{where}.subgoals[{i}]") for i, s in enumerate(raw_sub))
        names = [s.name for s in subgoals]
        if len(set(names)) != len(names):
            raise SpecError(f"{where}.subgoals: subgoal names must be unique, got {names}")
        for i, s in enumerate(subgoals):
            for side in ("a", "b", "behind"):
                e = getattr(s, side)
                if e is not None and e.key not in crit:
                    raise SpecError(
                        f"{where}.subgoals[{i}].{side}: key {e.key!r} is not in critic_input {crit}"
                    )
        progress = t.get("progress", "ladder")
        if progress not in PROGRESS_MODES:
            raise SpecError(f"{w}.progress: expected one of {list(PROGRESS_MODES)}, got {progress!r}")
        success = SuccessSpec.from_dict(t["success"], f"{w}.success")
        if success.source == "subgoals" and not subgoals:
            raise SpecError(f"{w}.success: source 'subgoals' needs at least one [[subgoals]] entry")
        return cls(
            name=t["name"], env_id=t["env_id"], critic_input=tuple(crit), success=success,
            subgoals=subgoals, make_kwargs=dict(mk), max_episode_steps=mes, goal_keys=goal_keys,
            flatten_goals=flat, controller=dict(ctrl), description=t.get("description", ""), progress=progress,
        )

    def to_dict(self) -> dict[str, Any]:
        task: dict[str, Any] = {
            "name": self.name, "env_id": self.env_id, "critic_input": list(self.critic_input),
            "success": self.success.to_dict(), "make_kwargs": dict(self.make_kwargs),
            "controller": dict(self.controller), "description": self.description,
        }
        if self.max_episode_steps is not None:
            task["max_episode_steps"] = self.max_episode_steps
        if self.goal_keys is not None:
            task["goal_keys"] = list(self.goal_keys)
        if self.flatten_goals is not None:
            task["flatten_goals"] = list(self.flatten_goals)
        if self.progress != "ladder":  # the default is left out: older readers keep loading these dicts
            task["progress"] = self.progress
        task["success"] = {k: v for k, v in task["success"].items() if v is not None}
        return {"task": task, "subgoals": [s.to_dict() for s in self.subgoals]}


def _specs_dir() -> Path:
    """Folder of the built-in specs: inside the wheel (``prm_critic/_specs``) or, in a source
    checkout with an editable install, the project's ``envs/specs`` data folder."""
    packaged = resources.files("prm_critic") / "_specs"
    if packaged.is_dir():
        return Path(str(packaged))
    source = Path(__file__).resolve().parents[2] / "envs" / "specs"
    if source.is_dir():
        return source
    raise SpecError("built-in specs not found: the prm-critic installation is incomplete (no prm_critic/_specs)")


def _spec_files() -> dict[str, Path]:
    out = {}
    for p in sorted(_specs_dir().glob("*.toml")):
        with open(p, "rb") as f:
            name = tomllib.load(f).get("task", {}).get("name", p.stem)
        out[name] = p
    return out


def list_builtin_specs() -> list[str]:
    """Names of the built-in task specs."""
    return sorted(_spec_files())


def load_spec(spec: "str | Path | Mapping[str, Any] | TaskSpec") -> TaskSpec:
    """Load a task spec from a built-in name, a TOML path, a dict or a :class:`TaskSpec`."""
    if isinstance(spec, TaskSpec):
        return spec
    if isinstance(spec, Mapping):
        return TaskSpec.from_dict(spec)
    p = Path(spec)
    if p.suffix == ".toml" or p.exists():
        if not p.is_file():
            raise SpecError(f"spec: file {str(p)!r} does not exist")
        try:
            with open(p, "rb") as f:
                data = tomllib.load(f)
        except tomllib.TOMLDecodeError as exc:
            raise SpecError(f"spec: {str(p)!r} is not valid TOML: {exc}") from exc
        return TaskSpec.from_dict(data, where=p.name)
    files = _spec_files()
    if str(spec) not in files:
        close = difflib.get_close_matches(str(spec), list(files), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise SpecError(f"task: unknown task {str(spec)!r}; expected one of {sorted(files)}{hint}")
    with open(files[str(spec)], "rb") as f:
        return TaskSpec.from_dict(tomllib.load(f), where=files[str(spec)].name)
