"""The README section docs/readme/real-model.md runs exactly as written, offline, on the real
packaged SmolLM2 served by LocalLLMServer, and prints what the section shows (the structure of the
lines: a real model's words vary): the ``openai`` client's tool call, then the LangChain example. Its commands are the ones the CLI and pip take.

Skipped without the ``llm`` extra or the packaged model (the skip names the install command).
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
import re
import shlex
from pathlib import Path

import pytest
from llm_helpers import smollm2

DOC = Path(__file__).resolve().parents[1] / "docs" / "readme" / "real-model.md"
ROOMS = ["pit", "hall", "kitchen"]


def _check_lines(lines: list[str], *, real: bool) -> None:
    from prm_critic.text.judge import parse_score

    assert len(lines) == 4, lines
    assert re.fullmatch(r"http://127\.0\.0\.1:(\d+|PORT)/v1 -> .+", lines[0]), lines[0]
    m = re.fullmatch(r"go \{'room': '(\w+)'\} json_schema", lines[1])
    assert m and m.group(1) in ROOMS, lines[1]
    records = ast.literal_eval(lines[2])
    assert 1 <= len(records) <= 2  # recursion_limit=8: two rounds at most
    for i, (text, verdict) in enumerate(records):
        room = re.fullmatch(r'call go\(\{"room": "(\w+)"\}\)', text).group(1)
        assert room in ROOMS
        assert verdict == ("continue" if room != "pit" else ("retry" if i == 0 else "end"))
    m = re.fullmatch(r"(\d\.\d+) (\[.*\])", lines[3])
    assert m, lines[3]
    answers = ast.literal_eval(m.group(2))
    assert len(answers) == 1 and parse_score(answers[0], 10) == pytest.approx(float(m.group(1)), abs=0.005)
    if real:
        assert 0.0 <= float(m.group(1)) <= 1.0


def _check_tool_call_line(line: str) -> None:
    """The openai-client example: ``tool_calls get_weather {"city": ...}``, arguments valid for the tool."""
    m = re.fullmatch(r"tool_calls get_weather (\{.*\})", line)
    assert m, line
    args = json.loads(m.group(1))
    assert set(args) == {"city"} and isinstance(args["city"], str), line


def test_the_documented_output_has_the_tested_structure():
    text = DOC.read_text()
    tool_call, shown = re.findall(r"prints \(.*?\)\n\n```text\n(.*?)```", text, re.S)
    assert len(tool_call.splitlines()) == 1
    _check_tool_call_line(tool_call.strip())
    _check_lines(shown.splitlines(), real=False)


def test_the_commands_are_the_ones_pip_and_the_cli_take():
    from prm_critic.cli import build_parser
    from prm_critic.commands import serve_llm
    from prm_critic.llm.server import SMOLLM2

    text = DOC.read_text()
    bash = re.findall(r"```bash\n(.*?)```", text, re.S)
    assert bash[0].strip() == f'pip install ".[llm]" && {SMOLLM2.install}'
    args = build_parser().parse_args(shlex.split(bash[1].strip())[1:])
    assert args.func is serve_llm.run and args.model == "smollm2" and args.port == 8080


def test_readme_section_runs_as_written_on_the_real_model():
    smollm2()
    text = DOC.read_text()
    code = "\n".join(re.findall(r"```python\n(.*?)```", text, re.S))
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        exec(compile(code, str(DOC), "exec"), {"__name__": "readme_real_model"})
    lines = buf.getvalue().splitlines()
    _check_tool_call_line(lines[0])  # the openai-client example comes first
    _check_lines(lines[1:], real=True)
