"""README.md holds the tested docs/readme sections verbatim, and the CI test command."""

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _builder():
    spec = importlib.util.spec_from_file_location("build_readme", ROOT / "docs" / "build_readme.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_readme_sections_are_the_tested_files():
    text = (ROOT / "README.md").read_text()
    names = re.findall(r"<!-- section:([\w-]+) -->", text)
    assert {"shaper", "train_policy", "deploy", "langgraph"} <= set(names)
    assert _builder().build(text) == text, "README.md is out of date: run python docs/build_readme.py"


def test_readme_has_exactly_two_setup_commands_and_ci_runs_the_test_one():
    text = (ROOT / "README.md").read_text()
    setup = text.split("## Set up", 1)[1].split("\n## ", 1)[0]
    cmds = [ln for ln in setup.splitlines() if ln.startswith("pip install")]
    assert len(cmds) == 2
    assert cmds[0].endswith("prm-critic quickstart")
    ci = (ROOT / ".ci" / "run").read_text()
    assert "ci:test" in ci  # .ci/run extracts the command between the ci:test markers
    block = text.split("<!-- ci:test -->", 1)[1].split("<!-- /ci:test -->", 1)[0]
    assert cmds[1] in block and "pytest" in cmds[1]
