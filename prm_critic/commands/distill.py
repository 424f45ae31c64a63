"""``prm-critic distill``: distil a trained state critic into a small deploy critic.

Trains a small student on the teacher's own training episodes (the split the teacher's checkpoint
records; any further ``--data`` folders add all their episodes), with the teacher's outputs as the
targets, evaluates teacher and student on the teacher's held-out episodes, prints both side by side
and writes

* ``OUT.safetensors`` + ``OUT.json``: the student, with the teacher's normaliser and metadata (task,
  spec, layout, label family), ``distilled_from`` (the teacher's weights hash) and both metrics;
* ``OUT.metrics.json``: the held-out metrics of both and the training history.

The library form is :func:`prm_critic.models.distill.distill_critic_from_data`.
"""

from __future__ import annotations

from prm_critic.commands._help import config_defaults, int_list, library_defaults_formatter

#: options whose default is :class:`~prm_critic.models.distill.DistillConfig`'s; unset, the library value applies
CONFIG_OPTIONS = ("hidden", "activation", "loss", "epochs", "batch_size", "lr", "weight_decay", "noise",
                  "val_fraction", "seed")


def library_defaults() -> dict:
    """:class:`~prm_critic.models.distill.DistillConfig`'s value of every option in :data:`CONFIG_OPTIONS`
    (imports torch)."""
    from prm_critic.models.distill import DistillConfig

    return config_defaults(DistillConfig(), CONFIG_OPTIONS)


DESCRIPTION = """\
Train a small state critic (the student) to reproduce a trained one (the teacher) on the teacher's
training episodes, evaluate both on the teacher's held-out episodes and save the student (safetensors +
JSON) and OUT.metrics.json. Unset options take the library's defaults (DistillConfig).
"""


def register(sub) -> None:
    p = sub.add_parser("distill",
                       help="distil a trained state critic into a small deploy critic; compare both on the held-out episodes",
                       description=DESCRIPTION,
                       formatter_class=library_defaults_formatter(CONFIG_OPTIONS, library_defaults))
    p.add_argument("--critic", required=True, help="the teacher's checkpoint (.json, .safetensors or their stem), "
                   "written by prm-critic train-critic")
    p.add_argument("--data", required=True, nargs="+", metavar="FOLDER",
                   help="the teacher's data folder (its split is reproduced and checked), then optional further "
                        "folders of the same task and layout whose episodes are all added to the training inputs; "
                        "no labels needed")
    p.add_argument("--out", required=True, help="the student's checkpoint path (stem, or .safetensors / .json)")
    p.add_argument("--hidden", nargs="+", metavar="N", help="hidden layer sizes, e.g. --hidden 32 32 (or 32,32)")
    p.add_argument("--activation", help="relu, tanh, silu or elu")
    p.add_argument("--loss", help="bce (on the teacher's probabilities) or mse (on its logits)")
    p.add_argument("--epochs", type=int, help="passes over the training inputs")
    p.add_argument("--batch-size", type=int, help="rows per batch")
    p.add_argument("--lr", type=float, help="initial learning rate (cosine decay to 0)")
    p.add_argument("--weight-decay", type=float, help="AdamW weight decay")
    p.add_argument("--noise", type=float,
                   help="Gaussian input perturbation, in units of the teacher's normalised input (0: none)")
    p.add_argument("--val-fraction", type=float, help="fraction of the rows held out to pick the best epoch")
    p.add_argument("--seed", type=int, help="seed of the initialisation, batch order, validation rows and noise")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.set_defaults(func=run)


ROWS = (("auroc_success", "AUROC success"), ("auroc_success_early", "AUROC success (first 25%)"),
        ("spearman_progress_time", "Spearman(progress, t)"), ("spearman_success_time", "Spearman(success, t)"),
        ("brier_success", "Brier success"), ("progress_mae", "progress MAE (spec progress)"))


def _fmt(v) -> str:
    return "n/a" if v is None else f"{v:.3f}"


def table(teacher: dict, student: dict) -> list[str]:
    """The side-by-side lines ``prm-critic distill`` prints."""
    lines = [f"{'held-out metric':<30} {'teacher':>9} {'student':>9} {'student - teacher':>18}"]
    for key, name in ROWS:
        t, s = teacher.get(key), student.get(key)
        d = "n/a" if t is None or s is None else f"{s - t:+.3f}"
        lines.append(f"{name:<30} {_fmt(t):>9} {_fmt(s):>9} {d:>18}")
    lines.append(f"{'weights (float32 bytes)':<30} {teacher['weight_bytes']:>9} {student['weight_bytes']:>9} "
                 f"{student['weight_bytes'] / teacher['weight_bytes']:>17.3f}x")
    return lines


def run(args) -> int:
    from prm_critic.models.distill import DistillConfig, distill_critic_from_data

    given = {name: getattr(args, name) for name in CONFIG_OPTIONS if getattr(args, name) is not None}
    if "hidden" in given:
        given["hidden"] = int_list("--hidden", given["hidden"])
    config = DistillConfig(**given)
    res = distill_critic_from_data(args.critic, args.data, args.out, config=config,
                                   progress_bar=not args.no_progress)
    t, s, rec = res["teacher"], res["student"], res["meta"]["data"]
    print(f"held-out: {t['n_episodes']} episodes ({t['n_success_episodes']} successful, {t['n_steps']} steps), the "
          f"teacher's split (holdout {rec['holdout']}, split seed {rec['split_seed']}); student "
          f"{'-'.join(str(h) for h in config.hidden)} trained on {rec['n_train_rows']} rows")
    print("\n".join(table(t, s)))
    print(f"agreement with the teacher on the held-out steps: mean |progress difference| "
          f"{s['teacher_mae_progress']:.3f}, mean |success difference| {s['teacher_mae_success']:.3f}")
    print(f"wrote {res['checkpoint']} (+ .json), {res['metrics_path']}")
    return 0
