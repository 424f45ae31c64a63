"""Critic interface, check_critic, aggregation."""

import numpy as np
import pytest

from prm_critic import BaseCritic, StepScores, aggregate, agg_last, agg_mean, agg_min, agg_product, check_critic
from prm_critic.critic import as_obs_batch


class RowwiseCritic(BaseCritic):
    obs_dim = 3

    def score(self, steps):
        x = as_obs_batch(steps, self.obs_dim)
        s = 1 / (1 + np.exp(-x.sum(axis=1)))
        return StepScores(s, 1 - s)


class BatchLeakCritic(RowwiseCritic):
    """Scores depend on the rest of the batch: check_critic must catch it."""

    def score(self, steps):
        x = as_obs_batch(steps, self.obs_dim)
        s = 1 / (1 + np.exp(-(x - x.mean(axis=0)).sum(axis=1)))
        return StepScores(s, s)


class OutOfRangeCritic(RowwiseCritic):
    def score(self, steps):
        x = as_obs_batch(steps, self.obs_dim)
        return StepScores(x[:, 0] * 10, x[:, 0])


def test_check_critic_accepts_rowwise_critic():
    x = np.random.default_rng(0).normal(size=(7, 3))
    out = check_critic(RowwiseCritic(), x)
    assert out.progress.shape == (7,) and out.success.dtype == np.float32


def test_check_critic_catches_batch_dependence():
    x = np.random.default_rng(0).normal(size=(5, 3))
    with pytest.raises(AssertionError, match="differs from the single-step score"):
        check_critic(BatchLeakCritic(), x)


def test_check_critic_catches_out_of_range():
    x = np.abs(np.random.default_rng(0).normal(size=(4, 3))) + 0.5
    with pytest.raises(AssertionError, match=r"in \[0, 1\]"):
        check_critic(OutOfRangeCritic(), x)


@pytest.mark.parametrize(
    "bad, match",
    [
        (np.array([[1.0, np.nan, 0.0]]), "expected finite values"),
        (np.array([[1.0, np.inf, 0.0]]), "expected finite values"),
        (np.zeros((2, 4)), r"expected shape \(B, 3\)"),
        (np.zeros(3), r"batch-first, 2-D"),
        (np.array([["a", "b", "c"]]), "dtype"),
    ],
)
def test_obs_validation_errors_name_the_problem(bad, match):
    with pytest.raises((ValueError, TypeError), match=match):
        RowwiseCritic().score(bad)


def test_aggregates_by_hand():
    s = np.array([0.9, 0.5, 0.8])
    assert agg_min(s) == pytest.approx(0.5)
    assert agg_product(s) == pytest.approx(0.36)
    assert agg_last(s) == pytest.approx(0.8)
    assert agg_mean(s) == pytest.approx(2.2 / 3)


def test_aggregates_batched_with_mask():
    s = np.array([[0.9, 0.5, 0.8], [0.2, 0.7, 0.0]])
    m = np.array([[True, True, True], [True, True, False]])
    np.testing.assert_allclose(aggregate(s, "min", m), [0.5, 0.2])
    np.testing.assert_allclose(aggregate(s, "last", m), [0.8, 0.7])
    np.testing.assert_allclose(aggregate(s, "product", m), [0.36, 0.14])
    np.testing.assert_allclose(aggregate(s, "mean", m), [2.2 / 3, 0.45])


def test_aggregate_errors():
    with pytest.raises(ValueError, match="how: expected one of"):
        aggregate([0.5], "median")
    with pytest.raises(ValueError, match="finite"):
        aggregate([0.5, np.nan])
    with pytest.raises(ValueError, match="mask: expected shape"):
        aggregate([[0.5, 0.1]], "min", [[True]])
