"""Untrusted text that addresses an LLM judge: a detector, and the split of a step into its action
and its tool output.

:func:`judge_address_cues` names the cues by which a text (a tool output, an agent's step) speaks
to the judge that reads it rather than reporting on the world. The text is NFKC-normalised first
(fullwidth ``Ｓｃｏｒｅ：１０`` reads ``Score:10``), angle-bracket look-alikes become ``<``/``>``,
and the match is case-insensitive. The cues (:data:`CUES`):

* ``override``: "ignore / disregard / forget / override ... previous / above / instructions / rules";
* ``judge_role``: the judge named or addressed ("as the judge", "you are the evaluator", "Judge,",
  "note to the grader");
* ``rate_request``: a request for a score ("rate this", "score this step", "give it 10",
  "full marks", "perfect score", "10/10");
* ``score_claim``: a labelled score ("Score: 10", "rating = 9", "score is 10");
* ``json_score``: a JSON-like object with a score key (``{"score": 10}``);
* ``fence_token``: a fence, chat-template or role token (``<</untrusted``, ``<<untrusted``,
  ``<|im_start|>``, ``[INST]``, a line starting ``system:`` / ``assistant:``);
* ``second_person_score``: "you must / should / will ... score / rate / grade / pass ...".

Game text such as "Your score has just gone up by one point" or "You scored 1 out of a possible 4"
matches none of them (tests/test_judge_injection.py keeps it so). The detector is a heuristic
gate: it decides where :class:`~prm_critic.text.LLMJudgeCritic` asks for a second opinion and
which steps it flags, never the score itself. :func:`redact_judge_address` cuts a text from the
sentence of its first cue to its end, the view that second opinion reads by default.

:func:`split_tool_output` splits a step written by :func:`~prm_critic.text.format_tool_step`
(``call tool(args)\\nresult: OUTPUT``) into ``("call tool(args)", "OUTPUT")``; a step without a
``result:`` line is all action (``(step, None)``).
"""

from __future__ import annotations

import re
import unicodedata

from prm_critic.text.fencing import ANGLE_LOOKALIKES

__all__ = ["judge_address_cues", "redact_judge_address", "split_tool_output", "CUES", "RESULT_MARKER",
           "REDACTION_MARKER"]

#: what replaces the redacted end of a text (:func:`redact_judge_address`); ``{n}``: characters removed
REDACTION_MARKER = "[... {n} characters addressing the judge removed ...]"

#: the line that starts a step's tool output in :func:`~prm_critic.text.format_tool_step`
RESULT_MARKER = "\nresult:"

_JUDGE = r"(?:judge|evaluator|grader|reviewer|critic|assessor|scorer|rater|reward\s+model)"
_SCORE = r"(?:score|rating|grade|reward)"
_I = re.IGNORECASE
#: cue name -> pattern (matched on the NFKC-normalised text, angle look-alikes folded)
CUES: dict[str, re.Pattern[str]] = {
    "override": re.compile(r"\b(?:ignore|disregard|forget|override|bypass)\b[^.!?\n]{0,40}?"
                           r"\b(?:previous|prior|above|earlier|all|any|your|the|system)?\s*"
                           r"(?:instructions?|rules?|prompts?|guidelines?|directions?|constraints?)\b", _I),
    "judge_role": re.compile(r"\b(?:as|you\s+are|you're|dear|attention|note\s+to|hey|hi|hello|to)\s+(?:the|an?|my|our)?\s*"
                             + _JUDGE + r"s?\b|(?:^|[.!?\n]\s*)" + _JUDGE + r"s?\s*[,:!]", _I | re.MULTILINE),
    "rate_request": re.compile(r"\b(?:rate|score|grade|mark|evaluate|judge)\s+(?:this|that|it|the|my|our|me)\b"
                               r"|\bgive\s+(?:this|that|it|the\s+\w+|me|us)\b[^.!?\n]{0,30}?(?:\d|" + _SCORE
                               + r"|marks?|ten)\b|\b(?:full|perfect|maximum|max|top|highest)\s+(?:"
                               + _SCORE + r"s?|marks?)\b|\b10\s*/\s*10\b", _I),
    "score_claim": re.compile(r"\b" + _SCORE + r"s?\s*(?:is|of|should\s+be|must\s+be|[:=])\s*\**\s*\d", _I),
    "json_score": re.compile(r"\{\s*[\"']?\s*" + _SCORE + r"s?\s*[\"']?\s*:", _I),
    "fence_token": re.compile(r"<<\s*/?\s*untrusted|<</|<\|\s*(?:im_start|im_end|system|assistant|user|eot_id)"
                              r"|\[/?\s*(?:inst|sys)\s*\]|(?:^|\n)\s*(?:system|assistant)\s*:", _I),
    "second_person_score": re.compile(r"\byou\b[^.!?\n]{0,30}?\b(?:must|should|will|have\s+to|need\s+to|are\s+to)\b"
                                      r"[^.!?\n]{0,40}?\b(?:" + _SCORE + r"|rate|grade|mark|approve|pass|ten|10)\b", _I),
}

_ANGLES = {ord(c): ("<" if i % 2 == 0 else ">") for i, c in enumerate(ANGLE_LOOKALIKES)}
_ANGLES.update({ord("\u226a"): "<<", ord("\u226b"): ">>", ord("\u00ab"): "<<", ord("\u00bb"): ">>"})


def _normalise(text: str) -> str:
    return unicodedata.normalize("NFKC", text).translate(_ANGLES)


def judge_address_cues(text: str) -> tuple[str, ...]:
    """The names of the cues (:data:`CUES`, in that order) by which ``text`` addresses a judge; empty if none."""
    if not isinstance(text, str):
        raise TypeError(f"text: expected str, got {type(text).__name__}")
    t = _normalise(text)
    return tuple(name for name, pat in CUES.items() if pat.search(t))


def redact_judge_address(text: str) -> tuple[str, int]:
    """``(text without what addresses the judge, characters removed)``.

    The text is NFKC-normalised (angle look-alikes folded) and cut from the start of the sentence
    (after the last ``.``, ``!``, ``?`` or line break) holding its earliest cue to its end, which
    becomes :data:`REDACTION_MARKER`: injected text is usually appended to a real output, whose
    beginning stays readable. A text without cues comes back normalised, with 0 removed.
    """
    if not isinstance(text, str):
        raise TypeError(f"text: expected str, got {type(text).__name__}")
    t = _normalise(text)
    starts = [m.start() for pat in CUES.values() if (m := pat.search(t)) is not None]
    if not starts:
        return t, 0
    first = min(starts)
    cut = max(t.rfind(c, 0, first + 1) for c in ".!?\n") + 1
    head = t[:cut].rstrip()
    removed = len(t) - cut
    return (head + " " if head else "") + REDACTION_MARKER.format(n=removed), removed


def split_tool_output(step: str) -> tuple[str, str | None]:
    """``(action, tool output)`` of a step ``"call tool(args)\\nresult: OUTPUT"``; ``(step, None)`` without a
    ``result:`` line."""
    if not isinstance(step, str):
        raise TypeError(f"step: expected str, got {type(step).__name__}")
    i = step.find(RESULT_MARKER)
    if i < 0:
        return step, None
    return step[:i], step[i + len(RESULT_MARKER):].lstrip(" ")
