"""PRM middleware inside real langchain v1 ``create_agent`` graphs.

The only fake is the chat model (tests/fakes.py: ToolCallingFakeChatModel, a subclass of
langchain-core's GenericFakeChatModel with bind_tools) -- a stand-in for an LLM, which cannot run
offline. Every best-of-N handler call consumes one scripted response. Tools and graphs are real.
"""

from __future__ import annotations

import pytest

pytest.importorskip("langchain")

from fakes import KeywordCritic, ToolCallingFakeChatModel, ai_call, ai_text  # noqa: E402
from langchain.agents import create_agent  # noqa: E402
from langchain.agents.middleware import ModelCallLimitMiddleware, ToolCallLimitMiddleware  # noqa: E402
from langchain_core.messages import HumanMessage  # noqa: E402
from langchain_core.tools import tool  # noqa: E402

from prm_critic.langgraph import PRMBestOfNMiddleware, PRMStepScoringMiddleware  # noqa: E402

RULES = [("pit", 0.1, 0.05), ("cellar", 0.3, 0.3), ("hall", 0.5, 0.6), ("kitchen", 0.9, 0.95), ("answer", 1.0, 1.0)]


def make_tool():
    executed: list[str] = []

    @tool
    def go(room: str) -> str:
        """Walk to a room."""
        executed.append(room)
        return f"You are in the {room}."

    return go, executed


def go_calls(*rooms):
    return [ai_call("go", {"room": r}) for r in rooms]


def test_best_of_n_runs_only_the_winner_and_call_limit_still_applies():
    go, executed = make_tool()
    # 3 candidates per model step; the run limit stops the agent after 2 model steps
    script = go_calls("pit", "kitchen", "cellar", "cellar", "pit", "hall", "kitchen", "kitchen", "kitchen")
    model = ToolCallingFakeChatModel.from_script(script)
    critic = KeywordCritic(RULES)
    agent = create_agent(model, [go], middleware=[
        ModelCallLimitMiddleware(run_limit=2, exit_behavior="end"),
        PRMBestOfNMiddleware(critic, n=3),
    ])
    events, final = [], None
    for mode, chunk in agent.stream({"messages": [HumanMessage("find the kitchen")]}, stream_mode=["custom", "values"]):
        if mode == "custom":
            events.append(chunk)
        else:
            final = chunk
    assert executed == ["kitchen", "hall"]  # only the winning call of each step ran
    assert model.calls == 6  # n=3 handler calls per model step, each consumed a response
    assert critic.batches == [3, 3]  # the three proposals were scored as one batch, before any tool ran
    recs = final["prm_best_of_n"]
    assert [r["chosen"] for r in recs] == [1, 2]
    assert recs[0]["texts"] == ['call go({"room": "pit"})', 'call go({"room": "kitchen"})', 'call go({"room": "cellar"})']
    assert [e["chosen"] for e in events if e["type"] == "prm_best_of_n"] == [1, 2]
    assert final["messages"][-1].content.startswith("Model call limits exceeded")
    # the second step's proposals were scored with the executed first step as history
    assert critic.seen[-1].history == ('call go({"room": "kitchen"})\nresult: You are in the kitchen.',)
    ai_msgs = [m for m in final["messages"] if m.type == "ai" and m.tool_calls]
    assert [m.tool_calls[0]["args"]["room"] for m in ai_msgs] == ["kitchen", "hall"]


def test_best_of_n_early_accept_and_final_answers():
    go, executed = make_tool()
    script = go_calls("cellar", "kitchen") + [ai_text("answer: done"), ai_text("extra")]
    model = ToolCallingFakeChatModel.from_script(script)
    agent = create_agent(model, [go], middleware=[
        ToolCallLimitMiddleware(run_limit=5),
        PRMBestOfNMiddleware(KeywordCritic(RULES), n=4, accept_threshold=0.9),
    ])
    out = agent.invoke({"messages": [HumanMessage("find the kitchen")]})
    assert executed == ["kitchen"]
    # step 1 stopped at the 2nd candidate (0.95 >= 0.9); step 2 at the 1st (a final answer scores 1.0)
    assert model.calls == 3
    assert [r["n"] for r in out["prm_best_of_n"]] == [2, 1]
    assert out["messages"][-1].content == "answer: done"


def test_step_scoring_records_flags_and_ends_on_dead_end():
    go, executed = make_tool()
    model = ToolCallingFakeChatModel.from_script(go_calls("hall", "pit", "kitchen") + [ai_text("unused")])
    mw = PRMStepScoringMiddleware(KeywordCritic(RULES), threshold=0.5, on_low="end")
    agent = create_agent(model, [go], middleware=[mw])
    events, final = [], None
    for mode, chunk in agent.stream({"messages": [HumanMessage("find the kitchen")]}, stream_mode=["custom", "values"]):
        if mode == "custom":
            events.append(chunk)
        else:
            final = chunk
    assert executed == ["hall", "pit"]
    assert model.calls == 2  # the dead end stopped the run before the next model call
    recs = final["step_scores"]
    assert [r["verdict"] for r in recs] == ["continue", "end"]
    assert [r["step_index"] for r in recs] == [0, 1]
    assert [e["verdict"] for e in events] == ["continue", "end"]
    tool_msgs = [m.content for m in final["messages"] if m.type == "tool"]
    assert tool_msgs[0] == "You are in the hall." and "dead end" in tool_msgs[1]
    assert final["messages"][-1].content.startswith("Stopped: a step critic scored")


def test_step_scoring_blocks_before_execution():
    go, executed = make_tool()
    model = ToolCallingFakeChatModel.from_script(go_calls("pit", "hall") + [ai_text("answer: at the hall")])
    agent = create_agent(model, [go], middleware=[
        PRMStepScoringMiddleware(KeywordCritic(RULES), threshold=0.5, on_low="record", block_below=0.2)])
    out = agent.invoke({"messages": [HumanMessage("find the kitchen")]})
    assert executed == ["hall"]  # the pit call never ran
    assert [r["verdict"] for r in out["step_scores"]] == ["blocked", "continue"]
    blocked = [m for m in out["messages"] if m.type == "tool"][0]
    assert blocked.status == "error" and "Not executed" in blocked.content


def test_async_paths_match_sync():
    import asyncio

    go, executed = make_tool()
    model = ToolCallingFakeChatModel.from_script(go_calls("pit", "kitchen") + [ai_text("answer: a"), ai_text("answer: b")])
    agent = create_agent(model, [go], middleware=[
        PRMBestOfNMiddleware(KeywordCritic(RULES), n=2),
        PRMStepScoringMiddleware(KeywordCritic(RULES), on_low="record")])
    out = asyncio.run(agent.ainvoke({"messages": [HumanMessage("find the kitchen")]}))
    assert executed == ["kitchen"] and model.calls == 4
    assert [r["chosen"] for r in out["prm_best_of_n"]] == [1, 0]
    assert [r["verdict"] for r in out["step_scores"]] == ["continue"]
