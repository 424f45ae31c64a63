"""The text step: what a text critic scores.

A tool-using agent's trajectory is a ``prompt`` (task / objective) followed by steps; each step is
one tool call plus its result, rendered to text by :func:`format_tool_step`. A :class:`TextStep`
is one step *in context*: the prompt, the previous steps, and the step itself. Text critics take a
batch (sequence) of ``B`` TextSteps and return :class:`~prm_critic.critic.StepScores` of shape
``(B,)``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping

__all__ = ["TextStep", "format_tool_call", "format_tool_step", "message_text"]


@dataclass(frozen=True)
class TextStep:
    """One step of a text trajectory, in context.

    Attributes:
        prompt: the task / objective the agent was given.
        history: the previous steps' texts, oldest first.
        step: this step's text.
    """

    prompt: str
    history: tuple[str, ...]
    step: str

    def __post_init__(self):
        if not isinstance(self.prompt, str):
            raise TypeError(f"prompt: expected str, got {type(self.prompt).__name__}")
        if not isinstance(self.step, str):
            raise TypeError(f"step: expected str, got {type(self.step).__name__}")
        hist = tuple(self.history)
        if not all(isinstance(h, str) for h in hist):
            raise TypeError("history: expected a sequence of str")
        object.__setattr__(self, "history", hist)

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
