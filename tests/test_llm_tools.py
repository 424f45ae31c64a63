"""ToolCallChatModel and the bare-JSON parser, against scripted chat models.

The chat models here are FAKES (scripted replies, recording what they were sent): they stand in
for servers whose behaviour we need to pin down exactly (real tool calls, bare JSON, malformed
output). The real local model is exercised in tests/test_llm_real.py.
"""

from __future__ import annotations

import asyncio
import json

import pytest

pytest.importorskip("langchain_core")

from langchain_core.language_models.chat_models import BaseChatModel  # noqa: E402
from langchain_core.messages import AIMessage, HumanMessage  # noqa: E402
from langchain_core.outputs import ChatGeneration, ChatResult  # noqa: E402
from langchain_core.tools import tool  # noqa: E402

from prm_critic.llm import ToolCallChatModel, ToolCallError, parse_tool_call, tool_call_schema  # noqa: E402
from prm_critic.llm.tools import _tool_spec  # noqa: E402
from prm_critic.validate import ArgumentError  # noqa: E402


@tool
def go(room: str) -> str:
    """Walk to a room."""
    return room


@tool
def act(command: str) -> str:
    """Run one text-game command."""
    return command


class ScriptedServer(BaseChatModel):
    """FAKE OpenAI-compatible chat model: replays ``replies`` (AIMessage or text) in order and records
    every request's messages and keyword arguments (``response_format``, ``seed``, bound ``tools``)."""

    replies: list = []
    requests: list = []
    bound: list = []

    @property
    def _llm_type(self) -> str:
        return "fake-scripted-server"

    def bind_tools(self, tools, *, tool_choice=None, **kwargs):
        self.bound.append({"tools": tools, "tool_choice": tool_choice})
        return self

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        self.requests.append({"messages": list(messages), **kwargs})
        if not self.replies:
            raise AssertionError("the script is exhausted: more model calls than expected")
        r = self.replies.pop(0)
        msg = r if isinstance(r, AIMessage) else AIMessage(content=r)
        return ChatResult(generations=[ChatGeneration(message=msg)])


def server(*replies):
    return ScriptedServer(replies=list(replies), requests=[], bound=[])


def test_parse_tool_call_accepts_the_usual_bare_json_shapes():
    tools = [go, act]
    for text in ('{"tool": "go", "args": {"room": "hall"}}',
                 '{"name": "go", "arguments": {"room": "hall"}}',
                 '{"name": "go", "arguments": "{\\"room\\": \\"hall\\"}"}',
                 '{"name": "go", "parameters": {"room": "hall"}}',
                 '{"function": {"name": "go", "arguments": {"room": "hall"}}}',
                 'Sure! ```json\n{"tool_call": {"name": "go", "arguments": {"room": "hall"}}}\n``` done',
                 'I will call {"name": "go", "arguments": {"room": "hall"}} now.'):
        assert parse_tool_call(text, tools) == ("go", {"room": "hall"}), text


@pytest.mark.parametrize("text, reason", [
    ("just words", "no JSON object found"),
    ('{"name": "fly", "arguments": {"room": "hall"}}', "unknown tool 'fly'"),
    ('{"name": "go", "arguments": {}}', "needs the arguments ['room']"),
    ('{"name": "go", "arguments": {"room": "hall", "speed": 3}}', "has no arguments ['speed']"),
    ('{"name": "go", "arguments": [1]}', "must be a JSON object"),
    ('{"weather": "sunny"}', "no tool call found"),
])
def test_parse_tool_call_names_what_is_wrong(text, reason):
    with pytest.raises(ToolCallError, match=reason.replace("[", r"\[").replace("]", r"\]")):
        parse_tool_call(text, [go, act])


def test_parse_tool_call_checks_arg_choices():
    choices = {"act": {"command": ["open door", "go north"]}}
    assert parse_tool_call('{"tool": "act", "args": {"command": "go north"}}', [act], arg_choices=choices)[1] == {
        "command": "go north"}
    with pytest.raises(ToolCallError, match="must be one of"):
        parse_tool_call('{"tool": "act", "args": {"command": "eat sofa"}}', [act], arg_choices=choices)


def test_schema_admits_one_branch_per_tool_plus_answer_with_enums():
    specs = [_tool_spec(go), _tool_spec(act)]
    schema = tool_call_schema(specs, arg_choices={"act": {"command": ["open door", "go north"]}})
    branches = schema["anyOf"]
    assert [b["properties"]["tool"] for b in branches[:2]] == [{"const": "go"}, {"const": "act"}]
    assert branches[1]["properties"]["args"]["properties"]["command"] == {"type": "string", "enum": ["open door", "go north"]}
    assert branches[2]["required"] == ["answer"]
    only_call = tool_call_schema(specs[:1], allow_answer=False)
    assert "anyOf" not in only_call and only_call["properties"]["tool"] == {"const": "go"}
    with pytest.raises(ArgumentError, match="has no argument 'cmd'"):
        tool_call_schema(specs, arg_choices={"act": {"cmd": ["x"]}})


def test_json_schema_mode_sends_the_schema_and_returns_a_real_tool_call():
    llm = server('{"tool": "act", "args": {"command": "open door"}}')
    model = ToolCallChatModel(llm=llm, mode="json_schema", seed=7).bind_tools([go, act], tool_choice="required")
    msg = model.invoke([HumanMessage("You see a door.")], arg_choices={"act": {"command": ["open door", "go north"]}})
    assert msg.tool_calls[0]["name"] == "act" and msg.tool_calls[0]["args"] == {"command": "open door"}
    assert msg.tool_calls[0]["id"].startswith("call_") and msg.content == ""
    assert msg.response_metadata["tool_call_path"] == "json_schema" and msg.response_metadata["seed"] == 7
    req = llm.requests[0]
    rf = req["response_format"]
    assert rf["type"] == "json_schema" and req["seed"] == 7
    assert [b["properties"]["tool"]["const"] for b in rf["json_schema"]["schema"]["anyOf"]] == ["go", "act"]  # no answer
    assert req["messages"][0].type == "system" and "open door" in req["messages"][0].content
    assert not llm.bound  # no native tools in json_schema mode


def test_json_schema_mode_retries_malformed_output_then_raises():
    llm = server("not json", '{"tool": "go", "args": {"room": "hall"}}')
    msg = ToolCallChatModel(llm=llm, mode="json_schema").bind_tools([go]).invoke("go somewhere")
    assert msg.tool_calls[0]["args"] == {"room": "hall"} and msg.response_metadata["attempts"] == 2
    note = llm.requests[1]["messages"][-1].content
    assert "could not be used: no JSON object found" in note  # the retry says what was wrong

    bad = server("{}", "nope", '{"tool": "fly", "args": {}}')
    with pytest.raises(ToolCallError, match=r"after 3 attempts \(unknown tool 'fly'"):
        ToolCallChatModel(llm=bad, mode="json_schema", max_attempts=3).bind_tools([go]).invoke("go")
    assert len(bad.requests) == 3  # capped


def test_json_schema_mode_returns_an_answer_when_allowed():
    llm = server('{"answer": "I am done."}')
    msg = ToolCallChatModel(llm=llm, mode="json_schema").bind_tools([go]).invoke("hello")
    assert msg.tool_calls == [] and msg.content == "I am done." and msg.response_metadata["tool_call_path"] == "answer"


def test_native_tool_calls_are_used_as_they_are():
    real = AIMessage(content="", tool_calls=[{"name": "go", "args": {"room": "hall"}, "id": "srv_1", "type": "tool_call"}])
    llm = server(real)
    msg = ToolCallChatModel(llm=llm, mode="auto").bind_tools([go]).invoke("go to the hall")
    assert msg.tool_calls[0]["id"] == "srv_1" and msg.response_metadata["tool_call_path"] == "native"
    assert len(llm.requests) == 1 and "response_format" not in llm.requests[0]
    assert llm.bound[0]["tools"][0]["function"]["name"] == "go"


def test_native_tool_call_with_a_bad_name_is_not_passed_on():
    fake = AIMessage(content="", tool_calls=[{"name": "fly", "args": {}, "id": "x", "type": "tool_call"}])
    llm = server(fake, fake)
    with pytest.raises(ToolCallError, match="unknown tool 'fly'"):
        ToolCallChatModel(llm=llm, mode="native", max_attempts=2).bind_tools([go]).invoke("go")


def test_auto_parses_bare_json_and_falls_back_to_the_schema_for_text():
    llm = server('{"name": "go", "arguments": {"room": "kitchen"}}')
    msg = ToolCallChatModel(llm=llm).bind_tools([go]).invoke("go")
    assert msg.tool_calls[0]["args"] == {"room": "kitchen"} and msg.response_metadata["tool_call_path"] == "parsed"
    assert len(llm.requests) == 1

    llm = server("I would like to help you with cooking.", '{"tool": "go", "args": {"room": "kitchen"}}')
    msg = ToolCallChatModel(llm=llm).bind_tools([go]).invoke("go")
    assert msg.tool_calls[0]["args"] == {"room": "kitchen"} and msg.response_metadata["attempts"] == 2
    assert "response_format" not in llm.requests[0] and "response_format" in llm.requests[1]


def test_native_mode_text_is_an_answer_unless_a_call_is_required():
    llm = server("The kitchen is north.")
    msg = ToolCallChatModel(llm=llm, mode="native").bind_tools([go]).invoke("where?")
    assert msg.content == "The kitchen is north." and msg.response_metadata["tool_call_path"] == "answer"
    llm = server("no", "still no")
    with pytest.raises(ToolCallError, match="after 2 attempts"):
        ToolCallChatModel(llm=llm, mode="native", max_attempts=2).bind_tools([go], tool_choice="required").invoke("go")


def test_async_path_and_seeds_increase_per_call():
    llm = server('{"tool": "go", "args": {"room": "a"}}', '{"tool": "go", "args": {"room": "b"}}')
    model = ToolCallChatModel(llm=llm, mode="json_schema", seed=100).bind_tools([go])

    async def main():
        return [await model.ainvoke("go"), await model.ainvoke("go")]

    msgs = asyncio.run(main())
    assert [m.tool_calls[0]["args"]["room"] for m in msgs] == ["a", "b"]
    assert [r["seed"] for r in llm.requests] == [100, 101]


def test_arguments_are_checked():
    llm = server()
    with pytest.raises(ArgumentError, match="mode: expected one of"):
        ToolCallChatModel(llm=llm, mode="schema")
    with pytest.raises(ArgumentError, match="max_attempts"):
        ToolCallChatModel(llm=llm, max_attempts=0)
    with pytest.raises(ArgumentError, match="llm: expected a LangChain chat model"):
        ToolCallChatModel(llm="gpt")
    with pytest.raises(ArgumentError, match="tool_choice"):
        ToolCallChatModel(llm=llm).bind_tools([go], tool_choice="fly")
    with pytest.raises(ArgumentError, match="tools: none bound"):
        ToolCallChatModel(llm=llm).invoke("hi")
    with pytest.raises(ArgumentError, match="arg_choices: unknown tool 'fly'"):
        ToolCallChatModel(llm=llm).bind_tools([go]).invoke("hi", arg_choices={"fly": {"x": ["y"]}})
    with pytest.raises(ArgumentError, match="non-empty list of strings"):
        ToolCallChatModel(llm=llm).bind_tools([go]).invoke("hi", arg_choices={"go": {"room": "kitchen"}})
    assert json.dumps(tool_call_schema([_tool_spec(go)]))  # plain JSON, sendable as is


def test_tool_choice_none_returns_the_plain_answer_in_one_call():
    llm = server("Just an answer.")
    msg = ToolCallChatModel(llm=llm, mode="json_schema").bind_tools([go], tool_choice="none").invoke("hi")
    assert msg.content == "Just an answer." and msg.tool_calls == [] and len(llm.requests) == 1
    assert "response_format" not in llm.requests[0]
