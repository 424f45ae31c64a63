"""The agents benchmark's paired test (exact McNemar / sign test) and its controls table."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from benchmarks.agents.report import controls_lines, fmt_p, success_within
from benchmarks.stats import holm, mcnemar, sign_test_p


def brute_force_p(k: int, n: int) -> float:
    """Two-sided sign test by enumeration: the share of all 2^n sign patterns at least as far from
    n/2 as ``k`` is."""
    far = sum(1 for signs in itertools.product((0, 1), repeat=n) if abs(2 * sum(signs) - n) >= abs(2 * k - n))
    return far / 2 ** n


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 14).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n))))
def test_sign_test_matches_brute_force(kn):
    k, n = kn
    assert sign_test_p(k, n) == pytest.approx(brute_force_p(k, n), rel=1e-12, abs=0)


def test_sign_test_matches_scipy_binomtest():
    stats = pytest.importorskip("scipy.stats")
    for n in range(0, 31):
        for k in range(n + 1):
            want = 1.0 if n == 0 else stats.binomtest(k, n, 0.5).pvalue
            assert sign_test_p(k, n) == pytest.approx(want, rel=1e-9), (k, n)


def test_sign_test_known_values_and_bad_input():
    assert sign_test_p(0, 8) == pytest.approx(2 / 256)
    assert sign_test_p(3, 6) == 1.0 and sign_test_p(0, 0) == 1.0
    for k, n in [(-1, 3), (4, 3), (1.0, 3)]:
        with pytest.raises(ValueError):
            sign_test_p(k, n)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.booleans()), max_size=20), st.integers(0, 5))
def test_paired_test_counts_discordant_pairs(pairs, extra):
    a = {(s, 0): x for s, (x, _) in enumerate(pairs)}
    b = {(s, 0): y for s, (_, y) in enumerate(pairs)}
    b.update({(1000 + i, 0): True for i in range(extra)})  # unpaired episodes are not counted
    t = mcnemar(a, b)
    a_only = sum(x and not y for x, y in pairs)
    b_only = sum(y and not x for x, y in pairs)
    assert (t["pairs"], t["a_only"], t["b_only"]) == (len(pairs), a_only, b_only)
    assert t["both"] + t["neither"] + a_only + b_only == len(pairs)
    assert t["p"] == pytest.approx(brute_force_p(a_only, a_only + b_only))
    assert (t["share_ci"] is None) == (a_only + b_only == 0)


def _rows(method, wins, calls, **settings):
    return [dict(method=method, seed=s, rep=0, won=w, lost=False, policy_calls=c, max_steps=40,
                 dead_end_threshold=0.02, on_all_pruned="keep_best", difficulty="d", **settings)
            for s, (w, c) in enumerate(zip(wins, calls))]


def test_success_within_counts_wins_by_their_calls():
    res = _rows("m", [True, True, False, True], [10, 50, 5, 160])
    assert [success_within(res, b) for b in (5, 10, 49, 50, 160)] == [0, 1, 1, 2, 3]


def test_controls_table_pairs_the_prm_with_each_control():
    allres = {"prm_beam+tag": _rows("prm_beam+tag", [True] * 8, [40] * 8),
              "prm_beam+random": _rows("prm_beam+random", [False] * 8, [150] * 8),
              "prm_beam+constant": _rows("prm_beam+constant", [True] * 8, [100] * 8, )}
    text = "\n".join(controls_lines(allres, "tag"))
    assert "| beam search (w=2, b=2, dead-end pruning) | random critic | 8 | 0 | 0 | 8 | 0 | 0.008 | 0.016 | 1.00 (0.63-1.00) |" in text
    assert "| beam search (w=2, b=2, dead-end pruning) | constant critic, random ties | 8 | 8 | 0 | 0 | 0 | 1.000 | 1.000 | no discordant pairs |" in text
    # success within 50 calls: the PRM 1.00, the random control 0.00
    assert "| beam search (w=2, b=2, dead-end pruning) | PRM [tag] | 8 | 1.00 |" in text and "| 1.00 | 1.00 | 1.00 | 1.00 | 1.00 |" in text


def test_controls_table_refuses_to_pair_different_settings():
    allres = {"prm_beam+tag": _rows("prm_beam+tag", [True] * 4, [40] * 4),
              "prm_beam+random": [dict(r, dead_end_threshold=0.05) for r in _rows("prm_beam+random", [False] * 4, [9] * 4)]}
    text = "\n".join(controls_lines(allres, "tag"))
    assert "differ from the PRM rows" in text and "exact McNemar p" not in text


def test_no_controls_no_section():
    assert controls_lines({"prm_beam+tag": _rows("prm_beam+tag", [True], [4])}, "tag") == []
    assert np.isclose(sign_test_p(1, 1), 1.0)


def test_controls_words_count_only_paired_games():
    prm = _rows("prm_beam+tag", [True] * 8, [40] * 8)
    ctl = _rows("prm_beam+random", [False] * 6, [150] * 6)  # two games not yet run with the control
    text = "\n".join(controls_lines({"prm_beam+tag": prm, "prm_beam+random": ctl}, "tag"))
    assert "6 vs 0 wins of 6 paired games (6 won only with the PRM, 0 only with the control), p = 0.031 " \
           "(Holm-adjusted over the 1 tests of this set: 0.031): the PRM is better at the 5 % level, also after " \
           "adjustment." in text


def test_controls_plot_only_with_controls(tmp_path):
    from benchmarks.agents.report import plot_controls

    spec = {"sets": [{"seeds": "0-7", "difficulty": "d", "title": "t"}]}
    assert plot_controls(spec, tmp_path, tmp_path / "c.png") is False and not (tmp_path / "c.png").exists()


def test_holm_matches_its_definition():
    assert holm([]) == []
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])  # 3*0.01, max(2*0.03, .03), max(1*0.04, .06)
    assert holm([0.5, 0.6]) == pytest.approx([1.0, 1.0])


def test_goal_vs_random_needs_margin_significance_and_no_more_calls():
    from benchmarks.agents.report import goal_vs_random

    n = 10
    prm = _rows("prm_beam+tag", [True] * 8 + [False] * 2, [90] * n)
    rnd = _rows("prm_beam+random", [False] * 8 + [False, True], [120] * n)
    text = "\n".join(goal_vs_random({"prm_beam+tag": prm, "prm_beam+random": rnd}, "tag", "current", n))
    # 0.80 vs 0.10, 8 vs 1 discordant: p = 0.039 < 0.05, fewer calls
    assert "**met**" in text and "difference +0.70, exact McNemar p = 0.039" in text
    # the same wins at more calls than the random search: not met
    costly = [dict(r, policy_calls=150) for r in prm]
    assert "**not met**" in "\n".join(goal_vs_random({"prm_beam+tag": costly, "prm_beam+random": rnd}, "tag", "current", n))
    # a margin under 0.15 is not met (40 games: 30 vs 25 wins, 6 vs 1 discordant, p = 0.125)
    a = _rows("prm_beam+tag", [True] * 30 + [False] * 10, [90] * 40)
    b = _rows("prm_beam+random", [True] * 24 + [False] * 6 + [True] + [False] * 9, [90] * 40)
    assert "**not met**" in "\n".join(goal_vs_random({"prm_beam+tag": a, "prm_beam+random": b}, "tag", "current", 40))
    # a set the random critic has not finished enters no verdict
    assert "unmeasured" in "\n".join(goal_vs_random({"prm_beam+tag": prm, "prm_beam+random": rnd[:5]}, "tag", "current", n))


def test_goal_vs_random_on_harder_games_is_an_absolute_bar():
    from benchmarks.agents.report import goal_vs_random

    prm = _rows("prm_mcts+tag", [True] * 4 + [False] * 6, [150] * 10)
    rnd = _rows("prm_mcts+random", [True] + [False] * 9, [150] * 10)
    assert "**met**" in "\n".join(goal_vs_random({"prm_mcts+tag": prm, "prm_mcts+random": rnd}, "tag", "harder", 10))
    rnd2 = _rows("prm_mcts+random", [True] * 2 + [False] * 8, [150] * 10)
    assert "**not met**" in "\n".join(goal_vs_random({"prm_mcts+tag": prm, "prm_mcts+random": rnd2}, "tag", "harder", 10))


def test_step_metric_table_shows_each_critic_and_marks_what_is_missing():
    from benchmarks.agents.report import step_metric_lines

    r = dict(n=10, n_error=4, first_error_accuracy=0.5, acc_error=0.25, acc_correct=2 / 3, f1=0.3636, threshold=0.02)
    cal = {"prm": {"step_metrics": {"at_cut": {"0.02": r}, "value_order_mc": {"n": 7, "mean": 0.41},
                                    "tuned": dict(r, threshold=0.123, tuned_on=96)}},
           "random": {"step_metrics": {"at_cut": {"0.02": r}, "value_order_mc": {"n": 0, "mean": float("nan")}}},
           "old": {}}
    text = "\n".join(step_metric_lines(cal))
    assert "| prm | 10 (4) | 0.50 / 0.36 (0.25, 0.67) | 0.123 | 0.50 / 0.36 (0.25, 0.67) | 0.41 (7) |" in text
    assert "| random | 10 (4) | 0.50 / 0.36 (0.25, 0.67) | not tuned | unmeasured | unmeasured (0) |" in text
    assert "| old |" not in text and step_metric_lines({"old": {}}) == []


def test_a_sets_further_critic_gets_its_own_paired_tests(tmp_path):
    from benchmarks.agents.report import render_unseen

    rows = {"prm_beam_noprune+imp": _rows("prm_beam_noprune+imp", [True] * 6, [50] * 6),
            "prm_beam_noprune+random": _rows("prm_beam_noprune+random", [False] * 6, [60] * 6),
            "prm_beam+main": _rows("prm_beam+main", [True] * 6, [50] * 6)}
    for m, res in rows.items():
        for r in res:
            (tmp_path / f"{m}__seed{r['seed']}_rep0.json").write_text(json.dumps(
                dict(r, tool_calls=1, critic_calls=1, dead_ends_avoided=0, wall_s=1.0)))
    spec = {"prm_tag": "main", "intro": [], "commands": [],
            "sets": [{"title": "t", "seeds": "0-5", "difficulty": "d", "kind": "current", "also_tags": ["imp"]}]}
    text = "\n".join(render_unseen(spec, {}, tmp_path))
    assert "**[imp] against uninformed critics in the same search** (seeds 0-5):" in text
    assert "| beam search (w=2, b=2, no pruning) | random critic | 6 | 0 | 0 | 6 | 0 | 0.031 |" in text


def test_p_values_never_print_as_zero():
    # a tiny p (31 vs 2 discordant games) prints with its magnitude, not as "0.000"
    p = sign_test_p(2, 33)
    assert p < 0.001 and fmt_p(p) != "0.000" and float(fmt_p(p)) == float(f"{p:.1e}")
    assert fmt_p(0.0364) == "0.036" and fmt_p(0.001) == "0.001" and fmt_p(1.0) == "1.000"
