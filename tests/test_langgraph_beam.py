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


def run(beam_width, *, budget=None, thread="t", aggregate="min", dead_end_threshold=0.2, **kw):
    calls: list[tuple[str, int]] = []

    def expand(room, history, k):
        calls.append((room, k))
        return [go(room, t) for t in MAZE[room][:k]]  # the policy: try the first k exits

    critic = KeywordCritic(RULES)
    builder = build_beam_search_graph(expand, critic, beam_width=beam_width, branch_factor=3, max_depth=6,
                                      dead_end_threshold=dead_end_threshold, budget=budget, aggregate=aggregate,
                                      is_terminal=lambda room: room == "vault", **kw)
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
    greedy, _, _, events, _, _ = run(1)
    # depth 2: closet (0.1) and pantry (0.15) are both under 0.2: the best (pantry) is kept and
    # reported; the pantry has no exits, so the search ends there, saying so
    assert greedy["stop_reason"] == "no_proposals" and greedy.get("solution") is None
    assert greedy["all_pruned_kept_best"] == 1
    assert [(e["all_pruned"], e["all_pruned_kept_best"], e["kept"]) for e in events] == [
        (False, False, 1), (True, True, 1), (False, False, 0)]
    assert greedy["best"]["steps"][0].endswith("to the hall.")
    # the behaviour before on_all_pruned: the beam empties and the search stops at depth 2
    old, _, _, events, _, _ = run(1, on_all_pruned="stop")
    assert old["stop_reason"] == "dead_ends" and old["depth"] == 2 and old["beam"] == []
    assert old["all_pruned_kept_best"] == 0 and events[-1]["all_pruned"] and not events[-1]["all_pruned_kept_best"]

    out, calls, critic, events, graph, cfg = run(3)
    assert out["stop_reason"] == "solved"
    assert [s.split("\n")[0] for s in out["solution"]["steps"]] == [
        "call go(room=garden)", "call go(room=shed)", "call go(room=vault)"]
    assert out["solution"]["step_scores"] == pytest.approx([0.6, 0.5, 1.0])  # solved: the env's outcome, not 0.95
    assert out["solution"]["score"] == pytest.approx(0.5)  # min aggregation
    # depth 1: 3 proposals; depth 2: hall 2 + garden 1 + cellar 1; depth 3: shed 1
    assert out["policy_calls"] == 8 and out["depth"] == 3
    assert out["pruned_dead_end"] == 3  # closet, pantry, pit
    assert critic.batches == [3, 4, 1]  # one critic batch per depth
    assert [e["kept"] for e in events] == [3, 1, 0]
    assert out["all_pruned_kept_best"] == 0 and not any(e["all_pruned"] for e in events)
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
    assert out["solution"]["score"] == pytest.approx(0.6 * 0.5 * 1.0, rel=1e-5)  # solved: the vault step scores 1


def test_all_candidates_under_the_threshold_keep_the_best_and_report_it():
    # a threshold above every score the critic gives (an uncalibrated critic): the old behaviour
    # stopped at the first depth with nothing; now the best candidate is kept at every depth
    out, _, _, events, _, _ = run(1, dead_end_threshold=0.99)
    assert [s.split("\n")[0] for s in out["best"]["steps"][:1]] == ["call go(room=hall)"]
    assert out["all_pruned_kept_best"] == 2  # depth 1 (hall) and depth 2 (pantry)
    assert [e["all_pruned_kept_best"] for e in events] == [True, True, False]
    assert out["pruned_dead_end"] == 2 + 1  # garden, cellar; closet
    assert out["stop_reason"] == "no_proposals"
    # a beam of 3: depth 1 keeps only the best (hall), so the vault behind the garden is not found
    out3, _, _, events3, _, _ = run(3, dead_end_threshold=0.99)
    assert events3[0]["kept"] == 1 and events3[0]["all_pruned_kept_best"]
    assert out3["all_pruned_kept_best"] == 2 and out3.get("solution") is None
    old, _, _, events, _, _ = run(3, dead_end_threshold=0.99, on_all_pruned="stop")
    assert old["stop_reason"] == "dead_ends" and old["depth"] == 1 and old["best"] is None
    assert events == [{"type": "prm_beam_prune", "depth": 1, "candidates": 3, "kept": 0, "cut": 0.99,
                       "all_pruned": True, "all_pruned_kept_best": False, "pruned_dead_end": 3, "pruned_lost": 0,
                       "pruned_beam": 0, "policy_calls": 3, "stop_reason": "dead_ends"}]


def test_relative_threshold_follows_the_best_candidate():
    out, _, _, events, _, _ = run(3, dead_end_threshold=0.5, dead_end_mode="relative")
    # depth 1: hall 0.9, garden 0.6, cellar 0.3; cut = 0.5 * 0.9 = 0.45 drops the cellar only
    assert events[0]["cut"] == pytest.approx(0.45) and events[0]["kept"] == 2 and events[0]["pruned_dead_end"] == 1
    # depth 2: closet 0.1, pantry 0.15, shed 0.5; cut = 0.25 keeps the shed only
    assert events[1]["cut"] == pytest.approx(0.25) and events[1]["kept"] == 1 and events[1]["pruned_dead_end"] == 2
    assert out["stop_reason"] == "solved" and out["all_pruned_kept_best"] == 0
    # the same threshold as an absolute cut would prune differently (keeps the shed, drops all at 0.5)
    absolute, _, _, ev_abs, _, _ = run(3, dead_end_threshold=0.5)
    assert ev_abs[0]["cut"] == 0.5 and ev_abs[0]["kept"] == 2
    # relative threshold 1.0 keeps exactly the candidates that tie with the best newest step
    top, _, _, ev_top, _, _ = run(3, dead_end_threshold=1.0, dead_end_mode="relative")
    assert [e["kept"] for e in ev_top] == [1, 1, 0] and top["stop_reason"] == "no_proposals"  # hall, pantry, no exit
    assert top["all_pruned_kept_best"] == 0  # the best always survives a relative cut: nothing to report


def test_bad_mode_arguments_are_refused():
    with pytest.raises(ValueError, match=r"dead_end_mode: expected one of \['absolute', 'relative'\], got 'relativ'; "
                                         r"did you mean 'relative'\?"):
        run(1, dead_end_mode="relativ")
    with pytest.raises(ValueError, match=r"on_all_pruned: expected one of \['keep_best', 'stop'\], got 'keep'"):
        run(1, on_all_pruned="keep")


class HashCritic(KeywordCritic):
    """A deterministic real text critic: each step's score is a hash of its text, in [0, 1)."""

    def __init__(self):
        super().__init__([])

    def score(self, steps):
        import zlib

        import numpy as np

        from prm_critic.critic import StepScores

        self.batches.append(len(steps))
        v = np.asarray([(zlib.crc32(s.step.encode()) % 1000) / 1000.0 for s in steps], np.float32)
        return StepScores(v, v)


hypothesis = pytest.importorskip("hypothesis")
st = hypothesis.strategies


@hypothesis.settings(max_examples=40, deadline=None)
@hypothesis.given(threshold=st.floats(0.0, 1.0), mode=st.sampled_from(["absolute", "relative"]),
                  beam_width=st.integers(1, 3), branch=st.integers(1, 3), max_depth=st.integers(1, 5),
                  budget=st.one_of(st.none(), st.integers(1, 30)))
def test_beam_never_ends_empty_before_the_depth_cap_unless_the_budget_ran_out(threshold, mode, beam_width, branch,
                                                                             max_depth, budget):
    """An endless tree (every state has exits, nothing is terminal): whatever the threshold, the
    search reaches max_depth with a non-empty beam, or stops on the budget; every depth where all
    candidates were under the cut is counted and flagged."""

    def expand(path, history, k):
        return [(f"call go(room={path}/{i})\nresult: you walk on.", f"{path}/{i}") for i in range(k)]

    g = build_beam_search_graph(expand, HashCritic(), beam_width=beam_width, branch_factor=branch,
                                max_depth=max_depth, dead_end_threshold=threshold, dead_end_mode=mode,
                                budget=budget).compile()
    events, out = [], None
    for m, chunk in g.stream({"prompt": "walk", "root": "r"}, {"recursion_limit": 2 * max_depth + 4},
                             stream_mode=["custom", "values"]):
        if m == "custom":
            events.append(chunk)
        else:
            out = chunk
    assert out["stop_reason"] in ("max_depth", "budget"), out["stop_reason"]
    if out["stop_reason"] == "max_depth":
        assert out["depth"] == max_depth and len(out["beam"]) >= 1
    else:
        assert out["policy_calls"] >= budget
    assert all(e["kept"] >= 1 for e in events[:-1])  # only the last depth may end empty, and only on the budget
    if events[-1]["kept"] == 0:
        assert out["stop_reason"] == "budget"
    assert out["all_pruned_kept_best"] == sum(e["all_pruned_kept_best"] for e in events)
    assert all(e["all_pruned"] == e["all_pruned_kept_best"] for e in events)
    if mode == "relative":
        assert out["all_pruned_kept_best"] == 0


def test_beam_config_is_checked_normalised_and_frozen():
    """The graph's nodes share one checked BeamConfig: ints normalised, the threshold a float, no later edits."""
    import dataclasses

    import numpy as np

    from prm_critic.langgraph.beam import BeamConfig

    cfg = BeamConfig(beam_width=np.int64(2), dead_end_threshold=1, budget=np.int32(5))
    assert (type(cfg.beam_width), type(cfg.budget), type(cfg.dead_end_threshold)) == (int, int, float)
    assert (cfg.beam_width, cfg.budget, cfg.dead_end_threshold) == (2, 5, 1.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.beam_width = 4  # type: ignore[misc]
    with pytest.raises(ValueError, match=r"on_all_pruned: expected one of \['keep_best', 'stop'\], got 'keep'"):
        BeamConfig(on_all_pruned="keep")
    with pytest.raises(ValueError, match=r"budget: expected an int or None >= 1"):
        BeamConfig(budget=0.5)
