"""The OpenAI API of ``prm-critic serve-llm`` (``prm_critic.llm.openai_api``) on request and reply dicts:
malformed ``tools`` and ``tool_choice`` named, model names, earlier tool turns written as text, the
constrained request, replies turned into ``tool_calls`` or text, stream chunks. No server: the real
one, through the ``openai`` client, is tested in tests/test_serve_llm_openai.py.
"""

from __future__ import annotations

import pytest

from prm_critic.llm.openai_api import (
    APIError,
    ChatPlan,
    check_model,
    check_tool_choice,
    check_tools,
    plan_chat,
    rewrite_messages,
)

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                   "required": ["city", "unit"]}}}
ADD = {"type": "function", "function": {
    "name": "add", "description": "Add two integers.",
    "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                   "required": ["a", "b"]}}}
TOOLS = [WEATHER, ADD]
ALIAS = "smollm2-test"


def _fn(name, parameters, **extra):
    return {"type": "function", "function": {"name": name, "parameters": parameters, **extra}}


# =========================================================================== the translation
MALFORMED = [
    ("not a list", {"type": "function"}, "tools", r"tools: expected a non-empty list .* got dict"),
    ("an empty list", [], "tools", r"tools: expected a non-empty list .* got list \[\]"),
    ("an item that is not an object", ["get_weather"], "tools[0]", r"tools\[0\]: expected an object"),
    ("another tool type", [{"type": "custom", "custom": {"name": "x"}}], "tools[0].type",
     r"tools\[0\]\.type: expected 'function' .* got 'custom'"),
    ("no function object", [{"type": "function"}], "tools[0].function",
     r"tools\[0\]\.function: expected an object with a name .* got NoneType None"),
    ("function.name missing", [{"type": "function", "function": {"parameters": {"type": "object"}}}],
     "tools[0].function.name", r"tools\[0\]\.function\.name: expected a name of 1-64 letters.* got NoneType None"),
    ("function.name with a space", [_fn("get weather", {"type": "object"})], "tools[0].function.name",
     r"tools\[0\]\.function\.name: .* got str 'get weather'"),
    ("parameters not an object", [WEATHER, _fn("x", ["city"])], "tools[1].function.parameters",
     r"tools\[1\]\.function\.parameters: expected a JSON schema object .* got list"),
    ("parameters of type string", [_fn("x", {"type": "string"})], "tools[0].function.parameters",
     r"tools\[0\]\.function\.parameters: expected a JSON schema of \"type\": \"object\" .* got \"type\": 'string'"),
    ("parameters without a type", [_fn("x", {"properties": {"a": {"type": "string"}}})], "tools[0].function.parameters",
     r"got \"type\": None"),
    ("properties not an object", [_fn("x", {"type": "object", "properties": ["a"]})],
     "tools[0].function.parameters.properties", r"expected an object of argument schemas"),
    ("required not among properties", [_fn("x", {"type": "object", "properties": {"a": {}}, "required": ["b"]})],
     "tools[0].function.parameters.required", r"\['b'\] not among the properties \['a'\]"),
    ("a remote $ref", [_fn("x", {"type": "object", "properties": {"a": {"$ref": "http://x/s.json"}}})],
     "tools[0].function.parameters", r"\$ref 'http://x/s\.json': expected a local reference"),
    ("a recursive $ref", [_fn("x", {"type": "object", "properties": {"a": {"$ref": "#/$defs/N"}},
                                    "$defs": {"N": {"type": "object", "properties": {"n": {"$ref": "#/$defs/N"}}}}})],
     "tools[0].function.parameters", r"refers to itself \(a recursive schema\)"),
    ("two tools of one name", [WEATHER, WEATHER], "tools", r"expected distinct function names, got \['get_weather', 'get_weather'\]"),
]


@pytest.mark.parametrize("what,tools,param,match", MALFORMED, ids=[m[0].replace(" ", "-") for m in MALFORMED])
def test_malformed_tools_name_the_field(what, tools, param, match):
    with pytest.raises(APIError, match=match) as info:
        check_tools(tools)
    assert info.value.status == 400 and info.value.param == param
    assert info.value.body()["error"]["type"] == "invalid_request_error"


def test_tools_become_specs_with_local_refs_resolved():
    pydantic_style = _fn("move", {"type": "object", "properties": {"to": {"$ref": "#/$defs/Room"}}, "required": ["to"],
                                  "$defs": {"Room": {"type": "string", "enum": ["hall", "pit"]}}})
    specs = check_tools([WEATHER, pydantic_style, _fn("ping", None)])
    assert [s["name"] for s in specs] == ["get_weather", "move", "ping"]
    assert specs[1]["parameters"] == {"type": "object", "properties": {"to": {"type": "string", "enum": ["hall", "pit"]}},
                                      "required": ["to"]}
    assert specs[2]["parameters"] == {"type": "object", "properties": {}, "required": []}


def test_tool_choice_forms():
    specs = check_tools(TOOLS)
    assert check_tool_choice(None, specs) == ("auto", specs)
    assert check_tool_choice("required", specs) == ("required", specs)
    assert check_tool_choice("none", specs) == ("none", [])
    assert check_tool_choice({"type": "function", "function": {"name": "add"}}, specs) == ("required", [specs[1]])
    with pytest.raises(APIError, match=r"tool_choice: names the function 'mul', expected one of the tools \['get_weather', 'add'\]"):
        check_tool_choice({"type": "function", "function": {"name": "mul"}}, specs)
    with pytest.raises(APIError, match=r"tool_choice: expected 'none', 'auto', 'required' or .* got str 'any'"):
        check_tool_choice("any", specs)


def test_model_names():
    check_model({"model": ALIAS}, [ALIAS])
    check_model({}, [ALIAS])  # no model named: the served one
    with pytest.raises(APIError, match=r"The model 'gpt-4o' does not exist: this server serves \['smollm2-test'\]") as info:
        check_model({"model": "gpt-4o"}, [ALIAS])
    assert info.value.status == 404 and info.value.body() == {"error": {
        "message": str(info.value), "type": "invalid_request_error", "param": "model", "code": "model_not_found"}}
    with pytest.raises(APIError, match="model: expected a model name"):
        check_model({"model": 3}, [ALIAS])


def test_earlier_tool_turns_are_written_as_text():
    msgs = [{"role": "user", "content": "Weather in Paris and in Rome?"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
                {"id": "c2", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Rome"}'}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
            {"role": "tool", "tool_call_id": "c2", "content": [{"type": "text", "text": "rain"}]},
            {"role": "user", "content": "Thanks."}]
    out = rewrite_messages(msgs)
    assert out == [msgs[0],
                   {"role": "assistant", "content": '{"tool": "get_weather", "args": {"city": "Paris"}}\n'
                                                    '{"tool": "get_weather", "args": {"city": "Rome"}}'},
                   {"role": "user", "content": "Result of get_weather: sunny\nResult of get_weather: rain"},
                   msgs[4]]
    bad = [msgs[0], {"role": "assistant", "tool_calls": [{"id": "c1", "function": {"name": "x", "arguments": "{city"}}]}]
    with pytest.raises(APIError, match=r"messages\[1\]\.tool_calls\[0\]\.function\.arguments: expected a JSON object as a string, got str '\{city'"):
        rewrite_messages(bad)


def test_plan_constrains_the_reply_and_refuses_conflicts():
    body = {"model": ALIAS, "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}],
            "tools": TOOLS, "tool_choice": "required", "parallel_tool_calls": False, "stream": True}
    plan = plan_chat(body)
    req = plan.request
    assert plan.tool_mode == "required" and plan.stream and "stream" not in req
    assert not ({"tools", "tool_choice", "parallel_tool_calls"} & set(req))
    assert req["messages"][0]["content"].startswith("Be brief.\n\nYou can use these tools:\n- get_weather:")
    schema = req["response_format"]["json_schema"]["schema"]
    assert [b["properties"]["tool"]["const"] for b in schema["anyOf"]] == ["get_weather", "add"]  # no answer branch
    auto = plan_chat({**body, "tool_choice": "auto"}).request["response_format"]["json_schema"]["schema"]
    assert auto["anyOf"][-1]["required"] == ["answer"]
    none = plan_chat({**body, "tool_choice": "none", "response_format": {"type": "json_object"}})
    assert none.tool_mode is None and none.request["response_format"] == {"type": "json_object"} and none.request["stream"]
    with pytest.raises(APIError, match=r"response_format: cannot be combined with tools \(tool_choice 'required'\)"):
        plan_chat({**body, "response_format": {"type": "json_object"}})
    with pytest.raises(APIError, match=r"tool_choice: got str 'required' without tools"):
        plan_chat({"messages": [], "tool_choice": "required"})
    with pytest.raises(APIError, match=r"functions: the deprecated 'functions' is not served: expected tools="):
        plan_chat({"messages": [], "functions": [{"name": "x"}]})
    assert plan_chat({"messages": [], "tool_choice": "auto"}).tool_mode is None


def _llama(content, finish="stop"):
    return {"id": "chatcmpl-1", "created": 1, "model": ALIAS, "object": "chat.completion",
            "choices": [{"index": 0, "finish_reason": finish, "message": {"role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": 9, "completion_tokens": 12, "total_tokens": 21}}


def test_replies_become_tool_calls_or_text_and_cut_calls_are_errors():
    auto = plan_chat({"messages": [], "tools": TOOLS, "max_tokens": 8})
    out = auto.reply(_llama('{"tool": "add", "args": {"a": 2, "b": 40}}'))
    choice = out["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] is None
    (call,) = choice["message"]["tool_calls"]
    assert call["type"] == "function" and call["id"].startswith("call_") and len(call["id"]) == 29
    assert call["function"] == {"name": "add", "arguments": '{"a": 2, "b": 40}'}
    text = auto.reply(_llama('{"answer": "Hi \\u00e9!"}'))["choices"][0]
    assert text["message"] == {"role": "assistant", "content": "Hi é!"} and text["finish_reason"] == "stop"
    cut_answer = auto.reply(_llama('{"answer": "Hello wor\\u00', "length"))["choices"][0]
    assert cut_answer["message"]["content"] == "Hello wor" and cut_answer["finish_reason"] == "length"
    with pytest.raises(APIError, match=r"max_tokens: the reply was cut at max_tokens=8 before its tool call was complete") as info:
        auto.reply(_llama('{"tool": "add", "args": {"a"', "length"))
    assert info.value.status == 400 and info.value.param == "max_tokens"
    required = plan_chat({"messages": [], "tools": TOOLS, "tool_choice": "required", "stop": ["}"]})
    with pytest.raises(APIError, match=r"stop: the stop sequences \['\}'\] cut the tool call"):
        required.reply(_llama('{"tool": "add", "args": {"a": 2, "b": 40'))
    with pytest.raises(APIError, match=r"server: the schema-constrained reply is no valid tool call \(unknown tool 'mul'") as info:
        plan_chat({"messages": [], "tools": TOOLS, "tool_choice": "required"}).reply(_llama('{"tool": "mul", "args": {}}'))
    assert info.value.status == 500 and info.value.body()["error"]["type"] == "server_error"


def test_stream_chunks_are_openai_deltas():
    plan = plan_chat({"messages": [], "tools": TOOLS, "stream": True, "stream_options": {"include_usage": True}})
    reply = plan.reply(_llama('{"tool": "add", "args": {"a": 1, "b": 2}}'))
    chunks = plan.stream_chunks(reply)
    assert [c["object"] for c in chunks] == ["chat.completion.chunk"] * 4
    first, second, last, usage = chunks
    call = first["choices"][0]["delta"]["tool_calls"][0]
    assert call["function"] == {"name": "add", "arguments": ""} and call["id"].startswith("call_")
    assert second["choices"][0]["delta"] == {"tool_calls": [{"index": 0, "function": {"arguments": '{"a": 1, "b": 2}'}}]}
    assert last["choices"][0]["finish_reason"] == "tool_calls" and first["usage"] is None
    assert usage["choices"] == [] and usage["usage"]["total_tokens"] == 21
    assert ChatPlan({}).reply({"x": 1}) == {"x": 1}  # no tools: llama.cpp's reply as it is
