"""Searches that a lost state cannot fool, and searches that are deterministic under their seed.

The environment is a user's own forkable text game (tests/text_env_helpers.py: a corridor with a key,
an exit and a pit; ``jump`` in the pit's room loses); the searches run on it through
``prm_critic.langgraph.TextEnvExpand``. The critics are rule critics (tests/fakes.py) chosen to be
fooled: they score the losing step highest.

* The lost-state rule, in every search (beam, MCTS): a finished lost game is never the kept best
  nor the answer, whatever the critic says; terminal outcomes override the critic's score (a solved
  step 1, a lost step 0); a beam that runs out of candidates says so.
* Determinism: the beam's ``expand`` calls run in parallel threads in an order that changes from
  run to run; under one seed the search still takes the same path (each call draws from its own
  generator seeded by the state).
"""

from __future__ import annotations

import random
import time

import pytest

pytest.importorskip("langgraph")

from fakes import KeywordCritic  # noqa: E402
from faults import correct  # noqa: E402
from text_env_helpers import Corridor  # noqa: E402

from prm_critic.langgraph import MCTSSearch, TextEnvExpand, beam_search_result, build_beam_search_graph  # noqa: E402
from prm_critic.text.envs import SamplingPolicy  # noqa: E402

#: the fooled critic: the losing jump looks best, everything else looks hopeless
LOVES_THE_PIT = [("jump", 0.95, 0.95)]


def _corridor_with_pit_first(n: int = 4) -> int:
    """A seed whose pit is in room 0 (so the first depth offers the losing jump)."""
    return next(s for s in range(100) if Corridor(s, n=n).pit_room == 0)


def _beam(critic, *, seed=0, env_seed=None, threshold=0.5, on_all_pruned="keep_best", policy=None, width=2,
          branch=3, depth=6, lost_rule=True):
    env = Corridor(_corridor_with_pit_first() if env_seed is None else env_seed, n=4, max_steps=depth)
    ex = TextEnvExpand(env, policy or SamplingPolicy(), seed)
    g = build_beam_search_graph(ex, critic, beam_width=width, branch_factor=branch, max_depth=depth,
                                dead_end_threshold=threshold, aggregate="last", is_terminal=ex.is_won,
                                is_lost=ex.is_lost if lost_rule else None, on_all_pruned=on_all_pruned).compile()
    final = g.invoke({"prompt": ex.prompt, "root": ex.root}, {"recursion_limit": 4 * depth + 10})
    return final, beam_search_result(final), ex


@pytest.mark.fault
def test_beam_never_keeps_a_lost_game_the_critic_loves():
    critic = KeywordCritic(LOVES_THE_PIT, default=(0.01, 0.01))
    final, res, ex = _beam(critic)
    assert not res.state["lost"] and not (final.get("best") or {"state": {"lost": False}})["state"]["lost"]
    assert final["pruned_lost"] >= 1 and res.stats["pruned_lost"] == final["pruned_lost"]
    assert ex.lost >= 1  # the jump was proposed and lost the game
    for item in final["beam"]:
        assert not item["state"]["lost"]
    # without the environment's word the same critic is fooled: the kept best is the lost game
    fooled, fooled_res, _ = _beam(KeywordCritic(LOVES_THE_PIT, default=(0.01, 0.01)), lost_rule=False)
    assert fooled_res.state["lost"]
    correct(50, "beam: a critic scoring the losing step 0.95, every other 0.01", "the lost game pruned; the kept best "
            "is a game not lost")


@pytest.mark.fault
def test_keep_best_keeps_the_best_dead_end_that_is_not_lost():
    """Every candidate under the cut, the lost jump scored highest of them: keep_best keeps another."""
    critic = KeywordCritic([("jump", 0.3, 0.3)], default=(0.1, 0.1))
    final, res, _ = _beam(critic, threshold=0.9, width=1)
    assert final["all_pruned_kept_best"] >= 1
    assert not res.state["lost"] and res.state["commands"] and "jump" not in res.state["commands"]
    correct(50, "beam, on_all_pruned='keep_best': every candidate under the cut, the losing one scored highest",
            "the best candidate not lost is kept")


def test_a_beam_with_only_lost_games_left_stops_early_and_says_so():
    """A one-room corridor whose only moves lose or go nowhere: keep_best has nothing to keep."""

    class OnlyPit(Corridor):
        def _obs(self, command, text, won=False, lost=False):
            res = super()._obs(command, text, won, lost)
            return type(res)(res.command, res.feedback, ("jump",) if not res.done else (), res.done, res.won,
                             res.lost, res.score, res.max_score)

        def _spawn(self):
            return OnlyPit(self.seed, n=self.n, max_steps=self.max_steps)

    env = OnlyPit(_corridor_with_pit_first(), n=4, max_steps=6)
    ex = TextEnvExpand(env, SamplingPolicy(), 0)
    g = build_beam_search_graph(ex, KeywordCritic(LOVES_THE_PIT), beam_width=2, branch_factor=2, max_depth=6,
                                dead_end_threshold=0.5, is_terminal=ex.is_won, is_lost=ex.is_lost).compile()
    final = g.invoke({"prompt": ex.prompt, "root": ex.root})
    res = beam_search_result(final)
    assert final["stop_reason"] == "dead_ends" and res.stats["stopped_early"]
    assert res.steps == () and not res.state["lost"]  # the root: nothing better than not losing


def test_terminal_outcomes_override_the_critic_in_the_beam():
    """A critic that scores the winning step 0 and the losing one 1: the environment's outcome wins."""
    env_seed = 3
    win = Corridor(env_seed, n=4).winning_path()
    critic = KeywordCritic([("open exit", 0.0, 0.0), ("jump", 1.0, 1.0)], default=(0.6, 0.6))
    final, res, _ = _beam(critic, env_seed=env_seed, threshold=0.2, width=3, branch=6, depth=len(win) + 2)
    assert res.solved and res.stop_reason == "solved" and res.state["won"]
    assert res.step_scores[-1] == 1.0


def _mcts(critic, *, budget=40, lost_rule=True, env_seed=None, seed=0):
    env = Corridor(_corridor_with_pit_first() if env_seed is None else env_seed, n=4, max_steps=8)
    ex = TextEnvExpand(env, SamplingPolicy(), 0)
    search = MCTSSearch(ex, critic, branch_factor=3, max_depth=8, policy_budget=budget, max_iterations=2 * budget + 1,
                        is_terminal=ex.is_won, is_lost=ex.is_lost if lost_rule else None, seed=seed)
    return search.invoke({"prompt": ex.prompt, "root": ex.root}), ex


@pytest.mark.fault
def test_mcts_never_answers_with_a_lost_game_and_scores_it_zero():
    out, ex = _mcts(KeywordCritic(LOVES_THE_PIT, default=(0.01, 0.01)), budget=12)
    assert ex.lost >= 1 and not out.state["lost"]
    # the critic scored every jump 0.95 (the events hold its scores); the jump's value is the env's 0
    jump_values = [v for e in out.events for v, s in zip(e["values"], e["step_scores"]) if s > 0.9]
    assert jump_values and all(v == 0.0 for v in jump_values)
    fooled, _ = _mcts(KeywordCritic(LOVES_THE_PIT, default=(0.01, 0.01)), budget=12, lost_rule=False)
    assert fooled.state["lost"]  # without the environment's word the critic's favourite is the answer
    correct(50, "MCTS: a critic scoring the losing step 0.95, every other 0.01", "the lost child valued 0 and "
            "closed; the answer is a game not lost")


def test_terminal_outcomes_override_the_critic_in_mcts():
    critic = KeywordCritic([("open exit", 0.0, 0.0), ("jump", 1.0, 1.0), ("take key", 0.8, 0.8),
                            ("forward", 0.7, 0.7)], default=(0.3, 0.3))
    out, _ = _mcts(critic, budget=200, env_seed=3)
    assert out.solved and out.state["won"] and out.step_scores[-1] == 1.0 and out.score == 1.0


class JitteryPolicy(SamplingPolicy):
    """The uniform policy, with an unseeded pause before each draw: the beam's parallel expand
    threads finish in a different order on every run (as an LLM call's latency would make them)."""

    def sample(self, *args, **kwargs):
        time.sleep(random.random() * 0.004)
        return super().sample(*args, **kwargs)


@pytest.mark.fault
def test_the_beam_takes_the_same_path_under_one_seed_however_threads_interleave():
    critic = KeywordCritic([], default=(0.5, 0.5))  # all ties: the order of candidates decides
    runs = [_beam(critic, seed=7, env_seed=2, threshold=0.0, policy=JitteryPolicy(), width=3, branch=3, depth=5)
            for _ in range(6)]
    paths = {(tuple(r[1].steps), r[1].policy_calls) for r in runs}
    assert len(paths) == 1, paths
    correct(51, "beam: 6 runs under one seed, expand threads finishing in random order", "one path, one call count")
    other = _beam(critic, seed=8, env_seed=2, threshold=0.0, width=3, branch=3, depth=5)
    assert other[1].policy_calls > 0  # another seed: another (valid) run


def test_mcts_takes_the_same_path_under_one_seed():
    critic = KeywordCritic([], default=(0.5, 0.5))
    a, _ = _mcts(critic, budget=20, env_seed=2, seed=5)
    b, _ = _mcts(critic, budget=20, env_seed=2, seed=5)
    assert (a.steps, a.events) == (b.steps, b.events)


def test_the_benchmark_searches_take_any_env_and_report_their_stop():
    """agents/textworld_agent/search.py on a user's environment (``make(max_steps=...)``): the lost
    rule holds there too, and each search's result says why it stopped."""
    import numpy as np

    from agents.textworld_agent.search import run_beam, run_mcts

    seed = _corridor_with_pit_first()

    def game(max_steps):
        return Corridor(seed, n=4, max_steps=max_steps)

    critic = KeywordCritic(LOVES_THE_PIT, default=(0.01, 0.01))
    beam = run_beam(game, np.random.default_rng(0), critic, max_steps=6, dead_end_threshold=0.5)
    mcts = run_mcts(game, np.random.default_rng(0), critic, max_steps=6, budget=12)
    for res in (beam, mcts):
        assert not res.lost and res.stop_reason and res.policy_calls > 0
    assert beam.dead_ends_avoided >= 1
    with pytest.raises(TypeError, match="expected a TextEnv with that max_steps"):
        run_beam(lambda max_steps: Corridor(seed, max_steps=3), np.random.default_rng(0), critic, max_steps=6)
