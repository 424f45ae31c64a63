"""SB3VecPRMRewardShaper: one critic call per vector step; rewards equal the single-env shaper's."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

pytest.importorskip("gymnasium_robotics")

from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize  # noqa: E402

from prm_critic.robotics.make import make_env  # noqa: E402
from prm_critic.robotics.subgoals import SubgoalCritic  # noqa: E402
from prm_critic.sb3 import SB3VecPRMRewardShaper  # noqa: E402
from prm_critic.wrappers import PRMRewardShaper  # noqa: E402
from wrappers_helpers import CountingCritic, ListEnv, torch_critic  # noqa: E402

N_ENVS = 3


def _rollout(venv, actions):
    venv.seed(7)
    venv.reset()
    out = []
    for a in actions:
        _, r, d, infos = venv.step(a)
        out.append((r.copy(), d.copy(), [dict(i) for i in infos]))
    return out


@pytest.mark.parametrize("mode", ["potential", "subgoal", "replace"])
def test_vec_twin_calls_critic_once_per_step_and_matches_single_env(mode):
    task = "FetchReach-v4"
    probe = make_env(task)
    critic = CountingCritic(SubgoalCritic(task, probe))
    kw = dict(gamma=0.9, mode=mode, scale=1.5, info_subgoals=True)
    # episodes of 4, 5, 6 steps: dones (time-limit truncations) at different vector steps
    fns = [lambda k=k: make_env(task, max_episode_steps=4 + k) for k in range(N_ENVS)]
    rng = np.random.default_rng(0)
    actions = rng.uniform(-1, 1, size=(13, N_ENVS, 4)).astype(np.float32)

    vec = SB3VecPRMRewardShaper(DummyVecEnv(fns), critic, **kw)
    critic.batches.clear()
    vec_out = _rollout(vec, actions)
    # 1 call at reset + exactly 1 per vector step, each with n_envs rows + one per done env
    assert len(critic.batches) == 1 + len(actions)
    assert critic.batches[0] == N_ENVS
    assert critic.batches[1:] == [N_ENVS + int(d.sum()) for _, d, _ in vec_out]
    assert sum(int(d.sum()) for _, d, _ in vec_out) >= 6  # autoresets really happened

    single = DummyVecEnv([lambda f=f: PRMRewardShaper(f(), critic, **kw) for f in fns])
    single_out = _rollout(single, actions)
    for (rv, dv, iv), (rs, ds, is_) in zip(vec_out, single_out):
        np.testing.assert_array_equal(dv, ds)
        np.testing.assert_allclose(rv, rs, rtol=1e-6, atol=1e-6)
        for a, b in zip(iv, is_):
            assert a["prm_terminated"] == b["prm_terminated"] is False  # Fetch only truncates
            assert a["prm_shaping"] == pytest.approx(b["prm_shaping"], abs=1e-9)
            assert a["prm_phi"] == pytest.approx(b["prm_phi"], abs=1e-9)
            np.testing.assert_array_equal(a["prm_next_x"], b["prm_next_x"])
            assert a["prm_subgoals"] == b["prm_subgoals"]


def test_vec_twin_terminal_rule_matches_single_env():
    # terminated episodes: Phi(s') = 0 at the terminal step, Phi(reset obs) afterwards
    critic = torch_critic(3, seed=1)
    paths = [[[0.0, 0.0, 0.0], [1.0, 0.5, 0.0], [2.0, 1.0, 0.5]],
             [[1.0, 1.0, 1.0], [0.0, 1.0, 2.0]]]
    fns = [lambda p=p, t=t: ListEnv(p, terminate_at_end=t) for p, t in zip(paths, (True, False))]
    actions = np.zeros((7, 2, 1), np.float32)
    vec_out = _rollout(SB3VecPRMRewardShaper(DummyVecEnv(fns), critic, gamma=0.8, scale=3.0), actions)
    single_out = _rollout(DummyVecEnv([lambda f=f: PRMRewardShaper(f(), critic, gamma=0.8, scale=3.0) for f in fns]),
                          actions)
    saw_term = False
    for (rv, dv, iv), (rs, _, is_) in zip(vec_out, single_out):
        np.testing.assert_allclose(rv, rs, rtol=1e-6, atol=1e-6)
        for a, b in zip(iv, is_):
            assert a["prm_terminated"] == b["prm_terminated"]
            if a["prm_terminated"]:
                saw_term = True
                assert a["prm_shaping"] == pytest.approx(-3.0 * a["prm_phi"], abs=1e-9)
    assert saw_term


def test_vec_twin_warns_outside_vecnormalize():
    critic = torch_critic(3)
    venv = VecNormalize(DummyVecEnv([lambda: ListEnv([[0.0] * 3, [1.0] * 3])]))
    with pytest.warns(UserWarning, match="off-policy algorithms ignore its reward"):
        SB3VecPRMRewardShaper(venv, critic, gamma=0.99)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        # the critic declares no task: that warning is another check's (tests/test_faults_critic_metadata.py)
        warnings.filterwarnings("ignore", message=r".*task/env check was skipped")
        VecNormalize(SB3VecPRMRewardShaper(DummyVecEnv([lambda: ListEnv([[0.0] * 3, [1.0] * 3])]), critic, gamma=0.99))


def test_vec_twin_deadline_fallback_zeroes_shaping_for_that_step_and_the_next():
    from wrappers_helpers import SlowCritic

    base = torch_critic(3, seed=2)
    critic = SlowCritic(base, fail={2})  # call 0: reset, 1: step 1, 2: step 2 fails
    path = [[float(k), 0.0, 1.0] for k in range(8)]
    venv = SB3VecPRMRewardShaper(DummyVecEnv([lambda: ListEnv(path)] * 2), critic, gamma=0.9, deadline_s=1.0)
    out = _rollout(venv, np.zeros((4, 2, 1), np.float32))
    shaping = np.array([[i["prm_shaping"] for i in infos] for _, _, infos in out])
    fell = [infos[0]["prm_fallback"] for _, _, infos in out]
    assert fell == [False, True, False, False]
    assert np.all(shaping[1] == 0.0) and np.all(shaping[2] == 0.0)  # Phi(s) unknown after the fallback
    assert np.all(shaping[0] != 0.0) and np.all(shaping[3] != 0.0)
    np.testing.assert_allclose(out[1][0], 0.5)  # reward unchanged
    assert venv.stats == {"calls": 5, "fallbacks": 1, "timeouts": 0, "errors": 1, "busy": 0}
