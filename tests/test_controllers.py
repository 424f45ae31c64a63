"""Scripted controllers on real envs: clean versions solve the task, noisy ones give both outcomes."""

import numpy as np
import pytest

pytest.importorskip("gymnasium_robotics")

from prm_critic.robotics.controllers import (  # noqa: E402
    PointMazeController, SB3Controller, load_sb3_model, make_controller,
)
from prm_critic.robotics.make import make_env, success_from_info  # noqa: E402
from prm_critic.robotics.spec import load_spec  # noqa: E402


def _episodes(task, n, max_steps=None, **params):
    spec = load_spec(task)
    env = make_env(spec, **({"max_episode_steps": max_steps} if max_steps else {}))
    ctrl = make_controller(spec, env, **params)
    results, actions = [], []
    for e in range(n):
        obs, _ = env.reset(seed=100 + e)
        ctrl.reset(obs, np.random.default_rng(e))
        flags = []
        while True:
            a = ctrl.act(obs)
            assert a.shape == env.action_space.shape and a.dtype == np.float32
            assert np.all(a >= env.action_space.low) and np.all(a <= env.action_space.high)
            actions.append(a)
            obs, _, term, trunc, info = env.step(a)
            flags.append(success_from_info(spec, info))
            if term or trunc:
                break
        results.append(flags[-1] if spec.success.rule == "final" else any(flags))
    env.close()
    return np.asarray(results), np.asarray(actions)


@pytest.mark.parametrize("task,n", [("FetchReach-v4", 3), ("FetchPush-v4", 4), ("FetchPickAndPlace-v4", 3),
                                    ("PointMaze_UMaze-v3", 4)])
def test_clean_controllers_solve_the_task(task, n):
    ok, _ = _episodes(task, n, noise=0.0, random_prob=0.0)
    assert ok.all(), f"{task}: clean scripted controller failed {np.nonzero(~ok)[0].tolist()}"


def test_noisy_pointmaze_controller_yields_successes_and_failures():
    ok, _ = _episodes("PointMaze_UMaze-v3", 12, max_steps=150)
    assert 0 < ok.sum() < len(ok)


def test_noisy_fetch_push_controller_yields_successes_and_failures():
    ok, _ = _episodes("FetchPush-v4", 8)
    assert 0 < ok.sum() < len(ok)


def test_controllers_are_reproducible_from_the_rng():
    _, a1 = _episodes("PointMaze_UMaze-v3", 2, max_steps=40)
    _, a2 = _episodes("PointMaze_UMaze-v3", 2, max_steps=40)
    assert np.array_equal(a1, a2)


def test_pointmaze_next_cell_table_follows_bfs():
    env = make_env("PointMaze_Medium-v3")
    env.reset(seed=0)
    ctrl = make_controller("PointMaze_Medium-v3", env)
    assert isinstance(ctrl, PointMazeController)
    m = ctrl.maze
    for c in range(len(m.cells)):
        for g in range(len(m.cells)):
            nxt = ctrl._next[c, g]
            if c == g:
                assert nxt == c
            else:
                assert m.dist[c, nxt] == 1 and m.dist[nxt, g] == m.dist[c, g] - 1


def test_bad_controller_name_and_parameters():
    env = make_env("FetchReach-v4")
    with pytest.raises(ValueError, match=r"controller: expected one of .*, got 'fetch_rech'; did you mean 'fetch_reach'"):
        make_controller("FetchReach-v4", env, name="fetch_rech")
    with pytest.raises(ValueError, match=r"random_prob: expected a number in \[0, 1\], got 1.5"):
        make_controller("FetchReach-v4", env, random_prob=1.5)
    with pytest.raises(ValueError, match=r"controller 'fetch_reach': bad parameters"):
        make_controller("FetchReach-v4", env, speed=2)


def test_sb3_controller_and_model_loading(tmp_path):
    sb3 = pytest.importorskip("stable_baselines3")
    env = make_env("FetchReach-v4")
    model = sb3.SAC("MultiInputPolicy", env, learning_starts=0, buffer_size=100, device="cpu", seed=0)
    path = tmp_path / "sac.zip"
    model.save(path)
    loaded = load_sb3_model(path, trust_pickle=True)  # a file this test wrote itself
    assert type(loaded).__name__ == "SAC"
    ctrl = SB3Controller(loaded)
    obs, _ = env.reset(seed=0)
    ctrl.reset(obs, np.random.default_rng(0))
    a1 = ctrl.act(obs)
    ctrl.reset(obs, np.random.default_rng(0))
    a2 = ctrl.act(obs)
    assert a1.shape == (4,) and np.array_equal(a1, a2)
    bad = tmp_path / "bad.zip"
    bad.write_bytes(b"not a zip")
    with pytest.raises(ValueError, match="not a stable-baselines3 model zip"):
        load_sb3_model(bad, trust_pickle=True)
