"""The statistics of the benchmark scripts, one definition each: AUROC of two score samples (the
library's :func:`prm_critic.models.evaluate.auroc`) and its stratified bootstrap, the percentile
bootstrap of a mean (a paired difference is the mean of its differences), Student t, Wilson and
Clopper-Pearson intervals, the exact sign test, the exact McNemar test of paired wins and Holm's
adjustment."""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np

__all__ = ["auroc", "bootstrap_auroc", "resample_indices", "bootstrap_mean", "t_interval", "wilson",
           "clopper_pearson", "sign_test_p", "mcnemar", "holm"]

#: the 0.975 quantile of the standard normal (two-sided 95 %)
Z95 = 1.959963984540054


def auroc(pos, neg) -> float:
    """P(a score of ``pos`` outscores one of ``neg``), ties one half; NaN when either side is empty."""
    from prm_critic.models.evaluate import auroc as auroc_of

    pos, neg = np.asarray(pos, np.float64).reshape(-1), np.asarray(neg, np.float64).reshape(-1)
    if not pos.size or not neg.size:
        return float("nan")
    return auroc_of(np.concatenate([pos, neg]), np.r_[np.ones(pos.size, bool), np.zeros(neg.size, bool)])


def bootstrap_auroc(pos, neg, *, n: int = 2000, seed: int = 0) -> tuple[float, float]:
    """95 % percentile bootstrap interval of :func:`auroc`, stratified (each resample draws ``len(pos)``
    positives and ``len(neg)`` negatives with replacement); NaNs when either side is empty."""
    pos, neg = np.asarray(pos, float), np.asarray(neg, float)
    if len(pos) == 0 or len(neg) == 0:
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    vals = [auroc(rng.choice(pos, len(pos)), rng.choice(neg, len(neg))) for _ in range(n)]
    lo, hi = np.percentile(vals, [2.5, 97.5])
    return float(lo), float(hi)


def resample_indices(size: int, *, n: int = 2000, seed: int = 0) -> np.ndarray:
    """``(n, size)`` indices into ``size`` items, each row a bootstrap resample (drawn with replacement)."""
    return np.random.default_rng(seed).integers(0, size, size=(n, size))


def bootstrap_mean(values, *, n: int = 2000, seed: int = 0) -> tuple[float, float] | None:
    """95 % percentile bootstrap interval of the mean of ``values`` (``None`` for fewer than 2). For a
    paired difference, pass the differences."""
    if len(values) < 2:
        return None
    v = np.asarray(values, dtype=float)
    means = v[resample_indices(len(v), n=n, seed=seed)].mean(axis=1)
    return float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))


def t_interval(values, level: float = 0.95) -> dict[str, Any]:
    """Mean of the finite ``values`` (``None`` entries skipped) with its Student-t interval:
    ``{"n", "mean", "lo", "hi", "sd"}`` (``lo = hi = None`` for fewer than 2 values)."""
    from scipy import stats

    v = np.asarray([x for x in values if x is not None and math.isfinite(x)], dtype=float)
    n = len(v)
    if n == 0:
        return {"n": 0, "mean": None, "lo": None, "hi": None, "sd": None}
    mean = float(v.mean())
    if n < 2:
        return {"n": 1, "mean": mean, "lo": None, "hi": None, "sd": None}
    sd = float(v.std(ddof=1))
    half = float(stats.t.ppf(0.5 + level / 2, n - 1)) * sd / math.sqrt(n)
    return {"n": n, "mean": mean, "lo": mean - half, "hi": mean + half, "sd": sd}


def _check_counts(k: Any, n: Any) -> None:
    if not (isinstance(k, int) and isinstance(n, int) and 0 <= k <= n):
        raise ValueError(f"k, n: expected ints with 0 <= k <= n, got k={k!r}, n={n!r}")


def wilson(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """95 % Wilson score interval of ``k`` successes in ``n`` trials (exactly 0 / 1 at ``k = 0`` / ``k = n``);
    NaNs when ``n`` is 0 (no trials: no rate)."""
    _check_counts(k, n)
    if n == 0:
        return float("nan"), float("nan")
    p = k / n
    den = 1 + z * z / n
    mid = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    lo, hi = max(0.0, mid - half), min(1.0, mid + half)
    return (0.0 if k == 0 else lo), (1.0 if k == n else hi)


def clopper_pearson(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """Exact binomial interval of ``k`` successes in ``n`` (bisection on the binomial tail)."""
    def tail_ge(p):  # P(X >= k)
        return sum(math.comb(n, i) * p ** i * (1 - p) ** (n - i) for i in range(k, n + 1))

    def solve(f, target):
        lo, hi = 0.0, 1.0
        for _ in range(100):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if f(mid) < target else (lo, mid)
        return (lo + hi) / 2

    a = (1 - level) / 2
    lower = 0.0 if k == 0 else solve(tail_ge, a)
    upper = 1.0 if k == n else solve(lambda p: -(1 - tail_ge(p) + math.comb(n, k) * p ** k * (1 - p) ** (n - k)), -a)
    return lower, upper


def sign_test_p(k: int, n: int) -> float:
    """Two-sided exact sign test: the probability, under Binomial(n, 1/2), of an outcome at most as
    likely as ``k`` (for p = 1/2: ``min(1, 2 * P(X <= min(k, n - k)))``); 1.0 when ``n == 0``.
    Exact rational arithmetic, the same value as ``scipy.stats.binomtest(k, n, 0.5).pvalue``."""
    _check_counts(k, n)
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(k, n - k) + 1))
    return float(min(Fraction(1), Fraction(2 * tail, 2 ** n)))


def mcnemar(a: dict[tuple, bool], b: dict[tuple, bool]) -> dict:
    """Exact McNemar test (a sign test on the discordant pairs) of two methods' wins on the same
    episodes (the keys both have). ``a_only`` / ``b_only``: pairs only ``a`` / only ``b`` won; ``p``:
    two-sided; ``share_ci``: 95 % Clopper-Pearson interval of ``a``'s share of the discordant pairs
    (1/2 = no difference; ``None`` without discordant pairs)."""
    keys = sorted(set(a) & set(b))
    a_only = sum(1 for k in keys if a[k] and not b[k])
    b_only = sum(1 for k in keys if b[k] and not a[k])
    both = sum(1 for k in keys if a[k] and b[k])
    n = a_only + b_only
    return {"pairs": len(keys), "both": both, "neither": len(keys) - both - n, "a_only": a_only, "b_only": b_only,
            "p": sign_test_p(a_only, n), "share_ci": clopper_pearson(a_only, n) if n else None}


def holm(ps: list[float]) -> list[float]:
    """Holm's step-down adjustment of ``ps`` (family-wise error over the tests given), in their order."""
    order = sorted(range(len(ps)), key=lambda i: ps[i])
    out, running = [0.0] * len(ps), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(ps) - rank) * ps[i]))
        out[i] = running
    return out
