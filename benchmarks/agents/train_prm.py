"""Train the text PRM (MiniLMStepPRM) on the TextWorld MC labels (training seeds only).

    python -m benchmarks.agents.train_prm --labels .cache/textworld/labels/labels.jsonl \
        --out .cache/textworld/prm --epochs 4

The last ``--val-last`` labelled trajectories (training seeds, not benchmark seeds) are held out;
prints the per-epoch loss and, on train and validation steps, the mean predicted success of losing
steps, of other label-0 steps and of label > 0 steps, the correlation with the MC labels and the MAE.

``--outcome-only`` trains an outcome value model for the implicit PRM (``prm_critic.text.ImplicitPRM``;
``run.py --implicit``) on the same files and the same split: every step is labelled with its
trajectory's outcome, the last label (``prm_critic.text.outcome_examples``; the branch examples of
``--extra`` too), and each training game's prompt alone (one empty step) with the share of its
``--labels`` trajectories won (``prm_critic.text.prompt_value_examples``: the value ``V_0`` the
implicit PRM's first-step reward starts from). The statistics are measured against the MC labels,
as for the MC-trained PRM, so the two compare directly. ``labels`` in the statistics and in the
saved model's ``meta`` says which it is (``"mc"`` or ``"outcome-only"``).

    python -m benchmarks.agents.train_prm --labels .cache/textworld/labels/labels.jsonl \
        --extra .cache/textworld/labels/labels_siblings.jsonl --out .cache/textworld/prm_outcome --outcome-only

``--save-encoder packaged`` (the default with ``--freeze-encoder``) writes a head-only checkpoint
(``MiniLMStepPRM.save(..., encoder="packaged")``, well under 1 MB: the head and the tokenizer files,
the encoder taken from the installed package by fingerprint); ``embedded`` (the default otherwise,
and the only choice for a fine-tuned encoder) writes the whole network. ``train_stats.json`` records
the SHA-256 of the ``--labels`` and ``--extra`` files the PRM was trained on and the checkpoint's size.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from prm_critic.integrity import sha256_bytes
from prm_critic.text.implicit import outcome_examples, prompt_value_examples
from prm_critic.text.train import TextTrainConfig, train_text_prm
from prm_critic.text.trl_format import read_stepwise_jsonl



def _stats(model, examples) -> dict:
    ys, ps, lost = [], [], []
    for ex in examples:
        s = model.score_trajectory(ex.prompt, ex.completions).success
        ys += ex.labels
        ps += list(map(float, s))
        lost += ["You lost" in c for c in ex.completions]
    ys, ps, lost = np.asarray(ys), np.asarray(ps), np.asarray(lost)
    return {"n_steps": int(ys.size),
            "mean_pred_label0_not_lost": float(ps[(ys == 0) & ~lost].mean()) if ((ys == 0) & ~lost).any() else None,
            "mean_pred_label_pos": float(ps[ys > 0].mean()) if (ys > 0).any() else None,
            "mean_pred_losing_steps": float(ps[lost].mean()) if lost.any() else None,
            "max_pred_losing_steps": float(ps[lost].max()) if lost.any() else None,
            "corr_pred_label": float(np.corrcoef(ps, ys)[0, 1]) if ys.std() > 0 and ps.std() > 0 else None,
            "mae": float(np.abs(ps - ys).mean())}


def _last_stats(model, examples) -> dict:
    """Predicted success of the last (sibling) step of branch examples, by exact label."""
    p, y = [], []
    for ex in examples:
        p.append(float(model.score_trajectory(ex.prompt, ex.completions).success[-1]))
        y.append(ex.labels[-1])
    p, y = np.asarray(p), np.asarray(y)
    return {"n": int(p.size), "mean_pred_lost": float(p[y == 0].mean()) if (y == 0).any() else None,
            "mean_pred_won": float(p[y == 1].mean()) if (y == 1).any() else None}


def _outcomes(examples, path) -> list:
    """``outcome_examples(examples)``, or a SystemExit naming the file (its example index = line)."""
    try:
        return outcome_examples(examples)
    except ValueError as exc:
        raise SystemExit(f"--outcome-only: {path}: {exc}") from None


def _checkpoint_bytes(d: Path) -> tuple[int, int]:
    """``(files, bytes)`` of the checkpoint in folder ``d``: its ``prm.json`` and the files it hashes."""
    files = [d / "prm.json", *(d / n for n in json.loads((d / "prm.json").read_text())["files_sha256"])]
    return len(files), sum(f.stat().st_size for f in files)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--labels", action="append", default=None,
                    help="MC labels (labels.jsonl); repeat to train on several label sets (default "
                         ".cache/textworld/labels/labels.jsonl)")
    ap.add_argument("--out", default=".cache/textworld/prm")
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--freeze-encoder", action="store_true")
    ap.add_argument("--batch-size", type=int, default=2)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--encoder-lr", type=float, default=5e-5)
    ap.add_argument("--val-last", type=int, default=3, help="hold out the last N trajectories for validation")
    ap.add_argument("--extra", action="append", default=None,
                    help="extra examples (e.g. labels_siblings.jsonl); those of validation games are held out too; "
                         "repeatable")
    ap.add_argument("--outcome-only", action="store_true",
                    help="train an outcome value model (every step labelled with its trajectory's outcome, plus "
                         "each training prompt's share won) for the implicit PRM; see the module docstring")
    ap.add_argument("--save-encoder", choices=("packaged", "embedded"), default=None,
                    help="packaged: a head-only checkpoint whose encoder is the installed all-MiniLM-L6-v2 (default "
                         "with --freeze-encoder); embedded: the whole network (default otherwise)")
    a = ap.parse_args(argv)
    if a.save_encoder is None:
        a.save_encoder = "packaged" if a.freeze_encoder else "embedded"
    if a.save_encoder == "packaged" and not a.freeze_encoder:
        ap.error("--save-encoder packaged: expected --freeze-encoder (without it the encoder is fine-tuned and its "
                 "weights must be saved: --save-encoder embedded)")
    a.labels = a.labels or [".cache/textworld/labels/labels.jsonl"]
    a.extra = a.extra or []
    for f in a.labels + a.extra:
        if not Path(f).is_file():
            raise SystemExit(f"--labels/--extra: {f}: expected a stepwise JSONL file, found none")
    one = lambda fs: sha256_bytes(Path(fs[0]).read_bytes()) if len(fs) == 1 else [  # noqa: E731
        sha256_bytes(Path(f).read_bytes()) for f in fs]
    # one file: the hash itself (as every earlier PRM records it); several: one hash per file, in order
    labels_sha256 = {"labels": one(a.labels), "extra": one(a.extra) if a.extra else None}
    examples = [ex for f in a.labels for ex in read_stepwise_jsonl(f)]
    if not 0 <= a.val_last < len(examples):
        raise SystemExit(f"--val-last: expected an int in [0, {len(examples) - 1}], got {a.val_last}")
    extra = [ex for f in a.extra for ex in read_stepwise_jsonl(f)]
    labels = "outcome-only" if a.outcome_only else "mc"
    # the examples trained on: the files' own labels, or their outcomes (same order, so the same split)
    fit, fit_extra = ((_outcomes(examples, ", ".join(a.labels)), _outcomes(extra, ", ".join(a.extra)))
                      if a.outcome_only else (examples, extra))
    n_train = len(examples) - a.val_last
    train, val = examples[:n_train], examples[n_train:]
    val_prompts = {ex.prompt for ex in val}
    keep = [ex.prompt not in val_prompts for ex in extra]
    train = train + [ex for ex, k in zip(extra, keep) if k]
    val_extra = [ex for ex, k in zip(extra, keep) if not k]
    fit = fit[:n_train] + [ex for ex, k in zip(fit_extra, keep) if k]
    n_prompt = 0
    if a.outcome_only:  # V_0: each training game's prompt alone, with the share of its base trajectories won
        prompts = prompt_value_examples(examples[:n_train])
        fit, n_prompt = fit + prompts, len(prompts)
    cfg = TextTrainConfig(epochs=a.epochs, batch_size=a.batch_size, freeze_encoder=a.freeze_encoder, lr=a.lr,
                          encoder_lr=a.encoder_lr)
    model = train_text_prm(fit, config=cfg)
    model.meta = {**model.meta, "labels": labels}
    out = model.save(a.out, encoder=a.save_encoder)
    n_files, n_bytes = _checkpoint_bytes(out)
    print(f"saved {out} (encoder {a.save_encoder}): {n_files} files, {n_bytes / 1e6:.3f} MB")
    stats = {"labels": labels, "n_train": len(train), "n_prompt_examples": n_prompt, "n_val": len(val),
             "config": vars(a), "labels_sha256": labels_sha256,
             "checkpoint": {"encoder": a.save_encoder, "files": n_files, "bytes": n_bytes},
             "loss_per_epoch": model.meta.get("training", {}).get("epoch_loss"),
             "train": _stats(model, train), "val": _stats(model, val) if val else None,
             "val_sibling_last_steps": _last_stats(model, val_extra) if val_extra else None}
    (Path(a.out) / "train_stats.json").write_text(json.dumps(stats, indent=1))
    print(json.dumps(stats, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
