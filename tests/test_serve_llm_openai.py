"""``prm-critic serve-llm`` through the real ``openai`` client: tool calls, model names, OpenAI errors.

A real ``LocalLLMServer`` (the packaged SmolLM2, llama.cpp, one thread) on 127.0.0.1, one for the
module, and the ``openai`` package: every ``tool_choice``, arguments validated against the tool's
JSON schema (``jsonschema``), streaming, concurrent requests, 404 for an unknown model and 400 for
malformed tools. A 135M model rarely writes a tool call by itself, so these are the calls the
constraint produces. The translation alone is tested in tests/test_llm_openai_api.py. Skipped
without the ``llm`` extra or the packaged model.
"""

from __future__ import annotations

import json
import threading
from types import SimpleNamespace

import pytest
from llm_helpers import smollm2
from test_llm_openai_api import ALIAS, MALFORMED, TOOLS

from faults import correct, loud
from prm_critic.llm.openai_api import APIError

openai = pytest.importorskip("openai")
jsonschema = pytest.importorskip("jsonschema")

PROMPTS = ["What is the weather in Paris?", "Add 2 and 40.", "Hello! Who are you?"]


@pytest.fixture(scope="module")
def server():
    from prm_critic.llm import LocalLLMServer

    with LocalLLMServer(smollm2(), n_threads=1, ctx_size=2048, model_alias=ALIAS) as s:
        yield s


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base_url, api_key="none", max_retries=0, timeout=120)


def _ask(client, prompt, **kw):
    kw.setdefault("max_tokens", 48)
    kw.setdefault("temperature", 0)
    kw.setdefault("model", ALIAS)
    return client.chat.completions.create(messages=[{"role": "user", "content": prompt}], **kw)


def _valid_call(call, tools=TOOLS):
    """The call's (name, args), after checking its id and type and its arguments against the tool's schema."""
    assert call.type == "function" and call.id.startswith("call_")
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
    assert call.function.name in schemas, call
    args = json.loads(call.function.arguments)
    jsonschema.validate(args, {**schemas[call.function.name], "additionalProperties": False})
    return call.function.name, args


@pytest.mark.fault
def test_required_always_calls_a_valid_tool(client):
    seen = set()
    sampled = {"temperature": 1.0, "seed": 7}
    for prompt, kw in [(p, {}) for p in PROMPTS] + [(PROMPTS[2], sampled)]:
        choice = _ask(client, prompt, tools=TOOLS, tool_choice="required", **kw).choices[0]
        assert choice.finish_reason == "tool_calls" and choice.message.content is None
        assert len(choice.message.tool_calls) == 1
        seen.add(_valid_call(choice.message.tool_calls[0])[0])
    assert seen <= {"get_weather", "add"}
    correct(33, "tool_choice='required' through the openai client, for prompts a 135M model answers in text",
            f"a valid call each time ({sorted(seen)}), arguments valid for the tool's schema")


def test_a_named_function_is_the_one_called(client):
    for prompt in PROMPTS:
        choice = _ask(client, prompt, tools=TOOLS, tool_choice={"type": "function", "function": {"name": "add"}}).choices[0]
        assert choice.finish_reason == "tool_calls"
        name, args = _valid_call(choice.message.tool_calls[0])
        assert name == "add" and set(args) == {"a", "b"}


def test_auto_is_a_valid_call_or_text_and_none_never_calls(client):
    for prompt in PROMPTS:
        msg = (choice := _ask(client, prompt, tools=TOOLS).choices[0]).message
        if msg.tool_calls:
            assert choice.finish_reason == "tool_calls" and msg.content is None
            _valid_call(msg.tool_calls[0])
        else:
            assert choice.finish_reason in ("stop", "length") and isinstance(msg.content, str) and msg.content.strip()
            assert not msg.content.lstrip().startswith('{"answer"')  # the text, not the JSON around it
        none = _ask(client, prompt, tools=TOOLS, tool_choice="none", max_tokens=12).choices[0]
        assert none.message.tool_calls is None and none.message.content and none.finish_reason in ("stop", "length")


def test_a_conversation_with_a_tool_result(client):
    messages = [{"role": "user", "content": "What is the weather in Paris?"},
                {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function", "function": {
                    "name": "get_weather", "arguments": '{"city": "Paris", "unit": "celsius"}'}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": "Sunny, 21 degrees."}]
    choice = client.chat.completions.create(model=ALIAS, messages=messages, tools=TOOLS, max_tokens=48,
                                            temperature=0).choices[0]
    if choice.message.tool_calls:
        _valid_call(choice.message.tool_calls[0])
    else:
        assert choice.message.content


@pytest.mark.fault
def test_streaming_with_tools_in_openai_deltas(client):
    stream = client.chat.completions.create(model=ALIAS, messages=[{"role": "user", "content": PROMPTS[0]}],
                                            tools=TOOLS, tool_choice="required", max_tokens=48, temperature=0,
                                            stream=True, stream_options={"include_usage": True})
    chunks = list(stream)
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens > 0
    deltas = [c.choices[0] for c in chunks if c.choices]
    assert deltas[-1].finish_reason == "tool_calls"
    first = deltas[0].delta.tool_calls[0]
    arguments = "".join(d.delta.tool_calls[0].function.arguments or "" for d in deltas if d.delta.tool_calls)
    _valid_call(SimpleNamespace(id=first.id, type=first.type, function=SimpleNamespace(
        name=first.function.name, arguments=arguments)))
    # the client's own accumulator reads the same stream format
    with client.chat.completions.stream(model=ALIAS, messages=[{"role": "user", "content": PROMPTS[1]}], tools=TOOLS,
                                        tool_choice={"type": "function", "function": {"name": "add"}},
                                        max_tokens=48, temperature=0) as s:
        final = s.get_final_completion()
    assert final.choices[0].finish_reason == "tool_calls"
    assert _valid_call(final.choices[0].message.tool_calls[0])[0] == "add"
    # without tools (or with tool_choice="none") llama.cpp's own token stream comes through
    plain = list(_ask(client, "Say hi.", max_tokens=6, stream=True, tools=TOOLS, tool_choice="none"))
    assert sum(bool(c.choices and c.choices[0].delta.content) for c in plain) >= 2
    correct(33, "stream=True with tools (tool_choice 'required' / a named function)",
            "OpenAI chat.completion.chunk deltas of one valid call (generated, then streamed), finish_reason 'tool_calls'")


def test_concurrent_tool_call_requests(client):
    results: list = []
    errors: list = []

    def one(i):
        try:
            r = _ask(client, f"Add {i} and 2.", tools=TOOLS, tool_choice="required")
            results.append(_valid_call(r.choices[0].message.tool_calls[0]))
        except Exception as exc:  # reported below, with the others
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors and len(results) == 4


def test_in_process_chat_serves_tools_too(server):
    out = server.chat({"messages": [{"role": "user", "content": PROMPTS[1]}], "tools": TOOLS, "tool_choice": "required",
                       "max_tokens": 48, "temperature": 0})
    call = out["choices"][0]["message"]["tool_calls"][0]
    assert call["function"]["name"] in ("get_weather", "add") and isinstance(json.loads(call["function"]["arguments"]), dict)
    with pytest.raises(APIError, match="tools: expected a non-empty list"):
        server.chat({"messages": [{"role": "user", "content": "hi"}], "tools": []})


@pytest.mark.fault
def test_unknown_model_is_openais_404(client, server):
    assert [m.id for m in client.models.list()] == [ALIAS] == [server.model]
    assert client.models.retrieve(ALIAS).id == ALIAS
    with loud(34, "openai client: chat.completions.create(model='gpt-4o-mini') on a server that serves another model",
              openai.NotFoundError, match=r"The model 'gpt-4o-mini' does not exist: this server serves \['smollm2-test'\]"):
        try:
            _ask(client, "hi", model="gpt-4o-mini", max_tokens=2)
        except openai.NotFoundError as exc:
            assert exc.status_code == 404 and exc.body["code"] == "model_not_found" and exc.body["param"] == "model"
            assert exc.body["type"] == "invalid_request_error"
            raise
    with pytest.raises(openai.NotFoundError, match="model_not_found|does not exist"):
        client.completions.create(model="other", prompt="hi", max_tokens=2)
    with pytest.raises(openai.NotFoundError, match="does not exist"):
        client.models.retrieve("other")


HTTP_MALFORMED = [MALFORMED[i] for i in (0, 5, 8)]


@pytest.mark.fault
@pytest.mark.parametrize("what,tools,param,match", HTTP_MALFORMED, ids=[m[0].replace(" ", "-") for m in HTTP_MALFORMED])
def test_malformed_tools_are_a_400_naming_the_field(client, what, tools, param, match):
    with loud(34, f"openai client: tools with {what}", openai.BadRequestError, match=match):
        try:
            _ask(client, "hi", tools=tools, max_tokens=2)
        except openai.BadRequestError as exc:
            assert exc.body["param"] == param and exc.body["type"] == "invalid_request_error"
            raise


@pytest.mark.fault
def test_tools_the_server_cannot_honour_are_refused(client):
    with loud(33, "tools with response_format={'type': 'json_object'} (two constraints on one reply)",
              openai.BadRequestError, match=r"response_format: cannot be combined with tools"):
        _ask(client, "hi", tools=TOOLS, response_format={"type": "json_object"})
    with loud(33, "tools sent to /v1/completions, which would ignore them", openai.BadRequestError,
              match=r"tools: tool calls are served on /v1/chat/completions only; /v1/completions would ignore them"):
        client.completions.create(model=ALIAS, prompt="hi", max_tokens=2, extra_body={"tools": TOOLS})
    with loud(33, "tool_choice='required' with max_tokens=4, too few for one call", openai.BadRequestError,
              match=r"max_tokens: the reply was cut at max_tokens=4 before its tool call was complete"):
        _ask(client, PROMPTS[1], tools=TOOLS, tool_choice="required", max_tokens=4)
