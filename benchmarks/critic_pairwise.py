"""Trained state critic on real PointMaze data: pairwise ranking loss on vs off, per label family,
side by side (held-out episodes, several split/init seeds).

Collects ``--episodes`` episodes of PointMaze_UMaze-v3 with the spec's scripted (noisy) controller,
labels them (``subgoal``, ``outcome``, and ``mc`` with ``--mc-k`` rollouts every ``--mc-stride``
steps), then for each family, pairwise weight and seed trains a critic with
``prm_critic.models.pipeline.train_critic_from_data`` (the ``train-critic`` CLI's code path)
and reports held-out metrics as mean ± std over seeds. Data collection and labelling are resumable
(re-run with the same ``--work`` folder).

    python benchmarks/critic_pairwise.py --episodes 80 --epochs 20 --seeds 3 --work runs/critic_pairwise \
        --md docs/results/state_critic_pairwise.md
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from prm_critic.models.pipeline import train_critic_from_data
from prm_critic.models.train import TrainConfig
from prm_critic.robotics.collect import collect
from prm_critic.robotics.labels import label

COLS = [("auroc_success", "AUROC"), ("auroc_success_early", "AUROC first 25%"),
        ("label_spearman_progress_time", "label Spearman(progress, t)"),
        ("spearman_progress_time", "Spearman(progress, t)"), ("spearman_success_time", "Spearman(success, t)"),
        ("brier_success", "Brier"), ("progress_mae", "progress MAE")]


def _fmt(vals):
    v = np.asarray([np.nan if x is None else x for x in vals], dtype=float)
    if np.all(np.isnan(v)):
        return "n/a"
    return f"{np.nanmean(v):.3f} ± {np.nanstd(v):.3f}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--task", default="PointMaze_UMaze-v3")
    ap.add_argument("--episodes", type=int, default=80)
    ap.add_argument("--max-episode-steps", type=int, default=100)
    ap.add_argument("--families", default="subgoal,outcome,mc")
    ap.add_argument("--mc-k", type=int, default=4)
    ap.add_argument("--mc-stride", type=int, default=4)
    ap.add_argument("--weights", default="0,0.5")
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--holdout", type=float, default=0.25)
    ap.add_argument("--work", default="runs/critic_pairwise")
    ap.add_argument("--md", default=None, help="also write the table as markdown here")
    args = ap.parse_args(argv)

    work = Path(args.work)
    data = work / "data"
    t0 = time.time()
    collect(args.task, data, episodes=args.episodes, max_episode_steps=args.max_episode_steps, seed=0)
    families = [f for f in args.families.split(",") if f]
    for fam in families:
        kw = dict(k=args.mc_k, stride=args.mc_stride) if fam == "mc" else {}
        label(data, fam, **kw)
    print(f"data ready in {time.time() - t0:.0f} s", file=sys.stderr)

    weights = [float(w) for w in args.weights.split(",")]
    rows = []
    for fam in families:
        for w in weights:
            res = []
            for seed in range(args.seeds):
                cfg = TrainConfig(epochs=args.epochs, pairwise_weight=w, seed=seed)
                r = train_critic_from_data(data, fam, work / "critics" / f"{fam}_w{w}_s{seed}", config=cfg,
                                           holdout=args.holdout, seed=seed, progress_bar=False)
                res.append(r["metrics"])
            rows.append((fam, w, res))
            print(f"{fam} w={w}: " + ", ".join(f"{name} {_fmt([m[k] for m in res])}" for k, name in COLS),
                  file=sys.stderr)

    m0 = rows[0][2][0]
    lines = [
        f"Task {args.task}, {args.episodes} scripted episodes (<= {args.max_episode_steps} steps), "
        f"held-out {args.holdout:.0%} of episodes (~{m0['n_episodes']} episodes, {m0['n_steps']} steps for seed 0), "
        f"{args.epochs} epochs, MLP 256-256, mean ± std over {args.seeds} seeds (split + init). "
        f"mc labels: k={args.mc_k}, stride={args.mc_stride}.",
        "",
        "| label family | pairwise weight | " + " | ".join(name for _, name in COLS) + " |",
        "|---|---|" + "---|" * len(COLS),
    ]
    for fam, w, res in rows:
        lines.append(f"| {fam} | {w:g} | " + " | ".join(_fmt([m[k] for m in res]) for k, _ in COLS) + " |")
    table = "\n".join(lines)
    print(table)
    if args.md:
        cmd = "python benchmarks/critic_pairwise.py " + " ".join(argv if argv is not None else sys.argv[1:])
        Path(args.md).parent.mkdir(parents=True, exist_ok=True)
        Path(args.md).write_text(f"# State critic: pairwise ranking loss on vs off\n\nReproduce:\n\n```\n{cmd}\n```\n\n"
                                 f"{table}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
