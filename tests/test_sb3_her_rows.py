"""PRMHerReplayBuffer: relabelled rewards identical to SB3's HerReplayBuffer(copy_info_dict=True) path."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("gymnasium_robotics")
torch = pytest.importorskip("torch")

from stable_baselines3 import HerReplayBuffer  # noqa: E402

from prm_critic.sb3.envs import make_vec_train_env, resolve_critic  # noqa: E402
from prm_critic.sb3.her import PRMHerReplayBuffer  # noqa: E402
from prm_critic.sb3.train import build_model  # noqa: E402

PUSH_CRITIC = Path(__file__).resolve().parents[1] / "benchmarks" / "rl" / "critics" / "push_mc.json"
KW = dict(learning_starts=120, batch_size=64, gamma=0.95, buffer_size=2000, policy_kwargs=dict(net_arch=[16, 16]),
          device="cpu")


@pytest.fixture(autouse=True)
def one_torch_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _model(critic, *, shaped: bool, n_envs: int = 1, seed: int = 0):
    venv = make_vec_train_env("FetchPush-v4", n_envs, seed=seed, critic=critic, shaping="potential", scale=10.0,
                              gamma=0.95, head="success", max_episode_steps=20)
    return build_model("sac", venv, her=True, algo_kwargs=dict(KW), seed=seed, shaped=shaped)


@pytest.mark.parametrize("n_envs", [1, 2])
def test_rows_buffer_gives_bit_identical_rewards_and_training(n_envs):
    critic = resolve_critic(PUSH_CRITIC, "FetchPush-v4")  # a learned critic: relabelled goals are re-scored
    old = _model(critic, shaped=False, n_envs=n_envs)  # seeds the global RNGs: learn before building the next
    old.learn(200)
    new = _model(critic, shaped=True, n_envs=n_envs)
    new.learn(200)
    assert type(old.replay_buffer) is HerReplayBuffer and old.replay_buffer.copy_info_dict
    assert type(new.replay_buffer) is PRMHerReplayBuffer
    # training on the same samples with the same rewards: the same weights, bit for bit
    for (k, a), (_, b) in zip(old.policy.state_dict().items(), new.policy.state_dict().items()):
        assert torch.equal(a, b), k
    for seed in range(4):
        np.random.seed(seed)
        a = old.replay_buffer.sample(256)
        np.random.seed(seed)
        b = new.replay_buffer.sample(256)
        assert torch.equal(a.rewards, b.rewards)
        for key in a.observations:
            assert torch.equal(a.observations[key], b.observations[key])
    # the relabelled part really was re-scored: shaping varies beyond the sparse -1/0 reward
    r = b.rewards.numpy().reshape(-1)
    assert len(np.unique(r)) > 10
    assert not new.replay_buffer.copy_info_dict
    assert not any(k.startswith("prm_") for k in new.replay_buffer.infos[0, 0])


def test_rows_buffer_refuses_an_env_without_the_shaper():
    venv = make_vec_train_env("FetchPush-v4", 1, seed=0, max_episode_steps=20)
    with pytest.raises(AttributeError, match="relabel_width"):
        build_model("sac", venv, her=True, algo_kwargs=dict(KW), seed=0, shaped=True)
