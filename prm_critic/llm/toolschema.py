"""Tool-call schemas and reply parsing shared by :class:`~prm_critic.llm.ToolCallChatModel` and the
local model server (``prm-critic serve-llm``); plain JSON, no LangChain.

A reply is one JSON object, ``{"tool": <name>, "args": {...}}`` or ``{"answer": "<text>"}``:
:func:`tool_call_schema` is the JSON schema that admits exactly these for a list of tool specs
(``{"name", "description", "parameters"}``), which llama.cpp, vLLM, Ollama and OpenAI turn into
constrained generation; :func:`parse_reply` reads a reply (also bare JSON in other text) and
:func:`check_call` says why a call is not valid.
"""

from __future__ import annotations

import json
import re
from typing import Any, Mapping, Sequence

from prm_critic import validate

__all__ = ["INSTRUCTIONS", "ANSWER_CLAUSE", "RETRY_NOTE", "args_schema", "tool_call_schema", "describe_tools",
           "json_objects", "unwrap_call", "check_call", "parse_reply"]

INSTRUCTIONS = (
    "You can use these tools:\n{tools}\n"
    "Reply with exactly one JSON object and nothing else: "
    '{{"tool": "<tool name>", "args": {{<the tool\'s arguments>}}}} to call a tool{answer}.'
)
ANSWER_CLAUSE = ', or {"answer": "<your final answer>"} when no tool is needed'
RETRY_NOTE = ("Your last reply could not be used: {reason}. Reply again with exactly one JSON object: "
              '{{"tool": "<tool name>", "args": {{...}}}}{answer}.')


def args_schema(spec: Mapping[str, Any], choices: Mapping[str, Sequence[str]] | None) -> dict[str, Any]:
    """The object schema of one tool's arguments: its properties and required keys, no others;
    string arguments named in ``choices`` restricted to those values (and required)."""
    params = spec["parameters"]
    props = {k: dict(v) for k, v in params.get("properties", {}).items()}
    for arg, values in (choices or {}).items():
        if arg not in props:
            raise validate.ArgumentError(f"arg_choices: tool {spec['name']!r} has no argument {arg!r} "
                                         f"(its arguments: {sorted(props)})")
        props[arg] = {"type": "string", "enum": list(values)}
    required = list(params.get("required", []))
    for arg in choices or {}:
        if arg not in required:
            required.append(arg)
    return {"type": "object", "properties": props, "required": required, "additionalProperties": False}


def tool_call_schema(tools: Sequence[Mapping[str, Any]], *, allow_answer: bool = True,
                     arg_choices: Mapping[str, Mapping[str, Sequence[str]]] | None = None) -> dict[str, Any]:
    """The JSON schema of one reply: a call of one of ``tools`` (specs ``{"name", "description", "parameters"}``), or an answer."""
    branches: list[dict[str, Any]] = []
    for spec in tools:
        branches.append({
            "type": "object",
            "properties": {"tool": {"const": spec["name"]},
                           "args": args_schema(spec, (arg_choices or {}).get(spec["name"]))},
            "required": ["tool", "args"],
            "additionalProperties": False,
        })
    if allow_answer:
        branches.append({"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"],
                         "additionalProperties": False})
    if not branches:
        raise validate.ArgumentError("tools: expected at least one tool, or an answer allowed (tool_choice not 'required')")
    return branches[0] if len(branches) == 1 else {"anyOf": branches}


def describe_tools(specs: Sequence[Mapping[str, Any]], arg_choices: Mapping[str, Mapping[str, Sequence[str]]]) -> str:
    """One line per tool for :data:`INSTRUCTIONS`: its name, description and arguments (with allowed values)."""
    lines = []
    for s in specs:
        args = dict(s["parameters"].get("properties", {}))
        for a, values in arg_choices.get(s["name"], {}).items():
            args[a] = {"one of": list(values)}
        lines.append(f"- {s['name']}: {s['description']} arguments: {json.dumps(args)}")
    return "\n".join(lines)


_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.S)


def json_objects(text: str) -> list[Any]:
    """JSON values found in ``text``: the whole text, fenced blocks, then each balanced ``{...}``."""
    found: list[Any] = []
    candidates = [text.strip()] + [m.group(1).strip() for m in _FENCE.finditer(text)]
    for c in candidates:
        try:
            found.append(json.loads(c))
        except json.JSONDecodeError:
            pass
    if found:
        return found
    decoder = json.JSONDecoder()
    i = text.find("{")
    while i != -1:
        try:
            obj, end = decoder.raw_decode(text, i)
        except json.JSONDecodeError:
            i = text.find("{", i + 1)
            continue
        found.append(obj)
        i = text.find("{", end)
    return found


def unwrap_call(obj: Any) -> tuple[Any, Any] | None:
    """``(name, args)`` of the usual bare-JSON tool-call shapes, or ``None``."""
    if not isinstance(obj, dict):
        return None
    for key in ("tool_call", "function_call", "function"):
        if isinstance(obj.get(key), dict):
            inner = unwrap_call(obj[key])
            if inner is not None:
                return inner
    if isinstance(obj.get("tool_calls"), list) and obj["tool_calls"]:
        return unwrap_call(obj["tool_calls"][0])
    for name_key in ("tool", "name"):
        if isinstance(obj.get(name_key), str):
            args_key = next((k for k in ("args", "arguments", "parameters") if k in obj), None)
            args = obj[args_key] if args_key is not None else {}
            if isinstance(args, str):
                try:
                    args = json.loads(args) if args.strip() else {}
                except json.JSONDecodeError:
                    pass  # left a string: _check_call names it
            return obj[name_key], args
    return None


def check_call(name: Any, args: Any, specs: Mapping[str, Mapping[str, Any]],
                arg_choices: Mapping[str, Mapping[str, Sequence[str]]]) -> str | None:
    """Why ``name(args)`` is not a valid call, or ``None`` when it is."""
    if name not in specs:
        return f"unknown tool {name!r} (expected one of {sorted(specs)})"
    if not isinstance(args, dict):
        return f"the arguments of {name!r} must be a JSON object, got {args!r:.100}"
    params = specs[name]["parameters"]
    props = params.get("properties", {})
    missing = [a for a in params.get("required", []) if a not in args]
    if missing:
        return f"tool {name!r} needs the arguments {missing} (got {sorted(args)})"
    extra = [a for a in args if props and a not in props]
    if extra:
        return f"tool {name!r} has no arguments {extra} (its arguments: {sorted(props)})"
    for arg, values in arg_choices.get(name, {}).items():
        if args.get(arg) not in list(values):
            return f"argument {arg!r} of {name!r} must be one of {list(values)!r:.300}, got {args.get(arg)!r:.100}"
    return None



def parse_reply(text: str, specs: Mapping[str, Mapping[str, Any]], arg_choices: Mapping[str, Mapping[str, Sequence[str]]],
           *, allow_answer: bool = False) -> tuple[str | None, Any, str | None]:
    """``(name, args, None)`` for a call, ``(None, answer, None)`` for an allowed answer, ``(None, None, reason)``."""
    objs = json_objects(text)
    if not objs:
        return None, None, "no JSON object found"
    reason = "no tool call found in the JSON"
    for obj in objs:
        if allow_answer and isinstance(obj, dict) and set(obj) == {"answer"} and isinstance(obj["answer"], str):
            return None, obj["answer"], None
        call = unwrap_call(obj)
        if call is None:
            continue
        why = check_call(call[0], call[1], specs, arg_choices)
        if why is None:
            return call[0], call[1], None
        reason = why
    return None, None, reason
