"""Output folders (reliability item 60): one rule for every command's output. The same run resumes,
another run is refused naming each setting that differs, and ``--overwrite`` replaces it whole,
leaving no file of the old run behind. Real collection (PointMaze, MuJoCo), real critic training.
"""

from __future__ import annotations

import json

import pytest

from faults import correct, loud
from prm_critic._io import OutputExistsError

pytestmark = pytest.mark.fault

ITEM = 60
TASK = "PointMaze_UMaze-v3"


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def test_collect_fewer_episodes_into_a_bigger_collection_is_refused_or_replaced(tmp_path, capsys):
    pytest.importorskip("gymnasium_robotics")
    from prm_critic.cli import main
    from prm_critic.robotics.collection import collect
    from prm_critic.robotics.dataset import load_steps

    out = tmp_path / "data"
    collect(TASK, out, episodes=4, shard_size=2, max_episode_steps=5, seed=0, progress=False)
    with loud(ITEM, "collect --episodes 2 into a folder holding 4 episodes of the same settings", OutputExistsError,
              match=r"already holds data collected with other settings \(1 differ: episodes: 4 there, 2 in this "
                    r"run\).*--overwrite"):
        collect(TASK, out, episodes=2, shard_size=2, max_episode_steps=5, seed=0, progress=False)
    assert json.loads((out / "meta.json").read_text())["episodes"] == 4  # the record is left as it was
    # --overwrite replaces it whole: two episodes, the other shard gone, training reads two episodes
    capsys.readouterr()
    rc = main(["collect", "--task", TASK, "--out", str(out), "--episodes", "2", "--shard-size", "2",
               "--max-episode-steps", "5", "--overwrite", "--no-progress"])
    assert rc == 0, capsys.readouterr().err
    assert sorted(p.name for p in (out / "shards").iterdir()) == ["shard_00000.npz"]
    assert json.loads((out / "meta.json").read_text())["episodes"] == 2
    from prm_critic.robotics.labels import label

    label(out, "outcome", gamma=0.99, progress=False)
    assert sorted(set(load_steps(out, "outcome").episode.tolist())) == [0, 1]
    # more episodes with the same settings extend the collection (a resume)
    collect(TASK, out, episodes=4, shard_size=2, max_episode_steps=5, seed=0, progress=False)
    correct(ITEM, "collect --overwrite with fewer episodes, then more episodes of the same settings",
            "replaced whole (one shard, meta 2 episodes, 2 episodes trained on), then extended to 4")


def test_train_critic_into_another_runs_checkpoint_is_refused_or_replaced(tmp_path, capsys):
    pytest.importorskip("gymnasium_robotics")
    from prm_critic.cli import main
    from prm_critic.robotics.collection import collect
    from prm_critic.robotics.labels import label

    data = tmp_path / "data"
    collect(TASK, data, episodes=6, max_episode_steps=20, seed=0, progress=False)
    for family in ("outcome", "subgoal"):
        label(data, family, progress=False, **({"gamma": 0.99} if family == "outcome" else {}))
    out = tmp_path / "ckpt" / "critic"
    base = ["train-critic", "--data", str(data), "--out", str(out), "--epochs", "1", "--hidden", "8", "--no-progress"]
    assert main([*base, "--family", "outcome"]) == 0, capsys.readouterr().err
    # the same run again resumes (trains the same run to the same checkpoint)
    assert main([*base, "--family", "outcome"]) == 0, capsys.readouterr().err
    # an exported file of that run beside the checkpoint
    (out.parent / "critic.onnx").write_bytes(b"an export of the outcome critic")
    capsys.readouterr()
    rc = main([*base, "--family", "subgoal"])
    err = _one_line_error(capsys)
    assert rc == 2 and "already holds a critic trained with other settings (2 differ: " in err, err
    assert "label_family: 'outcome' there, 'subgoal' in this run" in err and "--overwrite" in err, err
    correct(ITEM, "train-critic --out into a checkpoint of another label family (an export beside it)",
            "refused on one line: " + err.split("error: ", 1)[1])
    assert json.loads(out.with_suffix(".json").read_text())["meta"]["label_family"] == "outcome"
    assert main([*base, "--family", "subgoal", "--overwrite"]) == 0, capsys.readouterr().err
    assert not (out.parent / "critic.onnx").exists()  # no stale export of the old run
    assert json.loads(out.with_suffix(".json").read_text())["meta"]["label_family"] == "subgoal"
    correct(ITEM, "train-critic --overwrite over another run's checkpoint and export",
            "replaced whole: the old critic.onnx removed, the checkpoint the new run's")


def test_train_policy_into_another_run_is_refused_or_replaced(tmp_path, capsys):
    pytest.importorskip("gymnasium_robotics")
    from prm_critic.cli import main

    out = tmp_path / "run"
    base = ["train-policy", "--task", "FetchReach-v4", "--steps", "60", "--seed", "0", "--eval-freq", "60",
            "--eval-episodes", "1", "--out", str(out), "--no-progress",
            "--algo-kwargs", '{"learning_starts": 30, "batch_size": 8, "policy_kwargs": {"net_arch": [8]}}']
    assert main(base) == 0, capsys.readouterr().err
    stale = out / "logs" / "events.out.tfevents.stale"
    stale.write_bytes(b"")
    capsys.readouterr()
    rc = main([*base[:-2], "--seed", "1", *base[-2:]])
    err = _one_line_error(capsys)
    assert rc == 2 and "already holds a policy trained with other settings" in err and "seed: 0 there, 1 in this run" \
        in err, err
    correct(ITEM, "train-policy --out into a folder of a run of another seed", "refused on one line: "
            + err.split("error: ", 1)[1])
    rc = main(base)
    err = _one_line_error(capsys)
    assert rc == 2 and "already holds this run; pass --resume" in err, err
    correct(ITEM, "train-policy again into its own finished run without --resume",
            "refused on one line: " + err.split("error: ", 1)[1])
    assert main([*base[:-2], "--seed", "1", "--overwrite", *base[-2:]]) == 0, capsys.readouterr().err
    assert not stale.exists()  # no TensorBoard file of the old run mixed with the new one
    assert json.loads((out / "policy.json").read_text())["extra"]["seed"] == 1
    assert (out / "eval.csv").read_text().count("\n") == 3  # header + steps 0 and 60 of this run only
    correct(ITEM, "train-policy --overwrite over another run", "replaced whole: old logs gone, eval.csv of this run")


def test_quickstart_into_a_run_of_other_settings_is_refused(tmp_path, capsys):
    from prm_critic.cli import main

    out = tmp_path / "qs"  # a FAKE earlier run: its record and two of its files, written by the test
    out.mkdir()
    (out / "quickstart.json").write_text(json.dumps({
        "command": "quickstart", "task": TASK, "episodes": 60, "max_episode_steps": 150, "k": 4, "stride": 8,
        "epochs": 25, "seed": 0}))
    (out / "data").mkdir()
    (out / "critic_mc.metrics.json").write_text("{}")
    rc = main(["quickstart", "--out", str(out), "--episodes", "30", "--no-progress"])
    err = _one_line_error(capsys)
    assert rc == 2 and "already holds a quickstart run with other settings (1 differ: episodes: 60 there, 30 in " \
                       "this run)" in err, err
    assert (out / "critic_mc.metrics.json").exists()
    correct(ITEM, "quickstart --episodes 30 into a folder of a 60-episode quickstart run",
            "refused on one line before collecting: " + err.split("error: ", 1)[1])
