"""The README and the guides show the public API as users should write it: names imported from the
package that exports them (``from prm_critic.robotics import make_env``, not from
``prm_critic.robotics.make``), one spelling of the critic node's router, MCTS beside the beam, and
when to use ``NumpyMLPCritic``."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs" / "readme").glob("*.md"))]
IMPORT = re.compile(r"^\s*from (prm_critic(?:\.\w+)+) import \(?([\w, \n]+?)\)?$", re.M)


def _python_blocks(text: str) -> str:
    return "\n".join(re.findall(r"```python\n(.*?)```", text, re.S))


def test_names_are_imported_from_the_package_that_exports_them():
    deep = []
    for doc in DOCS:
        for module, names in IMPORT.findall(_python_blocks(doc.read_text())):
            package = module.rsplit(".", 1)[0]
            exported = set(getattr(importlib.import_module(package), "__all__", ()))
            wanted = [n.strip() for n in names.replace("\n", " ").split(",") if n.strip()]
            if wanted and all(n in exported for n in wanted):
                deep.append(f"{doc.relative_to(ROOT)}: from {module} import {', '.join(wanted)} ({package} exports them)")
    assert not deep, deep


def test_one_router_spelling_mcts_beside_the_beam_and_the_numpy_runner():
    texts = {doc.relative_to(ROOT).as_posix(): doc.read_text() for doc in DOCS}
    assert not [name for name, text in texts.items() if "route_after_critic" in text]  # node.router() throughout
    for name in ("README.md", "docs/readme/langgraph.md"):
        assert "MCTSSearch" in texts[name] and "build_beam_search_graph" in texts[name], name
    assert "MCTSSearch(expand" in _python_blocks(texts["docs/readme/langgraph.md"])
    for name in ("README.md", "docs/readme/deploy.md"):
        assert re.search(r"use `NumpyMLPCritic`", texts[name]), name
