"""The README section docs/readme/langgraph.md runs exactly as written and prints what it says.

Its chat model is a scripted fake (a stand-in for a real LLM, which cannot run offline), as the
section itself says.
"""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

pytest.importorskip("langgraph")

DOC = Path(__file__).resolve().parents[1] / "docs" / "readme" / "langgraph.md"


def test_readme_section_runs_and_prints_the_documented_output():
    text = DOC.read_text()
    code = "\n".join(re.findall(r"```python\n(.*?)```", text, re.S))
    expected = re.search(r"prints\n\n```text\n(.*?)```", text, re.S).group(1)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        exec(compile(code, str(DOC), "exec"), {"__name__": "readme_langgraph"})
    out = buf.getvalue()
    assert out.startswith(expected)
    searches = re.findall(r"prints\n\n```text\n(.*?)```", text, re.S)[-1]  # the beam and MCTS example
    lines = out.strip().splitlines()
    assert lines[-3] == "[1, 0] [0.9]" and "\n".join(lines[-2:]) + "\n" == searches
    assert searches.startswith("beam [") and "\nmcts [" in searches
    assert "prints `[1, 0] [0.9]`" in text
