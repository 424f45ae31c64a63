"""mkdocs hook: links from docs pages to repository files outside docs/ (source files, task specs,
benchmark figures) are published with the site under ``_repo/`` so that they resolve (and images
show); a link to a folder outside docs/ becomes the folder's path in code, since a site cannot list it.
Every image is also a link to itself: a plot shrunk to the page's width opens at full size when clicked.
The Results page (results.md) is rendered from the results docs as they are now (docs/build_results.py).
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r"(?P<head>!?\[(?P<text>[^\]]*)\]\()(?P<target>[^)\s#]+)(?P<anchor>#[^)\s]*)?\)")
#: an image that is not already the text of a link
IMAGE = re.compile(r"(?<!\[)!\[(?P<alt>[^\]]*)\]\((?P<target>[^)\s]+)\)")
_FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def _outside(src_uri: str, target: str) -> str | None:
    """The repository path of a relative link that leaves docs/, else None."""
    if re.match(r"^[a-zA-Z][\w+.-]*:", target) or target.startswith("/"):
        return None
    path = posixpath.normpath(posixpath.join(posixpath.dirname(src_uri), target))
    if not path.startswith("../"):
        return None
    return posixpath.normpath(posixpath.join("docs", path))


def _links(markdown: str):
    prose = _FENCE.sub("", markdown)
    return LINK.finditer(prose)


def on_files(files, config):
    wanted = set()
    for f in files.documentation_pages():
        for m in _links(Path(f.abs_src_path).read_text()):
            repo_path = _outside(f.src_uri, m["target"])
            if repo_path and (ROOT / repo_path).is_file():
                wanted.add(repo_path)
    for repo_path in sorted(wanted):
        files.append(File.generated(config, f"_repo/{repo_path}", abs_src_path=str(ROOT / repo_path)))
    return files


def _results_page() -> str:
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location("build_results", ROOT / "docs" / "build_results.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["build_results"] = module  # its dataclass looks the module up there
    spec.loader.exec_module(module)
    return module.build(full=True)


def on_page_markdown(markdown, page, config, files):
    if page.file.src_uri == "results.md":
        markdown = _results_page()
        page.meta["hide"] = ["toc"]  # the plots get the table of contents' width
    def repl(m: re.Match) -> str:
        repo_path = _outside(page.file.src_uri, m["target"])
        if repo_path is None:
            return m.group(0)
        if (ROOT / repo_path).is_file():
            rel = posixpath.relpath(f"_repo/{repo_path}", posixpath.dirname(page.file.src_uri) or ".")
            return f"{m['head']}{rel}{m['anchor'] or ''})"
        return f"{m['text']} (`{repo_path}/` in the repository)"

    def linked(m: re.Match) -> str:
        return f"[{m.group(0)}]({m['target']})"

    parts = re.split(r"(^```.*?^```)", markdown, flags=re.S | re.M)
    return "".join(p if p.startswith("```") else IMAGE.sub(linked, LINK.sub(repl, p)) for p in parts)
