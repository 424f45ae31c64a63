"""Every function in ``prm_critic/`` is at most ``MAX_LINES`` lines of code.

A function's length is counted on its AST: from its ``def`` line (decorators not counted) to its last
line, blank lines and comments inside it included, minus the lines of its docstring. A nested function
counts both on its own and inside the function that holds it. A longer function is split along its
phases (argument checks, setup, the main loop, writing results) into private helpers.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import prm_critic

MAX_LINES = 80
PACKAGE = Path(prm_critic.__file__).parent


def code_lines(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Lines of ``fn`` from its ``def`` line to its end, less its docstring's lines."""
    assert fn.end_lineno is not None
    n = fn.end_lineno - fn.lineno + 1
    first = fn.body[0]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        assert first.end_lineno is not None
        n -= first.end_lineno - first.lineno + 1
    return n


def too_long(source: str, where: str, limit: int = MAX_LINES) -> list[str]:
    """``"where:line name (n lines)"`` for each function of ``source`` over ``limit`` lines of code."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            n = code_lines(node)
            if n > limit:
                out.append(f"{where}:{node.lineno} {node.name} ({n} lines)")
    return sorted(out)


def _function(code_lines: int, doc_lines: int) -> str:
    doc = ['    """Doc.'] + ["    more"] * (doc_lines - 2) + ['    """'] if doc_lines else []
    body = ["    x = 0"] * (code_lines - 2) + ["    return x"]
    return "\n".join(["@staticmethod", "def f():", *doc, *body]) + "\n"


def test_counter_excludes_the_docstring_and_counts_the_rest():
    assert too_long(_function(80, 0), "m.py") == []
    assert too_long(_function(80, 200), "m.py") == []  # a long docstring does not count
    assert too_long(_function(81, 0), "m.py") == ["m.py:2 f (81 lines)"]  # the decorator line does not count
    assert too_long(_function(81, 30), "m.py") == ["m.py:2 f (81 lines)"]
    nested = "def outer():\n" + textwrap.indent(_function(81, 3), "    ") + "    return f\n"
    # outer: its def and return, f's decorator, def, 3 docstring lines and 80 more
    assert too_long(nested, "m.py") == ["m.py:1 outer (87 lines)", "m.py:3 f (81 lines)"]
    assert too_long("async def g():\n" + "    pass\n" * 81, "m.py") == ["m.py:1 g (82 lines)"]


def test_no_function_in_the_package_is_over_the_limit():
    files = sorted(PACKAGE.rglob("*.py"))
    assert len(files) > 50, f"expected the package's modules under {PACKAGE}, found {len(files)}"
    over = [hit for f in files for hit in too_long(f.read_text(encoding="utf-8"), str(f.relative_to(PACKAGE.parent)))]
    assert not over, (f"{len(over)} function(s) over {MAX_LINES} lines of code (docstring excluded); split each "
                      f"along its phases into private helpers:\n" + "\n".join(over))
