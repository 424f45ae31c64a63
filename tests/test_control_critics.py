"""Uninformed control critics (``RandomCritic``, ``ConstantCritic``): deterministic under a seed,
independent of batch and call order, ties broken at random, and the same policy-call budget as any
other critic in the beam search."""

from __future__ import annotations

import numpy as np
import pytest

from prm_critic import BaseCritic, ConstantCritic, RandomCritic, StepScores, check_critic
from prm_critic.text import TextStep


def steps(n: int, prompt: str = "cook the meal") -> list[TextStep]:
    return [TextStep(prompt, ("act(open fridge)",), f"act(take item {i})\nresult: taken {i}") for i in range(n)]


@pytest.mark.parametrize("make", [RandomCritic, lambda seed: ConstantCritic(0.5, seed=seed)])
def test_deterministic_under_a_seed_and_independent_of_batch_order(make):
    batch = steps(12)
    a, b = make(3).score(batch), make(3).score(batch)
    np.testing.assert_array_equal(a.success, b.success)
    np.testing.assert_array_equal(a.progress, b.progress)
    assert not np.array_equal(a.success, make(4).score(batch).success)  # another seed, other scores
    perm = np.random.default_rng(0).permutation(12)
    np.testing.assert_array_equal(make(3).score([batch[i] for i in perm]).success, a.success[perm])
    check_critic(make(3), batch)  # shapes, [0, 1], batched == one at a time
    check_critic(make(3), np.arange(24.0).reshape(8, 3))  # state batches too


def test_text_step_score_ignores_its_notes_but_not_its_context():
    c = RandomCritic(1)
    s = TextStep("p", ("h",), "x")
    assert c.score([s]).success[0] == c.score([TextStep("p", ("h",), "x", extra={"note": 1})]).success[0]
    assert c.score([s]).success[0] != c.score([TextStep("p", ("other",), "x")]).success[0]


def test_random_critic_is_uniform_on_both_heads():
    sc = RandomCritic(0).score(steps(4000))
    for v in (sc.success, sc.progress):
        assert 0.47 < v.mean() < 0.53
        assert 0.01 < np.mean(v < 0.02) < 0.03  # the share a 0.02 dead-end cut prunes
    assert abs(np.corrcoef(sc.success, sc.progress)[0, 1]) < 0.05


def test_constant_critic_stays_within_its_tie_break_and_prunes_nothing_at_0_02():
    sc = ConstantCritic(0.5, tie_break=1e-3, seed=0).score(steps(500))
    assert np.all(sc.success >= 0.5) and np.all(sc.success < 0.5 + 1e-3 + 1e-7)
    # float32 steps are 2**-24 near 0.5, so 1e-3 holds ~16800 levels: a pair ties with chance ~6e-5,
    # about 7 of the 124750 pairs here; without the tie-break all 500 would tie
    assert len(np.unique(sc.success)) >= 480
    bare = ConstantCritic(0.25, tie_break=0.0).score(steps(5))
    np.testing.assert_array_equal(bare.success, np.full(5, 0.25, np.float32))


def test_constant_critic_breaks_ties_at_random():
    """Over 400 seeds, each of 4 distinct candidates is the argmax about a quarter of the time
    (proposal order would make it always the first)."""
    batch = steps(4)
    firsts = np.bincount([int(np.argmax(ConstantCritic(seed=s).score(batch).success)) for s in range(400)],
                         minlength=4)
    assert firsts.min() >= 60, firsts


def test_constant_critics_ties_are_independent_of_the_random_critic_under_one_seed():
    """Two controls run with the same seed must not rank the candidates the same way."""
    batch = steps(2000)
    r, c = RandomCritic(5).score(batch).success, ConstantCritic(seed=5).score(batch).success
    assert abs(np.corrcoef(np.argsort(np.argsort(r)), np.argsort(np.argsort(c)))[0, 1]) < 0.05


@pytest.mark.parametrize("bad", [dict(value=1.5), dict(value=-0.1), dict(value=0.9995, tie_break=1e-3),
                                 dict(tie_break=-1.0), dict(seed=-1), dict(seed=1.5), dict(value=True)])
def test_bad_arguments_raise(bad):
    with pytest.raises(ValueError):
        ConstantCritic(**bad) if set(bad) != {"seed"} else RandomCritic(**bad)


def test_bad_batch_raises():
    with pytest.raises(TypeError, match="steps: expected a batch"):
        RandomCritic(0).score(5)
    with pytest.raises(ValueError, match=r"\(B, obs_dim\)"):
        RandomCritic(0).score(np.zeros(3))


class LengthCritic(BaseCritic):
    """An informed critic for comparison: longer step texts score higher."""

    def score(self, batch):
        s = np.array([min(1.0, len(t.step) / 100) for t in batch])
        return StepScores(s, s)


def test_controls_use_the_same_policy_call_budget_in_the_beam():
    pytest.importorskip("langgraph")
    from prm_critic.langgraph import build_beam_search_graph

    def expand(state, history, k):  # an endless tree: nothing is ever solved, every branch goes on
        return [(f"act(go {state}.{i})\nresult: " + "x" * (i * 7 % 50), f"{state}.{i}") for i in range(k)]

    used = {}
    for name, critic in [("random", RandomCritic(0)), ("constant", ConstantCritic(seed=0)), ("informed", LengthCritic())]:
        g = build_beam_search_graph(expand, critic, beam_width=2, branch_factor=2, max_depth=100,
                                    dead_end_threshold=0.02, budget=37, aggregate="last").compile()
        out = g.invoke({"prompt": "p", "root": "r"}, {"recursion_limit": 500})
        assert out["stop_reason"] == "budget"
        used[name] = out["policy_calls"]
        if name == "constant":
            assert out["pruned_dead_end"] == 0
    assert used == {"random": 37, "constant": 37, "informed": 37}
