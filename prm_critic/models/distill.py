"""Distil a trained state critic into a smaller one that stays in the CPU caches of a control loop.

A FetchPush critic of 31-256-256-2 holds about 290 KB of float32 weights; right after a MuJoCo step
they are out of the core's L2 cache and one batch-1 call costs several times its tight-loop latency
(``docs/latency.md``). :func:`distill_state_critic` trains a small
:class:`~prm_critic.models.state_critic.StateCriticNet` (the *student*, e.g. hidden ``(32, 32)``,
about 9 KB) to reproduce the trained one (the *teacher*) on the teacher's training inputs; no label
is needed, the teacher's outputs are the targets. Loss per batch ``b`` (``z`` the student's logits,
``u`` the teacher's, both heads)::

    loss="bce":  mean_h BCE(z_h[b], sigmoid(u_h[b]))     (soft targets: the teacher's probabilities)
    loss="mse":  mean_h (z_h[b] - u_h[b])^2               (the teacher's logits)

With ``noise > 0`` each batch is perturbed first, ``x + noise * obs_std * eps`` (``eps`` standard
normal; ``obs_std`` the teacher's normaliser, so ``noise`` is in units of the normalised input) and
the teacher scores the perturbed inputs: the student then matches the teacher around the data too.
Adam, the learning rate decaying to 0 on a cosine over all steps; a ``val_fraction`` of the rows is
held out and the epoch with the lowest validation loss is kept.

The student copies the teacher's input normaliser (``obs_mean``, ``obs_std``, ``obs_clip``: the same
buffers, bit for bit) and its metadata (task, spec, layout, label family, maze), and records
``distilled_from`` (the teacher's ``weights_sha256``), ``teacher_net`` (its architecture) and
``distill_config``. Training is deterministic given ``config.seed``.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from prm_critic import validate
from prm_critic.critic import as_obs_batch
from prm_critic.models.state_critic import ACTIVATIONS, StateCriticNet, TorchStateCritic
from prm_critic.models.train import check_val_fraction

__all__ = ["DistillConfig", "distill_state_critic", "distill_critic_from_data", "student_meta", "weight_bytes",
           "heldout_metrics", "check_data_layout", "load_teacher_split", "LOSSES", "TEACHER_ONLY_META"]

#: distillation losses: ``bce`` on the teacher's probabilities, ``mse`` on its logits
LOSSES = ("bce", "mse")
#: teacher metadata that describes the teacher's own training, not the student's: not copied
TEACHER_ONLY_META = ("train_config", "metrics", "data", "distilled_from", "distill_config", "teacher_net",
                     "teacher_metrics")


@dataclass(frozen=True)
class DistillConfig(validate.DictConfig):
    """Hyper-parameters of :func:`distill_state_critic`, checked once when the config is built.

    Attributes:
        hidden: hidden layer sizes of the student (``(32, 32)``: 2146 weights, 8.4 KB of float32).
        activation: ``relu``, ``tanh``, ``silu`` or ``elu``.
        loss: ``"bce"`` (binary cross-entropy on the teacher's probabilities) or ``"mse"`` (squared
            error on its logits).
        epochs: passes over the training rows.
        batch_size: rows per batch.
        lr: initial Adam learning rate (cosine decay to 0 over all steps).
        weight_decay: AdamW weight decay.
        noise: standard deviation of the Gaussian perturbation of each batch, in units of the
            teacher's normalised input (0: none).
        val_fraction: fraction of the rows held out to pick the best epoch, in ``[0, 1)`` (0: keep
            the last epoch).
        seed: seeds the student's initialisation, the validation rows, the batch order and the noise.
        num_threads: torch intra-op CPU threads while training (restored afterwards); ``None`` keeps
            torch's setting.
    """

    hidden: tuple[int, ...] = (32, 32)
    activation: str = "relu"
    loss: str = "bce"
    epochs: int = 100
    batch_size: int = 256
    lr: float = 3e-3
    weight_decay: float = 0.0
    noise: float = 0.0
    val_fraction: float = 0.1
    seed: int = 0
    num_threads: int | None = 1

    def __post_init__(self):
        hidden = self.hidden
        if isinstance(hidden, (str, bytes)) or not isinstance(hidden, Sequence) or not hidden:
            raise validate.ArgumentError(f"hidden: expected a non-empty list of positive layer sizes, got {hidden!r}")
        checked = {
            "hidden": tuple(validate.positive_int("hidden", h, unit="layer size") for h in hidden),
            "activation": validate.check_choice("activation", self.activation, sorted(ACTIVATIONS)),
            "loss": validate.check_choice("loss", self.loss, LOSSES),
            "epochs": validate.positive_int("epochs", self.epochs),
            "batch_size": validate.positive_int("batch_size", self.batch_size),
            "lr": validate.check_number("lr", self.lr, positive=True),
            "weight_decay": validate.check_number("weight_decay", self.weight_decay, low=0.0),
            "noise": validate.check_number("noise", self.noise, low=0.0),
            "val_fraction": check_val_fraction(self.val_fraction),
            "seed": validate.check_seed("seed", self.seed),
            "num_threads": validate.positive_int("num_threads", self.num_threads, allow_none=True),
        }
        validate.set_checked(self, checked)



def weight_bytes(net: StateCriticNet) -> int:
    """Bytes of the net's weights and biases (float32): what a batch-1 call reads from memory."""
    return int(sum(p.numel() * p.element_size() for p in net.parameters()))


def student_meta(teacher_meta: dict[str, Any], *, teacher_sha256: str, teacher_net: dict[str, Any],
                 config: DistillConfig) -> dict[str, Any]:
    """The student's metadata: the teacher's (task, spec, layout, label family, maze, ...) less what
    describes the teacher's own training (:data:`TEACHER_ONLY_META`), plus ``distilled_from`` (the
    teacher's ``weights_sha256``), ``teacher_net`` and ``distill_config``."""
    meta = {k: v for k, v in teacher_meta.items() if k not in TEACHER_ONLY_META}
    meta.update(distilled_from=teacher_sha256, teacher_net=dict(teacher_net), distill_config=config.to_dict())
    return meta


def _resolve_teacher(teacher) -> tuple[StateCriticNet, dict[str, Any], str]:
    """``(net, meta, weights_sha256)`` of a teacher given as a checkpoint path, a
    :class:`TorchStateCritic` or a bare :class:`StateCriticNet`."""
    from prm_critic.models.checkpoint import load_state_critic, weights_sha256

    if isinstance(teacher, (str, os.PathLike)):
        teacher = load_state_critic(teacher)
    if isinstance(teacher, TorchStateCritic):
        net, meta = teacher.net, dict(teacher.meta)
    elif isinstance(teacher, StateCriticNet):
        net, meta = teacher, {}
    else:
        raise validate.ArgumentError(f"teacher: expected a TorchStateCritic, a StateCriticNet or a checkpoint path, "
                                     f"got {type(teacher).__name__}")
    net = net.cpu().eval()
    return net, meta, weights_sha256(net)


def distill_state_critic(teacher, x_train, *, config: DistillConfig | None = None,
                         progress_bar: bool = False) -> tuple[TorchStateCritic, dict[str, Any]]:
    """Train a small student to reproduce ``teacher`` on the inputs ``x_train``.

    Args:
        teacher: the trained critic: a :class:`TorchStateCritic` (from
            :func:`~prm_critic.models.load_state_critic`), its checkpoint path, or a
            :class:`StateCriticNet` (no metadata to copy).
        x_train: critic inputs ``(N, obs_dim)`` to match the teacher on (its training inputs; no
            labels needed), finite.
        config: a :class:`DistillConfig` (``None``: defaults).
        progress_bar: show a tqdm bar over epochs.

    Returns:
        ``(student, history)``: the student as a :class:`TorchStateCritic` whose ``meta`` is
        :func:`student_meta` (save it with ``save_state_critic(path, student.net, student.meta)``), and
        per-epoch ``loss`` and ``val_loss`` lists plus ``best_epoch``, ``n_train_rows``, ``n_val_rows``,
        ``val_mae`` (mean absolute difference of the two heads' probabilities on the validation rows,
        ``None`` without them), ``weight_bytes`` and ``teacher_weight_bytes``.
    """
    config = DistillConfig() if config is None else config
    if not isinstance(config, DistillConfig):
        raise validate.ArgumentError(f"config: expected a DistillConfig, got {type(config).__name__}")
    validate.check_flag("progress_bar", progress_bar)
    net_t, meta_t, sha = _resolve_teacher(teacher)
    x = as_obs_batch(x_train, net_t.obs_dim, name="x_train")
    n_val = int(round(config.val_fraction * len(x)))
    if len(x) - n_val < 1:
        raise validate.ArgumentError(f"x_train: expected at least one training row after holding out "
                                     f"val_fraction={config.val_fraction} of {len(x)} rows, got {len(x) - n_val}")
    prev_threads = torch.get_num_threads()
    if config.num_threads is not None:
        torch.set_num_threads(config.num_threads)
    try:
        student, history = _distill(net_t, x, n_val, config, progress_bar)
    finally:
        if torch.get_num_threads() != prev_threads:
            torch.set_num_threads(prev_threads)
    history.update(weight_bytes=weight_bytes(student), teacher_weight_bytes=weight_bytes(net_t))
    meta = student_meta(meta_t, teacher_sha256=sha, teacher_net=net_t.config(), config=config)
    return TorchStateCritic(student, meta), history


def _init_student(teacher: StateCriticNet, config: DistillConfig) -> StateCriticNet:
    """A seeded student with the teacher's normaliser buffers copied exactly."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.seed)
        student = StateCriticNet(teacher.obs_dim, config.hidden, config.activation)
    with torch.no_grad():
        for name in ("obs_mean", "obs_std", "obs_clip"):
            getattr(student, name).copy_(getattr(teacher, name))
    return student


def _loss_fn(kind: str):
    if kind == "bce":
        return lambda z, u: F.binary_cross_entropy_with_logits(z, torch.sigmoid(u))
    return F.mse_loss


def _distill(teacher: StateCriticNet, x: np.ndarray, n_val: int, config: DistillConfig,
             progress_bar: bool) -> tuple[StateCriticNet, dict[str, Any]]:
    rng = np.random.default_rng([config.seed, 2])
    perm = rng.permutation(len(x))
    X = torch.from_numpy(np.ascontiguousarray(x))
    tr, va = torch.from_numpy(perm[n_val:]), torch.from_numpy(perm[:n_val])
    with torch.no_grad():
        U = teacher.logits(X)  # the teacher's logits on the unperturbed rows, computed once
    student = _init_student(teacher, config)
    opt = torch.optim.AdamW(student.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    n_batches = max(1, math.ceil(len(tr) / config.batch_size))
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=config.epochs * n_batches)
    loss_fn = _loss_fn(config.loss)
    gen = torch.Generator().manual_seed(config.seed)
    history: dict[str, Any] = {"loss": [], "val_loss": [], "best_epoch": None, "n_train_rows": int(len(tr)),
                               "n_val_rows": int(len(va))}
    best, best_state = math.inf, None
    bar = _bar(progress_bar, config.epochs)
    try:
        for epoch in range(config.epochs):
            order = tr[torch.from_numpy(rng.permutation(len(tr)))]
            total = 0.0
            student.train()
            for b in range(n_batches):
                idx = order[b * config.batch_size:(b + 1) * config.batch_size]
                xb, ub = _batch(teacher, X[idx], U[idx], config.noise, gen)
                loss = loss_fn(student.logits(xb), ub)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                sched.step()
                total += loss.item()
            history["loss"].append(total / n_batches)
            val = _val_loss(student, loss_fn, X, U, va)
            history["val_loss"].append(val)
            if val is not None and val < best:
                best, history["best_epoch"] = val, epoch + 1
                best_state = {k: v.detach().clone() for k, v in student.state_dict().items()}
            if bar is not None:
                bar.set_postfix({"loss": f"{history['loss'][-1]:.4f}"} | ({"val": f"{val:.4f}"} if val is not None else {}))
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    if best_state is not None:
        student.load_state_dict(best_state)
    student.eval()
    history["val_mae"] = _val_mae(student, teacher, X, va)
    return student, history


def _bar(enabled: bool, total: int):
    if not enabled:
        return None
    from prm_critic._optional import require

    return require("tqdm.auto", "torch").tqdm(total=total, desc="distill critic", unit="epoch")


def _batch(teacher: StateCriticNet, xb: torch.Tensor, ub: torch.Tensor, noise: float, gen: torch.Generator):
    """The batch and its teacher logits, perturbed by ``noise * obs_std * eps`` when ``noise > 0``."""
    if noise <= 0:
        return xb, ub
    xb = xb + noise * teacher.obs_std * torch.randn(xb.shape, generator=gen)
    with torch.no_grad():
        return xb, teacher.logits(xb)


@torch.no_grad()
def _val_loss(student: StateCriticNet, loss_fn, X: torch.Tensor, U: torch.Tensor, va: torch.Tensor) -> float | None:
    if not len(va):
        return None
    student.eval()
    return float(loss_fn(student.logits(X[va]), U[va]))


@torch.no_grad()
def _val_mae(student: StateCriticNet, teacher: StateCriticNet, X: torch.Tensor, va: torch.Tensor) -> float | None:
    if not len(va):
        return None
    return float((student(X[va]) - teacher(X[va])).abs().mean())


# --------------------------------------------------------------------------- from data folders

#: layout fields compared between the data and the teacher, in this order
LAYOUT_FIELDS = ("obs_dim", "keys", "sizes")


def check_data_layout(data_meta: dict[str, Any], teacher_meta: dict[str, Any], *, data: str, teacher: str) -> None:
    """One clear error naming the first field (``task``, then the layout's ``obs_dim``, ``keys``,
    ``sizes``) where a data folder's ``meta.json`` differs from the teacher's metadata."""
    if data_meta.get("task") != teacher_meta.get("task"):
        raise validate.ArgumentError(f"data: {data!r} holds task {data_meta.get('task')!r}, the teacher {teacher!r} "
                                     f"was trained on {teacher_meta.get('task')!r}; distil on the teacher's task")
    got, want = data_meta.get("layout"), teacher_meta.get("layout")
    if not isinstance(want, dict):
        raise validate.ArgumentError(f"critic: {teacher!r} records no input layout (meta['layout'] is {want!r}); "
                                     "it cannot be checked against the data")
    if not isinstance(got, dict):
        raise validate.ArgumentError(f"data: {data!r} records no input layout (meta.json 'layout' is {got!r})")
    for name in LAYOUT_FIELDS:
        if got.get(name) != want.get(name):
            raise validate.ArgumentError(
                f"data: the input layout of {data!r} differs from the teacher's in {name!r}: {got.get(name)!r} in the "
                f"data, {want.get(name)!r} in {teacher!r}; a critic scores only inputs of its own layout")


def _teacher_split(meta: dict[str, Any], teacher: str) -> tuple[float, int, list[int]]:
    """``(holdout, split_seed, test_episodes)`` the teacher's metadata records (``meta['data']``)."""
    rec = meta.get("data")
    keys = ("holdout", "split_seed", "test_episodes")
    if not isinstance(rec, dict) or any(k not in rec for k in keys):
        raise validate.ArgumentError(
            f"critic: {teacher!r} records no held-out split (meta['data'] with {list(keys)}; a checkpoint written by "
            f"`prm-critic train-critic` has one), got {rec!r}; the student is evaluated on the teacher's held-out episodes")
    return float(rec["holdout"]), int(rec["split_seed"]), [int(e) for e in rec["test_episodes"]]


def load_teacher_split(folders: list[str], teacher_meta: dict[str, Any], teacher: str):
    """``(train x rows, test StepTable)``: the teacher's training episodes of ``folders[0]`` (its split,
    checked against the held-out episodes the teacher records) and every episode of the other folders."""
    from prm_critic.robotics.collection import read_meta
    from prm_critic.robotics.dataset import load_steps, split_episodes

    for f in folders:
        check_data_layout(read_meta(f), teacher_meta, data=f, teacher=teacher)
    holdout, split_seed, test_eps = _teacher_split(teacher_meta, teacher)
    train, test = split_episodes(load_steps(folders[0], None), holdout=holdout, seed=split_seed)
    got = [int(e) for e in test.episodes]
    if got != sorted(test_eps):
        raise validate.ArgumentError(
            f"data: {folders[0]!r} is not the data {teacher!r} was trained on: its held-out split (holdout {holdout}, "
            f"split seed {split_seed}) is {len(got)} episodes {got[:8]}..., the teacher records {len(test_eps)} "
            f"episodes {sorted(test_eps)[:8]}...; pass the teacher's data folder first")
    held_out = _episode_digests(test)
    xs = [train.x]
    for f in folders[1:]:
        extra = load_steps(f, None)
        overlap = sorted((e, held_out[d]) for d, e in _episode_digests(extra).items() if d in held_out)
        if overlap:
            shown = ", ".join(f"{e} = held-out {h}" for e, h in overlap[:6]) + (", ..." if len(overlap) > 6 else "")
            raise validate.ArgumentError(
                f"data: {f!r} holds {len(overlap)} of the {len(held_out)} episodes {teacher!r} holds out (step for step "
                f"the same observations as those of {folders[0]!r}: its episode {shown}); the student would train on "
                "the episodes it is evaluated on. Pass extra folders of other episodes (another collection seed)")
        xs.append(extra.x)
    return np.concatenate(xs), test


def _episode_digests(table) -> dict[str, int]:
    """``{SHA-256 of an episode's observation rows: episode}``: episodes compared by content, not by name."""
    import hashlib

    out: dict[str, int] = {}
    for e in np.unique(table.episode):
        rows = np.ascontiguousarray(table.x[table.episode == e], np.float64)
        out[hashlib.sha256(str(rows.shape).encode() + rows.tobytes()).hexdigest()] = int(e)
    return out


def heldout_metrics(critic, test, teacher=None) -> dict[str, Any]:
    """:func:`~prm_critic.models.evaluate.evaluate_state_critic` on the held-out table ``test``, plus
    ``progress_mae`` against the spec's progress and, with ``teacher``, ``teacher_mae_progress`` /
    ``teacher_mae_success`` (mean absolute difference from the teacher's scores)."""
    from prm_critic.models.evaluate import evaluate_state_critic, score_in_batches

    m = evaluate_state_critic(critic, test.x, episode=test.episode, t=test.t, ep_success=test.ep_success)
    p, s = score_in_batches(critic, test.x)
    m["progress_mae"] = float(np.mean(np.abs(p - test.progress))) if np.all(np.isfinite(test.progress)) else None
    if teacher is not None:
        tp, ts = score_in_batches(teacher, test.x)
        m["teacher_mae_progress"] = float(np.mean(np.abs(p - tp)))
        m["teacher_mae_success"] = float(np.mean(np.abs(s - ts)))
    m["weight_bytes"] = weight_bytes(critic.net)
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in m.items()}


def distill_critic_from_data(critic, data, out, *, config: DistillConfig | None = None,
                             progress_bar: bool = False) -> dict[str, Any]:
    """Distil the checkpoint ``critic`` on its own training episodes and evaluate teacher and student on
    its held-out episodes (what ``prm-critic distill`` runs).

    Args:
        critic: the teacher's checkpoint path (written by ``prm-critic train-critic``: its
            ``meta['data']`` records the held-out split).
        data: the teacher's data folder, or a list of folders whose first is the teacher's: the
            student trains on that folder's training episodes (the teacher's split, checked against the
            held-out episodes the teacher records) and on every episode of the other folders. Labels are
            not needed. Each folder's task and input layout must be the teacher's, and no episode of
            the other folders may be one of the teacher's held-out episodes (compared by content: the
            teacher's folder again or a recollection with the same seeds is refused).
        out: the student's checkpoint path (stem, or ``.safetensors`` / ``.json``).
        config: a :class:`DistillConfig`.
        progress_bar: show a tqdm bar over epochs.

    Returns:
        ``{"checkpoint", "metrics_path", "teacher", "student", "history", "meta"}``: the student's
        ``.safetensors`` path, ``OUT.metrics.json``, the held-out metrics of both (:func:`heldout_metrics`),
        the training history and the student's metadata.
    """
    import json
    from pathlib import Path

    from prm_critic._io import atomic_write_bytes
    from prm_critic.models.checkpoint import checkpoint_paths, load_state_critic, save_state_critic

    folders = [str(data)] if isinstance(data, (str, os.PathLike)) else [str(f) for f in data]
    if not folders:
        raise validate.ArgumentError("data: expected at least one data folder, got none")
    teacher = load_state_critic(critic)
    x_train, test = load_teacher_split(folders, teacher.meta, str(critic))
    student, history = distill_state_critic(teacher, x_train, config=config, progress_bar=progress_bar)
    res_t = heldout_metrics(teacher, test)
    res_s = heldout_metrics(student, test, teacher=teacher)
    rec = dict(teacher.meta["data"], extra=[Path(f).name for f in folders[1:]], n_train_rows=int(len(x_train)))
    meta = dict(student.meta, metrics=res_s, teacher_metrics=res_t, data=rec)
    w_path, _ = checkpoint_paths(out)
    stem = w_path.with_suffix("")
    save_state_critic(stem, student.net, meta)
    metrics_path = stem.with_name(stem.name + ".metrics.json")
    doc = {"student": res_s, "teacher": res_t, "history": history, "distill_config": meta["distill_config"],
           "distilled_from": meta["distilled_from"], "data": rec}
    atomic_write_bytes(metrics_path, json.dumps(doc, indent=2, sort_keys=True).encode())
    return {"checkpoint": w_path, "metrics_path": metrics_path, "teacher": res_t, "student": res_s,
            "history": history, "meta": meta}
