"""The batch-1 path of the SubgoalCritic (``score_one``, compiled once from the spec) and of the
evaluator (``holds_one``) scores exactly like the batched numpy path: property tests over random
critic inputs for every built-in spec with subgoals, the RL benchmark's spec files and expression /
approach-point / maze specs written here (both heads, both progress modes), real rollouts, the
fallback for wide subgoals, the input checks, and the wrappers' use of it."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("gymnasium_robotics")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from prm_critic.robotics.make import make_env  # noqa: E402
from prm_critic.robotics.spec import list_builtin_specs, load_spec  # noqa: E402
from prm_critic.robotics.subgoals import SubgoalCritic  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
BUILTIN = sorted(n for n in list_builtin_specs() if load_spec(n).subgoals)
BENCH = sorted(str(p.relative_to(REPO)) for p in (REPO / "benchmarks" / "rl" / "specs").glob("*.toml"))

_MAZE_MEAN = {
    "task": {"name": "MazeMean", "env_id": "PointMaze_Medium-v3", "progress": "mean",
             "critic_input": ["observation", "achieved_goal", "desired_goal"],
             "goal_keys": ["achieved_goal", "desired_goal"], "make_kwargs": {"continuing_task": False},
             "success": {"source": "subgoals"}},
    "subgoals": [
        {"name": "moving", "a": "observation[2:4] * 0.5", "b": [0.25, -0.5], "threshold": 0.2, "scale": 2.0},
        {"name": "path", "kind": "maze_path", "a": "achieved_goal", "b": "desired_goal - [0.5, 0]",
         "threshold": 0.45},
        {"name": "there", "kind": "maze_path", "a": "achieved_goal", "b": "desired_goal", "threshold": 0.3},
    ],
}
_EXPR = {
    "task": {"name": "PushExpr", "env_id": "FetchPush-v4",
             "critic_input": ["observation", "achieved_goal", "desired_goal"],
             "goal_keys": ["achieved_goal", "desired_goal"], "success": {"source": "subgoals"}},
    "subgoals": [
        {"name": "behind", "a": "-(observation[0:3] - observation[3:6]) / 2 + 0.1", "b": [0, 0.05, -0.02],
         "behind": "desired_goal * 3 - achieved_goal * 2", "offset": 0.04, "threshold": 0.08, "scale": 0.5},
        {"name": "lifted", "a": "observation[5:6]", "b": "desired_goal[2:3] + 0.03", "threshold": 0.02, "scale": 0.1},
        {"name": "at_goal", "a": "achieved_goal", "b": "desired_goal", "threshold": 0.05, "scale": 0.3},
    ],
}
SPECS = [*BUILTIN, *BENCH, "MazeMean", "PushExpr"]


@functools.lru_cache(maxsize=None)
def _critic(name: str) -> SubgoalCritic:
    doc = {"MazeMean": _MAZE_MEAN, "PushExpr": _EXPR}.get(name)
    spec = load_spec(doc if doc is not None else (str(REPO / name) if name.endswith(".toml") else name))
    return SubgoalCritic(spec, make_env(spec))


def _rows(critic: SubgoalCritic, data, n: int) -> np.ndarray:
    """``n`` critic inputs: a random scale per row (near the subgoals' thresholds up to far outside a
    maze), random entries, some entries zero or shared between keys (exact ties, goals on points)."""
    scale = data.draw(st.sampled_from([1e-3, 0.03, 0.3, 2.0, 8.0, 1e4]))
    seed = data.draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, critic.obs_dim)) * scale
    x[rng.random(x.shape) < 0.1] = 0.0
    if data.draw(st.booleans()):  # achieved == desired, or the gripper on the object
        x[:, -3:] = x[:, -6:-3] if critic.obs_dim >= 6 else x[:, -3:]
    return x.astype(np.float32)


def _check_same(critic: SubgoalCritic, x: np.ndarray) -> None:
    ref = critic.score(x)
    ev = critic.evaluator
    h = ev.holds(x)
    for i in range(len(x)):
        got = critic.score_one(x[i])
        assert got == critic.score_one(x[i], check=False)
        assert got == (float(ref.progress[i]), float(ref.success[i])), (i, x[i].tolist())
        assert ev.holds_one(x[i]) == tuple(bool(b) for b in h[i])


@pytest.mark.parametrize("name", SPECS)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_score_one_equals_batched_score(name, data):
    critic = _critic(name)
    assert critic._score_row is not None  # the compiled path, not the fallback
    _check_same(critic, _rows(critic, data, 16))


@pytest.mark.parametrize("name", ["PointMaze_UMaze-v3", "PointMaze_Medium-v3", "MazeMean"])
@settings(max_examples=80, deadline=None)
@given(data=st.data())
def test_maze_points_in_walls_on_cell_borders_and_outside(name, data):
    """Maze positions on a grid of cell borders and centres (ties between neighbours), in walls and
    outside the maze, as float32 like the critic sees them."""
    critic = _critic(name)
    maze = critic.evaluator.maze
    s = maze.scaling
    lo_x, lo_y = -maze.x_center - s, -maze.y_center - s
    pts = st.tuples(st.integers(0, 4 * (maze.cols + 2)), st.integers(0, 4 * (maze.rows + 2)))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    x = rng.standard_normal((8, critic.obs_dim)).astype(np.float32) * 0.1
    for i in range(8):
        for sl in (critic.layout.slices["achieved_goal"], critic.layout.slices["desired_goal"]):
            qx, qy = data.draw(pts)
            x[i, sl] = (lo_x + qx * s / 4, lo_y + qy * s / 4)
    _check_same(critic, x)


@pytest.mark.parametrize("name", ["FetchPush-v4", "PointMaze_UMaze-v3"])
def test_score_one_on_real_rollouts(name):
    critic = _critic(name)
    env = make_env(name)
    rng = np.random.default_rng(0)
    xs = []
    obs, _ = env.reset(seed=0)
    for _ in range(200):
        xs.append(critic.layout.flatten(obs))
        obs, _, term, trunc, _ = env.step(rng.uniform(-1, 1, env.action_space.shape))
        if term or trunc:
            obs, _ = env.reset()
    _check_same(critic, np.stack(xs).astype(np.float32))


def test_wide_subgoal_falls_back_to_the_batched_path():
    """A subgoal over more than 7 values (numpy may add those in another order) is scored by the
    batched path for one row too: still the same floats."""
    spec = load_spec({
        "task": {"name": "PushWide", "env_id": "FetchPush-v4",
                 "critic_input": ["observation", "achieved_goal", "desired_goal"],
                 "success": {"source": "subgoals"}},
        "subgoals": [{"name": "still", "a": "observation[10:25]", "b": 0, "threshold": 0.5, "scale": 3.0}],
    })
    critic = SubgoalCritic(spec, make_env(spec))
    assert critic._score_row is None and critic.evaluator._rows is None
    x = np.random.default_rng(0).standard_normal((20, critic.obs_dim)).astype(np.float32) * 0.2
    _check_same(critic, x)


@pytest.mark.filterwarnings("ignore:overflow encountered in cast")
def test_score_one_input_checks_name_the_value():
    critic = _critic("FetchPush-v4")
    x = np.zeros(critic.obs_dim, np.float32)
    with pytest.raises(ValueError, match=r"x: expected shape \(31,\), got shape \(30,\)"):
        critic.score_one(x[:-1])
    with pytest.raises(TypeError, match=r"x: expected a real-valued numeric array of shape \(31,\), got dtype <U1"):
        critic.score_one(np.array(["a"] * 31))
    bad = x.copy()
    bad[7] = np.nan
    with pytest.raises(ValueError, match=r"x: expected finite values, got nan at index 7"):
        critic.score_one(bad)
    big = x.astype(np.float64)
    big[3] = 1e39  # finite in float64, inf as the float32 critic input, as score() sees it
    with pytest.raises(ValueError, match=r"x: expected finite values, got inf at index 3"):
        critic.score_one(big)
    # float64 and lists are scored as their float32 rows, like score()
    y = np.random.default_rng(1).standard_normal(31) * 0.1
    ref = critic.score(y[None])
    assert critic.score_one(y) == critic.score_one(y.tolist()) == (float(ref.progress[0]), float(ref.success[0]))
    assert critic.score_one(y, check=False) == critic.score_one(y)


def test_wrappers_call_the_batch1_path_and_report_its_scores():
    from prm_critic.wrappers import DeadEndPruner, PRMRewardShaper

    critic = _critic("FetchPush-v4")
    calls = {"one": 0, "score": 0}
    one, score = critic.score_one, critic.score

    class Counting(SubgoalCritic):
        def score_one(self, x, *, check=True):
            calls["one"] += 1
            return one(x, check=check)

        def score(self, steps):
            calls["score"] += 1
            return score(steps)

    counting = Counting.__new__(Counting)
    counting.__dict__.update(critic.__dict__)
    env = DeadEndPruner(PRMRewardShaper(make_env("FetchPush-v4"), counting, gamma=0.98, info_subgoals=True),
                        counting, threshold=0.0, patience=5)
    obs, _ = env.reset(seed=0)
    for _ in range(20):
        obs, _, _, _, info = env.step(env.action_space.sample())
        x = info["prm_next_x"]
        ref = critic.score(x[None])
        assert info["prm_next_scores"] == {"progress": float(ref.progress[0]), "success": float(ref.success[0])}
        assert info["prm_next_phi"] == float(ref.progress[0])
        h = critic.evaluator.holds(x[None])[0]
        assert info["prm_subgoals"] == {n: bool(b) for n, b in zip(critic.evaluator.names, h)}
    assert calls["score"] == 0 and calls["one"] == 21
