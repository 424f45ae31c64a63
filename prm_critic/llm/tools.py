"""Tool calls from any chat model, including small local ones that cannot emit real tool calls.

Small instruct models served by llama.cpp write a tool call, if at all, as bare JSON in the reply
text, so ``ChatOpenAI(...).bind_tools(tools)`` returns no ``tool_calls``. :class:`ToolCallChatModel`
wraps a chat model and always returns an ``AIMessage`` whose ``tool_calls`` LangGraph's
``ToolNode``, :class:`~prm_critic.langgraph.StepCriticNode` and ``create_agent`` use as usual
(``prm-critic serve-llm`` itself answers ``tools`` with constrained calls,
:mod:`prm_critic.llm.openai_api`; other servers may not):

* ``mode="json_schema"``: one call with an OpenAI ``response_format`` JSON schema (llama.cpp turns it
  into a grammar; vLLM, Ollama and OpenAI accept it too) that only admits::

      {"tool": <one of the tool names>, "args": <that tool's argument schema>}
      {"answer": "<text>"}                  (unless tool_choice requires a call)

  String arguments can be restricted to a list per call (``arg_choices``, e.g. the admissible
  commands of a text game: ``model.bind(arg_choices={"act": {"command": admissible}})``), so the
  model can only pick one of them. The tools are described in a system message.
* ``mode="native"``: ``llm.bind_tools(tools)``; real ``tool_calls`` are used as they are; a reply
  without them is parsed as bare JSON (:func:`parse_tool_call`: ``{"tool", "args"}``,
  ``{"name", "arguments"}`` / ``{"name", "parameters"}``, ``{"function": {...}}``, in a code fence or
  not); other text is the model's answer.
* ``mode="auto"`` (default): ``native`` first; when the reply has neither real tool calls nor a
  parseable call, one ``json_schema`` call decides (so a model that answers in text costs two calls).

Every parsed call is checked: a known tool name, an object of arguments with the required keys,
values among ``arg_choices``. A reply that fails (or, with ``tool_choice="required"``, holds no
call) is retried at most ``max_attempts - 1`` times with a note saying what was wrong; then
:class:`ToolCallError` is raised, naming the last reply. Nothing is dropped silently.
"""

from __future__ import annotations

import itertools
import uuid
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from prm_critic import validate
from prm_critic._optional import require
from prm_critic.llm.toolschema import ANSWER_CLAUSE, INSTRUCTIONS, RETRY_NOTE, describe_tools, tool_call_schema
from prm_critic.llm.toolschema import args_schema as _args_schema
from prm_critic.llm.toolschema import check_call as _check_call
from prm_critic.llm.toolschema import parse_reply as _parse

if TYPE_CHECKING:
    from langchain_core.language_models.chat_models import BaseChatModel
else:  # through require(), so a missing package names the extra to install
    BaseChatModel = require("langchain_core.language_models.chat_models", "llm").BaseChatModel
_msgs = require("langchain_core.messages", "llm")
_outputs = require("langchain_core.outputs", "llm")
_fn = require("langchain_core.utils.function_calling", "llm")
_pyd = require("pydantic", "llm")

__all__ = ["ToolCallChatModel", "ToolCallError", "parse_tool_call", "tool_call_schema", "MODES"]

MODES = ("auto", "native", "json_schema")
_REQUIRED = ("required", "any")
_DROPPED_BIND_KWARGS = ("strict", "parallel_tool_calls")  # one call per reply; arguments are checked here

class ToolCallError(ValueError):
    """A chat model's reply held no usable tool call after every allowed attempt."""


# --------------------------------------------------------------------------- schemas and parsing
def _tool_spec(tool: Any) -> dict[str, Any]:
    """``{"name", "description", "parameters"}`` of a LangChain tool, a function, a pydantic model or a dict."""
    fn = _fn.convert_to_openai_tool(tool)["function"]
    params = dict(fn.get("parameters") or {"type": "object", "properties": {}})
    params.setdefault("type", "object")
    params.setdefault("properties", {})
    return {"name": fn["name"], "description": fn.get("description", ""), "parameters": params}


def parse_tool_call(text: str, tools: Sequence[Any], *,
                    arg_choices: Mapping[str, Mapping[str, Sequence[str]]] | None = None) -> tuple[str, dict]:
    """``(name, args)`` of the tool call written as bare JSON in ``text``.

    ``tools``: LangChain tools (or anything ``bind_tools`` takes). Accepts ``{"tool", "args"}``,
    ``{"name", "arguments"|"parameters"}``, ``{"function": {...}}``, ``{"tool_call": {...}}`` (with
    arguments as an object or a JSON string), alone, in a code fence, or inside other text; the first
    valid call wins.

    Raises:
        ToolCallError: no JSON call in ``text``, or none that passes the checks (the reason is named).
    """
    specs = {s["name"]: s for s in (_tool_spec(t) for t in tools)}
    name, args, reason = _parse(text, specs, dict(arg_choices or {}))
    if reason is not None:
        raise ToolCallError(f"reply: {reason}; reply was {text!r:.300}")
    return name, args  # type: ignore[return-value]


def _call_id() -> str:
    return "call_" + uuid.uuid4().hex[:16]


# --------------------------------------------------------------------------- the chat model
class ToolCallChatModel(BaseChatModel):
    """A chat model whose replies carry real ``tool_calls``, from any wrapped chat model (module doc).

    Args:
        llm: the chat model to call (e.g. ``ChatOpenAI(base_url=server.base_url, api_key="none")``).
        mode: ``"auto"``, ``"native"`` or ``"json_schema"`` (module doc).
        max_attempts: model calls allowed per reply in the retry loop, ``>= 1`` (``"auto"`` adds the
            one native call before it).
        instructions: format string (fields ``tools``, ``answer``) of the system message that
            describes the tools in ``json_schema`` mode.
        seed: ``None`` (the server's choice), or the first of the seeds ``seed, seed + 1, ...`` sent
            with successive model calls: with ``temperature > 0`` best-of-N candidates differ, and a
            rerun with the same seed repeats them (where the server honours ``seed``, as llama.cpp
            and vLLM do). The seed of a reply is in ``response_metadata["seed"]``.

    Use it like any tool-calling chat model: ``ToolCallChatModel(llm=...).bind_tools(tools,
    tool_choice=None | "auto" | "required" | "any" | "none" | <tool name>)`` (``"none"``: the model's
    plain answer, one call). In ``json_schema`` mode give the wrapped model a ``max_tokens`` that fits
    one call: a reply cut at the limit is malformed (OpenAI clients may raise on it). Per-call settings go through
    ``.bind(...)`` or ``invoke(..., arg_choices={tool: {arg: [values]}})``. The reply's
    ``response_metadata["tool_call_path"]`` says how the call was obtained: ``"native"``,
    ``"parsed"`` (bare JSON), ``"json_schema"``, or ``"answer"``; ``["attempts"]`` counts model calls.
    """

    llm: Any
    mode: str = "auto"
    max_attempts: int = 3
    instructions: str = INSTRUCTIONS
    seed: Any = None
    tool_specs: list = _pyd.Field(default_factory=list)
    tool_choice: Any = None
    bound_tools: list = _pyd.Field(default_factory=list)
    # shared by the copies bind_tools makes, so successive calls get successive seeds
    _seeds: Any = _pyd.PrivateAttr(default_factory=lambda: itertools.count(0))

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        if not (hasattr(self.llm, "invoke") and hasattr(self.llm, "ainvoke")):
            raise validate.ArgumentError(f"llm: expected a LangChain chat model (with invoke/ainvoke), got "
                                         f"{type(self.llm).__name__} {self.llm!r:.80}")
        validate.check_choice("mode", self.mode, MODES)
        validate.positive_int("max_attempts", self.max_attempts)
        validate.check_str("instructions", self.instructions)
        if self.seed is not None:
            validate.check_seed("seed", self.seed)

    @property
    def _llm_type(self) -> str:
        return "prm-critic-tool-call"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"mode": self.mode, "llm": getattr(self.llm, "_llm_type", type(self.llm).__name__)}

    def bind_tools(self, tools: Sequence[Any], *, tool_choice: Any = None, **kwargs: Any) -> Any:
        """A copy that calls ``tools``. ``tool_choice``: ``None``/``"auto"`` (a call or an answer),
        ``"required"``/``"any"`` (a call), or a tool name (that tool)."""
        specs = [_tool_spec(t) for t in tools]
        names = [s["name"] for s in specs]
        if len(set(names)) != len(names):
            raise validate.ArgumentError(f"tools: expected distinct tool names, got {names}")
        if tool_choice is not None and tool_choice not in ("auto", "none", *_REQUIRED) and tool_choice not in names:
            if isinstance(tool_choice, dict):  # OpenAI form {"type": "function", "function": {"name": ...}}
                tool_choice = (tool_choice.get("function") or {}).get("name", tool_choice)
            if tool_choice not in names:
                raise validate.ArgumentError(f"tool_choice: expected None, 'auto', 'required', 'any' or one of "
                                             f"{names}, got {tool_choice!r}")
        model = self.model_copy(update={"tool_specs": specs, "tool_choice": tool_choice, "bound_tools": list(tools)})
        extra = {k: v for k, v in kwargs.items() if k not in _DROPPED_BIND_KWARGS}
        return model.bind(**extra) if extra else model

    # ------------------------------------------------------------------ the plan
    def _settings(self, kwargs: dict[str, Any]) -> tuple[list[dict], bool, dict, dict]:
        arg_choices = kwargs.pop("arg_choices", None) or {}
        if not isinstance(arg_choices, Mapping):
            raise validate.ArgumentError(f"arg_choices: expected {{tool: {{arg: [values]}}}}, got {arg_choices!r:.100}")
        specs = list(self.tool_specs)
        if not specs:
            raise validate.ArgumentError("tools: none bound; call bind_tools(tools) first")
        names = {s["name"] for s in specs}
        for tool, per_arg in arg_choices.items():
            if tool not in names:
                raise validate.ArgumentError(f"arg_choices: unknown tool {tool!r} (expected one of {sorted(names)})")
            for arg, values in per_arg.items():
                if isinstance(values, str) or not values or not all(isinstance(v, str) for v in values):
                    raise validate.ArgumentError(f"arg_choices[{tool!r}][{arg!r}]: expected a non-empty list of "
                                                 f"strings, got {values!r:.100}")
        choice = self.tool_choice
        if choice not in (None, "auto", "none", *_REQUIRED):
            specs = [s for s in specs if s["name"] == choice]
        allow_answer = choice in (None, "auto", "none")
        return specs, allow_answer, dict(arg_choices), kwargs

    def _instructions(self, specs: list[dict], allow_answer: bool, arg_choices: Mapping) -> str:
        return self.instructions.format(tools=describe_tools(specs, arg_choices),
                                        answer=ANSWER_CLAUSE if allow_answer else "")

    def _message(self, name: str | None, payload: Any, path: str, attempts: int, raw: Any = None,
                 reply: Any = None) -> Any:
        meta: dict[str, Any] = {"tool_call_path": path, "attempts": attempts}
        if reply is not None and "seed" in (getattr(reply, "response_metadata", None) or {}):
            meta["seed"] = reply.response_metadata["seed"]
        if raw is not None:
            meta["raw_content"] = raw
        if name is None:
            return _msgs.AIMessage(content=str(payload), response_metadata=meta)
        return _msgs.AIMessage(content="", response_metadata=meta,
                               tool_calls=[{"name": name, "args": dict(payload), "id": _call_id(), "type": "tool_call"}])

    def _from_native(self, resp: Any, specs_by_name: dict, arg_choices: dict, allow_answer: bool,
                     attempts: int) -> tuple[Any, str | None]:
        """(message, None) when ``resp`` is usable as is / parsed, else (None, reason).

        Plain text is an answer only in ``native`` mode (``auto`` asks again with the schema)."""
        calls = list(getattr(resp, "tool_calls", None) or [])
        if calls:
            bad = [why for c in calls if (why := _check_call(c.get("name"), c.get("args"), specs_by_name, arg_choices))]
            if not bad:
                meta = dict(getattr(resp, "response_metadata", {}) or {})
                meta.update(tool_call_path="native", attempts=attempts)
                return resp.model_copy(update={"response_metadata": meta}), None
            return None, bad[0]
        text = _content(resp)
        name, args, reason = _parse(text, specs_by_name, arg_choices)
        if reason is None:
            return self._message(name, args, "parsed", attempts, raw=text, reply=resp), None
        if allow_answer and self.mode == "native" and not _looks_like_json(text):
            meta = dict(getattr(resp, "response_metadata", {}) or {})
            meta.update(tool_call_path="answer", attempts=attempts)
            return resp.model_copy(update={"response_metadata": meta}), None
        return None, reason if _looks_like_json(text) else "the reply holds no tool call"

    def _plan(self, messages: list, kwargs: dict[str, Any]):
        """A generator of (kind, messages, call kwargs) requests; receives replies; returns the message."""
        specs, allow_answer, arg_choices, call_kwargs = self._settings(dict(kwargs))
        if self.tool_choice == "none":  # no tool call wanted: the model's plain answer
            resp = yield "plain", list(messages), None, call_kwargs
            meta = {**(getattr(resp, "response_metadata", None) or {}), "tool_call_path": "answer", "attempts": 1}
            return _msgs.AIMessage(content=_content(resp), response_metadata=meta)
        by_name = {s["name"]: s for s in specs}
        attempts = 0
        answer = ANSWER_CLAUSE if allow_answer else ""
        if self.mode in ("auto", "native"):
            conv = list(messages)
            native_tools = [{"type": "function", "function": {"name": s["name"], "description": s["description"],
                                                              "parameters": _args_schema(s, arg_choices.get(s["name"]))}}
                            for s in specs]
            n_native = 1 if self.mode == "auto" else self.max_attempts
            reason: str | None = ""  # a str whenever no usable message came back
            for _ in range(n_native):
                resp = yield "native", conv, native_tools, call_kwargs
                attempts += 1
                msg, reason = self._from_native(resp, by_name, arg_choices, allow_answer, attempts)
                if msg is not None:
                    return msg
                conv = conv + [_msgs.AIMessage(content=_content(resp)),
                               _msgs.HumanMessage(content=RETRY_NOTE.format(reason=reason, answer=answer))]
            if self.mode == "native":
                raise ToolCallError(f"reply: no usable tool call after {attempts} attempts ({reason}); last reply "
                                    f"{_content(resp)!r:.300}")
        schema = tool_call_schema(specs, allow_answer=allow_answer, arg_choices=arg_choices)
        rf = {"type": "json_schema", "json_schema": {"name": "tool_call", "schema": schema, "strict": True}}
        system = _msgs.SystemMessage(content=self._instructions(specs, allow_answer, arg_choices))
        conv = _with_system(messages, system)
        text, reason = "", ""
        for _ in range(self.max_attempts):
            resp = yield "json_schema", conv, rf, call_kwargs
            attempts += 1
            text = _content(resp)
            name, payload, reason = _parse(text, by_name, arg_choices, allow_answer=allow_answer)
            if reason is None:
                return self._message(name, payload, "answer" if name is None else "json_schema", attempts, raw=text,
                                     reply=resp)
            conv = conv + [_msgs.AIMessage(content=text),
                           _msgs.HumanMessage(content=RETRY_NOTE.format(reason=reason, answer=answer))]
        raise ToolCallError(f"reply: no usable tool call after {attempts} attempts ({reason}); last reply {text!r:.300}")

    def _request(self, kind: str, conv: list, extra: Any, call_kwargs: dict, stop: Any) -> tuple[Any, list, dict]:
        if self.seed is not None and "seed" not in call_kwargs:
            call_kwargs = {**call_kwargs, "seed": int(self.seed) + next(self._seeds)}
        if kind == "native":
            bound = self.llm.bind_tools(extra, **({} if self.tool_choice is None else
                                                  {"tool_choice": _native_choice(self.tool_choice)}))
            return bound, conv, {**call_kwargs, **({"stop": stop} if stop else {})}
        if kind == "plain":
            return self.llm, conv, {**call_kwargs, **({"stop": stop} if stop else {})}
        return self.llm, conv, {**call_kwargs, "response_format": extra, **({"stop": stop} if stop else {})}

    def _generate(self, messages: list, stop: Any = None, run_manager: Any = None, **kwargs: Any) -> Any:
        plan = self._plan(messages, kwargs)
        reply = None
        try:
            while True:
                kind, conv, extra, call_kwargs = plan.send(reply)
                runnable, conv, kw = self._request(kind, conv, extra, call_kwargs, stop)
                reply = _with_seed(runnable.invoke(conv, **kw), kw)
        except StopIteration as done:
            return _outputs.ChatResult(generations=[_outputs.ChatGeneration(message=done.value)])

    async def _agenerate(self, messages: list, stop: Any = None, run_manager: Any = None, **kwargs: Any) -> Any:
        plan = self._plan(messages, kwargs)
        reply = None
        try:
            while True:
                kind, conv, extra, call_kwargs = plan.send(reply)
                runnable, conv, kw = self._request(kind, conv, extra, call_kwargs, stop)
                reply = _with_seed(await runnable.ainvoke(conv, **kw), kw)
        except StopIteration as done:
            return _outputs.ChatResult(generations=[_outputs.ChatGeneration(message=done.value)])


def _with_seed(reply: Any, kw: dict) -> Any:
    if "seed" in kw and hasattr(reply, "response_metadata"):
        reply.response_metadata = {**(reply.response_metadata or {}), "seed": kw["seed"]}
    return reply


def _native_choice(choice: Any) -> Any:
    if choice in ("auto", "none", "required", "any"):
        return choice
    return {"type": "function", "function": {"name": choice}}


def _content(msg: Any) -> str:
    content = getattr(msg, "content", msg)
    if isinstance(content, list):
        return "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return str(content)


def _looks_like_json(text: str) -> bool:
    return "{" in text and "}" in text


def _with_system(messages: list, system: Any) -> list:
    """``messages`` with ``system``'s text added to the first system message (or prepended)."""
    out = list(messages)
    if out and getattr(out[0], "type", None) == "system":
        out[0] = _msgs.SystemMessage(content=f"{_content(out[0])}\n\n{system.content}")
        return out
    return [system] + out

