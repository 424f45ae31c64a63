"""Critic middleware for langchain v1 ``create_agent``.

* :class:`PRMBestOfNMiddleware` (``wrap_model_call``): calls the model ``n`` times *before any
  tool runs*, renders each candidate's proposed tool call(s) as a step without result
  (``call tool({...})``; a final answer as ``answer: ...``), scores the ``n`` proposals in one
  critic batch ``TextStep(prompt, executed steps, proposal)`` and returns the best::

      chosen = argmax_i  s_i      (first index on ties; s = the ``head`` score)

  Only the winner reaches the tool node, so only its tool call runs. Every call of the handler
  consumes one model response (``n`` LLM calls per agent step; ``ModelCallLimitMiddleware``
  still counts one model *step*). With ``accept_threshold`` it stops sampling at the first
  candidate scoring ``>= accept_threshold``. Each choice is recorded in ``state["prm_best_of_n"]``
  (``{n, scores, texts, chosen}``) and emitted on ``stream_mode="custom"``. A candidate cut at the
  model's token limit (``finish_reason="length"``, or openai's ``LengthFinishReasonError``) is a
  failed candidate: skipped and noted in the record's ``failed``; if every candidate fails, one
  error names ``max_tokens``. A candidate identical to an earlier one is resampled with a fresh
  ``seed`` (up to ``resamples`` times), so that the ``n`` candidates differ where sampling allows.

* :class:`PRMStepScoringMiddleware` (``wrap_tool_call``): runs the tool, scores the executed step
  ``format_tool_step(tool, args, result)`` and returns ``Command(update={"messages": [result],
  "step_scores": [record]})`` (same record format as :class:`~prm_critic.langgraph.StepCriticNode`,
  so :class:`~prm_critic.langgraph.CheckpointBacktracker` reads it). Low steps (``s < threshold``)
  are ``"record"``-ed only, ``"flag"``-ged (a note appended to the ToolMessage the model reads) or
  ``"end"`` the run (flag + ``before_model`` jumps to the end). ``block_below`` scores the call
  *before* it runs and returns an error ToolMessage instead of running it when ``s < block_below``.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Annotated, Any, Literal, Sequence

from typing_extensions import NotRequired

from prm_critic.critic import BaseCritic
from prm_critic.validate import check_seed
from prm_critic.langgraph._common import (
    check_choice,
    check_critic,
    check_head,
    check_int,
    check_prob,
    first_human_text,
    format_tool_call,
    lg,
    message_text,
    render_steps,
    same_step,
    ascore_text_steps,
    score_text_steps,
)
from prm_critic.langgraph.node import add_step_records
from prm_critic.langgraph.search import emit_event
from prm_critic.text.steps import TextStep, format_tool_step

if TYPE_CHECKING:
    from langchain.agents.middleware import AgentMiddleware, AgentState
else:  # through require(), so a missing package names the extra to install
    AgentMiddleware = lg("langchain.agents.middleware").AgentMiddleware
    AgentState = lg("langchain.agents.middleware").AgentState
_types = lg("langchain.agents.middleware.types")
_msgs = lg("langchain_core.messages")
_lgtypes = lg("langgraph.types")

__all__ = ["PRMBestOfNMiddleware", "PRMStepScoringMiddleware", "BestOfNState", "StepScoresState"]


class BestOfNState(AgentState):
    """Agent state with the best-of-N choice records."""

    prm_best_of_n: NotRequired[Annotated[list[dict], add_step_records]]


class StepScoresState(AgentState):
    """Agent state with the executed-step critic records."""

    step_scores: NotRequired[Annotated[list[dict], add_step_records]]


def _context(messages: Sequence[Any]) -> tuple[str, tuple[str, ...]]:
    prompt = first_human_text(messages)
    history = tuple(s["text"] for s in render_steps(messages) if s["complete"])
    return prompt, history


def _proposal_text(response: Any) -> str:
    """The step text of a model response: its tool call(s) without results, or the answer."""
    result = getattr(response, "result", None)
    msgs = result if isinstance(result, list) else [response]
    ai = next((m for m in reversed(msgs) if getattr(m, "type", None) == "ai"), None)
    if ai is None:
        return "answer: " + " ".join(message_text(m) for m in msgs)
    if ai.tool_calls:
        return "\n".join(format_tool_call(c["name"], c.get("args")) for c in ai.tool_calls)
    return "answer: " + message_text(ai)


def _cut_reason(response: Any) -> str | None:
    """Why ``response`` is a failed candidate (cut at the token limit), or ``None``."""
    result = getattr(response, "result", None)
    msgs = result if isinstance(result, list) else [response]
    for m in msgs:
        meta = getattr(m, "response_metadata", None) or {}
        if getattr(m, "type", None) == "ai" and meta.get("finish_reason") == "length":
            return "cut at the model's max_tokens (finish_reason='length')"
    return None


def _is_length_error(exc: BaseException) -> bool:
    # openai's client refuses to parse a structured reply cut at max_tokens
    return type(exc).__name__ == "LengthFinishReasonError"


class PRMBestOfNMiddleware(AgentMiddleware):
    """Best-of-N tool-call selection by a step critic, before any tool runs.

    Args:
        critic: a text :class:`~prm_critic.BaseCritic`; it sees proposals (no results).
        n: candidates sampled per model step (``>= 1``).
        head: the score that ranks candidates (``"success"`` or ``"progress"``).
        accept_threshold: stop sampling at the first candidate with score ``>=`` it
            (``None``: always sample ``n``; all ``n`` are scored in one batch).
        resamples: times a candidate identical to an earlier one is sampled again, with a fresh
            ``seed`` in the model settings (0: keep duplicates).
        seed: seeds the fresh seeds of resamples (``None``: from the operating system).
    """

    state_schema = BestOfNState

    def __init__(self, critic: BaseCritic, *, n: int = 4, head: str = "success",
                 accept_threshold: float | None = None, resamples: int = 2, seed: int | None = None):
        super().__init__()
        self.resamples = check_int("resamples", resamples, minimum=0)
        self._rng = random.Random(None if seed is None else check_seed("seed", seed))
        self.critic = check_critic(critic)
        self.n = check_int("n", n, minimum=1)
        self.head = check_head(head)
        self.accept_threshold = check_prob("accept_threshold", accept_threshold, allow_none=True)
        self.tools = []

    def _score(self, prompt: str, history: tuple[str, ...], texts: list[str]) -> list[float]:
        steps = [TextStep(prompt, history, t) for t in texts]
        return [float(v) for v in score_text_steps(self.critic, steps, head=self.head).get(self.head)]

    async def _ascore(self, prompt: str, history: tuple[str, ...], texts: list[str]) -> list[float]:
        steps = [TextStep(prompt, history, t) for t in texts]
        return [float(v) for v in (await ascore_text_steps(self.critic, steps, head=self.head)).get(self.head)]

    def _finish(self, candidates: list, texts: list[str], scores: list[float], failed: list[dict]):
        if not candidates:
            raise ValueError(f"PRMBestOfNMiddleware: all {len(failed)} candidates failed ({failed[-1]['reason']}); "
                             "expected at least one complete reply: raise the chat model's max_tokens")
        chosen = max(range(len(scores)), key=lambda i: (scores[i], -i))
        record = {"n": len(candidates), "scores": scores, "texts": texts, "chosen": chosen, "head": self.head,
                  "failed": failed}
        emit_event({"type": "prm_best_of_n", **record})
        best = candidates[chosen]
        if isinstance(best, _msgs.AIMessage):
            best = _types.ModelResponse(result=[best])
        return _types.ExtendedModelResponse(
            model_response=best, command=_lgtypes.Command(update={"prm_best_of_n": [record]})
        )

    def _resample(self, request):
        settings = dict(getattr(request, "model_settings", None) or {})
        settings["seed"] = self._rng.randrange(2**31)
        return request.override(model_settings=settings)

    def _check(self, cands: tuple[list, list, list], failed: list[dict], attempt: int, resp) -> str:
        """``"failed"`` (noted), ``"duplicate"`` (sample again) or ``"ok"`` for one reply."""
        reason = resp if isinstance(resp, str) else _cut_reason(resp)
        if reason is not None:
            failed.append({"candidate": attempt, "reason": reason})
            return "failed"
        return "duplicate" if _proposal_text(resp) in cands[1] else "ok"

    def _add(self, cands: tuple[list, list, list], resp) -> bool:
        """Record one candidate; True when it must be scored now (``accept_threshold`` is set)."""
        candidates, texts, _ = cands
        candidates.append(resp)
        texts.append(_proposal_text(resp))
        return self.accept_threshold is not None

    def _call(self, request, handler):
        try:
            return handler(request)
        except Exception as exc:
            if not _is_length_error(exc):
                raise
            return f"cut at the model's max_tokens ({type(exc).__name__}: {exc})"

    async def _acall(self, request, handler):
        try:
            return await handler(request)
        except Exception as exc:
            if not _is_length_error(exc):
                raise
            return f"cut at the model's max_tokens ({type(exc).__name__}: {exc})"

    def _sample(self, request, handler, cands, failed, i):
        resp, req = self._call(request, handler), request
        for _ in range(self.resamples):
            if self._check(cands, failed, i, resp) != "duplicate":
                return resp
            req = self._resample(req)
            resp = self._call(req, handler)
        return resp

    async def _asample(self, request, handler, cands, failed, i):
        resp, req = await self._acall(request, handler), request
        for _ in range(self.resamples):
            if self._check(cands, failed, i, resp) != "duplicate":
                return resp
            req = self._resample(req)
            resp = await self._acall(req, handler)
        return resp

    def _usable(self, cands, failed, i, resp) -> bool:
        if isinstance(resp, str) or _cut_reason(resp) is not None:
            if not failed or failed[-1]["candidate"] != i:  # not noted yet (resamples=0 or the last resample)
                self._check(cands, failed, i, resp)
            return False
        return True

    def _accepted(self, cands: tuple[list, list, list]) -> bool:
        return self.accept_threshold is not None and cands[2][-1] >= self.accept_threshold

    def wrap_model_call(self, request, handler):
        ctx, cands, failed = _context(request.messages), ([], [], []), []
        for i in range(self.n):
            resp = self._sample(request, handler, cands, failed, i)
            if not self._usable(cands, failed, i, resp):
                continue
            if self._add(cands, resp):
                cands[2].extend(self._score(*ctx, cands[1][-1:]))
                if self._accepted(cands):
                    break
        scores = cands[2] if self.accept_threshold is not None or not cands[1] \
            else self._score(*ctx, cands[1])  # one batch
        return self._finish(cands[0], cands[1], scores, failed)

    async def awrap_model_call(self, request, handler):
        ctx, cands, failed = _context(request.messages), ([], [], []), []
        for i in range(self.n):
            resp = await self._asample(request, handler, cands, failed, i)
            if not self._usable(cands, failed, i, resp):
                continue
            if self._add(cands, resp):
                cands[2].extend(await self._ascore(*ctx, cands[1][-1:]))
                if self._accepted(cands):
                    break
        scores = cands[2] if self.accept_threshold is not None or not cands[1] \
            else await self._ascore(*ctx, cands[1])
        return self._finish(cands[0], cands[1], scores, failed)


DEFAULT_FLAG = "[step critic: {head} score {score:.2f} < {threshold:.2f}; this step looks like a dead end]"


class PRMStepScoringMiddleware(AgentMiddleware):
    """Score every executed tool step; record it in ``state["step_scores"]``; flag/end dead ends.

    Args:
        critic: a text :class:`~prm_critic.BaseCritic`.
        threshold: a step with ``head`` score ``< threshold`` is low.
        head: ``"success"`` or ``"progress"`` (or an ``extra`` key of the critic).
        on_low: ``"record"`` (scores only), ``"flag"`` (append ``flag`` to the ToolMessage the model
            reads) or ``"end"`` (flag, then end the run before the next model call).
        block_below: score the tool call before it runs; below this, do not run it and return an
            error ToolMessage (``None``: never block).
        flag: format string (fields ``head, score, threshold``) of the note.
    """

    state_schema = StepScoresState

    def __init__(self, critic: BaseCritic, *, threshold: float = 0.5, head: str = "success",
                 on_low: Literal["record", "flag", "end"] = "flag", block_below: float | None = None,
                 flag: str = DEFAULT_FLAG):
        super().__init__()
        self.critic = check_critic(critic)
        self.threshold = check_prob("threshold", threshold)
        self.head = check_head(head)
        self.on_low = check_choice("on_low", on_low, ("record", "flag", "end"))
        self.block_below = check_prob("block_below", block_below, allow_none=True)
        if not isinstance(flag, str):
            raise TypeError(f"flag: expected a format str, got {type(flag).__name__} {flag!r}")
        self.flag = flag
        self.tools = []

    def _record(self, call: dict, text: str, history: tuple, scores, verdict: str, ai_id: str | None = None) -> dict:
        return {
            "step_index": len(history),
            "progress": float(scores.progress[0]),
            "success": float(scores.success[0]),
            "score": float(scores.get(self.head)[0]),
            "head": self.head,
            "verdict": verdict,
            "accepted": verdict == "continue",
            "text": text,
            "tool_call_ids": [call.get("id") or ""],
            "ai_message_id": ai_id,
        }

    def _pre_context(self, request):
        call = dict(request.tool_call)
        messages = list((request.state or {}).get("messages", []))
        prompt, history = _context(messages)
        # the AI message proposing the call (the last one): its id tells apart the steps of a model
        # that reuses tool-call ids
        ai = next((m for m in reversed(messages) if getattr(m, "type", None) == "ai"), None)
        call["_prm_ai_id"] = getattr(ai, "id", None) or None
        return call, prompt, history, format_tool_call(call["name"], call.get("args"))

    def _pre(self, request):
        call, prompt, history, text = self._pre_context(request)
        if self.block_below is None:
            return call, prompt, history, None
        sc = score_text_steps(self.critic, [TextStep(prompt, history, text)], head=self.head)
        return self._blocked(call, prompt, history, text, sc)

    async def _apre(self, request):
        call, prompt, history, text = self._pre_context(request)
        if self.block_below is None:
            return call, prompt, history, None
        sc = await ascore_text_steps(self.critic, [TextStep(prompt, history, text)], head=self.head)
        return self._blocked(call, prompt, history, text, sc)

    def _blocked(self, call, prompt, history, text, sc):
        if float(sc.get(self.head)[0]) >= self.block_below:
            return call, prompt, history, None
        record = self._record(call, text, history, sc, "blocked", call.get("_prm_ai_id"))
        emit_event({"type": "prm_step_score", "node": self.name, **record})
        msg = _msgs.ToolMessage(
            content=f"Not executed: a step critic scored this call {record['score']:.2f} "
                    f"(< {self.block_below:.2f}). Try a different step.",
            tool_call_id=call.get("id") or "", name=call["name"], status="error",
        )
        return call, prompt, history, _lgtypes.Command(update={"messages": [msg], "step_scores": [record]})

    def _post(self, call, prompt, history, result):
        if not isinstance(result, _msgs.ToolMessage):
            return result  # a tool that returns its own Command: passed through unscored
        text = format_tool_step(call["name"], call.get("args"), message_text(result))
        sc = score_text_steps(self.critic, [TextStep(prompt, history, text)], head=self.head)
        return self._scored(call, history, result, text, sc)

    async def _apost(self, call, prompt, history, result):
        if not isinstance(result, _msgs.ToolMessage):
            return result
        text = format_tool_step(call["name"], call.get("args"), message_text(result))
        sc = await ascore_text_steps(self.critic, [TextStep(prompt, history, text)], head=self.head)
        return self._scored(call, history, result, text, sc)

    def _scored(self, call, history, result, text, sc):
        value = float(sc.get(self.head)[0])
        low = value < self.threshold
        verdict = "continue" if not low else {"record": "low", "flag": "flagged", "end": "end"}[self.on_low]
        record = self._record(call, text, history, sc, verdict, call.get("_prm_ai_id"))
        emit_event({"type": "prm_step_score", "node": self.name, **record})
        if low and self.on_low in ("flag", "end"):
            note = self.flag.format(head=self.head, score=value, threshold=self.threshold)
            result = result.model_copy(update={"content": f"{message_text(result)}\n{note}"})
        return _lgtypes.Command(update={"messages": [result], "step_scores": [record]})

    def wrap_tool_call(self, request, handler):
        call, prompt, history, blocked = self._pre(request)
        if blocked is not None:
            return blocked
        return self._post(call, prompt, history, handler(request))

    async def awrap_tool_call(self, request, handler):
        # the critic runs with ascore: a judge calling a remote model does not block the event loop
        call, prompt, history, blocked = await self._apre(request)
        if blocked is not None:
            return blocked
        return await self._apost(call, prompt, history, await handler(request))

    @_types.hook_config(can_jump_to=["end"])
    def before_model(self, state, runtime):
        if self.on_low != "end":
            return None
        records = state.get("step_scores") or []
        messages = state.get("messages") or []
        last_ai = next((m for m in reversed(messages) if getattr(m, "type", None) == "ai"), None)
        if not records or last_ai is None or not last_ai.tool_calls:
            return None
        ids = [c.get("id") or "" for c in last_ai.tool_calls]
        ai_id = getattr(last_ai, "id", None) or None
        bad = [r for r in records if r.get("verdict") == "end" and same_step(r, ai_id=ai_id, tool_call_ids=ids)]
        if not bad:
            return None
        text = (f"Stopped: a step critic scored the last step {bad[0]['score']:.2f} "
                f"(< {self.threshold:.2f}), a likely dead end.")
        return {"jump_to": "end", "messages": [_msgs.AIMessage(content=text)]}

    @_types.hook_config(can_jump_to=["end"])
    async def abefore_model(self, state, runtime):
        return self.before_model(state, runtime)
