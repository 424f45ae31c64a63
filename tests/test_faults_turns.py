"""The step critic across user turns on a checkpointed thread, and its stop reason when the limit
ends a run before the first tool. Real LangGraph graphs, ToolNode, tools and InMemorySaver; the
critic is the deterministic keyword critic of tests/fakes.py. FAKE (labelled): the scripted chat
model ``ToolCallingFakeChatModel`` stands in for a tool-calling LLM (none runs offline)."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("langgraph")

from fakes import KeywordCritic, ToolCallingFakeChatModel, ai_call, ai_text  # noqa: E402
from langchain_core.messages import HumanMessage  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402
from langgraph.graph import END, START, MessagesState, StateGraph  # noqa: E402
from langgraph.prebuilt import ToolNode  # noqa: E402

from faults import correct  # noqa: E402
from prm_critic.langgraph import CriticState, StepCriticNode  # noqa: E402

pytestmark = pytest.mark.fault

RULES = [("pit", 0.1, 0.05), ("hall", 0.5, 0.8)]


class State(MessagesState, CriticState):
    pass


@tool
def go(room: str) -> str:
    """Walk to a room."""
    return f"You are in the {room}."


def critic_loop(script, *, max_revisions=1, checkpointer=None):
    """agent -> tools -> step_critic with the node's two routers; the FAKE model replays ``script``."""
    model = ToolCallingFakeChatModel.from_script(script)
    node = StepCriticNode(KeywordCritic(RULES), max_revisions=max_revisions)
    b = StateGraph(State)
    b.add_node("agent", lambda s: {"messages": [model.invoke(s["messages"])]})
    b.add_node("tools", ToolNode([go]))
    b.add_node("step_critic", node)
    b.add_edge(START, "agent")
    b.add_conditional_edges("agent", node.agent_router(), {"tools": "tools", END: END})
    b.add_edge("tools", "step_critic")
    b.add_conditional_edges("step_critic", node.router(),
                            {"continue": "agent", "retry": "agent", "backtrack": END, "end": END})
    return b.compile(checkpointer=checkpointer)


TWO_TURNS = [ai_call("go", {"room": "pit"}), ai_call("go", {"room": "pit"}),  # turn 1: retry, then end
             ai_call("go", {"room": "pit"}), ai_call("go", {"room": "hall"}), ai_text("I am in the hall.")]


def check_second_turn(first, second):
    assert [r["verdict"] for r in first["step_scores"]] == ["retry", "end"]
    assert first["critic_stop_reason"] == "max_revisions"
    new = second["step_scores"][len(first["step_scores"]):]
    # the new turn starts with zero retries used: its first rejected step is retried, not ended
    assert [r["verdict"] for r in new] == ["retry", "continue"], new
    assert second["critic_stop_reason"] == "" and second["messages"][-1].content == "I am in the hall."


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_new_user_turn_on_a_checkpointed_thread_gets_its_own_retries(mode):
    graph = critic_loop(TWO_TURNS, checkpointer=InMemorySaver())
    cfg = {"configurable": {"thread_id": f"t-{mode}"}}
    if mode == "sync":
        first = graph.invoke({"messages": [HumanMessage("find the hall")]}, cfg)
        second = graph.invoke({"messages": [HumanMessage("try again, please")]}, cfg)
    else:
        async def run():
            a = await graph.ainvoke({"messages": [HumanMessage("find the hall")]}, cfg)
            return a, await graph.ainvoke({"messages": [HumanMessage("try again, please")]}, cfg)
        first, second = asyncio.run(run())
    check_second_turn(first, second)
    correct(27, f"a second user turn on a checkpointed thread whose first turn ended at max_revisions ({mode})",
            "the new turn's first rejected step is retried (the counter restarts per turn), not ended")


def test_feedback_messages_do_not_start_a_new_turn():
    """The node's own feedback (a human message) must not reset the counter: max_revisions still ends the run."""
    graph = critic_loop([ai_call("go", {"room": "pit"}) for _ in range(6)], max_revisions=2)
    out = graph.invoke({"messages": [HumanMessage("find the hall")]})
    assert [r["verdict"] for r in out["step_scores"]] == ["retry", "retry", "end"]
    assert out["critic_stop_reason"] == "max_revisions"


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("limit", [2, 3])
def test_stop_reason_is_empty_when_the_limit_ends_the_run_before_the_first_tool(limit, mode):
    graph = critic_loop([ai_call("go", {"room": "hall"})])
    inp = {"messages": [HumanMessage("find the hall")]}
    cfg = {"recursion_limit": limit}
    out = graph.invoke(inp, cfg) if mode == "sync" else asyncio.run(graph.ainvoke(inp, cfg))
    assert out["messages"][-1].tool_calls and not out.get("step_scores")  # the tool call was left unanswered
    assert out["critic_stop_reason"] == ""
    correct(27, f"recursion_limit={limit} ends the critic loop before the first tool ({mode})",
            "state['critic_stop_reason'] is '' as documented (the key used to be missing)")
