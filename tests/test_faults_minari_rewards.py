"""Minari export with PRM rewards: every bad reward choice is refused before a dataset is written.

Real PointMaze data (2 episodes, one shard) with subgoal labels; label files corrupted on a copy
(NaN, inf, an unlabelled step, a short file); an unknown or unlabelled family; gamma outside (0, 1].
"""

import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

minari = pytest.importorskip("minari")
pytest.importorskip("h5py", reason='Minari\'s HDF5 storage needs h5py: pip install "prm-critic[minari]"')

from faults import correct, loud  # noqa: E402
from prm_critic.robotics.collection import ShardError, atomic_savez, collect, load_shard  # noqa: E402
from prm_critic.robotics.label_rewards import reward_choices  # noqa: E402
from prm_critic.robotics.labels import label  # noqa: E402
from prm_critic.robotics.minari import REWARD_METADATA_KEY, export_minari  # noqa: E402
from prm_critic.validate import ArgumentError  # noqa: E402

pytestmark = pytest.mark.fault

SHARD = "shard_00000.npz"


@pytest.fixture(scope="module")
def collected(tmp_path_factory):
    d = tmp_path_factory.mktemp("col") / "data"
    collect("PointMaze_UMaze-v3", d, episodes=2, shard_size=2, max_episode_steps=30, progress=False)
    label(d, "subgoal", progress=False)
    return d


def _written(root, name):
    return (root / "prm" / name).exists()


def _corrupt(collected, tmp_path, edit):
    """A copy of the data whose subgoal label file went through ``edit(label, mask)`` (in place)."""
    d = tmp_path / "data"
    shutil.copytree(collected, d)
    f = d / "labels" / "subgoal" / SHARD
    lab = load_shard(f, ("label", "mask"))
    label_, mask = lab["label"].copy(), lab["mask"].copy()
    out = edit(label_, mask)
    if out is not None:
        label_, mask = out
    atomic_savez(f, label=label_, mask=mask)
    return d


def _row(collected, episode, t):
    s = load_shard(collected / "shards" / SHARD)
    return int(np.nonzero((s["episode"] == episode) & (s["t"] == t))[0][0])


def test_unknown_family_names_the_registered_choices(collected, tmp_path):
    choices = re.escape(str(list(reward_choices())))
    with loud(36, "minari export reward='prm_nope' (no such label family)", ArgumentError,
              match=rf"reward: expected one of {choices}, got 'prm_nope'"):
        export_minari(collected, "prm/nope-v0", datasets_path=tmp_path, reward="prm_nope")
    with loud(36, "minari export reward='prm_subgoa' (a near miss)", ArgumentError,
              match=r"got 'prm_subgoa'; did you mean 'prm_subgoal'\?"):
        export_minari(collected, "prm/nope-v0", datasets_path=tmp_path, reward="prm_subgoa")
    assert not _written(tmp_path, "nope-v0")


def test_family_without_labels_is_named_with_the_command_to_run(collected, tmp_path):
    with loud(36, "minari export reward='prm_outcome' on data labelled with subgoal only", FileNotFoundError,
              match=rf"reward: family 'outcome' has no label shards \['{SHARD}'\] in .*labels/outcome'.*"
                    r"prm-critic label --data .* --family outcome"):
        export_minari(collected, "prm/unlabelled-v0", datasets_path=tmp_path, reward="prm_outcome")
    assert not _written(tmp_path, "unlabelled-v0")


@pytest.mark.parametrize("value,shown", [(np.nan, "nan"), (np.inf, "inf"), (-np.inf, "-inf")])
def test_a_non_finite_label_is_named_by_episode_and_step(collected, tmp_path, value, shown):
    row = _row(collected, 1, 7)
    d = _corrupt(collected, tmp_path, lambda lab, mask: lab.__setitem__(row, value))
    for shaping, gamma in ((None, None), ("potential", 0.99)):
        with loud(36, f"minari export reward='prm_subgoal' shaping={shaping} with a label {shown} at episode 1 step 7",
                  ArgumentError,
                  match=rf"reward: label family 'subgoal', episode 1 step t=7 \(label file .*{SHARD}'; 1 of 30 steps "
                        rf"of the episode\) has label {re.escape(shown)}; expected a finite number"):
            export_minari(d, "prm/nan-v0", datasets_path=tmp_path / "ds", reward="prm_subgoal", shaping=shaping,
                          gamma=gamma)
    assert not _written(tmp_path / "ds", "nan-v0")
    # the same labels as infos only (reward="env") export as before: NaN stays a "no label" marker there
    if shown == "nan":
        ds = export_minari(d, "prm/nan-infos-v0", datasets_path=tmp_path / "ds", labels=["subgoal"])
        ep = list(ds.iterate_episodes())[1]
        assert np.isnan(ep.infos["prm_subgoal"][7]) and REWARD_METADATA_KEY not in ds.storage.metadata
        correct(36, "the same NaN label exported with reward='env' and labels=['subgoal']",
                "exported as before: env rewards, infos['prm_subgoal'] NaN at that step")


def test_an_unlabelled_step_is_refused(collected, tmp_path):
    row = _row(collected, 0, 4)
    d = _corrupt(collected, tmp_path, lambda lab, mask: (np.where(np.arange(len(lab)) == row, np.nan, lab),
                                                         np.where(np.arange(len(mask)) == row, False, mask)))
    with loud(36, "minari export reward='prm_subgoal' with an unlabelled step (mask False, as mc with stride > 1)",
              ArgumentError,
              match=r"reward: label family 'subgoal', episode 0 step t=4 .* is unlabelled \(mask False\); expected a "
                    r"finite label at every step for reward='prm_subgoal' .*relabel with --stride 1"):
        export_minari(d, "prm/mask-v0", datasets_path=tmp_path / "ds", reward="prm_subgoal")
    assert not _written(tmp_path / "ds", "mask-v0")


def test_a_label_file_of_another_length_is_refused(collected, tmp_path):
    d = _corrupt(collected, tmp_path, lambda lab, mask: (lab[:-3], mask[:-3]))
    with loud(36, "minari export reward='prm_subgoal' whose label file has 3 rows fewer than its shard", ShardError,
              match=rf"label file .*{SHARD}' has 57 rows, its data shard .*{SHARD}' has 60"):
        export_minari(d, "prm/short-v0", datasets_path=tmp_path / "ds", reward="prm_subgoal")
    assert not _written(tmp_path / "ds", "short-v0")


@pytest.mark.parametrize("gamma", [0.0, 1.5, -0.5, float("nan"), float("inf"), True, "0.99"])
def test_gamma_outside_the_unit_interval_is_refused(collected, tmp_path, gamma):
    with loud(36, f"minari export shaping='potential' gamma={gamma!r}", ArgumentError,
              match=rf"gamma: expected a number in \(0, 1\] \(the discount of the offline learner that trains on the "
                    rf"rewards\), got {re.escape(repr(gamma))}"):
        export_minari(collected, "prm/gamma-v0", datasets_path=tmp_path, reward="prm_subgoal", shaping="potential",
                      gamma=gamma)
    assert not _written(tmp_path, "gamma-v0")


@pytest.mark.parametrize("kwargs,fault,match", [
    ({"reward": "prm_subgoal", "shaping": "potential"}, "shaping='potential' without gamma",
     r"gamma: shaping 'potential' needs the discount gamma, a number in \(0, 1\].*got None"),
    ({"reward": "prm_subgoal", "gamma": 0.99}, "gamma=0.99 without shaping (it would not be used)",
     r"gamma: only the potential shaping uses a discount; expected gamma=None without shaping='potential', got "
     r"gamma=0.99"),
    ({"reward": "env", "shaping": "potential", "gamma": 0.99}, "shaping='potential' with reward='env'",
     r"shaping: 'potential' shapes the env reward with a label family's labels; expected reward='prm_<family>'"),
    ({"reward": "prm_subgoal", "shaping": "linear", "gamma": 0.99}, "shaping='linear'",
     r"shaping: expected one of \['potential'\] or None, got 'linear'"),
])
def test_inconsistent_shaping_arguments_are_refused(collected, tmp_path, kwargs, fault, match):
    with loud(36, f"minari export {fault}", ArgumentError, match=match):
        export_minari(collected, "prm/args-v0", datasets_path=tmp_path, **kwargs)
    assert not _written(tmp_path, "args-v0")


def test_a_failed_metadata_write_leaves_no_dataset(collected, tmp_path, monkeypatch):
    from minari.dataset.minari_storage import MinariStorage

    real = MinariStorage.update_metadata

    def failing(self, metadata):
        if REWARD_METADATA_KEY in metadata:
            raise OSError("disk full (injected)")
        return real(self, metadata)

    monkeypatch.setattr(MinariStorage, "update_metadata", failing)
    with loud(36, "minari export reward='prm_subgoal' whose metadata write fails", OSError, match="injected"):
        export_minari(collected, "prm/meta-v0", datasets_path=tmp_path, reward="prm_subgoal")
    assert not _written(tmp_path, "meta-v0")
    correct(36, "a failed metadata write after the episodes were written",
            "the dataset is deleted: no dataset whose rewards are not described")


def test_cli_refuses_an_unknown_reward_without_a_traceback(collected, tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.getcwd(), *sys.path])}
    r = subprocess.run([sys.executable, "-m", "prm_critic.cli", "minari", "export", str(collected), "prm/cli-bad-v0",
                        "--datasets-path", str(tmp_path), "--reward", "prm_nope"], capture_output=True, text=True,
                       timeout=300, env=env)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert f"reward: expected one of {list(reward_choices())}, got 'prm_nope'" in r.stderr
    assert not _written(tmp_path, "cli-bad-v0")
    correct(36, "prm-critic minari export --reward prm_nope", "exit 2, the registered choices named, no traceback")


def test_a_missing_or_corrupt_label_parameter_file_is_refused(collected, tmp_path):
    d = tmp_path / "data"
    shutil.copytree(collected, d)
    (d / "labels" / "subgoal.json").write_text("{")
    with loud(36, "minari export reward='prm_subgoal' whose labels/subgoal.json is not JSON", ShardError,
              match=r"label parameter file .*subgoal.json' is not valid JSON .*prm-critic label --data"):
        export_minari(d, "prm/params-v0", datasets_path=tmp_path / "ds", reward="prm_subgoal")
    (d / "labels" / "subgoal.json").unlink()
    with loud(36, "minari export reward='prm_subgoal' without labels/subgoal.json", FileNotFoundError,
              match=r"reward: family 'subgoal' has no parameter file .*subgoal.json'"):
        export_minari(d, "prm/params-v0", datasets_path=tmp_path / "ds", reward="prm_subgoal")
    assert not _written(tmp_path / "ds", "params-v0")
