"""Fault-injection harness: every fault the library must meet loudly, and what it did.

A fault test injects one bad input, corrupt artifact, mismatched critic, kill, slow or failing
critic, injection or edge-case configuration, and asserts the library's answer:

* ``with loud(item, fault, SomeError, match="...")``: the library must raise ``SomeError`` whose
  message matches ``match`` (the error names the thing, the value and what was expected);
* ``correct(item, fault, outcome)``: called after the test's own asserts, when the right answer is a
  correct result rather than an error (a router that no longer crashes, a budget honoured);
* ``@pytest.mark.fault_outcome(item, fault, outcome)`` on a property test: recorded once, as a correct
  result, when the whole test (every generated example) passed (``tests/conftest.py``).

When ``PRM_FAULT_LOG`` is set, each outcome is appended to that JSON-lines file;
``benchmarks/reliability.py`` runs the fault suite that way and writes ``docs/reliability.md``.
A fault that went through silently fails its test, and the report counts it as silent.
Fault tests carry the ``fault`` marker (``pytestmark = pytest.mark.fault``).
"""

from __future__ import annotations

import json
import os
import re
from contextlib import contextmanager
from typing import Iterator

import pytest

__all__ = ["loud", "correct", "record_marked_outcome"]

_TMP = re.compile(r"(/[^\s'\"]*)?/(pytest-of-[^\s/'\"]+|tmp[^\s/'\"]*)/[^\s'\"]*")


def _clean(text: str, limit: int = 300) -> str:
    """One line, machine paths folded to ``<tmp>/name``, at most ``limit`` characters."""
    text = " ".join(str(text).split())
    text = _TMP.sub(lambda m: "<tmp>/" + m.group(0).rstrip("/").rsplit("/", 1)[-1], text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _record(item: int, fault: str, outcome: str, kind: str, test: str | None = None) -> None:
    path = os.environ.get("PRM_FAULT_LOG")
    if not path:
        return
    test = test or os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0]
    row = {"item": int(item), "fault": fault, "kind": kind, "outcome": _clean(outcome), "test": test}
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(row, ensure_ascii=False) + "\n")


@contextmanager
def loud(item: int, fault: str, exc: type[BaseException] | tuple = Exception, match: str | None = None) -> Iterator[None]:
    """Assert the block raises ``exc`` (message matching ``match``) and record the error."""
    with pytest.raises(exc, match=match) as info:
        yield
    _record(item, fault, f"{type(info.value).__name__}: {info.value}", "error")


def correct(item: int, fault: str, outcome: str) -> None:
    """Record a fault whose right answer is a correct result (the test asserted it before)."""
    _record(item, fault, outcome, "correct")


def record_marked_outcome(item: int, fault: str, outcome: str, *, test: str) -> None:
    """Record a passed property test's ``fault_outcome`` marker (called by ``tests/conftest.py``)."""
    _record(item, fault, outcome, "correct", test=test)
