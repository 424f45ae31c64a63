"""Collection and labelling on real envs: shards, resumption after SIGKILL, label semantics, bad input."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("gymnasium_robotics")

from prm_critic.cli import main  # noqa: E402
from prm_critic.robotics.collection import SHARD_KEYS, ShardError, collect, load_shard  # noqa: E402
from prm_critic.robotics.dataset import load_steps, split_episodes  # noqa: E402
from prm_critic.robotics.labels import label  # noqa: E402

MAZE = "PointMaze_UMaze-v3"
REPO = Path(__file__).resolve().parents[1]


def _shards(d, sub="shards"):
    return [load_shard(f, ()) for f in sorted((Path(d) / sub).glob("shard_*.npz"))]


def _assert_same_dirs(a, b, sub="shards"):
    sa, sb = _shards(a, sub), _shards(b, sub)
    assert len(sa) == len(sb) and sa
    for x, y in zip(sa, sb):
        assert sorted(x) == sorted(y)
        for k in x:
            assert x[k].dtype == y[k].dtype, k
            assert np.array_equal(x[k], y[k], equal_nan=x[k].dtype.kind == "f"), k


@pytest.fixture(scope="module")
def maze_data(tmp_path_factory):
    d = tmp_path_factory.mktemp("maze")
    collect(MAZE, d, episodes=6, shard_size=3, max_episode_steps=60, seed=0, progress=False)
    return d


def test_collect_writes_consistent_shards(maze_data):
    meta = json.loads((maze_data / "meta.json").read_text())
    assert meta["task"] == MAZE and meta["episodes"] == 6 and meta["spec"]["task"]["max_episode_steps"] == 60
    assert meta["maze"] is not None
    shards = _shards(maze_data)
    assert len(shards) == 2
    eps = np.concatenate([s["ep_index"] for s in shards])
    assert eps.tolist() == list(range(6))
    for s in shards:
        assert set(SHARD_KEYS) <= set(s)
        n = len(s["t"])
        assert s["x"].shape == (n, meta["layout"]["obs_dim"]) and s["x"].dtype == np.float32
        assert s["sim"].dtype == np.float64 and s["py"].dtype.kind == "U" and s["sim"].shape[0] == n
        assert s["ep_len"].sum() == n
        # next_x of a step is x of the following step inside an episode
        same = s["episode"][1:] == s["episode"][:-1]
        assert np.array_equal(s["next_x"][:-1][same], s["x"][1:][same])
        # an episode ends with termination (goal reached) or truncation at 60 steps
        for e, length, ok in zip(s["ep_index"], s["ep_len"], s["ep_success"]):
            rows = s["episode"] == e
            assert s["t"][rows].tolist() == list(range(length))
            last = np.nonzero(rows)[0][-1]
            assert s["terminated"][last] or (s["truncated"][last] and length == 60)
            assert ok == s["success"][rows].any()


def test_labels_semantics(maze_data):
    label(maze_data, "subgoal", progress=False)
    label(maze_data, "outcome", gamma=0.9, progress=False)
    label(maze_data, "mc", k=4, stride=4, seed=0, progress=False)

    sub = load_steps(maze_data, "subgoal")
    assert sub.success.dtype == np.float32 and sub.mask.all()
    assert np.all((sub.success >= 0) & (sub.success <= 1))
    assert np.array_equal(sub.success, sub.progress)
    starts = sub.success[sub.t == 0]
    last = np.r_[sub.episode[1:] != sub.episode[:-1], True]
    ends_ok = sub.success[last & sub.ep_success]
    assert len(ends_ok) > 0 and ends_ok.mean() > starts.mean()

    out = load_steps(maze_data, "outcome")
    expect = (0.9 ** (out.ep_len - 1 - out.t) * out.ep_success).astype(np.float32)
    assert np.array_equal(out.success, expect)

    label(maze_data, "steps_to_success", gamma=0.9, progress=False)
    sts = load_steps(maze_data, "steps_to_success")
    assert sts.mask.all() and sts.success.dtype == np.float32
    step_ok = sts.extra["step_success"]
    for i in np.flatnonzero(sts.t % 7 == 0):  # a scan per sampled step: the first success at or after it
        later = np.flatnonzero((sts.episode == sts.episode[i]) & (sts.t >= sts.t[i]) & step_ok)
        want = 0.9 ** (sts.t[later[0]] - sts.t[i]) if len(later) else 0.0
        assert sts.success[i] == np.float32(want), (sts.episode[i], sts.t[i])
    # a successful episode's steps are all worth something; a failed one's nothing
    assert (sts.success[sts.ep_success] > 0).all() and (sts.success[~sts.ep_success] == 0).all()

    mc = load_steps(maze_data, "mc")
    assert np.array_equal(mc.mask, mc.t % 4 == 0)
    assert np.isnan(mc.success[~mc.mask]).all()
    lab = mc.success[mc.mask]
    assert np.all((lab >= 0) & (lab <= 1))
    assert np.any((lab > 0) & (lab < 1)), "soft MC labels must be kept as fractions"
    assert np.array_equal(mc.extra["hard"][mc.mask], (lab > 0).astype(np.float32))
    # MC labels are informative: states of successful episodes are more recoverable on average
    assert lab[mc.ep_success[mc.mask]].mean() > lab[~mc.ep_success[mc.mask]].mean()

    train, test = split_episodes(mc, holdout=0.34, seed=0)
    assert len(train) + len(test) == len(mc)
    assert not set(train.episode.tolist()) & set(test.episode.tolist())
    assert len(test.episodes) == 2


def test_mc_label_of_a_state_is_reproducible(maze_data):
    from prm_critic.robotics.labels import MCLabeler

    meta = json.loads((maze_data / "meta.json").read_text())
    s = _shards(maze_data)[0]
    lab = MCLabeler(meta, k=4, seed=0)
    i = 8
    v1 = lab.label_state(s["sim"][i], str(s["py"][i]), s["x"][i], s["episode"][i], s["t"][i])
    lab.label_state(s["sim"][20], str(s["py"][20]), s["x"][20], s["episode"][20], s["t"][20])
    v2 = lab.label_state(s["sim"][i], str(s["py"][i]), s["x"][i], s["episode"][i], s["t"][i])
    assert v1 == v2
    assert lab.steps > 0


def test_fetch_push_collection_and_mc(tmp_path):
    collect("FetchPush-v4", tmp_path, episodes=2, shard_size=2, max_episode_steps=50, progress=False)
    label(tmp_path, "mc", k=2, stride=10, progress=False)
    mc = load_steps(tmp_path, "mc")
    assert len(mc) == 100 and mc.mask.sum() == 10
    assert mc.x.shape == (100, 31)


def _cli(*args, **kw):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-m", "prm_critic.cli", *args, "--no-progress"], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)


def _kill_after_first(proc, folder, timeout=120):
    t0 = time.time()
    while time.time() - t0 < timeout:
        if any(folder.glob("shard_*.npz")):
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            return
        if proc.poll() is not None:
            raise AssertionError(f"finished before it could be killed: {proc.stderr.read().decode()[-2000:]}")
        time.sleep(0.005)
    proc.kill()
    raise AssertionError("no shard appeared")


@pytest.mark.slow
def test_collect_and_label_resume_after_sigkill(tmp_path):
    args = ["--task", MAZE, "--episodes", "16", "--shard-size", "2", "--max-episode-steps", "80", "--seed", "5"]
    killed, ref = tmp_path / "killed", tmp_path / "ref"
    p = _cli("collect", "--out", str(killed), *args)
    _kill_after_first(p, killed / "shards")
    n_before = len(list((killed / "shards").glob("shard_*.npz")))
    assert 1 <= n_before < 8
    p = _cli("collect", "--out", str(killed), *args)
    assert p.wait() == 0, p.stderr.read().decode()[-2000:]
    assert main(["collect", "--out", str(ref), *args, "--no-progress"]) == 0
    _assert_same_dirs(killed, ref)
    eps = np.concatenate([s["ep_index"] for s in _shards(killed)])
    assert eps.tolist() == list(range(16))
    rows = np.concatenate([s["episode"] for s in _shards(killed)])
    assert np.array_equal(np.unique(rows), np.arange(16))
    assert not list((killed / "shards").glob(".*tmp*"))

    largs = ["--family", "mc", "--k", "2", "--stride", "4"]
    p = _cli("label", "--data", str(killed), *largs)
    _kill_after_first(p, killed / "labels" / "mc")
    n_lab = len(list((killed / "labels" / "mc").glob("shard_*.npz")))
    assert 1 <= n_lab < 8
    p = _cli("label", "--data", str(killed), *largs)
    assert p.wait() == 0, p.stderr.read().decode()[-2000:]
    assert main(["label", "--data", str(ref), *largs, "--no-progress"]) == 0
    _assert_same_dirs(killed, ref, "labels/mc")
    assert len(load_steps(killed, "mc")) == sum(len(s["t"]) for s in _shards(ref))


def test_unknown_task_is_one_clear_error(tmp_path, capsys):
    assert main(["collect", "--task", "FetchPsh-v4", "--out", str(tmp_path / "x"), "--episodes", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "unknown task 'FetchPsh-v4'" in err[0] and "did you mean 'FetchPush-v4'" in err[0]


def test_mismatched_meta_on_resume(maze_data, tmp_path, capsys):
    with pytest.raises(ValueError, match=r"other settings \(1 differ: seed: 0 there, 1 in this run\)"):
        collect(MAZE, maze_data, episodes=6, shard_size=3, max_episode_steps=60, seed=1, progress=False)
    rc = main(["collect", "--task", "FetchReach-v4", "--out", str(maze_data), "--episodes", "1", "--no-progress"])
    assert rc == 2
    assert "task: 'PointMaze_UMaze-v3' there, 'FetchReach-v4' in this run" in capsys.readouterr().err
    label(maze_data, "outcome", gamma=0.9, progress=False)  # same parameters: resumes (nothing to do)
    with pytest.raises(ValueError, match=r"labels made with other parameters"):
        label(maze_data, "outcome", gamma=0.5, progress=False)


def test_corrupt_shard_names_the_file(tmp_path):
    collect(MAZE, tmp_path, episodes=2, shard_size=1, max_episode_steps=20, progress=False)
    label(tmp_path, "subgoal", progress=False)
    bad = tmp_path / "shards" / "shard_00001.npz"
    bad.write_bytes(b"PK\x03\x04 garbage")
    with pytest.raises(ShardError, match=r"shard_00001\.npz.*corrupt"):
        load_steps(tmp_path, "subgoal")


def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match=r"episodes: expected an int >= 1, got 0$"):
        collect(MAZE, tmp_path, episodes=0)
    with pytest.raises(TypeError, match=r"seed: expected an int >= 0, got bool True$"):
        collect(MAZE, tmp_path, episodes=1, seed=True)
    with pytest.raises(ValueError, match=r"policy: expected 'scripted', 'random', a prm-critic policy checkpoint .* or a stable-baselines3 model .zip, got 'greedy'$"):
        collect(MAZE, tmp_path, episodes=1, policy="greedy")
    with pytest.raises(ValueError, match=r"family: expected one of"):
        load_steps(tmp_path, "oracle")
    with pytest.raises(FileNotFoundError, match=r"meta.json"):
        label(tmp_path / "nothing", "mc")


def test_collect_and_mc_label_with_a_trained_policy_checkpoint(tmp_path):
    """A train-policy checkpoint (safetensors + JSON, no pickle) is a behaviour / rollout policy,
    with its observation normalisation applied; other files are refused with a clear error."""
    pytest.importorskip("stable_baselines3")
    from prm_critic.robotics.controllers import SB3Controller
    from prm_critic.robotics.make import make_env
    from prm_critic.sb3 import load_policy, predict, train_policy

    task = "FetchReach-v4"
    train_policy(task, algo="sac", total_steps=120, seed=0, log_dir=tmp_path / "pol", normalize_obs=True,
                 algo_kwargs=dict(learning_starts=60, batch_size=32, policy_kwargs=dict(net_arch=[16, 16])))
    pol = tmp_path / "pol" / "policy.json"
    # the controller normalises observations with the checkpoint's statistics, as in training
    loaded = load_policy(pol)
    ctrl = SB3Controller(loaded, deterministic=True)
    env = make_env(task)
    obs, _ = env.reset(seed=3)
    env.close()
    np.testing.assert_array_equal(ctrl.act(obs), predict(loaded, obs)[0])
    assert not np.allclose(ctrl.act(obs), loaded.predict(obs, deterministic=True)[0])
    # collect with it (the path is recorded resolved), then MC labels rolled out with it
    out = collect(task, tmp_path / "data", episodes=2, policy=str(pol), progress=False, policy_loader=load_policy)
    meta = json.loads((out / "meta.json").read_text())
    assert meta["policy"] == str(pol.resolve())
    assert sum(len(s["ep_len"]) for s in _shards(out)) == 2
    lab = label(out, "mc", k=1, stride=25, rollout_policy=str(pol), progress=False, policy_loader=load_policy)
    assert list(Path(lab).glob("shard_*.npz"))
    # the stem works too; a critic checkpoint, another task's policy and a missing file are refused
    assert collect(task, tmp_path / "data_stem", episodes=1, policy=str(tmp_path / "pol" / "policy"), progress=False,
                   policy_loader=load_policy)
    # the data layer does not import the SB3 integration: a policy checkpoint needs its loader
    with pytest.raises(ValueError, match=r"policy: .*policy.json' is a prm-critic policy checkpoint; loading it needs "
                                         r"the SB3 integration: pass policy_loader=prm_critic.sb3.load_policy"):
        collect(task, tmp_path / "d0", episodes=1, policy=str(pol), progress=False)
    assert not (tmp_path / "d0").exists()
    with pytest.raises(ValueError, match=r"rollout_policy: .*policy.json' is a prm-critic policy checkpoint"):
        label(out, "mc", k=1, stride=25, rollout_policy=str(pol), seed=1, progress=False)
    bad = tmp_path / "critic.json"
    bad.write_text(json.dumps({"format": "prm-critic/state-critic"}))
    (tmp_path / "critic.safetensors").write_bytes(b"")
    with pytest.raises(ValueError, match=r"policy: .*critic.json' is not a prm-critic policy checkpoint \(format "
                                         r"'prm-critic/state-critic'"):
        collect(task, tmp_path / "d2", episodes=1, policy=str(bad), progress=False)
    with pytest.raises(ValueError, match=r"policy: .*policy.json' is a policy for 'FetchReach-v4', expected one for "
                                         r"'PointMaze_UMaze-v3'"):
        collect(MAZE, tmp_path / "d3", episodes=1, policy=str(pol), progress=False)
    with pytest.raises(ValueError, match=r"policy: expected 'scripted', 'random', a prm-critic policy checkpoint.*"
                                         r"got '.*nope.json' \(no nope.json \+ nope.safetensors there\)"):
        collect(task, tmp_path / "d4", episodes=1, policy=str(tmp_path / "nope.json"), progress=False)
    with pytest.raises(ValueError, match=r"rollout_policy: expected 'scripted'"):
        label(out, "mc", k=1, stride=25, rollout_policy="greedy", progress=False)
