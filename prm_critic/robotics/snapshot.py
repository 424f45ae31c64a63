"""Exact snapshots of a MuJoCo task env: simulator state plus the task's Python state.

A snapshot of state ``s_t`` is two parts::

    sim = mj_getState(model, data, mjSTATE_INTEGRATION)      # float64 (S,): time, qpos, qvel, act,
                                                              # warmstart, ctrl, applied forces, mocap
    py  = {"elapsed_steps": TimeLimit._elapsed_steps, ...task state...}   # a JSON object

``restore`` writes ``sim`` back with ``mj_setState`` + ``mj_forward`` and re-installs the Python
state, so that the same actions replay to bit-identical observations. The Python state per task
family (gymnasium-robotics 1.4):

* Fetch (``MujocoFetchEnv``): ``goal`` (and ``np_random``, used only at reset) and ``weld_pose``, the
  pose ``[x, y, z, qw, qx, qy, qz]`` that ``data.xpos`` / ``data.xquat`` hold for each body welded to a
  mocap. The next action moves the mocap relative to that pose (``reset_mocap2body_xpos``), and it is
  not a function of the state: FetchPickAndPlace (free gripper fingers) calls no ``mj_forward`` after
  its ``mj_step``, so these derived fields are those of the start of the step's last substep, not of
  the current ``qpos``. Recomputed by ``mj_forward`` they would move the mocap target and the replay
  would drift from its first step (6e-4 in the observation after one step, the grasp lost later);
  restore writes the stored pose back after ``mj_forward``. A Fetch snapshot without ``weld_pose`` is
  refused where the env needs it (FetchPickAndPlace) and accepted where its step ends with
  ``mj_forward`` (FetchPush, FetchReach, FetchSlide: blocked gripper);
* PointMaze (``PointMazeEnv``): ``goal``, ``reset_pos``, the maze env's and the inner point env's
  ``np_random`` bit-generator states, and the target marker (``update_target_site_pos()`` writes
  ``model.site_pos``: the marker lives in the model, not in the state);
* FrankaKitchen (``KitchenEnv``): ``tasks_to_complete``, ``episode_task_completions``, ``goal`` and the
  robot env's ``np_random`` (observation noise is drawn from it on every step) and the robot's
  ``_last_robot_qpos`` (the last *noisy* observed joint positions: the next action is a velocity
  added to them, a D4RL quirk that makes the kitchen non-Markov in the MuJoCo state alone);
* any other MuJoCo env (e.g. Pusher): its ``np_random``.

``copy.deepcopy`` of these envs is unreliable (MuJoCo handles, renderers): snapshots never use it.
A snapshot is serialisable to a float64 array and a JSON string (:meth:`Snapshot.to_arrays`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from prm_critic._optional import require

__all__ = ["Snapshot", "Snapshotter"]


@dataclass
class Snapshot:
    """One state of a task env.

    Attributes:
        sim: ``(S,)`` float64, ``mj_getState(..., mjSTATE_INTEGRATION)``.
        py: JSON-serialisable dict of the task's Python state.
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


def _rng_state(rng) -> dict[str, Any]:
    return rng.bit_generator.state


def _set_rng_state(rng, state: dict[str, Any]) -> None:
    rng.bit_generator.state = state


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


class Snapshotter:
    """Take and restore exact snapshots of one env (Fetch, PointMaze, FrankaKitchen, any MuJoCo env).

    Args:
        env: the env as made by :func:`prm_critic.robotics.make.make_env` (wrappers included). It
            must have been reset at least once before :meth:`get`.
    """

    def __init__(self, env):
        gym = require("gymnasium")
        self.mujoco = require("mujoco")
        self.env = env
        base = env.unwrapped
        self.base = base
        chain = _wrapper_chain(env)
        self._time_limits = [w for w in chain if isinstance(w, gym.wrappers.TimeLimit)]
        self._order = [w for w in chain if hasattr(w, "_has_reset")]
        if hasattr(base, "point_env") and hasattr(base, "maze"):
            self.kind = "pointmaze"
        elif hasattr(base, "robot_env") and hasattr(base, "tasks_to_complete"):
            self.kind = "kitchen"
        elif hasattr(base, "initial_gripper_xpos") and hasattr(base, "goal"):
            self.kind = "fetch"
        else:
            self.kind = "mujoco"
        model = getattr(base, "model", None)
        data = getattr(base, "data", None)
        if model is None or data is None or not hasattr(model, "nq"):
            raise ValueError(
                f"env: Snapshotter needs a MuJoCo env (with .model and .data), got {type(base).__name__}"
            )
        self.model, self.data = model, data
        self._sig = self.mujoco.mjtState.mjSTATE_INTEGRATION
        self.size = int(self.mujoco.mj_stateSize(model, self._sig))
        self._welded = self._mocap_welded_bodies() if self.kind == "fetch" else []

    def _mocap_welded_bodies(self) -> list[int]:
        """Ids of the bodies welded to a mocap body (whose pose the next Fetch action reads)."""
        m, mj = self.model, self.mujoco
        out = []
        for i in range(int(m.neq)):
            if int(m.eq_type[i]) != int(mj.mjtEq.mjEQ_WELD):
                continue
            a, b = int(m.eq_obj1id[i]), int(m.eq_obj2id[i])
            out.append(b if int(m.body_mocapid[a]) != -1 else a)
        return out

    # ------------------------------------------------------------------ get
    def get(self) -> Snapshot:
        """Snapshot of the env's current state."""
        buf = np.empty(self.size, dtype=np.float64)
        self.mujoco.mj_getState(self.model, self.data, buf, self._sig)
        py: dict[str, Any] = {"kind": self.kind}
        if self._time_limits:
            py["elapsed_steps"] = [int(w._elapsed_steps or 0) for w in self._time_limits]
        b = self.base
        if self.kind == "pointmaze":
            py["goal"] = np.asarray(b.goal, dtype=np.float64).tolist()
            py["reset_pos"] = np.asarray(b.reset_pos, dtype=np.float64).tolist()
            py["rng"] = _rng_state(b.np_random)
            py["point_rng"] = _rng_state(b.point_env.np_random)
        elif self.kind == "kitchen":
            py["tasks_to_complete"] = sorted(b.tasks_to_complete)
            py["episode_task_completions"] = list(b.episode_task_completions)
            py["goal"] = {k: np.asarray(v, dtype=np.float64).tolist() for k, v in b.goal.items()}
            py["robot_rng"] = _rng_state(b.robot_env.np_random)
            py["rng"] = _rng_state(b.np_random)
            last = getattr(b.robot_env, "_last_robot_qpos", None)
            py["last_robot_qpos"] = None if last is None else np.asarray(last, dtype=np.float64).tolist()
        elif self.kind == "fetch":
            py["goal"] = np.asarray(b.goal, dtype=np.float64).tolist()
            py["rng"] = _rng_state(b.np_random)
            d = self.data
            py["weld_pose"] = [np.r_[d.xpos[i], d.xquat[i]].astype(np.float64).tolist() for i in self._welded]
        else:
            py["rng"] = _rng_state(b.np_random)
        return Snapshot(buf, py)

    # -------------------------------------------------------------- restore
    def restore(self, snapshot: Snapshot) -> None:
        """Put the env back into ``snapshot``'s state (simulator, task state, TimeLimit counter)."""
        sim = np.asarray(snapshot.sim, dtype=np.float64)
        if sim.shape != (self.size,):
            raise ValueError(
                f"snapshot.sim: expected shape ({self.size},) for this env's model, got {sim.shape}"
            )
        py = snapshot.py
        if py.get("kind") != self.kind:
            raise ValueError(f"snapshot.py['kind']: expected {self.kind!r} for this env, got {py.get('kind')!r}")
        self.mujoco.mj_setState(self.model, self.data, sim, self._sig)
        b = self.base
        if self.kind == "pointmaze":
            b.goal = np.asarray(py["goal"], dtype=np.float64)
            b.reset_pos = np.asarray(py["reset_pos"], dtype=np.float64)
            _set_rng_state(b.np_random, py["rng"])
            _set_rng_state(b.point_env.np_random, py["point_rng"])
            b.update_target_site_pos()
        elif self.kind == "kitchen":
            b.tasks_to_complete = set(py["tasks_to_complete"])
            b.episode_task_completions = list(py["episode_task_completions"])
            for k, v in py["goal"].items():
                b.goal[k] = np.asarray(v, dtype=np.float64)
            _set_rng_state(b.robot_env.np_random, py["robot_rng"])
            _set_rng_state(b.np_random, py["rng"])
            if py.get("last_robot_qpos") is not None:
                b.robot_env._last_robot_qpos = np.asarray(py["last_robot_qpos"], dtype=np.float64)
        else:
            if self.kind == "fetch":
                b.goal = np.asarray(py["goal"], dtype=np.float64)
            _set_rng_state(b.np_random, py["rng"])
        self.mujoco.mj_forward(self.model, self.data)
        if self.kind == "fetch":
            self._restore_weld_pose(py.get("weld_pose"))
        steps = py.get("elapsed_steps", [])
        for w, n in zip(self._time_limits, steps):
            w._elapsed_steps = int(n)
        for w in self._order:
            w._has_reset = True

    def _restore_weld_pose(self, pose) -> None:
        """Write the stored poses of the mocap-welded bodies back (after ``mj_forward``)."""
        n = len(self._welded)
        if pose is None:
            if getattr(self.base, "block_gripper", False):
                return  # the env's step ends with mj_forward: the recomputed pose is the stored one
            raise ValueError(
                f"snapshot.py['weld_pose']: missing; {type(self.base).__name__} moves its mocap relative to "
                f"the gripper pose of the last substep, which restore cannot recompute exactly; "
                f"re-collect the data (`prm-critic collect`) so that its snapshots record that pose"
            )
        arr = np.asarray(pose, dtype=np.float64)
        if arr.shape != (n, 7):
            raise ValueError(
                f"snapshot.py['weld_pose']: expected shape ({n}, 7) (pos + quat of each mocap-welded body), "
                f"got {arr.shape}"
            )
        for row, i in zip(arr, self._welded):
            self.data.xpos[i] = row[:3]
            self.data.xquat[i] = row[3:]
