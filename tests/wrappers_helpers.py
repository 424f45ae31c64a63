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
