"""Train the text PRM (MiniLMStepPRM) on the TextWorld MC labels (training seeds only).

    python benchmarks/agents/train_prm.py --labels .cache/textworld/labels/labels.jsonl \
        --out .cache/textworld/prm --epochs 4

Prints the per-epoch loss and, on the training trajectories, the mean predicted success of steps
whose MC label is 0 vs > 0 and of losing steps (a sanity check, not a held-out metric).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from prm_critic.text.train import TextTrainConfig, train_text_prm  # noqa: E402
from prm_critic.text.trl_format import read_stepwise_jsonl  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--labels", default=".cache/textworld/labels/labels.jsonl")
    ap.add_argument("--out", default=".cache/textworld/prm")
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--freeze-encoder", action="store_true")
    a = ap.parse_args(argv)
    examples = read_stepwise_jsonl(a.labels)
    cfg = TextTrainConfig(epochs=a.epochs, batch_size=4, freeze_encoder=a.freeze_encoder, lr=1e-3, encoder_lr=5e-5)
    model = train_text_prm(examples, config=cfg)
    model.save(a.out)
    ys, ps, lost = [], [], []
    for ex in examples:
        s = model.score_trajectory(ex.prompt, ex.completions).success
        ys += ex.labels
        ps += list(map(float, s))
        lost += ["You lost" in c for c in ex.completions]
    ys, ps, lost = np.asarray(ys), np.asarray(ps), np.asarray(lost)
    stats = {"n_examples": len(examples), "n_steps": int(ys.size), "loss_per_epoch": model.meta.get("training", {}).get("epoch_loss"),
             "mean_pred_label0": float(ps[ys == 0].mean()) if (ys == 0).any() else None,
             "mean_pred_label_pos": float(ps[ys > 0].mean()) if (ys > 0).any() else None,
             "mean_pred_losing_steps": float(ps[lost].mean()) if lost.any() else None,
             "corr_pred_label": float(np.corrcoef(ps, ys)[0, 1]) if ys.std() > 0 else None}
    (Path(a.out) / "train_stats.json").write_text(json.dumps(stats, indent=1))
    print(json.dumps(stats, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
