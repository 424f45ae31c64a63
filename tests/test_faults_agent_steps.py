"""Fault tests of the LangGraph integration: what a critic returns, tool-call ids, backtracking.

* item 41: a critic whose scores break the :class:`~prm_critic.critic.StepScores` contract
  (1.7, -0.4, raw logits; an extra head one entry short; a NaN extra head) is refused with one
  error naming the critic and the value at every entry: the critic node, best-of-N, the beam, MCTS;
* item 44: a model that reuses tool-call ids (``"call_0"`` every time, or ``""``);
* item 45: :class:`~prm_critic.langgraph.CheckpointBacktracker` after the node's ``"backtrack"``
  verdict, in the README's own graph, with the default ``as_node``.

FAKES: the chat models (``ToolCallingFakeChatModel``, tests/fakes.py), stand-ins for an LLM that
cannot run offline. The critics here are small real ``BaseCritic`` subclasses written to break the
contract on purpose; graphs, tools, checkpointers and middleware are real.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("langchain")

from fakes import KeywordCritic, ToolCallingFakeChatModel, ai_call, ai_text  # noqa: E402
from faults import correct, loud  # noqa: E402
from langchain.agents import create_agent  # noqa: E402
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402
from langgraph.graph import END, START, MessagesState, StateGraph  # noqa: E402
from langgraph.prebuilt import ToolNode  # noqa: E402

from prm_critic.critic import BaseCritic, StepScores  # noqa: E402
from prm_critic.langgraph import (  # noqa: E402
    CheckpointBacktracker,
    CriticState,
    MCTSSearch,
    PRMBestOfNMiddleware,
    StepCriticNode,
    build_beam_search_graph,
)

pytestmark = pytest.mark.fault


class FixedCritic(BaseCritic):
    """A real critic that breaks the contract on purpose: every step scores ``value`` on both heads;
    ``extra`` heads are built by ``extra(n)`` for a batch of ``n``."""

    def __init__(self, value, extra=None):
        self.value, self.extra = value, extra

    def score(self, steps):
        n = len(steps)
        v = np.full(n, self.value, np.float64)
        return StepScores(v, v.copy(), extra={} if self.extra is None else self.extra(n))


BAD = [pytest.param(1.7, "1.7", id="above-1"), pytest.param(-0.4, "-0.4", id="below-0"),
       pytest.param(2.3, "2.3", id="logit")]


@tool
def go(room: str) -> str:
    """Walk to a room."""
    return f"You are in the {room}."


def _node_state():
    return {"messages": [HumanMessage("Find the kitchen.", id="h"), ai_call("go", {"room": "hall"}, call_id="c1"),
                         ToolMessage("You are in the hall.", tool_call_id="c1", id="t1")], "step_scores": []}


def _expand(room, history, k):
    return [(f"go to {r}", r) for r in ("hall", "kitchen", "pit")[:k]]


# =========================================================================== item 41
@pytest.mark.parametrize("value, shown", BAD)
def test_scores_outside_0_1_are_refused_at_every_entry(value, shown):
    critic = FixedCritic(value)
    msg = rf"critic.score: expected success scores in \[0, 1\] \(probabilities\), got {shown}.* \(critic FixedCritic\)"
    with loud(41, f"critic node given success {value}", ValueError, match=msg):
        StepCriticNode(critic)(_node_state())
    model = ToolCallingFakeChatModel.from_script([ai_call("go", {"room": "hall"}), ai_call("go", {"room": "pit"})])
    agent = create_agent(model, [go], middleware=[PRMBestOfNMiddleware(critic, n=2)])
    with loud(41, f"best-of-N given success {value}", ValueError, match=msg):
        agent.invoke({"messages": [HumanMessage("Find the kitchen.")]})
    beam = build_beam_search_graph(_expand, critic, beam_width=2, branch_factor=3, max_depth=2).compile()
    with loud(41, f"beam search given success {value}", ValueError, match=msg):
        beam.invoke({"prompt": "Find the kitchen.", "root": "start"})
    with loud(41, f"MCTS given success {value}", ValueError, match=msg):
        MCTSSearch(_expand, critic).invoke({"prompt": "Find the kitchen.", "root": "start"})


def test_extra_heads_one_short_or_not_finite_are_refused():
    short = FixedCritic(0.6, extra=lambda n: {"logit": np.zeros(n - 1)})
    beam = build_beam_search_graph(_expand, short, beam_width=2, branch_factor=3, max_depth=2, head="success").compile()
    with loud(41, "beam search given an extra head one entry short", ValueError,
              match=r"critic.score: expected extra head 'logit' of shape \(3,\) \(one per step\), got shape \(2,\) "
                    r"\(critic FixedCritic\)"):
        beam.invoke({"prompt": "Find the kitchen.", "root": "start"})
    nan = FixedCritic(0.3, extra=lambda n: {"logit": np.full(n, np.nan)})
    with loud(41, "critic node deciding on a NaN extra head", ValueError,
              match=r"critic.score: expected finite logit scores, got nan at step 0 \(critic FixedCritic\)"):
        StepCriticNode(nan, head="logit", max_revisions=0)(_node_state())
    logits = FixedCritic(0.5, extra=lambda n: {"logit": np.full(n, 2.5)})
    with loud(41, "beam search ranking by an extra head of raw logits", ValueError,
              match=r"critic.score: expected logit scores in \[0, 1\] \(probabilities\), got 2.5 at step 0"):
        build_beam_search_graph(_expand, logits, head="logit", max_depth=2).compile().invoke(
            {"prompt": "Find the kitchen.", "root": "start"})
    # an extra head of logits beside in-range progress/success is fine when the decision uses success
    ok = FixedCritic(0.7, extra=lambda n: {"logit": np.full(n, 2.5)})
    out = StepCriticNode(ok)(_node_state())
    assert out["critic_verdict"] == "continue"
    correct(41, "critic node given in-range success and a raw-logit extra head it does not decide with",
            "scored (verdict 'continue'); only the deciding head must be a probability")


# =========================================================================== item 45
class State(MessagesState, CriticState):
    pass


def readme_graph(script, **node_kw):
    """The README's graph (agent -> tools -> step_critic, both routers of the node, "backtrack" to
    END), compiled with a checkpointer; the scripted model is the FAKE."""
    model = ToolCallingFakeChatModel.from_script(script)
    critic_node = StepCriticNode(KeywordCritic([("pit", 0.1, 0.05), ("hall", 0.5, 0.8), ("kitchen", 0.9, 0.95)]),
                                 **{"threshold": 0.5, "max_revisions": 2, **node_kw})
    builder = StateGraph(State)
    builder.add_node("agent", lambda state: {"messages": [model.bind_tools([go]).invoke(state["messages"])]})
    builder.add_node("tools", ToolNode([go]))
    builder.add_node("step_critic", critic_node)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", critic_node.agent_router(), {"tools": "tools", END: END})
    builder.add_edge("tools", "step_critic")
    builder.add_conditional_edges("step_critic", critic_node.router(),
                                  {"continue": "agent", "retry": "agent", "backtrack": END, "end": END})
    return builder.compile(checkpointer=InMemorySaver()), model


@pytest.mark.parametrize("before", [[], ["hall"]], ids=["first-step", "after-a-good-step"])
def test_backtrack_after_the_nodes_dead_end_verdict_replans_in_the_readme_graph(before):
    script = [ai_call("go", {"room": r}) for r in before] + [
        ai_call("go", {"room": "pit"}), ai_call("go", {"room": "kitchen"}), ai_text("Found it.")]
    graph, model = readme_graph(script, dead_end_threshold=0.2)
    cfg = {"configurable": {"thread_id": "readme"}}
    first = graph.invoke({"messages": [HumanMessage("Find the kitchen.")]}, cfg)
    assert first["critic_verdict"] == "backtrack" and first["critic_stop_reason"] == "dead_end"
    calls = model.calls
    res = CheckpointBacktracker(graph).backtrack(cfg)  # the default as_node
    assert graph.get_state(res.fork_config).next == ("agent",)
    assert model.calls == calls + 2  # the model re-planned: the kitchen call, then the answer
    tools = [m.content for m in res.result["messages"] if m.type == "tool"]
    assert tools == [f"You are in the {r}." for r in before] + ["You are in the kitchen."]
    assert res.result["messages"][-1].content == "Found it."
    assert [r["verdict"] for r in res.result["step_scores"]] == ["continue"] * (len(before) + 1)
    correct(45, f"backtrack (default as_node) after the node's dead-end verdict in the README graph, {len(before)} good "
                "step(s) before it", "the fork runs the agent: the model re-planned, the kitchen step ran and was scored")


def test_a_fork_that_would_run_nothing_is_refused():
    graph, _ = readme_graph([ai_call("go", {"room": "hall"}), ai_call("go", {"room": "pit"}), ai_text("unused")],
                            dead_end_threshold=0.2)
    cfg = {"configurable": {"thread_id": "readme-2"}}
    graph.invoke({"messages": [HumanMessage("Find the kitchen.")]}, cfg)
    with loud(45, "backtrack with as_node='step_critic' (its router ends the run at the fork)", ValueError,
              match=r"as_node: the fork's update, attributed to as_node='step_critic', schedules \[\] where \['agent'\] "
                    r"was due at the fork point .* invoking it would run nothing"):
        CheckpointBacktracker(graph, as_node="step_critic").backtrack(cfg)


# =========================================================================== item 44
REUSED = [pytest.param("call_0", id="call_0-every-time"), pytest.param("", id="empty-id")]


def go_call(room, cid):
    """An AI message calling ``go`` with tool-call id ``cid`` exactly (``""`` included)."""
    return AIMessage(content="", tool_calls=[{"name": "go", "args": {"room": room}, "id": cid, "type": "tool_call"}])


@pytest.mark.parametrize("cid", REUSED)
def test_critic_node_scores_every_step_of_a_model_that_reuses_tool_call_ids(cid):
    script = [go_call(r, cid) for r in ("hall", "pit", "kitchen")] + [ai_text("Found it.")]
    graph, _ = readme_graph(script, max_revisions=0)  # the trap step ends the run
    out = graph.invoke({"messages": [HumanMessage("Find the kitchen.")]}, {"configurable": {"thread_id": "ids"}})
    records = out["step_scores"]
    assert [r["text"].split("\n")[0] for r in records] == ['call go({"room": "hall"})', 'call go({"room": "pit"})']
    assert [r["verdict"] for r in records] == ["continue", "end"]
    assert records[1]["text"].endswith("result: You are in the pit.")  # scored with its own result
    correct(44, f"critic node, model reusing tool-call id {cid!r} on every step",
            "every step scored with its own result; the trap step scored 0.05 and ended the run")


@pytest.mark.parametrize("cid", REUSED)
def test_best_of_n_shows_the_critic_each_step_with_its_own_result(cid):
    critic = KeywordCritic([("pit", 0.1, 0.05)])
    script = [go_call(r, cid) for r in ("hall", "cellar", "kitchen")] + [ai_text("Found it.")]
    model = ToolCallingFakeChatModel.from_script(script)
    agent = create_agent(model, [go], middleware=[PRMBestOfNMiddleware(critic, n=1)])
    agent.invoke({"messages": [HumanMessage("Find the kitchen.")]})
    last = critic.seen[-1]  # the final answer's proposal, after three executed steps
    assert list(last.history) == [f'call go({{"room": "{r}"}})\nresult: You are in the {r}.'
                                  for r in ("hall", "cellar", "kitchen")]
    correct(44, f"best-of-N, model reusing tool-call id {cid!r}", "the critic's history pairs every call with its own result")


def test_backtracker_forks_before_the_bad_step_of_a_model_that_reuses_ids():
    from prm_critic.langgraph import PRMStepScoringMiddleware

    script = [ai_call("go", {"room": "hall"}, call_id="call_0"), ai_call("go", {"room": "pit"}, call_id="call_0"),
              ai_text("Stuck."), ai_call("go", {"room": "kitchen"}, call_id="call_0"), ai_text("Found it.")]
    model = ToolCallingFakeChatModel.from_script(script)
    critic = KeywordCritic([("pit", 0.1, 0.05), ("hall", 0.5, 0.8), ("kitchen", 0.9, 0.95)])
    agent = create_agent(model, [go], middleware=[PRMStepScoringMiddleware(critic, on_low="record")],
                         checkpointer=InMemorySaver())
    cfg = {"configurable": {"thread_id": "reuse"}}
    agent.invoke({"messages": [HumanMessage("Find the kitchen.")]}, cfg)
    res = CheckpointBacktracker(agent).backtrack(cfg)
    assert res.bad_record["text"].startswith('call go({"room": "pit"})')
    kept = [m.content for m in agent.get_state(res.fork_from).values["messages"] if m.type == "tool"]
    assert kept == ["You are in the hall."]  # forked right before the pit step, the hall step kept
    assert [m.content for m in res.result["messages"] if m.type == "tool"] == ["You are in the hall.", "You are in the kitchen."]
    correct(44, "backtracker, model reusing tool-call id 'call_0'", "forked right before the bad step (the good step before it kept)")


def test_steps_without_message_ids_and_with_reused_tool_call_ids_are_refused():
    msgs = [HumanMessage("Find the kitchen."), ai_call("go", {"room": "hall"}, call_id="call_0"),
            ToolMessage("You are in the hall.", tool_call_id="call_0"),
            ai_call("go", {"room": "pit"}, call_id="call_0"), ToolMessage("You are in the pit.", tool_call_id="call_0")]
    with loud(44, "critic node given AI messages without ids that reuse tool-call id 'call_0'", ValueError,
              match=r"messages: the AI message at index 3 has no id and its tool-call id 'call_0' is also the id of the "
                    r"call in the AI message at index 1, so the critic cannot tell its steps apart; use the add_messages"):
        StepCriticNode(KeywordCritic([]))({"messages": msgs, "step_scores": []})
