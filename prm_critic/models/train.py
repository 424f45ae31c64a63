"""Train a :class:`~prm_critic.models.state_critic.StateCriticNet` on per-step labels.

Plain arrays in, a trained net out: no dependency on how the steps were collected.

Loss per batch ``b`` (``z_p``, ``z_s`` are the progress and success logits)::

    L = BCE(z_p[b], progress[b])                                   (soft targets, never rounded)
      + BCE(z_s[b & mask], success[b & mask])                      (masked where a label is missing)
      + pairwise_weight * mean_{(i, j) in P_b, h in heads} loss(z_h[j] - z_h[i])

``P_b`` is a fresh sample of ``pairs_per_batch`` step pairs ``(i, j)`` drawn from the same
*successful* episode with ``t_i < t_j`` (the later step should score higher), and
``loss(d) = softplus(margin - d)`` (``pairwise_loss="logistic"``) or ``relu(margin - d)``
(``"hinge"``), on logits. ``BCE`` is ``binary_cross_entropy_with_logits`` averaged over the
batch.

The input normaliser of the net is set from the training data: ``obs_mean`` = mean of ``x``,
``obs_std = max(std of x, config.std_floor)`` per feature, and the normalised input is clipped to
``[-config.obs_clip, config.obs_clip]`` (see :mod:`prm_critic.models.state_critic`). Training is
deterministic given ``config.seed`` (numpy batch sampling, torch init under a forked RNG), and
resumable: pass ``state_path`` and a killed run restarts from its last finished epoch (the state
is written atomically after every epoch, safetensors + JSON).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from prm_critic import validate
from prm_critic._optional import require
from prm_critic.critic import as_obs_batch
from prm_critic._io import atomic_write_bytes
from prm_critic.models.state_critic import (
    ACTIVATIONS,
    OBS_CLIP,
    STD_FLOOR,
    StateCriticNet,
    check_obs_clip,
    check_std_floor,
)

__all__ = ["TrainConfig", "train_state_critic", "sample_pairs", "check_training_arrays", "TrainingArrays"]

_PAIR_HEADS = ("progress", "success")


def check_val_fraction(value: Any) -> float:
    """The fraction of rows (or episodes) held out for validation: a number in ``[0, 1)``."""
    v = validate.check_number("val_fraction", value, low=0.0)
    if v >= 1.0:
        raise validate.ArgumentError(f"val_fraction: expected a number >= 0.0 and < 1.0, got {value!r}")
    return v


@dataclass(frozen=True)
class TrainConfig(validate.DictConfig):
    """Hyper-parameters of :func:`train_state_critic`, checked once when the config is built
    (:mod:`prm_critic.validate`; checked values replace the given ones: ``hidden`` a tuple of ints,
    numbers as ``float``). Frozen: ``dataclasses.replace(config, epochs=3)`` makes another.

    Attributes:
        hidden: hidden layer sizes of the MLP.
        activation: ``relu``, ``tanh``, ``silu`` or ``elu``.
        lr: Adam learning rate.
        batch_size: steps per batch.
        epochs: passes over the training steps (the maximum, with early stopping).
        weight_decay: AdamW weight decay.
        pairwise_weight: weight of the pairwise ranking loss; 0 disables it. The default 0.1 keeps
            most of the rank-correlation gain for little label error
            (``docs/results/state_critic_pairwise.md``).
        pairwise_margin: margin on the logit difference ``z(later) - z(earlier)``.
        pairwise_loss: ``"logistic"`` (``softplus(margin - d)``) or ``"hinge"`` (``relu(margin - d)``).
        pairwise_heads: heads the ranking loss applies to (``progress`` and/or ``success``).
        pairs_per_batch: pairs sampled per batch (``None``: ``batch_size``).
        val_fraction: fraction of the training *episodes* held out for early stopping (0: none).
        patience: epochs without a validation-loss improvement before stopping (needs
            ``val_fraction > 0``); the best weights are restored.
        max_grad_norm: gradient-norm clip (``None``: no clipping).
        seed: seeds weight init, batch order and pair sampling.
        device: torch device, ``"cpu"`` or ``"cuda[:i]"``.
        num_threads: torch intra-op CPU threads while training (restored afterwards); ``None``
            keeps torch's setting. A small MLP trains fastest on one thread: more threads only add
            synchronisation, and on a busy machine they slow it down by an order of magnitude.
        std_floor: floor of the normaliser's per-feature standard deviation,
            ``obs_std = max(std(x), std_floor)`` (> 0). A feature that is constant in the training
            data then turns input noise ``delta`` into at most ``delta / std_floor`` after
            normalisation, instead of an arbitrarily large value.
        obs_clip: the normalised input is clipped to ``[-obs_clip, obs_clip]`` (> 0; ``None``: no
            clipping), as stable-baselines3's ``VecNormalize`` does; inputs far outside the
            training range, up to the float32 maximum, then give finite scores.
    """

    hidden: tuple[int, ...] = (256, 256)
    activation: str = "relu"
    lr: float = 1e-3
    batch_size: int = 256
    epochs: int = 30
    weight_decay: float = 0.0
    pairwise_weight: float = 0.1
    pairwise_margin: float = 0.0
    pairwise_loss: str = "logistic"
    pairwise_heads: tuple[str, ...] = ("progress", "success")
    pairs_per_batch: int | None = None
    val_fraction: float = 0.0
    patience: int | None = None
    max_grad_norm: float | None = 10.0
    seed: int = 0
    device: str = "cpu"
    num_threads: int | None = 1
    std_floor: float = STD_FLOOR
    obs_clip: float | None = OBS_CLIP

    def __post_init__(self):
        hidden = (self.hidden,) if isinstance(self.hidden, (int, np.integer)) and not isinstance(self.hidden, bool) \
            else self.hidden
        if isinstance(hidden, (str, bytes)) or not isinstance(hidden, Sequence) or not hidden:
            raise validate.ArgumentError(f"hidden: expected a non-empty list of positive layer sizes, got {hidden!r}")
        heads = (self.pairwise_heads,) if isinstance(self.pairwise_heads, str) else tuple(self.pairwise_heads)
        if not heads or any(h not in _PAIR_HEADS for h in heads) or len(set(heads)) != len(heads):
            raise validate.ArgumentError(f"pairwise_heads: expected a non-empty subset of {list(_PAIR_HEADS)}, "
                                         f"got {self.pairwise_heads!r}")
        checked = {
            "hidden": tuple(validate.check_int("hidden", h, minimum=1) for h in hidden),
            "activation": validate.check_choice("activation", self.activation, sorted(ACTIVATIONS)),
            "lr": validate.check_number("lr", self.lr, positive=True),
            "batch_size": validate.check_int("batch_size", self.batch_size, minimum=1),
            "epochs": validate.check_int("epochs", self.epochs, minimum=1),
            "weight_decay": validate.check_number("weight_decay", self.weight_decay, low=0.0),
            "pairwise_weight": validate.check_number("pairwise_weight", self.pairwise_weight, low=0.0),
            "pairwise_margin": validate.check_number("pairwise_margin", self.pairwise_margin, low=0.0),
            "pairwise_loss": validate.check_choice("pairwise_loss", self.pairwise_loss, ("logistic", "hinge")),
            "pairwise_heads": heads,
            "pairs_per_batch": validate.check_int("pairs_per_batch", self.pairs_per_batch, minimum=1, allow_none=True),
            "val_fraction": check_val_fraction(self.val_fraction),
            "patience": validate.check_int("patience", self.patience, minimum=1, allow_none=True),
            "max_grad_norm": validate.check_number("max_grad_norm", self.max_grad_norm, positive=True, allow_none=True),
            "seed": validate.check_int("seed", self.seed, minimum=0),
            "num_threads": validate.check_int("num_threads", self.num_threads, minimum=1, allow_none=True),
            "std_floor": check_std_floor(self.std_floor),
            "obs_clip": None if self.obs_clip is None else check_obs_clip(self.obs_clip),
        }
        if checked["pairwise_loss"] == "hinge" and checked["pairwise_weight"] > 0 and checked["pairwise_margin"] == 0:
            raise validate.ArgumentError("pairwise_margin: the hinge loss needs a margin > 0 (it is 0 for any correct "
                                         f"order otherwise), got {self.pairwise_margin!r}")
        if checked["patience"] is not None and checked["val_fraction"] == 0:
            raise validate.ArgumentError(f"patience: expected None unless val_fraction > 0 (early stopping watches the "
                                         f"validation episodes), got patience={self.patience} with val_fraction=0")
        if checked["obs_clip"] is not None and math.isinf(checked["obs_clip"]):
            raise validate.ArgumentError(f"obs_clip: expected a finite number > 0 or None (no clipping), "
                                         f"got {self.obs_clip!r}")
        if not isinstance(self.device, str) or not (self.device == "cpu" or self.device.startswith("cuda")):
            raise validate.ArgumentError(f"device: expected 'cpu' or 'cuda[:index]', got {self.device!r}")
        validate.set_checked(self, checked)



@dataclass
class TrainingArrays:
    """Validated training arrays (see :func:`check_training_arrays`)."""

    x: np.ndarray  # (N, D) float32
    progress: np.ndarray  # (N,) float32 in [0, 1]
    success: np.ndarray  # (N,) float32 in [0, 1] (0 where mask is False)
    mask: np.ndarray  # (N,) bool
    episode: np.ndarray  # (N,) int64
    t: np.ndarray  # (N,) int64
    ep_success: np.ndarray  # (N,) bool


def _vec(name: str, v: Any, n: int) -> np.ndarray:
    a = np.asarray(v)
    if a.ndim != 1 or a.shape[0] != n:
        raise ValueError(f"{name}: expected shape ({n},) (one value per row of x), got shape {a.shape}")
    return a


def _labels(name: str, v: Any, n: int, valid: np.ndarray | None = None) -> np.ndarray:
    a = _vec(name, v, n)
    if a.dtype == object or not (np.issubdtype(a.dtype, np.floating) or np.issubdtype(a.dtype, np.integer) or a.dtype == np.bool_):
        raise TypeError(f"{name}: expected real-valued labels in [0, 1], got dtype {a.dtype}")
    a = a.astype(np.float64)
    sel = np.ones(n, bool) if valid is None else valid
    bad = sel & ~np.isfinite(a)
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(f"{name}: expected finite labels in [0, 1], got {a[i]} at index {i}")
    out = sel & ((a < 0) | (a > 1))
    if out.any():
        i = int(np.argmax(out))
        raise ValueError(f"{name}: expected labels in [0, 1], got {a[i]} at index {i}")
    return np.where(sel, a, 0.0).astype(np.float32)


def _ints(name: str, v: Any, n: int) -> np.ndarray:
    a = _vec(name, v, n)
    if not np.issubdtype(a.dtype, np.integer):
        if np.issubdtype(a.dtype, np.floating) and np.all(np.isfinite(a)) and np.all(a == np.round(a)):
            a = a.astype(np.int64)
        else:
            raise TypeError(f"{name}: expected integer values, got dtype {a.dtype}")
    return a.astype(np.int64)


def check_training_arrays(x, progress, success, *, episode, t, ep_success, mask=None) -> TrainingArrays:
    """Validate and convert training arrays; one clear error naming the parameter on bad input.

    Args:
        x: critic inputs ``(N, D)``, finite.
        progress: soft progress labels ``(N,)`` in [0, 1].
        success: soft success labels ``(N,)`` in [0, 1] where ``mask`` is True (anything, NaN
            included, elsewhere).
        episode: episode id of each step ``(N,)`` (integers).
        t: time index of each step in its episode ``(N,)`` (integers, unique within an episode).
        ep_success: whether the step's episode succeeded ``(N,)`` bool, constant within an episode.
        mask: ``(N,)`` bool, where the success label exists (``None``: everywhere).
    """
    x = as_obs_batch(x, None, name="x")
    n = x.shape[0]
    if n == 0:
        raise ValueError("x: expected at least one step, got shape (0, D)")
    if mask is None:
        mask = np.ones(n, bool)
    else:
        mask = _vec("mask", mask, n)
        if mask.dtype != np.bool_:
            raise TypeError(f"mask: expected a bool array, got dtype {mask.dtype}")
    progress = _labels("progress", progress, n)
    success = _labels("success", success, n, valid=mask)
    episode = _ints("episode", episode, n)
    t = _ints("t", t, n)
    eps = _vec("ep_success", ep_success, n)
    if eps.dtype != np.bool_:
        if np.issubdtype(eps.dtype, np.number) and np.all(np.isin(eps, (0, 1))):
            eps = eps.astype(bool)
        else:
            raise TypeError(f"ep_success: expected a bool array (the episode's final success), got dtype {eps.dtype}")
    # ep_success constant within an episode; (episode, t) unique
    order = np.lexsort((t, episode))
    e_s, t_s, s_s = episode[order], t[order], eps[order]
    same = e_s[1:] == e_s[:-1]
    if np.any(same & (s_s[1:] != s_s[:-1])):
        e = int(e_s[1:][same & (s_s[1:] != s_s[:-1])][0])
        raise ValueError(f"ep_success: expected one value per episode, got both True and False in episode {e}")
    if np.any(same & (t_s[1:] == t_s[:-1])):
        k = int(np.argmax(same & (t_s[1:] == t_s[:-1])))
        raise ValueError(f"t: expected unique time indices within an episode, got t={int(t_s[k])} twice in episode {int(e_s[k])}")
    return TrainingArrays(x, progress, success, mask.astype(bool), episode, t, eps)


class _PairIndex:
    """Steps of successful episodes grouped by episode, for sampling ordered pairs."""

    def __init__(self, episode: np.ndarray, t: np.ndarray, ep_success: np.ndarray):
        idx = np.nonzero(ep_success)[0]
        order = idx[np.lexsort((t[idx], episode[idx]))]
        e = episode[order]
        starts = np.r_[0, np.nonzero(e[1:] != e[:-1])[0] + 1] if len(e) else np.zeros(0, np.int64)
        lens = np.diff(np.r_[starts, len(e)]) if len(e) else np.zeros(0, np.int64)
        keep = lens >= 2
        self.order = order  # dataset indices sorted by (episode, t)
        self.starts = starts[keep]
        self.lens = lens[keep]
        # sample anchors with probability proportional to the episode length (every step equally)
        self.n_steps = int(self.lens.sum())
        self.cum = np.cumsum(self.lens)

    def __bool__(self) -> bool:
        return self.n_steps > 0

    def sample(self, rng: np.random.Generator, k: int) -> tuple[np.ndarray, np.ndarray]:
        """``k`` pairs ``(earlier, later)`` of dataset indices from the same successful episode."""
        a = rng.integers(0, self.n_steps, size=k)
        ep = np.searchsorted(self.cum, a, side="right")
        off_a = a - (self.cum[ep] - self.lens[ep])
        off_b = rng.integers(0, self.lens[ep] - 1)  # any other step of the episode
        off_b = off_b + (off_b >= off_a)
        lo, hi = np.minimum(off_a, off_b), np.maximum(off_a, off_b)
        base = self.starts[ep]
        return self.order[base + lo], self.order[base + hi]


def sample_pairs(episode, t, ep_success, k: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Sample ``k`` ordered pairs ``(i, j)`` of step indices with ``episode[i] == episode[j]``,
    ``t[i] < t[j]`` and the episode successful. Returns two int arrays ``(k,)`` (empty when no
    successful episode has two steps)."""
    pi = _PairIndex(np.asarray(episode), np.asarray(t), np.asarray(ep_success, bool))
    if not pi:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return pi.sample(np.random.default_rng(seed), k)


def _fingerprint(arrs: TrainingArrays, config: TrainConfig) -> str:
    h = hashlib.sha256()
    for a in (arrs.x, arrs.progress, arrs.success, arrs.mask, arrs.episode, arrs.t, arrs.ep_success):
        h.update(np.ascontiguousarray(a).tobytes())
        h.update(str(a.shape).encode())
    h.update(json.dumps(config.to_dict(), sort_keys=True).encode())
    return h.hexdigest()


def _split_val(arrs: TrainingArrays, frac: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    eps = np.unique(arrs.episode)
    if frac == 0:
        return np.arange(len(arrs.x)), np.zeros(0, np.int64)
    rng = np.random.default_rng([seed, 1])
    n_val = int(round(frac * len(eps)))
    if n_val < 1 or n_val >= len(eps):
        raise ValueError(f"val_fraction: {frac} of {len(eps)} episodes leaves no training or no validation episode")
    val_eps = rng.permutation(eps)[:n_val]
    is_val = np.isin(arrs.episode, val_eps)
    return np.nonzero(~is_val)[0], np.nonzero(is_val)[0]


def _state_files(stem: Path) -> tuple[Path, Path]:
    """``(<stem>.train-state.json, <stem>.train-state.safetensors)``."""
    return stem.with_name(stem.name + ".train-state.json"), stem.with_name(stem.name + ".train-state.safetensors")


def _save_state(path: Path, net, opt, best_state, payload: dict) -> None:
    from safetensors.torch import save as st_save

    tensors = {f"net.{k}": v.detach().cpu().contiguous() for k, v in net.state_dict().items()}
    if best_state is not None:
        tensors.update({f"best.{k}": v.detach().cpu().contiguous() for k, v in best_state.items()})
    osd = opt.state_dict()
    for pid, st in osd["state"].items():
        for k, v in st.items():
            tensors[f"opt.{pid}.{k}"] = torch.as_tensor(v).detach().cpu().contiguous().clone()
    payload = dict(payload, param_groups=osd["param_groups"], opt_keys=sorted(
        f"{pid}.{k}" for pid, st in osd["state"].items() for k in st))
    j, w = _state_files(path)
    # weights first, then the JSON that points at them: a kill between the two leaves the old JSON,
    # whose epoch no longer matches the weights' epoch tag -> detected and ignored on resume.
    atomic_write_bytes(w, st_save(tensors, metadata={"epoch": str(payload["epoch"])}))
    atomic_write_bytes(j, json.dumps(payload, sort_keys=True).encode())


def _load_state(path: Path, fingerprint: str):
    from safetensors import safe_open
    from safetensors.torch import load_file

    j, w = _state_files(path)
    if not (j.is_file() and w.is_file()):
        return None
    try:
        payload = json.loads(j.read_text())
        with safe_open(str(w), framework="pt") as f:
            tag = (f.metadata() or {}).get("epoch")
        tensors = load_file(str(w))
    except Exception:  # a corrupt resume state is not worth crashing over: start afresh
        return None
    if payload.get("fingerprint") != fingerprint or tag != str(payload.get("epoch")):
        return None
    return payload, tensors


def train_state_critic(
    x,
    progress,
    success,
    *,
    episode,
    t,
    ep_success,
    mask=None,
    config: TrainConfig | None = None,
    progress_bar: bool = True,
    state_path: str | os.PathLike | None = None,
    on_epoch_end: Callable[[int, dict], None] | None = None,
) -> tuple[StateCriticNet, dict]:
    """Train a state critic on per-step soft labels.

    Args:
        x: critic inputs ``(N, D)``.
        progress: progress labels ``(N,)`` in [0, 1] (soft; used as floats).
        success: success labels ``(N,)`` in [0, 1] where ``mask`` holds.
        episode: episode id per step ``(N,)``.
        t: time index per step ``(N,)``.
        ep_success: the episode's final success per step ``(N,)`` bool (pairs come from successful
            episodes only).
        mask: ``(N,)`` bool, where the success label exists (``None``: everywhere).
        config: :class:`TrainConfig` (``None``: defaults).
        progress_bar: show a tqdm bar over epochs.
        state_path: if given, the training state is saved next to it
            (``<state_path>.train-state.safetensors`` + ``.train-state.json``) after every epoch and a matching state (same data and config) is resumed from.
            Removed when training finishes.
        on_epoch_end: called as ``on_epoch_end(epoch, history)`` after each epoch (after the state
            is saved).

    Returns:
        ``(net, history)``: the trained net (eval mode, on CPU) and a dict of per-epoch lists
        (``loss``, ``bce_progress``, ``bce_success``, ``pairwise``, ``val_loss``) plus
        ``epochs_run``, ``best_epoch``, ``n_train_steps``, ``n_val_steps``, ``n_pair_episodes``.
    """
    config = validate.config_from(TrainConfig, config)
    prev_threads = torch.get_num_threads()
    if config.num_threads is not None:
        torch.set_num_threads(config.num_threads)
    try:
        arrs = check_training_arrays(x, progress, success, episode=episode, t=t, ep_success=ep_success, mask=mask)
        return _train(arrs, config, progress_bar=progress_bar, state_path=state_path, on_epoch_end=on_epoch_end)
    finally:
        if torch.get_num_threads() != prev_threads:
            torch.set_num_threads(prev_threads)


def _train(arrs: TrainingArrays, config: TrainConfig, *, progress_bar: bool, state_path: str | os.PathLike | None,
           on_epoch_end: Callable[[int, dict], None] | None) -> tuple[StateCriticNet, dict]:
    """Train on the checked arrays ``arrs`` (torch's threads already set by :func:`train_state_critic`)."""
    device = torch.device(config.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device: {config.device!r} requested but CUDA is not available")

    tr, va = _split_val(arrs, config.val_fraction, config.seed)
    net = _init_net(arrs, tr, config, device)
    opt = torch.optim.AdamW(net.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    losses = _make_losses(net, arrs, config, device)
    pairs = _PairIndex(arrs.episode[tr], arrs.t[tr], arrs.ep_success[tr])
    use_pairs = config.pairwise_weight > 0 and bool(pairs)

    history: dict[str, Any] = {k: [] for k in ("loss", "bce_progress", "bce_success", "pairwise", "val_loss")}
    history.update(best_epoch=None, n_train_steps=int(len(tr)), n_val_steps=int(len(va)),
                   n_pair_episodes=int(len(pairs.lens)) if use_pairs else 0, resumed_from_epoch=0)
    loop = _Loop(history=history, rng=np.random.default_rng([config.seed, 0]), fingerprint=_fingerprint(arrs, config))
    sp = None
    if state_path is not None:
        sp = Path(state_path)
        _resume(sp, net, opt, loop)

    run = _Run(net=net, opt=opt, losses=losses, tr=tr, va=va, pairs=pairs if use_pairs else None, config=config,
               state_path=sp, progress_bar=progress_bar, on_epoch_end=on_epoch_end)
    stopped = _run_epochs(run, loop)
    if loop.best_state is not None:
        net.load_state_dict(loop.best_state)
    history = loop.history
    history["epochs_run"] = len(history["loss"])
    history["early_stopped"] = stopped
    if sp is not None:
        for f in _state_files(sp):
            if f.exists():
                f.unlink()
    return net.cpu().eval(), history


@dataclass
class _Loop:
    """What the training loop carries from epoch to epoch (and saves to resume)."""

    history: dict[str, Any]
    rng: np.random.Generator
    fingerprint: str
    best_val: float = math.inf
    best_state: dict | None = None
    bad_epochs: int = 0
    start_epoch: int = 0


@dataclass(frozen=True)
class _Run:
    """What one training run fixes before its first epoch, passed whole to :func:`_run_epochs`."""

    net: StateCriticNet
    opt: Any
    losses: Callable[..., Any]  # _make_losses
    tr: np.ndarray  # training rows
    va: np.ndarray  # validation rows (early stopping), possibly empty
    pairs: _PairIndex | None  # None: no ranking loss
    config: TrainConfig
    state_path: Path | None  # where the resumable training state is saved
    progress_bar: bool
    on_epoch_end: Callable[[int, dict], None] | None


def _init_net(arrs, tr: np.ndarray, config: TrainConfig, device) -> StateCriticNet:
    """A seeded network with input normalisation fitted on the training rows ``tr``."""
    xt = arrs.x[tr]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.seed)
        net = StateCriticNet(arrs.x.shape[1], config.hidden, config.activation)
    xt64 = xt.astype(np.float64)
    net.set_normalization(xt64.mean(axis=0), xt64.std(axis=0), std_floor=config.std_floor, obs_clip=config.obs_clip)
    net.to(device)
    return net


def _make_losses(net: StateCriticNet, arrs, config: TrainConfig, device):
    """``losses(idx, pair_idx=None) -> (bce_progress, masked bce_success, pairwise)`` on rows ``idx``."""

    def dev(a):
        return torch.from_numpy(np.ascontiguousarray(a)).to(device)

    X, P, S, M = dev(arrs.x), dev(arrs.progress), dev(arrs.success), dev(arrs.mask)
    heads = [("progress", "success").index(h) for h in config.pairwise_heads]

    def losses(idx: np.ndarray, pair_idx=None):
        ii = dev(idx)
        z = net.logits(X[ii])
        lp = F.binary_cross_entropy_with_logits(z[:, 0], P[ii])
        m = M[ii]
        n_m = m.sum()
        if n_m > 0:
            ls = (F.binary_cross_entropy_with_logits(z[:, 1], S[ii], reduction="none") * m).sum() / n_m
        else:
            ls = z.new_zeros(())
        lpair = z.new_zeros(())
        if pair_idx is not None:
            a, b = (dev(v) for v in pair_idx)
            d = net.logits(X[b])[:, heads] - net.logits(X[a])[:, heads]
            arg = config.pairwise_margin - d
            lpair = (F.softplus(arg) if config.pairwise_loss == "logistic" else F.relu(arg)).mean()
        return lp, ls, lpair

    return losses


def _resume(sp: Path, net: StateCriticNet, opt, loop: _Loop) -> None:
    """Restore net, optimiser and loop state from the training state at ``sp``, if it matches."""
    loaded = _load_state(sp, loop.fingerprint)
    if loaded is None:
        return
    payload, tensors = loaded
    net.load_state_dict({k[4:]: v for k, v in tensors.items() if k.startswith("net.")})
    best = {k[5:]: v for k, v in tensors.items() if k.startswith("best.")}
    loop.best_state = best or None
    osd: dict[str, Any] = {"param_groups": payload["param_groups"], "state": {}}
    for key in payload["opt_keys"]:
        pid, name = key.split(".", 1)
        osd["state"].setdefault(int(pid), {})[name] = tensors[f"opt.{key}"]
    opt.load_state_dict(osd)
    loop.history = payload["history"]
    loop.rng.bit_generator.state = payload["rng"]
    loop.best_val = payload["best_val"] if payload["best_val"] is not None else math.inf
    loop.bad_epochs = payload["bad_epochs"]
    loop.start_epoch = payload["epoch"]
    loop.history["resumed_from_epoch"] = loop.start_epoch


def _train_epoch(net: StateCriticNet, opt, losses, tr: np.ndarray, pairs, config: TrainConfig, rng) -> np.ndarray:
    """One pass over the shuffled training rows; returns the mean ``[bce_progress, bce_success, pairwise]``."""
    n_batches = max(1, math.ceil(len(tr) / config.batch_size))
    k_pairs = config.pairs_per_batch or config.batch_size
    net.train()
    perm = tr[rng.permutation(len(tr))]
    sums = np.zeros(3)
    for b in range(n_batches):
        idx = perm[b * config.batch_size : (b + 1) * config.batch_size]
        pair_idx = pairs.sample(rng, k_pairs) if pairs is not None else None
        if pair_idx is not None:
            pair_idx = (tr[pair_idx[0]], tr[pair_idx[1]])
        lp, ls, lpair = losses(idx, pair_idx)
        loss = lp + ls + config.pairwise_weight * lpair
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if config.max_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(net.parameters(), config.max_grad_norm)
        opt.step()
        sums += [lp.item(), ls.item(), lpair.item()]
    sums /= n_batches
    return sums


def _validate(net: StateCriticNet, losses, va: np.ndarray, epoch: int, loop: _Loop) -> float | None:
    """Validation loss after ``epoch`` (``None`` without validation rows); keeps the best weights."""
    if not len(va):
        return None
    net.eval()
    with torch.no_grad():
        vp, vs, _ = losses(va)
    val = float(vp + vs)
    if val < loop.best_val - 1e-6:
        loop.best_val, loop.bad_epochs = val, 0
        loop.best_state = {k: v.detach().clone() for k, v in net.state_dict().items()}
        loop.history["best_epoch"] = epoch + 1
    else:
        loop.bad_epochs += 1
    return val


def _run_epochs(run: _Run, loop: _Loop) -> bool:
    """Train from ``loop.start_epoch`` to ``run.config.epochs``; returns whether early stopping fired."""
    config, net = run.config, run.net
    bar = None
    if run.progress_bar:
        tqdm = require("tqdm.auto", "torch").tqdm

        bar = tqdm(total=config.epochs, initial=loop.start_epoch, desc="train critic", unit="epoch")
    stopped = False
    try:
        for epoch in range(loop.start_epoch, config.epochs):
            sums = _train_epoch(net, run.opt, run.losses, run.tr, run.pairs, config, loop.rng)
            history = loop.history
            history["bce_progress"].append(float(sums[0]))
            history["bce_success"].append(float(sums[1]))
            history["pairwise"].append(float(sums[2]))
            history["loss"].append(float(sums[0] + sums[1] + config.pairwise_weight * sums[2]))
            val = _validate(net, run.losses, run.va, epoch, loop)
            history["val_loss"].append(val)
            if config.patience is not None and loop.bad_epochs >= config.patience:
                stopped = True
            if run.state_path is not None:
                _save_state(run.state_path, net, run.opt, loop.best_state, {
                    "fingerprint": loop.fingerprint, "epoch": epoch + 1, "history": history,
                    "rng": loop.rng.bit_generator.state,
                    "best_val": None if loop.best_val == math.inf else loop.best_val,
                    "bad_epochs": loop.bad_epochs})
            if bar is not None:
                post = {"loss": f"{history['loss'][-1]:.4f}"}
                if val is not None:
                    post["val"] = f"{val:.4f}"
                bar.set_postfix(post)
                bar.update(1)
            if run.on_epoch_end is not None:
                run.on_epoch_end(epoch + 1, history)
            if stopped:
                break
    finally:
        if bar is not None:
            bar.close()
    return stopped
