"""Results docs are written by their scripts from committed raw data: regenerate each one that
renders without re-measuring, into a temporary file, and fail on any drift from the committed doc."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from faults import correct

REPO = Path(__file__).resolve().parents[1]

#: doc -> (its script: a module run with ``python -m``, or a file path; raw data it renders from;
#: arguments that render the doc into {out} only)
RENDERED = {
    "docs/critic_label_families.md": ("benchmarks.critic_label_families", "benchmarks/results/critic_label_families.json",
                                      ["--render", "--md", "{out}"]),
    "docs/rl_benchmark.md": ("benchmarks.rl.report", "benchmarks/rl/results/runs",
                             ["--no-plot", "--committed", "--out-md", "{out}"]),
    "docs/critic_refresh.md": ("benchmarks.critic_refresh", "benchmarks/results/critic_refresh.json",
                               ["--render", "--md", "{out}"]),
    "docs/latency.md": ("benchmarks.latency", "benchmarks/results/latency.json", ["--render", "--md", "{out}"]),
    "docs/critic_distill.md": ("benchmarks.critic_distill", "benchmarks/results/critic_distill.json",
                               ["--render", "--md", "{out}"]),
    "docs/wrappers_overhead.md": ("benchmarks.wrappers_overhead", "benchmarks/results/wrappers_overhead.json",
                                  ["--render", "--md", "{out}"]),
    "docs/subgoal_one_row.md": ("benchmarks.subgoal_one_row", "benchmarks/results/subgoal_one_row.json",
                                ["--render", "--md", "{out}"]),
    "docs/mc_bisect.md": ("benchmarks.mc_bisect", "benchmarks/results/mc_bisect.json", ["--render", "--md", "{out}"]),
    "docs/mc_throughput.md": ("benchmarks.mc_throughput", "benchmarks/results/mc_throughput.json",
                              ["--render", "--out", "{out}"]),
    "docs/potential_monotonicity.md": ("benchmarks.potential_monotonicity",
                                       "benchmarks/results/potential_monotonicity.json", ["--render", "--out", "{out}"]),
    "docs/results/state_critic_pairwise.md": ("benchmarks.critic_pairwise", "benchmarks/results/state_critic_pairwise.json",
                                              ["--render", "--md", "{out}"]),
    "docs/text_one_pass.md": ("benchmarks.text_one_pass", "benchmarks/results/text_one_pass.json",
                              ["--render", "--md", "{out}"]),
    "docs/rl_failure_diagnosis.md": ("benchmarks.rl.diagnose_failures", "benchmarks/results/rl_failure_diagnosis.json",
                                     ["--render", "--md", "{out}"]),
    "docs/rl_backend_throughput.md": ("benchmarks.rl.backend_throughput",
                                      "benchmarks/results/rl_backend_throughput.json", ["--render", "--md", "{out}"]),
    "docs/rl_training_throughput.md": ("benchmarks.rl.training_throughput",
                                       "benchmarks/results/rl_training_throughput.json", ["--render", "--md", "{out}"]),
    "docs/judge_auroc.md": ("benchmarks.agents.judge_auroc", "benchmarks/results/judge_auroc.json",
                            ["--render", "--md", "{out}"]),
    "docs/judge_injection.md": ("benchmarks.agents.judge_injection", "benchmarks/results/judge_injection.json",
                                ["--render", "--md", "{out}"]),
    "docs/agents_benchmark.md": ("benchmarks.agents.report", "benchmarks/agents/results",
                                 ["--render", "--md", "{out}"]),
    "docs/agents_prm_calibration_splits.md": ("benchmarks.agents.prm_calibration_splits",
                                              "benchmarks/results/agents_prm_calibration_splits.json",
                                              ["--render", "--md", "{out}"]),
    "benchmarks/agents/results/table.md": ("benchmarks.agents.report", "benchmarks/agents/results",
                                           ["--render", "--table", "{out}"]),
}


def _command(script: str) -> list[str]:
    """``script`` as the arguments of ``python``: ``-m benchmarks.x`` for a module, else the file's path."""
    return [script] if script.endswith(".py") else ["-m", script]


def _render(script: str, args: list[str], out: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg"}
    return subprocess.run([sys.executable, *_command(script), *[a.format(out=out) for a in args]],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.fault
@pytest.mark.parametrize("doc", sorted(RENDERED))
def test_results_doc_matches_its_raw_data(doc, tmp_path):
    script, raw, args = RENDERED[doc]
    assert (REPO / raw).exists(), f"{doc}: raw data {raw} is not in the repository"
    out = tmp_path / Path(doc).name
    proc = _render(script, args, out)
    assert proc.returncode == 0, proc.stderr[-2000:]
    committed = (REPO / doc).read_text()
    fresh = out.read_text()
    if fresh != committed:
        import difflib

        diff = "".join(difflib.unified_diff(committed.splitlines(True), fresh.splitlines(True), doc, "regenerated", n=1))
        rewrite = f"python {' '.join(_command(script))} {' '.join(args)}".replace("{out}", doc)
        pytest.fail(f"{doc} differs from what `{script}` renders from {raw}; rewrite it with `{rewrite}`:\n{diff[:4000]}")
    correct(16, f"{doc} regenerated from {raw}", "byte-identical to the committed doc")


#: docs whose renderer takes the raw-data file as ``--raw``
RAW_ARG = [doc for doc, (_, raw, _) in RENDERED.items() if raw.endswith(".json")]


def _first_number(node, path=(), kind=float):
    """Path to the first float (else int) among the measurements (``rows`` / ``runs`` / ``tasks``) of a raw-data file."""
    if isinstance(node, kind) and not isinstance(node, bool) and any(p in ("rows", "runs", "tasks") for p in path):
        return path
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for k, v in items:
        found = _first_number(v, (*path, k), kind)
        if found:
            return found
    return _first_number(node, path, int) if kind is float and not path else None


@pytest.mark.fault
@pytest.mark.parametrize("doc", sorted(RAW_ARG))
def test_changed_measurement_changes_the_rendered_doc(doc, tmp_path):
    """The doc is rendered from the raw data, not written by hand: one measurement changed in a copy of
    the raw data changes the rendered doc, so a doc edited without its data drifts from it."""
    import json

    script, raw, args = RENDERED[doc]
    data = json.loads((REPO / raw).read_text())
    path = _first_number(data)
    assert path, f"{raw}: no measured number found"
    node = data
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = node[path[-1]] * 1.5 + 0.123
    changed = tmp_path / Path(raw).name
    changed.write_text(json.dumps(data))
    out = tmp_path / Path(doc).name
    proc = _render(script, [*args, "--raw", str(changed)], out)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert out.read_text() != (REPO / doc).read_text(), f"{doc} did not change when {raw} {list(path)} changed"
    correct(16, f"one measurement in a copy of {raw} changed ({'/'.join(map(str, path))})",
            f"{doc} rendered from it differs from the committed doc (drift detected)")


def test_reliability_doc_matches_its_raw_data(tmp_path):
    """``benchmarks/reliability.py`` (without ``--run``) renders docs/reliability.md from
    benchmarks/results/reliability.json, its sections the fault areas of ``tests/faults.py``; compare byte for byte."""
    out = tmp_path / "reliability.md"
    proc = _render("benchmarks.reliability", ["--md", "{out}"], out)
    assert proc.returncode == 0, proc.stderr[-2000:]
    committed = (REPO / "docs" / "reliability.md").read_text()
    if out.read_text() != committed:
        import difflib

        diff = "".join(difflib.unified_diff(committed.splitlines(True), out.read_text().splitlines(True),
                                            "docs/reliability.md", "regenerated", n=1))
        pytest.fail("docs/reliability.md differs from what benchmarks/reliability.py renders from "
                    f"benchmarks/results/reliability.json; rewrite it with `python -m benchmarks.reliability`:\n{diff[:4000]}")


def test_rendered_docs_name_their_generator():
    for doc, (script, raw, _) in RENDERED.items():
        if not doc.startswith("docs/"):
            continue  # a table fragment, not a doc
        text = (REPO / doc).read_text()
        assert script in text and raw.split("/")[-1] in text, f"{doc} must say it is generated by {script} from {raw}"


def test_critic_label_families_states_the_pairwise_weight_it_trained_with():
    """The doc's stated pairwise weight comes from the raw data's training config."""
    import json

    raw = json.loads((REPO / RENDERED["docs/critic_label_families.md"][1]).read_text())
    text = (REPO / "docs/critic_label_families.md").read_text()
    for run in raw["runs"]:
        assert f"pairwise ranking weight {run['config']['pairwise_weight']}" in text
    assert "pairwise weight 0.1" not in text
