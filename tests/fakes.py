"""Test helpers for the LangGraph integration tests.

* :class:`ToolCallingFakeChatModel` is a FAKE: a stand-in for a real chat model, which cannot run
  offline. It subclasses langchain-core's ``GenericFakeChatModel`` (which lacks ``bind_tools``),
  replays scripted AI messages in order (every call consumes one), and counts its calls.
* :class:`KeywordCritic` is not a fake: a small deterministic *real* text critic (a BaseCritic)
  that scores a step by keyword rules, so tests know which steps are good and bad.
"""

from __future__ import annotations

import itertools
from typing import Any, Iterable, Sequence

import numpy as np
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage

from prm_critic.critic import BaseCritic, StepScores

_ids = itertools.count()


def ai_call(name: str, args: dict | None = None, *, call_id: str | None = None, content: str = "") -> AIMessage:
    """An AI message asking for one tool call (what a tool-calling LLM would return)."""
    cid = call_id or f"call_{next(_ids)}"
    return AIMessage(content=content, tool_calls=[{"name": name, "args": dict(args or {}), "id": cid, "type": "tool_call"}])


def ai_text(text: str) -> AIMessage:
    """A final AI answer without tool calls."""
    return AIMessage(content=text)


class ToolCallingFakeChatModel(GenericFakeChatModel):
    """FAKE chat model (stand-in for a real LLM): scripted replies, ``bind_tools`` supported.

    ``bind_tools`` returns the model itself (the script already holds the tool calls). ``calls``
    counts model invocations; ``seen`` keeps the message list each call received.
    """

    calls: int = 0
    seen: list = []

    @classmethod
    def from_script(cls, script: Iterable[AIMessage | str]) -> "ToolCallingFakeChatModel":
        return cls(messages=iter(list(script)), seen=[])

    def bind_tools(self, tools: Sequence[Any], *, tool_choice: Any = None, **kwargs: Any):
        return self

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        self.calls += 1
        self.seen.append(list(messages))
        result = super()._generate(messages, stop=stop, run_manager=run_manager, **kwargs)
        # a fresh copy so replays of the same scripted object never share ids
        msg = result.generations[0].message
        result.generations[0].message = msg.model_copy(deep=True)
        return result


class KeywordCritic(BaseCritic):
    """A deterministic real text critic: the first matching keyword rule sets the step's scores.

    ``rules``: ``[(keyword, progress, success), ...]`` matched (case-insensitively) against the
    step text; unmatched steps get ``default``. ``batches`` records the size of every call.
    """

    def __init__(self, rules: Sequence[tuple[str, float, float]], default: tuple[float, float] = (0.5, 0.5)):
        self.rules = [(k.lower(), float(p), float(s)) for k, p, s in rules]
        self.default = default
        self.batches: list[int] = []
        self.seen: list = []

    def score(self, steps) -> StepScores:
        self.batches.append(len(steps))
        prog, succ = [], []
        for st in steps:
            self.seen.append(st)
            text = st.step.lower()
            for k, p, s in self.rules:
                if k in text:
                    prog.append(p)
                    succ.append(s)
                    break
            else:
                prog.append(self.default[0])
                succ.append(self.default[1])
        return StepScores(np.asarray(prog, np.float32), np.asarray(succ, np.float32))
