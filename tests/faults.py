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
``python -m benchmarks.reliability --run`` runs the fault suite that way and writes ``docs/reliability.md``,
one section per area of ``ITEMS``.
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

__all__ = ["ITEMS", "loud", "correct", "record_marked_outcome"]

#: the areas the fault suite covers (the ``item`` of every outcome), in the order the report lists them
ITEMS = {
    1: "MC labels: snapshot hooks per env, restore + replay self-check",
    2: "FetchPickAndPlace restore + replay",
    3: "Spec constants and expressions",
    4: "Dataset meta.json layout width",
    5: "Artifact integrity (weights hash in checkpoint JSON and ONNX metadata)",
    6: "Critic/env match (task and layout) in shaper and pruner",
    7: "Normaliser std floor and input clipping",
    8: "Loaders: policy.json allowlist, pickle trust flag, ONNX metadata first, paths inside folder",
    9: "OnnxCritic strict accelerator providers",
    10: "One deadline-bound critic call per step for shaper + pruner",
    11: "HER relabelling in subgoal mode",
    12: "Router and recursion limits",
    13: "Judge score parsing and prompt-injection fencing",
    14: "Token-classification PRM with a newly initialised head",
    15: "Packaging: Python 3.10 imports, only prm_critic importable",
    16: "Results docs written by their scripts, shared defaults",
    17: "Repository speaks of the project only",
    18: "Training budgets honoured or stated",
    19: "Label cost records survive a kill after a label shard's write",
    20: "Checkpoint JSON integrity (architecture and metadata hashed with the weights hash)",
    21: "Label options per family; MC labels of data without snapshots",
    22: "Lazy package names resolve to the documented objects",
    23: "Minari import: make kwargs recorded in the dataset",
    24: "Local model server: expected GGUF hash",
    25: "Text PRM separators outside the tokenizer's vocabulary",
    26: "Tool output that is not valid UTF-8, sanitised at the step boundary",
    27: "Step critic across user turns of a checkpointed thread; stop reason at every limit",
    28: "Re-saved ONNX exports: unverified loading with a warning, deliberate re-seal",
    29: "Ray executor: bounded connection to a cluster address; the joined cluster named",
    30: "Best-of-N candidates cut at max_tokens or identical",
    31: "Declared critic metadata: a critic without a task, another task's critic with other widths",
    32: "ONNX critic on a device provider (CUDA): refilled IOBinding buffers scored, not the bound snapshot",
    33: "Local model server: tools / tool_choice served as schema-constrained tool calls, or refused, never dropped",
    34: "Local model server: OpenAI's errors for an unknown model name (404) and malformed tools (400)",
    35: "rl-baselines3-zoo YAML: PRMWrapper gamma against the algorithm's, critic given by name or path",
    36: "Minari export with PRM rewards: unknown or unlabelled family, non-finite label, gamma outside (0, 1]",
    37: "MCTS over a forkable tool environment: policy and critic call budgets honoured, with the stop reason",
    38: "Ecosystem fit: install hints from the installed distribution, vector shapers given the other env kind, collect into a folder of other settings, Ctrl-C",
    39: "Served agent threads (a new game, a finished episode continued) and ONNX IR versions below the opset's",
    40: "Every critic path gives score's result: a fast path inherited past an overridden score, check_critic on fast paths",
    41: "StepScores contract (shape, range [0, 1], finite, extra heads) at the critic node, best-of-N, beam and MCTS",
    42: "Ensemble members and train_policy's resume fingerprint: architecture and layout hashed with the weights",
    43: "Critic inputs: the env's own observation (dict or array) where the critic knows its layout",
    44: "Tool-call ids reused by a model ('call_0' every time, or '') in the critic node, best-of-N and the backtracker",
    45: "CheckpointBacktracker after the critic node's backtrack verdict, in the README's graph, default as_node",
    50: "Searches a lost state cannot fool: a lost game never the kept best nor the answer (beam, MCTS), terminal outcomes over the critic's score",
    51: "Searches deterministic under their seed, however the beam's expand threads interleave",
    60: "Output folders: the same run resumes, another is refused naming what differs, --overwrite replaces it whole",
    61: "Shaping under plain stable-baselines3: gamma against the algorithm's, a shaper wrapped twice, make_kwargs",
    62: "PRMStatsCallback under plain stable-baselines3: the env's own return, with or without PRMMonitor",
    63: "A policy checkpoint on another task's env",
    64: "Clear errors instead of tracebacks: files where folders go, ensemble files, graphs, Ray, Ctrl-C, --resume",
    65: "distill --data: extra folders holding the teacher's held-out episodes, compared by content",
    66: "serve-llm tool calls validated against the tool's whole JSON schema (maximum, multipleOf, uniqueItems)",
    67: "Judge injection detector: zero-width and soft-hyphen characters, look-alike letters, markdown, base64",
}

_TMP = re.compile(r"(/[^\s'\"]*)?/(pytest-of-[^\s/'\"]+|tmp[^\s/'\"]*)/[^\s'\"]*")


def _clean(text: str, limit: int = 300) -> str:
    """One line, machine paths folded to ``<tmp>/name``, at most ``limit`` characters."""
    text = " ".join(str(text).split())
    text = _TMP.sub(lambda m: "<tmp>/" + m.group(0).rstrip("/").rsplit("/", 1)[-1], text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _record(item: int, fault: str, outcome: str, kind: str, test: str | None = None) -> None:
    if item not in ITEMS:
        raise ValueError(f"fault item {item!r}: not an area of tests/faults.py ITEMS (expected one of {sorted(ITEMS)})")
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
