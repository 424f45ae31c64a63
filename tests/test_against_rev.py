"""``benchmarks/against_rev.py``, the benchmarks' ``--against REV``: the revision's tree checked out with
``git worktree``, a worker over that tree's ``prm_critic`` answering round by round, the worktree gone after."""

from __future__ import annotations

import subprocess

import pytest

pytest.importorskip("gymnasium_robotics")

from benchmarks.against_rev import ROOT, Worker, checkout  # noqa: E402
from benchmarks.subgoal_one_row import rows_of  # noqa: E402


def _worktrees() -> str:
    return subprocess.run(["git", "worktree", "list"], cwd=ROOT, capture_output=True, text=True, check=True).stdout


def test_worker_scores_with_the_library_of_the_revision():
    from prm_critic.robotics.make import make_env
    from prm_critic.robotics.subgoals import SubgoalCritic

    if subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True).returncode:
        pytest.skip("not a git checkout")
    task = "Reacher-v5"
    env = make_env(task)
    critic = SubgoalCritic(task, env)
    rows = rows_of(env, critic.layout, 5, seed=0)
    env.close()
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    with checkout("HEAD") as (path, commit):
        tree = (path / "prm_critic").resolve().parent
        assert commit == head and str(tree) in _worktrees()
        with Worker("benchmarks.subgoal_one_row", path, {"tasks": [task]}) as worker:  # checks where prm_critic came from
            got = worker({"task": task, "rows": rows})["out"]
            assert worker({"task": task})["us"] > 0
    assert got == [[float(v) for v in critic._score_row(r)] for r in rows]
    assert str(tree) not in _worktrees() and not tree.exists(), "the worktree outlived the run"


def test_an_unknown_revision_is_refused_by_name():
    with pytest.raises(SystemExit, match="--against 'no-such-rev': not a commit of this repository"):
        with checkout("no-such-rev"):
            pass
