"""The OpenAI API that the local model server adds in front of llama.cpp: tool calls, model names, errors.

llama.cpp serves chat, streaming, logprobs and ``response_format`` itself, but with a model whose
chat template has no tool-call format (SmolLM2 and most small models) it ignores ``tools`` and
answers in text, and it accepts any model name. :class:`OpenAIFront` is a small HTTP server on
``127.0.0.1`` in front of llama.cpp's that forwards every request and adds:

* **tool calls.** A chat request with ``tools`` becomes schema-constrained generation: the tools
  are described in a system message and ``response_format`` gets the JSON schema of
  :func:`~prm_critic.llm.toolschema.tool_call_schema` (llama.cpp turns it into a grammar), so the
  reply is ``{"tool": <a tool's name>, "args": <its arguments>}`` or, where text is allowed,
  ``{"answer": "<text>"}``. The reply is returned as OpenAI's ``message.tool_calls`` (one call,
  ``finish_reason="tool_calls"``) or as the text. ``tool_choice``: ``"auto"`` (the default) a call
  or text, ``"required"`` a call, ``{"type": "function", "function": {"name": ...}}`` a call of
  that tool, ``"none"`` text only (the tools are not offered). Assistant ``tool_calls`` and
  ``tool`` messages of earlier turns are written into the conversation as the same JSON and a
  user message with the result (a template without tool support would drop them).
  With ``stream=True`` the reply is generated first and then sent in OpenAI's chunk format.
* **model names.** A request naming a model the server does not serve gets OpenAI's 404
  ``model_not_found`` error (``openai.NotFoundError``); ``GET /v1/models`` lists the served name.
* **errors.** Malformed ``tools`` / ``tool_choice``, tools on an endpoint that would ignore them,
  and combinations the server cannot honour (``tools`` with ``response_format``) get a 400 in
  OpenAI's error shape naming the field, the value and what was expected.

:func:`plan_chat` is the translation alone (also used by ``LocalLLMServer.chat`` in-process).
"""

from __future__ import annotations

import http.client
import json
import re
import threading
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Sequence
from urllib.parse import urlsplit

from prm_critic._optional import require
from prm_critic.llm.toolschema import ANSWER_CLAUSE, INSTRUCTIONS, check_call, describe_tools, parse_reply, tool_call_schema

__all__ = ["APIError", "ChatPlan", "OpenAIFront", "plan_chat", "check_model", "check_tools", "check_tool_choice",
           "rewrite_messages", "CHAT_PATHS"]

#: the paths of llama.cpp's chat-completions endpoint
CHAT_PATHS = ("/v1/chat/completions", "/chat/completions")
_MODEL_PATH = re.compile(r"/(?:v1/)?models/(.+)")
_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_TOOL_KEYS = ("tools", "tool_choice", "parallel_tool_calls")
_CONSTRAINTS = ("response_format", "grammar", "json_schema")  # llama.cpp's own constraints besides response_format
_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer", "upgrade", "host",
        "content-length"}
_ANSWER_START = re.compile(r'\s*\{\s*"answer"\s*:\s*"')


class APIError(ValueError):
    """A request the server refuses, with OpenAI's error shape (:meth:`body`) and HTTP status."""

    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None,
                 type: str | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.type = type or ("server_error" if status >= 500 else "invalid_request_error")

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def _show(value: Any, limit: int = 120) -> str:
    text = json.dumps(value) if isinstance(value, (dict, list)) else repr(value)
    return f"{type(value).__name__} {text[:limit]}{'…' if len(text) > limit else ''}"


def _bad(param: str, message: str, code: str = "invalid_value") -> APIError:
    return APIError(400, f"{param}: {message}", param=param, code=code)


# --------------------------------------------------------------------------- model names
def check_model(body: dict[str, Any], served: Sequence[str]) -> None:
    """``body["model"]``, when given, must be one of ``served``: else OpenAI's 404 ``model_not_found``."""
    if "model" not in body or body["model"] is None:
        return
    model = body["model"]
    if not isinstance(model, str):
        raise _bad("model", f"expected a model name (a string), got {_show(model)}")
    if model not in served:
        raise APIError(404, f"The model {model!r} does not exist: this server serves {list(served)} "
                       "(GET /v1/models lists it; pass it as model=)", param="model", code="model_not_found")


# --------------------------------------------------------------------------- tools
def _deref(node: Any, root: dict[str, Any], where: str, seen: tuple[str, ...] = ()) -> Any:
    """``node`` with local ``$ref`` s (``#/$defs/X``) replaced by what they point to."""
    if isinstance(node, list):
        return [_deref(v, root, where, seen) for v in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        ref = node["$ref"]
        if not isinstance(ref, str) or not ref.startswith("#/"):
            raise _bad(where, f"$ref {ref!r}: expected a local reference such as '#/$defs/Name'")
        if ref in seen:
            raise _bad(where, f"$ref {ref!r} refers to itself (a recursive schema), which cannot be turned into "
                              "a grammar here: expected a schema without recursion")
        target: Any = root
        for part in ref[2:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(target, dict) or part not in target:
                raise _bad(where, f"$ref {ref!r} points to nothing in the schema")
            target = target[part]
        if not isinstance(target, dict):
            raise _bad(where, f"$ref {ref!r} points to {_show(target)}, expected a schema object")
        merged = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
        return _deref(merged, root, where, seen + (ref,))
    return {k: _deref(v, root, where, seen) for k, v in node.items()}


def _object_schema(where: str, params: Any) -> dict[str, Any]:
    if not isinstance(params, dict):
        raise _bad(where, f"expected a JSON schema object with \"type\": \"object\", got {_show(params)}")
    if params.get("type") != "object":
        raise _bad(where, f"expected a JSON schema of \"type\": \"object\" (the arguments are a JSON object), "
                          f"got \"type\": {params.get('type')!r}")
    schema = _deref({k: v for k, v in params.items() if k not in ("$defs", "definitions")}, params, where)
    props = schema.get("properties", {})
    if not isinstance(props, dict) or not all(isinstance(v, dict) for v in props.values()):
        raise _bad(f"{where}.properties", f"expected an object of argument schemas (objects), got {_show(props)}")
    required = schema.get("required", [])
    if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        raise _bad(f"{where}.required", f"expected a list of argument names, got {_show(required)}")
    missing = [r for r in required if r not in props]
    if missing:
        raise _bad(f"{where}.required", f"{missing} not among the properties {sorted(props)}")
    out = {**schema, "properties": props, "required": required}
    validator = require("jsonschema").validators.validator_for(out)
    try:
        validator.check_schema(out)
    except require("jsonschema").SchemaError as exc:  # a keyword with a value no validator can apply
        at = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in exc.path)
        raise _bad(f"{where}{at}", f"not a valid JSON schema ({exc.message}); expected a schema every generated call "
                                   "can be validated against") from None
    return out


def schema_violation(args: Any, schema: dict[str, Any]) -> str | None:
    """Why ``args`` break the tool's JSON ``schema`` (every keyword: ``maximum``, ``multipleOf``,
    ``uniqueItems``, ``pattern``, ...), naming the keyword and where; ``None`` when they conform.
    The grammar that constrains generation enforces the structure, not every value keyword."""
    js = require("jsonschema")
    validator = js.validators.validator_for(schema)(schema)
    err = js.exceptions.best_match(validator.iter_errors(args))
    if err is None:
        return None
    return f"{err.json_path}: {err.message} (keyword {err.validator!r})"


def check_tools(tools: Any) -> list[dict[str, Any]]:
    """OpenAI ``tools`` as specs ``{"name", "description", "parameters"}`` (local ``$ref`` s resolved).

    Raises:
        APIError: 400 naming the first malformed field (``tools[i].function.name`` ...).
    """
    if not isinstance(tools, list) or not tools:
        raise _bad("tools", "expected a non-empty list of {\"type\": \"function\", \"function\": {\"name\": ..., "
                            f"\"parameters\": {{...}}}}}} objects, got {_show(tools)}")
    specs = []
    for i, tool in enumerate(tools):
        where = f"tools[{i}]"
        if not isinstance(tool, dict):
            raise _bad(where, f"expected an object {{\"type\": \"function\", \"function\": {{...}}}}, got {_show(tool)}")
        if tool.get("type") != "function":
            raise _bad(f"{where}.type", f"expected 'function' (the only tool type served), got {tool.get('type')!r}")
        fn = tool.get("function")
        if not isinstance(fn, dict):
            raise _bad(f"{where}.function", f"expected an object with a name and parameters, got {_show(fn)}")
        name = fn.get("name")
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise _bad(f"{where}.function.name", f"expected a name of 1-64 letters, digits, '_' or '-', got {_show(name)}")
        description = fn.get("description") or ""
        if not isinstance(description, str):
            raise _bad(f"{where}.function.description", f"expected a string, got {_show(description)}")
        params = fn.get("parameters")
        params = {"type": "object", "properties": {}} if params is None else params
        specs.append({"name": name, "description": description,
                      "parameters": _object_schema(f"{where}.function.parameters", params)})
    names = [s["name"] for s in specs]
    if len(set(names)) != len(names):
        raise _bad("tools", f"expected distinct function names, got {names}")
    return specs


def check_tool_choice(choice: Any, specs: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """``("none" | "auto" | "required", the tools that may be called)`` for OpenAI's ``tool_choice``."""
    names = [s["name"] for s in specs]
    if choice is None or choice == "auto":
        return "auto", specs
    if choice == "none":
        return "none", []
    if choice == "required":
        return "required", specs
    if isinstance(choice, dict) and choice.get("type") == "function":
        fn = choice.get("function")
        name = fn.get("name") if isinstance(fn, dict) else None
        if name not in names:
            raise _bad("tool_choice", f"names the function {name!r}, expected one of the tools {names}")
        return "required", [s for s in specs if s["name"] == name]
    raise _bad("tool_choice", "expected 'none', 'auto', 'required' or {\"type\": \"function\", \"function\": "
                              f"{{\"name\": <one of {names}>}}}}, got {_show(choice)}")


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return str(content)


def rewrite_messages(messages: Any) -> Any:
    """Earlier tool turns as text the model reads: an assistant's ``tool_calls`` as
    ``{"tool": ..., "args": ...}`` lines, ``tool`` messages as one user message of results."""
    if not isinstance(messages, list):
        return messages  # llama.cpp names the error
    out: list[Any] = []
    names: dict[Any, str] = {}
    results: dict[str, Any] | None = None  # the user message collecting consecutive tool results
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            out.append(m)
            results = None
            continue
        role, calls = m.get("role"), m.get("tool_calls")
        if role == "assistant" and calls:
            if not isinstance(calls, list):
                raise _bad(f"messages[{i}].tool_calls", f"expected a list of tool calls, got {_show(calls)}")
            lines = [_text(m.get("content"))] if _text(m.get("content")).strip() else []
            for j, call in enumerate(calls):
                fn = call.get("function") if isinstance(call, dict) else None
                where = f"messages[{i}].tool_calls[{j}].function"
                if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
                    raise _bad(where, f"expected {{\"name\": ..., \"arguments\": \"<JSON>\"}}, got {_show(fn)}")
                raw = fn.get("arguments")
                try:
                    args = json.loads(raw) if isinstance(raw, str) else raw
                except json.JSONDecodeError:
                    args = None
                if not isinstance(args, dict):
                    raise _bad(f"{where}.arguments", f"expected a JSON object as a string, got {_show(raw)}")
                names[call.get("id")] = fn["name"]
                lines.append(json.dumps({"tool": fn["name"], "args": args}))
            out.append({**{k: v for k, v in m.items() if k != "tool_calls"}, "content": "\n".join(lines)})
            results = None
        elif role in ("tool", "function"):
            name = names.get(m.get("tool_call_id")) or m.get("name") or "the tool"
            line = f"Result of {name}: {_text(m.get('content'))}"
            if results is None:
                results = {"role": "user", "content": line}
                out.append(results)
            else:
                results["content"] += "\n" + line
        else:
            out.append(m)
            results = None
    return out


def _with_system(messages: Any, text: str) -> list[Any]:
    msgs = list(messages) if isinstance(messages, list) else []
    first = msgs[0] if msgs else None
    if isinstance(first, dict) and first.get("role") in ("system", "developer"):
        content = first.get("content")
        if isinstance(content, list):
            msgs[0] = {**first, "content": [*content, {"type": "text", "text": "\n\n" + text}]}
        else:
            msgs[0] = {**first, "content": f"{_text(content)}\n\n{text}"}
        return msgs
    return [{"role": "system", "content": text}, *msgs]


# --------------------------------------------------------------------------- one chat request
def _call_id() -> str:
    return "call_" + uuid.uuid4().hex[:24]


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def _partial_answer(text: str) -> str | None:
    """The text of ``{"answer": "...`` cut before its end, or ``None``."""
    m = _ANSWER_START.match(text)
    if m is None:
        return None
    rest = text[m.end():]
    for cut in range(len(rest), max(len(rest) - 7, -1), -1):  # an escape (\\uXXXX) may be cut too
        try:
            return str(json.loads('"' + rest[:cut] + '"'))
        except json.JSONDecodeError:
            continue
    return None


@dataclass
class ChatPlan:
    """What llama.cpp is sent for one chat request (:attr:`request`) and how its reply is returned.

    ``tool_mode``: ``None`` (no tools, or ``tool_choice="none"``: the reply is llama.cpp's),
    ``"auto"`` (a call or text) or ``"required"`` (a call of one of :attr:`specs`)."""

    request: dict[str, Any]
    tool_mode: str | None = None
    specs: dict[str, dict[str, Any]] = field(default_factory=dict)
    stream: bool = False
    include_usage: bool = False
    original: dict[str, Any] = field(default_factory=dict)

    @property
    def calls_tools(self) -> bool:
        """The reply is rewritten here (tool calls); with ``stream`` it is generated, then streamed."""
        return self.tool_mode is not None

    def reply(self, response: dict[str, Any]) -> dict[str, Any]:
        """llama.cpp's reply to :attr:`request` as OpenAI's: ``message.tool_calls`` or text.

        Raises:
            APIError: a call cut at ``max_tokens`` or by a stop sequence (400), or a reply that is
                no valid call (500: the constraint failed).
        """
        if not self.calls_tools:
            return response
        choices = response.get("choices")
        if not isinstance(choices, list):
            raise APIError(502, f"server: llama.cpp's reply has no choices: {json.dumps(response)[:300]}")
        out = []
        for ch in choices:
            msg = ch.get("message") or {}
            text = _text(msg.get("content"))
            finish = ch.get("finish_reason")
            name, payload, reason = parse_reply(text, self.specs, {}, allow_answer=self.tool_mode == "auto")
            if reason is not None:
                partial = _partial_answer(text) if self.tool_mode == "auto" and finish == "length" else None
                if partial is None:
                    raise self._unusable(text, finish, reason)
                name, payload = None, partial
            message: dict[str, Any] = {"role": "assistant"}
            if name is None:
                message["content"] = payload
            else:
                why = check_call(name, payload, self.specs, {})
                if why is not None:  # parse_reply checked it already; kept so a change there cannot pass one through
                    raise APIError(500, f"server: the constrained reply is not a valid call ({why}): {text!r:.300}")
                why = schema_violation(payload, self.specs[name]["parameters"])
                if why is not None:  # a value the grammar could not enforce: never answered as a valid call
                    raise APIError(500, f"server: the generated call of {name!r} breaks its tool's schema at {why}; the "
                                        f"grammar does not enforce that keyword, so the call is not returned: "
                                        f"{text!r:.300}", code="tool_call_schema_violation")
                message.update(content=None, tool_calls=[{"id": _call_id(), "type": "function", "function": {
                    "name": name, "arguments": json.dumps(payload, ensure_ascii=False)}}])
                finish = "tool_calls"
            out.append({**ch, "message": message, "finish_reason": finish})
        return {**response, "choices": out}

    def _unusable(self, text: str, finish: Any, reason: str) -> APIError:
        if finish == "length":
            limit = self.original.get("max_completion_tokens", self.original.get("max_tokens"))
            return APIError(400, f"max_tokens: the reply was cut at max_tokens={limit} before its tool call was "
                                 f"complete ({text!r:.200}); expected a limit that fits one call (raise max_tokens)",
                            param="max_tokens", code="tool_call_incomplete")
        if self.original.get("stop") and not _is_json(text):
            return APIError(400, f"stop: the stop sequences {self.original['stop']!r} cut the tool call "
                                 f"({text!r:.200}); expected stop sequences that cannot occur in a JSON call, or none",
                            param="stop", code="tool_call_incomplete")
        return APIError(500, f"server: the schema-constrained reply is no valid tool call ({reason}): {text!r:.300}")

    def stream_chunks(self, reply: dict[str, Any]) -> list[dict[str, Any]]:
        """A finished :meth:`reply` as OpenAI's ``chat.completion.chunk`` sequence (``data: [DONE]`` not included)."""
        base: dict[str, Any] = {k: reply[k] for k in ("id", "created", "model", "system_fingerprint") if k in reply}
        base["object"] = "chat.completion.chunk"
        extra: dict[str, Any] = {"usage": None} if self.include_usage else {}
        chunks = []
        for ch in reply["choices"]:
            msg, index = ch["message"], ch.get("index", 0)
            calls = msg.get("tool_calls") or []
            if calls:
                first: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": [
                    {"index": j, "id": c["id"], "type": "function", "function": {"name": c["function"]["name"],
                                                                                 "arguments": ""}}
                    for j, c in enumerate(calls)]}
                second: dict[str, Any] = {"tool_calls": [{"index": j, "function": {"arguments": c["function"]["arguments"]}}
                                                         for j, c in enumerate(calls)]}
            else:
                first, second = {"role": "assistant", "content": ""}, {"content": msg.get("content") or ""}
            for delta, logprobs in ((first, None), (second, ch.get("logprobs"))):
                chunks.append({**base, "choices": [{"index": index, "delta": delta, "logprobs": logprobs,
                                                   "finish_reason": None}], **extra})
            chunks.append({**base, "choices": [{"index": index, "delta": {}, "logprobs": None,
                                                "finish_reason": ch.get("finish_reason")}], **extra})
        if self.include_usage:
            chunks.append({**base, "choices": [], "usage": reply.get("usage")})
        return chunks


def plan_chat(body: dict[str, Any]) -> ChatPlan:
    """The llama.cpp request for an OpenAI chat request, and how to return its reply (module doc).

    Raises:
        APIError: 400 for malformed ``tools`` / ``tool_choice``, the deprecated ``functions``,
            or ``tools`` with another output constraint (``response_format``).
    """
    for key in ("functions", "function_call"):
        if body.get(key) is not None:
            raise _bad(key, f"the deprecated {key!r} is not served: expected tools=[{{\"type\": \"function\", "
                            "\"function\": {...}}] and tool_choice", code="unsupported_parameter")
    request = {k: v for k, v in body.items() if k not in _TOOL_KEYS}
    if "messages" in body:
        request["messages"] = rewrite_messages(body["messages"])
    tools, choice = body.get("tools"), body.get("tool_choice")
    if tools is None:
        if choice not in (None, "none", "auto"):
            raise _bad("tool_choice", f"got {_show(choice)} without tools: expected tools=[...] with it, or no tool_choice")
        return ChatPlan(request, original=body)
    specs = check_tools(tools)
    mode, allowed = check_tool_choice(choice, specs)
    if mode == "none":
        return ChatPlan(request, original=body)
    rf = body.get("response_format")
    for key in _CONSTRAINTS:
        value = body.get(key)
        if value is not None and not (key == "response_format" and isinstance(rf, dict) and rf.get("type") == "text"):
            raise _bad(key, f"cannot be combined with tools (tool_choice {choice or 'auto'!r}): the tool call "
                            f"is itself a constraint on the output; got {key}={_show(value)}; expected tools or "
                            f"{key}, or tool_choice='none'", code="unsupported_parameter")
    allow_answer = mode == "auto"
    schema = tool_call_schema(allowed, allow_answer=allow_answer)
    instructions = INSTRUCTIONS.format(tools=describe_tools(allowed, {}), answer=ANSWER_CLAUSE if allow_answer else "")
    request["messages"] = _with_system(request.get("messages"), instructions)
    request["response_format"] = {"type": "json_schema", "json_schema": {"name": "tool_call", "schema": schema,
                                                                         "strict": True}}
    stream = bool(body.get("stream"))
    options = body.get("stream_options")
    include_usage = bool(stream and isinstance(options, dict) and options.get("include_usage"))
    request.pop("stream", None)
    request.pop("stream_options", None)
    return ChatPlan(request, mode, {s["name"]: s for s in allowed}, stream, include_usage, body)


# --------------------------------------------------------------------------- the HTTP front
class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # many clients connecting at once wait in the backlog, not in SYN retries
    front: "OpenAIFront"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.front.verbose:
            super().log_message(format, *args)

    def _body(self) -> bytes:
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            data = b""
            while True:
                size = int(self.rfile.readline().split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return data
                data += self.rfile.read(size)
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _send_json(self, status: int, obj: Any) -> None:
        self._send(status, json.dumps(obj, ensure_ascii=False).encode())

    def _upstream(self, body: bytes | None, path: str | None = None, method: str | None = None
                  ) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        front = self.server.front
        conn = http.client.HTTPConnection(front.host, front.backend_port, timeout=front.timeout)
        # no Accept-Encoding: the replies rewritten here are read as plain JSON
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP and k.lower() != "accept-encoding"}
        if body is not None:
            headers["Content-Length"] = str(len(body))
        try:
            conn.request(method or self.command, path or self.path, body=body, headers=headers)
            return conn, conn.getresponse()
        except OSError as exc:
            conn.close()
            raise APIError(502, f"server: llama.cpp at {front.host}:{front.backend_port} did not answer ({exc})") from None

    def _handle(self) -> None:
        try:
            self._dispatch()
        except APIError as exc:
            self._send_json(exc.status, exc.body())
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as exc:  # an answer, never a dropped connection
            self._send_json(500, APIError(500, f"server: {type(exc).__name__}: {exc}").body())

    def _dispatch(self) -> None:
        front = self.server.front
        body = self._body()
        path = urlsplit(self.path).path
        m = _MODEL_PATH.fullmatch(path)
        if self.command == "GET" and m is not None:
            return self._model(m.group(1))
        data: Any = None
        if self.command == "POST" and body:
            try:
                data = json.loads(body)
            except ValueError:
                data = None  # llama.cpp names the JSON error
        plan = None
        if isinstance(data, dict):
            check_model(data, front.served)
            if path in CHAT_PATHS:
                plan = plan_chat(data)
                body = json.dumps(plan.request).encode()
            else:
                for key in ("tools", "functions"):
                    if data.get(key) is not None:
                        raise _bad(key, f"tool calls are served on /v1/chat/completions only; {path} would "
                                        f"ignore them: expected the request at /v1/chat/completions",
                                   code="unsupported_parameter")
        if plan is not None and plan.calls_tools:
            conn, resp = self._upstream(body)
            try:
                raw = resp.read()
            finally:
                conn.close()
            if resp.status != 200:
                return self._send(resp.status, raw, resp.getheader("Content-Type") or "application/json")
            reply = plan.reply(json.loads(raw))
            if not plan.stream:
                return self._send_json(200, reply)
            sse = "".join(f"data: {json.dumps(c, ensure_ascii=False)}\n\n" for c in plan.stream_chunks(reply))
            return self._send(200, (sse + "data: [DONE]\n\n").encode(), "text/event-stream")
        self._proxy(body if body or self.command in ("POST", "PUT", "PATCH") else None)

    def _model(self, name: str) -> None:
        if name not in self.server.front.served:
            raise APIError(404, f"The model {name!r} does not exist: this server serves {self.server.front.served}",
                           param="model", code="model_not_found")
        conn, resp = self._upstream(None, path="/v1/models", method="GET")
        try:
            listing = json.loads(resp.read())
        finally:
            conn.close()
        entry = next((e for e in listing.get("data", []) if e.get("id") == name), {"id": name, "object": "model"})
        self._send_json(200, entry)

    def _proxy(self, body: bytes | None) -> None:
        conn, resp = self._upstream(body)
        try:
            self.send_response(resp.status, resp.reason)
            for k, v in resp.getheaders():
                if k.lower() not in _HOP:
                    self.send_header(k, v)
            if resp.length is not None or self.command == "HEAD":
                data = resp.read()
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)
                return
            self.send_header("Transfer-Encoding", "chunked")  # a stream: relayed as it comes
            self.end_headers()
            while True:
                chunk = resp.read1(65536)
                if not chunk:
                    break
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):  # the client left: closing upstream stops generation
            self.close_connection = True
        finally:
            conn.close()

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_HEAD = _handle


class OpenAIFront:
    """An HTTP server on ``host:port`` (``0``: a free port) that forwards to llama.cpp's server at
    ``backend_port`` and adds tool calls, model-name checks and OpenAI errors (module doc).

    The port is bound at construction (``OSError`` when it is in use); :meth:`start` serves it in
    a thread once llama.cpp listens; :meth:`stop` closes it.
    """

    def __init__(self, host: str, port: int, served: Sequence[str], *, verbose: bool = False,
                 timeout: float | None = None):
        self.host = host
        self.served = list(served)
        self.verbose = verbose
        self.timeout = timeout
        self.backend_port: int | None = None
        self._httpd = _HTTPServer((host, port), _Handler)  # SO_REUSEADDR: a port with a listener is still refused
        self._httpd.front = self
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    def start(self, backend_port: int) -> None:
        self.backend_port = backend_port
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.2},
                                        name=f"prm-critic-openai-front:{self.port}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join()
            self._thread = None
        self._httpd.server_close()

