"""Untrusted text that addresses an LLM judge: a detector, and the split of a step into its action
and its tool output.

:func:`judge_address_cues` names the cues by which a text (a tool output, an agent's step) speaks
to the judge that reads it rather than reporting on the world. The text is normalised first
(:func:`normalise_for_detection`): NFKC (fullwidth ``Ｓｃｏｒｅ：１０`` reads ``Score:10``), invisible
format characters removed (zero-width spaces and joiners, soft hyphens, word joiners, bidi
controls: ``Sco\u200bre`` reads ``Score``), Cyrillic and Greek letters that look like Latin ones
folded to them (``Ѕсоrе`` reads ``Score``), angle-bracket look-alikes become ``<``/``>``; a base64
run that decodes to text is read decoded too, and markdown emphasis around a score word
(``**Score**: 10``) still makes a score claim. The match is case-insensitive. The cues (:data:`CUES`):

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
matches none of them (tests/test_judge_injection.py keeps it so). What it cannot detect: an
injection in another language than English, one split across several steps (each step is read
alone), one paraphrased past the cue patterns, or encoded other than base64 (measured in
docs/judge_injection.md, "Detector bypass suite"). The detector is a heuristic gate: it decides where :class:`~prm_critic.text.LLMJudgeCritic` asks for a second opinion and
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

__all__ = ["judge_address_cues", "redact_judge_address", "split_tool_output", "normalise_for_detection", "CUES",
           "RESULT_MARKER", "REDACTION_MARKER"]

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
    "score_claim": re.compile(r"\b" + _SCORE + r"s?[*_`~]*\s*(?:is|of|should\s+be|must\s+be|[:=])\s*[*_`~]*\s*\d", _I),
    "json_score": re.compile(r"\{\s*[\"']?\s*[*_`~]*" + _SCORE + r"s?[*_`~]*\s*[\"']?\s*:", _I),
    "fence_token": re.compile(r"<<\s*/?\s*untrusted|<</|<\|\s*(?:im_start|im_end|system|assistant|user|eot_id)"
                              r"|\[/?\s*(?:inst|sys)\s*\]|(?:^|\n)\s*(?:system|assistant)\s*:", _I),
    "second_person_score": re.compile(r"\byou\b[^.!?\n]{0,30}?\b(?:must|should|will|have\s+to|need\s+to|are\s+to)\b"
                                      r"[^.!?\n]{0,40}?\b(?:" + _SCORE + r"|rate|grade|mark|approve|pass|ten|10)\b", _I),
}

_ANGLES = {ord(c): ("<" if i % 2 == 0 else ">") for i, c in enumerate(ANGLE_LOOKALIKES)}
_ANGLES.update({ord("\u226a"): "<<", ord("\u226b"): ">>", ord("\u00ab"): "<<", ord("\u00bb"): ">>"})


#: Cyrillic and Greek letters drawn like Latin ones (Unicode's confusables for the Latin alphabet that
#: NFKC leaves alone), folded to the Latin letter before detection
_CONFUSABLES = str.maketrans(
    "АВЕЅІЈКМНОРСТХУаеіјорсухѕһԁԛԝɡɑΑΒΕΖΗΙΚΜΝΟΡΤΥΧαικνορτυχ",
    "ABESIJKMHOPCTXYaeijopcyxshdqwgaABEZHIKMNOPTYXaiknoptux")
_BASE64 = re.compile(r"(?<![A-Za-z0-9+/=])[A-Za-z0-9+/]{16,}={0,2}(?![A-Za-z0-9+/=])")


def _decoded_base64(text: str) -> list[str]:
    """The printable UTF-8 texts that base64 runs of ``text`` decode to."""
    import base64
    import binascii

    out = []
    for m in _BASE64.finditer(text):
        run = m.group(0)
        try:
            raw = base64.b64decode(run + "=" * (-len(run) % 4), validate=True)
            decoded = raw.decode("utf-8")
        except (binascii.Error, ValueError):
            continue
        if decoded and all(c.isprintable() or c in "\n\t" for c in decoded):
            out.append(decoded)
    return out


def _views(text: str) -> tuple[str, str, list[int]]:
    """``(shown, read, where)``: ``text`` NFKC-normalised with angle look-alikes folded (what a
    redaction keeps), the detector's reading of it (:func:`normalise_for_detection`), and for each
    character read its index in ``shown``."""
    shown = unicodedata.normalize("NFKC", text).translate(_ANGLES)
    where = [i for i, c in enumerate(shown) if unicodedata.category(c) != "Cf"]
    read = "".join(shown[i] for i in where).translate(_CONFUSABLES)
    return shown, read, where


def normalise_for_detection(text: str) -> str:
    """``text`` as the detector reads it: NFKC, format characters (Unicode category Cf: zero-width
    spaces and joiners, soft hyphens, bidi controls) removed, Cyrillic / Greek look-alikes folded to
    Latin, angle look-alikes folded to ``<`` / ``>``."""
    return _views(text)[1]


def judge_address_cues(text: str) -> tuple[str, ...]:
    """The names of the cues (:data:`CUES`, in that order) by which ``text`` addresses a judge; empty if none."""
    if not isinstance(text, str):
        raise TypeError(f"text: expected str, got {type(text).__name__}")
    read = normalise_for_detection(text)
    views = [read] + [normalise_for_detection(d) for d in _decoded_base64(read)]
    return tuple(name for name, pat in CUES.items() if any(pat.search(v) for v in views))


def redact_judge_address(text: str) -> tuple[str, int]:
    """``(text without what addresses the judge, characters removed)``.

    The text is NFKC-normalised (angle look-alikes folded) and cut from the start of the sentence
    (after the last ``.``, ``!``, ``?`` or line break) holding its earliest cue to its end, which
    becomes :data:`REDACTION_MARKER`: injected text is usually appended to a real output, whose
    beginning stays readable. A text without cues comes back normalised, with 0 removed.
    """
    if not isinstance(text, str):
        raise TypeError(f"text: expected str, got {type(text).__name__}")
    t, read, where = _views(text)
    at = [m.start() for pat in CUES.values() if (m := pat.search(read)) is not None]
    at += [m.start() for m in _BASE64.finditer(read)  # a base64 run that decodes to text addressing the judge
           if any(pat.search(normalise_for_detection(d)) for d in _decoded_base64(m.group(0)) for pat in CUES.values())]
    starts = [where[i] for i in at]
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
