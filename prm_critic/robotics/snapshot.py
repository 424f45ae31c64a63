"""Exact snapshots of a MuJoCo task env: simulator state plus the task's Python state.

A snapshot of state ``s_t`` is two parts::

    sim = mj_getState(model, data, mjSTATE_INTEGRATION)      # float64 (S,): time, qpos, qvel, act,
                                                              # warmstart, ctrl, applied forces, mocap
    py  = {"kind": hook.name, "elapsed_steps": [TimeLimit._elapsed_steps, ...], **hook.capture(env)}

``restore`` writes ``sim`` back with ``mj_setState``, re-installs the Python state with the hook,
then runs ``mj_forward`` (and the hook's ``after_forward``, if any), so that the same actions replay to bit-identical observations.

**Snapshot hooks.** MuJoCo's state does not hold a task's Python-side state (its goal, its RNGs, its
task lists), and a restore that forgets any of it continues *another* task without an error. So every
env needs a :class:`SnapshotHook` that captures and restores that state, looked up by
:func:`snapshot_hook_for`: an exact env id first, then the longest matching id prefix
(``"AntMaze_*"``), then the unwrapped env's class (most specific first). An env no hook matches is
refused with :class:`SnapshotUnsupportedError`, which names :func:`register_snapshot_hook`; it is never
snapshotted with a guessed default. Built-in hooks (gymnasium-robotics 1.4):

* ``fetch`` (``FetchPush-*``, ``FetchReach-*``, ``FetchSlide-*``, ``FetchPickAndPlace-*``): ``goal``,
  ``np_random`` (used only at reset) and ``weld_pose``, the pose ``[x, y, z, qw, qx, qy, qz]`` that
  ``data.xpos`` / ``data.xquat`` hold for each body welded to a mocap. The next action moves the mocap
  relative to that pose (``reset_mocap2body_xpos``), and it is not a function of the state:
  FetchPickAndPlace (free gripper fingers) calls no ``mj_forward`` after its ``mj_step``, so these
  derived fields are those of the start of the step's last substep, not of the current ``qpos``.
  Recomputed by ``mj_forward`` they would move the mocap target and the replay would drift from its
  first step (6e-4 in the observation after one step, the grasp lost later); the hook's
  ``after_forward`` writes the stored pose back. A Fetch snapshot without ``weld_pose`` is refused where
  the env needs it (FetchPickAndPlace) and accepted where its step ends with ``mj_forward`` (FetchPush,
  FetchReach, FetchSlide: blocked gripper);
* ``pointmaze`` (``PointMaze_*``, every map) and ``antmaze`` (``AntMaze_*``, every map): ``goal``,
  ``reset_pos``, the maze env's and the inner point / ant env's ``np_random`` bit-generator states, and
  the target marker (``update_target_site_pos()`` writes ``model.site_pos``: the marker lives in the
  model, not in the state);
* ``kitchen`` (``FrankaKitchen-*``): ``tasks_to_complete``, ``episode_task_completions``, ``goal`` and
  the robot env's ``np_random`` (observation noise is drawn from it on every step) and the robot's
  ``_last_robot_qpos`` (the last *noisy* observed joint positions: the next action is a velocity added
  to them, a D4RL quirk that makes the kitchen non-Markov in the MuJoCo state alone);
* ``mujoco`` (``Pusher-*``, ``Reacher-*``): a gymnasium MuJoCo env whose only Python state is ``np_random``. Register
  :data:`MUJOCO_RNG_HOOK` for another env of that kind (``register_snapshot_hook("Hopper-v5",
  MUJOCO_RNG_HOOK)``) once you have checked that nothing else in it changes between steps;

A hook that misses part of the state is caught by :meth:`Snapshotter.check_replay` (restore, replay the
recorded action, compare with the recorded next observation), which the Monte-Carlo labeller runs on
every labelled state.

``copy.deepcopy`` of these envs is unreliable (MuJoCo handles, renderers): snapshots never use it.
A snapshot is serialisable to a float64 array and a JSON string (:meth:`Snapshot.to_arrays`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import numpy as np

from prm_critic._optional import require

__all__ = [
    "Snapshot", "Snapshotter", "SnapshotHook", "SnapshotUnsupportedError", "ReplayMismatchError",
    "register_snapshot_hook", "unregister_snapshot_hook", "snapshot_hook_for", "MUJOCO_RNG_HOOK",
]


class SnapshotUnsupportedError(ValueError):
    """No snapshot hook knows this env's Python-side task state (or its hook refuses it)."""


class ReplayMismatchError(ValueError):
    """A restored snapshot did not replay the recorded step (the env's snapshot hook misses state)."""


@dataclass
class Snapshot:
    """One state of a task env.

    Attributes:
        sim: ``(S,)`` float64, ``mj_getState(..., mjSTATE_INTEGRATION)``.
        py: JSON-serialisable dict of the task's Python state (``kind`` = the hook's name).
    """

    sim: np.ndarray
    py: dict[str, Any] = field(default_factory=dict)

    def to_arrays(self) -> tuple[np.ndarray, str]:
        """``(sim float64 (S,), py JSON string)``."""
        return np.asarray(self.sim, dtype=np.float64), json.dumps(self.py, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_arrays(cls, sim: np.ndarray, py: "str | bytes | dict") -> "Snapshot":
        """Inverse of :meth:`to_arrays` (``py`` may be the JSON string or the dict)."""
        if isinstance(py, bytes):
            py = py.decode("utf-8")
        if isinstance(py, str):
            try:
                py = json.loads(py)
            except json.JSONDecodeError as exc:
                raise ValueError(f"py: expected a JSON object string, got {py[:80]!r}: {exc}") from exc
        if not isinstance(py, dict):
            raise ValueError(f"py: expected a JSON object, got {type(py).__name__}")
        sim = np.asarray(sim, dtype=np.float64)
        if sim.ndim != 1:
            raise ValueError(f"sim: expected a 1-D float64 state vector, got shape {sim.shape}")
        return cls(sim=sim, py=py)


# ---------------------------------------------------------------------------------------- hooks
@dataclass(frozen=True)
class SnapshotHook:
    """How to capture and restore the Python-side task state of one env family.

    Args:
        name: recorded in every snapshot as ``py["kind"]``; a snapshot restores only into an env whose
            hook has the same name.
        capture: ``capture(base) -> dict``, ``base = env.unwrapped``; the dict must be JSON-serialisable
            (use ``rng.bit_generator.state`` for a NumPy Generator, ``.tolist()`` for arrays).
        restore: ``restore(base, state)``: re-install what ``capture`` returned. It runs after
            ``mj_setState`` and before ``mj_forward``, so it may also write the model (marker sites).
        refuse: when set, the env is refused with this reason instead (a family whose restore is known
            to be inexact).
        after_forward: optional ``after_forward(base, state)``, run after ``mj_forward`` to write back
            derived data the env's next step reads but ``mj_forward`` recomputes differently (Fetch's
            mocap-welded gripper pose).
    """

    name: str
    capture: Optional[Callable[[Any], dict]] = None
    restore: Optional[Callable[[Any, dict], None]] = None
    refuse: Optional[str] = None
    after_forward: Optional[Callable[[Any, dict], None]] = None

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"name: expected a non-empty string, got {self.name!r}")
        if self.refuse is None:
            for what in ("capture", "restore"):
                if not callable(getattr(self, what)):
                    raise ValueError(f"{what}: expected a callable for hook {self.name!r}, got {getattr(self, what)!r}")
        elif not isinstance(self.refuse, str) or not self.refuse:
            raise ValueError(f"refuse: expected a non-empty reason string, got {self.refuse!r}")


_HOOKS: dict[Any, SnapshotHook] = {}


def _check_key(key) -> None:
    if isinstance(key, type):
        return
    if not isinstance(key, str) or not key or key == "*" or "*" in key[:-1]:
        raise ValueError(
            f"key: expected an env id ('MyEnv-v0'), an id prefix ending in '*' ('MyEnv*') or the unwrapped "
            f"env class, got {key!r}"
        )


def register_snapshot_hook(key, hook: Optional[SnapshotHook] = None, *, capture=None, restore=None,
                           name: Optional[str] = None, replace: bool = False) -> SnapshotHook:
    """Tell the snapshotter how to capture and restore an env's Python-side task state.

    Args:
        key: an exact env id (``"MyMaze-v0"``), an id prefix ending in ``*`` (``"MyMaze*"``) or the
            unwrapped env's class (matches subclasses too).
        hook: a :class:`SnapshotHook`; or give ``capture`` and ``restore`` (and optionally ``name``,
            default: the key).
        replace: allow replacing a hook already registered under ``key``.

    Returns:
        the registered hook.

    Example::

        def capture(base):
            return {"goal": base.goal.tolist(), "rng": base.np_random.bit_generator.state}

        def restore(base, state):
            base.goal = np.asarray(state["goal"], dtype=np.float64)
            base.np_random.bit_generator.state = state["rng"]

        register_snapshot_hook("MyReach-v0", capture=capture, restore=restore)
    """
    _check_key(key)
    if hook is None:
        default = key.__name__ if isinstance(key, type) else key.rstrip("*")
        hook = SnapshotHook(name=name or default, capture=capture, restore=restore)
    elif not isinstance(hook, SnapshotHook):
        raise ValueError(f"hook: expected a SnapshotHook, got {type(hook).__name__}")
    elif capture is not None or restore is not None or name is not None:
        raise ValueError("hook: give either a SnapshotHook or capture/restore/name, not both")
    if key in _HOOKS and not replace:
        raise ValueError(f"key: a snapshot hook ({_HOOKS[key].name!r}) is already registered for {key!r}; "
                         f"pass replace=True to replace it")
    _HOOKS[key] = hook
    return hook


def unregister_snapshot_hook(key) -> SnapshotHook:
    """Remove and return the hook registered under ``key`` (a ``KeyError`` naming it if none)."""
    if key not in _HOOKS:
        raise KeyError(f"key: no snapshot hook is registered for {key!r}")
    return _HOOKS.pop(key)


def _env_id(env) -> Optional[str]:
    for e in (env.unwrapped, env):
        spec = getattr(e, "spec", None)
        if spec is not None and getattr(spec, "id", None):
            return str(spec.id)
    return None


def snapshot_hook_for(env) -> SnapshotHook:
    """The hook for ``env`` (exact id, longest id prefix, then unwrapped class); refuses unknown envs.

    Raises:
        SnapshotUnsupportedError: no hook matches, or the matching hook refuses the env.
    """
    env_id = _env_id(env)
    base = env.unwrapped
    hook = None
    if env_id is not None:
        hook = _HOOKS.get(env_id)
        if hook is None:
            prefixes = [k for k in _HOOKS if isinstance(k, str) and k.endswith("*") and env_id.startswith(k[:-1])]
            if prefixes:
                hook = _HOOKS[max(prefixes, key=len)]
    if hook is None:
        for cls in type(base).__mro__:
            if cls in _HOOKS:
                hook = _HOOKS[cls]
                break
    what = f"env {env_id!r} (unwrapped class {type(base).__name__})"
    if hook is None:
        known = sorted(str(k) if isinstance(k, str) else k.__name__ for k in _HOOKS)
        raise SnapshotUnsupportedError(
            f"{what}: no snapshot hook knows its Python-side task state (goal, RNGs, task counters), so a "
            f"restored snapshot could continue with another task; write one and register it with "
            f"prm_critic.robotics.snapshot.register_snapshot_hook({env_id or type(base).__name__!r}, "
            f"capture=..., restore=...) (registered: {known})"
        )
    if hook.refuse is not None:
        raise SnapshotUnsupportedError(f"{what}: snapshots are refused: {hook.refuse}")
    return hook


def _rng_state(rng) -> dict[str, Any]:
    return rng.bit_generator.state


def _set_rng_state(rng, state: dict[str, Any]) -> None:
    rng.bit_generator.state = state


def _arr(x) -> list:
    return np.asarray(x, dtype=np.float64).tolist()


# --- Fetch (goal; np_random is used only at reset; the pose of the mocap-welded gripper)
def _mocap_welded_bodies(b) -> list[int]:
    """Ids of the bodies welded to a mocap body (whose pose the next Fetch action reads)."""
    import mujoco

    m = b.model
    out = []
    for i in range(int(m.neq)):
        if int(m.eq_type[i]) != int(mujoco.mjtEq.mjEQ_WELD):
            continue
        a, c = int(m.eq_obj1id[i]), int(m.eq_obj2id[i])
        out.append(c if int(m.body_mocapid[a]) != -1 else a)
    return out


def _fetch_capture(b) -> dict:
    d = b.data
    pose = [np.r_[d.xpos[i], d.xquat[i]].astype(np.float64).tolist() for i in _mocap_welded_bodies(b)]
    return {"goal": _arr(b.goal), "rng": _rng_state(b.np_random), "weld_pose": pose}


def _fetch_restore(b, py: dict) -> None:
    b.goal = np.asarray(py["goal"], dtype=np.float64)
    _set_rng_state(b.np_random, py["rng"])


def _fetch_after_forward(b, py: dict) -> None:
    """Write the stored poses of the mocap-welded bodies back (after ``mj_forward``)."""
    welded = _mocap_welded_bodies(b)
    pose = py.get("weld_pose")
    if pose is None:
        if getattr(b, "block_gripper", False):
            return  # the env's step ends with mj_forward: the recomputed pose is the stored one
        raise ValueError(
            f"snapshot.py['weld_pose']: missing; {type(b).__name__} moves its mocap relative to "
            f"the gripper pose of the last substep, which restore cannot recompute exactly; "
            f"re-collect the data (`prm-critic collect`) so that its snapshots record that pose"
        )
    arr = np.asarray(pose, dtype=np.float64)
    if arr.shape != (len(welded), 7):
        raise ValueError(
            f"snapshot.py['weld_pose']: expected shape ({len(welded)}, 7) (pos + quat of each mocap-welded "
            f"body), got {arr.shape}"
        )
    for row, i in zip(arr, welded):
        b.data.xpos[i] = row[:3]
        b.data.xquat[i] = row[3:]


FETCH_HOOK = SnapshotHook("fetch", _fetch_capture, _fetch_restore, after_forward=_fetch_after_forward)
for _k in ("FetchPush*", "FetchReach*", "FetchSlide*", "FetchPickAndPlace*"):
    register_snapshot_hook(_k, FETCH_HOOK)


# --- PointMaze / AntMaze (every map): goal, reset position, two RNGs, target marker (in the model)
def _maze_capture(inner: str):
    def capture(b) -> dict:
        return {"goal": _arr(b.goal), "reset_pos": _arr(b.reset_pos), "rng": _rng_state(b.np_random),
                f"{inner}_rng": _rng_state(getattr(b, f"{inner}_env").np_random)}
    return capture


def _maze_restore(inner: str):
    def restore(b, py: dict) -> None:
        b.goal = np.asarray(py["goal"], dtype=np.float64)
        b.reset_pos = np.asarray(py["reset_pos"], dtype=np.float64)
        _set_rng_state(b.np_random, py["rng"])
        _set_rng_state(getattr(b, f"{inner}_env").np_random, py[f"{inner}_rng"])
        b.update_target_site_pos()
    return restore


register_snapshot_hook("PointMaze_*", SnapshotHook("pointmaze", _maze_capture("point"), _maze_restore("point")))


def _antmaze_restore(b, py: dict) -> None:
    _maze_restore("ant")(b, py)
    b.ant_env.init_qpos[:2] = b.reset_pos  # where AntMazeEnv.reset puts the ant


register_snapshot_hook("AntMaze_*", SnapshotHook("antmaze", _maze_capture("ant"), _antmaze_restore))


# --- FrankaKitchen: task lists, goal, both RNGs (observation noise on every step), last noisy qpos
def _kitchen_capture(b) -> dict:
    last = getattr(b.robot_env, "_last_robot_qpos", None)
    return {
        "tasks_to_complete": sorted(b.tasks_to_complete),
        "episode_task_completions": list(b.episode_task_completions),
        "goal": {k: _arr(v) for k, v in b.goal.items()},
        "robot_rng": _rng_state(b.robot_env.np_random),
        "rng": _rng_state(b.np_random),
        "last_robot_qpos": None if last is None else _arr(last),
    }


def _kitchen_restore(b, py: dict) -> None:
    b.tasks_to_complete = set(py["tasks_to_complete"])
    b.episode_task_completions = list(py["episode_task_completions"])
    for k, v in py["goal"].items():
        b.goal[k] = np.asarray(v, dtype=np.float64)
    _set_rng_state(b.robot_env.np_random, py["robot_rng"])
    _set_rng_state(b.np_random, py["rng"])
    if py.get("last_robot_qpos") is not None:
        b.robot_env._last_robot_qpos = np.asarray(py["last_robot_qpos"], dtype=np.float64)


register_snapshot_hook("FrankaKitchen*", SnapshotHook("kitchen", _kitchen_capture, _kitchen_restore))


# --- a gymnasium MuJoCo env whose only Python state is np_random (Pusher)
def _rng_capture(b) -> dict:
    return {"rng": _rng_state(b.np_random)}


def _rng_restore(b, py: dict) -> None:
    _set_rng_state(b.np_random, py["rng"])


#: hook for a MuJoCo env whose only Python-side state is ``np_random`` (register it per env id)
MUJOCO_RNG_HOOK = SnapshotHook("mujoco", _rng_capture, _rng_restore)
register_snapshot_hook("Pusher*", MUJOCO_RNG_HOOK)
register_snapshot_hook("Reacher*", MUJOCO_RNG_HOOK)  # the target is in qpos; self.goal is used only at reset


# ----------------------------------------------------------------------------------- snapshotter
def _wrapper_chain(env) -> list:
    chain = []
    e = env
    while True:
        chain.append(e)
        inner = getattr(e, "env", None)
        if inner is None or inner is e:
            break
        e = inner
    return chain


def _vec(obs) -> np.ndarray:
    if isinstance(obs, dict):
        return np.concatenate([_vec(obs[k]) for k in sorted(obs)]) if obs else np.zeros(0)
    return np.asarray(obs, dtype=np.float64).reshape(-1)


class Snapshotter:
    """Take and restore exact snapshots of one env, through its :class:`SnapshotHook`.

    Args:
        env: the env as made by :func:`prm_critic.robotics.make.make_env` (wrappers included). It
            must have been reset at least once before :meth:`get`.
        strict: refuse an env without a hook (:class:`SnapshotUnsupportedError`, the default). With
            ``strict=False`` such an env is snapshotted with ``kind = None`` and its snapshots record
            the simulator state only; :meth:`restore` refuses them (collection uses this, so that data
            of any env can be collected and labelled by subgoals or outcome).
    """

    def __init__(self, env, *, strict: bool = True):
        gym = require("gymnasium")
        self.mujoco = require("mujoco")
        self.env = env
        base = env.unwrapped
        self.base = base
        self.env_id = _env_id(env)
        chain = _wrapper_chain(env)
        self._time_limits = [w for w in chain if isinstance(w, gym.wrappers.TimeLimit)]
        self._order = [w for w in chain if hasattr(w, "_has_reset")]
        model = getattr(base, "model", None)
        data = getattr(base, "data", None)
        if model is None or data is None or not hasattr(model, "nq"):
            raise ValueError(
                f"env: Snapshotter needs a MuJoCo env (with .model and .data), got {type(base).__name__}"
            )
        self.unsupported: Optional[str] = None  # why the env has no hook (strict=False only)
        try:
            self.hook: Optional[SnapshotHook] = snapshot_hook_for(env)
        except SnapshotUnsupportedError as exc:
            if strict:
                raise
            self.hook, self.unsupported = None, str(exc)
        self.kind = None if self.hook is None else self.hook.name
        self.model, self.data = model, data
        self._sig = self.mujoco.mjtState.mjSTATE_INTEGRATION
        self.size = int(self.mujoco.mj_stateSize(model, self._sig))

    # ------------------------------------------------------------------ get
    def get(self) -> Snapshot:
        """Snapshot of the env's current state."""
        buf = np.empty(self.size, dtype=np.float64)
        self.mujoco.mj_getState(self.model, self.data, buf, self._sig)
        py: dict[str, Any] = {"kind": self.kind}
        if self._time_limits:
            py["elapsed_steps"] = [int(w._elapsed_steps or 0) for w in self._time_limits]
        if self.hook is not None:
            assert self.hook.capture is not None, "snapshot_hook_for returns only hooks that do not refuse (capture set)"
            state = self.hook.capture(self.base)
            clash = sorted(set(state) & {"kind", "elapsed_steps"})
            if clash:
                raise ValueError(f"snapshot hook {self.hook.name!r}: capture() returned reserved keys {clash}")
            py.update(state)
        return Snapshot(buf, py)

    # -------------------------------------------------------------- restore
    def restore(self, snapshot: Snapshot) -> None:
        """Put the env back into ``snapshot``'s state (simulator, task state, TimeLimit counter)."""
        if self.hook is None:
            raise SnapshotUnsupportedError(self.unsupported)
        sim = np.asarray(snapshot.sim, dtype=np.float64)
        if sim.shape != (self.size,):
            raise ValueError(
                f"snapshot.sim: expected shape ({self.size},) for this env's model, got {sim.shape}"
            )
        py = snapshot.py
        if py.get("kind") != self.kind:
            hint = (" (it was taken without a snapshot hook: register one and collect the data again)"
                    if py.get("kind") is None else "")
            raise ValueError(
                f"snapshot.py['kind']: expected {self.kind!r} for env {self.env_id!r}, got {py.get('kind')!r}{hint}"
            )
        self.mujoco.mj_setState(self.model, self.data, sim, self._sig)
        assert self.hook.restore is not None, "snapshot_hook_for returns only hooks that do not refuse (restore set)"
        self.hook.restore(self.base, py)
        self.mujoco.mj_forward(self.model, self.data)
        if self.hook.after_forward is not None:
            self.hook.after_forward(self.base, py)
        steps = py.get("elapsed_steps", [])
        for w, n in zip(self._time_limits, steps):
            w._elapsed_steps = int(n)
        for w in self._order:
            w._has_reset = True

    # --------------------------------------------------------- self-check
    def check_replay(self, snapshot: Snapshot, action, expected: dict[str, Any], *,
                     transform: Optional[Callable[[Any], np.ndarray]] = None, where: str = "") -> None:
        """Restore ``snapshot``, step the recorded ``action`` and compare with the recorded outcome.

        ``expected`` maps any of ``"obs"`` (compared as ``transform(obs)``, default: all keys as one
        float64 vector), ``"reward"``, ``"terminated"``, ``"truncated"`` to the recorded values;
        every comparison is exact (``np.array_equal``), as a restore is bit-exact. The env is left
        after the replayed step (restore again before using it).

        Raises:
            ReplayMismatchError: naming the env id, ``where`` (e.g. episode and step), what differs
                and by how much — the env's snapshot hook misses part of its state.
        """
        self.restore(snapshot)
        obs, reward, terminated, truncated, _ = self.env.step(action)
        got = {"obs": (transform or _vec)(obs), "reward": reward, "terminated": bool(terminated),
               "truncated": bool(truncated)}
        bad = []
        for k, want in expected.items():
            g, w = np.asarray(got[k]), np.asarray(want)
            if g.shape != w.shape or not np.array_equal(g.astype(w.dtype) if w.dtype.kind == "f" else g, w):
                if g.shape == w.shape and w.dtype.kind in "fiub" and w.size:
                    diff = np.abs(g.astype(np.float64) - w.astype(np.float64))
                    i = int(np.argmax(diff))
                    bad.append(f"{k} (max |diff| {float(diff.flat[i]):.3g} at index {i})")
                else:
                    bad.append(f"{k} (shape {g.shape} vs recorded {w.shape})")
        if bad:
            raise ReplayMismatchError(
                f"env {self.env_id!r}{', ' + where if where else ''}: restoring the snapshot and replaying the "
                f"recorded action does not reproduce the recorded step: {', '.join(bad)} differ; the snapshot "
                f"hook {self.kind!r} misses part of the env's state (fix it, see register_snapshot_hook)"
            )
