"""Shaper + pruner stacked on the real MuJoCo tasks pass gymnasium's and SB3's env checkers."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

pytest.importorskip("gymnasium_robotics")

from gymnasium.utils.env_checker import check_env as gym_check_env  # noqa: E402
from stable_baselines3.common.env_checker import check_env as sb3_check_env  # noqa: E402

from prm_critic.models.state_critic import StateCriticNet, TorchStateCritic  # noqa: E402
from prm_critic.robotics.make import CriticInputLayout, make_env  # noqa: E402
from prm_critic.robotics.spec import load_spec  # noqa: E402
from prm_critic.robotics.subgoals import SubgoalCritic  # noqa: E402
from prm_critic.wrappers import DeadEndPruner, PRMRewardShaper  # noqa: E402

TASKS = ["FetchReach-v4", "FetchPush-v4", "FetchPickAndPlace-v4", "PointMaze_UMaze-v3",
         "PointMaze_Medium-v3", "FrankaKitchen-v1", "Pusher-v5"]


def _stack(env, critic, **shaper_kw):
    env = PRMRewardShaper(env, critic, gamma=0.98, **shaper_kw)
    return DeadEndPruner(env, critic, threshold=0.05, patience=3)


def _check_both(env):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gym_check_env(env, skip_render_check=True)
        sb3_check_env(env, warn=False)


@pytest.mark.parametrize("task", TASKS)
def test_shaper_and_pruner_pass_env_checkers(task):
    env = make_env(task)
    critic = SubgoalCritic(task, env)
    wrapped = _stack(env, critic, info_subgoals=True)
    _check_both(wrapped)
    # a few real steps: the info keys are there and the reward is r + shaping
    obs, _ = wrapped.reset(seed=1)
    for _ in range(3):
        obs, r, term, trunc, info = wrapped.step(wrapped.action_space.sample())
        assert r == pytest.approx(info["prm_original_reward"] + info["prm_shaping"], abs=1e-12)
        assert set(info["prm_subgoals"]) == {s.name for s in load_spec(task).subgoals}
        assert info["prm_next_x"].dtype == np.float32 and info["prm_next_x"].shape == (critic.obs_dim,)
        assert "prm_pruned" in info
    wrapped.close()


def test_torch_state_critic_passes_env_checkers():
    env = make_env("FetchPush-v4")
    layout = CriticInputLayout.from_space(load_spec("FetchPush-v4"), env.observation_space)
    critic = TorchStateCritic(StateCriticNet(layout.obs_dim, hidden=(32, 32)), {"layout": layout.to_dict()})
    wrapped = _stack(env, critic, head="success")  # layout comes from critic.meta["layout"]
    assert wrapped.unwrapped is env.unwrapped
    _check_both(wrapped)
    obs, _ = wrapped.reset(seed=0)
    obs, r, term, trunc, info = wrapped.step(wrapped.action_space.sample())
    expected_next = float(critic.score(layout.flatten(obs)[None]).success[0])
    assert info["prm_next_phi"] == pytest.approx(expected_next, abs=1e-7)
    assert "prm_subgoals" not in info  # no spec known for a bare torch critic
    with pytest.raises(ValueError, match=r"spec: info_subgoals=True needs a task spec with \[\[subgoals\]\].*got None"):
        PRMRewardShaper(make_env("FetchPush-v4"), critic, gamma=0.98, info_subgoals=True)
