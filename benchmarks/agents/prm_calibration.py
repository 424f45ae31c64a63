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
  (and of surviving steps: what a cut would prune wrongly);
* the field's step metrics (:mod:`prm_critic.models.step_metrics`) on the trajectories: a
  trajectory's *first error* is the step that loses the game (``-1`` when it is won or runs out of
  steps: in these games every irreversible mistake ends the game), predicted as the first step
  scored under the threshold; first-error accuracy and ProcessBench F1 at each cut of ``--cuts`` and
  at the F1-best threshold chosen on ``--tune-labels`` (other games, e.g. the PRM's training games)
  when given; and the value-order correlation of the success score with the MC labels inside each
  trajectory (progress: does the score rise and fall with the step's chance to win).

AUROC is the Mann-Whitney probability (ties count one half). One JSON per PRM goes to ``--out``;
``report.py --render`` draws the table and the reliability plot from those files.

    python -m agents.textworld_agent.labels --out .cache/textworld/labels_cal --seeds 500-515 --k 4 --max-steps 40 --siblings 3
    python -m benchmarks.agents.prm_calibration --prm .cache/textworld/prm_sib96 --tag sib96 \\
        --labels .cache/textworld/labels_cal/labels.jsonl --extra .cache/textworld/labels_cal/labels_siblings.jsonl \\
        --seeds 500-515 --out benchmarks/agents/prm_calibration_sib96.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from benchmarks.report_io import write_json
from benchmarks.stats import auroc

BINS = 10
CUTS = (0.02, 0.05, 0.1)


def auroc_or_none(pos: np.ndarray, neg: np.ndarray) -> float | None:
    """:func:`benchmarks.stats.auroc`, ``None`` (JSON ``null``) when either side is empty."""
    return auroc(pos, neg) if np.size(pos) and np.size(neg) else None


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


class CriticScorer:
    """Any step critic (e.g. the uninformed controls ``prm_critic.RandomCritic`` / ``ConstantCritic``)
    scored trajectory-wise like a text PRM: step ``t`` is ``TextStep(prompt, steps[:t], steps[t])``."""

    def __init__(self, critic):
        from prm_critic.critic import BaseCritic

        if not isinstance(critic, BaseCritic):
            raise TypeError(f"critic: expected a prm_critic BaseCritic, got {type(critic).__name__}")
        self.critic = critic

    def score_trajectory(self, prompt: str, steps):
        from prm_critic.text.steps import TextStep

        return self.critic.score([TextStep(prompt, tuple(steps[:t]), s) for t, s in enumerate(steps)])


def first_errors(examples) -> list[int]:
    """Per trajectory, the index of the step that loses the game (``-1``: none does)."""
    out = []
    for ex in examples:
        lost = [i for i, c in enumerate(ex.completions) if "You lost" in c]
        out.append(lost[0] if lost else -1)
    return out


def step_metric_block(model, examples, cuts=CUTS, tune=None, scores=None) -> dict:
    """First-error accuracy and ProcessBench F1 of ``model``'s success scores at each cut (and at the
    F1-best threshold on the ``tune`` trajectories), and the value-order correlation with the MC labels.
    ``scores``: the success scores of ``examples`` when already computed (one array per trajectory)."""
    from prm_critic.models.step_metrics import best_threshold, process_error_metrics, value_order_correlation

    if scores is None:
        scores = [np.asarray(model.score_trajectory(ex.prompt, ex.completions).success, np.float64) for ex in examples]
    errs = first_errors(examples)
    out = {"at_cut": {f"{c:g}": process_error_metrics(scores, errs, c) for c in cuts},
           "value_order_mc": value_order_correlation(scores, [np.asarray(ex.labels, np.float64) for ex in examples])}
    if tune:
        t_scores = [np.asarray(model.score_trajectory(ex.prompt, ex.completions).success, np.float64) for ex in tune]
        tau = best_threshold(t_scores, first_errors(tune))
        out["tuned"] = process_error_metrics(scores, errs, tau)
        out["tuned"]["tuned_on"] = len(tune)
    return out


def evaluate(model, examples, extra=(), progress: bool = False, tune=None) -> dict:
    """The measurements above for ``model`` on stepwise ``examples`` (+ terminal-sibling branches;
    ``tune``: trajectories of other games on which the step metrics' threshold is chosen)."""
    from tqdm import tqdm

    bar = tqdm(total=len(examples) + len(extra), desc="PRM calibration", unit="trajectory", disable=not progress)
    ps, ys, lost, per_traj = [], [], [], []
    for ex in examples:
        s = np.asarray(model.score_trajectory(ex.prompt, ex.completions).success, np.float64)
        per_traj.append(s)
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
           "auroc_label_pos": auroc_or_none(p[y > 0], p[y == 0]),
           "auroc_dead_end": auroc_or_none(surviving, losing),
           "mean_pred_losing": float(losing.mean()) if losing.size else None,
           "mean_pred_surviving": float(surviving.mean()),
           "cuts": {f"{c:g}": {"losing_under": float((losing < c).mean()) if losing.size else None,
                               "surviving_under": float((surviving < c).mean())} for c in CUTS},
           "step_metrics": step_metric_block(model, examples, CUTS, tune, scores=per_traj)}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prm", default=None, help="trained MiniLMStepPRM folder (with --critic prm)")
    ap.add_argument("--implicit", action="store_true",
                    help="--critic prm: the --prm outcome value model as the implicit PRM (train_prm.py --outcome-only)")
    ap.add_argument("--critic", default="prm", choices=("prm", "random", "constant"),
                    help="the learned PRM (--prm), or an uninformed control critic (seed 0) for comparison")
    ap.add_argument("--tag", required=True, help="the PRM's name in the report, e.g. 'sib96'")
    ap.add_argument("--labels", required=True, help="labels.jsonl of the calibration games")
    ap.add_argument("--extra", default=None, help="labels_siblings.jsonl of the same games")
    ap.add_argument("--seeds", required=True, help="the calibration games' seeds (recorded, e.g. '500-515')")
    ap.add_argument("--train-seeds", default=None, help="the PRM's training seeds (recorded, e.g. '0-95')")
    ap.add_argument("--tune-labels", default=None,
                    help="labels.jsonl of other games (e.g. the PRM's training games) on which the step metrics' "
                         "F1-best threshold is chosen")
    ap.add_argument("--out", required=True, type=Path)
    a = ap.parse_args(argv)
    from agents.textworld_agent.labels import parse_seeds
    from prm_critic.text.prm import MiniLMStepPRM
    from prm_critic.text.trl_format import read_stepwise_jsonl

    if (a.critic == "prm") != (a.prm is not None):
        raise SystemExit(f"--prm: required with --critic prm and only with it (got --critic {a.critic}, --prm {a.prm!r})")
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
    tune = read_stepwise_jsonl(a.tune_labels) if a.tune_labels else None
    if tune and {ex.prompt for ex in tune} & prompts:
        raise SystemExit(f"--tune-labels: {a.tune_labels} shares games with --labels {a.labels}; tune on other games")
    if a.implicit and a.critic != "prm":
        raise SystemExit(f"--implicit wraps the learned model (--critic prm), got --critic {a.critic}")
    if a.critic == "prm":
        if a.implicit:
            from benchmarks.agents.run import implicit_critic

            model = implicit_critic(a.prm)
        else:
            model = MiniLMStepPRM.load(a.prm)
    else:
        from prm_critic.critic import ConstantCritic, RandomCritic

        model = CriticScorer(RandomCritic(seed=0) if a.critic == "random" else ConstantCritic(0.5, seed=0))
    res = evaluate(model, examples, extra, progress=True, tune=tune)
    res.update(tag=a.tag, critic=a.critic, implicit=bool(a.implicit), prm=None if a.prm is None else str(a.prm), seeds=a.seeds, train_seeds=a.train_seeds, command=" ".join(sys.argv))
    write_json(a.out, res)
    print(json.dumps({k: v for k, v in res.items() if k != "curve"}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
