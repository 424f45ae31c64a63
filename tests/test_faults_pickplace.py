"""Faults: inexact snapshot replay (FetchPickAndPlace, every built-in task, AntMaze) and a ``meta.json``
that disagrees with its data (``load_steps``).

All envs are real gymnasium-robotics / MuJoCo envs; data sets are collected with the real pipeline.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("gymnasium_robotics")

from faults import correct, loud  # noqa: E402

from prm_critic.robotics.collection import ShardError, collect, load_shard, make_policy  # noqa: E402
from prm_critic.robotics.dataset import load_steps  # noqa: E402
from prm_critic.robotics.labels import label  # noqa: E402
from prm_critic.robotics.make import CriticInputLayout, make_env, register_robotics_envs  # noqa: E402
from prm_critic.robotics.snapshot import Snapshot, Snapshotter  # noqa: E402
from prm_critic.robotics.spec import list_builtin_specs, load_spec  # noqa: E402

pytestmark = pytest.mark.fault

PICK = "FetchPickAndPlace-v4"


def _vec(obs) -> np.ndarray:
    if isinstance(obs, dict):
        return np.concatenate([_vec(obs[k]) for k in sorted(obs)])
    return np.asarray(obs, dtype=np.float64).ravel().copy()


def _run(env, actions) -> np.ndarray:
    rows = []
    for a in actions:
        obs, r, term, trunc, info = env.step(a)
        rows.append(np.append(_vec(obs), [r, term, trunc, float(bool(info.get("is_success", False)))]))
    return np.stack(rows)


def _make(name: str, steps: int = 200):
    if name in list_builtin_specs():
        return make_env(name, max_episode_steps=steps)
    import gymnasium as gym

    register_robotics_envs()
    return gym.make(name, max_episode_steps=steps)


# ---------------------------------------------------------------- item 2: exact replay


@pytest.mark.parametrize("name", list_builtin_specs() + ["AntMaze_UMaze-v5"])
def test_restore_replays_bit_identical_on_every_task(name):
    """Snapshot mid-episode, replay 40 actions; restore (after another continuation and, for the built-in
    tasks, after a reset to another episode, as the MC labeller does) and replay them again: identical."""
    env = _make(name)
    env.reset(seed=11)
    rng = np.random.default_rng(0)
    shape = env.action_space.shape
    for _ in range(12):
        env.step(rng.uniform(-1, 1, shape))
    snap = Snapshotter(env)
    sim, py = snap.get().to_arrays()
    s = Snapshot.from_arrays(sim.copy(), json.loads(py))
    actions = rng.uniform(-1, 1, (40,) + shape)
    first = _run(env, actions)
    snap.restore(s)
    _run(env, rng.uniform(-1, 1, (9,) + shape))
    if name in list_builtin_specs():  # AntMaze's goal across episodes is not part of this check
        env.reset(seed=12)
        _run(env, rng.uniform(-1, 1, (5,) + shape))
    snap.restore(s)
    again = _run(env, actions)
    diff = np.abs(first - again).max(axis=1)
    assert np.array_equal(first, again), f"{name}: replay differs from step {int(np.argmax(diff > 0))}, max {diff.max():.3g}"
    env.close()
    correct(2, f"{name}: restore + replay of 40 actions after another continuation"
               + (" and a reset" if name in list_builtin_specs() else ""),
            "observations, rewards and flags bit-identical to the original rollout")


def test_pick_and_place_mc_replay_matches_collected_episodes(tmp_path):
    """Collected scripted episodes (grasp and lift): from every stored snapshot, a fresh env that ran
    another episode first replays the recorded actions to the recorded next critic inputs exactly."""
    collect(PICK, tmp_path, episodes=2, shard_size=2, max_episode_steps=50, seed=3, progress=False)
    meta = json.loads((tmp_path / "meta.json").read_text())
    layout = CriticInputLayout.from_dict(meta["layout"])
    d = load_shard(tmp_path / "shards" / "shard_00000.npz")
    env = make_env(load_spec(meta["spec"]))
    env.reset(seed=1234)
    for _ in range(7):
        env.step(env.action_space.sample())
    snap = Snapshotter(env)
    worst = 0.0
    for i in range(0, len(d["t"]), 5):
        snap.restore(Snapshot.from_arrays(d["sim"][i], str(d["py"][i])))
        rows = np.nonzero(d["episode"] == d["episode"][i])[0]
        rows = rows[rows >= i]
        for j in rows:
            obs, r, term, trunc, _ = env.step(d["action"][j])
            nx = layout.flatten(obs)
            worst = max(worst, float(np.abs(nx.astype(np.float64) - d["next_x"][j]).max()))
            assert np.array_equal(nx, d["next_x"][j]), (
                f"from t={d['t'][i]} of episode {d['episode'][i]}: step t={d['t'][j]} differs by "
                f"{np.abs(nx - d['next_x'][j]).max():.3g}")
            assert (r, term, trunc) == (d["reward"][j], d["terminated"][j], d["truncated"][j])
    assert worst == 0.0
    env.close()
    correct(2, f"{PICK}: restore every 5th stored snapshot of scripted episodes, replay the recorded actions",
            "every next critic input, reward and flag equals the recorded one")


_PICK_ENV: dict = {}


def _pick_env():
    if "env" not in _PICK_ENV:
        env = make_env(PICK, max_episode_steps=200)
        env.reset(seed=0)
        _PICK_ENV["env"] = env
        _PICK_ENV["snap"] = Snapshotter(env)
        _PICK_ENV["ctrl"] = make_policy(load_spec(PICK), env, "scripted")
    return _PICK_ENV["env"], _PICK_ENV["snap"], _PICK_ENV["ctrl"]


@pytest.mark.fault_outcome(2, 'FetchPickAndPlace restore at any step of any episode, replaying any horizon (property)',
                           'bit-identical to the original rollout')
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), prefix=st.integers(0, 60), horizon=st.integers(1, 40))
def test_property_pick_and_place_replay_is_exact(seed, prefix, horizon):
    """Property: for any episode seed, snapshot step in [0, 60] and horizon in [1, 40], the scripted
    controller's actions replay to the same observations after restore."""
    env, snap, ctrl = _pick_env()
    obs, _ = env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    ctrl.reset(obs, rng)
    for _ in range(prefix):
        obs, *_ = env.step(ctrl.act(obs))
    s = snap.get()
    actions = []
    for _ in range(horizon):
        a = ctrl.act(obs)
        actions.append(a)
        obs, *_ = env.step(a)
    env.reset(seed=seed + 1)
    snap.restore(s)
    first = _run(env, actions)
    snap.restore(s)
    again = _run(env, actions)
    assert np.array_equal(first, again)
    # and the replay equals the original rollout: rebuild it from the episode start
    o, _ = env.reset(seed=seed)
    ctrl.reset(o, np.random.default_rng(seed))
    for _ in range(prefix):
        o, *_ = env.step(ctrl.act(o))
    orig = _run(env, actions)
    assert np.array_equal(orig, first)


def test_fetch_snapshot_without_gripper_pose_is_refused():
    env = make_env(PICK)
    env.reset(seed=0)
    for _ in range(3):
        env.step(env.action_space.sample())
    snap = Snapshotter(env)
    s = snap.get()
    old = Snapshot(s.sim.copy(), {k: v for k, v in s.py.items() if k != "weld_pose"})
    with loud(2, f"{PICK} snapshot without the mocap-welded gripper pose (inexact replay)", ValueError,
              match=r"snapshot\.py\['weld_pose'\]: missing.*re-collect"):
        snap.restore(old)
    bad = Snapshot(s.sim.copy(), {**s.py, "weld_pose": [[0.0] * 6]})
    with loud(2, f"{PICK} snapshot whose gripper pose has the wrong shape", ValueError,
              match=r"weld_pose'\]: expected shape \(1, 7\).*got \(1, 6\)"):
        snap.restore(bad)
    env.close()


def test_fetch_push_snapshot_without_gripper_pose_still_replays_exactly():
    """FetchPush ends every step with mj_forward: a snapshot without the stored pose is still exact."""
    env = make_env("FetchPush-v4")
    env.reset(seed=0)
    rng = np.random.default_rng(1)
    for _ in range(5):
        env.step(rng.uniform(-1, 1, env.action_space.shape))
    snap = Snapshotter(env)
    s = snap.get()
    actions = rng.uniform(-1, 1, (20,) + env.action_space.shape)
    first = _run(env, actions)
    snap.restore(Snapshot(s.sim.copy(), {k: v for k, v in s.py.items() if k != "weld_pose"}))
    assert np.array_equal(first, _run(env, actions))
    env.close()
    correct(2, "FetchPush-v4 snapshot without the gripper pose", "restored and replayed bit-identically")


# ---------------------------------------------------------- item 4: meta.json vs data


@pytest.fixture(scope="module")
def push_data(tmp_path_factory):
    out = tmp_path_factory.mktemp("push_data")
    collect("FetchPush-v4", out, episodes=2, shard_size=1, max_episode_steps=8, progress=False)
    label(out, "outcome", progress=False)
    return out


def _edited(push_data, tmp_path, edit):
    out = tmp_path / "data"
    shutil.copytree(push_data, out)
    meta = json.loads((out / "meta.json").read_text())
    edit(meta)
    (out / "meta.json").write_text(json.dumps(meta))
    return out


def test_meta_layout_width_disagreeing_with_data_is_refused(push_data, tmp_path):
    assert load_steps(push_data, "outcome").x.shape[1] == 31

    def narrow(m):
        m["layout"]["sizes"]["observation"] = 24
        m["layout"]["obs_dim"] = 30

    out = _edited(push_data, tmp_path, narrow)
    with loud(4, "meta.json layout width 30 for data of width 31", ShardError,
              match=r"shard_00000\.npz.*data width of 'x' is 31.*meta\.json.*obs_dim=30"):
        load_steps(out, "outcome")


@pytest.mark.parametrize("what, edit, match", [
    ("obs_dim disagrees with the sum of the sizes",
     lambda m: m["layout"].__setitem__("obs_dim", 30), r"obs_dim=30 disagrees with the sum of its sizes .* = 31"),
    ("layout keys in another order than the spec's critic_input",
     lambda m: m["layout"].__setitem__("keys", ["achieved_goal", "observation", "desired_goal"]),
     r"layout keys \['achieved_goal', 'observation', 'desired_goal'\] disagree with the spec's critic_input "
     r"\['observation', 'achieved_goal', 'desired_goal'\]"),
    ("layout sizes name a key the layout lacks",
     lambda m: m["layout"]["sizes"].__setitem__("desired_goalz", m["layout"]["sizes"].pop("desired_goal")),
     r"layout sizes name \['achieved_goal', 'desired_goalz', 'observation'\]; expected one size for each of"),
    ("a layout size that is not a positive integer",
     lambda m: m["layout"]["sizes"].__setitem__("achieved_goal", 2.5), r"layout size of 'achieved_goal' is 2\.5"),
    ("layout without obs_dim", lambda m: m["layout"].pop("obs_dim"), r"layout is missing \['obs_dim'\]"),
    ("meta.json without layout", lambda m: m.pop("layout"), r"missing field 'layout'"),
    ("meta.json whose spec is not a task spec", lambda m: m.__setitem__("spec", {"task": {"name": "x"}}),
     r"field 'spec' is not a valid task spec"),
])
def test_meta_fields_disagreeing_are_refused(push_data, tmp_path, what, edit, match):
    out = _edited(push_data, tmp_path, edit)
    with loud(4, f"meta.json: {what}", ShardError, match=r"meta file '.*meta\.json'.*" + match):
        load_steps(out, "outcome")


@pytest.mark.fault_outcome(4, 'a consistent meta.json layout of any width (property)',
                           "loads only when its width is the data's; others refused naming both widths")
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(obs_size=st.integers(1, 80))
def test_property_any_observation_width_but_the_data_is_refused(push_data, tmp_path_factory, obs_size):
    """Property: a consistent layout (obs_dim = sum of sizes) loads only when its width is the data's."""
    tmp = tmp_path_factory.mktemp("w")

    def resize(m):
        m["layout"]["sizes"]["observation"] = obs_size
        m["layout"]["obs_dim"] = obs_size + 6

    out = _edited(push_data, tmp, resize)
    if obs_size == 25:
        assert load_steps(out, "outcome").x.shape == (16, 31)
    else:
        with pytest.raises(ShardError, match=rf"data width of 'x' is 31.*obs_dim={obs_size + 6}"):
            load_steps(out, "outcome")
