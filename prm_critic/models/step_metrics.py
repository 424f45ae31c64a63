"""Step-level metrics of a process reward model (numpy only), as the PRM literature reports them.

A trajectory is a sequence of steps; its *first error* is the index of its first wrong step (for a
game: the first step after which the game can no longer be won), or ``-1`` when no step is wrong.
A PRM scores every step; with a threshold ``tau`` it *predicts* the first error as the first step
scored below ``tau`` (``-1`` when none is).

* ``first_error_accuracy``: the share of trajectories whose predicted first error is exactly the
  true one (``-1`` included);
* ``acc_error`` / ``acc_correct``: that accuracy over the trajectories with an error and over those
  without one;
* ``f1``: ProcessBench's score, the harmonic mean ``2 a e / (a + e)`` of ``acc_error`` and
  ``acc_correct`` (0 when either is 0): a critic that never flags anything has ``acc_correct = 1``,
  ``acc_error = 0`` and F1 0, one that flags every trajectory at its first step the reverse;
* ``value_order_correlation``: for progress, the Spearman correlation of the step scores with a
  reference order inside each trajectory (the step index on a won trajectory, or Monte-Carlo
  values), averaged over trajectories with at least two steps and a non-constant reference.

:func:`best_threshold` picks ``tau`` on tuning trajectories (the F1-maximising one of the candidate
thresholds); report on other trajectories with that ``tau``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from prm_critic.models.evaluate import spearman

__all__ = ["first_error_step", "process_error_metrics", "best_threshold", "value_order_correlation"]


def _scores(s: Any, i: int) -> np.ndarray:
    a = np.asarray(s, dtype=np.float64)
    if a.ndim != 1:
        raise ValueError(f"step_scores[{i}]: expected one score per step (1-D), got shape {a.shape}")
    if a.size and not np.all(np.isfinite(a)):
        raise ValueError(f"step_scores[{i}]: expected finite scores, got {a[~np.isfinite(a)][0]}")
    return a


def first_error_step(scores: Any, threshold: float) -> int:
    """Index of the first score below ``threshold`` in ``scores`` ``(T,)``, or ``-1`` when none is."""
    a = _scores(scores, 0)
    if not math.isfinite(threshold):
        raise ValueError(f"threshold: expected a finite number, got {threshold!r}")
    below = np.flatnonzero(a < threshold)
    return int(below[0]) if below.size else -1


def _check(step_scores: Sequence[Any], first_errors: Sequence[int]) -> list[np.ndarray]:
    if len(step_scores) != len(first_errors):
        raise ValueError(f"first_errors: expected one per trajectory ({len(step_scores)}), got {len(first_errors)}")
    out = []
    for i, (s, e) in enumerate(zip(step_scores, first_errors)):
        a = _scores(s, i)
        if isinstance(e, bool) or not isinstance(e, (int, np.integer)) or not -1 <= int(e) < a.size:
            raise ValueError(f"first_errors[{i}]: expected -1 (no error) or a step index in [0, {a.size - 1}], got {e!r}")
        out.append(a)
    return out


def process_error_metrics(step_scores: Sequence[Any], first_errors: Sequence[int], threshold: float) -> dict[str, float]:
    """First-error accuracy and ProcessBench F1 of the scores ``step_scores`` (one ``(T_i,)`` array
    per trajectory) against the true ``first_errors`` (``-1``: no error), at ``threshold``.

    Returns ``n``, ``n_error``, ``n_correct``, ``first_error_accuracy``, ``acc_error``,
    ``acc_correct`` and ``f1`` (NaN for an accuracy over no trajectory, and for F1 when either is NaN).
    """
    arrays = _check(step_scores, first_errors)
    if not arrays:
        raise ValueError("step_scores: expected at least one trajectory, got none")
    pred = np.array([first_error_step(a, threshold) for a in arrays])
    true = np.array([int(e) for e in first_errors])
    hit = pred == true
    err = true >= 0
    acc_e = float(hit[err].mean()) if err.any() else float("nan")
    acc_c = float(hit[~err].mean()) if (~err).any() else float("nan")
    if math.isnan(acc_e) or math.isnan(acc_c):
        f1 = float("nan")
    else:
        f1 = 0.0 if acc_e + acc_c == 0 else 2 * acc_e * acc_c / (acc_e + acc_c)
    return {"n": int(true.size), "n_error": int(err.sum()), "n_correct": int((~err).sum()),
            "first_error_accuracy": float(hit.mean()), "acc_error": acc_e, "acc_correct": acc_c, "f1": f1,
            "threshold": float(threshold)}


def best_threshold(step_scores: Sequence[Any], first_errors: Sequence[int],
                   candidates: Sequence[float] | None = None) -> float:
    """The threshold of ``candidates`` (default: every distinct score, and one above the largest) with
    the highest F1 on these (tuning) trajectories; ties go to the smallest threshold. Needs
    trajectories with and without an error."""
    arrays = _check(step_scores, first_errors)
    if not any(int(e) >= 0 for e in first_errors) or not any(int(e) < 0 for e in first_errors):
        raise ValueError("first_errors: expected tuning trajectories both with and without an error, got "
                         f"{sum(int(e) >= 0 for e in first_errors)} with and {sum(int(e) < 0 for e in first_errors)} without")
    if candidates is None:
        allv = np.unique(np.concatenate(arrays))
        candidates = [*allv.tolist(), float(np.nextafter(allv[-1], np.inf))] if allv.size else [0.0]
    best, best_f1 = None, -1.0
    for tau in sorted(float(c) for c in candidates):
        f1 = process_error_metrics(arrays, first_errors, tau)["f1"]
        if f1 > best_f1:
            best, best_f1 = tau, f1
    assert best is not None
    return best


def value_order_correlation(step_values: Sequence[Any], references: Sequence[Any] | None = None) -> dict[str, float]:
    """Mean Spearman correlation, per trajectory, of the step values with ``references`` (one ``(T_i,)``
    array per trajectory; default: the step index, the order of a trajectory that makes progress).
    Trajectories with fewer than two steps or a constant reference are left out (``n`` counts the
    others); a trajectory whose values are constant counts 0 (no order)."""
    if references is not None and len(references) != len(step_values):
        raise ValueError(f"references: expected one per trajectory ({len(step_values)}), got {len(references)}")
    rhos = []
    for i, v in enumerate(step_values):
        a = _scores(v, i)
        r = np.arange(a.size, dtype=np.float64) if references is None else np.asarray(references[i], np.float64)
        if r.shape != a.shape:
            raise ValueError(f"references[{i}]: expected shape {a.shape} (one per step), got {r.shape}")
        if a.size < 2 or np.all(r == r[0]):
            continue
        rho = spearman(a, r)
        rhos.append(0.0 if math.isnan(rho) else rho)
    return {"n": len(rhos), "mean": float(np.mean(rhos)) if rhos else float("nan")}
