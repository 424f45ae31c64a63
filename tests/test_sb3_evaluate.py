"""``evaluate_policy`` / ``prm-critic evaluate``: a real tiny SB3 policy (SAC, 300 steps, FetchReach-v4)
trained and saved by ``train_policy``, evaluated on its own task. The evaluation is the training-time
one (same seeds, same loop), so it reproduces the last row of the run's ``eval.csv``."""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("stable_baselines3")
pytest.importorskip("gymnasium_robotics")

from prm_critic.cli import main  # noqa: E402
from prm_critic.sb3 import UnshapedSuccessEval, evaluate_policy, load_policy, read_eval_csv, train_policy  # noqa: E402
from prm_critic.sb3.evaluate import EVAL_SEED, PolicyEvaluation  # noqa: E402

TASK = "FetchReach-v4"
TINY_OFF = dict(learning_starts=60, batch_size=32, policy_kwargs=dict(net_arch=[16, 16]))
EPISODES = 3


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("policy")
    train_policy(TASK, algo="sac", total_steps=300, seed=0, eval_freq=300, eval_episodes=EPISODES, log_dir=out,
                 normalize_obs=True, algo_kwargs=TINY_OFF, progress=False)
    return out


def test_the_evaluation_reproduces_the_training_time_evaluation(run_dir):
    last = read_eval_csv(run_dir / "eval.csv")[-1]
    ev = evaluate_policy(run_dir, episodes=EPISODES)  # the run's folder: its policy checkpoint
    assert (ev.task, ev.env_id, ev.seed, ev.n_episodes) == (TASK, "FetchReach-v4", EVAL_SEED, EPISODES)
    assert ev.success_rate == pytest.approx(last["success_rate"])
    assert ev.mean_return == pytest.approx(last["mean_return"])
    assert ev.mean_length == pytest.approx(last["mean_length"])
    lo, hi = ev.success_interval
    assert 0.0 <= lo <= ev.success_rate <= hi <= 1.0 and hi - lo > 0.3  # three episodes: a wide interval
    lo, hi = ev.return_interval
    assert lo <= ev.mean_return <= hi
    # a loaded model gives the same episodes; the checkpoint path gives its files' hash
    same = evaluate_policy(load_policy(run_dir / "policy.json", device="cpu"), episodes=EPISODES)
    assert same.returns == ev.returns and same.policy_sha256 is None and len(ev.policy_sha256 or "") == 64
    # other seeds are other episodes
    assert evaluate_policy(run_dir, episodes=EPISODES, seed=0).returns != ev.returns


def test_the_policy_is_evaluated_on_its_own_task_only(run_dir):
    assert evaluate_policy(run_dir / "policy", task=TASK, episodes=1).task == TASK
    with pytest.raises(ValueError, match=r"task: the policy .* was trained on 'FetchReach-v4' \(FetchReach-v4, its "
                                         r"policy.json\), not 'PointMaze_UMaze-v3'"):
        evaluate_policy(run_dir, task="PointMaze_UMaze-v3", episodes=1)
    with pytest.raises(ValueError, match=r"episodes: expected a positive integer, got 0"):
        evaluate_policy(run_dir, episodes=0)
    with pytest.raises(ValueError, match=r"video_episodes: expected at most episodes=1, got 2"):
        evaluate_policy(run_dir, episodes=1, video_episodes=2)
    with pytest.raises(ValueError, match=r"policy: expected a policy checkpoint path or a model"):
        evaluate_policy(object())


def test_cli_prints_the_summary_and_refuses_another_evaluation_in_out(run_dir, tmp_path, capsys):
    out = tmp_path / "eval"
    assert main(["evaluate", str(run_dir), "--episodes", str(EPISODES), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "success rate" in printed and "95% interval" in printed and "no shaping" in printed
    doc = json.loads((out / "evaluation.json").read_text())
    assert doc["task"] == TASK and len(doc["returns"]) == EPISODES and doc["seed"] == EVAL_SEED
    assert doc["mean_return"] == pytest.approx(read_eval_csv(run_dir / "eval.csv")[-1]["mean_return"])
    assert main(["evaluate", str(run_dir), "--episodes", str(EPISODES), "--out", str(out)]) == 0  # the same: fine
    capsys.readouterr()
    assert main(["evaluate", str(run_dir), "--episodes", "2", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "already holds a policy evaluation with other settings" in err and "n_episodes: 3 there, 2" in err
    assert main(["evaluate", str(run_dir), "--episodes", "2", "--out", str(out), "--overwrite"]) == 0
    assert len(json.loads((out / "evaluation.json").read_text())["returns"]) == 2
    assert main(["evaluate", str(run_dir), "--video-episodes", "1"]) == 2
    assert "--video-episodes: needs --out" in capsys.readouterr().err


_VIDEO = """
import json
import sys
from prm_critic.sb3 import evaluate_policy, save_evaluation
try:
    ev = evaluate_policy(sys.argv[1], episodes=2, video_episodes=1)
except ValueError as exc:
    if "could not render" in str(exc):
        print("NO-RENDER", exc)
        raise SystemExit(0)
    raise
print("FRAMES", json.dumps([[list(f.shape) for f in ev.frames], list(ev.lengths)]))
print("WROTE", [p.name for p in save_evaluation(ev, sys.argv[2])])
"""


@pytest.mark.slow
def test_video_frames_where_the_env_renders(run_dir, tmp_path):
    """In a subprocess with MUJOCO_GL=egl (headless MuJoCo rendering); skipped where no GL renders."""
    r = subprocess.run([sys.executable, "-c", _VIDEO, str(run_dir), str(tmp_path / "v")], capture_output=True,
                       text=True, timeout=300, env={**os.environ, "MUJOCO_GL": "egl", "OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr[-2000:]
    if r.stdout.startswith("NO-RENDER"):
        pytest.skip(f"MuJoCo cannot render here: {r.stdout.strip()}")
    frames_line, wrote_line = r.stdout.strip().splitlines()[-2:]
    shapes, lengths = json.loads(frames_line.removeprefix("FRAMES "))
    assert len(shapes) == 1 and shapes[0][0] == lengths[0] + 1 and shapes[0][3] == 3  # the reset and every step
    assert wrote_line == "WROTE ['evaluation.json', 'episode_10000.gif']"
    from PIL import Image

    with Image.open(tmp_path / "v" / "episode_10000.gif") as gif:
        assert gif.n_frames == lengths[0] + 1


def test_the_seeds_are_the_training_time_evaluations():
    from prm_critic.commands import evaluate as command

    default = inspect.signature(UnshapedSuccessEval).parameters["eval_seed"].default
    assert EVAL_SEED == default == command.EVAL_SEED
    assert PolicyEvaluation.__dataclass_params__.frozen
