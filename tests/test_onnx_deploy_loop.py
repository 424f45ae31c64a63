"""export/deploy_loop.py runs a real fixed-rate FetchPush-v4 loop with an exported critic and reports
timing; bad arguments give one clear error."""

from __future__ import annotations

import re
import runpy
import sys
from pathlib import Path

import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("gymnasium_robotics")

from prm_critic.models.state_critic import StateCriticNet  # noqa: E402
from prm_critic.onnx import export_state_critic  # noqa: E402

SCRIPT = Path(__file__).resolve().parents[1] / "export" / "deploy_loop.py"
LAYOUT = {"keys": ["observation", "achieved_goal", "desired_goal"],
          "sizes": {"observation": 25, "achieved_goal": 3, "desired_goal": 3}}


def _run(argv, monkeypatch):
    monkeypatch.setattr(sys, "argv", [str(SCRIPT), *argv])
    with pytest.raises(SystemExit) as exc:
        runpy.run_path(str(SCRIPT), run_name="__main__")
    return exc.value.code


def test_deploy_loop_runs_and_reports(tmp_path, monkeypatch, capsys):
    critic = export_state_critic(StateCriticNet(31, hidden=(32, 32)), tmp_path / "c.b1.onnx", batch=1,
                                 task="FetchPush-v4", layout=LAYOUT)
    png = tmp_path / "loop.png"
    assert _run(["--critic", str(critic), "--hz", "100", "--steps", "60", "--plot", str(png)], monkeypatch) == 0
    out = capsys.readouterr().out
    assert "task=FetchPush-v4 obs_dim=31 batch=1 provider=CPUExecutionProvider" in out
    assert re.search(r"loop: 60 ticks at 100 Hz \(period 10000 µs\), 1 episodes finished", out)
    assert re.search(r"period error \(wake - scheduled\): p50 [\d.]+ µs, p99 [\d.]+ µs, max [\d.]+ µs", out)
    assert re.search(r"missed deadlines: \d+ \(\d+ ticks skipped\)", out)
    assert png.is_file() and png.stat().st_size > 1000


def test_deploy_loop_rejects_bad_arguments(tmp_path, monkeypatch, capsys):
    assert _run(["--hz", "0"], monkeypatch) == 2
    assert "--hz: expected a positive rate, got 0.0" in capsys.readouterr().err
    # a critic for another task is refused by the env check
    other = export_state_critic(StateCriticNet(16, hidden=(8,)), tmp_path / "reach.onnx", batch=1,
                                task="FetchReach-v4")
    from prm_critic.onnx import OnnxModelError

    monkeypatch.setattr(sys, "argv", [str(SCRIPT), "--critic", str(other), "--steps", "5"])
    with pytest.raises(OnnxModelError, match=r"exported for task 'FetchReach-v4'.*but the env is 'FetchPush-v4'"):
        runpy.run_path(str(SCRIPT), run_name="__main__")
