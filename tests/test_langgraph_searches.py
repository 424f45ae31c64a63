"""The searches as one kind of object (prm_critic.langgraph): ``BeamSearch`` beside ``MCTSSearch``,
one budget vocabulary, one input check, the registry of searches, one router spelling per edge.

Real compiled LangGraph graphs throughout, over the beam tests' text maze (a room name is the
forkable state; a deterministic keyword critic with a misleading first step) and an endless tree.
"""

from __future__ import annotations

import asyncio
import dataclasses
import warnings

import numpy as np
import pytest

pytest.importorskip("langgraph")

from fakes import KeywordCritic  # noqa: E402
from langgraph.errors import GraphRecursionError  # noqa: E402

from prm_critic.critic import BaseCritic, RandomCritic  # noqa: E402
from prm_critic.langgraph import (  # noqa: E402
    BeamConfig, BeamSearch, MCTSConfig, MCTSSearch, SearchKind, SearchResult, StepCriticNode, beam_search_result,
    build_beam_search_graph, get_search, register_search, searches, unregister_search,
)
from prm_critic.langgraph.beam import STOP_REASONS  # noqa: E402
from prm_critic.validate import ArgumentError  # noqa: E402

MAZE = {"start": ["hall", "garden", "cellar"], "hall": ["closet", "pantry"], "garden": ["shed"],
        "shed": ["vault"], "cellar": ["pit"], "closet": [], "pantry": [], "pit": [], "vault": []}
RULES = [("to the hall", 0.9, 0.9), ("to the garden", 0.6, 0.6), ("to the cellar", 0.3, 0.3),
         ("closet", 0.1, 0.1), ("pantry", 0.15, 0.15), ("shed", 0.5, 0.5), ("pit", 0.05, 0.05),
         ("vault", 0.95, 0.95)]
TASK = {"prompt": "reach the vault", "root": "start"}


def maze_expand(room, history, k):
    return [(f"call go(room={t})\nresult: you walk to the {t}.", t) for t in MAZE[room][:k]]


def vault(room):
    return room == "vault"


def endless_expand(path, history, k):
    return [(f"call go(room={path}/{i})\nresult: you walk on.", f"{path}/{i}") for i in range(k)]


# =========================================================================== BeamSearch
def test_beam_search_returns_what_the_graph_and_its_stream_give():
    search = BeamSearch(maze_expand, KeywordCritic(RULES), beam_width=3, max_depth=6, is_terminal=vault)
    out = search.invoke(TASK, {"recursion_limit": 40})
    graph = build_beam_search_graph(maze_expand, KeywordCritic(RULES), beam_width=3, max_depth=6,
                                    is_terminal=vault).compile()
    events, final = [], None
    for mode, chunk in graph.stream(TASK, {"recursion_limit": 40}, stream_mode=["custom", "values"]):
        if mode == "custom":
            events.append(chunk)
        else:
            final = chunk
    assert isinstance(out, SearchResult) and out == beam_search_result(final, events)
    assert (out.stop_reason, out.solved, out.state, out.policy_calls) == ("solved", True, "vault", 8)
    assert [e["type"] for e in out.events] == ["prm_beam_prune"] * 3
    assert search.config == BeamConfig(beam_width=3, max_depth=6, is_terminal=vault)
    assert BeamSearch(maze_expand, KeywordCritic(RULES), search.config).invoke(TASK, {"recursion_limit": 40}) == out
    assert "BeamSearch(KeywordCritic, BeamConfig(beam_width=3" in repr(search)


def test_beam_search_async_equals_sync_and_awaits_an_async_expand():
    async def aexpand(room, history, k):
        await asyncio.sleep(0)
        return maze_expand(room, history, k)

    class AsyncOnlyCritic(BaseCritic):
        """Scores like the keyword critic, but only through ascore (score must not be called)."""

        inner = KeywordCritic(RULES)

        def score(self, steps):
            raise AssertionError("the async path must call ascore")

        async def ascore(self, steps):
            await asyncio.sleep(0)
            return self.inner.score(steps)

    kw = dict(beam_width=2, branch_factor=3, max_depth=6, is_terminal=vault)
    sync = BeamSearch(maze_expand, KeywordCritic(RULES), **kw).invoke(TASK)
    assert asyncio.run(BeamSearch(maze_expand, KeywordCritic(RULES), **kw).ainvoke(TASK)) == sync
    assert asyncio.run(BeamSearch(aexpand, AsyncOnlyCritic(), **kw).ainvoke(TASK)) == sync
    assert asyncio.run(BeamSearch(aexpand, KeywordCritic(RULES), **kw).abatch([TASK, TASK])) == [sync, sync]
    with pytest.raises(TypeError, match=r"expand: .* is a coroutine function; run the search with ainvoke"):
        BeamSearch(aexpand, KeywordCritic(RULES), **kw).invoke(TASK)
    graph = build_beam_search_graph(aexpand, KeywordCritic(RULES), **kw).compile()
    with pytest.raises(TypeError, match=r"expand: returned an awaitable \(an async expand\); run the search with "
                                        r"ainvoke"):
        graph.invoke(TASK)


def test_beam_search_input_and_arguments_are_checked_like_mcts():
    for make in (BeamSearch, MCTSSearch):  # one input check for every search
        search = make(maze_expand, KeywordCritic(RULES))
        with pytest.raises(KeyError, match="root: the input must hold the initial env state"):
            search.invoke({"prompt": "p"})
        with pytest.raises(TypeError, match=r"prompt: expected str, got int 3"):
            search.invoke({"prompt": 3, "root": "start"})
        with pytest.raises(TypeError, match=r"input: expected a mapping"):
            search.invoke(["start"])
        with pytest.raises(TypeError, match=r"invoke: expected \(input, config\) only, got keyword arguments"):
            search.invoke(TASK, stream_mode="values")
    with pytest.raises(TypeError, match=r"config: pass a BeamConfig or its fields as keyword arguments, not both"):
        BeamSearch(maze_expand, KeywordCritic(RULES), BeamConfig(), beam_width=2)
    with pytest.raises(TypeError, match=r"config: expected a BeamConfig or None, got MCTSConfig"):
        BeamSearch(maze_expand, KeywordCritic(RULES), MCTSConfig())
    with pytest.raises(ValueError, match=r"beam_width: expected an int >= 1, got 0"):
        BeamSearch(maze_expand, KeywordCritic(RULES), beam_width=0)
    with pytest.raises(TypeError, match=r"critic: expected a prm_critic.BaseCritic"):
        BeamSearch(maze_expand, "gpt-judge")


def test_beam_config_is_public_checked_and_frozen():
    cfg = BeamConfig(beam_width=np.int64(2), policy_budget=np.int32(9), critic_budget=7)
    assert (type(cfg.beam_width), type(cfg.policy_budget)) == (int, int)
    assert (cfg.guard.policy_calls, cfg.guard.critic_calls) == (9, 7)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.policy_budget = 3  # type: ignore[misc]
    with pytest.raises(ArgumentError, match=r"critic_budget: expected an int or None >= 1, got str '5'"):
        BeamConfig(critic_budget="5")
    with pytest.raises(ArgumentError, match=r"is_lost: expected a callable is_lost\(env_state\) -> bool or None"):
        BeamConfig(is_lost="pit")


# =========================================================================== one budget vocabulary
def test_the_old_beam_budget_keyword_warns_and_is_the_policy_budget():
    with pytest.warns(DeprecationWarning, match=r"build_beam_search_graph\(budget=...\) is deprecated: pass "
                                                r"policy_budget="):
        old = BeamConfig(budget=5)
    assert old.policy_budget == 5 and old.guard == BeamConfig(policy_budget=5).guard
    with pytest.warns(DeprecationWarning):
        graph = build_beam_search_graph(endless_expand, RandomCritic(seed=1), budget=5).compile()
    with_old = beam_search_result(graph.invoke({"prompt": "walk", "root": "r"}))
    new = BeamSearch(endless_expand, RandomCritic(seed=1), policy_budget=5).invoke({"prompt": "walk", "root": "r"})
    assert with_old == dataclasses.replace(new, events=()) and new.stop_reason == "budget" and new.policy_calls == 5
    with pytest.warns(DeprecationWarning), pytest.raises(ArgumentError, match=r"budget: the deprecated name of "
                                                                              r"policy_budget, given together with it"):
        BeamConfig(budget=5, policy_budget=4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        BeamConfig(policy_budget=5)  # the new spelling does not warn
        build_beam_search_graph(endless_expand, RandomCritic(seed=1), budget=None)


hypothesis = pytest.importorskip("hypothesis")
st = hypothesis.strategies


@hypothesis.settings(max_examples=40, deadline=None)
@hypothesis.given(name=st.sampled_from(["beam", "mcts"]), policy_budget=st.one_of(st.none(), st.integers(1, 20)),
                  critic_budget=st.one_of(st.none(), st.integers(1, 20)), limit=st.integers(1, 30),
                  branch=st.integers(1, 3))
def test_every_search_takes_the_same_budgets_and_never_raises_recursion_error(name, policy_budget, critic_budget,
                                                                              limit, branch):
    """Through the registry, any budgets and any recursion limit on an endless tree: never over a
    budget, never ``GraphRecursionError``, a stop reason, ``"budget"`` only with a budget spent."""
    search = get_search(name).build(endless_expand, RandomCritic(seed=3), branch_factor=branch, max_depth=1000,
                                    policy_budget=policy_budget, critic_budget=critic_budget)
    try:
        out = search.invoke({"prompt": "walk", "root": "r"}, {"recursion_limit": limit})
    except GraphRecursionError as exc:  # pragma: no cover
        pytest.fail(f"{name}, recursion_limit={limit}: GraphRecursionError ({exc})")
    cap = min([x for x in (policy_budget, critic_budget) if x is not None], default=None)
    assert cap is None or out.policy_calls <= cap and out.critic_calls <= cap
    assert out.stop_reason in ("budget", "recursion_limit", "max_iterations", "max_depth")
    if out.stop_reason == "budget":
        assert out.policy_calls == out.critic_calls == cap
    if limit == 1:
        assert (out.steps, out.state, out.policy_calls) == ((), "r", 0)
    if name == "beam":
        assert out.stop_reason in STOP_REASONS


# =========================================================================== the registry
def test_the_registry_names_both_searches_and_builds_them():
    assert searches()[:2] == ("beam", "mcts")
    beam, mcts = get_search("beam"), get_search("mcts")
    assert (beam.search, beam.config, mcts.search, mcts.config) == (BeamSearch, BeamConfig, MCTSSearch, MCTSConfig)
    assert all("policy_budget" in [f.name for f in dataclasses.fields(k.config)] for k in (beam, mcts))
    for kind in (beam, mcts):
        out = kind.build(maze_expand, KeywordCritic(RULES), branch_factor=3, max_depth=6, policy_budget=30,
                         is_terminal=vault).invoke(TASK, {"recursion_limit": 60})
        assert (out.solved, out.state) == (True, "vault"), kind.name
    assert isinstance(beam.build(maze_expand, KeywordCritic(RULES), BeamConfig(beam_width=1)), BeamSearch)
    with pytest.raises(ArgumentError, match=r"search: expected one of \['beam', 'mcts'.*got 'beem'; did you mean "
                                            r"'beam'\?"):
        get_search("beem")
    with pytest.raises(ArgumentError, match=r"beam_widht: not a setting of BeamConfig; expected one of .*did you "
                                            r"mean 'beam_width'\?"):
        beam.build(maze_expand, KeywordCritic(RULES), beam_widht=2)


def test_a_search_of_your_own_is_registered_and_refused_when_malformed():
    @dataclasses.dataclass(frozen=True)
    class GreedyConfig(BeamConfig):
        beam_width: int = 1

    class GreedySearch(BeamSearch):
        config_type = GreedyConfig

    kind = register_search(SearchKind("greedy", GreedySearch, GreedyConfig, description="beam of width 1"))
    try:
        assert get_search("greedy") is kind and "greedy" in searches()
        out = kind.build(maze_expand, KeywordCritic(RULES), max_depth=6, is_terminal=vault).invoke(TASK)
        assert not out.solved and out.steps[0].startswith("call go(room=hall)")  # greedy follows the misleading hall
        with pytest.raises(ArgumentError, match=r"kind: a search named 'greedy' is already registered; pass "
                                                r"replace=True"):
            register_search(kind)
        assert register_search(kind, replace=True) is kind
    finally:
        assert unregister_search("greedy") is kind
    assert "greedy" not in searches()

    @dataclasses.dataclass
    class Mutable:
        x: int = 1

    with pytest.raises(ArgumentError, match=r"config: expected a frozen dataclass \(the config class of search "
                                            r"'mine'\)"):
        SearchKind("mine", BeamSearch, Mutable)
    with pytest.raises(ArgumentError, match=r"name: expected a non-empty string of letters, digits and '_', got "
                                            r"'best first'"):
        SearchKind("best first", BeamSearch, BeamConfig)
    with pytest.raises(ArgumentError, match=r"search: expected the search class of 'mine'"):
        SearchKind("mine", BeamSearch(maze_expand, KeywordCritic(RULES)), BeamConfig)
    with pytest.raises(ArgumentError, match=r"kind: expected a prm_critic.langgraph.SearchKind, got str"):
        register_search("beam")


# =========================================================================== one router spelling per edge
def test_the_old_router_spellings_warn_and_still_route():
    import prm_critic.langgraph as lg
    import prm_critic.langgraph.node as node_module

    node = StepCriticNode(KeywordCritic(RULES))
    state = {"critic_verdict": "retry", "remaining_steps": 2}
    for module in (lg, node_module):
        for old, new in (("route_after_critic", r"node\.router\(\)"), ("critic_router", r"node\.router\(\)"),
                         ("route_after_agent", r"node\.agent_router\(\)"),
                         ("agent_router", r"node\.agent_router\(\)")):
            with pytest.warns(DeprecationWarning, match=rf"{old} is deprecated: route with the critic node's {new}"):
                fn = getattr(module, old)
            assert old not in module.__all__
            if old == "route_after_critic":
                assert fn(state) == node.router()(state) == "end"
            if old == "critic_router":
                assert fn()(state) == node.router()(state)
                with pytest.raises(ArgumentError, match=r"min_remaining_steps: expected an int >= 2, got 1"):
                    fn(min_remaining_steps=1)
            if old == "agent_router":
                assert fn().__name__ == node.agent_router().__name__ == "route_after_agent"
    with pytest.raises(AttributeError, match=r"has no attribute 'route_after_tools'"):
        lg.route_after_tools  # noqa: B018
