"""The README section docs/readme/train_policy.md runs exactly as written (in a scratch folder), and
so do its command line and its SBX example."""

from __future__ import annotations

import contextlib
import io
import json
import re
import shlex
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("stable_baselines3")
pytest.importorskip("gymnasium_robotics")

from prm_critic.cli import main as cli_main  # noqa: E402

DOC = Path(__file__).resolve().parents[1] / "docs" / "readme" / "train_policy.md"


@pytest.mark.slow
def test_readme_train_policy_example_runs(tmp_path, monkeypatch):
    text = DOC.read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) == 2  # the SB3 example, then the SBX one
    monkeypatch.chdir(tmp_path)
    out = io.StringIO()
    scope = {"__name__": "__readme__"}
    with contextlib.redirect_stdout(out):
        exec(compile(blocks[0], str(DOC), "exec"), scope)
    row = eval(out.getvalue().splitlines()[0], {"np": np})  # the printed eval row (a dict)
    assert row["env_steps"] == 300 and row["n_episodes"] == 5 and 0.0 <= row["success_rate"] <= 1.0
    assert scope["action"].shape == (4,)
    assert (tmp_path / "runs/reach/policy.safetensors").is_file()
    assert json.loads((tmp_path / "runs/reach/policy.json").read_text())["algo"] == "sac"
    rows = (tmp_path / "runs/reach/eval.csv").read_text().splitlines()
    assert [r.split(",")[0] for r in rows[1:]] == ["0", "300"]  # evaluated before training and at the end

    ev = scope["ev"]  # evaluate_policy: the last training-time evaluation, reproduced
    assert (ev.n_episodes, ev.success_rate, ev.mean_return) == (5, row["success_rate"], row["mean_return"])
    assert out.getvalue().splitlines()[1].startswith("runs/reach/policy on FetchReach-v4")

    cmd = re.search(r"```bash\nprm-critic (train-policy [^\n]*)\n```", text).group(1)
    assert cli_main(shlex.split(cmd)) == 0
    assert (tmp_path / "runs/reach_cli/policy.safetensors").is_file()
    cmd = re.search(r"```bash\nprm-critic (evaluate [^\n]*)\n```", text).group(1)
    assert cli_main(shlex.split(cmd)) == 0
    assert json.loads((tmp_path / "runs/reach_cli/evaluation/evaluation.json").read_text())["n_episodes"] == 5


@pytest.mark.slow
def test_readme_sbx_example_runs(tmp_path, monkeypatch):
    pytest.importorskip("sbx", reason='sbx is not installed (pip install "prm-critic[sbx]")')
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    monkeypatch.chdir(tmp_path)
    scope = {"__name__": "__readme__"}
    exec(compile(blocks[1], str(DOC), "exec"), scope)
    assert type(scope["model"]).__module__.startswith("sbx.") and type(scope["policy"]) is type(scope["model"])
    assert json.loads((tmp_path / "runs/reach_sbx/policy.json").read_text())["backend"] == "sbx"
    assert scope["action"].shape == (4,)
