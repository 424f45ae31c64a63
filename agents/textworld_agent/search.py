"""Policies and searches compared in ``benchmarks/agents``: one episode on one game each.

Cost accounting (per episode):

* ``policy_calls``: commands proposed by the base policy (one sample = one call, as one LLM call
  would be);
* ``tool_calls``: game commands executed, including look-ahead executions on forked states
  (replaying a fork's history is bookkeeping of the simulator, not counted);
* ``critic_calls``: steps scored by the critic.

Methods:

* :func:`run_base` -- the base policy alone.
* :func:`run_gold` -- ORACLE: the game's gold path (its ``walkthrough``, PRIVILEGED), no policy call;
  the upper reference of a game type.
* :func:`run_outcome_bon` -- outcome-only best-of-N: up to ``n`` base episodes in a row, stop at
  the first won one (the game's final text says so: an outcome check needs no step critic).
* :func:`run_step_bon` -- step-level best-of-N at every step: ``n`` distinct proposals, each
  executed on a fork (look-ahead), scored by ``score_fn`` (the learned PRM on the step text, or
  the ORACLE on privileged ``intermediate_reward``), best one committed.
* :func:`run_beam` -- PRM beam search with dead-end pruning via
  :func:`prm_critic.langgraph.build_beam_search_graph`; the env state is the command history
  (:class:`prm_critic.langgraph.TextEnvExpand`).
* :func:`run_mcts` -- Monte Carlo tree search with PRM values via
  :class:`prm_critic.langgraph.MCTSSearch`, forking the game the same way as the beam.

A game is a TextWorld game file, or ``make(max_steps=...) -> TextEnv`` for any forkable text
environment (``functools.partial(spec.make, seed)`` of a :class:`prm_critic.text.envs.TextEnvSpec`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, asdict
from typing import Any, Callable, Sequence

import numpy as np

from prm_critic.critic import BaseCritic
from prm_critic.text.envs.base import TextEnv
from prm_critic.text.steps import TextStep

from agents.textworld_agent.env import StepResult, TextWorldGame
from agents.textworld_agent.policy import BasePolicy
from agents.textworld_agent.text import step_text

__all__ = ["EpisodeResult", "run_base", "run_gold", "run_outcome_bon", "run_step_bon", "run_beam", "run_mcts", "prm_score_fn",
           "oracle_score_fn"]


#: a base policy: :class:`BasePolicy` (hand-weighted sampler) or
#: :class:`~agents.textworld_agent.llm_policy.LLMPolicy` (a chat model)
Policy = Any
#: a TextWorld game file, or make(max_steps=...) -> TextEnv (module doc)
Game = str | os.PathLike | Callable[..., TextEnv]


def open_game(game: Game, max_steps: int) -> TextEnv:
    """A new environment of ``game`` (module doc) with ``max_steps``."""
    if isinstance(game, (str, os.PathLike)):
        return TextWorldGame(game, max_steps=max_steps)
    if not callable(game):
        raise TypeError(f"game: expected a TextWorld game file or make(max_steps=...) -> TextEnv, got {game!r}")
    env = game(max_steps=max_steps)
    if not isinstance(env, TextEnv) or env.max_steps != max_steps:
        raise TypeError(f"game: make(max_steps={max_steps}) returned {env!r}, expected a TextEnv with that max_steps")
    return env


@dataclass
class EpisodeResult:
    won: bool
    lost: bool
    steps: int
    policy_calls: int
    tool_calls: int
    critic_calls: int = 0
    dead_ends_avoided: int = 0   # look-ahead / beam candidates that lost the game and were not taken
    commands: list | None = None
    stop_reason: str = ""        # the searches' (beam, MCTS): why they stopped ("dead_ends": early, nothing left)

    def to_dict(self) -> dict:
        return asdict(self)


def run_base(path: Game, rng: np.random.Generator, *, max_steps: int = 40,
             policy: Policy | None = None) -> EpisodeResult:
    policy = policy or BasePolicy()
    g = open_game(path, max_steps)
    try:
        r = g.reset()
        intro, feedbacks = r.feedback, []
        while not r.done:
            r = g.step(policy.sample(r.admissible, g.history, rng, intro=intro, feedbacks=feedbacks)[0])
            feedbacks.append(r.feedback)
        n = len(g.history)
        return EpisodeResult(r.won, r.lost, n, n, n, commands=list(g.history))
    finally:
        g.close()


def run_gold(path: Game, rng: np.random.Generator | None = None, *, max_steps: int = 40) -> EpisodeResult:
    """ORACLE: play the game's gold path (``env.walkthrough`` after reset, PRIVILEGED); no policy call.
    A game without one is refused; a gold path longer than ``max_steps`` stops at ``max_steps``."""
    g = open_game(path, max_steps)
    try:
        r = g.reset()
        gold = list(getattr(g, "walkthrough", None) or [])
        if not gold:
            raise ValueError(f"game: expected an environment with a gold path (walkthrough), {g!r} has none")
        for cmd in gold:
            if r.done:
                break
            r = g.step(cmd)
        n = len(g.history)
        return EpisodeResult(r.won, r.lost, n, 0, n, commands=list(g.history))
    finally:
        g.close()


def run_outcome_bon(path: Game, rng: np.random.Generator, *, n: int = 8, max_steps: int = 40,
                    policy: Policy | None = None) -> EpisodeResult:
    if n < 1:
        raise ValueError(f"n: expected an int >= 1, got {n!r}")
    calls = 0
    last = None
    for _ in range(n):
        last = run_base(path, rng, max_steps=max_steps, policy=policy)
        calls += last.policy_calls
        if last.won:
            break
    return EpisodeResult(last.won, last.lost, last.steps, calls, calls, commands=last.commands)


#: score_fn(prompt, history_texts, candidate_texts, candidate_results) -> scores (n,)
ScoreFn = Callable[[str, Sequence[str], Sequence[str], Sequence[StepResult]], np.ndarray]


def prm_score_fn(critic: BaseCritic, head: str = "success") -> ScoreFn:
    """Score candidates with a text critic on what the agent sees (prompt, step texts)."""

    def fn(prompt, history, texts, results):
        steps = [TextStep(prompt, tuple(history), t) for t in texts]
        return np.asarray(critic.score(steps).get(head), np.float64)

    return fn


def oracle_score_fn() -> ScoreFn:
    """ORACLE: reads privileged game state: won -> 1, lost -> 0, else ``intermediate_reward``
    (TextWorld: +1 towards the goal, 0 neutral, -1 away; elsewhere the sign of the score's change)
    mapped to [0.25, 0.75]."""

    def fn(prompt, history, texts, results):
        out = []
        for r in results:
            if r.won:
                out.append(1.0)
            elif r.lost:
                out.append(0.0)
            else:
                toward = r.info.get("intermediate_reward", np.sign(r.info.get("reward", 0.0)))
                out.append(0.5 + 0.25 * float(np.clip(toward, -1, 1)))
        return np.asarray(out)

    return fn


def run_step_bon(path: Game, rng: np.random.Generator, score_fn: ScoreFn, *, n: int = 4,
                 max_steps: int = 40, policy: Policy | None = None) -> EpisodeResult:
    """Best-of-``n`` at every step with one-step look-ahead on forked states."""
    if n < 1:
        raise ValueError(f"n: expected an int >= 1, got {n!r}")
    policy = policy or BasePolicy()
    g = open_game(path, max_steps)
    sim = None
    try:
        r = g.reset()
        sim = g.fork()
        prompt = r.feedback
        texts: list[str] = []
        feedbacks: list[str] = []
        calls = tools = critic_calls = avoided = 0
        while not r.done:
            cands = policy.sample(r.admissible, g.history, rng, n=n, distinct=True, intro=prompt, feedbacks=feedbacks)
            calls += len(cands)
            results = []
            for c in cands:
                sim.replay(g.history)
                results.append(sim.step(c))
            tools += len(cands)
            ctexts = [step_text(c, x.feedback) for c, x in zip(cands, results)]
            scores = score_fn(prompt, texts, ctexts, results)
            critic_calls += len(cands)
            best = int(np.argmax(scores))
            avoided += sum(1 for i, x in enumerate(results) if x.lost and i != best)
            r = g.step(cands[best])
            tools += 1
            feedbacks.append(r.feedback)
            texts.append(step_text(cands[best], r.feedback))
        return EpisodeResult(r.won, r.lost, len(g.history), calls, tools, critic_calls, avoided, list(g.history))
    finally:
        if sim is not None:
            sim.close()
        g.close()


def run_beam(path: Game, rng: np.random.Generator, critic: BaseCritic, *, beam_width: int = 2,
             branch_factor: int = 3, max_steps: int = 40, dead_end_threshold: float = 0.1,
             budget: int | None = None, aggregate: str = "last", policy: Policy | None = None,
             dead_end_mode: str = "absolute", on_all_pruned: str = "keep_best") -> EpisodeResult:
    """PRM beam search (``prm_critic.langgraph.build_beam_search_graph``) over command histories.

    ``dead_end_mode`` / ``on_all_pruned`` are passed on (``"stop"`` is the behaviour before the beam
    kept its best candidate when every one scored under the threshold)."""
    from prm_critic.langgraph import TextEnvExpand, build_beam_search_graph

    policy = policy or BasePolicy()
    sim = open_game(path, max_steps)
    try:
        ex = TextEnvExpand(sim, policy, int(rng.integers(2**63)), step_text=step_text)
        g = build_beam_search_graph(ex, critic, beam_width=beam_width, branch_factor=branch_factor,
                                    max_depth=max_steps, dead_end_threshold=dead_end_threshold, budget=budget,
                                    is_terminal=ex.is_won, is_lost=ex.is_lost, aggregate=aggregate,
                                    dead_end_mode=dead_end_mode, on_all_pruned=on_all_pruned).compile()
        out = g.invoke({"prompt": ex.prompt, "root": ex.root}, {"recursion_limit": 4 * max_steps + 10})
        sol = out.get("solution")
        best = sol or out.get("best") or {"steps": [], "state": ex.root}
        st = best["state"]
        return EpisodeResult(bool(st["won"]), bool(st["lost"]), len(st["commands"]), int(out.get("policy_calls", 0)),
                             ex.tool_calls, ex.tool_calls, int(out.get("pruned_dead_end", 0)),
                             list(st["commands"]), str(out.get("stop_reason", "")))
    finally:
        sim.close()


def run_mcts(path: Game, rng: np.random.Generator, critic: BaseCritic, *, branch_factor: int = 2,
             max_steps: int = 40, budget: int = 160, max_iterations: int | None = None, exploration: float = 1.0,
             aggregate: str = "last", selection: str = "puct", seed: int = 0,
             policy: Policy | None = None, prior: str = "policy") -> EpisodeResult:
    """MCTS with PRM values (``prm_critic.langgraph.MCTSSearch``) over command histories.

    ``budget`` caps policy calls (each proposal is also one critic call and one tool call).
    ``max_iterations`` defaults to ``2 * budget + 1``, which the budget always reaches first: an
    iteration either makes a call or closes a node that proposed nothing, and there are at most
    ``budget + 1`` nodes. ``dead_ends_avoided`` counts proposals that lost the game, less one when
    the answer lost too. ``seed`` seeds the search's tie-breaks. ``prior``: PUCT's prior from the
    policy (uniform for the base policy) or from the critic's step scores (``MCTSConfig.prior``).
    """
    from prm_critic.langgraph import MCTSSearch, TextEnvExpand

    policy = policy or BasePolicy()
    sim = open_game(path, max_steps)
    try:
        ex = TextEnvExpand(sim, policy, int(rng.integers(2**63)), step_text=step_text)
        search = MCTSSearch(ex, critic, branch_factor=branch_factor, max_depth=max_steps, policy_budget=budget,
                            max_iterations=max_iterations or 2 * budget + 1, exploration=exploration, aggregate=aggregate,
                            selection=selection, seed=seed, is_terminal=ex.is_won, is_lost=ex.is_lost, prior=prior)
        out = search.invoke({"prompt": ex.prompt, "root": ex.root})
        st = out.state
        avoided = ex.lost - int(bool(st["lost"]))
        return EpisodeResult(bool(st["won"]), bool(st["lost"]), len(st["commands"]), out.policy_calls,
                             ex.tool_calls, out.critic_calls, avoided, list(st["commands"]), out.stop_reason)
    finally:
        sim.close()
