"""Reliability report: every fault the fault-injection suite tries, with the library's answer.

    python benchmarks/reliability.py --run   # runs `pytest -m fault`, writes the raw data, then the doc
    python benchmarks/reliability.py         # rewrites docs/reliability.md from the committed raw data

Raw data: ``benchmarks/results/reliability.json`` (one row per fault, from ``tests/faults.py``, and
the tests that failed). A fault test fails when the fault goes through without the expected error or
correct result; such a fault is counted as *silent*. The doc is written from the raw data only, so
``tests/test_results_docs.py`` can regenerate it and fail on drift.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RAW = ROOT / "benchmarks" / "results" / "reliability.json"
DOC = ROOT / "docs" / "reliability.md"
COMMAND = "python benchmarks/reliability.py --run"

# the areas the suite covers, in the order the report lists them
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


def run_suite() -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "faults.jsonl"
        junit = Path(tmp) / "junit.xml"
        env = dict(os.environ, PRM_FAULT_LOG=str(log))
        cmd = [sys.executable, "-m", "pytest", "-m", "fault", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}"]
        print("+", " ".join(cmd[1:]), flush=True)
        proc = subprocess.run(cmd, cwd=ROOT, env=env)
        rows = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
        tests, failed = [], []
        for case in ET.parse(junit).getroot().iter("testcase"):
            name = f"{case.get('classname', '').replace('.', '/')}.py::{case.get('name')}"
            if case.find("skipped") is not None:
                continue
            tests.append(name)
            if case.find("failure") is not None or case.find("error") is not None:
                failed.append(name)
    return {"command": COMMAND, "pytest_exit_code": proc.returncode, "tests": sorted(tests), "failed": sorted(failed), "faults": rows}


def render(raw: dict) -> str:
    by_item = defaultdict(list)
    for row in raw["faults"]:
        by_item[row["item"]].append(row)
    base = lambda t: t.split("[", 1)[0]  # parametrised ids are spelled differently by junit and pytest
    recorded = {base(r["test"]) for r in raw["faults"]}
    unrecorded = sorted(t for t in raw["tests"] if base(t) not in recorded and t not in raw["failed"])
    for item, rows in by_item.items():  # a property test's repeated examples: one row with a count
        groups: dict = {}
        for r in rows:
            groups.setdefault((r["fault"], r["kind"], base(r["test"])), []).append(r)
        by_item[item] = [dict(g[0], cases=len(g)) for g in groups.values()]
    n_err = sum(r["kind"] == "error" for r in raw["faults"])
    n_ok = sum(r["kind"] == "correct" for r in raw["faults"])
    lines = [
        "# Reliability: faults tried and the library's answer",
        "",
        "Written by `benchmarks/reliability.py` from `benchmarks/results/reliability.json`; regenerate with",
        f"`{raw['command']}`. Each row is one fault injected by a test marked `fault` (`pytest -m fault`):",
        "a bad input, a corrupt or mismatched artifact, a kill, a slow or failing critic, an injection or",
        "an edge-case configuration. The answer is either a clear error (the message as raised) or, where",
        "the right answer is a result, the correct result the test asserted. A fault that goes through",
        "without its error or correct result fails its test and is counted as silent here.",
        "",
        f"**Faults tried: {len(raw['faults'])}** ({n_err} clear errors, {n_ok} correct results) in "
        f"{len(raw['tests'])} tests (repeated cases of one fault in one test share a row below). "
        f"**Silent outcomes: {len(raw['failed'])}.**",
        "",
    ]
    if raw["failed"]:
        lines += ["Tests that failed (silent or wrong outcomes):", ""] + [f"- `{t}`" for t in raw["failed"]] + [""]
    if unrecorded:
        lines += ["Fault tests that passed without recording an outcome:", ""] + [f"- `{t}`" for t in unrecorded] + [""]
    for item in sorted(set(ITEMS) | set(by_item)):
        rows = by_item.get(item, [])
        lines += [f"## {item}. {ITEMS.get(item, 'Other')}", ""]
        if not rows:
            lines += ["No fault recorded.", ""]
            continue
        lines += ["| fault | answer | test |", "|---|---|---|"]
        for r in rows:
            answer = ("error: " if r["kind"] == "error" else "correct: ") + r["outcome"]
            if r["cases"] > 1:
                answer += f" ({r['cases']} cases; the first shown)"
            cell = lambda s: s.replace("|", "\\|").replace("\n", " ")
            lines.append(f"| {cell(r['fault'])} | {cell(answer)} | `{r['test'].rsplit('::', 1)[-1]}` |")
        lines.append("")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", action="store_true", help="run the fault suite first and rewrite the raw data")
    args = ap.parse_args()
    if args.run:
        raw = run_suite()
        RAW.parent.mkdir(parents=True, exist_ok=True)
        RAW.write_text(json.dumps(raw, indent=1, ensure_ascii=False) + "\n")
    raw = json.loads(RAW.read_text())
    DOC.write_text(render(raw))
    print(f"wrote {DOC.relative_to(ROOT)}: {len(raw['faults'])} faults, {len(raw['failed'])} silent")
    return 0 if not raw["failed"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
