"""Shared helpers of the LangGraph integration: argument checks, step rendering, critic calls.

A *step* of a tool-using agent is one AI message's tool call(s) plus their ToolMessage result(s),
rendered with :func:`prm_critic.text.format_tool_step` (one line pair per call, joined by a
newline). A *proposal* is the same without results (:func:`format_tool_call`), for scoring a tool
call before it runs.
"""

from __future__ import annotations

from typing import Any, Literal, Sequence, overload

from prm_critic import validate
from prm_critic._optional import require
from prm_critic.critic import BaseCritic, StepScores, check_scores
from prm_critic.text.steps import TextStep, format_tool_call, format_tool_step, message_text

__all__ = [
    "format_tool_call",
    "render_steps",
    "first_human_text",
    "message_text",
    "score_text_steps",
    "ascore_text_steps",
]

# --------------------------------------------------------------------------- argument checks
def check_critic(critic: Any, name: str = "critic") -> BaseCritic:
    if not isinstance(critic, BaseCritic):
        raise TypeError(
            f"{name}: expected a prm_critic.BaseCritic whose score(list[TextStep]) returns StepScores, "
            f"got {type(critic).__name__} ({critic!r:.80})"
        )
    return critic


check_int = validate.check_int
check_str = validate.check_str
check_choice = validate.check_choice


@overload
def check_prob(name: str, value: Any, *, allow_none: Literal[False] = ...) -> float: ...
@overload
def check_prob(name: str, value: Any, *, allow_none: bool) -> float | None: ...
def check_prob(name: str, value: Any, *, allow_none: bool = False) -> float | None:
    """:func:`prm_critic.validate.check_prob`, worded "a float" (what the LangGraph messages say)."""
    return validate.check_prob(name, value, allow_none=allow_none, noun="a float")


def check_head(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise TypeError(f"head: expected 'progress', 'success' or a name in StepScores.extra, got {value!r}")
    return value


# --------------------------------------------------------------------------- rendering
def first_human_text(messages: Sequence[Any]) -> str:
    """Text of the first human message (the task prompt), or ``""`` if there is none."""
    for m in messages:
        if getattr(m, "type", None) == "human":
            return message_text(m)
    return ""


def render_steps(
    messages: Sequence[Any], *, skip_tool_call_ids: frozenset[str] | set[str] = frozenset()
) -> list[dict[str, Any]]:
    """Split a message list into executed steps, oldest first.

    Each AI message with tool calls whose ids all have a ToolMessage later in ``messages`` is one
    step ``{"text", "tool_call_ids", "ai_index", "complete": True}``; an AI message whose calls
    are not (all) answered yet is returned last with ``"complete": False`` and the proposal text.
    Steps whose tool-call ids intersect ``skip_tool_call_ids`` (rejected steps kept in the
    transcript) are left out.
    """
    results: dict[str, Any] = {}
    for m in messages:
        if getattr(m, "type", None) == "tool":
            results[m.tool_call_id] = m
    steps: list[dict[str, Any]] = []
    for i, m in enumerate(messages):
        calls = getattr(m, "tool_calls", None) if getattr(m, "type", None) == "ai" else None
        if not calls:
            continue
        ids = [c.get("id") or "" for c in calls]
        if skip_tool_call_ids and any(cid in skip_tool_call_ids for cid in ids):
            continue
        complete = all(cid in results for cid in ids)
        if complete:
            text = "\n".join(
                format_tool_step(c["name"], c.get("args"), message_text(results[c.get("id") or ""])) for c in calls
            )
        else:
            text = "\n".join(format_tool_call(c["name"], c.get("args")) for c in calls)
        steps.append({"text": text, "tool_call_ids": ids, "ai_index": i, "complete": complete})
    return steps


# --------------------------------------------------------------------------- scoring
def score_text_steps(critic: BaseCritic, steps: Sequence[TextStep], *, head: str | None = None,
                     name: str = "critic") -> StepScores:
    """Call ``critic.score(steps)`` and check what it returned against the :class:`StepScores` contract
    (:func:`prm_critic.critic.check_scores`: one finite score per step and head, progress and success
    and the deciding ``head`` in [0, 1])."""
    return check_scores(critic.score(list(steps)), len(steps), critic=critic, head=head, name=name)


async def ascore_text_steps(critic: BaseCritic, steps: Sequence[TextStep], *, head: str | None = None,
                            name: str = "critic") -> StepScores:
    """``await critic.ascore(steps)`` (the event loop keeps running), checked like :func:`score_text_steps`."""
    return check_scores(await critic.ascore(list(steps)), len(steps), critic=critic, head=head, name=name)


def lg(module: str = "langgraph"):
    """Import a langgraph/langchain module, or fail with the install command."""
    return require(module, "agents")
