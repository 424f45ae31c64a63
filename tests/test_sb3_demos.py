"""Demonstrations without a reward model: in the replay buffer (replayed through the shaper) and as
episode starts (restored exactly)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("gymnasium_robotics")
torch = pytest.importorskip("torch")

from prm_critic.robotics.demos import load_demos  # noqa: E402
from sb3_helpers import one_torch_thread  # noqa: E402, F401  (the fixture, used by every test here)

pytestmark = pytest.mark.usefixtures("one_torch_thread")

PUSH_CRITIC = Path(__file__).resolve().parents[1] / "benchmarks" / "rl" / "critics" / "push_demo.json"
KW = dict(learning_starts=60, batch_size=32, gamma=0.95, policy_kwargs=dict(net_arch=[16, 16]), device="cpu")


@pytest.fixture(scope="module")
def demos(tmp_path_factory):
    from prm_critic.robotics.collection import collect

    out = tmp_path_factory.mktemp("sb3demos") / "push"
    collect("FetchPush-v4", out, episodes=6, seed=50000, progress=False)
    return load_demos(out, n=2)


def test_buffer_keeps_the_demonstrations_and_relabels_them_through_the_shaper(demos):
    from prm_critic.sb3 import train_policy

    model = train_policy("FetchPush-v4", critic=str(PUSH_CRITIC), shaping="potential", scale=10.0, her=True,
                         total_steps=150, seed=0, algo_kwargs=KW, progress=False, demos=demos, demo_buffer=True)
    rb, env = model.replay_buffer, model.get_env()
    n = len(demos.t)
    assert model.prm_demo_steps == n and rb.pos == n + 150 and rb.buffer_size >= n + 150
    assert model.prm_config["demos"]["sha256"] == demos.sha256 and model.prm_config["demos"]["buffer"] is True
    lay = demos.layout
    for key in lay.keys:  # the first n rows are the demonstrations, state by state, in order
        np.testing.assert_array_equal(rb.observations[key][:n, 0].astype(np.float32), demos.x[:, lay.slices[key]])
        np.testing.assert_array_equal(rb.next_observations[key][:n, 0].astype(np.float32),
                                      demos.next_x[:, lay.slices[key]])
    np.testing.assert_allclose(rb.actions[:n, 0], demos.action, rtol=0, atol=1e-7)
    assert (rb.ep_length[:n, 0] > 0).all()  # whole episodes HER can sample and relabel
    assert rb.ep_length[0, 0] == demos.blocks()[0][1]
    # the stored rewards are the shaper's: its relabelling of the stored goal gives them back exactly
    from prm_critic.wrappers.prm_reward_shaper import RelabelRows

    rows = RelabelRows(rb.prm_rows["x"][:n, 0], rb.prm_rows["next_x"][:n, 0], rb.prm_rows["terminated"][:n, 0],
                       np.full(n, np.nan))
    infos = [dict(d) for d in rb.infos[:n, 0]]
    want = env.env_method("compute_reward_rows", rb.next_observations["achieved_goal"][:n, 0],
                          rb.observations["desired_goal"][:n, 0], rows, infos, indices=[0])[0]
    np.testing.assert_allclose(rb.rewards[:n, 0], want, rtol=0, atol=2e-5)
    assert len(np.unique(rb.rewards[:n, 0])) > 10  # shaped, not the sparse -1 / 0


def test_demonstration_starts_restore_the_recorded_state_exactly(demos):
    from prm_critic.robotics.make import make_env
    from prm_critic.wrappers.demo_starts import DemoStarts

    env = DemoStarts(make_env("FetchPush-v4"), demos, prob=1.0)
    obs, info = env.reset(seed=3)
    row = info["demo_start"]
    assert row is not None
    np.testing.assert_array_equal(demos.layout.flatten(obs).astype(np.float32), demos.x[row])
    k = next(i for i, (b, e) in enumerate(demos.blocks()) if b <= row < e)
    assert demos.t[row] < demos.steps_to_success()[k]  # a state before the demonstration's first success
    # the demonstration's own next action replays its recorded next state, bit for bit
    nxt, *_ = env.step(demos.action[row])
    np.testing.assert_array_equal(demos.layout.flatten(nxt).astype(np.float32), demos.next_x[row])
    # the time limit counts from the start: a whole episode's steps are left
    limit = env.spec.max_episode_steps
    assert limit == 50
    env.reset(seed=4)
    for _ in range(limit - 1):
        *_, terminated, truncated, _ = env.step(env.action_space.sample())
        assert not truncated
    *_, truncated, _ = env.step(env.action_space.sample())
    assert truncated
    # prob 0: the env's own reset, as without the wrapper
    plain = DemoStarts(make_env("FetchPush-v4"), demos, prob=0.0)
    a, info0 = plain.reset(seed=5)
    b, _ = make_env("FetchPush-v4").reset(seed=5)
    assert info0["demo_start"] is None
    np.testing.assert_array_equal(demos.layout.flatten(a), demos.layout.flatten(b))


def test_maze_demonstration_starts_restore_the_recorded_state_exactly(tmp_path):
    """The mazes read their observation through the inner point env (which returns ``(obs, info)``)."""
    from prm_critic.robotics.collection import collect
    from prm_critic.robotics.make import make_env
    from prm_critic.wrappers.demo_starts import DemoStarts

    spec = Path(__file__).resolve().parents[1] / "benchmarks" / "rl" / "specs" / "continuing.toml"
    collect(str(spec), tmp_path / "maze", episodes=6, seed=50000, progress=False)
    maze = load_demos(tmp_path / "maze", n=1)
    env = DemoStarts(make_env(maze.spec), maze, prob=1.0)
    for seed in range(3):
        obs, info = env.reset(seed=seed)
        row = info["demo_start"]
        np.testing.assert_array_equal(maze.layout.flatten(obs).astype(np.float32), maze.x[row])
        nxt, *_ = env.step(maze.action[row])
        np.testing.assert_array_equal(maze.layout.flatten(nxt).astype(np.float32), maze.next_x[row])


def test_demonstrations_of_another_env_or_unused_are_refused(demos):
    from prm_critic.robotics.make import make_env
    from prm_critic.sb3 import train_policy
    from prm_critic.wrappers.demo_starts import DemoStarts

    with pytest.raises(ValueError, match="demonstrations of 'FetchPush-v4' cannot start episodes of env 'FetchReach-v4'"):
        DemoStarts(make_env("FetchReach-v4"), demos)
    with pytest.raises(ValueError, match="neither demo_buffer=True nor demo_starts > 0"):
        train_policy("FetchPush-v4", her=True, total_steps=100, demos=demos, progress=False)
    with pytest.raises(ValueError, match="need demonstrations"):
        train_policy("FetchPush-v4", her=True, total_steps=100, demo_buffer=True, progress=False)
    with pytest.raises(ValueError, match="cannot train 'FetchReach-v4'"):
        train_policy("FetchReach-v4", her=True, total_steps=100, demos=demos, demo_buffer=True, progress=False)
    with pytest.raises(ValueError, match="demo_starts"):
        train_policy("FetchPush-v4", her=True, total_steps=100, demos=demos, demo_starts=1.5, progress=False)


def test_a_state_that_does_not_replay_is_refused(demos):
    from dataclasses import replace

    from prm_critic.robotics.make import make_env
    from prm_critic.robotics.snapshot import ReplayMismatchError
    from prm_critic.wrappers.demo_starts import DemoStarts

    x = demos.x.copy()
    x[:, 0] += 1e-3  # recorded from another state than its snapshot
    env = DemoStarts(make_env("FetchPush-v4"), replace(demos, x=x), prob=1.0)
    with pytest.raises(ReplayMismatchError, match="restored observation differs"):
        env.reset(seed=0)
