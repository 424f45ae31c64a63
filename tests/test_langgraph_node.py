"""StepCriticNode + router inside a real compiled StateGraph with a real ToolNode.

The only fake is the chat model (tests/fakes.py: ToolCallingFakeChatModel, a subclass of
langchain-core's GenericFakeChatModel with bind_tools), a stand-in for an LLM that cannot run
offline. The critic is a deterministic real BaseCritic (KeywordCritic).
"""

from __future__ import annotations

import pytest

pytest.importorskip("langgraph")

from fakes import KeywordCritic, ToolCallingFakeChatModel, ai_call, ai_text  # noqa: E402
from langchain_core.messages import HumanMessage  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from langgraph.graph import END, START, MessagesState, StateGraph  # noqa: E402
from langgraph.prebuilt import ToolNode, tools_condition  # noqa: E402

from prm_critic.langgraph import CriticState, StepCriticNode, route_after_critic  # noqa: E402

RULES = [("pit", 0.1, 0.05), ("cellar", 0.3, 0.3), ("hall", 0.5, 0.8), ("kitchen", 0.9, 0.95)]


class State(MessagesState, CriticState):
    pass


def build(script, *, critic=None, **node_kw):
    executed: list[str] = []

    @tool
    def go(room: str) -> str:
        """Walk to a room."""
        executed.append(room)
        return f"You are in the {room}."

    model = ToolCallingFakeChatModel.from_script(script)
    critic = critic or KeywordCritic(RULES)
    node = StepCriticNode(critic, **node_kw)

    def agent(state: State):
        return {"messages": [model.bind_tools([go]).invoke(state["messages"])]}

    b = StateGraph(State)
    b.add_node("agent", agent)
    b.add_node("tools", ToolNode([go]))
    b.add_node("step_critic", node)
    b.add_edge(START, "agent")
    b.add_conditional_edges("agent", tools_condition, {"tools": "tools", END: END})
    b.add_edge("tools", "step_critic")
    b.add_conditional_edges("step_critic", node.router(),
                            {"continue": "agent", "retry": "agent", "backtrack": END, "end": END})
    return b.compile(), model, critic, executed


def test_scores_each_step_streams_events_and_retries_bad_step():
    script = [ai_call("go", {"room": "hall"}), ai_call("go", {"room": "pit"}), ai_call("go", {"room": "pit"}),
              ai_call("go", {"room": "kitchen"}), ai_text("Found the kitchen.")]
    graph, model, critic, executed = build(script, max_revisions=3)
    events, final = [], None
    for mode, chunk in graph.stream({"messages": [HumanMessage("find the kitchen")]},
                                    stream_mode=["custom", "values"]):
        if mode == "custom":
            events.append(chunk)
        else:
            final = chunk
    recs = final["step_scores"]
    assert [r["verdict"] for r in recs] == ["continue", "retry", "retry", "continue"]
    assert [r["step_index"] for r in recs] == [0, 1, 1, 1]
    assert recs[0]["success"] == pytest.approx(0.8) and recs[1]["success"] == pytest.approx(0.05)
    assert recs[3]["text"] == 'call go({"room": "kitchen"})\nresult: You are in the kitchen.'
    # one custom event per scored step, same content as the records
    assert [e["type"] for e in events] == ["prm_step_score"] * 4
    assert [e["verdict"] for e in events] == [r["verdict"] for r in recs]
    # the tools really ran (they are not forkable), but rejected steps left the transcript
    assert executed == ["hall", "pit", "pit", "kitchen"]
    texts = [m.content for m in final["messages"] if m.type == "tool"]
    assert texts == ["You are in the hall.", "You are in the kitchen."]
    # the model saw the critic's feedback on its retry, and the kitchen step was scored with hall as history
    assert "rejected your last step" in model.seen[2][-1].content
    assert critic.seen[-1].history == ('call go({"room": "hall"})\nresult: You are in the hall.',)
    assert final["critic_revisions"] == 0
    assert final["messages"][-1].content == "Found the kitchen."


def test_ends_at_max_revisions():
    script = [ai_call("go", {"room": "pit"}) for _ in range(10)]
    graph, model, _, executed = build(script, max_revisions=2)
    out = graph.invoke({"messages": [HumanMessage("find the kitchen")]})
    assert [r["verdict"] for r in out["step_scores"]] == ["retry", "retry", "end"]
    assert model.calls == 3 and len(executed) == 3
    assert out["critic_revisions"] == 3
    # the step that ended the run stays in the transcript
    assert out["messages"][-1].content == "You are in the pit."


def test_remaining_steps_stop_before_recursion_limit():
    script = [ai_call("go", {"room": "pit"}) for _ in range(50)]
    graph, model, _, _ = build(script, max_revisions=100)
    for limit in (4, 7, 10, 11):
        out = graph.invoke({"messages": [HumanMessage("find the kitchen")]}, {"recursion_limit": limit})
        assert all(r["verdict"] == "retry" for r in out["step_scores"])
        assert 1 <= len(out["step_scores"]) <= limit // 3


def test_mark_keeps_step_but_hides_it_from_critic_history_and_dead_end_backtracks():
    script = [ai_call("go", {"room": "cellar"}), ai_call("go", {"room": "hall"}), ai_call("go", {"room": "pit"})]
    graph, _, critic, _ = build(script, on_reject="mark", feedback=None, dead_end_threshold=0.1)
    out = graph.invoke({"messages": [HumanMessage("find the kitchen")]})
    assert [r["verdict"] for r in out["step_scores"]] == ["retry", "continue", "backtrack"]
    tool_texts = [m.content for m in out["messages"] if m.type == "tool"]
    assert tool_texts == ["You are in the cellar.", "You are in the hall.", "You are in the pit."]
    # the marked (rejected) cellar step is not history for later steps
    assert critic.seen[1].history == ()
    assert critic.seen[2].history == ('call go({"room": "hall"})\nresult: You are in the hall.',)


def test_router_function_and_prompt_key():
    assert route_after_critic({"critic_verdict": "retry", "remaining_steps": 10}) == "retry"
    assert route_after_critic({"critic_verdict": "retry", "remaining_steps": 2}) == "end"
    assert route_after_critic({"critic_verdict": "backtrack", "remaining_steps": 1}) == "backtrack"
    assert route_after_critic({}) == "continue"
    with pytest.raises(ValueError, match="critic_verdict.*'maybe'"):
        route_after_critic({"critic_verdict": "maybe"})
    node = StepCriticNode(KeywordCritic(RULES), prompt_key="task")
    state = {"task": "reach the hall", "messages": [HumanMessage("x"), ai_call("go", {"room": "hall"}, call_id="c1")]}
    assert node(state) == {"critic_verdict": "continue", "critic_stop_reason": ""}  # no result yet: nothing to score
    from langchain_core.messages import ToolMessage
    state["messages"].append(ToolMessage("You are in the hall.", tool_call_id="c1", id="t1"))
    up = node(state)
    assert up["critic_verdict"] == "continue" and up["step_scores"][0]["success"] == pytest.approx(0.8)
    assert node.critic.seen[-1].prompt == "reach the hall"
