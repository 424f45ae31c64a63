"""Small real pieces shared by the wrapper tests: a list-driven gymnasium env and counting /
slow / blocking / failing critics (real BaseCritic subclasses wrapping a real critic)."""

from __future__ import annotations

import threading
import time

import gymnasium as gym
import numpy as np
import torch

from prm_critic.critic import BaseCritic, CriticInfo
from prm_critic.models.state_critic import StateCriticNet, TorchStateCritic
from prm_critic.robotics.make import CriticInputLayout


class ListEnv(gym.Env):
    """Visits ``states[0], states[1], ..., states[-1]`` (one per step, actions ignored); the last
    step terminates (``terminate_at_end``) or truncates."""

    metadata = {"render_modes": []}

    def __init__(self, states, terminate_at_end: bool = False, obs_space=None):
        self.states = np.asarray(states, dtype=np.float64)
        d = self.states.shape[1]
        self.observation_space = obs_space or gym.spaces.Box(-np.inf, np.inf, shape=(d,), dtype=np.float64)
        self.action_space = gym.spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32)
        self.terminate_at_end = terminate_at_end
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self.states[0].copy(), {}

    def step(self, action):
        self.t += 1
        end = self.t >= len(self.states) - 1
        obs = self.states[min(self.t, len(self.states) - 1)].copy()
        return obs, 0.5, bool(end and self.terminate_at_end), bool(end and not self.terminate_at_end), {}


def torch_critic(d: int, seed: int = 0) -> TorchStateCritic:
    """A randomly initialised (untrained) real state critic with its layout in ``meta``."""
    torch.manual_seed(seed)
    net = StateCriticNet(d, hidden=(16, 16))
    layout = CriticInputLayout(["obs"], {"obs": d})
    return TorchStateCritic(net, {"layout": layout.to_dict()})


class CountingCritic(BaseCritic):
    """Delegates to ``inner``; records the batch size of each call."""

    def __init__(self, inner: BaseCritic):
        self.inner = inner
        self.obs_dim = inner.obs_dim
        self.batches: list[int] = []

    def critic_info(self) -> CriticInfo:
        return self.inner.critic_info()

    def score(self, steps):
        self.batches.append(int(np.shape(steps)[0]))
        return self.inner.score(steps)


class SlowCritic(BaseCritic):
    """Delegates to ``inner``; sleeps ``delay`` seconds on the calls whose index is in ``slow``,
    raises RuntimeError on those in ``fail``."""

    def __init__(self, inner: BaseCritic, *, delay: float = 0.0, slow=(), fail=()):
        self.inner = inner
        self.obs_dim = inner.obs_dim
        self.delay, self.slow, self.fail = delay, set(slow), set(fail)
        self.n = 0
        self.finished = threading.Event()

    def critic_info(self) -> CriticInfo:
        return self.inner.critic_info()

    def score(self, steps):
        i = self.n
        self.n += 1
        if i in self.fail:
            raise RuntimeError(f"critic failure on call {i}")
        if i in self.slow:
            self.finished.clear()
            time.sleep(self.delay)
            self.finished.set()
        return self.inner.score(steps)


class BlockingCritic(BaseCritic):
    """Delegates to ``inner``; the calls whose index is in ``block`` wait until ``release`` is set
    (at most ``max_wait`` seconds), then set ``finished``: a critic that is late for as long as the
    test decides, with no timing in the test itself."""

    def __init__(self, inner: BaseCritic, *, block=(), max_wait: float = 60.0):
        self.inner = inner
        self.obs_dim = inner.obs_dim
        self.block, self.max_wait = set(block), max_wait
        self.n = 0
        self.release = threading.Event()
        self.finished = threading.Event()

    def critic_info(self) -> CriticInfo:
        return self.inner.critic_info()

    def score(self, steps):
        i = self.n
        self.n += 1
        if i in self.block:
            self.release.wait(self.max_wait)
            out = self.inner.score(steps)
            self.finished.set()
            return out
        return self.inner.score(steps)


def wait_for_handover(wrapper, tries: int = 3000) -> None:
    """Wait until the wrapper's deadline worker has handed a late result back (a condition, polled).

    A slow critic's ``finished`` event is set inside the critic, before the worker thread hands its
    result back; a step taken in between would still see the worker busy."""
    worker = wrapper._caller._worker
    for _ in range(tries):
        if not worker._done.locked():
            return
        time.sleep(0.01)


# ---------------------------------------------------------------------------------------------------
# Reference computations of the wrappers' per-step results, from what the env below them returned

class Recorder(gym.Wrapper):
    """Passes everything through and keeps a copy of what the env below returned, one event per call:
    ``("reset", (obs, info))`` or ``("step", (obs, reward, terminated, truncated, info))``."""

    def __init__(self, env):
        super().__init__(env)
        self.events: list[tuple[str, tuple]] = []

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        self.events.append(("reset", (_copy_obs(obs), dict(info))))
        return obs, info

    def step(self, action):
        obs, r, term, trunc, info = self.env.step(action)
        self.events.append(("step", (_copy_obs(obs), r, term, trunc, dict(info))))
        return obs, r, term, trunc, info


def _copy_obs(obs):
    return {k: np.array(v, copy=True) for k, v in obs.items()} if isinstance(obs, dict) else np.array(obs, copy=True)


def reference_heads(critic: BaseCritic, x: np.ndarray) -> dict[str, float]:
    """Both heads of one critic input through the critic's batched ``score`` (not its batch-1 path)."""
    s = critic.score(x[None])
    return {"progress": float(s.progress[0]), "success": float(s.success[0])}


def reference_shaper(events, critic: BaseCritic, layout, *, gamma: float, scale: float = 1.0, mode: str = "potential",
                     head: str = "progress", subgoal_bonus: float = 1.0, info_subgoals: bool = False):
    """What :class:`PRMRewardShaper` (no deadline) returns for the recorded ``events``, computed the
    plain way: the checked flattening (``ObsFlattener.checked``), the critic's batched ``score``,
    ``potential_shaping`` (the numpy formula), the batched subgoal evaluation ``holds``, and the info
    built by merging dicts. One ``("reset", info)`` or ``("step", (reward, info))`` per event."""
    from prm_critic.robotics.label_rewards import potential_shaping
    from prm_critic.robotics.layout import ObsFlattener

    flat = ObsFlattener(layout).checked
    ev = getattr(critic, "evaluator", None)

    def holds(x):
        return {n: bool(b) for n, b in zip(ev.names, ev.holds(x[None])[0])}

    out: list = []
    x = phi = None
    claimed: set[str] = set()
    for kind, data in events:
        if kind == "reset":
            obs, info = data
            x = flat(obs)
            phi = reference_heads(critic, x)[head]
            claimed = {n for n, b in holds(x).items() if b} if mode == "subgoal" else set()
            out.append(("reset", {**info, "prm_phi": phi, "prm_fallback": False}))
            continue
        obs, r, term, _trunc, info = data
        xn = flat(obs)
        heads = reference_heads(critic, xn)
        phin = heads[head]
        r = float(r)
        if mode == "potential":
            shaping = float(potential_shaping(np.float64(phi), np.float64(phin), bool(term), gamma=gamma, scale=scale))
        elif mode == "replace":
            shaping = scale * phin - r
        else:
            new = [n for n, b in holds(xn).items() if b and n not in claimed]
            claimed.update(new)
            shaping = subgoal_bonus * len(new)
        want = {**info, "prm_original_reward": r, "prm_phi": phi, "prm_next_phi": phin, "prm_shaping": shaping,
                "prm_fallback": False, "prm_terminated": bool(term), "prm_x": x, "prm_next_x": xn}
        if info_subgoals:
            want["prm_subgoals"] = holds(xn)
        want["prm_next_scores"] = heads
        out.append(("step", (r + shaping, want)))
        x, phi = xn, phin
    return out


def reference_pruner(events, infos, score, *, threshold: float, patience: int):
    """What :class:`DeadEndPruner` returns on top of the wrapper whose step infos are ``infos`` (one
    per step event of ``events``, the env's own when nothing is between): ``(pruned, info)`` per step,
    with ``c = score(obs, info)`` (``None``: unknown) and the counter rule of its docstring."""
    out = []
    below = 0
    steps = iter(infos)
    for kind, data in events:
        if kind == "reset":
            below = 0
            continue
        obs, _r, term, trunc, _info = data
        info = next(steps)
        c = score(obs, info)
        if c is None:
            pruned = False
        else:
            below = below + 1 if c < threshold else 0
            pruned = bool(below >= patience and not term and not trunc)
        out.append((pruned, {**info, "prm_pruned": pruned, "prm_prune_score": float("nan") if c is None else c}))
    return out


def assert_same_info(got: dict, want: dict) -> None:
    """The same keys in the same order and the same values: arrays of the same dtype, shape and bytes,
    floats of type float equal bit for bit (NaN where NaN), everything else equal and of the same type."""
    assert list(got) == list(want)
    for k, w in want.items():
        g = got[k]
        assert type(g) is type(w), (k, type(g), type(w))
        if isinstance(w, np.ndarray):
            assert g.dtype == w.dtype and g.shape == w.shape and g.tobytes() == w.tobytes(), k
        elif isinstance(w, float):
            assert np.float64(g).tobytes() == np.float64(w).tobytes(), (k, g, w)
        else:
            assert g == w, (k, g, w)
