"""Potential-based shaping: invariance over closed loops, the terminal rule, modes, deadline."""

from __future__ import annotations


import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prm_critic.wrappers import PRMRewardShaper
from wrappers_helpers import ListEnv, SlowCritic, torch_critic, wait_for_handover

D = 3
_state = st.lists(st.floats(-5, 5, allow_nan=False, width=32), min_size=D, max_size=D)
CRITIC = torch_critic(D, seed=0)


def _phi(x) -> float:
    return float(CRITIC.score(np.asarray(x, np.float32).reshape(1, -1)).progress[0])


def _run(env):
    env.reset(seed=0)
    infos, rewards = [], []
    while True:
        _, r, term, trunc, info = env.step(env.action_space.sample())
        infos.append(info)
        rewards.append(r)
        if term or trunc:
            return rewards, infos


@settings(max_examples=40, deadline=None)
@given(loop=st.lists(_state, min_size=1, max_size=8), scale=st.floats(0.1, 10.0))
def test_closed_loop_earns_zero_net_shaping_with_gamma_one(loop, scale):
    # s0, s1, ..., sn = s0, ending by truncation (so Phi(sn) is kept). With gamma = 1 the shaping
    # telescopes: sum_k (Phi(s_{k+1}) - Phi(s_k)) = Phi(sn) - Phi(s0) = 0. Phi values are float32
    # critic outputs; each difference is exact in float64 and the float64 sum of <= 8 terms of
    # size <= 10 rounds by at most ~1e-14, so 1e-9 is a tolerance only rounding can meet.
    states = loop + [loop[0]]
    env = PRMRewardShaper(ListEnv(states), CRITIC, gamma=1.0, scale=scale)
    rewards, infos = _run(env)
    assert len(infos) == len(states) - 1
    net = sum(i["prm_shaping"] for i in infos)
    assert abs(net) < 1e-9
    assert abs(sum(rewards) - 0.5 * len(infos)) < 1e-9


@settings(max_examples=40, deadline=None)
@given(path=st.lists(_state, min_size=2, max_size=6), scale=st.floats(0.1, 10.0),
       gamma=st.floats(0.5, 1.0), terminate=st.booleans())
def test_terminal_rule(path, scale, gamma, terminate):
    env = PRMRewardShaper(ListEnv(path, terminate_at_end=terminate), CRITIC, gamma=gamma, scale=scale)
    _, infos = _run(env)
    for k, info in enumerate(infos):
        phi_s, phi_n = _phi(path[k]), _phi(path[k + 1])
        assert info["prm_phi"] == pytest.approx(phi_s, abs=1e-7)
        assert info["prm_next_phi"] == pytest.approx(phi_n, abs=1e-7)
        last = k == len(infos) - 1
        if last and terminate:
            expected = -scale * phi_s                        # terminated: Phi(s') = 0
        else:
            expected = scale * (gamma * phi_n - phi_s)       # truncated or mid-episode: Phi(s') kept
        assert info["prm_shaping"] == pytest.approx(expected, abs=1e-6)
        assert info["prm_terminated"] == (last and terminate)
        np.testing.assert_array_equal(info["prm_x"], np.asarray(path[k], np.float32))
        np.testing.assert_array_equal(info["prm_next_x"], np.asarray(path[k + 1], np.float32))


def test_replace_mode_and_subgoal_mode():
    path = [[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [2.0, 1.0, 0.0], [2.0, 1.0, 0.0]]
    env = PRMRewardShaper(ListEnv(path), CRITIC, gamma=0.9, mode="replace", scale=2.0)
    rewards, infos = _run(env)
    for k, r in enumerate(rewards):
        assert r == pytest.approx(2.0 * _phi(path[k + 1]), abs=1e-6)
        assert infos[k]["prm_original_reward"] == 0.5

    spec = {"task": {"name": "toy", "env_id": "toy", "critic_input": ["obs"],
                     "success": {"source": "subgoals"}},
            "subgoals": [{"name": "x_at_1", "a": "obs[0:1]", "b": "obs[2:3]", "threshold": 0.5},
                         {"name": "y_at_0", "a": "obs[1:2]", "b": "obs[2:3]", "threshold": 0.5}]}
    # obs = (x, y, 0): x_at_1 holds when |x| < 0.5, y_at_0 when |y| < 0.5; neither holds at reset.
    path = [[3.0, 3.0, 0.0], [0.2, 3.0, 0.0], [3.0, 3.0, 0.0], [0.1, 0.1, 0.0], [0.0, 0.0, 0.0]]
    env = PRMRewardShaper(ListEnv(path), CRITIC, gamma=0.9, mode="subgoal", subgoal_bonus=5.0, spec=spec,
                          info_subgoals=True)
    _, infos = _run(env)
    # x_at_1 first holds at step 1 (bonus), again at 3 and 4 (already claimed); y_at_0 first at step 3
    assert [i["prm_shaping"] for i in infos] == [5.0, 0.0, 5.0, 0.0]
    assert infos[3]["prm_subgoals"] == {"x_at_1": True, "y_at_0": True}
    # the subgoal flags are opt-in: the same bonus without them in the info
    env = PRMRewardShaper(ListEnv(path), CRITIC, gamma=0.9, mode="subgoal", subgoal_bonus=5.0, spec=spec)
    _, infos = _run(env)
    assert [i["prm_shaping"] for i in infos] == [5.0, 0.0, 5.0, 0.0]
    assert all("prm_subgoals" not in i for i in infos)


def test_deadline_timeout_falls_back_without_blocking():
    path = [[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [2.0, 0.0, 0.0], [3.0, 0.0, 0.0], [4.0, 0.0, 0.0], [5.0, 0.0, 0.0]]
    critic = SlowCritic(CRITIC, delay=3.0, slow={1})  # call 0 = reset, call 1 = first step
    env = PRMRewardShaper(ListEnv(path), critic, gamma=0.9, deadline_s=0.3)
    env.reset(seed=0)
    _, r, _, _, info = env.step(env.action_space.sample())
    assert not critic.finished.is_set()  # the step returned without waiting for the 3 s call
    assert info["prm_fallback"] is True and info["prm_shaping"] == 0.0 and r == 0.5
    assert np.isnan(info["prm_next_phi"])
    # the late call is still running: the next step does not queue behind it (busy -> fallback)
    _, r, _, _, info = env.step(env.action_space.sample())
    assert info["prm_fallback"] is True and r == 0.5
    assert critic.finished.wait(10.0)
    wait_for_handover(env)
    # critic is back: Phi(s') known again, but Phi(s) was unknown -> shaping still 0 this step
    _, r, _, _, info = env.step(env.action_space.sample())
    assert info["prm_fallback"] is False and info["prm_shaping"] == 0.0 and np.isnan(info["prm_phi"])
    _, r, _, _, info = env.step(env.action_space.sample())
    assert info["prm_shaping"] == pytest.approx(0.9 * _phi(path[4]) - _phi(path[3]), abs=1e-6)
    s = env.stats
    assert s["timeouts"] == 1 and s["busy"] == 1 and s["fallbacks"] == 2 and s["errors"] == 0
    assert s["calls"] == 5
    env.close()


def test_deadline_exception_falls_back_and_counts():
    path = [[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [2.0, 0.0, 0.0], [3.0, 0.0, 0.0]]
    critic = SlowCritic(CRITIC, fail={2})
    env = PRMRewardShaper(ListEnv(path), critic, gamma=0.9, deadline_s=1.0)
    _, infos = _run(env)
    assert [i["prm_fallback"] for i in infos] == [False, True, False]
    assert infos[0]["prm_shaping"] == pytest.approx(0.9 * _phi(path[1]) - _phi(path[0]), abs=1e-6)
    assert infos[1]["prm_shaping"] == 0.0 and infos[2]["prm_shaping"] == 0.0  # Phi(s) unknown at step 3
    assert env.stats == {"calls": 4, "fallbacks": 1, "timeouts": 0, "errors": 1, "busy": 0}
    assert isinstance(env.last_error, RuntimeError)


def test_without_deadline_critic_errors_propagate():
    critic = SlowCritic(CRITIC, fail={1})
    env = PRMRewardShaper(ListEnv([[0.0] * 3, [1.0] * 3, [2.0] * 3]), critic, gamma=0.9)
    env.reset()
    with pytest.raises(RuntimeError, match="critic failure"):
        env.step(env.action_space.sample())
