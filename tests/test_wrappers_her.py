"""HER relabelling sees shaped rewards consistent with an independent recomputation."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("gymnasium_robotics")

from stable_baselines3 import SAC, HerReplayBuffer  # noqa: E402

from prm_critic.robotics.make import make_env  # noqa: E402
from prm_critic.robotics.subgoals import SubgoalCritic  # noqa: E402
from prm_critic.wrappers import DeadEndPruner, PRMRewardShaper  # noqa: E402

GAMMA = 0.95


@pytest.fixture
def one_torch_thread():
    # tiny MLPs: intra-op threads only oversubscribe the shared cores (48 s vs 4 s measured here)
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _fetch_reward(achieved, desired):
    # FetchReach's sparse reward, written out independently: -1 unless within 5 cm
    return -(np.linalg.norm(achieved - desired, axis=-1) > 0.05).astype(np.float64)


def test_sac_her_trains_and_relabelled_rewards_match_recomputation(one_torch_thread):
    env = make_env("FetchReach-v4", max_episode_steps=25)
    critic = SubgoalCritic("FetchReach-v4", env)
    shaped = PRMRewardShaper(env, critic, gamma=GAMMA, scale=2.0)
    model = SAC("MultiInputPolicy", shaped, replay_buffer_class=HerReplayBuffer,
                replay_buffer_kwargs=dict(n_sampled_goal=4, goal_selection_strategy="future", copy_info_dict=True),
                learning_starts=100, batch_size=32, gamma=GAMMA, policy_kwargs=dict(net_arch=[32, 32]),
                buffer_size=2000, seed=0, device="cpu")
    model.learn(300)
    rb = model.replay_buffer
    assert rb.pos == 300 or rb.full

    rng = np.random.default_rng(0)
    bi = rng.integers(0, 300, size=64)
    ei = np.zeros(64, dtype=np.int64)
    samples = rb._get_virtual_samples(bi, ei)  # what rb.sample() returns for the relabelled part
    new_goals = samples.observations["desired_goal"].numpy()
    next_achieved = samples.next_observations["achieved_goal"].numpy()
    rewards = samples.rewards.numpy().reshape(-1)

    infos = rb.infos[bi, ei]
    layout = critic.layout
    des = layout.slices["desired_goal"]
    expected = np.empty(64)
    relabelled = 0
    for k, info in enumerate(infos):
        assert info["prm_terminated"] is False  # Fetch never terminates
        x, xn = info["prm_x"].copy(), info["prm_next_x"].copy()
        relabelled += not np.array_equal(x[des], new_goals[k].astype(np.float32))
        x[des] = new_goals[k]
        xn[des] = new_goals[k]
        phi = critic.score(np.stack([x, xn])).progress.astype(np.float64)
        expected[k] = _fetch_reward(next_achieved[k], new_goals[k]) + 2.0 * (GAMMA * phi[1] - phi[0])
    assert relabelled > 32  # most goals really were replaced
    np.testing.assert_allclose(rewards, expected, atol=1e-5)  # rewards are stored as float32
    # not a constant: the shaping term moves with the relabelled goal
    assert np.ptp(rewards - _fetch_reward(next_achieved, new_goals)) > 1e-3


def test_compute_reward_without_copied_infos_says_what_to_do():
    env = PRMRewardShaper(make_env("FetchReach-v4"), SubgoalCritic("FetchReach-v4", make_env("FetchReach-v4")),
                          gamma=GAMMA)
    obs, _ = env.reset(seed=0)
    ag = np.stack([obs["achieved_goal"]] * 2)
    dg = np.stack([obs["desired_goal"]] * 2)
    with pytest.raises(ValueError, match=r"replay_buffer_kwargs=dict\(copy_info_dict=True\)"):
        env.compute_reward(ag, dg, [{}, {}])


def test_compute_reward_batched_matches_step_rewards_through_pruner():
    env = make_env("PointMaze_UMaze-v3")
    critic = SubgoalCritic("PointMaze_UMaze-v3", env)
    wrapped = DeadEndPruner(PRMRewardShaper(env, critic, gamma=GAMMA), critic, threshold=0.0, patience=1)
    obs, _ = wrapped.reset(seed=3)
    ags, dgs, infos, rewards = [], [], [], []
    for _ in range(10):
        obs, r, term, trunc, info = wrapped.step(wrapped.action_space.sample())
        ags.append(obs["achieved_goal"])
        dgs.append(obs["desired_goal"])
        infos.append(info)
        rewards.append(r)
    out = wrapped.compute_reward(np.stack(ags), np.stack(dgs), np.array(infos))
    assert out.shape == (10,)
    np.testing.assert_array_equal(out, np.asarray(rewards))  # cached Phi: exact
    # a moved goal recomputes Phi with the new goal (and changes the reward)
    moved = np.stack(dgs) + 0.5
    out2 = wrapped.compute_reward(np.stack(ags), moved, np.array(infos))
    assert not np.allclose(out2, out)


def test_compute_reward_with_goal_independent_critic():
    # a critic that sees only "observation": relabelling changes the base reward, not the potential
    from prm_critic.models.state_critic import StateCriticNet, TorchStateCritic
    from prm_critic.robotics.make import CriticInputLayout

    env = make_env("FetchReach-v4")
    layout = CriticInputLayout(["observation"], {"observation": 10})
    critic = TorchStateCritic(StateCriticNet(10, hidden=(8,)), {"layout": layout.to_dict()})
    wrapped = PRMRewardShaper(env, critic, gamma=GAMMA)
    obs, _ = wrapped.reset(seed=0)
    obs, r, *_, info = wrapped.step(wrapped.action_space.sample())
    far = obs["desired_goal"] + 1.0
    near = obs["achieved_goal"].copy()
    out = wrapped.compute_reward(np.stack([near, near]), np.stack([far, near]), [info, info])
    np.testing.assert_allclose(out, np.array([-1.0, 0.0]) + info["prm_shaping"], atol=1e-12)
