"""MCTS with PRM values (prm_critic.langgraph.mcts) and what the searches share (langgraph/search.py).

Real compiled LangGraph graphs throughout. Two environments:

* the beam tests' text maze (a room name is the forkable state; a deterministic keyword critic
  with a misleading first step);
* ``ToyLock``: a toy, fake combination lock written for these tests only -- each step presses a
  digit; the tool's reply says whether the lock clicked (the digit continues the secret code) or
  not. Its state is an immutable tuple of digits, so forking is free.
"""

from __future__ import annotations

import asyncio
import dataclasses

import numpy as np
import pytest

pytest.importorskip("langgraph")

from fakes import KeywordCritic  # noqa: E402
from faults import correct  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402
from langgraph.errors import GraphRecursionError  # noqa: E402

from prm_critic.critic import BaseCritic, ConstantCritic, RandomCritic, StepScores  # noqa: E402
from prm_critic.langgraph import MCTSConfig, MCTSSearch, SearchBudget, SearchResult, build_mcts_graph  # noqa: E402
from prm_critic.langgraph.mcts import STOP_REASONS, mcts_search_result  # noqa: E402
from prm_critic.validate import ArgumentError  # noqa: E402

MAZE = {"start": ["hall", "garden", "cellar"], "hall": ["closet", "pantry"], "garden": ["shed"],
        "shed": ["vault"], "cellar": ["pit"], "closet": [], "pantry": [], "pit": [], "vault": []}
RULES = [("to the hall", 0.9, 0.9), ("to the garden", 0.6, 0.6), ("to the cellar", 0.3, 0.3),
         ("closet", 0.1, 0.1), ("pantry", 0.15, 0.15), ("shed", 0.5, 0.5), ("pit", 0.05, 0.05),
         ("vault", 0.95, 0.95)]
TASK = {"prompt": "reach the vault", "root": "start"}


def go(room: str, target: str) -> tuple[str, str]:
    """The maze's tool: walk from ``room`` to ``target`` (an exit)."""
    if target not in MAZE[room]:
        raise ValueError(f"no door from {room} to {target}")
    return f"call go(room={target})\nresult: you walk to the {target}.", target


def maze_expand(room, history, k):
    return [go(room, t) for t in MAZE[room][:k]]


def maze_search(critic=None, **kw) -> MCTSSearch:
    kw.setdefault("branch_factor", 3)
    kw.setdefault("max_iterations", 20)
    return MCTSSearch(maze_expand, critic or KeywordCritic(RULES), is_terminal=lambda room: room == "vault", **kw)


class ToyLock:
    """A toy, fake environment for these tests: a combination lock of ``len(code)`` digits in
    ``range(base)``. A state is the tuple of digits pressed; pressing the next digit of the code
    makes the lock click, any other digit jams it for good (no way to the goal from there)."""

    def __init__(self, code: tuple[int, ...], base: int = 4):
        self.code, self.base = tuple(code), base

    def expand(self, pressed, history, k):
        """The policy lists the digits in order; the tool runs on a copy (a new tuple)."""
        out = []
        for d in range(min(k, self.base)) if len(pressed) < len(self.code) else ():
            nxt = pressed + (d,)
            ok = nxt == self.code[:len(nxt)]
            out.append((f"call press(digit={d})\nresult: {'the lock clicks' if ok else 'nothing happens'}", nxt))
        return out

    def solved(self, pressed) -> bool:
        return pressed == self.code


LOCK_RULES = [("the lock clicks", 0.9, 0.9), ("nothing happens", 0.1, 0.1)]


def endless_expand(path, history, k):
    """A tree without end: every state has ``k`` exits and none is terminal."""
    return [(f"call go(room={path}/{i})\nresult: you walk on.", f"{path}/{i}") for i in range(k)]


# =========================================================================== the search
def test_mcts_finds_the_vault_behind_the_misleading_hall():
    search = maze_search()
    out = search.invoke(TASK)
    assert isinstance(out, SearchResult)
    assert out.stop_reason == "solved" and out.solved and out.state == "vault"
    assert [s.split("\n")[0] for s in out.steps] == ["call go(room=garden)", "call go(room=shed)", "call go(room=vault)"]
    assert out.step_scores == pytest.approx((0.6, 0.5, 1.0))  # solved: the env's outcome, not the critic's 0.95
    assert out.score == pytest.approx(1.0)  # aggregate="last"
    # the hall (0.9) is expanded first; its best continuation (0.15) pulls Q(hall) to 0.525, under the garden
    assert [e["leaf"] for e in out.events] == [0, 1, 2, 6]
    assert out.policy_calls == out.critic_calls == 3 + 2 + 1 + 1
    assert out.events[-1]["stop_reason"] == "solved" and all(e["stop_reason"] == "" for e in out.events[:-1])
    assert out.stats["iterations"] == 4 and out.stats["nodes"] == 8
    # the critic saw the prompt and the path so far
    seen = search.critic.seen[-1]
    assert seen.prompt == "reach the vault" and len(seen.history) == 2


def test_uct_selection_and_the_min_aggregate_also_solve_it():
    out = maze_search(selection="uct", aggregate="min").invoke(TASK)
    assert out.stop_reason == "solved" and out.score == pytest.approx(0.5)  # min(0.6, 0.5, 0.95)


def test_policy_priors_steer_puct():
    """With a critic that cannot tell the rooms apart, PUCT follows the policy's prior."""

    def expand(room, history, k):
        return [(*go(room, t), 10.0 if t in ("garden", "shed", "vault") else 1.0) for t in MAZE[room][:k]]

    critic = ConstantCritic(0.5, tie_break=0.0)
    out = MCTSSearch(expand, critic, is_terminal=lambda r: r == "vault", max_iterations=10).invoke(TASK)
    assert out.stop_reason == "solved" and [e["leaf"] for e in out.events] == [0, 2, 4]  # start, garden, shed
    uniform = MCTSSearch(maze_expand, critic, is_terminal=lambda r: r == "vault", max_iterations=10).invoke(TASK)
    assert uniform.stats["iterations"] > out.stats["iterations"]


def test_answer_without_a_terminal_check_is_the_principal_variation():
    out = MCTSSearch(maze_expand, KeywordCritic(RULES), max_iterations=3).invoke(TASK)
    assert out.stop_reason == "max_iterations" and not out.solved and out.stats["root_visits"] == 3
    # the hall and the garden were both expanded (N = 2 each); the garden's Q (0.6 + 0.5) / 2 beats the
    # hall's (0.9 + 0.15) / 2, so the principal variation goes through the garden
    assert [s.split("\n")[0] for s in out.steps] == ["call go(room=garden)", "call go(room=shed)"]
    assert out.stats["q"] == pytest.approx(0.5) and out.score == pytest.approx(0.5)
    exhausted = MCTSSearch(maze_expand, KeywordCritic(RULES), max_iterations=50).invoke(TASK)
    assert exhausted.stop_reason == "exhausted" and exhausted.stats["nodes"] == len(MAZE)
    assert exhausted.policy_calls == len(MAZE) - 1  # every room but the start proposed once


def test_a_terminal_root_is_solved_at_once():
    out = maze_search().invoke({"prompt": "already there", "root": "vault"})
    assert (out.stop_reason, out.solved, out.steps, out.score, out.policy_calls) == ("solved", True, (), None, 0)


def test_informative_critic_finds_the_code_more_often_than_a_random_critic_at_equal_budget():
    rng = np.random.default_rng(7)
    codes = [tuple(int(d) for d in rng.integers(0, 4, size=4)) for _ in range(12)]
    found = {"keyword": 0, "random": 0}
    for i, code in enumerate(codes):
        lock = ToyLock(code)
        for name, critic in (("keyword", KeywordCritic(LOCK_RULES)), ("random", RandomCritic(seed=i))):
            out = MCTSSearch(lock.expand, critic, branch_factor=4, max_depth=4, max_iterations=100, policy_budget=24,
                             is_terminal=lock.solved, seed=i).invoke({"prompt": "open the lock", "root": ()})
            assert out.policy_calls <= 24 and out.stop_reason in ("solved", "budget")
            found[name] += out.solved
    # the informative critic walks the clicks straight to the code: 4 expansions of 4 = 16 calls
    assert found["keyword"] == len(codes)
    assert found["random"] < found["keyword"], found


# =========================================================================== determinism, async
def tie_search(seed: int, **kw) -> MCTSSearch:
    """Every step scores the same: selection is decided by the seeded tie-breaks alone."""
    return MCTSSearch(endless_expand, ConstantCritic(0.5, tie_break=0.0), branch_factor=2, max_iterations=12,
                      seed=seed, **kw)


def test_same_seed_same_result_and_events():
    runs = [tie_search(s).invoke({"prompt": "walk", "root": "r"}) for s in (3, 3, 4, 5)]
    assert runs[0] == runs[1]  # the dataclass compares steps, state, scores, calls, events, stats
    assert runs[0].events == runs[1].events and len(runs[0].events) == 12
    assert len({tuple(e["leaf"] for e in r.events) for r in runs}) > 1  # the seed decides the ties


def test_streamed_events_are_the_result_events():
    search = tie_search(1)
    streamed = [c for c in search.graph.stream({"prompt": "walk", "root": "r"}, stream_mode="custom")]
    assert streamed == list(search.invoke({"prompt": "walk", "root": "r"}).events)
    assert {e["type"] for e in streamed} == {"prm_mcts_iteration"}


def test_async_equals_sync():
    async def aexpand(path, history, k):
        await asyncio.sleep(0)
        return endless_expand(path, history, k)

    class AsyncOnlyCritic(BaseCritic):
        """Scores like the random control, but only through ascore (score must not be called)."""

        inner = RandomCritic(seed=5)

        def score(self, steps):
            raise AssertionError("the async path must call ascore")

        async def ascore(self, steps):
            await asyncio.sleep(0)
            return self.inner.score(steps)

    kw = dict(branch_factor=3, max_iterations=15, policy_budget=30, seed=9)
    task = {"prompt": "walk", "root": "r"}
    sync = MCTSSearch(endless_expand, RandomCritic(seed=5), **kw).invoke(task)
    assert asyncio.run(MCTSSearch(endless_expand, RandomCritic(seed=5), **kw).ainvoke(task)) == sync
    assert asyncio.run(MCTSSearch(aexpand, AsyncOnlyCritic(), **kw).ainvoke(task)) == sync
    batch = asyncio.run(MCTSSearch(aexpand, RandomCritic(seed=5), **kw).abatch([task, task]))
    assert batch == [sync, sync]
    with pytest.raises(TypeError, match=r"expand: .* is a coroutine function; run the search with ainvoke"):
        MCTSSearch(aexpand, RandomCritic(), **kw).invoke(task)


def test_checkpointed_graph_and_result_of_its_final_state():
    search = maze_search(checkpointer=InMemorySaver())
    cfg = {"configurable": {"thread_id": "t"}}
    out = search.invoke(TASK, cfg)
    state = search.graph.get_state(cfg).values
    assert mcts_search_result(state) == out
    again = search.invoke(TASK, cfg)  # the same thread again: init starts a fresh tree and event list
    assert again == out


# =========================================================================== budgets and limits
hypothesis = pytest.importorskip("hypothesis")
st = hypothesis.strategies


@hypothesis.settings(max_examples=100, deadline=None)
@hypothesis.given(policy_budget=st.one_of(st.none(), st.integers(1, 30)),
                  critic_budget=st.one_of(st.none(), st.integers(1, 30)),
                  limit=st.integers(1, 40), branch=st.integers(1, 3), max_iterations=st.integers(1, 30),
                  max_depth=st.integers(1, 6), leaves=st.sampled_from([None, 1, 2]),
                  selection=st.sampled_from(["puct", "uct"]), seed=st.integers(0, 2**32 - 1))
def test_never_recursion_error_never_over_budget_always_a_stop_reason(policy_budget, critic_budget, limit, branch,
                                                                       max_iterations, max_depth, leaves, selection,
                                                                       seed):
    """An endless tree, or one whose rooms at depth ``leaves`` have no exits (so the tree can run
    out): any budgets, any recursion limit, any iteration cap."""

    def expand(path, history, k):
        return [] if leaves is not None and len(history) >= leaves else endless_expand(path, history, k)

    search = MCTSSearch(expand, RandomCritic(seed=seed % 1000), branch_factor=branch, max_iterations=max_iterations,
                        max_depth=max_depth, policy_budget=policy_budget, critic_budget=critic_budget,
                        selection=selection, seed=seed)
    try:
        out = search.invoke({"prompt": "walk", "root": "r"}, {"recursion_limit": limit})
    except GraphRecursionError as exc:  # pragma: no cover
        pytest.fail(f"recursion_limit={limit}: GraphRecursionError ({exc})")
    assert out.stop_reason in STOP_REASONS
    guard = SearchBudget(policy_budget, critic_budget)
    assert out.policy_calls <= (policy_budget or out.policy_calls) and out.critic_calls <= (critic_budget or out.critic_calls)
    iterations = out.stats["iterations"]
    assert iterations == len(out.events) <= min(max_iterations, max(0, limit - 2))
    if out.events:
        assert out.events[-1]["stop_reason"] == out.stop_reason
        assert all(e["stop_reason"] == "" for e in out.events[:-1])
        assert all(e["proposals"] <= e["k"] <= branch for e in out.events)
    depth_cap = max_depth if leaves is None else min(max_depth, leaves)
    reason_holds = {
        "budget": guard.spent(out.policy_calls, out.critic_calls),
        "max_iterations": iterations == max_iterations,
        "recursion_limit": iterations == max(0, limit - 2),
        "exhausted": out.policy_calls == sum(branch ** d for d in range(1, depth_cap + 1)),  # the whole tree
        "solved": False,  # nothing is terminal here
    }
    assert reason_holds[out.stop_reason], (out.stop_reason, out.stats)
    if out.stop_reason == "budget":  # never over, so a spent budget is used exactly
        assert out.policy_calls == out.critic_calls == min(x for x in (policy_budget, critic_budget) if x is not None)


@pytest.mark.fault
def test_mcts_stops_at_its_budget_with_the_stop_reason():
    """Budgets far below what the tree offers: the search stops exactly at the budget, saying so."""
    used = []
    for policy_budget, critic_budget in ((1, None), (7, None), (None, 5), (10, 4), (3, 30)):
        out = MCTSSearch(endless_expand, RandomCritic(seed=2), branch_factor=3, max_iterations=1000, max_depth=50,
                         policy_budget=policy_budget, critic_budget=critic_budget).invoke({"prompt": "walk", "root": "r"})
        cap = min(x for x in (policy_budget, critic_budget) if x is not None)
        assert out.stop_reason == "budget" and out.policy_calls == out.critic_calls == cap
        assert out.events[-1]["k"] == out.events[-1]["proposals"] <= 3  # the last expansion asked only what was left
        used.append(out.policy_calls)
    correct(37, f"MCTS with policy/critic budgets {used} on an endless tree (max_iterations 1000)",
            "stop_reason 'budget' with exactly the budget used, never more, the last expansion cut to what was left")


# =========================================================================== the shared module
def test_search_budget_guard():
    guard = SearchBudget(policy_calls=np.int64(5), critic_calls=8)
    assert type(guard.policy_calls) is int and guard.limited
    assert guard.left(2, 2) == 3 and guard.left(2, 7) == 1
    assert guard.grant(4, 2, 2) == 3 and guard.grant(4, 6, 0) == 0
    assert not guard.spent(4, 7) and guard.spent(5, 0) and guard.spent(0, 8)
    free = SearchBudget()
    assert not free.limited and free.left(100, 100) is None and free.grant(3, 100, 100) == 3 and not free.spent(9, 9)
    with pytest.raises(ArgumentError, match=r"critic_calls: expected an int or None >= 1, got float 2.5"):
        SearchBudget(critic_calls=2.5)


def test_emit_event_keeps_its_old_import_path_and_beam_gives_the_shared_result():
    from prm_critic.langgraph import build_beam_search_graph, search
    from prm_critic.langgraph.beam import beam_search_result
    from prm_critic.langgraph.node import emit_event

    assert emit_event is search.emit_event
    emit_event({"type": "outside a graph"})  # a no-op outside a run
    graph = build_beam_search_graph(maze_expand, KeywordCritic(RULES), beam_width=3, max_depth=6,
                                    is_terminal=lambda room: room == "vault").compile()
    events, final = [], None
    for mode, chunk in graph.stream(TASK, {"recursion_limit": 40}, stream_mode=["custom", "values"]):
        if mode == "custom":
            events.append(chunk)
        else:
            final = chunk
    out = beam_search_result(final, events)
    assert (out.stop_reason, out.solved, out.state, out.policy_calls, out.critic_calls) == ("solved", True, "vault", 8, 8)
    assert out.score == pytest.approx(0.5) and len(out.events) == 3 and out.stats["depth"] == 3
    empty = beam_search_result({"root": "start", "stop_reason": "recursion_limit"})
    assert (empty.steps, empty.state, empty.score) == ((), "start", None)


# =========================================================================== bad settings
@pytest.mark.parametrize("field, value, exc, pattern", [
    ("branch_factor", 0, ValueError, r"branch_factor: expected an int >= 1, got 0"),
    ("max_iterations", 2.0, TypeError, r"max_iterations: expected an int >= 1, got float 2.0"),
    ("max_depth", True, TypeError, r"max_depth: expected an int >= 1, got bool True"),
    ("policy_budget", 0, ValueError, r"policy_budget: expected an int >= 1, got 0"),
    ("critic_budget", "5", TypeError, r"critic_budget: expected an int or None >= 1, got str '5'"),
    ("selection", "ucb", ValueError, r"selection: expected one of \['puct', 'uct'\], got 'ucb'; did you mean 'uct'\?"),
    ("exploration", -1.0, ValueError, r"exploration: expected a finite number >= 0.0, got -1.0"),
    ("exploration", float("nan"), ValueError, r"exploration: expected a finite number >= 0.0, got nan"),
    ("aggregate", "max", ValueError, r"aggregate: expected one of \['last', 'mean', 'min', 'product'\], got 'max'"),
    ("head", "", TypeError, r"head: expected 'progress', 'success' or a name in StepScores.extra, got ''"),
    ("is_terminal", "vault", TypeError, r"is_terminal: expected a callable is_terminal\(env_state\) -> bool or None, "
                                        r"got str 'vault'"),
    ("seed", -1, ValueError, r"seed: expected an integer in \[0, 2\*\*32\), got -1"),
])
def test_bad_config_values_are_named(field, value, exc, pattern):
    with pytest.raises(exc, match=pattern):
        MCTSConfig(**{field: value})
    with pytest.raises(exc, match=pattern):  # the same error through the search's keyword arguments
        MCTSSearch(maze_expand, KeywordCritic(RULES), **{field: value})


def test_config_is_normalised_and_frozen():
    cfg = MCTSConfig(branch_factor=np.int32(2), exploration=2, policy_budget=np.int64(9))
    assert (type(cfg.branch_factor), type(cfg.exploration), type(cfg.policy_budget)) == (int, float, int)
    assert cfg.guard == SearchBudget(policy_calls=9)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.seed = 3  # type: ignore[misc]


def test_bad_arguments_and_bad_expand_output_are_named():
    critic = KeywordCritic(RULES)
    with pytest.raises(TypeError, match=r"expand: expected a callable expand\(env_state, history, k\), got str"):
        MCTSSearch("expand", critic)
    with pytest.raises(TypeError, match=r"critic: expected a prm_critic.BaseCritic .* got str"):
        MCTSSearch(maze_expand, "judge")
    with pytest.raises(TypeError, match=r"config: pass an MCTSConfig or its fields as keyword arguments, not both"):
        MCTSSearch(maze_expand, critic, MCTSConfig(), seed=1)
    with pytest.raises(TypeError, match=r"config: expected an MCTSConfig or None, got dict"):
        build_mcts_graph(maze_expand, critic, {"seed": 1})
    search = maze_search()
    with pytest.raises(ValueError, match=r"recursion_limit: expected an int >= 1, got 0"):
        search.invoke(TASK, {"recursion_limit": 0})
    with pytest.raises(KeyError, match="root"):
        search.invoke({"prompt": "p"})
    with pytest.raises(TypeError, match=r"prompt: expected str, got int 3"):
        search.invoke({"prompt": 3, "root": "start"})
    with pytest.raises(TypeError, match=r"invoke: expected \(input, config\) only, got keyword arguments \['stream_mode'\]"):
        search.invoke(TASK, None, stream_mode="custom")

    def run(expand):
        return MCTSSearch(expand, critic, branch_factor=2).invoke({"prompt": "p", "root": 0})

    with pytest.raises(ValueError, match=r"expand: asked for at most k=2 proposals, got 3"):
        run(lambda s, h, k: [("a", 1)] * (k + 1))
    with pytest.raises(TypeError, match=r"expand: expected \(step_text, next_env_state\) pairs or \(step_text, "
                                        r"next_env_state, prior\) triples, got 'a'"):
        run(lambda s, h, k: ["a"])
    with pytest.raises(ValueError, match=r"expand: expected a prior on every proposal or on none, got 1 of 2"):
        run(lambda s, h, k: [("a", 1, 0.5), ("b", 2)])
    with pytest.raises(ValueError, match=r"expand: expected a prior that is a finite number >= 0, got -0.5"):
        run(lambda s, h, k: [("a", 1, -0.5)])
    with pytest.raises(ValueError, match=r"expand: expected priors with a positive sum, got \[0.0, 0.0\]"):
        run(lambda s, h, k: [("a", 1, 0), ("b", 2, 0.0)])

    async def aexpand(s, h, k):
        return []

    with pytest.raises(TypeError, match=r"expand: returned an awaitable \(an async expand\); run the search with ainvoke"):
        run(lambda s, h, k: aexpand(s, h, k))

    class ShortCritic(BaseCritic):
        def score(self, steps):
            return StepScores(np.zeros(len(steps) + 1), np.zeros(len(steps) + 1))

    with pytest.raises(ValueError, match=r"critic.score: expected 1 scores \(one per step\), got 2"):
        MCTSSearch(lambda s, h, k: [("a", 1)], ShortCritic()).invoke({"prompt": "p", "root": 0})


def test_the_critic_as_prior_normalises_the_siblings_step_scores():
    from prm_critic.langgraph.mcts import _critic_priors, _grow, _node

    assert _critic_priors([0.9, 0.6, 0.3]) == pytest.approx([0.5, 1 / 3, 1 / 6])
    assert _critic_priors([0.0, 0.0]) == [0.5, 0.5]
    root = {**_node(None, "", "start", 0, [], 0.0, 1.0, False, closed=False), "lost": False}
    proposals = [go("start", t) + (None,) for t in MAZE["start"]]
    for prior, want in (("critic", [0.5, 1 / 3, 1 / 6]), ("policy", [1 / 3] * 3)):
        tree, ids = _grow([root], 0, proposals, [0.9, 0.6, 0.3], MCTSConfig(prior=prior))
        assert [tree[i]["prior"] for i in ids] == pytest.approx(want)
    with pytest.raises(ArgumentError, match="prior"):
        MCTSConfig(prior="value")
    out = maze_search(prior="critic").invoke(TASK)
    assert out.stop_reason == "solved" and out.state == "vault"
