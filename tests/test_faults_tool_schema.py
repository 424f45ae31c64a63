"""``serve-llm`` with ``tool_choice="required"`` (reliability item 66): every generated tool call is
validated against the tool's whole JSON schema before it is answered. The grammar that constrains
generation enforces the structure (types, required keys, enums), not value keywords such as
``maximum``, ``multipleOf`` or ``uniqueItems``: a call that breaks one is refused naming the keyword,
never answered as a valid call. A schema no call could be validated against is refused with 400.

The llama.cpp replies here are FAKE (dicts shaped as llama.cpp's answer, written by the test): the
real model under its grammar cannot be made to produce a chosen violating value on demand; the
translation and the validation are the server's real code.
"""

from __future__ import annotations

import json

import pytest

from faults import correct, loud

pytest.importorskip("jsonschema")
from prm_critic.llm.openai_api import APIError, plan_chat  # noqa: E402

pytestmark = pytest.mark.fault

ITEM = 66


def _tool(name, properties):
    return {"type": "function", "function": {"name": name, "parameters": {
        "type": "object", "properties": properties, "required": sorted(properties)}}}


TOOLS = [
    _tool("set_speed", {"kmh": {"type": "number", "maximum": 130}}),
    _tool("pack", {"boxes": {"type": "integer", "multipleOf": 6}}),
    _tool("tag", {"labels": {"type": "array", "items": {"type": "string"}, "uniqueItems": True}}),
]


def _llama(content):
    """A FAKE llama.cpp reply holding ``content`` (see the module docstring)."""
    return {"id": "x", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}]}


@pytest.mark.parametrize("call,keyword", [
    ({"tool": "set_speed", "args": {"kmh": 180}}, "maximum"),
    ({"tool": "pack", "args": {"boxes": 7}}, "multipleOf"),
    ({"tool": "tag", "args": {"labels": ["a", "a"]}}, "uniqueItems"),
])
def test_a_generated_call_breaking_a_value_keyword_is_not_answered(call, keyword):
    plan = plan_chat({"messages": [{"role": "user", "content": "go"}], "tools": TOOLS, "tool_choice": "required"})
    with loud(ITEM, f"tool_choice='required', generated arguments breaking '{keyword}'", APIError,
              match=rf"breaks its tool's schema at \$\.\w+: .* \(keyword '{keyword}'\)"):
        plan.reply(_llama(json.dumps(call)))
    ok = {"set_speed": {"kmh": 90}, "pack": {"boxes": 12}, "tag": {"labels": ["a", "b"]}}[call["tool"]]
    out = plan.reply(_llama(json.dumps({"tool": call["tool"], "args": ok})))
    fn = out["choices"][0]["message"]["tool_calls"][0]["function"]
    assert fn["name"] == call["tool"] and json.loads(fn["arguments"]) == ok


def test_a_schema_no_call_can_be_validated_against_is_refused_with_400():
    bad = [_tool("set_speed", {"kmh": {"type": "number", "maximum": "fast"}})]
    with loud(ITEM, "a tool schema whose 'maximum' is a string", APIError,
              match=r"tools\[0\]\.function\.parameters\.properties\.kmh\.maximum: not a valid JSON schema"):
        plan_chat({"messages": [{"role": "user", "content": "go"}], "tools": bad, "tool_choice": "required"})
    try:
        plan_chat({"messages": [{"role": "user", "content": "go"}], "tools": bad, "tool_choice": "required"})
    except APIError as exc:
        assert exc.status == 400
        correct(ITEM, "the same schema: HTTP status", f"{exc.status} ({exc.code})")
