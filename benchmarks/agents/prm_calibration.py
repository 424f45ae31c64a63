"""Calibration of a trained TextWorld PRM on games it never saw: does its success score mean what it says?

The PRM (``MiniLMStepPRM``, trained by ``train_prm.py``) scores every step of MC-labelled
trajectories of *calibration* games (seeds not used for its labels or training, and not the
benchmark's games), with the same rendering as at training time. Against the MC soft labels
``y`` (fraction of ``k`` base-policy rollouts that win from the step's state) it reports:

* Brier score ``mean (p - y)^2`` and expected calibration error over 10 equal-width bins of ``p``
  (``ECE = sum_b n_b / N * |mean p_b - mean y_b|``), with the per-bin means (the reliability curve);
* AUROC of ``p`` for steps from which some rollout won (``y > 0``) vs none (``y = 0``);
* dead-end AUROC: steps that do not end the game lost (trajectory steps) vs steps that lose it
  (trajectory steps that lost and, with ``--extra``, the lost terminal siblings): the probability
  that a surviving step outscores a losing one, which is what the beam's dead-end threshold relies on;
* the mean score of losing steps and the share of them under each dead-end threshold of ``--cuts``
  (and of surviving steps: what a cut would prune wrongly).

AUROC is the Mann-Whitney probability (ties count one half). One JSON per PRM goes to ``--out``;
``report.py --render`` draws the table and the reliability plot from those files.

    python -m agents.textworld_agent.labels --out .cache/textworld/labels_cal --seeds 500-515 --k 4 --max-steps 40 --siblings 3
    python benchmarks/agents/prm_calibration.py --prm .cache/textworld/prm_sib96 --tag sib96 \\
        --labels .cache/textworld/labels_cal/labels.jsonl --extra .cache/textworld/labels_cal/labels_siblings.jsonl \\
        --seeds 500-515 --out benchmarks/agents/prm_calibration_sib96.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

BINS = 10
CUTS = (0.02, 0.05, 0.1)


def auroc(pos: np.ndarray, neg: np.ndarray) -> float | None:
    """P(a positive outscores a negative), ties one half; ``None`` when either side is empty."""
    from prm_critic.models.evaluate import auroc as auroc_of

    pos, neg = np.asarray(pos, np.float64).reshape(-1), np.asarray(neg, np.float64).reshape(-1)
    if not pos.size or not neg.size:
        return None
    return auroc_of(np.concatenate([pos, neg]), np.r_[np.ones(pos.size, bool), np.zeros(neg.size, bool)])


def calibration(p: np.ndarray, y: np.ndarray, bins: int = BINS) -> dict:
    """Brier score, ECE and the reliability curve of predictions ``p`` against soft labels ``y``."""
    p, y = np.asarray(p, np.float64), np.asarray(y, np.float64)
    if p.shape != y.shape or p.ndim != 1 or not p.size:
        raise ValueError(f"calibration: expected two equal non-empty 1-D arrays, got shapes {p.shape} and {y.shape}")
    idx = np.minimum((p * bins).astype(int), bins - 1)
    curve = []
    ece = 0.0
    for b in range(bins):
        m = idx == b
        if m.any():
            curve.append({"bin": [b / bins, (b + 1) / bins], "n": int(m.sum()), "mean_pred": float(p[m].mean()),
                          "mean_label": float(y[m].mean())})
            ece += m.sum() / p.size * abs(p[m].mean() - y[m].mean())
    return {"brier": float(np.mean((p - y) ** 2)), "ece": float(ece), "curve": curve}


def evaluate(model, examples, extra=(), progress: bool = False) -> dict:
    """The measurements above for ``model`` on stepwise ``examples`` (+ terminal-sibling branches)."""
    from tqdm import tqdm

    bar = tqdm(total=len(examples) + len(extra), desc="PRM calibration", unit="trajectory", disable=not progress)
    ps, ys, lost = [], [], []
    for ex in examples:
        s = model.score_trajectory(ex.prompt, ex.completions).success
        ps += list(map(float, s))
        ys += list(map(float, ex.labels))
        lost += ["You lost" in c for c in ex.completions]
        bar.update(1)
    p, y, lost_a = np.asarray(ps), np.asarray(ys), np.asarray(lost)
    sib_p, sib_y = [], []
    for ex in extra:
        sib_p.append(float(model.score_trajectory(ex.prompt, ex.completions).success[-1]))
        sib_y.append(float(ex.labels[-1]))
        bar.update(1)
    bar.close()
    sp, sy = np.asarray(sib_p), np.asarray(sib_y)
    losing = np.concatenate([p[lost_a], sp[sy == 0]]) if sp.size else p[lost_a]
    surviving = p[~lost_a]
    out = {"n_trajectories": len(examples), "n_steps": int(p.size), "n_label_pos": int((y > 0).sum()),
           "n_losing_steps": int(lost_a.sum()), "n_siblings": int(sp.size), "n_siblings_lost": int((sy == 0).sum()),
           "mean_label": float(y.mean()), "mean_pred": float(p.mean()),
           **calibration(p, y),
           "auroc_label_pos": auroc(p[y > 0], p[y == 0]),
           "auroc_dead_end": auroc(surviving, losing),
           "mean_pred_losing": float(losing.mean()) if losing.size else None,
           "mean_pred_surviving": float(surviving.mean()),
           "cuts": {f"{c:g}": {"losing_under": float((losing < c).mean()) if losing.size else None,
                               "surviving_under": float((surviving < c).mean())} for c in CUTS}}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prm", required=True, help="trained MiniLMStepPRM folder")
    ap.add_argument("--tag", required=True, help="the PRM's name in the report, e.g. 'sib96'")
    ap.add_argument("--labels", required=True, help="labels.jsonl of the calibration games")
    ap.add_argument("--extra", default=None, help="labels_siblings.jsonl of the same games")
    ap.add_argument("--seeds", required=True, help="the calibration games' seeds (recorded, e.g. '500-515')")
    ap.add_argument("--train-seeds", default=None, help="the PRM's training seeds (recorded, e.g. '0-95')")
    ap.add_argument("--out", required=True, type=Path)
    a = ap.parse_args(argv)
    from agents.textworld_agent.labels import parse_seeds
    from prm_critic._io import atomic_write_bytes
    from prm_critic.text.prm import MiniLMStepPRM
    from prm_critic.text.trl_format import read_stepwise_jsonl

    cal = parse_seeds(a.seeds)
    if a.train_seeds is not None and set(cal) & set(parse_seeds(a.train_seeds)):
        raise SystemExit(f"--seeds: the calibration games {a.seeds} overlap the training seeds {a.train_seeds}")
    examples = read_stepwise_jsonl(a.labels)
    if len(examples) != len(cal):
        raise SystemExit(f"--labels: {a.labels} holds {len(examples)} trajectories, expected one per seed of "
                         f"--seeds {a.seeds} ({len(cal)})")
    extra = read_stepwise_jsonl(a.extra) if a.extra else []
    prompts = {ex.prompt for ex in examples}
    strangers = [i for i, ex in enumerate(extra) if ex.prompt not in prompts]
    if strangers:
        raise SystemExit(f"--extra: {len(strangers)} of {len(extra)} sibling examples in {a.extra} (first at line "
                         f"{strangers[0] + 1}) are not from the games of --labels {a.labels}")
    res = evaluate(MiniLMStepPRM.load(a.prm), examples, extra, progress=True)
    res.update(tag=a.tag, prm=str(a.prm), seeds=a.seeds, train_seeds=a.train_seeds, command=" ".join(sys.argv))
    atomic_write_bytes(a.out, (json.dumps(res, indent=1) + "\n").encode())
    print(json.dumps({k: v for k, v in res.items() if k != "curve"}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
