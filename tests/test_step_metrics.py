"""Step-level PRM metrics (prm_critic.models.step_metrics): first-error accuracy, ProcessBench F1,
the F1-maximising threshold and value-order correlation, over the whole range of trajectories
(property tests) and on the inputs they refuse."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prm_critic.models.step_metrics import (
    best_threshold,
    first_error_step,
    process_error_metrics,
    value_order_correlation,
)

# trajectories: (length, first error or -1), at least one with and one without an error
traj = st.integers(1, 12).flatmap(lambda n: st.tuples(st.just(n), st.integers(-1, n - 1)))
mixed = st.lists(traj, min_size=2, max_size=20).filter(
    lambda ts: any(e >= 0 for _, e in ts) and any(e < 0 for _, e in ts))


def _perfect(ts, rng):
    """High before the first error, low from it on (anything below 0.5 after it)."""
    out = []
    for n, e in ts:
        s = rng.uniform(0.6, 1.0, n)
        if e >= 0:
            s[e] = rng.uniform(0.0, 0.4)
            s[e + 1:] = rng.uniform(0.0, 1.0, n - e - 1)
        out.append(s)
    return out


@settings(max_examples=60, deadline=None)
@given(mixed, st.integers(0, 2**31 - 1))
def test_a_critic_that_drops_exactly_at_the_first_error_scores_f1_one(ts, seed):
    rng = np.random.default_rng(seed)
    scores, errors = _perfect(ts, rng), [e for _, e in ts]
    m = process_error_metrics(scores, errors, 0.5)
    assert m["f1"] == 1.0 and m["first_error_accuracy"] == 1.0
    assert m["n_error"] + m["n_correct"] == m["n"] == len(ts)
    tau = best_threshold(scores, errors)
    assert process_error_metrics(scores, errors, tau)["f1"] == 1.0


@settings(max_examples=60, deadline=None)
@given(mixed)
def test_a_critic_that_never_flags_has_f1_zero_and_one_that_always_flags_at_once_too(ts):
    errors = [e for _, e in ts]
    never = process_error_metrics([np.ones(n) for n, _ in ts], errors, 0.5)
    assert never["acc_correct"] == 1.0 and never["acc_error"] == 0.0 and never["f1"] == 0.0
    at_once = process_error_metrics([np.zeros(n) for n, _ in ts], errors, 0.5)
    assert at_once["acc_correct"] == 0.0 and at_once["f1"] == 0.0
    assert at_once["acc_error"] == pytest.approx(np.mean([e == 0 for e in errors if e >= 0]))


@settings(max_examples=80, deadline=None)
@given(mixed, st.integers(0, 2**31 - 1), st.floats(0.0, 1.0))
def test_f1_lies_between_the_two_accuracies_and_is_their_harmonic_mean(ts, seed, tau):
    rng = np.random.default_rng(seed)
    scores, errors = [rng.uniform(0, 1, n) for n, _ in ts], [e for _, e in ts]
    m = process_error_metrics(scores, errors, tau)
    a, e = m["acc_error"], m["acc_correct"]
    assert min(a, e) - 1e-12 <= m["f1"] <= max(a, e) + 1e-12
    assert m["f1"] == pytest.approx(0.0 if a + e == 0 else 2 * a * e / (a + e))
    # the threshold picked on these trajectories is at least as good as this one
    assert process_error_metrics(scores, errors, best_threshold(scores, errors))["f1"] >= m["f1"] - 1e-12


def test_first_error_step_and_one_sided_sets():
    assert first_error_step([0.9, 0.7, 0.2, 0.9], 0.5) == 2
    assert first_error_step([0.9, 0.7], 0.5) == -1 and first_error_step([], 0.5) == -1
    only_ok = process_error_metrics([[0.9, 0.8]], [-1], 0.5)
    assert only_ok["acc_correct"] == 1.0 and math.isnan(only_ok["acc_error"]) and math.isnan(only_ok["f1"])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(2, 15), min_size=1, max_size=10), st.integers(0, 2**31 - 1))
def test_value_order_correlation_is_one_for_increasing_minus_one_for_decreasing(lengths, seed):
    rng = np.random.default_rng(seed)
    inc = [np.sort(rng.uniform(0, 1, n) + np.arange(n)) for n in lengths]
    assert value_order_correlation(inc) == {"n": len(lengths), "mean": pytest.approx(1.0)}
    assert value_order_correlation([v[::-1] for v in inc])["mean"] == pytest.approx(-1.0)
    assert value_order_correlation([np.full(n, 0.3) for n in lengths])["mean"] == 0.0  # no order
    # a reference order: Monte-Carlo values, the same order as the values
    assert value_order_correlation(inc, [2 * v for v in inc])["mean"] == pytest.approx(1.0)


def test_value_order_correlation_leaves_out_what_has_no_order():
    r = value_order_correlation([[0.5], [0.1, 0.2]], [[1.0], [3.0, 3.0]])
    assert r["n"] == 0 and math.isnan(r["mean"])


@pytest.mark.parametrize("call, match", [
    (lambda: process_error_metrics([[0.5]], [0, 1], 0.5), r"first_errors: expected one per trajectory \(1\), got 2"),
    (lambda: process_error_metrics([[0.5, 0.2]], [2], 0.5), r"first_errors\[0\]: expected -1 \(no error\) or a step index in \[0, 1\], got 2"),
    (lambda: process_error_metrics([[0.5, 0.2]], [True], 0.5), r"first_errors\[0\]: .* got True"),
    (lambda: process_error_metrics([[0.5, float("nan")]], [-1], 0.5), r"step_scores\[0\]: expected finite scores, got nan"),
    (lambda: process_error_metrics([[[0.5]]], [-1], 0.5), r"step_scores\[0\]: expected one score per step \(1-D\), got shape \(1, 1\)"),
    (lambda: process_error_metrics([], [], 0.5), "expected at least one trajectory"),
    (lambda: first_error_step([0.5], float("inf")), "threshold: expected a finite number, got inf"),
    (lambda: best_threshold([[0.5], [0.2]], [-1, -1]), "both with and without an error, got 0 with and 2 without"),
    (lambda: value_order_correlation([[0.1, 0.2]], [[1.0]]), r"references\[0\]: expected shape \(2,\)"),
    (lambda: value_order_correlation([[0.1, 0.2]], []), r"references: expected one per trajectory \(1\), got 0"),
])
def test_inputs_it_cannot_score_are_refused_by_name(call, match):
    with pytest.raises(ValueError, match=match):
        call()
