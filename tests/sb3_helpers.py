"""Shared by the SB3 tests: a tiny untrained state critic whose normalisation fits the task's resets, and
a callback that stops training as a kill would."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from stable_baselines3.common.callbacks import BaseCallback

from prm_critic.models import StateCriticNet
from prm_critic.robotics.make import CriticInputLayout, make_env
from prm_critic.robotics.spec import load_spec


@pytest.fixture
def one_torch_thread():
    """torch on one thread while the test runs (SAC's small nets train fastest so on busy cores); a test module
    makes it autouse with ``pytestmark = pytest.mark.usefixtures("one_torch_thread")``."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def tiny_state_critic(task: str = "FetchReach-v4"):
    """``(net, meta, xs)``: a 16-unit ``StateCriticNet`` (seeded), its checkpoint metadata (layout,
    task) and the 20 reset states ``(20, D)`` its normalisation was fitted on."""
    spec = load_spec(task)
    env = make_env(spec)
    layout = CriticInputLayout.from_space(spec, env.observation_space)
    torch.manual_seed(0)
    net = StateCriticNet(layout.obs_dim, hidden=(16,))
    xs = np.stack([layout.flatten(env.reset(seed=i)[0]) for i in range(20)])
    net.set_normalization(xs.mean(0), xs.std(0) + 0.05)
    env.close()
    return net, {"layout": layout.to_dict(), "task": spec.name}, xs


class KeepInfos(BaseCallback):
    """Keeps a copy of the first env's info dict at every step (``infos``)."""

    def __init__(self):
        super().__init__()
        self.infos = []

    def _on_step(self) -> bool:
        self.infos.append(dict(self.locals["infos"][0]))
        return True


class Killed(Exception):
    pass


class KillAt(BaseCallback):
    """Raises at env step ``at`` (as a kill would stop the process there)."""

    def __init__(self, at):
        super().__init__()
        self.at = at

    def _on_step(self):
        if self.num_timesteps >= self.at:
            raise Killed
        return True
