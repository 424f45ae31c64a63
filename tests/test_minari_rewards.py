"""Minari export with PRM rewards: a real collected PointMaze data set (episodes that terminate and
episodes cut by the time limit) exported with ``reward="prm_<family>"``, with and without potential
shaping, to a real Minari dataset (HDF5 storage); the rewards are the labels / the shaped formula
exactly, the same numbers PRMRewardShaper pays on a replay of the episodes, and d3rlpy trains on them."""

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

minari = pytest.importorskip("minari")
pytest.importorskip("h5py", reason='Minari\'s HDF5 storage needs h5py: pip install "prm-critic[minari]"')

from prm_critic.robotics.collection import collect, load_shard, read_meta  # noqa: E402
from prm_critic.robotics.families import LabelFamily, label_families, register_label_family, unregister_label_family  # noqa: E402
from prm_critic.robotics.label_rewards import reward_choices  # noqa: E402
from prm_critic.robotics.labels import label  # noqa: E402
from prm_critic.robotics.minari import REWARD_METADATA_KEY, export_minari  # noqa: E402

GAMMA = 0.9


@pytest.fixture(scope="module")
def collected(tmp_path_factory):
    """4 episodes in 2 shards: the first two reach the goal (terminated), the last two are truncated."""
    d = tmp_path_factory.mktemp("col") / "data"
    collect("PointMaze_UMaze-v3", d, episodes=4, shard_size=2, max_episode_steps=150, progress=False)
    label(d, "subgoal", progress=False)
    label(d, "outcome", progress=False)
    return d


def _episodes(d, family):
    """Per collected episode, in order: env rewards, terminated, the family's labels (float32)."""
    out = []
    for f in sorted((d / "shards").glob("shard_*.npz")):
        s = load_shard(f)
        lab = load_shard(d / "labels" / family / f.name, ("label", "mask"))
        for e in s["ep_index"].tolist():
            rows = np.nonzero(s["episode"] == e)[0]
            assert lab["mask"][rows].all()
            out.append((s["reward"][rows], s["terminated"][rows], lab["label"][rows]))
    return out


def _sha256(labels):
    h = hashlib.sha256()
    for lab in labels:
        h.update(np.ascontiguousarray(lab, dtype="<f4").tobytes())
    return h.hexdigest()


def test_reward_choices_follow_the_label_family_registry():
    assert reward_choices() == ("env", *(f"prm_{f}" for f in label_families()))
    assert {"prm_subgoal", "prm_mc", "prm_mc_bisect", "prm_outcome"} <= set(reward_choices())


@pytest.mark.parametrize("family", ["subgoal", "outcome"])
def test_rewards_are_the_labels_of_each_step(collected, tmp_path, family):
    ds = export_minari(collected, f"prm/{family}-v0", datasets_path=tmp_path, reward=f"prm_{family}")
    eps = _episodes(collected, family)
    got = list(ds.iterate_episodes())
    assert len(got) == len(eps) == 4
    assert {bool(t[-1]) for _, t, _ in eps} == {True, False}  # both endings are covered
    for ep, (r, term, lab) in zip(got, eps):
        assert ep.rewards.dtype == np.float64 and ep.rewards.shape == (len(lab),)  # one reward per transition
        assert np.isfinite(ep.rewards).all()
        np.testing.assert_array_equal(ep.rewards, lab.astype(np.float64))  # reward_t = label_t, exactly
        orig = ep.infos["prm_original_reward"]
        assert orig.shape == (len(r) + 1,) and np.isnan(orig[0])
        np.testing.assert_array_equal(orig[1:], r.astype(np.float64))
        np.testing.assert_array_equal(ep.terminations, term)
    rec = ds.storage.metadata[REWARD_METADATA_KEY]
    assert rec["reward"] == f"prm_{family}" and rec["family"] == family
    assert rec["shaping"] is None and rec["gamma"] is None
    assert rec["labels_sha256"] == _sha256([lab for _, _, lab in eps])
    assert rec["label_params"] == json.loads((collected / "labels" / f"{family}.json").read_text())
    assert rec["original_reward_info"] == "prm_original_reward"


def test_potential_shaped_rewards_follow_the_formula(collected, tmp_path, monkeypatch):
    ds = export_minari(collected, "prm/shaped-v0", datasets_path=tmp_path, reward="prm_subgoal", shaping="potential",
                       gamma=GAMMA, labels=["subgoal"])
    eps = _episodes(collected, "subgoal")
    truncated = 0
    for ep, (r, term, lab) in zip(ds.iterate_episodes(), eps):
        phi = lab.astype(np.float64)
        T = len(phi)
        # Phi(s_{t+1}) = label_{t+1}; the last one 0 on a true termination, else held at label_{T-1}
        nxt = np.append(phi[1:], 0.0 if term[-1] else phi[-1])
        truncated += not term[-1]
        expected = r.astype(np.float64) + (GAMMA * nxt - phi)
        assert ep.rewards.shape == (T,) and np.isfinite(ep.rewards).all()
        np.testing.assert_array_equal(ep.rewards, expected)
        np.testing.assert_array_equal(ep.infos["prm_original_reward"][1:], r.astype(np.float64))
        # the labels asked for as infos keep their own layout (T + 1, trailing NaN)
        assert ep.infos["prm_subgoal"].shape == (T + 1,) and np.isnan(ep.infos["prm_subgoal"][-1])
    assert truncated == 2
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path))
    rec = minari.load_dataset("prm/shaped-v0").storage.metadata[REWARD_METADATA_KEY]  # survives a reload
    assert rec["shaping"] == "potential" and rec["gamma"] == GAMMA and rec["family"] == "subgoal"
    assert rec["truncated_episodes"] == 2
    assert rec["labels_sha256"] == _sha256([lab for _, _, lab in eps])


def test_shaped_rewards_equal_prm_reward_shaper_on_a_replay(collected, tmp_path):
    """The subgoal labels are a SubgoalCritic's progress: replaying each episode's actions under
    PRMRewardShaper(head="progress") pays the exported rewards exactly, except on the last transition
    of a truncated episode, where the shaper scores s_T and the export holds the last label."""
    from prm_critic.robotics.make import make_env
    from prm_critic.robotics.spec import load_spec
    from prm_critic.robotics.subgoals import SubgoalCritic
    from prm_critic.wrappers import PRMRewardShaper

    ds = export_minari(collected, "prm/replay-v0", datasets_path=tmp_path, reward="prm_subgoal", shaping="potential",
                       gamma=GAMMA)
    spec = load_spec(read_meta(collected)["spec"])
    env = make_env(spec)
    shaper = PRMRewardShaper(env, SubgoalCritic(spec, env), gamma=GAMMA, head="progress")
    seeds = [m["seed"] for m in ds.storage.get_episode_metadata(ds.episode_indices)]
    for ep, seed in zip(ds.iterate_episodes(), seeds):
        shaper.reset(seed=int(seed))
        paid, terminated = [], False
        for a in ep.actions:
            _, r, terminated, truncated, info = shaper.step(a)
            paid.append(r)
        assert len(paid) == len(ep.rewards) and bool(terminated) == bool(ep.terminations[-1])
        np.testing.assert_array_equal(np.asarray(paid[:-1]), ep.rewards[:-1])
        if terminated:
            assert paid[-1] == ep.rewards[-1]
        else:  # the export's Phi(s_T) is label_{T-1}: the difference is gamma * (Phi(s_T) - label_{T-1})
            phi_last = float(ep.rewards[-1] - info["prm_original_reward"]) / (GAMMA - 1.0)
            assert paid[-1] - ep.rewards[-1] == pytest.approx(GAMMA * (info["prm_next_phi"] - phi_last), abs=1e-12)
    shaper.close()


def test_env_reward_export_is_unchanged(collected, tmp_path):
    a = export_minari(collected, "prm/plain-v0", datasets_path=tmp_path, labels=["subgoal"])
    b = export_minari(collected, "prm/env-v0", datasets_path=tmp_path, labels=["subgoal"], reward="env")
    ma, mb = a.storage.metadata, b.storage.metadata
    assert REWARD_METADATA_KEY not in ma and REWARD_METADATA_KEY not in mb
    skip = {"dataset_id", "observation_space", "action_space"}
    assert {k: v for k, v in ma.items() if k not in skip} == {k: v for k, v in mb.items() if k not in skip}
    eps = _episodes(collected, "subgoal")
    for ea, eb, (r, _, _) in zip(a.iterate_episodes(), b.iterate_episodes(), eps):
        np.testing.assert_array_equal(ea.rewards, r.astype(np.float64))
        for k in ("rewards", "actions", "terminations", "truncations"):
            np.testing.assert_array_equal(getattr(ea, k), getattr(eb, k))
        for k in ea.observations:
            np.testing.assert_array_equal(ea.observations[k], eb.observations[k])
        assert set(ea.infos) == set(eb.infos) == {"success", "prm_subgoal"}
        for k in ea.infos:
            np.testing.assert_array_equal(ea.infos[k], eb.infos[k])


def test_a_registered_family_is_a_reward_choice(collected, tmp_path):
    """A family added to the registry is exported like the built-ins (its labels written by hand here)."""
    from prm_critic.robotics.collection import atomic_savez, atomic_write_json

    d = tmp_path / "data"
    import shutil

    shutil.copytree(collected, d)
    for f in sorted((d / "shards").glob("shard_*.npz")):
        n = len(load_shard(f)["t"])
        (d / "labels" / "half").mkdir(parents=True, exist_ok=True)
        atomic_savez(d / "labels" / "half" / f.name, label=np.full(n, 0.5, np.float32), mask=np.ones(n, bool))
    atomic_write_json(d / "labels" / "half.json", {"family": "half"})
    register_label_family(LabelFamily("half", run=lambda job: job.out_dir / "labels" / "half"))
    try:
        assert "prm_half" in reward_choices()
        ds = export_minari(d, "prm/half-v0", datasets_path=tmp_path / "ds", reward="prm_half")
        assert all((ep.rewards == 0.5).all() for ep in ds.iterate_episodes())
        assert ds.storage.metadata[REWARD_METADATA_KEY]["label_params"] == {"family": "half"}
    finally:
        unregister_label_family("half")
    assert "prm_half" not in reward_choices()


def test_cli_minari_export_with_prm_rewards(collected, tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.getcwd(), *sys.path])}
    r = subprocess.run([sys.executable, "-m", "prm_critic.cli", "minari", "export", str(collected), "prm/cli-shaped-v0",
                        "--datasets-path", str(tmp_path), "--reward", "prm_subgoal", "--shaping", "potential",
                        "--gamma", str(GAMMA)], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    steps = sum(len(lab) for _, _, lab in _episodes(collected, "subgoal"))
    assert f"4 episodes, {steps} steps" in r.stdout
    assert "rewards: the env reward shaped by the labels (gamma 0.9) of family 'subgoal'" in r.stdout
    assert "2 truncated episode(s)" in r.stdout
    ds = minari.MinariDataset(tmp_path / "prm" / "cli-shaped-v0" / "data")
    assert ds.storage.metadata[REWARD_METADATA_KEY]["gamma"] == GAMMA


def test_d3rlpy_trains_on_the_prm_rewards_as_the_docs_show(collected, tmp_path, monkeypatch):
    """The d3rlpy example of docs/readme/robotics-data.md runs as written (10 update steps of batch 32
    instead of 10,000 of 256) on an export with shaped PRM rewards: its MDPDataset holds the exported episodes, rewards
    and observations, and the IQL updates give finite losses and a policy that acts."""
    pytest.importorskip("d3rlpy", reason="d3rlpy (offline RL) is not installed")
    import torch

    text = (Path(__file__).resolve().parents[1] / "docs" / "readme" / "robotics-data.md").read_text()
    code = next(b for b in re.findall(r"```python\n(.*?)```", text, re.S) if "d3rlpy" in b)
    steps = "n_steps=10_000, n_steps_per_epoch=1_000"
    assert steps in code and "gamma=0.99" in code
    code = code.replace(steps, "n_steps=10, n_steps_per_epoch=10, show_progress=False")
    assert code.count("IQLConfig(gamma=0.99)") == 1
    code = code.replace("IQLConfig(gamma=0.99)", "IQLConfig(gamma=0.99, batch_size=32)")  # a few cheap updates
    assert code.count("\niql.fit(") == 1
    code = code.replace("\niql.fit(", "\nlosses = iql.fit(")  # keep what fit returns
    export_minari(collected, "prm/umaze-shaped-v0", datasets_path=tmp_path / "minari_data", reward="prm_subgoal",
                  shaping="potential", gamma=0.99)
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari_data"))
    monkeypatch.chdir(tmp_path)  # d3rlpy writes its logs to ./d3rlpy_logs
    torch.manual_seed(0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    ns = {}
    try:
        exec(compile(code, "robotics-data.md", "exec"), ns)
    finally:
        torch.set_num_threads(threads)
    ds, dataset, flat, iql = ns["ds"], ns["dataset"], ns["flat"], ns["iql"]
    assert len(dataset.episodes) == 4
    for e, ep in zip(dataset.episodes, ds.iterate_episodes()):
        np.testing.assert_array_equal(np.asarray(e.rewards).reshape(-1), ep.rewards)  # the PRM rewards
        np.testing.assert_array_equal(e.observations, flat(ep.observations)[:-1])
        assert bool(e.terminated) == bool(ep.terminations[-1])
    assert ds.storage.metadata[REWARD_METADATA_KEY]["gamma"] == 0.99
    assert iql.grad_step == 10
    losses = ns["losses"]
    assert len(losses) == 1 and losses[0][1] and all(np.isfinite(v) for v in losses[0][1].values())
    env = ds.recover_environment()
    obs, _ = env.reset(seed=0)
    action = iql.predict(flat({k: np.asarray(v)[None] for k, v in obs.items()}))
    assert action.shape == (1, 2) and np.isfinite(action).all()
    env.close()
