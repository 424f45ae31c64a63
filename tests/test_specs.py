"""Task specs: built-ins load, errors name the field, layout and subgoal critic behave."""

import numpy as np
import pytest

from prm_critic import check_critic
from prm_critic.robotics import list_builtin_specs, load_spec
from prm_critic.robotics.spec import SpecError

ALL = list_builtin_specs()

MINIMAL = {
    "task": {
        "name": "MyReach", "env_id": "FetchReach-v4",
        "critic_input": ["observation", "achieved_goal", "desired_goal"],
        "goal_keys": ["achieved_goal", "desired_goal"],
        "success": {"source": "info", "key": "is_success"},
    },
    "subgoals": [{"name": "at_goal", "a": "achieved_goal", "b": "desired_goal", "threshold": 0.05}],
}


def test_builtin_specs_present():
    from prm_critic.robotics.spec import _specs_dir

    # one name per shipped TOML file (two files with the same task name would hide one)
    assert ALL and len(ALL) == len(list(_specs_dir().glob("*.toml")))
    for name in ALL:
        spec = load_spec(name)
        assert spec.name == name
        assert spec.subgoals, name
        assert load_spec(spec.to_dict()) == spec  # round-trip


def test_misspelled_field_is_named_with_suggestion():
    bad = {**MINIMAL, "subgoals": [{**MINIMAL["subgoals"][0], "treshold": 0.05}]}
    del bad["subgoals"][0]["threshold"]
    with pytest.raises(SpecError, match=r"subgoals\[0\]: unknown field 'treshold'; did you mean 'threshold'"):
        load_spec(bad)
    bad2 = {"task": {**MINIMAL["task"], "sucess": {}}, "subgoals": MINIMAL["subgoals"]}
    with pytest.raises(SpecError, match="unknown field 'sucess'; did you mean 'success'"):
        load_spec(bad2)


def test_unknown_task_and_bad_values():
    with pytest.raises(SpecError, match="unknown task 'FetchPsh-v4'.*did you mean 'FetchPush-v4'"):
        load_spec("FetchPsh-v4")
    bad = {"task": {**MINIMAL["task"]}, "subgoals": [{**MINIMAL["subgoals"][0], "threshold": -1}]}
    with pytest.raises(SpecError, match=r"threshold: expected a number > 0, got -1"):
        load_spec(bad)
    bad = {"task": {**MINIMAL["task"]}, "subgoals": [{**MINIMAL["subgoals"][0], "a": "obsrvation[0:3]"}]}
    with pytest.raises(SpecError, match="key 'obsrvation' is not in critic_input"):
        load_spec(bad)


def _with_subgoal(**fields):
    return {"task": {**MINIMAL["task"]}, "subgoals": [{**MINIMAL["subgoals"][0], **fields}]}


def test_approach_point_fields_are_checked():
    ok = load_spec(_with_subgoal(a="observation[0:3]", b="achieved_goal", behind="desired_goal", offset=0.06))
    assert ok.subgoals[0].offset == 0.06 and str(ok.subgoals[0].behind) == "desired_goal"
    assert load_spec(ok.to_dict()) == ok
    with pytest.raises(SpecError, match=r"subgoals\[0\]\.offset: an approach point needs both 'behind' and 'offset'"):
        load_spec(_with_subgoal(behind="desired_goal"))
    with pytest.raises(SpecError, match=r"subgoals\[0\]\.behind: an approach point needs both.*got offset = 0.1"):
        load_spec(_with_subgoal(offset=0.1))
    with pytest.raises(SpecError, match=r"offset: expected a number > 0, got 0"):
        load_spec(_with_subgoal(behind="desired_goal", offset=0))
    with pytest.raises(SpecError, match=r"behind: approach points apply to kind 'distance' subgoals, got kind 'maze_path'"):
        load_spec(_with_subgoal(kind="maze_path", behind="desired_goal", offset=0.1))
    with pytest.raises(SpecError, match=r"subgoals\[0\]\.behind \(subgoal 'at_goal'\): in 'goal': key 'goal' is not in critic_input"):
        load_spec(_with_subgoal(behind="goal", offset=0.1))


def test_approach_point_is_offset_beyond_b_away_from_behind():
    """b* = b + offset * unit(b - behind); where b == behind the target is b itself."""
    from prm_critic.robotics.make import CriticInputLayout, make_env
    from prm_critic.robotics.subgoals import SubgoalEvaluator

    spec = load_spec(_with_subgoal(a="observation[0:3]", b="achieved_goal", behind="desired_goal",
                                   offset=0.1, threshold=0.05, scale=0.5))
    env = make_env(spec)
    layout = CriticInputLayout.from_space(spec, env.observation_space)
    env.close()
    ev = SubgoalEvaluator(spec, layout)
    ag, dg = layout.slices["achieved_goal"], layout.slices["desired_goal"]
    x = np.zeros((3, layout.obs_dim))
    x[:, ag] = [1.0, 1.0, 1.0]
    x[0, dg] = [1.0, 1.0, 0.0]      # behind is below b: the target is 0.1 above b
    x[1, dg] = [1.0, 1.0, 1.0]      # behind == b: the target is b
    x[2, dg] = [4.0, 5.0, 1.0]      # direction (-3, -4, 0) / 5
    np.testing.assert_allclose(ev.target(x, 0), [[1, 1, 1.1], [1, 1, 1], [0.94, 0.92, 1]], atol=1e-12)
    x[0, 0:3] = [1.0, 1.0, 1.13]    # 0.03 from the target: holds
    x[1, 0:3] = [1.0, 1.0, 1.13]    # 0.13 from b: does not hold
    x[2, 0:3] = [1.0, 1.0, 1.0]     # on b itself, 0.1 from the target: does not hold
    np.testing.assert_allclose(ev.distances(x)[:, 0], [0.03, 0.13, 0.1], atol=1e-12)
    assert ev.holds(x)[:, 0].tolist() == [True, False, False]
    np.testing.assert_allclose(ev.progress(x), [1.0, 1 - 0.13 / 0.5, 1 - 0.1 / 0.5], atol=1e-12)


def test_user_spec_from_toml(tmp_path):
    p = tmp_path / "mine.toml"
    p.write_text(
        '[task]\nname = "MyPush"\nenv_id = "FetchPush-v4"\n'
        'critic_input = ["observation", "achieved_goal", "desired_goal"]\n'
        'success = { source = "info", key = "is_success" }\n'
        '[[subgoals]]\nname = "near"\na = "observation[0:3]"\nb = "observation[3:6]"\nthreshold = 0.05\n'
    )
    spec = load_spec(p)
    assert spec.name == "MyPush" and spec.subgoals[0].scale == pytest.approx(0.5)
    (tmp_path / "broken.toml").write_text("[task\nname=")
    with pytest.raises(SpecError, match="not valid TOML"):
        load_spec(tmp_path / "broken.toml")


@pytest.mark.parametrize("name", ALL)
def test_subgoal_critic_on_real_env(name):
    from prm_critic.robotics.make import make_env
    from prm_critic.robotics.subgoals import SubgoalCritic

    env = make_env(name)
    critic = SubgoalCritic(name, env)
    obs, _ = env.reset(seed=0)
    xs = []
    for _ in range(8):
        xs.append(critic.layout.flatten(obs))
        obs, *_ = env.step(env.action_space.sample())
    x = np.stack(xs)
    assert x.shape == (8, critic.obs_dim)
    scores = check_critic(critic, x)
    assert np.all((scores.progress >= 0) & (scores.progress <= 1))
    env.close()


def test_subgoal_progress_orders_states_on_fetch_push():
    """Progress rises as the gripper reaches the approach point behind the object (as seen from the
    goal), then as the object nears the goal; the far side of the object is not the approach point."""
    from prm_critic.robotics.make import make_env
    from prm_critic.robotics.subgoals import SubgoalCritic

    env = make_env("FetchPush-v4")
    c = SubgoalCritic("FetchPush-v4", env)
    obs, _ = env.reset(seed=3)
    x = c.layout.flatten(obs)[None].repeat(4, axis=0)
    obj = c.layout.slices["observation"].start + 3
    ag, dg = c.layout.slices["achieved_goal"], c.layout.slices["desired_goal"]

    def behind(row):  # 6 cm behind the object on the goal-object line
        u = x[row, obj:obj + 3] - x[row, dg]
        return x[row, obj:obj + 3] + 0.06 * u / np.linalg.norm(u)

    # state 1: gripper at the approach point
    x[1, 0:3] = behind(1)
    # state 2: gripper at the approach point of the object moved halfway to the goal
    mid = (x[2, obj:obj + 3] + x[2, dg]) / 2
    x[2, obj:obj + 3] = mid
    x[2, ag] = mid
    x[2, 0:3] = behind(2)
    # state 3: gripper 6 cm on the goal side of the object (touching it, but it would push it away)
    u = x[3, dg] - x[3, obj:obj + 3]
    x[3, 0:3] = x[3, obj:obj + 3] + 0.06 * u / np.linalg.norm(u)
    scores = c.score(x)
    p = scores.progress
    assert p[0] < p[1] < p[2]
    assert p[3] < p[1]
    assert scores.extra["subgoals_reached"].tolist() == [0, 1, 1, 0]


def test_maze_progress_follows_path_not_straight_line():
    """In the U-maze a point just across the wall from the goal is far along the path."""
    from prm_critic.robotics.make import make_env
    from prm_critic.robotics.subgoals import MazeGeometry

    env = make_env("PointMaze_UMaze-v3")
    maze = MazeGeometry.from_env(env)
    # UMaze free cells: row 1 (cols 1-3), (2,3), row 3 (cols 1-3). Goal at cell (3,1).
    goal = maze.centers[maze._index[(3, 1)]][None]
    across_wall = maze.centers[maze._index[(1, 1)]][None]  # 2 rows away straight, 6 cells by path
    near_path = maze.centers[maze._index[(3, 2)]][None]    # 1 cell by path
    g_far, cells_far = maze.geodesic(across_wall, goal)
    g_near, cells_near = maze.geodesic(near_path, goal)
    assert cells_far[0] == 6 and cells_near[0] == 1
    assert g_far[0] > 3 * g_near[0]


def _geodesic_reference(maze, p, g):
    """The original per-point loop (kept here as the reference for the batched version)."""
    def cell(xy):
        i = int(np.floor((maze.y_center - xy[1]) / maze.scaling))
        j = int(np.floor((xy[0] + maze.x_center) / maze.scaling))
        k = maze._index.get((i, j))
        return int(np.argmin(np.linalg.norm(maze.centers - xy, axis=1))) if k is None else k

    geo, left = np.empty(len(p)), np.empty(len(p), dtype=np.int64)
    for b in range(len(p)):
        cp, cg = cell(p[b]), cell(g[b])
        left[b] = maze.dist[cp, cg]
        geo[b] = np.linalg.norm(p[b] - g[b])
        if left[b] > 0:
            cand = np.nonzero((maze.dist[:, cg] == left[b] - 1) & (maze.dist[cp] == 1))[0]
            nxt = cand[np.argmin(np.linalg.norm(maze.centers[cand] - p[b], axis=1))]
            geo[b] = (np.linalg.norm(p[b] - maze.centers[nxt]) + maze.scaling * (left[b] - 1)
                      + np.linalg.norm(maze.centers[cg] - g[b]))
        elif left[b] < 0:
            geo[b] = np.inf
    return geo, left


@pytest.mark.parametrize("name", ["U_MAZE", "MEDIUM_MAZE", "LARGE_MAZE"])
def test_maze_geodesic_batched_matches_per_point_reference(name):
    """The batched lookup-table geodesic equals the per-point BFS walk, walls and outside included."""
    from gymnasium_robotics.envs.maze import maps

    from prm_critic.robotics.subgoals import MazeGeometry

    grid = getattr(maps, name)
    rows, cols = len(grid), len(grid[0])
    maze = MazeGeometry(grid, 1.0, cols / 2, rows / 2)
    rng = np.random.default_rng(0)
    # points over the whole map plus a margin outside it (walls and outside map to the nearest cell)
    p = rng.uniform([-cols / 2 - 0.5, -rows / 2 - 0.5], [cols / 2 + 0.5, rows / 2 + 0.5], size=(2000, 2))
    g = maze.centers[rng.integers(0, len(maze.centers), size=2000)] + rng.uniform(-0.4, 0.4, size=(2000, 2))
    geo, left = maze.geodesic(p, g)
    ref_geo, ref_left = _geodesic_reference(maze, p, g)
    np.testing.assert_array_equal(left, ref_left)
    np.testing.assert_allclose(geo, ref_geo, rtol=0, atol=1e-12)
    assert (left > 2).any()  # the sample really crosses the maze


@pytest.mark.parametrize("name", ["FetchPush-v4", "PointMaze_Medium-v3"])
def test_progress_from_precomputed_distances_matches_recomputed(name):
    """Passing the distances/holds the caller already has gives exactly the recomputed progress
    (straight-line and maze_path subgoals, approach points included)."""
    from prm_critic.robotics.make import make_env
    from prm_critic.robotics.subgoals import SubgoalCritic

    env = make_env(name)
    c = SubgoalCritic(name, env)
    rng = np.random.default_rng(0)
    obs, _ = env.reset(seed=1)
    xs = []
    for _ in range(40):
        xs.append(c.layout.flatten(obs))
        obs, *_ = env.step(env.action_space.sample())
    env.close()
    x = np.stack(xs).astype(np.float64)
    # put some rows on the subgoals' targets so that every ladder stage is exercised
    for k in range(len(c.spec.subgoals)):
        rows = rng.choice(len(x), 5, replace=False)
        x[rows] = c.evaluator.place(x[rows], k, c.evaluator.target(x[rows], k))
    x = x.astype(np.float32)  # what the critic scores (score() takes float32 batches)
    ev = c.evaluator
    d = ev.distances(x)
    h = ev.holds(x, distances=d)
    assert h.any(), "the test rows should put some subgoals in reach"
    np.testing.assert_array_equal(h, ev.holds(x))
    ref = ev.progress(x)
    np.testing.assert_array_equal(ev.progress(x, distances=d), ref)
    np.testing.assert_array_equal(ev.progress(x, holds=h, distances=d), ref)
    np.testing.assert_array_equal(c.score(x).progress, ref.astype(np.float32))  # StepScores are float32


def test_mean_progress_counts_every_subgoal_and_has_no_stage_to_fall_back_from():
    """progress = "mean": mean over subgoals of (1 if it holds else clip(1 - d / scale)); checked values,
    the ladder's fall-back case, the error naming the field, and the dict round trip."""
    from prm_critic.robotics.make import make_env
    from prm_critic.robotics.subgoals import SubgoalCritic

    d = load_spec("FetchPush-v4").to_dict()
    d["task"]["progress"] = "mean"
    spec = load_spec(d)
    assert spec.progress == "mean" and load_spec(spec.to_dict()) == spec
    assert "progress" not in load_spec("FetchPush-v4").to_dict()["task"]  # the default stays implicit
    env = make_env(spec)
    mean, ladder = SubgoalCritic(spec, env), SubgoalCritic("FetchPush-v4", env)
    obs, _ = env.reset(seed=3)
    env.close()
    lay = mean.layout
    obj = lay.slices["observation"].start + 3
    ag, dg = lay.slices["achieved_goal"], lay.slices["desired_goal"]
    x = lay.flatten(obs)[None].repeat(2, axis=0).astype(np.float64)
    # row 0: block on the goal (object_at_goal holds), gripper 0.15 beside it (sideways)
    x[0, obj:obj + 3] = x[0, dg]
    x[0, ag] = x[0, dg]
    x[0, 0:3] = mean.evaluator.target(x[:1], 0)[0] + [0.0, 0.15, 0.0]
    # row 1: the block 0.06 off the goal (no longer holds), gripper where it was
    x[1] = x[0]
    x[1, obj] += 0.06
    x[1, ag.start] += 0.06
    t1 = mean.evaluator.target(x[1:], 0)[0]
    d_grip = np.linalg.norm(x[1, 0:3] - t1)
    np.testing.assert_allclose(mean.evaluator.progress(x), [(1 - 0.15 / 0.3 + 1) / 2,
                                                           (1 - d_grip / 0.3 + 1 - 0.06 / 0.3) / 2], atol=1e-9)
    # the ladder falls back a whole stage on the same move, the mean does not
    lp, mp = ladder.evaluator.progress(x), mean.evaluator.progress(x)
    assert lp[0] - lp[1] > 0.5 and mp[0] - mp[1] < 0.25
    bad = load_spec("FetchPush-v4").to_dict()
    bad["task"]["progress"] = "sum"
    with pytest.raises(SpecError, match=r"spec.task.progress: expected one of \['ladder', 'mean'\], got 'sum'"):
        load_spec(bad)
