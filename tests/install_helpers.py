"""FAKE installed distributions of prm-critic for the install-hint tests (``prm_critic._optional``)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prm_critic import _optional


class FakeDistribution:
    """FAKE installed distribution: only ``read_text("direct_url.json")`` is answered."""

    def __init__(self, direct_url: dict | str | None):
        self._text = direct_url if isinstance(direct_url, (str, type(None))) else json.dumps(direct_url)

    def read_text(self, name: str) -> str | None:
        return self._text if name == "direct_url.json" else None


# The package-index form of an install, ``prm-critic[extra]``: the name not preceded by a path
# separator. ``git clone`` names the checkout folder ``prm-critic``, so ``/home/me/prm-critic[onnx]`` is
# the checkout's path, not the index name.
_INDEX_NAME = re.compile(r"(?<![/\\\w.-])prm-critic\[")
_INDEX_INSTALL = re.compile(r"pip install [^\n`]*(?<![/\\\w.-])prm-critic\[")


def names_index_name(text: str) -> bool:
    """Whether ``text`` names ``prm-critic[...]`` as a package-index requirement (not as a folder)."""
    return _INDEX_NAME.search(text) is not None


def names_index_install(text: str) -> bool:
    """Whether ``text`` holds a ``pip install ... prm-critic[...]`` from the package index."""
    return _INDEX_INSTALL.search(text) is not None


def fake_install(monkeypatch, direct_url) -> None:
    monkeypatch.setattr(_optional, "_distribution", lambda: FakeDistribution(direct_url))


def fake_checkout(tmp_path: Path, name: str = "prm critic") -> Path:
    """A folder that looks like a checkout (a space in its name: the command must quote it)."""
    root = tmp_path / name
    root.mkdir()
    (root / "pyproject.toml").write_text("[project]\nname = 'prm-critic'\n")
    (root / "constraints-cpu.txt").write_text("torch==2.13.0\n")
    return root
