"""The README section docs/readme/deploy.md runs exactly as written (in a scratch folder), and so
does its command line."""

from __future__ import annotations

import ast
import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("gymnasium_robotics")

from prm_critic.cli import main as cli_main  # noqa: E402

DOC = Path(__file__).resolve().parents[1] / "docs" / "readme" / "deploy.md"


def test_readme_deploy_example_runs(tmp_path, monkeypatch):
    text = DOC.read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) == 2  # export and check; the torch-free loop (also run by test_deploy_torch_free.py)
    monkeypatch.chdir(tmp_path)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(blocks[0], str(DOC), "exec"), {"__name__": "__readme__"})
    lines = out.getvalue().splitlines()
    assert ast.literal_eval(lines[0]) == {"keys": ["observation", "achieved_goal", "desired_goal"], "obs_dim": 31,
                                          "sizes": {"observation": 25, "achieved_goal": 3, "desired_goal": 3}}
    assert re.fullmatch(r"CPUExecutionProvider progress 0\.\d{3} success 0\.\d{3}", lines[1])
    assert lines[2] == "(8,) (8,)"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["critic.b1.onnx", "critic.json", "critic.onnx",
                                                          "critic.safetensors"]
    cmd = re.search(r"`prm-critic (export [^`]*)`", text).group(1)
    (tmp_path / "critic.b1.onnx").unlink()
    assert cli_main(shlex.split(cmd)) == 0
    assert (tmp_path / "critic.b1.onnx").is_file()
    scope = {"__name__": "__readme__"}
    exec(compile(blocks[1], str(DOC), "exec"), scope)  # the robot loop on the file the CLI wrote
    assert scope["loop"].stats["episodes"] >= 1
