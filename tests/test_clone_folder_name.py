"""A clone in a folder named ``prm-critic`` (``git clone``'s default) passes the checks that read the
checkout's path: the install hints name that folder (``/path/prm-critic[onnx]``), which is a path and
not the package-index name.

The clone is real (``git clone`` of this repository's committed tree) and its tests run in a
subprocess. Its editable install is the metadata ``pip install -e`` writes (a dist-info folder with
PEP 610 ``direct_url.json`` naming the clone), put first on ``PYTHONPATH`` instead of running pip, so
the test needs neither the network nor a build backend.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# The checks that read the checkout's path (the install hints and the quickstart's "Next:" lines).
AFFECTED = ["tests/test_install_hints.py", "tests/test_quickstart.py::test_quickstart_next_commands_parse_and_say_their_extra"]


def _editable_metadata(site: Path, clone: Path) -> None:
    """The dist-info ``pip install -e <clone>`` leaves: METADATA and ``direct_url.json``."""
    dist = importlib.metadata.distribution("prm-critic")
    info = site / f"prm_critic-{dist.version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(dist.read_text("METADATA") or "", encoding="utf-8")
    (info / "direct_url.json").write_text(json.dumps({"url": clone.as_uri(), "dir_info": {"editable": True}}))


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs git and a git checkout")
def test_a_clone_named_prm_critic_passes_the_install_hint_checks(tmp_path):
    clone = tmp_path / "prm-critic"
    subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True, timeout=300)
    _editable_metadata(tmp_path / "site", clone)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), str(clone)]),
           "OMP_NUM_THREADS": "1"}
    probe = subprocess.run(
        [sys.executable, "-c", "import prm_critic; from prm_critic._optional import install_hint; "
                               "print(prm_critic.__file__); print(install_hint('onnx'))"],
        cwd=clone, env=env, capture_output=True, text=True, timeout=120)
    assert probe.returncode == 0, probe.stderr[-2000:]
    module_file, hint = probe.stdout.splitlines()[:2]
    # the setup is what a user has: the clone's code, and a hint naming the folder prm-critic
    assert Path(module_file).resolve().is_relative_to(clone.resolve()), module_file
    assert f"{clone}[onnx]" in hint, hint
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *AFFECTED],
                       cwd=clone, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert " passed" in r.stdout and " failed" not in r.stdout
