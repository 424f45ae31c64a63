"""Which step-label family trains the best success critic? (issue: robotics PRM pipeline)

For each task: collect episodes with the spec's noisy scripted controller, label every step with
the three families (subgoal progress from the spec, Monte-Carlo rollouts from exact MuJoCo
snapshots, discounted outcome), train one state critic per family on the SAME training episodes,
and report the success AUROC on the SAME held-out episodes (per-step success score vs the
episode's final success; "early" = first 25% of each episode), next to the untrained spec critic.

Resumable: collection, labelling and training all skip what is already on disk.

    python benchmarks/critic_label_families.py --out prm_runs/families
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from prm_critic.commands.train_critic import train_critic_from_data
from prm_critic.models.evaluate import evaluate_state_critic
from prm_critic.models.train import TrainConfig
from prm_critic.robotics.collect import collect
from prm_critic.robotics.dataset import load_steps, split_episodes
from prm_critic.robotics.labels import label
from prm_critic.robotics.make import CriticInputLayout
from prm_critic.robotics.subgoals import MazeGeometry, SubgoalCritic

FAMILIES = ("subgoal", "mc", "outcome")


def spec_critic_metrics(data: Path, holdout: float, seed: int) -> dict:
    table = load_steps(data, "subgoal")
    _, test = split_episodes(table, holdout=holdout, seed=seed)
    maze = MazeGeometry.from_dict(table.meta["maze"]) if table.meta.get("maze") else None
    critic = SubgoalCritic(table.spec, layout=CriticInputLayout.from_dict(table.layout.to_dict()), maze=maze)
    return evaluate_state_critic(critic, test.x, episode=test.episode, t=test.t, ep_success=test.ep_success)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tasks", nargs="+", default=["PointMaze_UMaze-v3", "FetchPush-v4"])
    ap.add_argument("--out", default="prm_runs/families")
    ap.add_argument("--episodes", type=int, default=200)
    ap.add_argument("--max-episode-steps", type=int, default=None,
                    help="TimeLimit override (default: PointMaze 150, others the registered value)")
    ap.add_argument("--k", type=int, default=8, help="MC continuations per labelled state")
    ap.add_argument("--stride", type=int, default=2, help="MC-label every stride-th step")
    ap.add_argument("--epochs", type=int, default=40)
    ap.add_argument("--holdout", type=float, default=0.25)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--table", default=None, help="also write the markdown table to this file")
    args = ap.parse_args()

    rows = []
    for task in args.tasks:
        data = Path(args.out) / task / "data"
        mes = args.max_episode_steps or (150 if task.startswith("PointMaze") else None)
        t0 = time.perf_counter()
        collect(task, data, episodes=args.episodes, policy="scripted", seed=args.seed, max_episode_steps=mes)
        t_collect = time.perf_counter() - t0
        times = {}
        for fam in FAMILIES:
            t0 = time.perf_counter()
            kw = {"k": args.k, "stride": args.stride, "seed": args.seed} if fam == "mc" else {}
            label(data, fam, **kw)
            times[fam] = time.perf_counter() - t0
        table = load_steps(data, "mc")
        ep_rate = float(np.mean([table.ep_success[table.episode == e][0] for e in np.unique(table.episode)]))
        spec_m = spec_critic_metrics(data, args.holdout, args.seed)
        rows.append({"task": task, "family": "spec (untrained)", "auroc": spec_m["auroc_success"],
                     "auroc_early": spec_m["auroc_success_early"], "spearman": spec_m["spearman_progress_time"],
                     "episodes": args.episodes, "success_rate": ep_rate, "label_s": 0.0})
        for fam in FAMILIES:
            ckpt = Path(args.out) / task / f"critic_{fam}"
            mpath = ckpt.with_name(ckpt.name + ".metrics.json")
            if mpath.exists() and ckpt.with_suffix(".json").exists():
                m = json.loads(mpath.read_text())["metrics"]
            else:
                cfg = TrainConfig(epochs=args.epochs, seed=args.seed)
                m = train_critic_from_data(data, fam, ckpt, config=cfg, holdout=args.holdout, seed=args.seed)["metrics"]
            rows.append({"task": task, "family": fam, "auroc": m["auroc_success"], "auroc_early": m["auroc_success_early"],
                         "spearman": m["spearman_progress_time"], "episodes": args.episodes, "success_rate": ep_rate,
                         "label_s": times[fam]})
        print(f"{task}: collect {t_collect:.1f}s, labels " + ", ".join(f"{k} {v:.1f}s" for k, v in times.items()))

    def f(v):
        return "n/a" if v is None else f"{v:.3f}"

    lines = [
        "| task | label family | success AUROC (all steps) | success AUROC (first 25%) | Spearman(progress, t) | episodes (success rate) |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r['task']} | {r['family']} | {f(r['auroc'])} | {f(r['auroc_early'])} | {f(r['spearman'])} | "
                     f"{r['episodes']} ({r['success_rate']:.2f}) |")
    text = "\n".join(lines)
    print(text)
    if args.table:
        Path(args.table).write_text(text + "\n")


if __name__ == "__main__":
    main()
