"""Snapshots replay bit-identically on real MuJoCo envs (FetchPush, PointMaze, FrankaKitchen)."""

import json

import numpy as np
import pytest

pytest.importorskip("gymnasium_robotics")

from prm_critic.robotics.make import make_env  # noqa: E402
from prm_critic.robotics.snapshot import Snapshot, Snapshotter  # noqa: E402


def _vec(obs):
    if isinstance(obs, dict):
        return np.concatenate([np.asarray(obs[k], dtype=np.float64).ravel() for k in sorted(obs)])
    return np.asarray(obs, dtype=np.float64).copy()


def _run(env, actions):
    out, infos = [], []
    for a in actions:
        obs, r, term, trunc, info = env.step(a)
        out.append(np.append(_vec(obs), [r, term, trunc]))
        infos.append(info)
    return np.stack(out), infos


@pytest.mark.parametrize("task", ["FetchPush-v4", "PointMaze_UMaze-v3", "FrankaKitchen-v1"])
def test_restore_replays_bit_identical(task):
    env = make_env(task, max_episode_steps=80)
    env.reset(seed=11)
    rng = np.random.default_rng(0)
    shape = env.action_space.shape
    for _ in range(12):  # mid-episode
        env.step(rng.uniform(-1, 1, shape))
    snap = Snapshotter(env)
    s = snap.get()
    # serialise through plain arrays + JSON, as shards store it
    sim, py = s.to_arrays()
    assert sim.dtype == np.float64 and isinstance(py, str)
    s2 = Snapshot.from_arrays(sim.copy(), json.loads(py))
    actions = rng.uniform(-1, 1, (20,) + shape)
    first, _ = _run(env, actions)
    # a different continuation in between, same env reused
    snap.restore(s2)
    _run(env, rng.uniform(-1, 1, (9,) + shape))
    snap.restore(s2)
    again, _ = _run(env, actions)
    assert np.array_equal(first, again)
    # a third time, straight after another restore
    snap.restore(s)
    third, _ = _run(env, actions)
    assert np.array_equal(first, third)
    env.close()


def test_time_limit_counter_is_restored():
    env = make_env("FetchPush-v4", max_episode_steps=15)
    env.reset(seed=1)
    a = np.zeros(env.action_space.shape)
    for _ in range(10):
        env.step(a)
    snap = Snapshotter(env)
    s = snap.get()
    for _ in range(5):
        *_, trunc, _ = env.step(a)
    assert trunc
    snap.restore(s)
    truncs = [env.step(a)[3] for _ in range(5)]
    assert truncs == [False] * 4 + [True]


def test_pointmaze_goal_and_marker_restored():
    env = make_env("PointMaze_UMaze-v3")
    env.reset(seed=3)
    snap = Snapshotter(env)
    s = snap.get()
    base = env.unwrapped
    marker = base.model.site_pos[base.target_site_id].copy()
    goal = base.goal.copy()
    env.reset(seed=4)  # a new episode moves goal and marker
    assert not np.array_equal(base.goal, goal)
    snap.restore(s)
    assert np.array_equal(base.goal, goal)
    assert np.array_equal(base.model.site_pos[base.target_site_id], marker)


def test_restore_rejects_a_snapshot_of_another_env():
    fetch = make_env("FetchPush-v4")
    fetch.reset(seed=0)
    maze = make_env("PointMaze_UMaze-v3")
    maze.reset(seed=0)
    with pytest.raises(ValueError, match=r"snapshot\.sim: expected shape"):
        Snapshotter(maze).restore(Snapshotter(fetch).get())
    with pytest.raises(ValueError, match=r"py: expected a JSON object"):
        Snapshot.from_arrays(np.zeros(3), "not json")
