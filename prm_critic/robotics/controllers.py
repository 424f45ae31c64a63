"""Behaviour controllers that produce both successful and failed trajectories.

Interface (single env, raw observations)::

    ctrl = make_controller(spec, env)          # name from spec.controller["name"], params from the table
    ctrl.reset(obs, rng)                        # at episode start (or after restoring a snapshot)
    action = ctrl.act(obs)                      # (A,) float32 in the action space

Scripted controllers compute a clean action ``a*`` from the observation alone (phases are read off
the state, so a controller can start from any snapshot), then add per-episode noise::

    sigma_ep ~ U(0, noise),  eps_ep ~ U(0, random_prob)                  # drawn in reset()
    n_t = rho * n_{t-1} + sqrt(1 - rho^2) * sigma_ep * N(0, I)           # rho = noise_corr (AR(1))
    a = clip(a* + n_t, low, high)                   with prob. 1 - eps_ep
    a ~ U(low, high), held for random_hold steps    with prob. eps_ep

so that some episodes are nearly clean and others mostly noise. Everything random comes from the
``numpy.random.Generator`` passed to ``reset``: collection is reproducible.

Registry (:data:`CONTROLLERS`, add one with :func:`register_controller`): ``fetch_reach``, ``fetch_push``,
``fetch_pick_and_place``, ``pointmaze``, ``random``.
:class:`SB3Controller` wraps any stable-baselines3 model (``model.predict(obs, deterministic=False)``).
:func:`load_sb3_model` loads a stable-baselines3 ``.zip``; that unpickles objects stored in the file,
which can run arbitrary code, so it needs ``trust_pickle=True`` (CLI: ``--trust-pickle``). A
prm-critic policy checkpoint (safetensors + JSON, :func:`prm_critic.sb3.load_policy`) needs no trust.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any, Callable

import numpy as np

from prm_critic import validate
from prm_critic._optional import require
from prm_critic.robotics.spec import TaskSpec, load_spec

__all__ = [
    "Controller", "RandomController", "FetchReachController", "FetchPushController",
    "FetchPickAndPlaceController", "PointMazeController", "SB3Controller",
    "CONTROLLERS", "register_controller", "unregister_controller", "make_controller", "load_sb3_model", "UntrustedPickleError", "check_pickle_trust",
]


class Controller:
    """Base class: noisy wrapper around a clean action ``clean_action(obs)``.

    Args:
        env: the env (for its action space).
        noise: upper end of the per-episode Gaussian action noise std (in action units).
        random_prob: upper end of the per-episode probability of a uniformly random action.
    """

    def __init__(self, env, noise: float = 0.0, random_prob: float = 0.0, noise_corr: float = 0.0,
                 random_hold: int = 1):
        space = env.action_space
        self.low = np.asarray(space.low, dtype=np.float64)
        self.high = np.asarray(space.high, dtype=np.float64)
        self.shape = tuple(space.shape)
        self.noise = validate.check_number("noise", noise, low=0.0)
        self.random_prob = validate.check_prob("random_prob", random_prob)
        self.noise_corr = validate.check_prob("noise_corr", noise_corr)
        self.random_hold = validate.check_int("random_hold", random_hold, minimum=1)
        self.rng = np.random.default_rng(0)
        self.sigma = 0.0
        self.eps = 0.0
        self._n = np.zeros(self.shape)
        self._held: np.ndarray | None = None
        self._hold_left = 0

    def reset(self, obs, rng: np.random.Generator) -> None:
        """Start an episode (or a continuation from a snapshot): draw this episode's noise levels."""
        if not isinstance(rng, np.random.Generator):
            raise TypeError(f"rng: expected a numpy.random.Generator, got {type(rng).__name__}")
        self.rng = rng
        self.sigma = float(rng.uniform(0.0, self.noise)) if self.noise > 0 else 0.0
        self.eps = float(rng.uniform(0.0, self.random_prob)) if self.random_prob > 0 else 0.0
        self._n = self.sigma * rng.standard_normal(self.shape) if self.sigma > 0 else np.zeros(self.shape)
        self._held, self._hold_left = None, 0

    def clean_action(self, obs) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def act(self, obs) -> np.ndarray:
        """Action ``(A,)`` float32 for one raw observation."""
        if self._hold_left > 0:
            self._hold_left -= 1
            assert self._held is not None, "_hold_left > 0 only after a random action was held"
            return self._held
        if self.eps > 0 and self.rng.random() < self.eps:
            a = self.rng.uniform(self.low, self.high)
            if self.random_hold > 1:
                self._held = np.clip(a, self.low, self.high).astype(np.float32)
                self._hold_left = self.random_hold - 1
        else:
            a = np.asarray(self.clean_action(obs), dtype=np.float64)
            if self.sigma > 0:
                r = self.noise_corr
                self._n = r * self._n + np.sqrt(1.0 - r * r) * self.sigma * self.rng.standard_normal(self.shape)
                a = a + self._n
        return np.clip(a, self.low, self.high).astype(np.float32)


class RandomController(Controller):
    """Uniformly random actions: ``a ~ U(low, high)``."""

    def __init__(self, env, **_ignored):
        super().__init__(env)

    def act(self, obs) -> np.ndarray:
        return self.rng.uniform(self.low, self.high).astype(np.float32)


def _nonnegative(**values: Any) -> list[float]:
    """Each of ``values`` checked as a finite number ``>= 0``, in order."""
    return [validate.check_number(name, v, low=0.0) for name, v in values.items()]


def _obs_parts(obs) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    o = np.asarray(obs["observation"], dtype=np.float64)
    return o, np.asarray(obs["achieved_goal"], dtype=np.float64), np.asarray(obs["desired_goal"], dtype=np.float64)


class FetchReachController(Controller):
    """Fetch reach: ``a[:3] = clip(gain * (goal - grip), -1, 1)``, gripper 0.

    ``observation[0:3]`` is the gripper position; one action unit moves the mocap 5 cm.
    """

    def __init__(self, env, noise: float = 0.3, random_prob: float = 0.2, noise_corr: float = 0.0,
                 random_hold: int = 1, gain: float = 10.0):
        super().__init__(env, noise, random_prob, noise_corr, random_hold)
        self.gain = validate.check_number("gain", gain, low=0.0)

    def clean_action(self, obs) -> np.ndarray:
        o, _, g = _obs_parts(obs)
        a = np.zeros(4)
        a[:3] = np.clip(self.gain * (g - o[0:3]), -1, 1)
        return a


class FetchPushController(Controller):
    """Fetch push, phase read off the state:

    ``u = (goal - obj)_xy / ||.||`` (push direction), ``behind = obj - offset * u`` at the object's height.

    1. not lined up behind the object (lateral error or distance off): go to ``behind`` at
       ``obj_z + lift`` (first rise if low), then descend when within ``align_tol`` in xy;
    2. lined up, low and behind: push, moving the gripper to ``goal - contact * u`` (where it touches
       the object once the object is at the goal) at speed ``<= push_speed``, correcting lateral drift.
    """

    def __init__(self, env, noise: float = 0.3, random_prob: float = 0.2, noise_corr: float = 0.8,
                 random_hold: int = 1, gain: float = 10.0,
                 offset: float = 0.06, lift: float = 0.08, align_tol: float = 0.02, contact: float = 0.035,
                 push_speed: float = 0.6):
        super().__init__(env, noise, random_prob, noise_corr, random_hold)
        self.contact, self.push_speed, self.gain, self.offset, self.lift, self.align_tol = _nonnegative(
            contact=contact, push_speed=push_speed, gain=gain, offset=offset, lift=lift, align_tol=align_tol)

    def clean_action(self, obs) -> np.ndarray:
        o, obj, g = _obs_parts(obs)
        grip = o[0:3]
        d = g[:2] - obj[:2]
        dist = np.linalg.norm(d)
        a = np.zeros(4)
        if dist < 1e-3:
            return a
        u = d / dist
        rel = grip[:2] - obj[:2]
        along = -float(rel @ u)                       # > 0 when the gripper is behind the object
        lateral = float(np.linalg.norm(rel + along * u))
        low = grip[2] < obj[2] + 0.02
        behind = np.append(obj[:2] - self.offset * u, obj[2])
        if along > 0.02 and lateral < self.align_tol and low:
            # push: bring the gripper to where it touches the object once the object sits at the
            # goal (``goal - contact * u``), correcting lateral drift, at bounded speed
            target = np.append(g[:2] - self.contact * u, obj[2])
            target[:2] += obj[:2] - (grip[:2] + along * u)
            a[:3] = np.clip(self.gain * (target - grip), -self.push_speed, self.push_speed)
            return a
        xy_err = np.linalg.norm(grip[:2] - behind[:2])
        if xy_err > self.align_tol:
            target = behind.copy()
            target[2] = obj[2] + self.lift
            if grip[2] < obj[2] + self.lift - 0.02 and xy_err > 2 * self.align_tol:
                target[:2] = grip[:2]                     # rise first, do not sweep the object
            a[:3] = np.clip(self.gain * (target - grip), -1, 1)
        else:
            a[:3] = np.clip(self.gain * (behind - grip), -1, 1)
        return a


class FetchPickAndPlaceController(Controller):
    """Fetch pick and place, phase read off the state:

    1. object not between the fingers: open the gripper, go above the object (``obj_z + lift``), then
       descend onto it when within ``align_tol`` in xy;
    2. object between the fingers (``||obj - grip|| < grasp_tol``, or ``< 2 grasp_tol`` with the fingers
       closed: held): close the gripper; once the fingers have closed on it (finger width
       ``< closed_width``), carry it: ``a[:3] = clip(gain * (goal - obj), -1, 1)``.
    """

    def __init__(self, env, noise: float = 0.3, random_prob: float = 0.2, noise_corr: float = 0.0,
                 random_hold: int = 1, gain: float = 10.0,
                 lift: float = 0.05, align_tol: float = 0.01, grasp_tol: float = 0.02,
                 closed_width: float = 0.05):
        super().__init__(env, noise, random_prob, noise_corr, random_hold)
        self.gain, self.lift, self.align_tol, self.grasp_tol, self.closed_width = _nonnegative(
            gain=gain, lift=lift, align_tol=align_tol, grasp_tol=grasp_tol, closed_width=closed_width)

    def clean_action(self, obs) -> np.ndarray:
        o, obj, g = _obs_parts(obs)
        grip = o[0:3]
        width = float(o[9] + o[10])
        a = np.zeros(4)
        dist = np.linalg.norm(obj - grip)
        holding = dist < 2 * self.grasp_tol and width < self.closed_width
        if dist < self.grasp_tol or holding:
            a[3] = -1.0
            if width < self.closed_width:
                a[:3] = np.clip(self.gain * (g - obj), -1, 1)   # carry: move the object onto the goal
            return a
        a[3] = 1.0
        above = obj + np.array([0.0, 0.0, self.lift])
        if np.linalg.norm(grip[:2] - obj[:2]) > self.align_tol:
            a[:3] = np.clip(self.gain * (above - grip), -1, 1)
        else:
            a[:3] = np.clip(self.gain * (obj - grip), -1, 1)
        return a


class PointMazeController(Controller):
    """PointMaze: follow the BFS shortest cell path to the goal with a PD controller on velocity.

    ``target`` = centre of the next cell on a shortest path (the goal itself in the goal's cell);
    ``a = clip(kp * (target - p) - kd * v, -1, 1)``. Uses :class:`MazeGeometry` from subgoals.py.

    The UMaze is easy to luck into, so failures need persistent mistakes: the defaults use strongly
    correlated noise (``noise_corr = 0.95``) and random actions held for ``random_hold = 40`` steps
    (measured: 69% episode success on PointMaze_UMaze-v3 over 100 episodes, 58% on Medium over 50).
    """

    def __init__(self, env, noise: float = 0.5, random_prob: float = 0.3, kp: float = 2.0, kd: float = 0.6,
                 noise_corr: float = 0.95, random_hold: int = 40, maze=None):
        from prm_critic.robotics.subgoals import MazeGeometry

        super().__init__(env, noise, random_prob, noise_corr, random_hold)
        self.kp, self.kd = _nonnegative(kp=kp, kd=kd)
        self.maze = maze if maze is not None else MazeGeometry.from_env(env)
        m = self.maze
        n = len(m.cells)
        # next[c, g]: neighbour of cell c one step closer to cell g (c itself when c == g)
        self._next = np.tile(np.arange(n)[:, None], (1, n))
        for c in range(n):
            nbrs = np.nonzero(m.dist[c] == 1)[0]
            for gcell in range(n):
                left = m.dist[c, gcell]
                if left > 0:
                    cand = nbrs[m.dist[nbrs, gcell] == left - 1]
                    if len(cand):
                        self._next[c, gcell] = cand[0]
        self._cell_of = {tuple(cell): k for k, cell in enumerate(m.cells.tolist())}

    def _cell(self, xy: np.ndarray) -> int:
        m = self.maze
        i = int(np.floor((m.y_center - xy[1]) / m.scaling))
        j = int(np.floor((xy[0] + m.x_center) / m.scaling))
        k = self._cell_of.get((i, j))
        if k is None:
            k = int(np.argmin(np.linalg.norm(m.centers - xy, axis=1)))
        return k

    def clean_action(self, obs) -> np.ndarray:
        o, p, g = _obs_parts(obs)
        v = o[2:4]
        cp, cg = self._cell(p), self._cell(g)
        target = g if cp == cg else self.maze.centers[self._next[cp, cg]]
        return np.clip(self.kp * (target - p) - self.kd * v, -1, 1)


class SB3Controller:
    """Any stable-baselines3 model as a controller: ``action = model.predict(obs, deterministic)``.

    A model that carries ``VecNormalize`` statistics (``prm_critic.sb3.load_policy`` of a policy
    trained with ``normalize_obs=True``) sees normalised observations, as in training.
    Sampling (``deterministic=False``) uses torch's RNG, which :meth:`reset` seeds from ``rng``
    (``torch.manual_seed``) so that collection stays reproducible. An SBX model (JAX) samples with
    its policy's PRNG key instead, which :meth:`reset` sets from the same draw of ``rng``.
    """

    def __init__(self, model, deterministic: bool = False):
        if not hasattr(model, "predict"):
            raise TypeError(f"model: expected a stable-baselines3 model with .predict, got {type(model).__name__}")
        self.model = model
        self.deterministic = bool(deterministic)

    def reset(self, obs, rng: np.random.Generator) -> None:
        """Seed the model's sampling from ``rng`` (one draw): torch's RNG, or an SBX policy's JAX key."""
        seed = int(rng.integers(0, 2**31 - 1))
        policy = getattr(self.model, "policy", None)
        if type(self.model).__module__.split(".")[0] == "sbx" and policy is not None and hasattr(policy, "key"):
            random = require("jax").random
            # SBX policies split policy.key into a fresh noise_key per sampled action (noise_key alone
            # is reused under gSDE): set both
            policy.key, policy.noise_key = random.split(random.PRNGKey(seed))
            return
        torch = require("torch")
        torch.manual_seed(seed)

    def act(self, obs) -> np.ndarray:
        getter = getattr(self.model, "get_vec_normalize_env", None)
        vn = getter() if getter is not None else None
        if vn is not None:
            obs = vn.normalize_obs(obs)
        action, _ = self.model.predict(obs, deterministic=self.deterministic)
        return np.asarray(action, dtype=np.float32)


#: name -> controller class (or factory ``cls(env, **params)``); add one with :func:`register_controller`
CONTROLLERS: dict[str, Callable[..., Any]] = {}


def register_controller(name: str, cls: Callable[..., Any], *, replace: bool = False) -> Callable[..., Any]:
    """Register the controller ``cls`` as ``name`` (the spec's ``controller = { name = ... }``).

    ``cls(env, **params)`` builds one (``params``: the spec's controller table without ``name``); it needs
    ``reset(obs, rng)`` and ``act(obs)`` (subclass :class:`Controller` for noise handling). Returns ``cls``.

    Raises:
        ArgumentError: ``name`` is not a non-empty string, ``cls`` is not callable, or ``name`` is
            already registered and ``replace`` is not ``True``.
    """
    if not isinstance(name, str) or not name.strip():
        raise validate.ArgumentError(f"name: expected a non-empty controller name string, got {name!r}")
    if not callable(cls):
        raise validate.ArgumentError(f"cls: expected a controller class or factory cls(env, **params) for "
                                     f"controller {name!r}, got {cls!r}")
    validate.check_flag("replace", replace)
    if name in CONTROLLERS and not replace:
        raise validate.ArgumentError(f"name: a controller named {name!r} is already registered "
                                     f"({CONTROLLERS[name]!r}); pass replace=True to replace it")
    CONTROLLERS[name] = cls
    return cls


def unregister_controller(name: str) -> Callable[..., Any]:
    """Remove and return the controller registered as ``name`` (an unknown name is refused, with a near miss)."""
    return CONTROLLERS.pop(validate.check_choice("controller", name, sorted(CONTROLLERS)))


for _name, _cls in (("random", RandomController), ("fetch_reach", FetchReachController),
                    ("fetch_push", FetchPushController), ("fetch_pick_and_place", FetchPickAndPlaceController),
                    ("pointmaze", PointMazeController)):
    register_controller(_name, _cls)


def make_controller(spec: "str | TaskSpec", env, name: str | None = None, **params: Any):
    """Controller for ``spec``'s env.

    Args:
        spec: task spec (its ``controller`` table gives the default name and parameters).
        env: the env (action space; the maze for ``pointmaze``).
        name: registry key overriding the spec's; its parameters then come from ``params`` only
            (the spec's table is used when ``name`` equals the spec's controller name).
        params: override controller parameters (``noise``, ``random_prob``, gains...).
    """
    spec = load_spec(spec)
    table = dict(spec.controller)
    spec_name = table.pop("name")
    if name is None:
        name = spec_name
    validate.check_choice("controller", name, sorted(CONTROLLERS))
    kwargs = {**(table if name == spec_name else {}), **params}
    cls = CONTROLLERS[name]
    try:
        return cls(env, **kwargs)
    except TypeError as exc:
        raise ValueError(f"controller {name!r}: bad parameters {sorted(kwargs)}: {exc}") from exc


_SB3_ALGOS = {
    "stable_baselines3": ("A2C", "DDPG", "DQN", "PPO", "SAC", "TD3"),
    "sb3_contrib": ("ARS", "CrossQ", "QRDQN", "RecurrentPPO", "TQC", "TRPO", "MaskablePPO"),
}


class UntrustedPickleError(ValueError):
    """A stable-baselines3 ``.zip`` was to be loaded without ``trust_pickle=True``."""


def check_pickle_trust(path: "str | Path", trust_pickle: bool, *, name: str = "policy") -> None:
    """Refuse to load the stable-baselines3 model ``path`` unless ``trust_pickle`` is ``True``.

    Raises:
        UntrustedPickleError: naming the file, the risk and how to opt in.
    """
    if validate.check_flag("trust_pickle", trust_pickle):
        return
    raise UntrustedPickleError(
        f"{name}: {str(path)!r} is a stable-baselines3 model .zip; loading it unpickles objects stored in the "
        "file, which runs arbitrary code from that file. Load only files you trust, with trust_pickle=True "
        "(CLI: --trust-pickle), or use a prm-critic policy checkpoint (policy.json + policy.safetensors, no "
        "pickle; prm_critic.sb3.save_policy writes one)")


def load_sb3_model(path: "str | Path", device: str = "cpu", *, trust_pickle: bool = False):
    """Load a stable-baselines3 (or sb3-contrib) model zip, finding its algorithm from the zip's
    ``data`` (the policy class module, e.g. ``stable_baselines3.sac.policies`` -> ``SAC``).

    SB3's loader unpickles objects stored in the zip, and unpickling runs code chosen by whoever
    wrote the file: pass ``trust_pickle=True`` only for files you trust.

    Raises:
        UntrustedPickleError: ``trust_pickle`` is not ``True`` (nothing is read from the file).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"policy: model file {str(path)!r} does not exist")
    check_pickle_trust(path, trust_pickle)
    try:
        with zipfile.ZipFile(path) as zf:
            data = json.loads(zf.read("data").decode("utf-8"))
    except (zipfile.BadZipFile, KeyError, json.JSONDecodeError) as exc:
        raise ValueError(f"policy: {str(path)!r} is not a stable-baselines3 model zip: {exc}") from exc
    module = str(data.get("policy_class", {}).get("__module__", ""))
    parts = module.split(".")
    if len(parts) < 2 or parts[0] not in _SB3_ALGOS:
        raise ValueError(f"policy: cannot tell the algorithm of {str(path)!r} (policy module {module!r})")
    lib = require(parts[0])
    algo = next((a for a in _SB3_ALGOS[parts[0]] if a.lower() == parts[1].lower()), None)
    if algo is None or not hasattr(lib, algo):
        raise ValueError(f"policy: unknown algorithm {parts[1]!r} in {str(path)!r}")
    return getattr(lib, algo).load(str(path), device=device)
