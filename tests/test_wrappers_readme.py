"""The README section docs/readme/shaper.md runs exactly as written."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

pytest.importorskip("gymnasium_robotics")

DOC = Path(__file__).resolve().parents[1] / "docs" / "readme" / "shaper.md"


def test_readme_shaper_example_runs():
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    assert len(blocks) == 1
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(blocks[0], str(DOC), "exec"), {"__name__": "__readme__"})
    lines = out.getvalue().splitlines()
    assert len(lines) == 5
    assert lines[0].startswith("reward ") and "shaping" in lines[0]
    assert lines[3] == "True"  # compute_reward reproduces the step reward exactly
    assert "'calls': 4" in lines[4]
