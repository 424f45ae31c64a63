"""The quickstart runs the whole chain end to end (small settings) and is resumable."""

import json
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.slow
def test_quickstart_end_to_end_and_rerun(tmp_path):
    out = tmp_path / "qs"  # given as "qs" from tmp_path: the short paths a user's prm_runs/quickstart gives
    cmd = [sys.executable, "-m", "prm_critic.cli", "quickstart", "--out", "qs", "--episodes", "12",
           "--max-episode-steps", "80", "--k", "2", "--stride", "20", "--epochs", "2", "--no-progress"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "Where everything went" in r.stdout
    lines = r.stdout.splitlines()
    assert max(len(line) for line in lines) <= 100, max(lines, key=len)
    assert lines[-7].startswith("What the critic's held-out numbers mean") and "good: 0.85 or more" in lines[-5]
    for name in ("critic_mc.safetensors", "critic_mc.json", "critic_mc.metrics.json", "critic_mc.scores.png"):
        assert (out / name).is_file(), name
    meta = json.loads((out / "critic_mc.json").read_text())["meta"]
    assert meta["task"] == "PointMaze_UMaze-v3" and meta["label_family"] == "mc"
    n_shards = len(list((out / "data" / "shards").glob("shard_*.npz")))
    assert n_shards == 2
    # re-running reuses what is on disk (no new shards, same labels) and still succeeds
    r2 = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert r2.returncode == 0, r2.stderr[-2000:]
    assert len(list((out / "data" / "shards").glob("shard_*.npz"))) == n_shards


def test_quickstart_bad_task_is_one_clear_error(tmp_path):
    r = subprocess.run([sys.executable, "-m", "prm_critic.cli", "quickstart", "--task", "PointMaz_UMaze-v3",
                        "--out", str(tmp_path / "x")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    assert "unknown task 'PointMaz_UMaze-v3'" in r.stderr and "Traceback" not in r.stderr


def test_quickstart_next_commands_parse_and_say_their_extra(tmp_path):
    """Every "Next:" command the quickstart prints is a valid command line of `prm-critic`, and one
    that needs more than the README's quickstart install (`.[train]`) says which extra to add."""
    import shlex

    from install_helpers import names_index_name

    from prm_critic._optional import install_command
    from prm_critic.cli import build_parser
    from prm_critic.commands.quickstart import QUICKSTART_EXTRA, _next_lines, next_commands

    assert QUICKSTART_EXTRA == "train"
    ckpt = tmp_path / "critic_mc.safetensors"
    pairs = next_commands("PointMaze_UMaze-v3", ckpt, tmp_path)
    lines = _next_lines("PointMaze_UMaze-v3", ckpt, tmp_path)
    assert len(pairs) == len(lines) >= 2
    parser = build_parser()
    for (extra, cmd), line in zip(pairs, lines):
        argv = shlex.split(cmd)
        assert argv[0] == "prm-critic"
        args = parser.parse_args(argv[1:])  # exits (SystemExit) on an unknown option
        assert callable(args.func)
        if extra == QUICKSTART_EXTRA:
            assert line == cmd
        else:
            assert line == f"{install_command(extra)} && {cmd}"
            assert not names_index_name(line) and "-c " in line  # no package-index name; the CPU torch pin kept
    # the extras named are the ones the commands need
    assert dict((cmd.split()[1], extra) for extra, cmd in pairs)["export"] == "onnx"


@pytest.mark.parametrize("command", ["train-policy", "export"])
def test_next_commands_help_runs(command):
    """`--help` of each "Next:" command runs with the quickstart's install (no onnx imports at parse time)."""
    r = subprocess.run([sys.executable, "-m", "prm_critic.cli", command, "--help"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "usage: prm-critic " + command in r.stdout


def test_quickstart_last_lines_explain_each_metric_in_100_columns(tmp_path):
    """The closing lines: each held-out metric with its value, what it means and a good value; every
    line (the explanation of the shaped return and the "Next:" commands too) at most 100 characters,
    the commands wrapped with shell continuations that give back the same words."""
    import shlex

    from prm_critic.commands.quickstart import (
        METRICS, WIDTH, _explain_line, _next_lines, metric_lines, wrap, wrap_command,
    )

    assert WIDTH == 100
    metrics = {"auroc_success": 0.895, "auroc_success_early": 0.953, "spearman_progress_time": None, "n_episodes": 12}
    lines = metric_lines(metrics)
    assert lines[0] == "What the critic's held-out numbers mean (12 held-out episodes: a rough reading):"
    text = "\n".join(lines)
    for key, name, _, _ in METRICS:
        assert f"  {name} " in text
    assert "success AUROC 0.895: " in text and "Spearman(progress, t) n/a: " in text
    assert text.count("good: ") == len(METRICS) and text.count("0.5 is chance") == 2
    b = {"total": -0.5, "end": 0.0, "start": 0.4, "leak": 0.1}
    explained = wrap(_explain_line(3, 80, True, 1.0, b, gamma=0.99), "      ")
    assert len(explained) > 1 and " ".join(x.strip() for x in explained) == _explain_line(3, 80, True, 1.0, b,
                                                                                          gamma=0.99)
    out = Path("prm_runs") / "a folder with spaces" / ("deep" * 8)  # one word stays whole: kept short here
    for line in _next_lines("PointMaze_UMaze-v3", out / "critic_mc.safetensors", out):
        wrapped = wrap_command(line)
        assert shlex.split(" ".join(x.removesuffix(" \\") for x in wrapped)) == shlex.split(line)
        lines += wrapped
    lines += explained
    assert max(len(line) for line in lines) <= 100, max(lines, key=len)
