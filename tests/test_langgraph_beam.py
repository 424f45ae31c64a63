"""Critic-guided beam search: a real compiled LangGraph graph (Send fan-out, reducers, Overwrite)
with InMemorySaver, over a tiny text maze whose state is forkable (a room name).

No fakes: the "policy" lists the room's exits and the tool is a real function; the critic is a
deterministic real BaseCritic (KeywordCritic) with a misleading first step (the hall looks best
but leads only to dead ends), so greedy search fails where a beam of 3 succeeds.
"""

from __future__ import annotations

import pytest

pytest.importorskip("langgraph")

from fakes import KeywordCritic  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402

from prm_critic.langgraph import build_beam_search_graph  # noqa: E402

MAZE = {"start": ["hall", "garden", "cellar"], "hall": ["closet", "pantry"], "garden": ["shed"],
        "shed": ["vault"], "cellar": ["pit"], "closet": [], "pantry": [], "pit": [], "vault": []}
RULES = [("to the hall", 0.9, 0.9), ("to the garden", 0.6, 0.6), ("to the cellar", 0.3, 0.3),
         ("closet", 0.1, 0.1), ("pantry", 0.15, 0.15), ("shed", 0.5, 0.5), ("pit", 0.05, 0.05),
         ("vault", 0.95, 0.95)]


def go(room: str, target: str) -> tuple[str, str]:
    """The tool: walk from ``room`` to ``target`` (an exit), returning the step text and new state."""
    if target not in MAZE[room]:
        raise ValueError(f"no door from {room} to {target}")
    return f"call go(room={target})\nresult: you walk to the {target}.", target


def run(beam_width, *, budget=None, thread="t", aggregate="min"):
    calls: list[tuple[str, int]] = []

    def expand(room, history, k):
        calls.append((room, k))
        return [go(room, t) for t in MAZE[room][:k]]  # the policy: try the first k exits

    critic = KeywordCritic(RULES)
    builder = build_beam_search_graph(expand, critic, beam_width=beam_width, branch_factor=3, max_depth=6,
                                      dead_end_threshold=0.2, budget=budget, aggregate=aggregate,
                                      is_terminal=lambda room: room == "vault")
    graph = builder.compile(checkpointer=InMemorySaver())
    cfg = {"configurable": {"thread_id": thread}, "recursion_limit": 40}
    events, final = [], None
    for mode, chunk in graph.stream({"prompt": "reach the vault", "root": "start"}, cfg, stream_mode=["custom", "values"]):
        if mode == "custom":
            events.append(chunk)
        else:
            final = chunk
    return final, calls, critic, events, graph, cfg


def test_greedy_fails_where_beam_finds_the_goal():
    greedy, _, _, _, _, _ = run(1)
    assert greedy["stop_reason"] == "dead_ends" and greedy.get("solution") is None
    assert greedy["best"]["steps"][0].endswith("to the hall.")

    out, calls, critic, events, graph, cfg = run(3)
    assert out["stop_reason"] == "solved"
    assert [s.split("\n")[0] for s in out["solution"]["steps"]] == [
        "call go(room=garden)", "call go(room=shed)", "call go(room=vault)"]
    assert out["solution"]["step_scores"] == pytest.approx([0.6, 0.5, 0.95])
    assert out["solution"]["score"] == pytest.approx(0.5)  # min aggregation
    # depth 1: 3 proposals; depth 2: hall 2 + garden 1 + cellar 1; depth 3: shed 1
    assert out["policy_calls"] == 8 and out["depth"] == 3
    assert out["pruned_dead_end"] == 3  # closet, pantry, pit
    assert critic.batches == [3, 4, 1]  # one critic batch per depth
    assert [e["kept"] for e in events] == [3, 1, 0]
    # the checkpointer saw every super-step; the final checkpoint holds the result
    assert graph.get_state(cfg).values["stop_reason"] == "solved"
    assert len(list(graph.get_state_history(cfg))) >= 7


def test_budget_is_respected():
    out, calls, _, _, _, _ = run(3, budget=5)
    assert out["stop_reason"] == "budget" and out.get("solution") is None
    assert out["policy_calls"] == 5
    assert sum(k for _, k in calls) <= 5
    assert calls == [("start", 3), ("hall", 2)]  # the budget left (2) went to the best beam item first


def test_beam_width_prunes_and_aggregates():
    out, _, _, events, _, _ = run(2, aggregate="product")
    # depth 1 keeps hall + garden, drops cellar by beam width; garden -> shed -> vault still wins
    assert events[0]["pruned_beam"] == 1 and out["pruned_beam"] >= 1
    assert out["stop_reason"] == "solved"
    assert out["solution"]["score"] == pytest.approx(0.6 * 0.5 * 0.95, rel=1e-5)
