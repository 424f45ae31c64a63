"""Splice the README's sections and excerpts from docs/readme/*.md into README.md (between markers).

The files in docs/readme are the guide pages of the docs site (mkdocs.yml); the tests run their code
blocks. README.md, the front door, holds parts of them verbatim:

* ``<!-- section:NAME -->`` ... ``<!-- /section:NAME -->``: the whole of docs/readme/NAME.md;
* ``<!-- excerpt:NAME -->`` ... ``<!-- /excerpt:NAME -->``: docs/readme/NAME.md up to the end of
  its first code block (its shortest example), then a link to the whole page.

Relative links in the pages (written from docs/readme/) are rewritten to the repository root.
tests/test_readme_sync.py checks that README.md is up to date, so the README's examples are the
tested ones.

    python docs/build_readme.py          # rewrite README.md
    python docs/build_readme.py --check  # exit 1 if README.md is out of date
"""

from __future__ import annotations

import posixpath
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = "docs/readme"
PATTERN = re.compile(
    r"(<!-- (?P<kind>section|excerpt):(?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /(?P=kind):(?P=name) -->)", re.S
)
LINK = re.compile(r"(!?\[[^\]]*\]\()([^)\s#]*)(#[^)\s]*)?\)")
FENCE = re.compile(r"(^```.*?^```\n?)", re.S | re.M)


def root_links(text: str) -> str:
    """Rewrite the relative links of a docs/readme page so they resolve from the repository root."""

    def repl(m: re.Match) -> str:
        target, anchor = m.group(2), m.group(3) or ""
        if not target or re.match(r"^[a-zA-Z][\w+.-]*:", target) or target.startswith("/"):
            return m.group(0)
        return f"{m.group(1)}{posixpath.normpath(posixpath.join(PAGES, target))}{anchor})"

    parts = FENCE.split(text)
    return "".join(p if p.startswith("```") else LINK.sub(repl, p) for p in parts)


def excerpt(name: str, page: str) -> str:
    """The page up to the end of its first code block, and a link to the whole page."""
    m = re.search(r"^```\w*\n.*?^```\n", page, re.S | re.M)
    if m is None:
        raise ValueError(f"{PAGES}/{name}.md has no code block to excerpt")
    title = page.split("\n", 1)[0].lstrip("# ").strip()
    return f"{page[: m.end()]}\nThe whole guide: [{title}]({name}.md).\n"


def build(text: str) -> str:
    def repl(m: re.Match) -> str:
        name = m.group("name")
        page = (ROOT / PAGES / f"{name}.md").read_text()
        body = excerpt(name, page) if m.group("kind") == "excerpt" else page
        return f"{m.group(1)}{root_links(body).rstrip()}\n{m.group(5)}"

    return PATTERN.sub(repl, text)


def main() -> int:
    readme = ROOT / "README.md"
    old = readme.read_text()
    new = build(old)
    if "--check" in sys.argv:
        if new != old:
            print("README.md is out of date: run python docs/build_readme.py")
            return 1
        return 0
    readme.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
