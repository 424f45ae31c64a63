"""Train a state critic from a collected, labelled data folder in one call.

:func:`train_critic_from_data` loads the steps with one label family, splits them by episode,
trains (resumable: a killed run restarts from its last finished epoch), evaluates on the held-out
episodes and writes

* ``OUT.safetensors`` + ``OUT.json``: the checkpoint, with full metadata (task, spec, layout,
  label family, maze geometry, train config, metrics) so it can be rebuilt against an env and
  exported to ONNX;
* ``OUT.metrics.json``: held-out metrics and the training history;
* ``OUT.scores.png``: progress and success along a few held-out episodes.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from prm_critic import validate
from prm_critic._io import atomic_write_bytes, claim_output, record_diffs, write_record
from prm_critic.models.checkpoint import checkpoint_paths, save_state_critic
from prm_critic.models.evaluate import evaluate_state_critic, mean_episode_spearman, plot_episode_scores
from prm_critic.models.state_critic import TorchStateCritic
from prm_critic.models.train import train_state_critic

__all__ = ["train_critic_from_data"]


def _json_safe(v):
    """NaN / inf -> None (strict JSON), recursively."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: _json_safe(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_json_safe(x) for x in v]
    return v


#: the files a training run writes beside its checkpoint stem (and ``prm-critic export``'s default ONNX files);
#: its run record is ``OUT.run.json``
CHECKPOINT_RUN_SUFFIXES = (".safetensors", ".json", ".metrics.json", ".scores.png", ".train-state.json",
                           ".train-state.safetensors", ".onnx", ".b1.onnx")


def _claim_checkpoint(stem: Path, settings: dict, *, overwrite: bool) -> None:
    """The output rule for a checkpoint stem: its run record ``OUT.run.json`` names the run there."""
    record = stem.with_name(stem.name + ".run.json")
    owned = [stem.with_name(stem.name + s) for s in CHECKPOINT_RUN_SUFFIXES]
    claim_output(stem, owned, record_diffs(record, settings), overwrite=overwrite, what="out",
                 held="a critic trained")
    write_record(record, settings)


def _sha256(table, names: tuple[str, ...]) -> str:
    """SHA-256 of the step table's arrays ``names`` (what a critic is trained and evaluated on)."""
    import hashlib

    h = hashlib.sha256()
    for name in names:
        arr = np.ascontiguousarray(getattr(table, name))
        h.update(str((arr.dtype.str, arr.shape)).encode())
        h.update(arr.tobytes())
    return h.hexdigest()


def train_critic_from_data(data, label: str, out, *, config, holdout: float = 0.2, split_seed: int = 0,
                           progress_bar: bool = True, overwrite: bool = False) -> dict:
    """Train a state critic on a collected, labelled data folder, evaluate it on held-out episodes
    and write the checkpoint, its metrics and a plot (what ``prm-critic train-critic`` runs).

    Args:
        data: data folder written by :func:`prm_critic.robotics.collect` (and ``label``).
        label: success label family, a registered one (:func:`prm_critic.robotics.families.label_families`).
        out: checkpoint path (stem, or ``.safetensors`` / ``.json``).
        config: a :class:`~prm_critic.models.train.TrainConfig`.
        holdout: fraction of episodes held out for evaluation.
        split_seed: seed of the held-out episode split (and of the plot's episode choice), an int >= 0,
            default 0. It is independent of ``config.seed`` (weight init, batch order, pair sampling and
            the early-stopping split of the training episodes): vary one with the other fixed to tell
            the split's effect from the initialisation's. ``prm-critic train-critic --split-seed``
            defaults to its ``--seed``.
        progress_bar: show a tqdm bar over epochs.
        overwrite: replace the files of another run at ``out`` (every ``OUT.*`` file this function
            or ``prm-critic export`` writes) instead of refusing them. Without it, ``out`` follows the
            one output rule: the same run (same data content, label family, config, holdout and split
            seed, recorded in ``OUT.run.json``) resumes, another is refused naming what differs.

    Returns:
        ``{"checkpoint", "metrics_path", "plot_path", "metrics", "meta"}``: the ``.safetensors``
        path, ``OUT.metrics.json``, ``OUT.scores.png``, the held-out metrics and the checkpoint's
        metadata.
    """
    from prm_critic.robotics.dataset import load_steps, split_episodes
    from prm_critic.robotics.families import get_label_family

    split_seed = validate.check_int("split_seed", split_seed, minimum=0)
    table = load_steps(data, label)
    if get_label_family(label).spec_free:  # trained on the labelled steps only, both heads on the family's label
        table = table.select(table.mask)
    if not np.all(np.isfinite(table.progress)):
        raise ValueError(f"data: spec {table.spec.name!r} has no subgoals, so there is no progress label to train on; "
                         "add [[subgoals]] to the spec")
    if not table.mask.any():
        raise ValueError(f"label: the {label!r} labels of {str(data)!r} mark no step as labelled (mask all False)")
    train, test = split_episodes(table, holdout=holdout, seed=split_seed)
    w_path, j_path = checkpoint_paths(out)
    stem = w_path.with_suffix("")
    _claim_checkpoint(stem, {"command": "train-critic", "data_sha256": _sha256(table, ("x", "episode", "t", "ep_success")),
                             "labels_sha256": _sha256(table, ("progress", "success", "mask")), "label_family": label,
                             "train_config": config.to_dict(), "holdout": holdout, "split_seed": split_seed},
                      overwrite=overwrite)
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
    metrics["label_spearman_progress_time"] = mean_episode_spearman(test.progress, test.episode, test.t, test.ep_success)[0]
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
                 "holdout": holdout, "split_seed": split_seed, "test_episodes": [int(e) for e in test.episodes]},
    }
    save_state_critic(stem, net, meta)
    metrics_path = stem.with_name(stem.name + ".metrics.json")
    doc = {"metrics": metrics, "history": _json_safe(history), "label_family": label, "task": table.spec.name,
           "train_config": config.to_dict(), "holdout": holdout, "split_seed": split_seed}
    atomic_write_bytes(metrics_path, json.dumps(doc, indent=2, sort_keys=True).encode())
    plot_path = stem.with_name(stem.name + ".scores.png")
    plot_episode_scores(critic, test.x, test.episode, test.t, test.ep_success, plot_path, n=6,
                        progress_label=test.progress, seed=split_seed,
                        title=f"{table.spec.name}: held-out episodes ({label} labels)")
    return {"checkpoint": w_path, "metrics_path": metrics_path, "plot_path": plot_path, "metrics": metrics, "meta": meta}
