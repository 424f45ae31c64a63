"""Reliability report: every fault the fault-injection suite tries, with the library's answer.

    python -m benchmarks.reliability --run   # runs `pytest -m fault`, writes the raw data, then the doc
    python -m benchmarks.reliability         # rewrites docs/reliability.md from the committed raw data

Raw data: ``benchmarks/results/reliability.json`` (one row per fault, recorded by ``tests/faults.py``,
and the tests that failed); the doc's sections are the fault areas of ``tests/faults.py`` ``ITEMS``.
A fault test fails when the fault goes through without the expected error or correct result; such a
fault is counted as *silent*. The doc is written from the raw data only, so ``tests/test_results_docs.py``
can regenerate it and fail on drift.
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

from tests.faults import ITEMS

ROOT = Path(__file__).resolve().parents[1]
RAW = ROOT / "benchmarks" / "results" / "reliability.json"
DOC = ROOT / "docs" / "reliability.md"
COMMAND = "python -m benchmarks.reliability --run"



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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", action="store_true", help="run the fault suite first and rewrite the raw data")
    ap.add_argument("--raw", type=Path, default=RAW, help="the raw data (default %(default)s)")
    ap.add_argument("--md", type=Path, default=DOC, help="the doc written from it (default %(default)s)")
    args = ap.parse_args(argv)
    if args.run:
        raw = run_suite()
        args.raw.parent.mkdir(parents=True, exist_ok=True)
        args.raw.write_text(json.dumps(raw, indent=1, ensure_ascii=False) + "\n")
    raw = json.loads(args.raw.read_text())
    args.md.write_text(render(raw))
    print(f"wrote {args.md}: {len(raw['faults'])} faults, {len(raw['failed'])} silent")
    return 0 if not raw["failed"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
