"""The text step: what a text critic scores.

A tool-using agent's trajectory is a ``prompt`` (task / objective) followed by steps; each step is
one tool call plus its result, rendered to text by :func:`format_tool_step`. A :class:`TextStep`
is one step *in context*: the prompt, the previous steps, and the step itself. Text critics take a
batch (sequence) of ``B`` TextSteps and return :class:`~prm_critic.critic.StepScores` of shape
``(B,)``.

Text that is not valid Unicode -- a tool output decoded with ``surrogateescape`` (what Python's
``os`` functions and many subprocess wrappers return for bytes that are not UTF-8) holds lone
surrogates that tokenizers, JSON writers and HTTP clients refuse -- is sanitised once, when the
step is built: each lone surrogate becomes U+FFFD, counted in ``extra["non_utf8_replaced"]``
(:func:`clean_text`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

__all__ = ["TextStep", "format_tool_call", "format_tool_step", "message_text", "clean_text", "NON_UTF8_KEY"]

#: ``extra`` key counting the characters :func:`clean_text` replaced in a step
NON_UTF8_KEY = "non_utf8_replaced"
_SURROGATE = re.compile("[\ud800-\udfff]")


def clean_text(text: str) -> tuple[str, int]:
    """``text`` with each lone surrogate replaced by U+FFFD, and how many were replaced.

    A str decoded with ``errors="surrogateescape"`` holds one lone surrogate per byte that was not
    UTF-8; such a str cannot be encoded as UTF-8 (tokenizers, JSON files and HTTP requests fail on
    it). Valid text is returned unchanged with ``0``.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE.subn("\ufffd", text)
    return text, 0


@dataclass(frozen=True)
class TextStep:
    """One step of a text trajectory, in context.

    Attributes:
        prompt: the task / objective the agent was given.
        history: the previous steps' texts, oldest first.
        step: this step's text.
        extra: notes on the step (not compared): ``"non_utf8_replaced"``, the number of characters
            of ``prompt``, ``history`` and ``step`` that were not valid Unicode (e.g. tool output
            decoded with ``surrogateescape``) and were replaced by U+FFFD (:func:`clean_text`);
            absent when there were none.
    """

    prompt: str
    history: tuple[str, ...]
    step: str
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False)

    def __post_init__(self):
        if not isinstance(self.prompt, str):
            raise TypeError(f"prompt: expected str, got {type(self.prompt).__name__}")
        if not isinstance(self.step, str):
            raise TypeError(f"step: expected str, got {type(self.step).__name__}")
        hist = tuple(self.history)
        if not all(isinstance(h, str) for h in hist):
            raise TypeError("history: expected a sequence of str")
        if not isinstance(self.extra, Mapping):
            raise TypeError(f"extra: expected a mapping, got {type(self.extra).__name__}")
        prompt, n_prompt = clean_text(self.prompt)
        step, n_step = clean_text(self.step)
        cleaned = [clean_text(h) for h in hist]
        replaced = n_prompt + n_step + sum(n for _, n in cleaned)
        extra = dict(self.extra)
        if replaced:
            extra[NON_UTF8_KEY] = int(extra.get(NON_UTF8_KEY, 0)) + replaced
            object.__setattr__(self, "prompt", prompt)
            object.__setattr__(self, "step", step)
            hist = tuple(h for h, _ in cleaned)
        object.__setattr__(self, "history", hist)
        object.__setattr__(self, "extra", extra)

    @classmethod
    def prefixes(cls, prompt: str, steps: "list[str] | tuple[str, ...]") -> list["TextStep"]:
        """All ``T`` steps of one trajectory as TextSteps (step ``t`` sees steps ``< t``)."""
        steps = tuple(steps)
        return [cls(prompt, steps[:t], steps[t]) for t in range(len(steps))]


def format_tool_call(tool: str, args: Mapping[str, Any] | str | None) -> str:
    """Render a proposed tool call (no result yet); the prefix of :func:`format_tool_step`.

    ``format_tool_call("go", {"direction": "north"})`` -> ``'call go({"direction": "north"})'``
    """
    if isinstance(args, Mapping):
        a = json.dumps(dict(args), sort_keys=True, ensure_ascii=False)
    elif args is None:
        a = ""
    else:
        a = str(args)
    return f"call {tool}({a})"


def format_tool_step(tool: str, args: Mapping[str, Any] | str | None, result: Any) -> str:
    """Render one tool call and its result as a step text.

    ``format_tool_step("go", {"direction": "north"}, "You enter the kitchen.")`` ->
    ``'call go({"direction": "north"})\\nresult: You enter the kitchen.'``
    """
    return f"{format_tool_call(tool, args)}\nresult: {result}"


def message_text(msg: Any) -> str:
    """Plain text of a chat message's content (string content, or the text parts of a list)."""
    content = getattr(msg, "content", msg)
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for p in content:
            if isinstance(p, str):
                parts.append(p)
            elif isinstance(p, Mapping) and p.get("type") == "text":
                parts.append(str(p.get("text", "")))
        return "".join(parts)
    return str(content)
