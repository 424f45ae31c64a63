"""Fencing of untrusted text (tool output, critiques, model answers) before it reaches an LLM.

One helper, used everywhere the library puts text it did not write into a prompt: the
:class:`~prm_critic.text.LLMJudgeCritic` conversation, the feedback message of
:class:`~prm_critic.langgraph.StepCriticNode` and of
:class:`~prm_critic.langgraph.CheckpointBacktracker`. :func:`fence_untrusted` does, in order::

    t = unicodedata.normalize("NFKC", text)          # fullwidth / small-form look-alikes -> ASCII
    t = t[:max_chars] + TRUNCATION_MARKER             # only if len(t) > max_chars
    body = json.dumps(t)                              # one line, quotes and backslashes escaped
    body = escape "<", ">", the angle-bracket look-alikes NFKC keeps ("‹", "〈", "《", ...)
           and the line breaks JSON leaves raw (U+0085, U+2028, U+2029) as \\uXXXX
    return "<<untrusted NONCE>>" + body + "<</untrusted NONCE>>"

so the fenced text cannot close its fence (no ``<``/``>`` survives inside, whatever the script),
cannot add lines, and is bounded.

Spotlighting (``spotlight=``) also marks every character of the text as data, so that a reader can
tell it from the prompt around it even where it imitates that prompt:

* ``"datamark"``: after the escaping above, the marker (:data:`DATAMARK`, ``^``) and its look-alikes
  (:data:`CARET_LOOKALIKES`: ``ˆ``, ``˄``, ``‸``, ``⌃``, ...; the fullwidth ``＾`` is ``^`` after NFKC)
  are escaped as ``\\uXXXX`` and then every space becomes the marker
  (``"You^take^the^key."``): each word of the untrusted text touches a marker, the text cannot
  bring a marker of its own or an unmarked space, and the original is recoverable;
* ``"base64"``: the normalised, capped text is sent as base64 of its UTF-8 bytes (nothing of it is
  readable as instructions; a small model cannot read it either). ``NONCE`` is random per call unless given. The reader (the judge's
system prompt, the feedback text) is told that fenced text is data, never instructions or scores.
This is mitigation, not proof: a real LLM can still be swayed.
"""

from __future__ import annotations

import base64
import json
import numbers
import secrets
import unicodedata

__all__ = ["fence_untrusted", "DEFAULT_MAX_UNTRUSTED_CHARS", "TRUNCATION_MARKER", "ANGLE_LOOKALIKES", "DATAMARK",
           "CARET_LOOKALIKES", "SPOTLIGHTS"]

#: default cap on one fenced text, in characters (after NFKC normalisation)
DEFAULT_MAX_UNTRUSTED_CHARS = 4000

#: appended (inside the fence) to a text cut at ``max_chars``; ``{n}`` is the number of characters cut
TRUNCATION_MARKER = " [... truncated {n} characters ...]"

#: characters escaped as ``\\uXXXX`` inside a fence: ``<``, ``>`` and look-alikes NFKC does not fold
ANGLE_LOOKALIKES = "<>\u2039\u203a\u2329\u232a\u27e8\u27e9\u3008\u3009\u300a\u300b\u276c\u276d\u276e\u276f" \
                   "\u02c2\u02c3\u1438\u1433\u2aa1\u2aa2\u226a\u226b\u00ab\u00bb"

#: line breaks ``json.dumps`` leaves raw; escaped too so a fence stays on one line
LINE_BREAKS = "\u0085\u2028\u2029"

#: the datamarking marker: it replaces every space of spotlighted text
DATAMARK = "^"

#: characters escaped as ``\\uXXXX`` in datamarked text: the marker and look-alikes NFKC does not fold to it
CARET_LOOKALIKES = "^\u02c6\u02c4\u2038\u2303\ua788\u0302\u1dba\u2227"

#: the spotlighting modes of :func:`fence_untrusted` (``None``: none)
SPOTLIGHTS = ("datamark", "base64")

_ESCAPE = {ord(c): f"\\u{ord(c):04x}" for c in ANGLE_LOOKALIKES + LINE_BREAKS}
_ESCAPE_MARKED = {**_ESCAPE, **{ord(c): f"\\u{ord(c):04x}" for c in CARET_LOOKALIKES}}


def fence_untrusted(text: str, nonce: str | None = None, *, max_chars: int | None = DEFAULT_MAX_UNTRUSTED_CHARS,
                    spotlight: str | None = None) -> str:
    """Wrap untrusted ``text`` as one escaped JSON string between nonce-tagged markers (module doc).

    Args:
        text: the untrusted text.
        nonce: the marker id (letters/digits); ``None``: a random 16-hex-digit one.
        max_chars: keep at most this many characters of the normalised text, then
            :data:`TRUNCATION_MARKER`; ``None``: no cap.
        spotlight: ``None``, ``"datamark"`` (spaces become :data:`DATAMARK`, the marker and its
            look-alikes escaped) or ``"base64"`` (the body is base64 of the UTF-8 text); module doc.
    """
    if not isinstance(text, str):
        raise TypeError(f"text: expected str, got {type(text).__name__}")
    if nonce is None:
        nonce = secrets.token_hex(8)
    elif not isinstance(nonce, str) or not nonce.isalnum() or not nonce.isascii():
        raise ValueError(f"nonce: expected a non-empty ASCII letters/digits str, got {nonce!r}")
    if max_chars is not None and (isinstance(max_chars, bool) or not isinstance(max_chars, numbers.Integral)
                                  or max_chars < 1):
        raise ValueError(f"max_chars: expected an int >= 1 or None, got {max_chars!r}")
    if spotlight is not None and spotlight not in SPOTLIGHTS:
        raise ValueError(f"spotlight: expected None or one of {SPOTLIGHTS}, got {spotlight!r}")
    t = unicodedata.normalize("NFKC", text)
    if max_chars is not None and len(t) > max_chars:
        t = t[:max_chars] + TRUNCATION_MARKER.format(n=len(t) - max_chars)
    if spotlight == "base64":
        body = base64.b64encode(t.encode("utf-8")).decode("ascii")
    elif spotlight == "datamark":
        body = json.dumps(t, ensure_ascii=False).translate(_ESCAPE_MARKED).replace(" ", DATAMARK)
    else:
        body = json.dumps(t, ensure_ascii=False).translate(_ESCAPE)
    return f"<<untrusted {nonce}>>{body}<</untrusted {nonce}>>"
