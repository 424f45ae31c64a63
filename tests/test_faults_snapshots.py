"""Snapshot support is explicit: a hook per env family, unknown envs refused, every MC state replayed.

Real MuJoCo envs throughout (gymnasium-robotics AntMaze / PointMaze / Fetch / FrankaKitchen,
gymnasium Pusher / InvertedPendulum); no fakes.
"""

import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("gymnasium_robotics")

from faults import correct, loud  # noqa: E402

from prm_critic.cli import main  # noqa: E402
from prm_critic.robotics.collection import collect, load_shard, read_meta  # noqa: E402
from prm_critic.robotics.labels import MCLabeler, label  # noqa: E402
from prm_critic.robotics.dataset import load_steps  # noqa: E402
from prm_critic.robotics.make import CriticInputLayout, make_env  # noqa: E402
from prm_critic.robotics.snapshot import (  # noqa: E402
    MUJOCO_RNG_HOOK, ReplayMismatchError, Snapshot, SnapshotHook, Snapshotter, SnapshotUnsupportedError,
    register_snapshot_hook, snapshot_hook_for, unregister_snapshot_hook,
)
from prm_critic.robotics.spec import list_builtin_specs, load_spec  # noqa: E402

pytestmark = pytest.mark.fault

ANT = "AntMaze_UMaze-v5"

# A user-written spec (the format of envs/specs/*.toml) for a task prm-critic ships no spec for.
ANT_SPEC = {
    "task": {
        "name": "antmaze-umaze-user",
        "env_id": ANT,
        "make_kwargs": {"continuing_task": False},
        "max_episode_steps": 25,
        "critic_input": ["observation", "achieved_goal", "desired_goal"],
        "goal_keys": ["achieved_goal", "desired_goal"],
        "success": {"source": "info", "key": "success", "rule": "any"},
        "controller": {"name": "random"},
    },
    "subgoals": [{"name": "at_goal", "a": "achieved_goal", "b": "desired_goal", "threshold": 0.45}],
}

# A plain gymnasium MuJoCo env no built-in hook covers.
PENDULUM_SPEC = {
    "task": {
        "name": "pendulum-user",
        "env_id": "InvertedPendulum-v5",
        "max_episode_steps": 12,
        "critic_input": ["obs"],
        "success": {"source": "subgoals", "rule": "final"},
        "controller": {"name": "random"},
    },
    "subgoals": [{"name": "upright", "a": "obs[1:2]", "b": "obs[0:1]", "threshold": 0.5}],
}


def _vec(obs):
    if isinstance(obs, dict):
        return np.concatenate([np.asarray(obs[k], dtype=np.float64).ravel() for k in sorted(obs)])
    return np.asarray(obs, dtype=np.float64).ravel()


def _copy_data(src, dst):
    dst.mkdir(parents=True, exist_ok=True)
    shutil.copy(src / "meta.json", dst / "meta.json")
    shutil.copytree(src / "shards", dst / "shards")
    return dst


@pytest.fixture(scope="module")
def ant_data(tmp_path_factory):
    d = tmp_path_factory.mktemp("ant")
    collect(ANT_SPEC, d, episodes=3, shard_size=3, seed=0, progress=False)
    return d


# ------------------------------------------------------------------------------------------ item 1
def test_antmaze_restore_installs_the_episode_goal(ant_data):
    """The rollout after a restore runs with the stored episode's goal, not the rollout env's own."""
    meta = read_meta(ant_data)
    layout = CriticInputLayout.from_dict(meta["layout"])
    d = load_shard(ant_data / "shards" / "shard_00000.npz")
    lab = MCLabeler(meta, k=1, seed=0)
    try:
        base = lab.env.unwrapped
        checked = 0
        for e in np.unique(d["episode"]):
            for i in np.nonzero(d["episode"] == e)[0][[0, -1]]:
                lab.snap.restore(Snapshot.from_arrays(d["sim"][i], str(d["py"][i])))
                stored_goal = d["x"][i][layout.slices["desired_goal"]]
                assert np.array_equal(base.goal.astype(np.float32), stored_goal), (e, i)
                marker = base.model.site_pos[base.target_site_id][:2]
                assert np.array_equal(marker, base.goal)
                checked += 1
        goals = {tuple(d["x"][i][layout.slices["desired_goal"]]) for i in range(len(d["t"]))}
        assert len(goals) == 3  # three episodes, three goals: a leftover goal could not pass
    finally:
        lab.close()
    correct(1, f"MC restore on {ANT} (user-written spec) after the rollout env was reset to another goal",
            f"restored goal and target marker equal the stored episode's goal at {checked} states of 3 episodes")


def test_antmaze_mc_labels_pass_the_replay_self_check(tmp_path, ant_data):
    d = _copy_data(ant_data, tmp_path / "ant")
    label(d, "mc", k=2, stride=6, seed=0, progress=False)
    tab = load_steps(d, "mc")
    assert tab.mask.sum() > 0 and np.all(np.isfinite(tab.success[tab.mask]))
    correct(1, f"MC labels on {ANT} with a user-written spec",
            f"{int(tab.mask.sum())} states labelled, each restore + recorded action replayed exactly first")


def test_antmaze_with_a_hook_that_forgets_the_goal_stops_labelling(tmp_path, ant_data, capsys):
    """A wrong hook (restores everything but the goal) is caught by the self-check, not labelled."""
    env = make_env(load_spec(ANT_SPEC))
    good = snapshot_hook_for(env)
    env.close()

    def restore_without_goal(base, py):
        keep = base.goal.copy()
        good.restore(base, py)
        base.goal = keep
        base.update_target_site_pos()

    d = _copy_data(ant_data, tmp_path / "ant")
    register_snapshot_hook(ANT, SnapshotHook("antmaze", good.capture, restore_without_goal))
    try:
        with loud(1, f"snapshot hook for {ANT} that forgets the goal on restore", ReplayMismatchError,
                  match=rf"env '{ANT}', episode [12], step 0: .*obs \(max \|diff\| .*snapshot hook 'antmaze' misses"):
            label(d, "mc", k=1, stride=6, seed=0, progress=False)
        # the command line reports it as one error line (exit code 2)
        assert main(["label", "--data", str(d), "--family", "mc", "--k", "1", "--stride", "6", "--no-progress"]) == 2
        assert f"prm-critic label: error: env '{ANT}', episode" in capsys.readouterr().err
    finally:
        unregister_snapshot_hook(ANT)
    assert not (d / "labels" / "mc" / "shard_00000.npz").exists()


def test_check_replay_names_env_episode_and_step():
    env = make_env("PointMaze_UMaze-v3", max_episode_steps=40)
    env.reset(seed=2)
    snap = Snapshotter(env)
    for _ in range(5):
        env.step(np.float32([0.3, -0.2]))
    s = snap.get()
    a = np.float32([1.0, 0.5])
    obs, r, term, trunc, _ = env.step(a)
    snap.check_replay(s, a, {"obs": _vec(obs), "reward": r, "terminated": term, "truncated": trunc})
    wrong = _vec(obs)
    wrong[0] += 1e-9
    with loud(1, "recorded next observation differs by 1e-9 from the replay", ReplayMismatchError,
              match=r"env 'PointMaze_UMaze-v3', episode 7, step 5: .*obs \(max \|diff\| 1e-09 at index 0\)"):
        snap.check_replay(s, a, {"obs": wrong}, where="episode 7, step 5")
    env.close()


def test_unknown_env_is_refused_for_mc_naming_the_hook(tmp_path, capsys):
    d = tmp_path / "pend"
    collect(PENDULUM_SPEC, d, episodes=2, shard_size=2, seed=0, progress=False)  # collecting is fine
    label(d, "outcome", progress=False)  # and so are labels that need no snapshot
    with loud(1, "MC labels for InvertedPendulum-v5, an env no snapshot hook knows", SnapshotUnsupportedError,
              match=r"family 'mc'.*env 'InvertedPendulum-v5' \(unwrapped class InvertedPendulumEnv\): no snapshot "
                    r"hook .*register_snapshot_hook\('InvertedPendulum-v5', capture=\.\.\., restore=\.\.\.\)"):
        label(d, "mc", k=1, stride=4, progress=False)
    assert not (d / "labels" / "mc").exists() and not (d / "labels" / "mc.json").exists()
    assert main(["label", "--data", str(d), "--family", "mc", "--k", "1", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "prm-critic label: error: family 'mc'" in err and "register_snapshot_hook('InvertedPendulum-v5'" in err
    env = make_env(load_spec(PENDULUM_SPEC))
    env.reset(seed=0)
    with loud(1, "Snapshotter on an env no snapshot hook knows", SnapshotUnsupportedError,
              match=r"register_snapshot_hook\('InvertedPendulum-v5'"):
        Snapshotter(env)
    env.close()

    # data collected without a hook cannot be restored later, even once a hook exists
    register_snapshot_hook("InvertedPendulum-v5", MUJOCO_RNG_HOOK)
    try:
        with loud(1, "MC labels from snapshots that were taken before the env had a hook", ValueError,
                  match=r"snapshot\.py\['kind'\]: expected 'mujoco' for env 'InvertedPendulum-v5', got None "
                        r"\(it was taken without a snapshot hook"):
            label(d, "mc", k=1, stride=4, progress=False)
        # recollected with the hook, MC labels work (and pass the self-check)
        d2 = tmp_path / "pend2"
        collect(PENDULUM_SPEC, d2, episodes=2, shard_size=2, seed=0, progress=False)
        label(d2, "mc", k=2, stride=4, progress=False)
        tab = load_steps(d2, "mc")
        assert tab.mask.sum() > 0
    finally:
        unregister_snapshot_hook("InvertedPendulum-v5")
    correct(1, "user registers a hook for their own env (InvertedPendulum-v5) and re-collects",
            f"MC labels written for {int(tab.mask.sum())} states, each replay-checked")


def _replay_exact(env, seed):
    env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    space = env.action_space
    for _ in range(8):
        env.step(rng.uniform(space.low, space.high).astype(np.float32))
    snap = Snapshotter(env)
    s = snap.get()
    actions = rng.uniform(space.low, space.high, (15,) + space.shape).astype(np.float32)
    first = [np.append(_vec(o), [r, te, tr]) for o, r, te, tr, _ in map(env.step, actions)]
    env.reset(seed=seed + 1000)  # another episode (another goal) in between
    snap.restore(s)
    again = [np.append(_vec(o), [r, te, tr]) for o, r, te, tr, _ in map(env.step, actions)]
    return max(float(np.abs(a - b).max()) for a, b in zip(first, again))


def _spec_for(env_id):
    return {"task": {"name": env_id, "env_id": env_id, "make_kwargs": {"continuing_task": False},
                     "critic_input": ["observation"], "success": {"source": "info", "key": "success"},
                     "controller": {"name": "random"}}}


TASKS = [*list_builtin_specs(), "PointMaze_Large-v3", "AntMaze_UMaze-v5", "AntMaze_Medium-v5",
         "AntMaze_Large_Diverse_GR-v5"]


@pytest.mark.parametrize("task", TASKS)
def test_every_builtin_task_and_maze_map_replays_exactly_or_is_refused(task):
    spec = load_spec(task) if task in list_builtin_specs() else load_spec(_spec_for(task))
    env = make_env(spec, max_episode_steps=60)
    try:
        try:
            diffs = [_replay_exact(env, seed) for seed in (0, 1)]
        except SnapshotUnsupportedError as exc:
            assert "refused" in str(exc) and "bit-identically" in str(exc), exc
            correct(1, f"snapshots of {task}", f"refused with the reason: {exc}")
            return
        assert diffs == [0.0, 0.0], diffs
    finally:
        env.close()
    correct(1, f"restore + replay on {task} after another episode", "15 steps bit-identical (2 seeds)")


def test_registry_arguments_are_checked():
    with loud(1, "hook key '*' (matches every env)", ValueError, match=r"key: expected an env id"):
        register_snapshot_hook("*", MUJOCO_RNG_HOOK)
    with loud(1, "a second hook for an id that has one", ValueError,
              match=r"already registered for 'Pusher\*'; pass replace=True"):
        register_snapshot_hook("Pusher*", MUJOCO_RNG_HOOK)
    with loud(1, "a hook without a restore function", ValueError, match=r"restore: expected a callable"):
        register_snapshot_hook("MyEnv-v0", capture=lambda b: {})
    with loud(1, "unregistering an id that has no hook", KeyError, match=r"no snapshot hook is registered for 'MyEnv-v0'"):
        unregister_snapshot_hook("MyEnv-v0")


@pytest.mark.fault_outcome(1, "the README's snapshot-hook example for a user's own env",
                           'registers a hook that restores the goal')
def test_readme_hook_example_registers_a_working_hook():
    text = (Path(__file__).resolve().parents[1] / "docs" / "readme" / "robotics-data.md").read_text()
    code = next(b for b in re.findall(r"```python\n(.*?)```", text, re.S) if "register_snapshot_hook" in b)
    exec(compile(code, "robotics-data.md", "exec"), {})
    hook = unregister_snapshot_hook("MyReach-v0")  # the example registered it
    env = make_env("FetchReach-v4")
    env.reset(seed=0)
    state = hook.capture(env.unwrapped)
    goal = env.unwrapped.goal.copy()
    env.reset(seed=1)
    assert not np.array_equal(env.unwrapped.goal, goal)
    hook.restore(env.unwrapped, state)
    assert np.array_equal(env.unwrapped.goal, goal)
    env.close()


@pytest.mark.fault_outcome(1, 'AntMaze snapshot at any step restored after another episode (property)',
                           'passes the restore + replay self-check')
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**31 - 1), before=st.integers(0, 40), other=st.integers(0, 2**31 - 1))
def test_antmaze_restore_at_any_step_replays_the_recorded_step(ant_env, seed, before, other):
    """Property: any state of any AntMaze episode passes the replay check after another episode ran."""
    env, snap = ant_env
    env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    space = env.action_space
    for _ in range(before):
        env.step(rng.uniform(space.low, space.high).astype(np.float32))
    s = snap.get()
    a = rng.uniform(space.low, space.high).astype(np.float32)
    obs, r, term, trunc, _ = env.step(a)
    env.reset(seed=other)
    snap.check_replay(s, a, {"obs": _vec(obs), "reward": r, "terminated": term, "truncated": trunc},
                      where=f"seed {seed}, step {before}")


@pytest.fixture(scope="module")
def ant_env():
    env = make_env(load_spec(ANT_SPEC), max_episode_steps=100)
    env.reset(seed=0)
    yield env, Snapshotter(env)
    env.close()
