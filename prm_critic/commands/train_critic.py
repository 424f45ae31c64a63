"""``prm-critic train-critic``: train a state critic on collected, labelled steps.

Loads ``--data`` with one label family, splits by episode, trains (resumable: a killed run
restarts from its last finished epoch), evaluates on the held-out episodes and writes

* ``OUT.safetensors`` + ``OUT.json``: the checkpoint, with full metadata (task, spec, layout,
  label family, maze geometry, train config, metrics) so it can be rebuilt against an env and
  exported to ONNX;
* ``OUT.metrics.json``: held-out metrics and the training history;
* ``OUT.scores.png``: progress and success along a few held-out episodes.

The library form is :func:`prm_critic.models.pipeline.train_critic_from_data`.
"""

from __future__ import annotations

from prm_critic.commands._help import config_defaults, int_list, library_defaults_formatter


#: Options whose default is the library's: ``TrainConfig()`` fields, and ``holdout`` of
#: :func:`prm_critic.models.pipeline.train_critic_from_data`. Left unset on the command line, the library value applies.
LIBRARY_DEFAULTS = ("epochs", "pairwise_weight", "pairwise_margin", "holdout", "seed", "hidden", "activation", "lr",
                    "batch_size", "weight_decay", "val_fraction", "patience", "device")


def library_defaults() -> dict:
    """The library's value for every option in :data:`LIBRARY_DEFAULTS` (imports torch)."""
    import inspect

    from prm_critic.models.pipeline import train_critic_from_data
    from prm_critic.models.train import TrainConfig

    d = config_defaults(TrainConfig(), [name for name in LIBRARY_DEFAULTS if name != "holdout"])
    d["holdout"] = inspect.signature(train_critic_from_data).parameters["holdout"].default
    return d


DESCRIPTION = """\
Train a state critic on the steps in --data with the --family's success labels and the spec's subgoal
progress, evaluate it on held-out episodes, and save a safetensors + JSON checkpoint, OUT.metrics.json
and OUT.scores.png. Unset options take the library's defaults (TrainConfig).
"""


def register(sub) -> None:
    from prm_critic.robotics.families import label_families

    p = sub.add_parser("train-critic",
                       help="train a state critic (MLP) on collected + labelled steps, evaluate on held-out episodes",
                       description=DESCRIPTION,
                       formatter_class=library_defaults_formatter(LIBRARY_DEFAULTS, library_defaults))
    p.add_argument("--data", required=True, help="data folder written by prm-critic collect (and label)")
    p.add_argument("--family", "--label", dest="label", required=True, choices=label_families(),
                   help="label family of the success labels (written by prm-critic label --family); --label is the "
                        "same option")
    p.add_argument("--out", required=True, help="checkpoint path (stem, or .safetensors / .json)")
    p.add_argument("--epochs", type=int, help="training epochs")
    p.add_argument("--pairwise-weight", type=float,
                   help="weight of the pairwise ranking loss on successful episodes; 0 disables (the default keeps "
                   "most of the rank-correlation gain for little label error, see docs/results/state_critic_pairwise.md)")
    p.add_argument("--pairwise-margin", type=float, help="logit margin of the ranking loss")
    p.add_argument("--holdout", type=float, help="fraction of episodes held out for evaluation")
    p.add_argument("--seed", type=int, help="training seed: weight init, batch order, pair sampling, early-stopping split")
    p.add_argument("--split-seed", type=int, default=None,
                   help="seed of the held-out episode split, independent of --seed (default: the value of --seed, "
                        "so a run without it splits as before)")
    p.add_argument("--hidden", nargs="+", metavar="N",
                   help="hidden layer sizes, e.g. --hidden 256 256 (or 256,256)")
    p.add_argument("--activation", help="relu, tanh, silu or elu")
    p.add_argument("--lr", type=float, help="learning rate")
    p.add_argument("--batch-size", type=int, help="batch size")
    p.add_argument("--weight-decay", type=float, help="AdamW weight decay")
    p.add_argument("--val-fraction", type=float, help="fraction of training episodes used for early stopping (0: none)")
    p.add_argument("--patience", type=int, help="early-stopping patience in epochs (needs --val-fraction; none: no early stopping)")
    p.add_argument("--device", help="torch device")
    p.add_argument("--demos", type=int, metavar="N",
                   help="--label demo_progress: learn from the first N successful training episodes (default: all)")
    p.add_argument("--relabel", type=int, metavar="K",
                   help="--label demo_progress: K hindsight copies of every demonstration state (default: 4)")
    p.add_argument("--branches", type=int, metavar="B",
                   help="--label demo_progress: B random-action branches from demonstration states, labelled by how "
                        "far they fall behind (default: 0)")
    p.add_argument("--branch-steps", type=int, metavar="S", help="--label demo_progress: steps per branch (default: 10)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace another run's files at OUT (OUT.safetensors, .json, .metrics.json, .scores.png, "
                        ".onnx, ...) instead of refusing them; the same run resumes without it")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.set_defaults(func=run, interrupted=interrupted)


def interrupted(args) -> str:
    """What Ctrl-C kept (the training state after each finished epoch) and how to resume."""
    return (f"the training state after the last finished epoch is kept beside {args.out} (.train-state.*); run the "
            "same command again to resume from it")


def run(args) -> int:
    from prm_critic.models.pipeline import train_critic_from_data
    from prm_critic.models.train import TrainConfig

    given = {name: getattr(args, name) for name in LIBRARY_DEFAULTS if getattr(args, name) is not None}
    if "hidden" in given:
        given["hidden"] = int_list("--hidden", given["hidden"])
    holdout = given.pop("holdout", None)
    config = TrainConfig(**given)
    split_seed = config.seed if args.split_seed is None else args.split_seed
    extra = {} if holdout is None else {"holdout": holdout}
    demo_opts = {k: getattr(args, k) for k in ("demos", "relabel", "branches", "branch_steps")
                 if getattr(args, k) is not None}
    if args.label == "demo_progress":
        return _run_demo_progress(args, config, split_seed, demo_opts, extra)
    if demo_opts:
        raise SystemExit(f"prm-critic train-critic: --{next(iter(demo_opts)).replace('_', '-')} needs --label "
                         f"demo_progress, got --label {args.label}")
    res = train_critic_from_data(args.data, args.label, args.out, config=config, split_seed=split_seed,
                                 progress_bar=not args.no_progress, overwrite=args.overwrite, **extra)
    m = res["metrics"]

    def f(v):
        return "n/a" if v is None else f"{v:.3f}"

    print(f"held-out ({m['n_episodes']} episodes, {m['n_success_episodes']} successful, {m['n_steps']} steps; "
          f"split seed {split_seed}, training seed {config.seed}): "
          f"AUROC success {f(m['auroc_success'])} (first 25%: {f(m['auroc_success_early'])}), "
          f"Spearman(progress, t) {f(m['spearman_progress_time'])}, Brier {f(m['brier_success'])}, "
          f"progress MAE {f(m['progress_mae'])}")
    print(f"wrote {res['checkpoint']} (+ .json), {res['metrics_path']}, {res['plot_path']}")
    return 0


def _run_demo_progress(args, config, split_seed: int, opts: dict, extra: dict) -> int:
    import sys

    from prm_critic.models.demo_critic import train_demo_critic

    res = train_demo_critic(args.data, args.out, config=config, split_seed=split_seed, overwrite=args.overwrite,
                            progress_bar=not args.no_progress, command="prm-critic " + " ".join(sys.argv[1:]),
                            **opts, **extra)
    m, n = res["metrics"]["heldout"], res["metrics"]["n_rows"]

    def f(v):
        return "n/a" if v is None or v != v else f"{v:.3f}"

    print(f"trained on {n['demonstrations']} demonstration states, {n['hindsight']} hindsight copies and "
          f"{n['branches']} branch states ({res['meta']['demonstrations']['count']} demonstrations)")
    print(f"held-out ({m['n_episodes']} episodes, {m['n_success_episodes']} successful): value order along successful "
          f"episodes (Spearman with t) {f(m['spearman_success_time'])}, AUROC against success {f(m['auroc_success'])}")
    print(f"wrote {res['checkpoint']} (+ .json), {res['metrics_path']}")
    return 0

