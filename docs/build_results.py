"""The Results page: each benchmark's headline table and plot, copied from its own results doc (which
its script writes from committed raw data), with a link to the whole doc.

Each entry of :data:`RESULTS` names the doc, the table to copy (the first one whose header row starts
with ``header``; ``merge=True`` joins every table of that header, as one table) and the plot (the
doc's image link). A doc that no longer has that table or plot is an error naming both.

The site's page is :func:`build` ``(full=True)``, rendered when the site is built (docs/_mkdocs/hooks.py),
so it always shows the numbers the results docs hold now. docs/results.md, the page as the repository
shows it, is the index (``full=False``: each benchmark, what it measures, its doc), which changes only
with :data:`RESULTS`; tests/test_results_overview.py checks it is up to date.

    python docs/build_results.py          # rewrite docs/results.md
    python docs/build_results.py --check  # exit 1 if docs/results.md is out of date
"""

from __future__ import annotations

import posixpath
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = "docs/results.md"
IMAGE = re.compile(r"!\[(?P<alt>[^\]]*)\]\((?P<target>[^)\s]+)\)")
LINK = re.compile(r"(!?\[[^\]]*\]\()([^)\s#]*)(#[^)\s]*)?\)")


@dataclass(frozen=True)
class Result:
    """One benchmark on the Results page."""

    title: str
    doc: str                # under docs/
    what: str               # one sentence: what was measured
    header: str | None      # the headline table: the first whose header row starts with this
    merge: bool = False     # join every table with that header (one per task, say) into one
    max_rows: int = 12      # longer tables are cut, saying how many rows the doc has
    image: str | None = None  # the plot, as the doc links it
    caption: str = ""       # a line above the plot


RESULTS = (
    Result("RL: sparse vs PRM vs HER vs PRM+HER", "rl_benchmark.md",
           "SAC on four tasks: unshaped success at each task's step budget, by shaping config (mean over seeds).",
           "| task, budget | HER |", image="../benchmarks/rl/results/learned_vs_spec.png",
           caption="FetchPush-v4: the chosen learned potential against the spec's, paired by seed."),
    Result("RL: where failed episodes end", "rl_failure_diagnosis.md",
           "The RL benchmark's failed evaluation episodes: how far from the goal and which subgoals held.",
           "| run | successes |"),
    Result("RL: training throughput", "rl_training_throughput.md",
           "CPU and wall time per env step of shaping and HER relabelling, against plain HER.", "| config |"),
    Result("RL: backend throughput", "rl_backend_throughput.md",
           "stable-baselines3 against SBX (JAX): env steps per second.", "| task | net |"),
    Result("Critic label families", "critic_label_families.md",
           "Held-out success AUROC and progress ranking of state critics trained on each label family.",
           "| task | label family |", merge=True),
    Result("MC bisection labels", "mc_bisect.md",
           "Binary-search Monte-Carlo labels against dense ones: rollout cost and the critics they train.",
           "| labels | estimated states |"),
    Result("MC labelling throughput", "mc_throughput.md",
           "Monte-Carlo rollout steps per second against raw env steps.", "| task | raw env steps/s |"),
    Result("Pairwise ranking loss", "results/state_critic_pairwise.md",
           "State critics with and without the pairwise ranking loss on successful episodes.", "| label family |"),
    Result("Critic latency", "latency.md",
           "The critic in the control loop: torch against onnxruntime, per call and per step.", "| figure | value |",
           image="latency.png"),
    Result("Wrapper overhead", "wrappers_overhead.md",
           "CPU time per env step of the shaper and the pruner on FetchPush-v4.", "| variant |"),
    Result("Subgoal rule, one row", "subgoal_one_row.md",
           "CPU time per row of the generated subgoal code against the rule run directly.", "| task | subgoals |"),
    Result("Distilled deploy critic", "critic_distill.md",
           "A 32-32 student against its 256-256 teacher on the teacher's held-out episodes.", "| metric | teacher"),
    Result("Subgoal potential monotonicity", "potential_monotonicity.md",
           "How often the spec's potential drops along successful scripted trajectories.", "| task | spec |"),
    Result("Critic refresh", "critic_refresh.md",
           "A learned critic refreshed on the policy's own episodes: held-out ranking and calibration.",
           "| critic | refreshes | units |"),
    Result("Text PRM: one pass", "text_one_pass.md",
           "Scoring every step of a text trajectory in one forward pass against one pass per prefix.",
           "| steps T |"),
    Result("TextWorld agents", "agents_benchmark.md",
           "Cooking games: the base policy, best-of-N and PRM-guided searches, success and cost.",
           "| method | games |", image="agents_benchmark.png"),
    Result("TextWorld PRM calibration", "agents_prm_calibration_splits.md",
           "Text PRMs against random and constant controls over game splits: Brier, ECE, AUROC.",
           "| metric | MC PRM |", max_rows=16),
    Result("LLM judge: good vs bad steps", "judge_auroc.md",
           "A local 135M LLM judge on TextWorld steps: AUROC of good against bad steps.", "| good vs | AUROC |"),
    Result("LLM judge under prompt injection", "judge_injection.md",
           "Injected tool outputs against the judge, with and without the defences.", "| variant |"),
    Result("Reliability", "reliability.md", "Faults tried on the library and the answer each gets, with its test.",
           None),
)


def _tables(lines: list[str]) -> list[tuple[int, list[str]]]:
    """``(first line index, rows)`` of each markdown table, outside code blocks."""
    out, i, fence = [], 0, False
    while i < len(lines):
        if lines[i].startswith("```"):
            fence = not fence
        if not fence and lines[i].startswith("|") and i + 1 < len(lines) and re.match(r"^\|[-:| ]+\|$", lines[i + 1]):
            j = i
            while j < len(lines) and lines[j].startswith("|"):
                j += 1
            out.append((i, lines[i:j]))
            i = j
            continue
        i += 1
    return out


def _heading_before(lines: list[str], index: int) -> str:
    for line in reversed(lines[:index]):
        if line.startswith("#"):
            return line.lstrip("#").strip()
    return ""


def _relink(text: str, doc: str) -> str:
    """Links of a doc in a subfolder of docs/, rewritten to resolve from docs/results.md."""
    folder = posixpath.dirname(doc)
    if not folder:
        return text

    def repl(m: re.Match) -> str:
        target = m.group(2)
        if not target or re.match(r"^[a-zA-Z][\w+.-]*:", target) or target.startswith("/"):
            return m.group(0)
        return f"{m.group(1)}{posixpath.normpath(posixpath.join(folder, target))}{m.group(3) or ''})"

    return LINK.sub(repl, text)


def section(r: Result) -> str:
    text = (ROOT / "docs" / r.doc).read_text(encoding="utf-8")
    lines = text.splitlines()
    title = lines[0].lstrip("# ").strip()
    parts = [f"## {r.title}", "", f"{r.what} The whole page, with the commands, intervals and every table: "
             f"[{title}]({r.doc}).", ""]
    if r.header is not None:
        found = [(i, t) for i, t in _tables(lines) if t[0].startswith(r.header)]
        if not found:
            raise ValueError(f"docs/{r.doc}: no table whose header starts with {r.header!r} (Result {r.title!r} in "
                             f"docs/build_results.py)")
        chosen = found if r.merge else found[:1]
        rows = [row for _, t in chosen for row in t[2:]]
        where = "; ".join(dict.fromkeys(_heading_before(lines, i) for i, _ in chosen))
        cut = f" (the first {r.max_rows} of its {len(rows)} rows)" if len(rows) > r.max_rows else ""
        table = "\n".join([*chosen[0][1][:2], *rows[: r.max_rows]])
        parts += [f"From *{where}*{cut}:" if where and where != title else f"The headline table{cut}:", "",
                  _relink(table, r.doc), ""]
    if r.image is not None:
        m = next((m for m in IMAGE.finditer(text) if m["target"] == r.image), None)
        if m is None:
            raise ValueError(f"docs/{r.doc}: no image {r.image!r} (Result {r.title!r} in docs/build_results.py)")
        target = posixpath.normpath(posixpath.join(posixpath.dirname(r.doc), r.image))
        parts += [*([r.caption, ""] if r.caption else []), f"![{m['alt']}]({target})", ""]
    return "\n".join(parts)


def build(full: bool = True) -> str:
    """The Results page: with ``full``, each benchmark's headline table and plot (the site's page); without,
    the index of the benchmarks and their docs (docs/results.md)."""
    note = "<!-- written by python docs/build_results.py; edit that file, not this page -->\n\n"
    if not full:
        rows = "\n".join(f"| {r.title} | {r.what} | [{r.doc}]({r.doc}) |" for r in RESULTS)
        return ("# Results\n\n"
                "Measured, each page with the commands that reproduce it. The docs site's Results page shows each "
                "benchmark's headline table and plot.\n\n" + note
                + f"| benchmark | what was measured | page |\n|---|---|---|\n{rows}\n")
    head = ("# Results\n\n"
            "Each benchmark's headline, copied from its results page (which its script writes from committed "
            "raw data, with the command that reproduces it). A plot opens at full size when clicked.\n\n" + note)
    return head + "\n".join(section(r) for r in RESULTS)


def main(argv: list[str]) -> int:
    text = build(full=False)
    path = ROOT / OUT
    if "--check" in argv:
        if path.read_text(encoding="utf-8") != text:
            print(f"{OUT} is out of date: run python docs/build_results.py", file=sys.stderr)
            return 1
        return 0
    path.write_text(text, encoding="utf-8")
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
