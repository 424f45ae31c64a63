"""The exported critic inside the reward shaper: a real FetchPush-v4 env wrapped by PRMRewardShaper
with an OnnxCritic (real onnxruntime session), with and without a deadline."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("gymnasium_robotics")

import torch  # noqa: E402

from prm_critic.models.checkpoint import save_state_critic  # noqa: E402
from prm_critic.models.state_critic import StateCriticNet  # noqa: E402
from prm_critic.onnx import OnnxCritic, export_state_critic  # noqa: E402
from prm_critic.robotics.make import CriticInputLayout, make_env  # noqa: E402
from prm_critic.robotics.spec import load_spec  # noqa: E402
from prm_critic.wrappers import PRMRewardShaper  # noqa: E402

GAMMA = 0.98


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    spec = load_spec("FetchPush-v4")
    env = make_env(spec)
    layout = CriticInputLayout.from_space(spec, env.observation_space)
    env.close()
    torch.manual_seed(0)
    net = StateCriticNet(layout.obs_dim, hidden=(32, 32))
    with torch.no_grad():
        net.head.weight.mul_(5.0)
    d = tmp_path_factory.mktemp("shaper")
    meta = {"task": spec.name, "spec": spec.to_dict(), "layout": layout.to_dict(), "label_family": "subgoal"}
    ckpt = save_state_critic(d / "c", net, meta)
    return net, {1: export_state_critic(ckpt, d / "c.b1.onnx", batch=1),
                 "dynamic": export_state_critic(ckpt, d / "c.onnx")}


@pytest.mark.parametrize("batch", [1, "dynamic"])
@pytest.mark.parametrize("deadline_s", [None, 1.0])
def test_onnx_critic_in_reward_shaper(exported, batch, deadline_s):
    net, paths = exported
    env = make_env("FetchPush-v4")
    critic = OnnxCritic(paths[batch], provider="cpu", env=env)
    assert critic.spec is not None and critic.spec.name == "FetchPush-v4"
    shaped = PRMRewardShaper(env, critic, gamma=GAMMA, deadline_s=deadline_s,
                             info_subgoals=True)  # layout comes from the metadata
    try:
        obs, info = shaped.reset(seed=0)
        shaped.action_space.seed(0)
        for _ in range(15):
            obs, reward, terminated, truncated, info = shaped.step(shaped.action_space.sample())
            with torch.no_grad():
                ref = net(torch.from_numpy(np.stack([info["prm_x"], info["prm_next_x"]]))).numpy()[:, 0]
            assert info["prm_phi"] == pytest.approx(ref[0], rel=1e-4, abs=1e-5)
            assert info["prm_next_phi"] == pytest.approx(ref[1], rel=1e-4, abs=1e-5)
            expected = info["prm_original_reward"] + GAMMA * ref[1] - ref[0]
            assert reward == pytest.approx(expected, rel=1e-4, abs=1e-5)
            assert not info["prm_fallback"] and set(info["prm_subgoals"]) == {"gripper_behind_object", "object_at_goal"}
            # HER consistency: compute_reward on the stored goals reproduces the step reward ...
            r = shaped.compute_reward(obs["achieved_goal"], obs["desired_goal"], info)
            assert float(r) == pytest.approx(reward, abs=1e-6)
        # ... and a batch of relabelled goals goes through the ONNX critic too
        goals = np.stack([obs["achieved_goal"], obs["desired_goal"] + 0.1, obs["desired_goal"]])
        rs = shaped.compute_reward(np.repeat(obs["achieved_goal"][None], 3, 0), goals, [info] * 3)
        assert rs.shape == (3,) and np.all(np.isfinite(rs))
        assert rs[2] == pytest.approx(reward, abs=1e-6)
        assert shaped.stats["calls"] >= 16 and shaped.stats["fallbacks"] == 0
    finally:
        shaped.close()


def test_onnx_critic_in_vec_shaper(exported):
    """One batched ONNX call per vector step (dynamic export; varying batch sizes hit the binding cache)."""
    pytest.importorskip("stable_baselines3")
    from stable_baselines3.common.vec_env import DummyVecEnv

    from prm_critic.sb3 import SB3VecPRMRewardShaper

    net, paths = exported
    critic = OnnxCritic(paths["dynamic"], provider="cpu")
    calls = []
    score_calls = []
    score_rows = critic.score_rows
    score = critic.score

    def counting(x, *, check=True):
        assert check is False  # the shaper validated the batch: the critic does not check it again
        calls.append(len(x))
        return score_rows(x, check=check)

    def counting_score(x):
        score_calls.append(len(x))
        return score(x)

    critic.score_rows = counting
    critic.score = counting_score
    venv = SB3VecPRMRewardShaper(DummyVecEnv([lambda: make_env("FetchPush-v4")] * 3), critic, gamma=GAMMA)
    try:
        venv.seed(0)
        venv.reset()
        calls.clear()
        rng = np.random.default_rng(0)
        for _ in range(52):  # crosses the 50-step time limit: terminal observations join the batch
            _, _, _, infos = venv.step(rng.uniform(-1, 1, (3, 4)).astype(np.float32))
            for info in infos:
                with torch.no_grad():
                    ref = net(torch.from_numpy(np.stack([info["prm_x"], info["prm_next_x"]]))).numpy()[:, 0]
                assert info["prm_phi"] == pytest.approx(ref[0], rel=1e-4, abs=1e-5)
                assert info["prm_next_phi"] == pytest.approx(ref[1], rel=1e-4, abs=1e-5)
        # one batch call per vector step, through the unchecked batch path
        assert len(calls) == 52 and set(calls) >= {3} and max(calls) > 3 and score_calls == []
    finally:
        venv.close()
