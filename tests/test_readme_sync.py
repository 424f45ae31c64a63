"""README.md, the front door, holds the tested docs/readme examples verbatim and the CI test command;
the docs site (mkdocs.yml) covers every docs/readme page and builds without warnings."""

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _builder():
    spec = importlib.util.spec_from_file_location("build_readme", ROOT / "docs" / "build_readme.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_readme_sections_are_the_tested_files():
    text = (ROOT / "README.md").read_text()
    names = re.findall(r"<!-- (?:section|excerpt):([\w-]+) -->", text)
    # the four user paths, each with its shortest (tested) example and a link to the whole page
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


def test_readme_is_a_short_front_door_with_a_table_of_contents():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 400
    contents = text.split("**Contents**", 1)[1].split("\n## ", 1)[0]
    for heading in re.findall(r"^## (.+)$", text, re.M):
        anchor = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        assert f"(#{anchor})" in contents, f"README contents: no link to '## {heading}'"
    # no measured figures (test counts, run times) on the front door: they go stale untested
    assert not re.search(r"\b\d+ tests\b|\babout \d+ (s|min|minutes)\b", text)


def test_docs_site_covers_every_page_and_the_install_page_has_the_ci_command():
    nav = (ROOT / "mkdocs.yml").read_text()
    pages = [p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs" / "readme").glob("*.md")]
    missing = [p for p in pages if f": {p}" not in nav]
    assert not missing, f"mkdocs.yml nav lacks {missing}"
    text = (ROOT / "README.md").read_text()
    block = text.split("<!-- ci:test -->", 1)[1].split("<!-- /ci:test -->", 1)[0]
    cmd = next(ln for ln in block.splitlines() if "pytest" in ln)
    assert cmd in (ROOT / "docs" / "install.md").read_text()


def test_the_langgraph_server_environment_of_the_docs_is_the_one_ci_tests():
    """docs/readme/agents.md's install of the LangGraph server and its test command are what .ci/run runs."""
    page = (ROOT / "docs" / "readme" / "agents.md").read_text()
    ci = " ".join((ROOT / ".ci" / "run").read_text().replace("\\\n", " ").split())
    install = [ln for ln in page.splitlines() if ln.startswith("pip install") and "langgraph-cli[inmem]" in ln]
    assert len(install) == 1 and "-c constraints-langgraph-server.txt" in install[0]
    assert "python -m pip install -q " + install[0].removeprefix("pip install ") in ci
    test = [ln for ln in page.splitlines() if ln.startswith("PRM_CRITIC_LANGGRAPH_SERVER=1 pytest")]
    assert len(test) == 1 and test[0] in ci


def test_api_reference_lists_every_public_name():
    """docs/api/*.md name each public module's ``__all__`` (the packages import lazily, so the pages
    point at the defining modules; names missing here would be missing from the reference)."""
    pages = {"prm_critic": "index", "prm_critic.wrappers": "wrappers", "prm_critic.sb3": "sb3",
             "prm_critic.onnx": "onnx", "prm_critic.langgraph": "langgraph", "prm_critic.text": "text",
             "prm_critic.robotics": "robotics"}
    # in a subprocess: importing the packages here would change what this process has imported
    code = f"import importlib, json; print(json.dumps({{m: importlib.import_module(m).__all__ for m in {list(pages)!r}}}))"
    found = json.loads(subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                                      check=True).stdout)
    for module, page in pages.items():
        names = found[module]
        doc = (ROOT / "docs" / "api" / f"{page}.md").read_text()
        missing = [n for n in names if n != "__version__" and not re.search(rf"(\.{n}\n|`{n}`)", doc)]
        assert not missing, f"docs/api/{page}.md lacks {missing} from {module}.__all__"


@pytest.mark.skipif(importlib.util.find_spec("mkdocs") is None or shutil.which("mkdocs") is None,
                    reason="needs the docs extra (mkdocs-material, mkdocstrings)")
def test_docs_site_builds_strict(tmp_path):
    env_bin = Path(sys.executable).parent
    result = subprocess.run([str(env_bin / "mkdocs") if (env_bin / "mkdocs").exists() else "mkdocs",
                             "build", "--strict", "--site-dir", str(tmp_path / "site")],
                            cwd=ROOT, capture_output=True, text=True, timeout=300,
                            env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert result.returncode == 0, result.stderr[-4000:]
