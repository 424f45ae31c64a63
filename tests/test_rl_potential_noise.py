"""benchmarks/rl/potential_noise.py on real FetchPush episodes with the committed FetchPush critic:
it prints both potentials' per-step change, and refuses collect data of another task, data with
another layout, a critic of another task and out-of-range arguments, each with one clear error."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

pytest.importorskip("gymnasium_robotics")

from prm_critic.robotics.collection import collect  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
CRITIC = REPO / "benchmarks" / "rl" / "critics" / "push_mc.json"


@pytest.fixture(scope="module")
def mod():
    from benchmarks.rl import potential_noise

    return potential_noise


@pytest.fixture(scope="module")
def push_data(tmp_path_factory):
    out = tmp_path_factory.mktemp("push") / "data"
    collect("FetchPush-v4", out, episodes=2, seed=0, progress=False)
    return out


def test_prints_both_potentials_per_step_change(mod, push_data, capsys, tmp_path):
    raw = tmp_path / "noise.json"
    assert mod.main(["--task", "FetchPush-v4", "--critic", str(CRITIC), "--data", str(push_data),
                     "--episodes", "2", "--raw", str(raw)]) == 0
    out = capsys.readouterr().out
    assert "2 random-action episodes (100 states)" in out
    stored = json.loads(raw.read_text())["FetchPush-v4"]["critic-push_mc-success"]
    assert 0 < stored["random_dphi"] < 1 and 0 <= stored["her_dphi"] < 1 and -1 <= stored["her_dphi_corr_spec"] <= 1
    for name in ("critic-push_mc-success", "spec subgoal progress"):
        line = next(ln for ln in out.splitlines() if name in ln)
        d_random, d_scripted = (float(v) for v in re.findall(r"\|dPhi\| per step ([0-9.]+)", line))
        assert 0 < d_random < 1 and 0 <= d_scripted < 1


def test_data_of_another_task_is_refused(mod, tmp_path):
    other = tmp_path / "umaze"
    collect("PointMaze_UMaze-v3", other, episodes=1, seed=0, progress=False)
    with pytest.raises(SystemExit, match=r"holds 'PointMaze_UMaze-v3' episodes, expected 'FetchPush-v4'"):
        mod.main(["--task", "FetchPush-v4", "--critic", str(CRITIC), "--data", str(other), "--episodes", "1"])


def test_data_with_another_layout_is_refused(mod, push_data, tmp_path):
    data = tmp_path / "relaid"
    (data / "shards").mkdir(parents=True)
    for f in (push_data / "shards").iterdir():
        (data / "shards" / f.name).write_bytes(f.read_bytes())
    meta = json.loads((push_data / "meta.json").read_text())
    meta["layout"] = {**meta["layout"], "keys": list(reversed(meta["layout"]["keys"]))}
    (data / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(SystemExit, match="another critic-input layout"):
        mod.main(["--task", "FetchPush-v4", "--critic", str(CRITIC), "--data", str(data), "--episodes", "1"])


def test_critic_of_another_task_is_refused(mod, push_data):
    with pytest.raises(ValueError, match="in the critic layout but"):
        mod.main(["--task", "FetchReach-v4", "--critic", str(CRITIC), "--data", str(push_data), "--episodes", "1"])


@pytest.mark.parametrize("args, match", [
    (["--episodes", "0"], "--episodes: expected an int >= 1, got 0"),
    (["--max-steps", "0"], "--max-steps: expected an int >= 1, got 0"),
])
def test_out_of_range_arguments_are_refused(mod, push_data, args, match):
    with pytest.raises(SystemExit, match=match):
        mod.main(["--task", "FetchPush-v4", "--critic", str(CRITIC), "--data", str(push_data), *args])


def test_missing_files_are_refused(mod, push_data, tmp_path):
    with pytest.raises(SystemExit, match="--critic: expected a critic checkpoint file"):
        mod.main(["--task", "FetchPush-v4", "--critic", str(tmp_path / "none.json"), "--data", str(push_data)])
    with pytest.raises(SystemExit, match="--data: expected a `prm-critic collect` folder"):
        mod.main(["--task", "FetchPush-v4", "--critic", str(CRITIC), "--data", str(tmp_path)])
