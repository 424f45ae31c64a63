"""A spec-free state critic from demonstrations: the ``demo_progress`` recipe.

:func:`train_demo_critic` splits a data folder's episodes (``holdout``, ``split_seed``), keeps the first
``demos`` successful episodes of the training part as demonstrations
(:func:`prm_critic.robotics.demos.load_demos`), and trains one MLP (both heads) on their time progress,
``relabel`` hindsight copies of each state and ``branches`` random-action branches of ``branch_steps``
steps from their exact snapshots (:mod:`prm_critic.robotics.demos`). The held-out episodes (successes
and failures) give the metrics: the AUROC of the value against the episode's success and the value's
order along successful episodes (Spearman with time). Nothing here reads the task spec's subgoals.
What ``prm-critic train-critic --label demo_progress`` and ``benchmarks/rl/train_potential.py`` run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from prm_critic import validate

__all__ = ["train_demo_critic"]


def train_demo_critic(data: "str | Path", out: "str | Path", *, config, demos: int | None = None, relabel: int = 4,
                      branches: int = 0, branch_steps: int = 10, holdout: float = 0.2, split_seed: int = 0,
                      overwrite: bool = False, progress_bar: bool = True, command: str | None = None) -> dict[str, Any]:
    """Train and save a ``demo_progress`` critic (module docstring); returns ``{"checkpoint", "metrics_path",
    "metrics", "meta"}``.

    Args:
        data: a data folder (``prm-critic collect``, a Minari or array import; branches need snapshots).
        out: checkpoint path (stem, or ``.safetensors`` / ``.json``); follows the one output rule
            (the same run resumes, another is refused unless ``overwrite``).
        config: a :class:`~prm_critic.models.train.TrainConfig`.
        demos: how many successful training episodes to learn from (``None``: all).
        relabel: hindsight copies per demonstration state (0: none).
        branches, branch_steps: random-action branches (negatives) and their length.
        holdout, split_seed: the held-out episode split of the whole folder.
        command: the command line recorded in the metrics file.
    """
    from prm_critic.models.checkpoint import checkpoint_paths, save_state_critic
    from prm_critic.models.pipeline import _claim_checkpoint
    from prm_critic.models.state_critic import TorchStateCritic
    from prm_critic.models.train import TrainConfig, train_state_critic
    from prm_critic._io import atomic_write_bytes
    from prm_critic.robotics.collection import load_shard
    from prm_critic.robotics.demos import DemoRows, base_rows, branch_rows, goal_success_fn, hindsight_rows, load_demos
    from prm_critic.robotics.make import make_env

    if not isinstance(config, TrainConfig):
        raise TypeError(f"config: expected a TrainConfig, got {type(config).__name__}")
    validate.positive_int("demos", demos, allow_none=True, unit="demonstrations")
    validate.check_int("relabel", relabel, minimum=0)
    validate.check_int("branches", branches, minimum=0)
    validate.positive_int("branch_steps", branch_steps, unit="steps")
    if isinstance(holdout, bool) or not isinstance(holdout, (int, float)) or not 0.0 < float(holdout) < 1.0:
        raise ValueError(f"holdout: expected a fraction in (0, 1), got {holdout!r}")
    validate.check_int("split_seed", split_seed, minimum=0)
    folder = Path(data)
    every = load_demos(folder)
    shards = [load_shard(f) for f in sorted((folder / "shards").glob("shard_*.npz"))]
    test_eps, train_eps = _split(folder, every, shards, demos, holdout, split_seed)
    n_test = len(test_eps)
    chosen = every.subset(train_eps)
    w_path, _ = checkpoint_paths(out)
    stem = w_path.with_suffix("")
    _claim_checkpoint(stem, {"command": "train-critic", "label_family": "demo_progress", "demonstrations": chosen.sha256,
                             "relabel": relabel, "branches": branches, "branch_steps": branch_steps,
                             "train_config": config.to_dict(), "holdout": holdout, "split_seed": split_seed},
                      overwrite=overwrite)
    rng = np.random.default_rng(config.seed)
    parts = [base_rows(chosen)]
    env = make_env(chosen.spec) if (relabel or branches) else None
    try:
        if relabel:
            parts.append(hindsight_rows(chosen, relabel, goal_success_fn(env), rng))
        if branches:
            parts.append(branch_rows(chosen, branches, branch_steps, rng, env=env))
    finally:
        if env is not None:
            env.close()
    rows = DemoRows.concat(parts)
    net, history = train_state_critic(rows.x, rows.y, rows.y, episode=rows.episode, t=rows.t,
                                      ep_success=np.ones(len(rows), bool), config=config, progress_bar=progress_bar)
    critic = TorchStateCritic(net)
    held = _heldout(critic, shards, test_eps)
    metrics = {"heldout": {k: held[k] for k in ("auroc_success", "auroc_success_early", "spearman_success_time",
                                                 "n_episodes", "n_success_episodes")},
               "n_rows": {"demonstrations": int((rows.source == 0).sum()), "hindsight": int((rows.source == 1).sum()),
                          "branches": int((rows.source == 2).sum())},
               "relabel": relabel, "branches": branches, "branch_steps": branch_steps, "n_heldout_episodes": n_test}
    meta = {"task": chosen.spec.name, "spec": chosen.spec.to_dict(), "layout": chosen.layout.to_dict(),
            "label_family": "demo_progress", "maze": chosen.meta.get("maze"), "train_config": config.to_dict(),
            "metrics": metrics, "demonstrations": chosen.record(),
            "data": {"folders": [folder.name], "policies": [chosen.meta.get("policy")], "seeds": [chosen.meta.get("seed")],
                     "holdout": holdout, "split_seed": split_seed}}
    w = save_state_critic(out, net, meta)
    metrics_path = stem.with_name(stem.name + ".metrics.json")
    atomic_write_bytes(metrics_path, json.dumps({"metrics": metrics, "history": history, "demonstrations": chosen.record(),
                                                 "command": command}, indent=2, default=float).encode())
    return {"checkpoint": w, "metrics_path": metrics_path, "metrics": metrics, "meta": meta}


def _split(folder: Path, every, shards: list, demos: int | None, holdout: float, split_seed: int) -> tuple[set, list]:
    """The held-out episodes of the whole folder and the first ``demos`` successful episodes outside them."""
    from prm_critic.robotics.demos import DemoError

    all_eps = np.concatenate([d["ep_index"] for d in shards])
    rng = np.random.default_rng(split_seed)
    n_test = min(len(all_eps) - 1, max(1, int(round(holdout * len(all_eps)))))
    if n_test < 1:
        raise DemoError(f"data: {str(folder)!r} holds {len(all_eps)} episode(s); expected at least 2 to hold some out")
    test_eps = set(rng.choice(all_eps, size=n_test, replace=False).tolist())
    train_eps = [e for e in every.episodes if e not in test_eps]
    if demos is not None:
        if len(train_eps) < demos:
            raise DemoError(f"demos: {str(folder)!r} has {len(train_eps)} successful episodes outside the held-out split "
                            f"(holdout {holdout}, split seed {split_seed}); expected at least {demos} (collect more "
                            "episodes, or ask for fewer)")
        train_eps = train_eps[:demos]
    if not train_eps:
        raise DemoError(f"demos: every successful episode of {str(folder)!r} was held out; expected at least one to learn "
                        "from (collect more episodes, or a smaller holdout)")
    return test_eps, train_eps


def _heldout(critic, shards: list, test_eps: set) -> dict:
    """The critic's metrics on the held-out episodes (successes and failures)."""
    from prm_critic.models.evaluate import evaluate_state_critic

    xs, ep, tt, ok = [], [], [], []
    for d in shards:
        ep_ok = dict(zip(d["ep_index"].tolist(), d["ep_success"].tolist()))
        sel = np.isin(d["episode"], list(test_eps))
        xs.append(d["x"][sel])
        ep.append(d["episode"][sel])
        tt.append(d["t"][sel])
        ok.append(np.asarray([ep_ok[e] for e in d["episode"][sel].tolist()], bool))
    return evaluate_state_critic(critic, np.concatenate(xs), episode=np.concatenate(ep), t=np.concatenate(tt),
                                 ep_success=np.concatenate(ok))
