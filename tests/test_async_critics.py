"""Async critics: ``BaseCritic.ascore`` and the async paths that use it never block the event loop.

A ticker task runs beside each async call and counts its ticks: a critic that blocked the loop
would leave it (almost) no ticks. The slow critics are real ``BaseCritic`` subclasses of the
keyword critic (tests/fakes.py) that sleep; the chat models are FAKES (scripted; a real LLM is
exercised in tests/test_llm_real.py). Graphs, tool nodes and ``create_agent`` are real.
"""

from __future__ import annotations

import asyncio
import threading
import time

import numpy as np
import pytest

pytest.importorskip("langgraph")

from fakes import KeywordCritic, ToolCallingFakeChatModel, ai_call, ai_text  # noqa: E402
from langchain_core.language_models.chat_models import BaseChatModel  # noqa: E402
from langchain_core.messages import AIMessage, HumanMessage  # noqa: E402
from langchain_core.outputs import ChatGeneration, ChatResult  # noqa: E402
from langchain_core.tools import tool  # noqa: E402

from prm_critic import BaseCritic, StepScores  # noqa: E402
from prm_critic.text import LLMJudgeCritic, TextStep  # noqa: E402

RULES = [("pit", 0.05, 0.05), ("kitchen", 0.9, 0.9), ("answer", 1.0, 1.0)]
SLEEP = 0.3
MIN_TICKS = 5  # a 10 ms ticker gets ~30 ticks in 0.3 s when the loop is free, ~0 when it is blocked


async def ticking(coro, period: float = 0.01):
    """``(await coro, ticks)``: how often a concurrent ticker task ran meanwhile."""
    ticks = 0
    done = asyncio.Event()

    async def ticker():
        nonlocal ticks
        while not done.is_set():
            await asyncio.sleep(period)
            ticks += 1

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0)  # let the ticker start
    try:
        result = await coro
    finally:
        done.set()
        await task
    return result, ticks


class SleepyCritic(KeywordCritic):
    """The keyword critic, slowed down by a blocking sleep in ``score`` (like a sync remote call)."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.threads: list[int] = []

    def score(self, steps):
        self.threads.append(threading.get_ident())
        time.sleep(SLEEP)
        return super().score(steps)


class AsyncOnlyCritic(KeywordCritic):
    """A critic with a native ``ascore`` (awaits, like an async client); its ``score`` must not be used."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.async_calls = 0

    def score(self, steps):
        raise AssertionError("the sync score() was called on an async path")

    async def ascore(self, steps):
        self.async_calls += 1
        await asyncio.sleep(SLEEP)
        return KeywordCritic.score(self, steps)


def _steps():
    return [TextStep("find the kitchen", (), 'go({"room": "kitchen"})'), TextStep("find the kitchen", (), "pit")]


def test_default_ascore_runs_score_in_a_worker_thread_and_the_loop_keeps_ticking():
    critic = SleepyCritic(RULES)

    async def main():
        return await ticking(critic.ascore(_steps()))

    scores, ticks = asyncio.run(main())
    assert isinstance(scores, StepScores) and np.allclose(scores.success, [0.9, 0.05])
    assert ticks >= MIN_TICKS
    assert critic.threads and critic.threads[0] != threading.main_thread().ident  # not the loop's thread

    # control: the same critic called synchronously inside the coroutine blocks the ticker
    async def blocking():
        async def call():
            return critic.score(_steps())
        return await ticking(call())

    _, blocked_ticks = asyncio.run(blocking())
    assert blocked_ticks < MIN_TICKS


def test_base_critic_ascore_is_typed_like_score():
    class Half(BaseCritic):
        def score(self, steps):
            return StepScores(np.full(len(steps), 0.5), np.full(len(steps), 0.5))

    out = asyncio.run(Half().ascore([1, 2, 3]))
    assert out.success.shape == (3,) and out.success.dtype == np.float32


def _critic_graph(critic):
    from langgraph.graph import END, START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode

    from prm_critic.langgraph import CriticState, StepCriticNode

    @tool
    def go(room: str) -> str:
        """Walk to a room."""
        return f"You are in the {room}."

    model = ToolCallingFakeChatModel.from_script([ai_call("go", {"room": "pit"}), ai_call("go", {"room": "kitchen"}),
                                                  ai_text("Found it.")])

    class State(MessagesState, CriticState):
        pass

    node = StepCriticNode(critic, threshold=0.5, max_revisions=2)

    def agent(state):  # a sync node: LangGraph runs it in a thread in async runs
        return {"messages": [model.invoke(state["messages"])]}

    b = StateGraph(State)
    b.add_node("agent", agent)
    b.add_node("tools", ToolNode([go]))
    b.add_node("step_critic", node)
    b.add_edge(START, "agent")
    b.add_conditional_edges("agent", node.agent_router(), {"tools": "tools", END: END})
    b.add_edge("tools", "step_critic")
    b.add_conditional_edges("step_critic", node.router(),
                            {"continue": "agent", "retry": "agent", "backtrack": END, "end": END})
    return b.compile()


def test_step_critic_node_async_run_uses_ascore_and_streams_records():
    critic = AsyncOnlyCritic(RULES)
    graph = _critic_graph(critic)

    async def main():
        events = []

        async def run():
            final = None
            async for mode, chunk in graph.astream({"messages": [HumanMessage("find the kitchen")]},
                                                   stream_mode=["custom", "values"]):
                if mode == "custom":
                    events.append(chunk)
                else:
                    final = chunk
            return final

        final, ticks = await ticking(run())
        return final, ticks, events

    final, ticks, events = asyncio.run(main())
    assert critic.async_calls == 2  # the pit step (retried) and the kitchen step, both through ascore
    assert [e["verdict"] for e in events] == ["retry", "continue"]  # get_stream_writer works in the async path
    assert [r["verdict"] for r in final["step_scores"]] == ["retry", "continue"]
    assert final["messages"][-1].content == "Found it."
    assert ticks >= MIN_TICKS


def test_step_critic_node_sync_run_still_uses_score():
    critic = KeywordCritic(RULES)
    final = _critic_graph(critic).invoke({"messages": [HumanMessage("find the kitchen")]})
    assert critic.batches == [1, 1] and [r["verdict"] for r in final["step_scores"]] == ["retry", "continue"]


def test_step_critic_node_with_a_blocking_critic_does_not_block_an_async_run():
    critic = SleepyCritic(RULES)
    graph = _critic_graph(critic)

    async def main():
        return await ticking(graph.ainvoke({"messages": [HumanMessage("find the kitchen")]}))

    final, ticks = asyncio.run(main())
    assert [r["verdict"] for r in final["step_scores"]] == ["retry", "continue"]
    assert ticks >= MIN_TICKS and all(t != threading.main_thread().ident for t in critic.threads)


def test_middleware_async_hooks_use_ascore():
    from langchain.agents import create_agent

    from prm_critic.langgraph import PRMBestOfNMiddleware, PRMStepScoringMiddleware

    executed = []

    @tool
    def go(room: str) -> str:
        """Walk to a room."""
        executed.append(room)
        return f"You are in the {room}."

    model = ToolCallingFakeChatModel.from_script([ai_call("go", {"room": "pit"}), ai_call("go", {"room": "kitchen"}),
                                                  ai_text("answer: found"), ai_text("answer: found it")])
    best, scoring = AsyncOnlyCritic(RULES), AsyncOnlyCritic(RULES)
    agent = create_agent(model, [go], middleware=[PRMBestOfNMiddleware(best, n=2),
                                                  PRMStepScoringMiddleware(scoring, on_low="flag", block_below=0.2)])

    async def main():
        return await ticking(agent.ainvoke({"messages": [HumanMessage("find the kitchen")]}))

    out, ticks = asyncio.run(main())
    assert executed == ["kitchen"]  # best-of-2 chose the kitchen call
    assert best.async_calls == 2  # one batch of 2 proposals per model step
    assert scoring.async_calls == 2  # block_below before the call, the executed step after it
    assert [round(r["success"], 2) for r in out["step_scores"]] == [0.9]
    assert ticks >= MIN_TICKS

    # accept_threshold scores each candidate as it arrives, also through ascore
    model2 = ToolCallingFakeChatModel.from_script([ai_call("go", {"room": "kitchen"}), ai_text("answer: done")])
    early = AsyncOnlyCritic(RULES)
    agent2 = create_agent(model2, [go], middleware=[PRMBestOfNMiddleware(early, n=3, accept_threshold=0.8)])
    out2 = asyncio.run(agent2.ainvoke({"messages": [HumanMessage("find the kitchen")]}))
    assert [r["n"] for r in out2["prm_best_of_n"]] == [1, 1] and early.async_calls == 2


class AsyncJudgeModel(BaseChatModel):
    """FAKE judge chat model (stand-in for a remote LLM): async only, answers after an async sleep.

    The critique turn gets a short text, the score turn ``Score: 8/10``; its sync path raises.
    """

    calls: int = 0

    @property
    def _llm_type(self) -> str:
        return "fake-async-judge"

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        raise AssertionError("the sync path of the judge model was used")

    async def _agenerate(self, messages, stop=None, run_manager=None, **kwargs):
        self.calls += 1
        await asyncio.sleep(SLEEP / 2)
        last = messages[-1].content
        text = "Score: 8/10" if "final score" in last else "The step goes to the kitchen, which fits the task."
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=text))])


class AinvokeOnlyJudge:
    """FAKE judge model with invoke/batch/ainvoke but no abatch: each conversation is one ainvoke."""

    def __init__(self):
        self.active = self.peak = 0

    def invoke(self, messages, config=None):
        raise AssertionError("sync invoke used")

    def batch(self, convs, config=None):
        raise AssertionError("sync batch used")

    async def ainvoke(self, messages, config=None):
        self.active += 1
        self.peak = max(self.peak, self.active)
        await asyncio.sleep(0.05)
        self.active -= 1
        return AIMessage(content="Score: 3/10" if "final score" in messages[-1].content else "Looks risky.")


def test_llm_judge_ascore_uses_the_models_async_api():
    model = AsyncJudgeModel()
    judge = LLMJudgeCritic(model, max_concurrency=2)

    async def main():
        return await ticking(judge.ascore(_steps()))

    scores, ticks = asyncio.run(main())
    assert np.allclose(scores.success, [0.8, 0.8]) and np.all(scores.extra["parse_failed"] == 0)
    assert model.calls == 4  # critique + score turn for each of the 2 steps
    assert judge.last_critiques[0].startswith("The step goes to the kitchen")
    assert ticks >= MIN_TICKS
    with pytest.raises(AssertionError, match="sync path"):
        judge.score(_steps()[:1])

    lone = AinvokeOnlyJudge()
    judge2 = LLMJudgeCritic(lone, max_concurrency=2)
    steps = _steps() * 3
    out = asyncio.run(judge2.ascore(steps))
    assert np.allclose(out.success, 0.3) and lone.peak == 2  # bounded by max_concurrency
