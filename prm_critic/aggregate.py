"""Aggregate per-step scores into one trajectory score.

Which aggregate is right depends on the use: ``min`` flags the weakest step (common for PRMs),
``product`` treats steps as independent success probabilities (penalises long trajectories),
``last`` trusts the final step's promise (search-and-learn), ``mean`` is a smooth average.

All functions take ``scores`` of shape ``(T,)`` or ``(B, T)`` and reduce the last axis.
An optional boolean ``mask`` of the same shape marks valid steps (for padded batches).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

__all__ = ["agg_min", "agg_product", "agg_last", "agg_mean", "aggregate", "AGGREGATES"]


def _prep(scores, mask):
    s = np.asarray(scores, dtype=np.float64)
    if s.ndim not in (1, 2):
        raise ValueError(f"scores: expected shape (T,) or (B, T), got shape {s.shape}")
    if s.shape[-1] == 0:
        raise ValueError("scores: expected at least one step, got an empty last axis")
    if not np.all(np.isfinite(s)):
        raise ValueError("scores: expected finite values, got NaN or inf")
    if mask is None:
        m = np.ones_like(s, dtype=bool)
    else:
        m = np.asarray(mask, dtype=bool)
        if m.shape != s.shape:
            raise ValueError(f"mask: expected shape {s.shape} (same as scores), got {m.shape}")
        if not np.all(m.any(axis=-1)):
            raise ValueError("mask: every trajectory needs at least one valid step")
    return s, m


def agg_min(scores, mask=None) -> np.ndarray | float:
    """Minimum over steps: ``min_t s_t``."""
    s, m = _prep(scores, mask)
    out = np.where(m, s, np.inf).min(axis=-1)
    return float(out) if out.ndim == 0 else out


def agg_product(scores, mask=None) -> np.ndarray | float:
    """Product over steps: ``prod_t s_t`` (computed in log space for stability)."""
    s, m = _prep(scores, mask)
    with np.errstate(divide="ignore"):
        logs = np.where(m, np.log(np.clip(s, 0.0, None)), 0.0)
    out = np.exp(logs.sum(axis=-1))
    return float(out) if out.ndim == 0 else out


def agg_last(scores, mask=None) -> np.ndarray | float:
    """Score of the last valid step: ``s_T``."""
    s, m = _prep(scores, mask)
    idx = s.shape[-1] - 1 - np.argmax(m[..., ::-1], axis=-1)
    out = np.take_along_axis(s, np.asarray(idx)[..., None], axis=-1)[..., 0]
    return float(out) if out.ndim == 0 else out


def agg_mean(scores, mask=None) -> np.ndarray | float:
    """Mean over valid steps: ``(1/T) sum_t s_t``."""
    s, m = _prep(scores, mask)
    out = np.where(m, s, 0.0).sum(axis=-1) / m.sum(axis=-1)
    return float(out) if out.ndim == 0 else out


AGGREGATES: dict[str, Callable] = {
    "min": agg_min,
    "product": agg_product,
    "last": agg_last,
    "mean": agg_mean,
}


def aggregate(scores, how: str = "min", mask=None):
    """Aggregate step scores with the named rule (``min``, ``product``, ``last`` or ``mean``)."""
    if how not in AGGREGATES:
        raise ValueError(f"how: expected one of {sorted(AGGREGATES)}, got {how!r}")
    return AGGREGATES[how](scores, mask)
