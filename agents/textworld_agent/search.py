"""Policies and searches compared in ``benchmarks/agents``: one episode on one game each.

Cost accounting (per episode):

* ``policy_calls``: commands proposed by the base policy (one sample = one call, as one LLM call
  would be);
* ``tool_calls``: game commands executed, including look-ahead executions on forked states
  (replaying a fork's history is bookkeeping of the simulator, not counted);
* ``critic_calls``: steps scored by the critic.

Methods:

* :func:`run_base` -- the base policy alone.
* :func:`run_outcome_bon` -- outcome-only best-of-N: up to ``n`` base episodes in a row, stop at
  the first won one (the game's final text says so: an outcome check needs no step critic).
* :func:`run_step_bon` -- step-level best-of-N at every step: ``n`` distinct proposals, each
  executed on a fork (look-ahead), scored by ``score_fn`` (the learned PRM on the step text, or
  the ORACLE on privileged ``intermediate_reward``), best one committed.
* :func:`run_beam` -- PRM beam search with dead-end pruning via
  :func:`prm_critic.langgraph.build_beam_search_graph`; the env state is the command history.
* :func:`run_mcts` -- Monte Carlo tree search with PRM values via
  :class:`prm_critic.langgraph.MCTSSearch`, forking the game the same way as the beam.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, asdict
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from prm_critic.critic import BaseCritic
from prm_critic.text.steps import TextStep

from agents.textworld_agent.env import StepResult, TextWorldGame
from agents.textworld_agent.policy import BasePolicy
from agents.textworld_agent.text import step_text

__all__ = ["EpisodeResult", "run_base", "run_outcome_bon", "run_step_bon", "run_beam", "run_mcts", "prm_score_fn",
           "oracle_score_fn"]


#: a base policy: :class:`BasePolicy` (hand-weighted sampler) or
#: :class:`~agents.textworld_agent.llm_policy.LLMPolicy` (a chat model)
Policy = Any

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

    def to_dict(self) -> dict:
        return asdict(self)


def run_base(path: str | Path, rng: np.random.Generator, *, max_steps: int = 40,
             policy: Policy | None = None) -> EpisodeResult:
    policy = policy or BasePolicy()
    g = TextWorldGame(path, max_steps=max_steps)
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


def run_outcome_bon(path: str | Path, rng: np.random.Generator, *, n: int = 8, max_steps: int = 40,
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
    (TextWorld: +1 towards the goal, 0 neutral, -1 away) mapped to [0.25, 0.75]."""

    def fn(prompt, history, texts, results):
        out = []
        for r in results:
            if r.won:
                out.append(1.0)
            elif r.lost:
                out.append(0.0)
            else:
                out.append(0.5 + 0.25 * float(np.clip(r.intermediate_reward, -1, 1)))
        return np.asarray(out)

    return fn


def run_step_bon(path: str | Path, rng: np.random.Generator, score_fn: ScoreFn, *, n: int = 4,
                 max_steps: int = 40, policy: Policy | None = None) -> EpisodeResult:
    """Best-of-``n`` at every step with one-step look-ahead on forked states."""
    if n < 1:
        raise ValueError(f"n: expected an int >= 1, got {n!r}")
    policy = policy or BasePolicy()
    g = TextWorldGame(path, max_steps=max_steps)
    sim = TextWorldGame(path, max_steps=max_steps)
    try:
        r = g.reset()
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
        g.close()
        sim.close()


def _forking_expand(sim: TextWorldGame, policy: Policy, rng: np.random.Generator, counters: dict):
    """``(intro, root, expand)`` for the searches of ``prm_critic.langgraph``: the env state is the
    command history (plain data); ``expand`` forks by replaying it on ``sim`` and runs each proposal
    there, counting tool calls and lost games in ``counters``."""
    lock = threading.Lock()  # LangGraph runs the beam's Send branches in threads; one simulator, one at a time
    intro = sim.reset()
    root = {"commands": [], "feedbacks": [], "admissible": intro.admissible, "won": False, "lost": False,
            "done": False}

    def expand(state, history, k):
        if state["done"] or not state["admissible"]:
            return []
        cands = policy.sample(state["admissible"], state["commands"], rng, n=k, distinct=True,
                              intro=intro.feedback, feedbacks=state["feedbacks"])
        out = []
        for c in cands:
            with lock:
                sim.replay(state["commands"])
                x = sim.step(c)
            counters["tools"] += 1
            counters["lost"] += int(x.lost)
            out.append((step_text(c, x.feedback), {"commands": state["commands"] + [c],
                                                   "feedbacks": state["feedbacks"] + [x.feedback],
                                                   "admissible": x.admissible, "won": x.won, "lost": x.lost,
                                                   "done": x.done}))
        return out

    return intro, root, expand


def run_beam(path: str | Path, rng: np.random.Generator, critic: BaseCritic, *, beam_width: int = 2,
             branch_factor: int = 3, max_steps: int = 40, dead_end_threshold: float = 0.1,
             budget: int | None = None, aggregate: str = "last", policy: Policy | None = None,
             dead_end_mode: str = "absolute", on_all_pruned: str = "keep_best") -> EpisodeResult:
    """PRM beam search (``prm_critic.langgraph.build_beam_search_graph``) over command histories.

    ``dead_end_mode`` / ``on_all_pruned`` are passed on (``"stop"`` is the behaviour before the beam
    kept its best candidate when every one scored under the threshold)."""
    from prm_critic.langgraph import build_beam_search_graph

    policy = policy or BasePolicy()
    sim = TextWorldGame(path, max_steps=max_steps)
    counters = {"tools": 0, "lost": 0}
    try:
        intro, root, expand = _forking_expand(sim, policy, rng, counters)
        g = build_beam_search_graph(expand, critic, beam_width=beam_width, branch_factor=branch_factor,
                                    max_depth=max_steps, dead_end_threshold=dead_end_threshold, budget=budget,
                                    is_terminal=lambda s: bool(s["won"]), aggregate=aggregate,
                                    dead_end_mode=dead_end_mode, on_all_pruned=on_all_pruned).compile()
        out = g.invoke({"prompt": intro.feedback, "root": root}, {"recursion_limit": 4 * max_steps + 10})
        sol = out.get("solution")
        best = sol or out.get("best") or {"steps": [], "state": root}
        st = best["state"]
        return EpisodeResult(bool(st["won"]), bool(st["lost"]), len(st["commands"]), int(out.get("policy_calls", 0)),
                             counters["tools"], counters["tools"], int(out.get("pruned_dead_end", 0)),
                             list(st["commands"]))
    finally:
        sim.close()


def run_mcts(path: str | Path, rng: np.random.Generator, critic: BaseCritic, *, branch_factor: int = 2,
             max_steps: int = 40, budget: int = 160, max_iterations: int | None = None, exploration: float = 1.0,
             aggregate: str = "last", selection: str = "puct", seed: int = 0,
             policy: Policy | None = None) -> EpisodeResult:
    """MCTS with PRM values (``prm_critic.langgraph.MCTSSearch``) over command histories.

    ``budget`` caps policy calls (each proposal is also one critic call and one tool call).
    ``max_iterations`` defaults to ``2 * budget + 1``, which the budget always reaches first: an
    iteration either makes a call or closes a node that proposed nothing, and there are at most
    ``budget + 1`` nodes. ``dead_ends_avoided`` counts proposals that lost the game, less one when
    the answer lost too. ``seed`` seeds the search's tie-breaks.
    """
    from prm_critic.langgraph import MCTSSearch

    policy = policy or BasePolicy()
    sim = TextWorldGame(path, max_steps=max_steps)
    counters = {"tools": 0, "lost": 0}
    try:
        intro, root, expand = _forking_expand(sim, policy, rng, counters)
        search = MCTSSearch(expand, critic, branch_factor=branch_factor, max_depth=max_steps, policy_budget=budget,
                            max_iterations=max_iterations or 2 * budget + 1, exploration=exploration, aggregate=aggregate,
                            selection=selection, seed=seed, is_terminal=lambda s: bool(s["won"]))
        out = search.invoke({"prompt": intro.feedback, "root": root})
        st = out.state
        avoided = counters["lost"] - int(bool(st["lost"]))
        return EpisodeResult(bool(st["won"]), bool(st["lost"]), len(st["commands"]), out.policy_calls,
                             counters["tools"], out.critic_calls, avoided, list(st["commands"]))
    finally:
        sim.close()
