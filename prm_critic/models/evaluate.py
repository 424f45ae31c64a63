"""Evaluate a state critic on held-out episodes (numpy only; no sklearn / scipy needed).

Metrics of :func:`evaluate_state_critic` (``s`` = the critic's success score of a step, ``y`` = its
episode's final success, ``p`` = the progress score):

* ``auroc_success``: AUROC of ``s`` against ``y`` over all steps (Mann-Whitney U, ties count 1/2);
* ``auroc_success_early``: the same over the first ``ceil(early_fraction * L)`` steps of each
  episode of ``L`` steps (early prediction: the meaningful one, late states give success away);
* ``spearman_progress_time``: Spearman rank correlation of ``p`` with ``t`` inside each successful
  episode (ties get average ranks), averaged over successful episodes; an episode where ``p`` is
  constant counts as 0 (no ordering);
* ``spearman_success_time``: the same for ``s``;
* ``brier_success``: ``mean((s - y)^2)`` over all steps.
"""

from __future__ import annotations

import io
import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from prm_critic._optional import require
from prm_critic.critic import BaseCritic, as_obs_batch

__all__ = ["rankdata", "auroc", "spearman", "evaluate_state_critic", "plot_episode_scores", "score_in_batches"]


def rankdata(a) -> np.ndarray:
    """1-based ranks of ``a`` ``(N,)`` with ties given their average rank (float64 ``(N,)``)."""
    a = np.asarray(a, dtype=np.float64).reshape(-1)
    if a.size and not np.all(np.isfinite(a)):
        raise ValueError(f"a: expected finite values to rank, got {a[~np.isfinite(a)][0]}")
    _, inv, cnt = np.unique(a, return_inverse=True, return_counts=True)
    ends = np.cumsum(cnt)
    avg = ends - (cnt - 1) / 2.0
    return avg[inv.reshape(-1)]


def auroc(scores, labels) -> float:
    """Area under the ROC curve of ``scores`` ``(N,)`` for binary ``labels`` ``(N,)``.

    Equals P(score of a random positive > score of a random negative) + 0.5 P(tie). Returns NaN
    when only one class is present.
    """
    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    y = np.asarray(labels).reshape(-1)
    if s.shape != y.shape:
        raise ValueError(f"labels: expected shape {s.shape} (one per score), got {y.shape}")
    if y.dtype != np.bool_:
        if not np.all(np.isin(y, (0, 1))):
            raise ValueError(f"labels: expected binary labels (bool or 0/1), got values {np.unique(y)[:5]}")
        y = y.astype(bool)
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    r = rankdata(s)
    return float((r[y].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


def spearman(a, b) -> float:
    """Spearman rank correlation of ``a`` and ``b`` ``(N,)`` (average ranks for ties; Pearson of
    the ranks). NaN when either is constant or ``N < 2``."""
    a = np.asarray(a, dtype=np.float64).reshape(-1)
    b = np.asarray(b, dtype=np.float64).reshape(-1)
    if a.shape != b.shape:
        raise ValueError(f"b: expected shape {a.shape} (same as a), got {b.shape}")
    if a.size < 2:
        return float("nan")
    ra, rb = rankdata(a), rankdata(b)
    ra -= ra.mean()
    rb -= rb.mean()
    den = math.sqrt(float((ra * ra).sum() * (rb * rb).sum()))
    if den == 0:
        return float("nan")
    return float((ra * rb).sum() / den)


def score_in_batches(critic: BaseCritic, x: np.ndarray, batch_size: int = 8192):
    """``critic.score`` over ``x`` ``(N, D)`` in chunks; returns ``(progress, success)`` ``(N,)`` each."""
    ps, ss = [], []
    for i in range(0, len(x), batch_size):
        sc = critic.score(x[i : i + batch_size])
        ps.append(sc.progress)
        ss.append(sc.success)
    return np.concatenate(ps).astype(np.float64), np.concatenate(ss).astype(np.float64)


def _episode_arrays(x, episode, t, ep_success, obs_dim):
    x = as_obs_batch(x, obs_dim, name="x")
    n = x.shape[0]
    if n == 0:
        raise ValueError("x: expected at least one step, got 0")
    out = []
    for name, v in (("episode", episode), ("t", t), ("ep_success", ep_success)):
        a = np.asarray(v)
        if a.shape != (n,):
            raise ValueError(f"{name}: expected shape ({n},) (one value per row of x), got shape {a.shape}")
        out.append(a)
    e, tt, y = out
    if y.dtype != np.bool_:
        if not np.all(np.isin(y, (0, 1))):
            raise ValueError(f"ep_success: expected a bool array, got values {np.unique(y)[:5]}")
        y = y.astype(bool)
    return x, e, tt, y


def _early_mask(episode: np.ndarray, t: np.ndarray, frac: float) -> np.ndarray:
    """Steps among the first ``ceil(frac * L)`` (by ``t``) of each episode of ``L`` steps."""
    order = np.lexsort((t, episode))
    e = episode[order]
    starts = np.r_[0, np.nonzero(e[1:] != e[:-1])[0] + 1]
    lens = np.diff(np.r_[starts, len(e)])
    pos = np.arange(len(e)) - np.repeat(starts, lens)
    keep_n = np.maximum(1, np.ceil(frac * lens)).astype(np.int64)
    m = np.zeros(len(e), bool)
    m[order] = pos < np.repeat(keep_n, lens)
    return m


def mean_episode_spearman(score, episode, t, y) -> tuple[float, int]:
    vals = []
    for e in np.unique(episode[y]):
        sel = episode == e
        if sel.sum() < 2:
            continue
        r = spearman(score[sel], t[sel])
        vals.append(0.0 if math.isnan(r) else r)
    return (float(np.mean(vals)) if vals else float("nan")), len(vals)


def evaluate_state_critic(critic: BaseCritic, x, *, episode, t, ep_success, early_fraction: float = 0.25) -> dict[str, Any]:
    """Held-out metrics of a state critic (see the module docstring).

    Args:
        critic: any state :class:`~prm_critic.critic.BaseCritic`.
        x: critic inputs ``(N, D)``.
        episode: episode id per step ``(N,)``.
        t: time index per step ``(N,)``.
        ep_success: the episode's final success per step ``(N,)`` bool.
        early_fraction: fraction of each episode used by ``auroc_success_early``, in (0, 1].

    Returns:
        dict of floats (NaN where undefined, e.g. AUROC with one class) and counts
        ``n_steps``, ``n_episodes``, ``n_success_episodes``, ``n_spearman_episodes``.
    """
    if not (isinstance(early_fraction, (int, float)) and 0 < early_fraction <= 1):
        raise ValueError(f"early_fraction: expected a number in (0, 1], got {early_fraction!r}")
    x, e, tt, y = _episode_arrays(x, episode, t, ep_success, getattr(critic, "obs_dim", None))
    p, s = score_in_batches(critic, x)
    early = _early_mask(e, tt, early_fraction)
    sp_p, n_sp = mean_episode_spearman(p, e, tt, y)
    sp_s, _ = mean_episode_spearman(s, e, tt, y)
    eps = np.unique(e)
    return {
        "auroc_success": auroc(s, y),
        "auroc_success_early": auroc(s[early], y[early]),
        "spearman_progress_time": sp_p,
        "spearman_success_time": sp_s,
        "brier_success": float(np.mean((s - y) ** 2)),
        "early_fraction": float(early_fraction),
        "n_steps": int(len(x)),
        "n_episodes": int(len(eps)),
        "n_success_episodes": int(len(np.unique(e[y]))),
        "n_spearman_episodes": int(n_sp),
    }


def plot_episode_scores(critic: BaseCritic, x, episode, t, ep_success, path: str | os.PathLike, n: int = 6, *,
                        progress_label=None, seed: int = 0, title: str | None = None) -> Path:
    """PNG of the critic's progress and success along ``n`` episodes (half successes, half failures
    where available; successes green, failures red). ``progress_label`` ``(N,)``, if given, is drawn
    dashed for comparison. Written atomically; returns the path."""
    FigureCanvasAgg = require("matplotlib.backends.backend_agg", "torch").FigureCanvasAgg
    Figure = require("matplotlib.figure", "torch").Figure

    from prm_critic._io import atomic_write_bytes

    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n: expected a positive int (episodes to plot), got {n!r}")
    x, e, tt, y = _episode_arrays(x, episode, t, ep_success, getattr(critic, "obs_dim", None))
    if progress_label is not None:
        progress_label = np.asarray(progress_label, dtype=np.float64)
        if progress_label.shape != (len(x),):
            raise ValueError(f"progress_label: expected shape ({len(x)},), got {progress_label.shape}")
    rng = np.random.default_rng(seed)
    succ = rng.permutation(np.unique(e[y]))
    fail = rng.permutation(np.unique(e[~y]))
    n_s = min(len(succ), max(n - min(len(fail), n // 2), 0))
    chosen = [(int(v), True) for v in succ[:n_s]] + [(int(v), False) for v in fail[: n - n_s]]
    fig = Figure(figsize=(10, 4.2))
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, 2, sharex=True)
    for ax, head in zip(axes, ("progress", "success")):
        ax.set_title(head)
        ax.set_xlabel("step t")
        ax.set_ylim(-0.03, 1.03)
        ax.grid(alpha=0.3)
    shades = {True: ["#1b7837", "#5aae61", "#a6dba0", "#00441b"], False: ["#b2182b", "#d6604d", "#f4a582", "#67001f"]}
    counts = {True: 0, False: 0}
    for ep, ok in chosen:
        sel = np.nonzero(e == ep)[0]
        sel = sel[np.argsort(tt[sel])]
        sc = critic.score(x[sel])
        c = shades[ok][counts[ok] % 4]
        counts[ok] += 1
        lab = f"ep {ep} ({'success' if ok else 'failure'})"
        axes[0].plot(tt[sel], sc.progress, color=c, label=lab)
        axes[1].plot(tt[sel], sc.success, color=c, label=lab)
        if progress_label is not None:
            axes[0].plot(tt[sel], progress_label[sel], color=c, ls="--", lw=0.8)
    if chosen:
        axes[1].legend(fontsize=7, loc="best")
    if progress_label is not None:
        axes[0].text(0.01, 0.99, "dashed: label", transform=axes[0].transAxes, va="top", fontsize=7)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    out = Path(path)
    atomic_write_bytes(out, buf.getvalue())
    return out
