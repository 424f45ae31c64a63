"""Minari export/import: a real collected PointMaze data set goes through a real Minari dataset
(HDF5 storage) and comes back with identical arrays; mismatched datasets are refused."""

import os
import subprocess
import sys

import numpy as np
import pytest

minari = pytest.importorskip("minari")
pytest.importorskip("h5py", reason='Minari\'s HDF5 storage needs h5py: pip install "prm-critic[minari]"')

from prm_critic.robotics.collection import collect, load_shard  # noqa: E402
from prm_critic.robotics.labels import label  # noqa: E402
from prm_critic.robotics.minari import MinariLayoutError, export_minari, import_minari  # noqa: E402

KEYS = ("x", "next_x", "action", "reward", "terminated", "truncated", "success", "episode", "t",
        "ep_index", "ep_len", "ep_success", "ep_seed")


@pytest.fixture(scope="module")
def collected(tmp_path_factory):
    d = tmp_path_factory.mktemp("col") / "data"
    collect("PointMaze_UMaze-v3", d, episodes=3, shard_size=2, max_episode_steps=40, progress=False)
    label(d, "subgoal", progress=False)
    return d


def test_round_trip_through_minari_is_identical(collected, tmp_path, monkeypatch):
    monkeypatch.delenv("MINARI_DATASETS_PATH", raising=False)
    home_before = os.path.exists(os.path.expanduser("~/.minari/datasets/prm/pm-v0"))
    ds = export_minari(collected, "prm/pm-v0", datasets_path=tmp_path / "ds", labels=["subgoal"])
    assert (tmp_path / "ds" / "prm" / "pm-v0" / "data").is_dir()
    assert os.path.exists(os.path.expanduser("~/.minari/datasets/prm/pm-v0")) == home_before
    assert "MINARI_DATASETS_PATH" not in os.environ  # restored

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "ds"))
    loaded = minari.load_dataset("prm/pm-v0")
    assert loaded.total_episodes == ds.total_episodes == 3
    sub = load_shard(collected / "labels" / "subgoal" / "shard_00000.npz", ("label", "mask"))
    for ep in loaded.iterate_episodes():
        T = len(ep.rewards)
        assert set(ep.observations) == {"observation", "achieved_goal", "desired_goal"}
        assert all(v.shape[0] == T + 1 for v in ep.observations.values())
        assert ep.infos["success"].shape == (T + 1,) and ep.infos["prm_subgoal"].shape == (T + 1,)
        assert np.isnan(ep.infos["prm_subgoal"][-1])
        if ep.id == 0:
            np.testing.assert_array_equal(ep.infos["prm_subgoal"][:-1], sub["label"][:T])
    env = loaded.recover_environment()  # the env spec Minari stored rebuilds the task's env
    assert env.spec.id == "PointMaze_UMaze-v3" and env.spec.max_episode_steps == 40
    env.close()

    out = import_minari("prm/pm-v0", tmp_path / "back", spec="PointMaze_UMaze-v3", shard_size=2)
    files = sorted((collected / "shards").glob("shard_*.npz"))
    assert [f.name for f in files] == [f.name for f in sorted((out / "shards").glob("shard_*.npz"))]
    for f in files:
        a, b = load_shard(f), load_shard(out / "shards" / f.name)
        for k in KEYS:
            assert a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k]), (f.name, k)
    # the imported data labels like collected data
    label(out, "subgoal", progress=False)
    np.testing.assert_array_equal(load_shard(out / "labels" / "subgoal" / "shard_00000.npz", ("label",))["label"], sub["label"])


def test_import_refuses_a_dataset_of_another_env_or_layout(collected, tmp_path, monkeypatch):
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path))
    export_minari(collected, "prm/pm-v1", datasets_path=tmp_path)
    with pytest.raises(MinariLayoutError, match=r"env 'PointMaze_UMaze-v3' does not match spec 'FetchReach-v4' "
                                                r"env_id 'FetchReach-v4'"):
        import_minari("prm/pm-v1", tmp_path / "x", spec="FetchReach-v4", datasets_path=tmp_path)
    # same env id, but a dataset whose "observation" is wider than the spec's env (a real Minari dataset)
    import gymnasium as gym
    from minari.data_collector import EpisodeBuffer

    wide = gym.spaces.Dict({"achieved_goal": gym.spaces.Box(-np.inf, np.inf, (2,), np.float64),
                            "desired_goal": gym.spaces.Box(-np.inf, np.inf, (2,), np.float64),
                            "observation": gym.spaces.Box(-np.inf, np.inf, (6,), np.float64)})
    obs = {k: np.zeros((3,) + sp.shape) for k, sp in wide.spaces.items()}
    buf = EpisodeBuffer(id=0, observations=obs, actions=np.zeros((2, 2), np.float32), rewards=[0.0, 0.0],
                        terminations=[False, False], truncations=[False, True], infos={"success": np.zeros(3, bool)})
    with pytest.warns(UserWarning):  # Minari's notes on metadata left out
        ds = minari.create_dataset_from_buffers("prm/wide-v0", [buf], env=gym.spec("PointMaze_UMaze-v3"),
                                                observation_space=wide, action_space=gym.spaces.Box(-1, 1, (2,)))
    with pytest.raises(MinariLayoutError, match=r"observation layout .*'observation': 6.* does not match spec "
                                                r"'PointMaze_UMaze-v3'.*keys \['observation'\] differ"):
        import_minari(ds, tmp_path / "y", spec="PointMaze_UMaze-v3")
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()


def test_export_names_missing_labels_and_an_unknown_dataset(collected, tmp_path):
    with pytest.raises(FileNotFoundError, match=r"family 'mc' has no label shards .*prm-critic label --data"):
        export_minari(collected, "prm/pm-v2", datasets_path=tmp_path, labels=["mc"])
    with pytest.raises(FileNotFoundError, match=r"no Minari dataset 'prm/nothing-v0'"):
        import_minari("prm/nothing-v0", tmp_path / "z", spec="PointMaze_UMaze-v3", datasets_path=tmp_path)


def test_cli_minari_export_and_import(collected, tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.getcwd(), *sys.path])}
    base = [sys.executable, "-m", "prm_critic.cli", "minari"]
    r = subprocess.run(base + ["export", str(collected), "prm/cli-v0", "--datasets-path", str(tmp_path)],
                       capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "3 episodes, 120 steps" in r.stdout
    r = subprocess.run(base + ["import", "prm/cli-v0", str(tmp_path / "imp"), "--spec", "PointMaze_UMaze-v3",
                               "--datasets-path", str(tmp_path)], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    assert (tmp_path / "imp" / "meta.json").is_file()
    r = subprocess.run(base + ["import", "prm/cli-v0", str(tmp_path / "imp"), "--spec", "PointMaze_UMaze-v3",
                               "--datasets-path", str(tmp_path)], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 2 and "already holds data" in r.stderr and "Traceback" not in r.stderr
