"""Splice the README sections in docs/readme/*.md into README.md (between section markers).

Each section's code is tested from its docs/readme file; tests/test_readme_sync.py checks that
README.md holds the same text, so the README's examples are the tested ones.

    python docs/build_readme.py          # rewrite README.md
    python docs/build_readme.py --check  # exit 1 if README.md is out of date
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PATTERN = re.compile(r"(<!-- section:(?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /section:(?P=name) -->)", re.S)


def build(text: str) -> str:
    def repl(m: re.Match) -> str:
        body = (ROOT / "docs" / "readme" / f"{m.group('name')}.md").read_text()
        return f"{m.group(1)}{body.rstrip()}\n{m.group(4)}"

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
