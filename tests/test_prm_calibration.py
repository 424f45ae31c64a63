"""The TextWorld PRM calibration measurements (benchmarks/agents/prm_calibration.py): AUROC against a
brute-force count over all pairs, the reliability curve and ECE on hand-checked inputs, bad inputs."""

from __future__ import annotations


import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from benchmarks.agents.prm_calibration import auroc_or_none, calibration
from benchmarks.stats import auroc

scores = st.lists(st.sampled_from([0.0, 0.1, 0.25, 0.5, 0.9, 1.0]) | st.floats(0, 1), min_size=1, max_size=30)


@settings(max_examples=200, deadline=None)
@given(scores, scores)
def test_auroc_is_the_pairwise_win_rate_with_ties_half(pos, neg):
    brute = np.mean([1.0 if a > b else 0.5 if a == b else 0.0 for a in pos for b in neg])
    assert auroc(np.asarray(pos), np.asarray(neg)) == pytest.approx(brute, abs=1e-12)


def test_auroc_of_an_empty_side_is_unmeasured():
    assert np.isnan(auroc(np.zeros(0), np.ones(3))) and np.isnan(auroc(np.ones(3), np.zeros(0)))
    assert auroc_or_none(np.zeros(0), np.ones(3)) is None and auroc_or_none(np.ones(3), np.zeros(0)) is None
    assert auroc_or_none(np.array([0.9]), np.array([0.1])) == 1.0


def test_calibration_by_hand():
    p = np.array([0.05, 0.05, 0.95, 0.95])
    y = np.array([0.0, 0.0, 1.0, 0.5])
    c = calibration(p, y)
    assert c["brier"] == pytest.approx((0.05**2 * 2 + 0.05**2 + 0.45**2) / 4)
    assert [b["n"] for b in c["curve"]] == [2, 2]
    assert c["curve"][1]["mean_label"] == pytest.approx(0.75)
    assert c["ece"] == pytest.approx(0.5 * 0.05 + 0.5 * abs(0.95 - 0.75))
    # a score of exactly 1.0 falls into the last bin, not past it
    assert calibration(np.array([1.0]), np.array([1.0]))["curve"][0]["bin"] == [0.9, 1.0]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(0, 1), min_size=1, max_size=40))
def test_perfect_predictions_have_zero_brier_and_ece(v):
    c = calibration(np.asarray(v), np.asarray(v))
    assert c["brier"] == 0.0 and c["ece"] == pytest.approx(0.0, abs=1e-12)
    assert sum(b["n"] for b in c["curve"]) == len(v)


def test_mismatched_inputs_are_refused():
    with pytest.raises(ValueError, match="equal non-empty 1-D"):
        calibration(np.zeros(3), np.zeros(4))
    with pytest.raises(ValueError, match="equal non-empty 1-D"):
        calibration(np.zeros(0), np.zeros(0))


def test_inputs_that_do_not_match_are_refused_before_any_model_is_loaded(tmp_path):
    from benchmarks.agents.prm_calibration import main

    from prm_critic.text.trl_format import StepwiseExample, write_stepwise_jsonl

    labels, extra = tmp_path / "labels.jsonl", tmp_path / "siblings.jsonl"
    write_stepwise_jsonl(labels, [StepwiseExample("game A", ["a"], [0.5]), StepwiseExample("game B", ["b"], [0.0])])
    write_stepwise_jsonl(extra, [StepwiseExample("game A", ["a", "x"], [0.5, 0.0]),
                                 StepwiseExample("game Z", ["z"], [0.0])])
    base = ["--prm", str(tmp_path / "no-model"), "--tag", "t", "--out", str(tmp_path / "o.json")]
    with pytest.raises(SystemExit, match="overlap the training seeds"):
        main([*base, "--labels", str(labels), "--seeds", "5-6", "--train-seeds", "0-5"])
    with pytest.raises(SystemExit, match="holds 2 trajectories, expected one per seed of --seeds 5-7 \\(3\\)"):
        main([*base, "--labels", str(labels), "--seeds", "5-7"])
    with pytest.raises(SystemExit, match="1 of 2 sibling examples .* \\(first at line 2\\) are not from the games"):
        main([*base, "--labels", str(labels), "--extra", str(extra), "--seeds", "5-6"])
    assert not (tmp_path / "o.json").exists()


class _FakeModel:
    """A fake text PRM (test double): a step scores 0.01 when its text says the game is lost, else 0.5
    plus 0.1 per earlier step."""

    def score_trajectory(self, prompt, steps):
        from prm_critic.critic import StepScores

        s = np.array([0.01 if "You lost" in c else 0.5 + 0.1 * i for i, c in enumerate(steps)], np.float32)
        return StepScores(s, s)


def _examples():
    from prm_critic.text.trl_format import StepwiseExample

    return [StepwiseExample("g1", ["a", "b", "c You won"], [0.2, 0.5, 1.0]),
            StepwiseExample("g2", ["a", "eat it. You lost"], [0.0, 0.0]),
            StepwiseExample("g3", ["a", "b"], [0.1, 0.0])]


def test_first_error_is_the_step_that_loses_the_game():
    from benchmarks.agents.prm_calibration import first_errors

    assert first_errors(_examples()) == [-1, 1, -1]


def test_step_metrics_of_a_critic_that_flags_exactly_the_losing_steps():
    from benchmarks.agents.prm_calibration import step_metric_block

    m = step_metric_block(_FakeModel(), _examples(), cuts=(0.02, 0.6), tune=_examples())
    assert m["at_cut"]["0.02"]["f1"] == 1.0 and m["at_cut"]["0.02"]["first_error_accuracy"] == 1.0
    # at 0.6 every trajectory is flagged at its first step: no error-free trajectory is right
    assert m["at_cut"]["0.6"]["acc_correct"] == 0.0 and m["at_cut"]["0.6"]["f1"] == 0.0
    assert m["tuned"]["f1"] == 1.0 and m["tuned"]["tuned_on"] == 3
    # score rises with the step index: +1 on g1 (labels rise), -1 on g3 (labels fall); g2 has a constant reference
    assert m["value_order_mc"] == {"n": 2, "mean": 0.0}


def test_uninformed_controls_score_trajectories_like_a_prm():
    from benchmarks.agents.prm_calibration import CriticScorer, evaluate

    from prm_critic.critic import ConstantCritic, RandomCritic

    for critic in (RandomCritic(seed=3), ConstantCritic(0.5, seed=3)):
        res = evaluate(CriticScorer(critic), _examples())
        assert res["n_steps"] == 7 and 0.0 <= res["auroc_dead_end"] <= 1.0
        assert set(res["step_metrics"]["at_cut"]) == {"0.02", "0.05", "0.1"}
    # the constant control never goes under a cut that 0.5 clears: it flags nothing
    res = evaluate(CriticScorer(ConstantCritic(0.5, seed=3)), _examples())
    assert res["step_metrics"]["at_cut"]["0.1"]["acc_error"] == 0.0
    with pytest.raises(TypeError, match="expected a prm_critic BaseCritic"):
        CriticScorer(object())
