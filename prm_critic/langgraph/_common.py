"""Shared helpers of the LangGraph integration: argument checks, step rendering, critic calls.

A *step* of a tool-using agent is one AI message's tool call(s) plus their ToolMessage result(s),
rendered with :func:`prm_critic.text.format_tool_step` (one line pair per call, joined by a
newline). A *proposal* is the same without results (:func:`format_tool_call`), for scoring a tool
call before it runs.
"""

from __future__ import annotations

from typing import Any, Literal, Mapping, Sequence, overload

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
    messages: Sequence[Any], *, skip_tool_call_ids: frozenset[str] | set[str] = frozenset(),
    skip_message_ids: frozenset[str] | set[str] = frozenset(),
) -> list[dict[str, Any]]:
    """Split a message list into executed steps, oldest first.

    Each AI message with tool calls is one step ``{"text", "tool_call_ids", "ai_index", "ai_id",
    "tool_indices", "complete"}``: ``ai_id`` is the AI message's id (``None`` without one) and
    ``tool_indices`` the positions of the ToolMessages answering its calls. Results are paired with
    calls by position: the ToolMessages after the AI message and before the next AI message, matched
    by tool-call id in order, so a model that reuses ids (``"call_0"`` every time, or ``""``) still
    gets each result paired with its own call. A step whose calls are all answered is
    ``"complete": True`` with the executed text; otherwise the proposal text. Steps whose AI message id
    is in ``skip_message_ids``, or whose tool-call ids intersect ``skip_tool_call_ids`` (rejected steps
    kept in the transcript), are left out.
    """
    steps: list[dict[str, Any]] = []
    for i, m in enumerate(messages):
        calls = getattr(m, "tool_calls", None) if getattr(m, "type", None) == "ai" else None
        if not calls:
            continue
        ids = [c.get("id") or "" for c in calls]
        ai_id = getattr(m, "id", None) or None
        if (ai_id is not None and ai_id in skip_message_ids) or \
                (skip_tool_call_ids and any(cid in skip_tool_call_ids for cid in ids)):
            continue
        answers: dict[str, list[int]] = {}
        for j in range(i + 1, len(messages)):
            kind = getattr(messages[j], "type", None)
            if kind == "ai":
                break
            if kind == "tool":
                answers.setdefault(messages[j].tool_call_id or "", []).append(j)
        found = [answers[cid].pop(0) if answers.get(cid) else None for cid in ids]
        complete = all(j is not None for j in found)
        if complete:
            text = "\n".join(format_tool_step(c["name"], c.get("args"), message_text(messages[j]))
                             for c, j in zip(calls, found) if j is not None)
        else:
            text = "\n".join(format_tool_call(c["name"], c.get("args")) for c in calls)
        steps.append({"text": text, "tool_call_ids": ids, "ai_index": i, "ai_id": ai_id,
                      "tool_indices": [j for j in found if j is not None], "complete": complete})
    return steps


def same_step(record: Mapping[str, Any], *, ai_id: str | None, tool_call_ids: Sequence[str]) -> bool:
    """Whether a critic ``record`` is the step of AI message ``ai_id`` with ``tool_call_ids``: by the AI
    message's id where both have one (what tells apart steps of a model that reuses tool-call ids),
    else by shared tool-call ids (records written before they held ``ai_message_id``)."""
    rid = record.get("ai_message_id")
    if rid and ai_id:
        return rid == ai_id
    return bool(set(record.get("tool_call_ids") or ()) & set(tool_call_ids))


def check_step_ids(steps: Sequence[Mapping[str, Any]], *, key: str = "messages") -> None:
    """Refuse steps that can be told apart by neither id: an AI message without id whose tool-call
    id is empty or also another step's (then a record cannot say which step it scored)."""
    seen: dict[str, int] = {}
    for s in steps:
        for cid in s["tool_call_ids"]:
            if s["ai_id"] is None and (cid == "" or cid in seen):
                why = "empty" if cid == "" else f"also the id of the call in the AI message at index {seen[cid]}"
                raise ValueError(
                    f"{key}: the AI message at index {s['ai_index']} has no id and its tool-call id {cid!r} is {why}, "
                    f"so the critic cannot tell its steps apart; use the add_messages reducer on {key!r} (it gives "
                    "every message an id) or give every tool call its own id")
            seen.setdefault(cid, s["ai_index"])


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
