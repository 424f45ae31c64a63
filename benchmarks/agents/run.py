"""TextWorld cooking benchmark: success rate vs policy calls on held-out games.

Methods (see agents/textworld_agent/search.py for the cost accounting):

  base          the offline base policy alone (REPS episodes per game)
  outcome_bon4  outcome-only best-of-4: up to 4 base episodes, stop at the first won
  prm_bon3      learned PRM best-of-3 at every step (one-step look-ahead on forked states)
  prm_beam      learned PRM beam search (width 2, branch 2) with dead-end pruning,
                prm_critic.langgraph.build_beam_search_graph
  oracle_bon3   ORACLE best-of-3 at every step on privileged intermediate_reward (upper reference)

Resumable: one JSON per (method, game seed, rep) under --out, written atomically; existing ones
are skipped. ``--report`` rebuilds the markdown table and the PNG from what is there.

    python benchmarks/agents/run.py --methods base,outcome_bon4,oracle_bon3 --seeds 1000-1007
    python benchmarks/agents/run.py --methods prm_bon3,prm_beam --seeds 1000-1007 --prm .cache/textworld/prm
    python benchmarks/agents/run.py --report --seeds 1000-1007
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import zlib
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from agents.textworld_agent.env import DEFAULT_DIFFICULTY, ensure_game  # noqa: E402
from agents.textworld_agent.labels import parse_seeds  # noqa: E402
from agents.textworld_agent.search import (  # noqa: E402
    oracle_score_fn, prm_score_fn, run_base, run_beam, run_outcome_bon, run_step_bon)

METHODS = ("base", "outcome_bon4", "prm_bon3", "prm_beam", "oracle_bon3")
LABELS = {
    "base": "base policy",
    "outcome_bon4": "outcome-only best-of-4 (episodes)",
    "prm_bon3": "PRM best-of-3 at every step",
    "prm_beam": "PRM beam search (w=2, b=2, dead-end pruning)",
    "oracle_bon3": "ORACLE best-of-3 at every step (intermediate_reward)",
}


def _atomic_json(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(obj, f)
    os.replace(tmp, path)


def run_one(method: str, path: Path, rng: np.random.Generator, max_steps: int, critic=None,
            dead_end_threshold: float = 0.05) -> dict:
    if method == "base":
        r = run_base(path, rng, max_steps=max_steps)
    elif method == "outcome_bon4":
        r = run_outcome_bon(path, rng, n=4, max_steps=max_steps)
    elif method == "prm_bon3":
        r = run_step_bon(path, rng, prm_score_fn(critic), n=3, max_steps=max_steps)
    elif method == "oracle_bon3":
        r = run_step_bon(path, rng, oracle_score_fn(), n=3, max_steps=max_steps)
    elif method == "prm_beam":
        r = run_beam(path, rng, critic, beam_width=2, branch_factor=2, max_steps=max_steps,
                     dead_end_threshold=dead_end_threshold, aggregate="last")
    else:
        raise ValueError(f"method: expected one of {METHODS}, got {method!r}")
    return r.to_dict()


def report(out: Path, seeds, md: Path, png: Path, command: str) -> str:
    rows = []
    allres: dict[str, list] = {}
    for f in sorted(out.glob("*__seed*.json")):
        r = json.loads(f.read_text())
        if r["seed"] in seeds:
            allres.setdefault(r["method"], []).append(r)
    order = {m: i for i, m in enumerate(METHODS)}
    for m in sorted(allres, key=lambda k: (order.get(k.split("+")[0], 99), k)):
        res = allres[m]
        games = sorted({r["seed"] for r in res})
        rows.append({
            "method": m, "episodes": len(res), "games": len(games),
            "success": float(np.mean([r["won"] for r in res])),
            "lost": float(np.mean([r["lost"] for r in res])),
            "calls": float(np.mean([r["policy_calls"] for r in res])),
            "calls_won": float(np.mean([r["policy_calls"] for r in res if r["won"]])) if any(r["won"] for r in res) else float("nan"),
            "tools": float(np.mean([r["tool_calls"] for r in res])),
            "critic": float(np.mean([r["critic_calls"] for r in res])),
            "dead": float(np.mean([r["dead_ends_avoided"] for r in res])),
            "wall": float(np.mean([r["wall_s"] for r in res])),
        })
    base = next((r for r in rows if r["method"] == "base"), None)
    lines = [
        "| method | games | episodes | success | lost | policy calls / episode | x base calls | tool calls / episode | critic calls / episode | dead ends avoided or pruned / episode | wall s / episode |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ratio = f"{r['calls'] / base['calls']:.1f}" if base else "unmeasured"
        name, _, tag = r["method"].partition("+")
        label = LABELS[name] + (f" [{tag}]" if tag else "")
        lines.append(f"| {label} | {r['games']} | {r['episodes']} | {r['success']:.2f} | {r['lost']:.2f} | "
                     f"{r['calls']:.1f} | {ratio} | {r['tools']:.1f} | {r['critic']:.1f} | {r['dead']:.2f} | {r['wall']:.1f} |")
    table = "\n".join(lines)
    if rows:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 4.5))
        for i, r in enumerate(rows):
            ax.scatter(r["calls"], r["success"], s=60)
            ax.annotate(r["method"], (r["calls"], r["success"]), textcoords="offset points",
                        xytext=(6, 5 if i % 2 == 0 else -13), fontsize=9)
        if base:
            ax.axvline(10 * base["calls"], ls="--", c="gray", lw=1)
            ax.text(10 * base["calls"], 0.02, " 10x base calls", color="gray", fontsize=8)
        ax.axhline(0.6, ls=":", c="gray", lw=1)
        ax.set_xlabel("policy calls per episode (mean)")
        ax.set_ylabel("success rate (held-out games)")
        ax.set_ylim(-0.02, 1.02)
        ax.set_title(f"TextWorld cooking ({DEFAULT_DIFFICULTY.tag}), {len(seeds)} held-out games")
        fig.tight_layout()
        png.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=png.parent, suffix=".png")
        os.close(fd)
        fig.savefig(tmp, dpi=110)
        os.replace(tmp, png)
    return table


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--seeds", default="1000-1007", help="held-out game seeds (never used for labels)")
    ap.add_argument("--reps", type=int, default=4, help="episodes per game for the base policy")
    ap.add_argument("--max-steps", type=int, default=40)
    ap.add_argument("--prm", default=".cache/textworld/prm", help="trained MiniLMStepPRM folder")
    ap.add_argument("--out", default="benchmarks/agents/results")
    ap.add_argument("--md", default="benchmarks/agents/results/table.md")
    ap.add_argument("--png", default="docs/agents_benchmark.png")
    ap.add_argument("--dead-end-threshold", type=float, default=0.05, help="prm_beam: prune steps scoring below it")
    ap.add_argument("--tag", default="", help="suffix for PRM method names, e.g. 'mc+siblings' (which PRM)")
    ap.add_argument("--report", action="store_true", help="only rebuild the table and plot")
    a = ap.parse_args(argv)
    seeds = parse_seeds(a.seeds)
    methods = [m.strip() for m in a.methods.split(",") if m.strip()]
    for m in methods:
        if m not in METHODS:
            raise SystemExit(f"--methods: expected names from {METHODS}, got {m!r}")
    out = Path(a.out)
    if not a.report:
        from tqdm import tqdm

        critic = None
        if any(m.startswith("prm") for m in methods):
            from prm_critic.text.prm import MiniLMStepPRM

            critic = MiniLMStepPRM.load(a.prm)
        units = [(m, s, rep) for m in methods for s in seeds for rep in range(a.reps if m == "base" else 1)]
        for m, s, rep in tqdm(units, desc="agents benchmark", unit="episode"):
            name = f"{m}+{a.tag}" if (a.tag and m.startswith("prm")) else m
            f = out / f"{name}__seed{s}_rep{rep}.json"
            if f.exists():
                continue
            path = ensure_game(s)
            rng = np.random.default_rng([s, rep, zlib.crc32(m.encode())])
            t0 = time.time()
            res = run_one(m, path, rng, a.max_steps, critic, a.dead_end_threshold)
            res.update(method=name, seed=s, rep=rep, wall_s=round(time.time() - t0, 2), max_steps=a.max_steps)
            if m == "prm_beam":
                res["dead_end_threshold"] = a.dead_end_threshold
            _atomic_json(f, res)
    table = report(out, seeds, Path(a.md), Path(a.png), " ".join(sys.argv))
    Path(a.md).parent.mkdir(parents=True, exist_ok=True)
    Path(a.md).write_text(table + "\n")
    print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
