"""Faults of best-of-N sampling: candidates cut at the model's token limit, and candidates that all
come back identical. The edge cases use a FAKE scripted chat model (tests/fakes.py) whose replies
are cut or repeated on purpose; the last test runs the packaged SmolLM2 through llama.cpp (skipped
without it) with a token limit too small for any tool call."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("langchain")

from fakes import KeywordCritic, ToolCallingFakeChatModel, ai_call  # noqa: E402
from langchain.agents import create_agent  # noqa: E402
from langchain.agents.middleware import ModelCallLimitMiddleware  # noqa: E402
from langchain_core.messages import AIMessage, HumanMessage  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from llm_helpers import smollm2  # noqa: E402

from faults import correct, loud  # noqa: E402
from prm_critic.langgraph import PRMBestOfNMiddleware  # noqa: E402

pytestmark = pytest.mark.fault

RULES = [("pit", 0.1, 0.05), ("hall", 0.5, 0.6), ("kitchen", 0.9, 0.95)]


@tool
def go(room: str) -> str:
    """Walk to a room."""
    return f"You are in the {room}."


def cut(room: str) -> AIMessage:
    """A reply the (fake) server stopped at max_tokens."""
    msg = ai_call("go", {"room": room})
    msg.response_metadata = {"finish_reason": "length"}
    return msg


class SeedFake(ToolCallingFakeChatModel):
    """FAKE chat model: scripted replies; records the ``seed`` each call was sent."""

    seeds: list = []

    def bind_tools(self, tools, *, tool_choice=None, **kwargs):
        return self.bind(**kwargs) if kwargs else self  # the model settings (a resample's seed) reach _generate

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        self.seeds.append(kwargs.get("seed"))
        return super()._generate(messages, stop=stop, run_manager=run_manager, **kwargs)


class LengthErrorFake(ToolCallingFakeChatModel):
    """FAKE chat model: every call raises openai's LengthFinishReasonError, as ChatOpenAI does for a
    structured reply cut at max_tokens."""

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        import openai
        from openai.types.chat import ChatCompletion

        self.calls += 1
        raise openai.LengthFinishReasonError(completion=ChatCompletion.model_construct(usage=None))


def agent_with(model, **kw):
    return create_agent(model, [go], middleware=[ModelCallLimitMiddleware(run_limit=1, exit_behavior="end"),
                                                 PRMBestOfNMiddleware(KeywordCritic(RULES), n=3, **kw)])


# =========================================================================== item 30: best-of-N candidates
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_best_of_n_skips_a_candidate_cut_at_max_tokens(mode):
    model = SeedFake.from_script([cut("kitchen"), ai_call("go", {"room": "pit"}), ai_call("go", {"room": "hall"})])
    agent = agent_with(model)
    msg = [HumanMessage("find the kitchen")]
    out = agent.invoke({"messages": msg}) if mode == "sync" else asyncio.run(agent.ainvoke({"messages": msg}))
    rec = out["prm_best_of_n"][0]
    assert rec["texts"] == ['call go({"room": "pit"})', 'call go({"room": "hall"})'] and rec["chosen"] == 1
    assert rec["failed"] == [{"candidate": 0, "reason": "cut at the model's max_tokens (finish_reason='length')"}]
    correct(30, f"a candidate cut at max_tokens ({mode})", f"skipped and noted: {rec['failed'][0]['reason']}")


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_best_of_n_all_candidates_cut_is_one_clear_error(mode):
    model = LengthErrorFake.from_script([])
    agent = agent_with(model)
    msg = [HumanMessage("find the kitchen")]
    with loud(30, f"every candidate raises LengthFinishReasonError ({mode})", ValueError,
              match=r"all 3 candidates failed \(cut at the model's max_tokens.*raise the chat model's max_tokens"):
        agent.invoke({"messages": msg}) if mode == "sync" else asyncio.run(agent.ainvoke({"messages": msg}))
    assert model.calls == 3


def test_best_of_n_resamples_identical_candidates_with_fresh_seeds():
    model = SeedFake.from_script(go_rooms := [ai_call("go", {"room": r}) for r in
                                              ("pit", "pit", "hall", "hall", "hall", "kitchen")])
    assert len(go_rooms) == 6
    out = agent_with(model).invoke({"messages": [HumanMessage("find the kitchen")]})
    rec = out["prm_best_of_n"][0]
    # candidate 2 repeated "pit": sampled again with a fresh seed; candidate 3 repeated "hall" twice
    assert rec["texts"] == ['call go({"room": "pit"})', 'call go({"room": "hall"})', 'call go({"room": "kitchen"})']
    # each candidate's first call keeps the model's settings; the three resamples got three fresh seeds
    assert [s is not None for s in model.seeds] == [False, False, True, False, True, True]
    assert len({s for s in model.seeds if s is not None}) == 3
    correct(30, "identical candidates", f"resampled with fresh seeds: {rec['texts']}")


def test_best_of_n_on_the_real_model_with_too_few_tokens_is_one_clear_error():
    from langchain_openai import ChatOpenAI

    from prm_critic.llm import LocalLLMServer, ToolCallChatModel

    with LocalLLMServer(smollm2(), n_threads=1, ctx_size=1024) as server:
        llm = ChatOpenAI(base_url=server.base_url, api_key="none", model=server.model, temperature=0.9, max_tokens=3)
        agent = agent_with(ToolCallChatModel(llm=llm, mode="json_schema"))
        with loud(30, "the real SmolLM2 with max_tokens=3 (every tool call cut)", ValueError,
                  match=r"all 3 candidates failed.*max_tokens"):
            agent.invoke({"messages": [HumanMessage("find the kitchen")]})
