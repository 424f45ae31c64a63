"""Install hints name a command that works here: prm-critic is not on the package index, so a hint
is read from the installed distribution's metadata (PEP 610 ``direct_url.json``) and keeps the CPU
torch pin (``-c constraints-cpu.txt``).

The distribution metadata is FAKE in most tests (``install_helpers.FakeDistribution``, patched over
``prm_critic._optional._distribution``): each test states one way prm-critic can be installed.
"""

from __future__ import annotations

import importlib.metadata
import shlex
from pathlib import Path

import pytest
from install_helpers import fake_checkout, fake_install, names_index_install, names_index_name

from prm_critic import _optional
from prm_critic._optional import install_command, install_hint, installed_from

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("folder", ["prm critic", "prm-critic"])  # git clone names it prm-critic
def test_editable_checkout_install_gets_an_editable_reinstall_from_that_checkout(monkeypatch, tmp_path, folder):
    root = fake_checkout(tmp_path, folder)
    fake_install(monkeypatch, {"url": root.as_uri(), "dir_info": {"editable": True}})
    assert installed_from() == ("editable", root)
    cmd = install_command("sbx")
    assert shlex.split(cmd) == ["pip", "install", "-c", f"{root}/constraints-cpu.txt", "-e", f"{root}[sbx]"]
    assert install_command(["onnx", "robotics"]).endswith(shlex.quote(f"{root}[onnx,robotics]"))
    hint = install_hint("sbx")
    assert hint.startswith(cmd + " (") and str(root) in hint and "leave it out on a GPU machine" in hint
    assert not names_index_name(hint)  # never the package-index name (a folder named prm-critic is a path)


def test_checkout_folder_install_reinstalls_from_it_without_editable(monkeypatch, tmp_path):
    root = fake_checkout(tmp_path)
    fake_install(monkeypatch, {"url": root.as_uri(), "dir_info": {}})
    assert installed_from() == ("checkout", root)
    assert shlex.split(install_command("ray")) == ["pip", "install", "-c", f"{root}/constraints-cpu.txt", f"{root}[ray]"]
    assert f"re-installs from {root}" in install_hint("ray")


@pytest.mark.parametrize("direct_url, why", [
    (None, "installed from an index (no direct_url.json)"),
    ({"url": "file:///wheels/prm_critic-0.1.0-py3-none-any.whl", "archive_info": {}}, "a wheel file"),
    ({"url": "https://github.com/example/prm-critic", "vcs_info": {"vcs": "git", "commit_id": "0" * 40}}, "a VCS URL"),
    ({"url": "file:///no/such/checkout", "dir_info": {"editable": True}}, "a checkout that was deleted"),
    ("{not json", "unreadable direct_url.json"),
])
def test_other_installs_get_the_command_to_run_in_a_checkout(monkeypatch, direct_url, why):
    fake_install(monkeypatch, direct_url)
    assert installed_from() == ("other", None), why
    assert install_command("torch") == 'pip install -c constraints-cpu.txt ".[torch]"'
    hint = install_hint("torch")
    assert "run it in a checkout" in hint and "not on the package index" in hint and not names_index_name(hint)


def test_not_installed_but_imported_from_a_checkout_names_that_checkout(monkeypatch):
    def not_installed():
        raise importlib.metadata.PackageNotFoundError("prm-critic")

    monkeypatch.setattr(_optional, "_distribution", not_installed)
    kind, root = installed_from()
    assert (kind, root) == ("source", ROOT)  # the tests run from the repository's checkout
    assert shlex.split(install_command("train"))[-2:] == ["-e", f"{ROOT}[train]"]


def test_the_real_install_keeps_the_cpu_pin_and_no_index_name():
    """Unfaked: whatever this environment is, the hint keeps ``-c constraints-cpu.txt``."""
    cmd = install_command("onnx")
    argv = shlex.split(cmd)
    assert argv[:3] == ["pip", "install", "-c"] and argv[3].endswith("constraints-cpu.txt")
    assert not names_index_name(install_hint("onnx"))


def test_docs_and_cli_never_name_the_package_index_install():
    """README, its sources, and every CLI help text: no ``pip install "prm-critic[...]"``."""
    from prm_critic.cli import build_parser
    from cli_helpers import all_parsers

    texts = {p.relative_to(ROOT).as_posix(): p.read_text(encoding="utf-8")
             for p in [ROOT / "README.md", *sorted((ROOT / "docs" / "readme").glob("*.md"))]}
    texts.update({f"prm-critic {name} --help": p.format_help() for name, p in all_parsers(build_parser())})
    bad = [name for name, text in texts.items() if names_index_install(text)]
    assert not bad, bad
