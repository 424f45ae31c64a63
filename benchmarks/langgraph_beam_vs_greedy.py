"""Critic-guided search on synthetic trees: greedy (beam 1) vs beam search, side by side.

Each instance is a tree of depth ``--depth`` and branching 3 with exactly one goal leaf; a step is
good iff it stays on the goal path. The critic is noisy: ``success = clip(0.25 + 0.5 * good +
N(0, sigma))`` (seeded per instance, so every searcher sees the same scores). Every search runs as
a real compiled LangGraph graph from ``prm_critic.langgraph.build_beam_search_graph``.

    python -m benchmarks.langgraph_beam_vs_greedy --instances 100 --depth 5 --sigma 0.2
"""

from __future__ import annotations

import argparse

import numpy as np

from prm_critic.critic import BaseCritic, StepScores
from prm_critic.langgraph import build_beam_search_graph


class NoisyPathCritic(BaseCritic):
    def __init__(self, goal: tuple[int, ...], sigma: float, seed: int):
        self.goal, self.sigma, self.seed = goal, sigma, seed

    def _one(self, path: tuple[int, ...]) -> float:
        good = path == self.goal[: len(path)]
        rng = np.random.default_rng([self.seed, *path])
        return float(np.clip(0.25 + 0.5 * good + rng.normal(0, self.sigma), 0, 1))

    def score(self, steps):
        vals = [self._one(tuple(int(x) for x in s.step.split("=")[1].split("/") if x)) for s in steps]
        v = np.asarray(vals, np.float32)
        return StepScores(v, v)


def run(args):
    rows = {}
    configs = [("greedy (beam 1)", 1), ("beam 2", 2), ("beam 3", 3)]
    for name, bw in configs:
        solved, calls = 0, []
        for i in range(args.instances):
            rng = np.random.default_rng(i)
            goal = tuple(int(x) for x in rng.integers(0, 3, size=args.depth))
            critic = NoisyPathCritic(goal, args.sigma, i)

            def expand(path, history, k):
                return [(f"go path={'/'.join(map(str, path + [c]))}", path + [c]) for c in range(k)]

            g = build_beam_search_graph(expand, critic, beam_width=bw, branch_factor=3, max_depth=args.depth,
                                        dead_end_threshold=args.dead_end, budget=args.budget,
                                        is_terminal=lambda p, goal=goal: tuple(p) == goal).compile()
            out = g.invoke({"prompt": "find the goal", "root": []}, {"recursion_limit": 4 * args.depth + 10})
            solved += out["stop_reason"] == "solved"
            calls.append(out["policy_calls"])
        rows[name] = (solved / args.instances, float(np.mean(calls)))
    print(f"instances={args.instances} depth={args.depth} sigma={args.sigma} dead_end={args.dead_end} budget={args.budget}")
    print("| search | solved | mean policy calls | solved ratio vs greedy |")
    print("|---|---|---|---|")
    g_rate = rows[configs[0][0]][0]
    for name, (rate, c) in rows.items():
        ratio = f"{rate / g_rate:.2f}x" if g_rate > 0 else "n/a"
        print(f"| {name} | {rate:.2f} | {c:.1f} | {ratio} |")


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--instances", type=int, default=100)
    p.add_argument("--depth", type=int, default=5)
    p.add_argument("--sigma", type=float, default=0.2)
    p.add_argument("--dead-end", type=float, default=0.1)
    p.add_argument("--budget", type=int, default=None)
    run(p.parse_args())
