"""Backtracking by checkpoint fork in a real create_agent graph with InMemorySaver.

The only fake is the chat model (tests/fakes.py: ToolCallingFakeChatModel, a subclass of
langchain-core's GenericFakeChatModel with bind_tools), a stand-in for an LLM that cannot run
offline. The tool has a real, unforkable side effect (it appends to a list).
"""

from __future__ import annotations

import pytest

pytest.importorskip("langchain")

from fakes import KeywordCritic, ToolCallingFakeChatModel, ai_call, ai_text  # noqa: E402
from langchain.agents import create_agent  # noqa: E402
from langchain_core.messages import HumanMessage  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402

from prm_critic.langgraph import CheckpointBacktracker, PRMStepScoringMiddleware, backtrack_to_best  # noqa: E402

RULES = [("burn", 0.2, 0.05), ("cut", 0.4, 0.8), ("cook", 0.8, 0.9)]


def make_agent(script):
    kitchen: list[str] = []  # the unforkable world

    @tool
    def act(action: str) -> str:
        """Do something in the kitchen."""
        kitchen.append(action)
        return f"You {action}."

    model = ToolCallingFakeChatModel.from_script(script)
    agent = create_agent(model, [act], middleware=[PRMStepScoringMiddleware(KeywordCritic(RULES), on_low="record")],
                         checkpointer=InMemorySaver())
    return agent, model, kitchen


def contents(msgs):
    return [m.content for m in msgs]


def test_fork_continues_from_before_the_bad_step_and_keeps_history():
    script = [ai_call("act", {"action": "cut the carrot"}), ai_call("act", {"action": "burn the carrot"}),
              ai_text("The carrot is burnt."),
              # after the fork the model sees the critic's note and does better
              ai_call("act", {"action": "cook the carrot"}), ai_text("Dinner is ready.")]
    agent, model, kitchen = make_agent(script)
    cfg = {"configurable": {"thread_id": "cook-1"}}
    first = agent.invoke({"messages": [HumanMessage("cook a carrot")]}, cfg)
    assert contents(first["messages"])[-1] == "The carrot is burnt."
    n_history = len(list(agent.get_state_history(cfg)))

    bt = CheckpointBacktracker(agent)
    res = bt.backtrack(cfg)
    assert res.bad_record["text"].startswith('call act({"action": "burn the carrot"})')
    # forked from the last checkpoint before the bad call: cut done, model about to be called
    fork_from = agent.get_state(res.fork_from)
    assert fork_from.next == ("model",)
    assert contents(fork_from.values["messages"]) == ["cook a carrot", "", "You cut the carrot."]
    # the fork continued from there
    msgs = res.result["messages"]
    assert contents(msgs)[-1] == "Dinner is ready."
    assert "You burn the carrot." not in contents(msgs)
    assert "step critic scored it 0.05" in msgs[3].content  # the feedback added at the fork
    assert model.seen[-2][-1].content == msgs[3].content  # the model saw it when it re-planned
    assert kitchen == ["cut the carrot", "burn the carrot", "cook the carrot"]  # burn ran once only
    assert [r["verdict"] for r in res.result["step_scores"]] == ["continue", "continue"]

    # the original branch is intact: the old tip still reads the burnt ending
    old = agent.get_state(res.tip_before)
    assert contents(old.values["messages"])[-1] == "The carrot is burnt."
    # checkpoints form a tree: the fork's first checkpoint is a child of fork_from
    fork_snap = agent.get_state(res.fork_config)
    assert fork_snap.parent_config["configurable"]["checkpoint_id"] == res.fork_from["configurable"]["checkpoint_id"]
    assert len(list(agent.get_state_history(cfg))) > n_history
    # the current branch is the fork; its lineage reaches the root without passing the burnt tip
    lineage_ids = {s.config["configurable"]["checkpoint_id"] for s in bt.lineage(cfg)}
    assert res.tip_before["configurable"]["checkpoint_id"] not in lineage_ids
    assert res.fork_from["configurable"]["checkpoint_id"] in lineage_ids
    # nothing low is left on the new branch
    assert bt.backtrack(cfg) is None


def test_backtrack_to_best_without_invoke_and_with_custom_values():
    script = [ai_call("act", {"action": "burn the pan"}), ai_text("Oops."), ai_text("unused")]
    agent, model, kitchen = make_agent(script)
    cfg = {"configurable": {"thread_id": "cook-2"}}
    agent.invoke({"messages": [HumanMessage("cook a carrot")]}, cfg)
    res = backtrack_to_best(agent, cfg, values={"messages": [HumanMessage("Use the oven this time.")]}, invoke=False)
    assert res.result is None
    snap = agent.get_state(res.fork_config)
    assert contents(snap.values["messages"]) == ["cook a carrot", "Use the oven this time."]
    assert snap.next == ("model",)
    assert model.calls == 2  # not invoked


def test_backtracker_errors():
    agent, _, _ = make_agent([ai_text("hi")])
    from langchain.agents import create_agent as ca
    from fakes import ToolCallingFakeChatModel as M
    no_saver = ca(M.from_script([ai_text("x")]), [])
    with pytest.raises(ValueError, match="graph: expected a graph compiled with a checkpointer"):
        CheckpointBacktracker(no_saver)
    with pytest.raises(TypeError, match="graph: expected a compiled LangGraph graph"):
        CheckpointBacktracker(object())
    bt = CheckpointBacktracker(agent)
    with pytest.raises(ValueError, match="config: expected"):
        bt.backtrack({"thread_id": "x"})
    with pytest.raises(ValueError, match="checkpoint_ns 'sub'"):
        bt.backtrack({"configurable": {"thread_id": "x", "checkpoint_ns": "sub"}})
    with pytest.raises(TypeError, match="threshold: expected a float in \\[0, 1\\], got str"):
        CheckpointBacktracker(agent, threshold="high")
