"""Label cost records survive a kill; ``label`` options and data a family cannot use are refused.

Real MuJoCo data (PointMaze_UMaze collected by ``collect``), real label files; no fakes.
"""

import json
import re
import shutil

import numpy as np
import pytest

pytest.importorskip("gymnasium_robotics")

from faults import correct, loud  # noqa: E402

import prm_critic.robotics.bisect_labels as bisect_labels  # noqa: E402
import prm_critic.robotics.labels as labels  # noqa: E402
from prm_critic.cli import main  # noqa: E402
from prm_critic.robotics.bisect_labels import read_stats  # noqa: E402
from prm_critic.robotics.collection import collect  # noqa: E402
from prm_critic.robotics.labels import label  # noqa: E402

pytestmark = pytest.mark.fault

MAZE = "PointMaze_UMaze-v3"


class _Killed(BaseException):
    """Stands for the SIGKILL that stops the labeller right after a label shard is on disk."""


@pytest.fixture(scope="module")
def maze_data(tmp_path_factory):
    d = tmp_path_factory.mktemp("maze_cost")
    collect(MAZE, d, episodes=6, shard_size=2, max_episode_steps=40, seed=1, progress=False)
    return d


def _kill_after_first_label_write(monkeypatch, module):
    real = module.atomic_savez

    def write_then_die(path, **arrays):
        real(path, **arrays)
        raise _Killed(str(path))

    monkeypatch.setattr(module, "atomic_savez", write_then_die)


@pytest.mark.parametrize("family,extra", [("mc", ["--stride", "4"]), ("mc_bisect", [])])
def test_label_cost_survives_a_kill_right_after_a_shard_write(maze_data, tmp_path, monkeypatch, capsys, family,
                                                              extra):
    ref, killed = tmp_path / "ref", tmp_path / "killed"
    shutil.copytree(maze_data, ref)
    shutil.copytree(maze_data, killed)
    args = ["--family", family, "--k", "2", *extra, "--no-progress"]
    assert main(["label", "--data", str(ref), *args]) == 0
    want = read_stats(ref, family)
    capsys.readouterr()

    with monkeypatch.context() as m:
        _kill_after_first_label_write(m, labels if family == "mc" else bisect_labels)
        with pytest.raises(_Killed):
            main(["label", "--data", str(killed), *args])
    assert len(list((killed / "labels" / family).glob("shard_*.npz"))) == 1, "killed after its first shard"

    assert main(["label", "--data", str(killed), *args]) == 0
    out = capsys.readouterr().out
    got = read_stats(killed, family)
    assert got["shards"] == want["shards"] and len(got["shards"]) == 3
    assert got["total"] == want["total"]
    t = want["total"]
    assert f"{t['estimated_states']} states estimated with {t['rollouts']} rollouts, {t['rollout_steps']} rollout " \
           f"steps" in out
    correct(19, f"{family} labelling killed right after a label shard was written, then resumed",
            f"labels/{family}.stats.json holds every shard; totals equal an uninterrupted run "
            f"({t['states']} states, {t['rollout_steps']} rollout steps)")


def test_label_cost_of_a_shard_written_before_cost_records_is_relabelled(maze_data, tmp_path):
    """A label shard without its cost record (written by an older version) whose stats entry is missing
    is labelled again (bit-identical labels), so the totals stay whole."""
    d = tmp_path / "old"
    shutil.copytree(maze_data, d)
    label(d, "mc", k=2, stride=4, progress=False)
    want = read_stats(d, "mc")
    f = d / "labels" / "mc" / "shard_00001.npz"
    with np.load(f) as z:
        arrays = {k: z[k] for k in z.files if k not in ("cost", "cost_keys")}
    np.savez(f, **arrays)  # the old format: labels only
    stats = json.loads((d / "labels" / "mc.stats.json").read_text())
    del stats["shards"]["shard_00001.npz"]
    (d / "labels" / "mc.stats.json").write_text(json.dumps(stats))
    label(d, "mc", k=2, stride=4, progress=False)
    assert read_stats(d, "mc") == want
    with np.load(f) as z:
        assert np.array_equal(z["label"], arrays["label"], equal_nan=True)
    correct(19, "mc label shard without a cost record and no stats entry",
            "labelled again on resume (same labels), totals whole")


@pytest.mark.parametrize("family,argv,match", [
    ("mc", ["--threshold", "0.3"], r"threshold: family 'mc' takes no threshold \(got 0\.3\); .*'mc_bisect'"),
    ("mc", ["--resolution", "4"], r"resolution: family 'mc' takes no resolution \(got 4\)"),
    ("subgoal", ["--k", "4"], r"k: family 'subgoal' takes no k \(got 4\); .*'mc', 'mc_bisect'"),
    ("outcome", ["--stride", "2"], r"stride: family 'outcome' takes no stride \(got 2\)"),
    ("mc_bisect", ["--gamma", "0.9"], r"gamma: family 'mc_bisect' takes no gamma \(got 0\.9\); .*'outcome'"),
])
def test_label_option_of_another_family_is_refused(maze_data, tmp_path, capsys, family, argv, match):
    d = tmp_path / "d"
    shutil.copytree(maze_data, d)
    assert main(["label", "--data", str(d), "--family", family, *argv, "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert re.search(match, err), err
    assert not (d / "labels").exists(), "refused before anything is written"
    with loud(21, f"label --family {family} {' '.join(argv)}", ValueError, match=match):
        label(d, family, **{argv[0].lstrip("-"): type_of(argv[1])})


def type_of(text):
    return float(text) if "." in text else int(text)


@pytest.mark.parametrize("family", ["mc", "mc_bisect"])
def test_mc_labels_of_imported_data_are_refused_by_name(maze_data, tmp_path, capsys, family):
    minari = pytest.importorskip("minari")  # noqa: F841
    pytest.importorskip("h5py")
    from prm_critic.robotics.minari import export_minari, import_minari

    export_minari(maze_data, "prm/cost-v0", datasets_path=tmp_path / "ds")
    out = import_minari("prm/cost-v0", tmp_path / "imported", spec=MAZE, datasets_path=tmp_path / "ds",
                        shard_size=2)
    match = (rf"data: {re.escape(repr(str(out)))} was imported from the Minari dataset 'prm/cost-v0'; imported "
             rf"steps carry no simulator snapshots, so family '{family}' .*cannot label them")
    assert main(["label", "--data", str(out), "--family", family, "--k", "2", "--no-progress"]) == 2
    assert re.search(match, capsys.readouterr().err)
    with loud(21, f"label --family {family} on data imported from Minari", ValueError, match=match):
        label(out, family, k=2, progress=False)
    assert not (out / "labels" / family).exists()
