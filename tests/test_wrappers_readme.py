"""The README section docs/readme/shaper.md runs exactly as written."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

pytest.importorskip("gymnasium_robotics")

DOC = Path(__file__).resolve().parents[1] / "docs" / "readme" / "shaper.md"


def _run_block(i: int) -> list[str]:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    assert len(blocks) == 2  # one env; vector envs
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(blocks[i], str(DOC), "exec"), {"__name__": "__readme__"})
    return out.getvalue().splitlines()


def test_readme_shaper_example_runs():
    lines = _run_block(0)
    assert len(lines) == 5
    assert lines[0].startswith("reward ") and "shaping" in lines[0]
    assert lines[3] == "True"  # compute_reward reproduces the step reward exactly
    assert "'calls': 4" in lines[4]


def test_readme_vector_env_example_runs():
    """The gymnasium make_vec and SB3 VecEnv example: 4 sub-envs shaped, one critic call per vector step."""
    lines = _run_block(1)
    assert len(lines) == 2
    assert lines[0].startswith("gymnasium (4,) shaping [") and "'calls': 2" in lines[0]  # reset + one step
    assert lines[1].startswith("sb3 (4,) shaping [") and "'calls': 2" in lines[1]
