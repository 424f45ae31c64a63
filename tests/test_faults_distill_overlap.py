"""``prm-critic distill --data`` with folders holding the teacher's held-out episodes (reliability
item 65): the teacher's own folder again, or a recollection with the same seeds, would train the
student on the episodes both are evaluated on. Refused by content (each episode's observation rows),
whatever the folder is called. Real PointMaze collections, a real teacher from ``train-critic``.
"""

from __future__ import annotations

import re

import pytest

from faults import correct

pytestmark = pytest.mark.fault

ITEM = 65
MAZE = "PointMaze_UMaze-v3"


def test_extra_folders_holding_the_teachers_held_out_episodes_are_refused(tmp_path, capsys):
    pytest.importorskip("gymnasium_robotics")
    pytest.importorskip("torch")
    from prm_critic.cli import main
    from prm_critic.robotics.collection import collect
    from prm_critic.robotics.labels import label

    data, again = tmp_path / "data", tmp_path / "recollected"
    for folder, n in ((data, 8), (again, 6)):  # the same seeds: episodes 0-5 are the teacher's, step for step
        collect(MAZE, folder, episodes=n, max_episode_steps=20, seed=0, progress=False)
    label(data, "outcome", progress=False)
    rc = main(["train-critic", "--data", str(data), "--label", "outcome", "--out", str(tmp_path / "teacher"),
               "--epochs", "1", "--hidden", "8", "--holdout", "0.25", "--no-progress"])
    assert rc == 0, capsys.readouterr().err
    for extra, what in ((data, "the teacher's own data folder again"), (again, "a recollection with the same seeds")):
        capsys.readouterr()
        rc = main(["distill", "--critic", str(tmp_path / "teacher.json"), "--data", str(data), str(extra),
                   "--hidden", "8", "--epochs", "1", "--out", str(tmp_path / "student"), "--no-progress"])
        err = capsys.readouterr().err.strip().splitlines()
        assert rc == 2 and len(err) == 1, err
        assert re.search(re.escape(f"data: {str(extra)!r} holds ") + r"[12] of the 2 episodes .*step for step", err[0]), err
        assert not (tmp_path / "student.json").exists()
        correct(ITEM, f"distill --data with {what} as an extra folder",
                "refused on one line: " + err[0].split("error: ", 1)[1])
