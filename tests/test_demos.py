"""Demonstrations and the spec-free label families ``demo_progress`` and ``success_contrast``."""

import json

import numpy as np
import pytest

from prm_critic.robotics.demos import (
    DemoError,
    Demonstrations,
    base_rows,
    branch_rows,
    demo_progress_labels,
    goal_success_fn,
    hindsight_rows,
    import_arrays,
    load_demos,
    success_contrast_labels,
)
from prm_critic.robotics.layout import CriticInputLayout
from prm_critic.robotics.spec import load_spec


def test_progress_labels_by_hand():
    # episode 3: first success at t=2 (L = 3), still succeeding at t=3, lost at t=4; episode 5 failed
    episode = np.array([3] * 6 + [5] * 3)
    t = np.array([0, 1, 2, 3, 4, 5, 0, 1, 2])
    step_ok = np.array([0, 0, 1, 1, 0, 0, 0, 0, 0], bool)
    ep_ok = np.array([1] * 6 + [0] * 3, bool)
    lab, mask = demo_progress_labels(episode, t, step_ok, ep_ok)
    # s_0, s_1, s_2 before the success: 0, 1/3, 2/3; s_3 and s_4 succeed (steps 2 and 3 did): 1; s_5 lost it
    assert mask.tolist() == [True, True, True, True, True, False, False, False, False]
    np.testing.assert_allclose(lab[mask], [0, 1 / 3, 2 / 3, 1, 1], rtol=1e-6)
    assert np.isnan(lab[~mask]).all()


def test_progress_labels_refuse_rows_that_are_not_whole_episodes():
    with pytest.raises(Exception, match="expected 0, 1, 2"):
        demo_progress_labels(np.array([0, 0]), np.array([1, 0]), np.array([0, 1], bool), np.array([1, 1], bool))


def test_success_contrast_labels_are_the_episode_outcome():
    lab, mask = success_contrast_labels(np.array([1, 1, 0], bool))
    assert lab.tolist() == [1.0, 1.0, 0.0] and mask.all()


def _hand_demos(goal_positions, success_at, desired=9.0):
    """One hand-built 1-D goal episode: achieved goal ``goal_positions[t]`` at state ``t``."""
    layout = CriticInputLayout(["observation", "achieved_goal", "desired_goal"],
                               {"observation": 1, "achieved_goal": 1, "desired_goal": 1})
    g = np.asarray(goal_positions, np.float32)
    n = len(g) - 1
    x = np.stack([g[:-1], g[:-1], np.full(n, desired)], axis=1).astype(np.float32)
    nx = np.stack([g[1:], g[1:], np.full(n, desired)], axis=1).astype(np.float32)
    success = np.zeros(n, bool)
    success[success_at] = True
    return Demonstrations(folder=__import__("pathlib").Path("hand"), spec=load_spec("FetchPush-v4"), layout=layout,
                          meta={}, episodes=(0,), x=x, next_x=nx, action=np.zeros((n, 1), np.float32), success=success,
                          episode=np.zeros(n, np.int64), t=np.arange(n), sim=np.zeros((n, 0)),
                          py=np.asarray([json.dumps({"kind": None})] * n), sha256="hand")


def _near(a, b):
    return np.abs(np.asarray(a) - np.asarray(b)).reshape(-1) < 0.5


def test_hindsight_labels_exact_on_a_hand_built_episode():
    # achieved goal of states s_0..s_4: 0, 0, 1, 2, 3 (the first success is at step 3: s_4 reaches the goal)
    demos = _hand_demos([0, 0, 1, 2, 3], success_at=3)
    rows = hindsight_rows(demos, 50, _near, np.random.default_rng(0))
    assert len(rows) > 0
    for x, y, t in zip(rows.x, rows.y, rows.t):
        g = x[2]  # the relabelled desired goal
        states = [0, 0, 1, 2, 3]
        m = next(i for i, a in enumerate(states) if abs(a - g) < 0.5)  # first state meeting the goal
        assert x[0] == states[t] and x[1] == states[t]  # the state itself is unchanged
        want = 1.0 if abs(states[t] - g) < 0.5 else t / m
        assert t < m or abs(states[t] - g) < 0.5, "rows past the goal's first reach that no longer meet it are left out"
        assert y == pytest.approx(want)
    # every relabelled goal is an achieved goal of the same episode, at or after the row
    assert set(rows.x[:, 2].tolist()) <= {0.0, 1.0, 2.0, 3.0}
    # the goal reached at the end of the episode gives the episode's own progress t / L
    end = rows.x[:, 2] == 3.0
    np.testing.assert_allclose(rows.y[end], rows.t[end] / 4.0, rtol=1e-6)


def test_base_rows_are_the_progress_along_the_demonstration():
    demos = _hand_demos([0, 0, 1, 2, 3, 3], success_at=3)  # s_5 still succeeds
    rows = base_rows(demos)
    np.testing.assert_allclose(rows.y, [0, 0.25, 0.5, 0.75, 1.0], rtol=1e-6)


def test_hindsight_needs_goal_keys():
    demos = _hand_demos([0, 1, 2], success_at=1)
    object.__setattr__(demos, "layout", CriticInputLayout(["obs"], {"obs": 3}))
    with pytest.raises(DemoError, match="achieved_goal or desired_goal"):
        hindsight_rows(demos, 1, _near, np.random.default_rng(0))


@pytest.fixture(scope="module")
def push_folder(tmp_path_factory):
    from prm_critic.robotics.collection import collect

    out = tmp_path_factory.mktemp("demos") / "push"
    collect("FetchPush-v4", out, episodes=12, seed=50000, progress=False)
    return out


def test_load_demos_keeps_successes_records_and_hashes_them(push_folder):
    demos = load_demos(push_folder)
    rec = demos.record()
    assert rec["count"] == len(demos.episodes) == demos.n_available > 0
    assert all(demos.success[b:e].any() for b, e in demos.blocks())
    assert load_demos(push_folder).sha256 == demos.sha256  # deterministic
    one = load_demos(push_folder, n=1)
    assert one.episodes == demos.episodes[:1] and one.sha256 != demos.sha256
    assert demos.subset(demos.episodes[:1]).sha256 == one.sha256
    with pytest.raises(DemoError, match=r"holds \d+ successful episodes, expected at least n=999"):
        load_demos(push_folder, n=999)


def test_a_changed_demonstration_changes_the_hash(push_folder, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(push_folder, copy)
    f = sorted((copy / "shards").glob("*.npz"))[0]
    d = dict(np.load(f))
    d["action"] = d["action"] + 1e-3
    np.savez(f, **d)
    assert load_demos(copy).sha256 != load_demos(push_folder).sha256


def test_branches_fall_behind_in_order_and_restore_exact_states(push_folder):
    demos = load_demos(push_folder)
    rows = branch_rows(demos, 6, 5, np.random.default_rng(1))
    assert len(rows) == 30 and (rows.y >= 0).all() and (rows.y < 1).all()
    for e in np.unique(rows.episode):  # along a branch, each random step falls one more step behind
        y = rows.y[rows.episode == e]
        assert (np.diff(y) <= 0).all()
    # a branch starts from the exact demonstration state: replaying the demonstration's action instead reproduces it
    from prm_critic.robotics.make import make_env
    from prm_critic.robotics.snapshot import Snapshot, Snapshotter

    env = make_env(demos.spec)
    env.reset(seed=0)
    snap = Snapshotter(env)
    snap.restore(Snapshot.from_arrays(demos.sim[3], str(demos.py[3])))
    obs, *_ = env.step(demos.action[3])
    np.testing.assert_array_equal(demos.layout.flatten(obs), demos.next_x[3])
    env.close()


def test_goal_success_comes_from_the_envs_own_reward():
    from prm_critic.robotics.make import make_env

    env = make_env("FetchPush-v4")
    ok = goal_success_fn(env)
    a = np.zeros((2, 3))
    assert ok(a, np.array([[0, 0, 0.01], [0, 0, 0.2]])).tolist() == [True, False]
    env.close()


def test_neither_family_reads_the_specs_subgoals(push_folder, tmp_path, monkeypatch):
    import shutil

    from prm_critic.robotics import subgoals
    from prm_critic.robotics.dataset import load_steps
    from prm_critic.robotics.labels import label

    data = tmp_path / "d"
    shutil.copytree(push_folder, data)

    def boom(*a, **k):
        raise AssertionError("a spec-free family read the spec's subgoals")

    monkeypatch.setattr(subgoals.SubgoalEvaluator, "__init__", boom)
    for family in ("demo_progress", "success_contrast"):
        label(data, family, progress=False)
        table = load_steps(data, family)
        np.testing.assert_array_equal(np.isfinite(table.progress), table.mask)
        np.testing.assert_array_equal(table.progress[table.mask], table.success[table.mask])
    from prm_critic.models.pipeline import train_critic_from_data
    from prm_critic.models.train import TrainConfig

    res = train_critic_from_data(data, "success_contrast", tmp_path / "sc", config=TrainConfig(epochs=1, hidden=(8,)),
                                 progress_bar=False)
    assert res["meta"]["label_family"] == "success_contrast"
    from prm_critic.models.demo_critic import train_demo_critic

    res = train_demo_critic(data, tmp_path / "dp", config=TrainConfig(epochs=1, hidden=(8,)), relabel=1, branches=2,
                            branch_steps=2, holdout=0.3, progress_bar=False)
    assert res["meta"]["demonstrations"]["sha256"] and res["metrics"]["n_rows"]["branches"] == 4
    demos = load_demos(data)
    rows = base_rows(demos)
    from prm_critic.robotics.make import make_env

    env = make_env(demos.spec)
    hindsight_rows(demos, 1, goal_success_fn(env), np.random.default_rng(0))
    branch_rows(demos, 2, 2, np.random.default_rng(0), env=env)
    env.close()
    assert len(rows)


def test_families_refuse_data_without_what_they_need(push_folder, tmp_path):
    import shutil

    from prm_critic.robotics.labels import label

    data = tmp_path / "all_failed"
    shutil.copytree(push_folder, data)
    for f in (data / "shards").glob("*.npz"):
        d = dict(np.load(f))
        d["ep_success"] = np.zeros_like(d["ep_success"])
        d["success"] = np.zeros_like(d["success"])
        np.savez(f, **d)
    for family in ("demo_progress", "success_contrast"):
        with pytest.raises(ValueError, match="0 successful .* expected a successful episode"):
            label(data, family, progress=False)
    with pytest.raises(DemoError, match="no successful episode"):
        load_demos(data)
    ok = tmp_path / "all_ok"
    shutil.copytree(push_folder, ok)
    for f in (ok / "shards").glob("*.npz"):
        d = dict(np.load(f))
        d["ep_success"] = np.ones_like(d["ep_success"])
        np.savez(f, **d)
    with pytest.raises(ValueError, match="expected a failed episode"):
        label(ok, "success_contrast", progress=False)


def test_import_arrays_writes_a_folder_the_families_read(tmp_path):
    from prm_critic.robotics.labels import label

    rng = np.random.default_rng(0)
    n = 7
    arrays = {"episode": np.array([0, 0, 0, 0, 1, 1, 1]), "action": rng.normal(size=(n, 4)),
              "success": np.array([0, 0, 1, 1, 0, 0, 0], bool)}
    for p in ("obs", "next_obs"):
        arrays[f"{p}/observation"] = rng.normal(size=(n, 25))
        arrays[f"{p}/achieved_goal"] = rng.normal(size=(n, 3))
        arrays[f"{p}/desired_goal"] = rng.normal(size=(n, 3))
    np.savez(tmp_path / "mine.npz", **arrays)
    out = import_arrays(tmp_path / "mine.npz", "FetchPush-v4", tmp_path / "mine")
    demos = load_demos(out)
    assert demos.episodes == (0,) and not demos.has_snapshots
    np.testing.assert_allclose(base_rows(demos).y, [0, 1 / 3, 2 / 3, 1], rtol=1e-6)
    label(out, "success_contrast", progress=False)
    with pytest.raises(DemoError, match="no simulator snapshots"):
        branch_rows(demos, 1, 1, np.random.default_rng(0))
    del arrays["next_obs/achieved_goal"]
    np.savez(tmp_path / "bad.npz", **arrays)
    with pytest.raises(Exception, match=r"missing arrays \['next_obs/achieved_goal'\]"):
        import_arrays(tmp_path / "bad.npz", "FetchPush-v4", tmp_path / "bad")
