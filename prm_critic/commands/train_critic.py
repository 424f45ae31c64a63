"""``prm-critic train-critic``: train a state critic on collected, labelled steps.

Loads ``--data`` with one label family, splits by episode, trains (resumable: a killed run
restarts from its last finished epoch), evaluates on the held-out episodes and writes

* ``OUT.safetensors`` + ``OUT.json``: the checkpoint, with full metadata (task, spec, layout,
  label family, maze geometry, train config, metrics) so it can be rebuilt against an env and
  exported to ONNX;
* ``OUT.metrics.json``: held-out metrics and the training history;
* ``OUT.scores.png``: progress and success along a few held-out episodes.
"""

from __future__ import annotations

import argparse
import json
import math


#: Options whose default is the library's: ``TrainConfig()`` fields, and ``holdout`` of
#: :func:`train_critic_from_data`. Left unset on the command line, the library value applies.
LIBRARY_DEFAULTS = ("epochs", "pairwise_weight", "pairwise_margin", "holdout", "seed", "hidden", "activation", "lr",
                    "batch_size", "weight_decay", "val_fraction", "patience", "device")


def library_defaults() -> dict:
    """The library's value for every option in :data:`LIBRARY_DEFAULTS` (imports torch)."""
    import inspect

    from prm_critic.models.train import TrainConfig

    cfg = TrainConfig()
    d = {name: getattr(cfg, name) for name in LIBRARY_DEFAULTS if name != "holdout"}
    d["hidden"] = ",".join(str(h) for h in cfg.hidden)
    d["holdout"] = inspect.signature(train_critic_from_data).parameters["holdout"].default
    return d


class _LibraryDefaultsFormatter(argparse.HelpFormatter):
    """Shows the library's default in ``--help`` (resolved only when help is printed)."""

    def _expand_help(self, action):
        text = super()._expand_help(action)
        if action.dest in LIBRARY_DEFAULTS:
            text = f"{text} (default {library_defaults()[action.dest]})"
        return text


def register(sub) -> None:
    p = sub.add_parser(
        "train-critic",
        help="train a state critic (MLP) on collected + labelled steps, evaluate on held-out episodes",
        description="Train a state critic on the steps in --data with the --label family's success labels and "
        "the spec's subgoal progress, evaluate it on held-out episodes, and save a safetensors + JSON checkpoint, "
        "OUT.metrics.json and OUT.scores.png. Unset options take the library's defaults (TrainConfig).",
        formatter_class=_LibraryDefaultsFormatter,
    )
    p.add_argument("--data", required=True, help="data folder written by `prm-critic collect` (and `label`)")
    p.add_argument("--label", required=True, choices=["subgoal", "mc", "outcome"], help="success label family")
    p.add_argument("--out", required=True, help="checkpoint path (stem, or .safetensors / .json)")
    p.add_argument("--epochs", type=int, help="training epochs")
    p.add_argument("--pairwise-weight", type=float,
                   help="weight of the pairwise ranking loss on successful episodes; 0 disables (the default keeps "
                   "most of the rank-correlation gain for little label error, see docs/results/state_critic_pairwise.md)")
    p.add_argument("--pairwise-margin", type=float, help="logit margin of the ranking loss")
    p.add_argument("--holdout", type=float, help="fraction of episodes held out for evaluation")
    p.add_argument("--seed", type=int, help="seed of the split, init and batches")
    p.add_argument("--hidden", type=str, help="hidden sizes, comma-separated")
    p.add_argument("--activation", help="relu, tanh, silu or elu")
    p.add_argument("--lr", type=float, help="learning rate")
    p.add_argument("--batch-size", type=int, help="batch size")
    p.add_argument("--weight-decay", type=float, help="AdamW weight decay")
    p.add_argument("--val-fraction", type=float, help="fraction of training episodes used for early stopping (0: none)")
    p.add_argument("--patience", type=int, help="early-stopping patience in epochs (needs --val-fraction)")
    p.add_argument("--device", help="torch device")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.set_defaults(func=run)


def _hidden(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(v) for v in text.split(","))
    except ValueError:
        raise ValueError(f"--hidden: expected comma-separated positive integers like 256,256, got {text!r}") from None
    if not sizes or any(s <= 0 for s in sizes):
        raise ValueError(f"--hidden: expected comma-separated positive integers like 256,256, got {text!r}")
    return sizes


def _json_safe(v):
    """NaN / inf -> None (strict JSON), recursively."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: _json_safe(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_json_safe(x) for x in v]
    return v


def train_critic_from_data(data, label: str, out, *, config, holdout: float = 0.2, seed: int = 0,
                           progress_bar: bool = True) -> dict:
    """Library form of the command; returns ``{"checkpoint", "metrics_path", "plot_path", "metrics", "meta"}``."""
    from pathlib import Path

    import numpy as np

    from prm_critic.models.checkpoint import atomic_write_bytes, checkpoint_paths, save_state_critic
    from prm_critic.models.evaluate import _mean_episode_spearman, evaluate_state_critic, plot_episode_scores
    from prm_critic.models.state_critic import TorchStateCritic
    from prm_critic.models.train import train_state_critic
    from prm_critic.robotics.dataset import load_steps, split_episodes

    table = load_steps(data, label)
    if not np.all(np.isfinite(table.progress)):
        raise ValueError(f"data: spec {table.spec.name!r} has no subgoals, so there is no progress label to train on; "
                         "add [[subgoals]] to the spec")
    if not table.mask.any():
        raise ValueError(f"label: the {label!r} labels of {str(data)!r} mark no step as labelled (mask all False)")
    train, test = split_episodes(table, holdout=holdout, seed=seed)
    w_path, j_path = checkpoint_paths(out)
    stem = w_path.with_suffix("")
    net, history = train_state_critic(
        train.x, train.progress, train.success, episode=train.episode, t=train.t, ep_success=train.ep_success,
        mask=train.mask, config=config, progress_bar=progress_bar, state_path=stem,
    )
    critic = TorchStateCritic(net)
    metrics = evaluate_state_critic(critic, test.x, episode=test.episode, t=test.t, ep_success=test.ep_success)
    # agreement with the held-out labels themselves
    sc = critic.score(test.x)
    metrics["progress_mae"] = float(np.mean(np.abs(sc.progress - test.progress)))
    metrics["success_label_mae"] = float(np.mean(np.abs(sc.success - test.success)[test.mask])) if test.mask.any() else float("nan")
    # reference: how monotone the progress *label* itself is along held-out successful episodes
    metrics["label_spearman_progress_time"] = _mean_episode_spearman(test.progress, test.episode, test.t, test.ep_success)[0]
    metrics["n_train_steps"] = int(len(train))
    metrics["n_train_episodes"] = int(len(train.episodes))
    metrics = _json_safe(metrics)
    meta = {
        "task": table.spec.name,
        "spec": table.spec.to_dict(),
        "layout": table.layout.to_dict(),
        "label_family": label,
        "maze": table.meta.get("maze"),
        "train_config": config.to_dict(),
        "metrics": metrics,
        "data": {"path": Path(data).name, "policy": table.meta.get("policy"), "seed": table.meta.get("seed"),
                 "holdout": holdout, "split_seed": seed, "test_episodes": [int(e) for e in test.episodes]},
    }
    save_state_critic(stem, net, meta)
    metrics_path = stem.with_name(stem.name + ".metrics.json")
    doc = {"metrics": metrics, "history": _json_safe(history), "label_family": label, "task": table.spec.name,
           "train_config": config.to_dict()}
    atomic_write_bytes(metrics_path, json.dumps(doc, indent=2, sort_keys=True).encode())
    plot_path = stem.with_name(stem.name + ".scores.png")
    plot_episode_scores(critic, test.x, test.episode, test.t, test.ep_success, plot_path, n=6,
                        progress_label=test.progress, seed=seed,
                        title=f"{table.spec.name}: held-out episodes ({label} labels)")
    return {"checkpoint": w_path, "metrics_path": metrics_path, "plot_path": plot_path, "metrics": metrics, "meta": meta}


def run(args) -> int:
    from prm_critic.models.train import TrainConfig

    given = {name: getattr(args, name) for name in LIBRARY_DEFAULTS if getattr(args, name) is not None}
    if "hidden" in given:
        given["hidden"] = _hidden(given["hidden"])
    holdout = given.pop("holdout", None)
    config = TrainConfig(**given)
    seed = config.seed
    extra = {} if holdout is None else {"holdout": holdout}
    res = train_critic_from_data(args.data, args.label, args.out, config=config, seed=seed,
                                 progress_bar=not args.no_progress, **extra)
    m = res["metrics"]

    def f(v):
        return "n/a" if v is None else f"{v:.3f}"

    print(f"held-out ({m['n_episodes']} episodes, {m['n_success_episodes']} successful, {m['n_steps']} steps): "
          f"AUROC success {f(m['auroc_success'])} (first 25%: {f(m['auroc_success_early'])}), "
          f"Spearman(progress, t) {f(m['spearman_progress_time'])}, Brier {f(m['brier_success'])}, "
          f"progress MAE {f(m['progress_mae'])}")
    print(f"wrote {res['checkpoint']} (+ .json), {res['metrics_path']}, {res['plot_path']}")
    return 0
