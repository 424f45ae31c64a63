"""Train a state critic for use as a shaping potential on the steps of several collect folders at once.

A critic trained on the scripted episodes alone (``prm-critic train-critic``) fits the states a
scripted controller visits; an untrained SAC policy visits others (the arm wanders, the block sits
still), and there the learned potential can jump from step to step
(``benchmarks/rl/potential_noise.py``). This script trains one critic on the union of the steps of
several ``prm-critic collect`` folders of the same task and layout (e.g. scripted episodes plus
random-action episodes), labelled with the same family, so that the states the learner visits
early are covered:

    prm-critic collect --task FetchPush-v4 --out critic_data/push --episodes 300 --seed 0
    prm-critic collect --task FetchPush-v4 --out critic_data/push_random --episodes 100 --seed 1000 --policy random
    prm-critic label --data critic_data/push --family subgoal
    prm-critic label --data critic_data/push_random --family subgoal
    python -m benchmarks.rl.train_potential --data critic_data/push critic_data/push_random --label subgoal \\
        --out benchmarks/rl/critics/push_cov

``--relabel K`` (``subgoal`` and ``steps_to_success`` labels) adds, for every step, K copies with HER's
"future" goal relabelling (the desired goal of s and s' replaced by the achieved goal at a random later
step of the same episode): with HER, four of every five transitions the learner trains on are queried
at such relabelled goals, which scripted episodes never show the critic. A ``subgoal`` copy is
labelled with the spec's progress of the relabelled state; a ``steps_to_success`` copy with
``gamma ** (t* - t)``, ``t*`` the first step at or after ``t`` whose next state meets the relabelled
goal by the spec's last subgoal. That subgoal must be the task's success: on every stored step, it
holds on the next state exactly when the step's success flag is set (checked; refused otherwise).
The discount is the one the labels were written with (``labels/steps_to_success.json``).

``--holdout`` of the episodes of all folders together are held out (drawn by ``--split-seed``, so each
folder's share is about, not exactly, that fraction); a folder none of whose episodes was drawn is
refused, since its held-out metrics would be undefined. The checkpoint (safetensors + JSON, the
library's format) records the folders, their policies and the held-out metrics per folder.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from benchmarks.report_io import write_text



def recipe(meta: dict) -> dict | None:
    """The settings that made a critic written by this script, without its training seed.

    Two critics with equal recipes were trained on the same data, labels, relabelling, network and
    optimiser settings and differ only in ``--seed`` (initial weights and batch order): a report pools
    them, so that no training seed is picked after the RL results are seen. The held-out metrics are
    outcomes, not settings, and are left out. ``--delta-weight`` was added after the first critics: a
    checkpoint without it was trained without the smoothness term (weight 0), and ``--delta-epochs``
    only counts when the weight is not 0. ``None`` for a checkpoint this script did not write (no
    ``relabel`` in its metrics)."""
    metrics, config = meta.get("metrics"), meta.get("train_config")
    if not isinstance(metrics, dict) or "relabel" not in metrics or not isinstance(config, dict):
        return None
    settings = {"relabel": metrics["relabel"], "delta_weight": float(metrics.get("delta_weight", 0.0))}
    if settings["delta_weight"]:
        settings["delta_epochs"] = metrics["delta_epochs"]
    if "label_gamma" in metrics:  # the labels' own discount (steps_to_success)
        settings["label_gamma"] = metrics["label_gamma"]
    return {"task": meta.get("task"), "spec": meta.get("spec"), "layout": meta.get("layout"),
            "label_family": meta.get("label_family"), "maze": meta.get("maze"), "data": meta.get("data"),
            "train_config": {k: v for k, v in config.items() if k != "seed"}, "settings": settings}


def load_union(folders: list[Path], label: str):
    """One ``StepTable`` of every folder's steps (episode ids made distinct), and per row the index of its folder;
    refused unless every folder holds the same task and critic-input layout."""
    from prm_critic.robotics.dataset import StepTable, load_steps

    tables = [load_steps(f, label) for f in folders]
    first = tables[0]
    for f, t in zip(folders[1:], tables[1:]):
        if t.spec.name != first.spec.name:
            raise SystemExit(f"--data: {str(f)!r} holds {t.spec.name!r} steps, {str(folders[0])!r} holds "
                             f"{first.spec.name!r}; expected one task")
        if t.layout.to_dict() != first.layout.to_dict():
            raise SystemExit(f"--data: {str(f)!r} has another critic-input layout than {str(folders[0])!r}")
    offset, eps, source = 0, [], []
    for i, t in enumerate(tables):
        eps.append(t.episode + offset)
        offset += int(t.episode.max()) + 1
        source.append(np.full(len(t), i, dtype=np.int64))

    def cat(name):
        return np.concatenate([getattr(t, name) for t in tables])

    union = StepTable(x=cat("x"), next_x=cat("next_x"), episode=np.concatenate(eps), t=cat("t"), ep_len=cat("ep_len"),
                      ep_success=cat("ep_success"), progress=cat("progress"), success=cat("success"),
                      mask=cat("mask"), spec=first.spec, layout=first.layout, meta=first.meta, family=label,
                      extra={"step_success": np.concatenate([t.extra["step_success"] for t in tables])})
    return union, np.concatenate(source), tables


def label_gamma(folders: list[Path], label: str) -> float | None:
    """The discount the ``steps_to_success`` labels of ``folders`` were written with (one for all of them;
    ``None`` for another family)."""
    if label != "steps_to_success":
        return None
    gammas = {}
    for f in folders:
        rec = json.loads((f / "labels" / f"{label}.json").read_text())
        gammas[str(f)] = float(rec["gamma"])
    if len(set(gammas.values())) != 1:
        raise SystemExit(f"--data: the {label} labels were written with different discounts {gammas}; expected one "
                         f"(`prm-critic label --family {label} --gamma G` on every folder)")
    return next(iter(gammas.values()))


def relabelled_success_labels(next_x: np.ndarray, episode: np.ndarray, goals: np.ndarray, layout, evaluator,
                              gamma: float) -> np.ndarray:
    """Per row, ``gamma ** (t* - t)`` for the row's relabelled goal ``goals[i]``: ``t*`` the first step at or
    after the row's, in its episode, whose next state meets that goal by the spec's last subgoal; 0 if
    none. Rows must be whole episodes in step order."""
    des = layout.slices["desired_goal"]
    out = np.zeros(len(episode), dtype=np.float32)
    starts = np.flatnonzero(np.r_[True, episode[1:] != episode[:-1]])
    ends = np.r_[starts[1:], len(episode)]
    for b, e in zip(starts, ends):
        n = e - b
        grid = np.repeat(next_x[b:e][None, :, :], n, axis=0)  # [row i, later step j]
        grid[:, :, des] = goals[b:e][:, None, :]
        hit = evaluator.holds(grid.reshape(n * n, -1))[:, -1].reshape(n, n) & np.triu(np.ones((n, n), bool))
        first = np.argmax(hit, axis=1)
        ok = hit.any(axis=1)
        out[b:e][ok] = (float(gamma) ** (first[ok] - np.arange(n)[ok])).astype(np.float32)
    return out


def check_last_subgoal_is_success(table, evaluator) -> None:
    """Refuse a task whose spec's last subgoal is not its success: on every stored step, it must hold on the
    next state exactly when the step's success flag is set."""
    last = evaluator.holds(table.next_x)[:, -1]
    ok = table.extra["step_success"].astype(bool)
    if (bad := int((last != ok).sum())):
        name = table.spec.subgoals[-1].name
        raise SystemExit(f"--relabel with --label steps_to_success: the spec's last subgoal {name!r} disagrees with "
                         f"the stored success flag on {bad} of {len(ok)} steps; relabelled goals' success is judged "
                         "by that subgoal, so expected it to hold exactly on the steps that succeed")


def relabelled_copies(table, k: int, seed: int, gamma: float | None = None):
    """``table`` with ``k`` HER-relabelled copies of every step appended (module docstring), labelled with
    the spec's progress of the relabelled state (the ``subgoal`` family's label) or, with ``gamma``, the
    relabelled goal's discounted steps to success (``steps_to_success``)."""
    from prm_critic.robotics.dataset import StepTable
    from prm_critic.robotics.labels import subgoal_evaluator

    from benchmarks.rl.potential_noise import her_relabel

    evaluator = subgoal_evaluator(table.meta)
    order = np.lexsort((table.t, table.episode))  # her_relabel needs each episode's steps in order
    base = table.select(order)
    if gamma is not None:
        check_last_subgoal_is_success(base, evaluator)
    rng = np.random.default_rng(seed)
    parts = [base]
    span = int(base.episode.max()) + 1
    for i in range(k):
        x, nx = her_relabel(base.x, base.next_x, base.episode, base.layout, rng)
        prog = evaluator.progress(x).astype(np.float32)
        lab = prog if gamma is None else relabelled_success_labels(
            nx, base.episode, x[:, base.layout.slices["desired_goal"]], base.layout, evaluator, gamma)
        # each copy is an episode of its own (ids past the originals'): training checks one t per episode
        parts.append(StepTable(x=x, next_x=nx, episode=base.episode + (i + 1) * span, t=base.t, ep_len=base.ep_len,
                               ep_success=base.ep_success, progress=prog, success=lab, mask=np.ones(len(x), bool),
                               spec=base.spec, layout=base.layout, meta=base.meta, family=base.family))
    return StepTable(**{f: np.concatenate([getattr(p, f) for p in parts]) for f in
                        ("x", "next_x", "episode", "t", "ep_len", "ep_success", "progress", "success", "mask")},
                     spec=base.spec, layout=base.layout, meta=base.meta, family=base.family)


def finetune_delta(net, x, nx, y, ny, *, weight: float, epochs: int, lr: float = 3e-4, batch: int = 256,
                   seed: int = 0) -> list[float]:
    """Fine-tune ``net`` so that its step change matches the label's: the heads' BCE on s and s' plus
    ``weight * mean(((Phi(s') - Phi(s)) - (y' - y))**2) / var(y' - y)`` (the potential's per-step change
    is what the shaping term pays, and a regression whose error is as large as that change pays noise).
    Returns the mean loss per epoch."""
    import torch

    torch.manual_seed(seed)
    X, NX = torch.from_numpy(np.ascontiguousarray(x)), torch.from_numpy(np.ascontiguousarray(nx))
    Y, NY = torch.from_numpy(y.astype(np.float32)), torch.from_numpy(ny.astype(np.float32))
    var = float(torch.var(NY - Y)) or 1.0
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    bce = torch.nn.functional.binary_cross_entropy_with_logits
    history = []
    net.train()
    for _ in range(epochs):
        perm = torch.randperm(len(X))
        total, count = 0.0, 0
        for i in range(0, len(X), batch):
            idx = perm[i:i + batch]
            z, zn = net.logits(X[idx]), net.logits(NX[idx])
            yb, nyb = Y[idx][:, None].expand_as(z), NY[idx][:, None].expand_as(zn)
            d = torch.sigmoid(zn) - torch.sigmoid(z)
            loss = bce(z, yb) + bce(zn, nyb) + weight * ((d - (nyb - yb)) ** 2).mean() / var
            opt.zero_grad()
            loss.backward()
            opt.step()
            total, count = total + loss.item() * len(idx), count + len(idx)
        history.append(total / count)
    net.eval()
    return history


def balanced(table, seed: int):
    """``table`` resampled (the minority side drawn with replacement) so that its labelled steps with a label
    >= 0.5 and < 0.5 are equally many, unlabelled steps dropped; refused when one side is empty."""
    rows = np.flatnonzero(table.mask)
    pos, neg = rows[table.success[rows] >= 0.5], rows[table.success[rows] < 0.5]
    if not len(pos) or not len(neg):
        raise SystemExit(f"--balance: the labels have {len(pos)} steps >= 0.5 and {len(neg)} below; expected both "
                         "(success_contrast needs successful and failed episodes)")
    rng = np.random.default_rng(seed)
    n = max(len(pos), len(neg))
    pick = np.sort(np.concatenate([pos if len(pos) == n else rng.choice(pos, n),
                                   neg if len(neg) == n else rng.choice(neg, n)]))
    out = table.select(pick)
    # a step drawn k times: its copies are episodes of their own (training checks one t per episode)
    first = np.searchsorted(pick, pick)
    out.episode = out.episode + (np.arange(len(pick)) - first) * (int(table.episode.max()) + 1)
    return out


def train_demo_progress(a, argv) -> int:
    """``--label demo_progress``: a spec-free potential from the successful episodes of one folder
    (:func:`prm_critic.models.demo_critic.train_demo_critic`: their time progress, ``--relabel K`` hindsight
    copies and ``--branches B`` random-action branches of ``--branch-steps S`` steps)."""
    from prm_critic.models.demo_critic import train_demo_critic
    from prm_critic.models.train import TrainConfig

    if len(a.data) != 1:
        raise SystemExit(f"--data: --label demo_progress learns from one demonstrations folder, got {len(a.data)}")
    config = TrainConfig(hidden=tuple(int(h) for h in a.hidden.split(",")), epochs=a.epochs,
                         activation=a.activation, lr=a.lr, batch_size=a.batch_size, weight_decay=a.weight_decay,
                         seed=a.seed)
    res = train_demo_critic(a.data[0], a.out, config=config, demos=a.demos, relabel=a.relabel, branches=a.branches,
                            branch_steps=a.branch_steps, holdout=a.holdout, split_seed=a.split_seed, overwrite=True,
                            command="python -m benchmarks.rl.train_potential " + " ".join(
                                sys.argv[1:] if argv is None else argv))
    print(json.dumps(res["metrics"], indent=2, default=float))
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, nargs="+", required=True, help="collect folders (same task and layout)")
    p.add_argument("--label", default="subgoal", choices=["subgoal", "mc", "outcome", "steps_to_success", "demo_progress",
                                                   "success_contrast"],
                   help="label family")
    p.add_argument("--out", type=Path, required=True, help="checkpoint stem")
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--hidden", default="256,256")
    p.add_argument("--activation", default="relu", choices=["relu", "tanh", "silu", "elu"])
    p.add_argument("--lr", type=float, default=1e-3, help="Adam learning rate")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--pairwise-weight", type=float, default=0.0)
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--holdout", type=float, default=0.2)
    p.add_argument("--split-seed", type=int, default=0)
    p.add_argument("--seed", type=int, default=0, help="initialisation and batch order")
    p.add_argument("--relabel", type=int, default=0, metavar="K",
                   help="add K HER-relabelled copies of every step (subgoal and steps_to_success labels; default 0)")
    p.add_argument("--delta-weight", type=float, default=0.0,
                   help="then fine-tune with a loss on the per-step change Phi(s') - Phi(s) against the label's "
                        "(subgoal labels only; 0: none)")
    p.add_argument("--delta-epochs", type=int, default=10)
    p.add_argument("--balance", action="store_true",
                   help="resample the training steps so that labels >= 0.5 and < 0.5 are equally many (success_contrast: "
                        "50/50 batches of successful and failed episodes' states)")
    p.add_argument("--demos", type=int, default=None, metavar="N",
                   help="demo_progress: the first N successful training episodes of the folder (default: all)")
    p.add_argument("--branches", type=int, default=0, metavar="B",
                   help="demo_progress: B random-action branches from demonstration states (negatives; default 0)")
    p.add_argument("--branch-steps", type=int, default=10, help="demo_progress: steps per branch (default 10)")
    a = p.parse_args(argv)
    if a.label == "demo_progress":
        return train_demo_progress(a, argv)
    if a.delta_weight < 0 or (a.delta_weight and a.label != "subgoal"):
        raise SystemExit(f"--delta-weight: expected a number >= 0, with --label subgoal (the label of s' is the spec's "
                         f"progress), got --delta-weight {a.delta_weight} --label {a.label}")
    if a.relabel < 0 or (a.relabel and a.label not in ("subgoal", "steps_to_success")):
        raise SystemExit(f"--relabel: expected an integer >= 0, with --label subgoal or steps_to_success (relabelled "
                         f"states have no MC labels), got --relabel {a.relabel} --label {a.label}")
    for f in a.data:
        if not (f / "meta.json").is_file():
            raise SystemExit(f"--data: expected a `prm-critic collect` folder, got {str(f)!r} (no meta.json)")

    from prm_critic.models.checkpoint import save_state_critic
    from prm_critic.models.evaluate import evaluate_state_critic
    from prm_critic.models.state_critic import TorchStateCritic
    from prm_critic.models.train import TrainConfig, train_state_critic
    from prm_critic.robotics.dataset import split_episodes

    config = TrainConfig(hidden=tuple(int(h) for h in a.hidden.split(",")), epochs=a.epochs,
                         activation=a.activation, lr=a.lr, batch_size=a.batch_size,
                         pairwise_weight=a.pairwise_weight, weight_decay=a.weight_decay, seed=a.seed)
    table, source, tables = load_union(a.data, a.label)
    train, test = split_episodes(table, holdout=a.holdout, seed=a.split_seed)
    test_source = source[np.isin(table.episode, test.episodes)]
    if empty := [str(f) for i, f in enumerate(a.data) if not (test_source == i).any()]:
        raise SystemExit(f"--holdout {a.holdout} (--split-seed {a.split_seed}): no held-out episode of {empty}, whose "
                         "held-out metrics would be undefined; expected a larger --holdout, more episodes in that "
                         "folder or another --split-seed")
    gamma = label_gamma(a.data, a.label)
    if a.relabel:
        train = relabelled_copies(train, a.relabel, a.seed, gamma)
    if a.balance:
        train = balanced(train, a.seed)
    net, history = train_state_critic(train.x, train.progress, train.success, episode=train.episode, t=train.t,
                                      ep_success=train.ep_success, mask=train.mask, config=config)
    if a.delta_weight:
        from prm_critic.robotics.labels import subgoal_evaluator

        ny = subgoal_evaluator(table.meta).progress(train.next_x)
        history = {"train": history, "delta": finetune_delta(net, train.x, train.next_x, train.progress, ny,
                                                             weight=a.delta_weight, epochs=a.delta_epochs,
                                                             seed=a.seed)}
    critic = TorchStateCritic(net)
    per_folder = {}
    for i, f in enumerate(a.data):
        sel = test_source == i
        sc = critic.score(test.x[sel])
        row = {"n_test_steps": int(sel.sum()), "progress_mae": float(np.mean(np.abs(sc.progress - test.progress[sel])))}
        lab = test.mask[sel]
        if lab.any():  # the success head against the family's labels (the potential with --head success)
            row["label_mae"] = float(np.mean(np.abs(sc.success[lab] - test.success[sel][lab])))
        if test.ep_success[sel].any() and not test.ep_success[sel].all():
            m = evaluate_state_critic(critic, test.x[sel], episode=test.episode[sel], t=test.t[sel],
                                      ep_success=test.ep_success[sel])
            row["success_auroc"] = m["auroc_success"]
        if test.ep_success[sel].any():  # value order: Spearman of the success head with time along successful episodes
            m = evaluate_state_critic(critic, test.x[sel], episode=test.episode[sel], t=test.t[sel],
                                      ep_success=test.ep_success[sel])
            row["spearman_value_time"] = m["spearman_success_time"]
        per_folder[f.name] = row
    metrics = {"per_folder": per_folder, "n_train_steps": int(len(train)), "n_test_steps": int(len(test)),
               "relabel": a.relabel, "balance": bool(a.balance), "delta_weight": a.delta_weight,
               "delta_epochs": a.delta_epochs,
               **({} if gamma is None else {"label_gamma": gamma})}
    meta = {"task": table.spec.name, "spec": table.spec.to_dict(), "layout": table.layout.to_dict(),
            "label_family": a.label, "maze": table.meta.get("maze"), "train_config": config.to_dict(),
            "metrics": metrics,
            "data": {"folders": [f.name for f in a.data], "policies": [t.meta.get("policy") for t in tables],
                     "seeds": [t.meta.get("seed") for t in tables], "holdout": a.holdout, "split_seed": a.split_seed}}
    save_state_critic(a.out, net, meta)
    write_text(a.out.with_name(a.out.name + ".metrics.json"),
               json.dumps({"metrics": metrics, "history": history, "command": "python -m benchmarks.rl.train_potential "
                           + " ".join(sys.argv[1:] if argv is None else argv)}, indent=2, default=float))
    print(json.dumps(metrics, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
