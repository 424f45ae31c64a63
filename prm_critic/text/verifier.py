"""Verifier critic: step scores from execution feedback, no model.

What is checked (``result`` = the text after the last ``"result: "`` line written by
:func:`~prm_critic.text.format_tool_step`, or the whole step text if there is none):

* **lost**: explicit ``feedback["lost"]`` or ``result`` matches a ``lost_patterns`` regex
  (TextWorld's ``*** You lost! ***``, "You have died", ...). Also any earlier step that lost: the
  game is over.
* **won**: explicit ``feedback["won"]`` or ``result`` matches ``won_patterns`` (TextWorld's
  ``*** The End ***``, "You won"), and not lost.
* **error**: explicit ``feedback["error"]`` or ``result`` matches ``error_patterns`` (a result
  starting with ``error``, a Python traceback / ``SomethingError:``, parser refusals such as
  "I don't understand", "You can't", "That's not a verb I recognise").

Scores, per step (all in [0, 1])::

    success  = 1                    if won
             = 0                    if lost (this step or earlier)
             = error_success        if error            (default 0.2)
             = neutral_success      otherwise           (default 0.5: no evidence either way)

    progress = 1                                     if won
             = feedback["progress"]                  if given
             = feedback["score"] / feedback["max_score"]   if given (TextWorld score)
             = n_ok / (n_ok + half_life)             otherwise

where ``n_ok`` counts distinct steps so far (history + this step) that were not errors and
``half_life`` (default 10) is the number of good steps at which progress reaches 0.5: a weak,
monotone "the agent keeps doing valid things" heuristic. Patterns are case-insensitive regexes
and fully configurable.
"""

from __future__ import annotations

import math
import re
from typing import Any, Mapping, Sequence

import numpy as np

from prm_critic.critic import StepScores
from prm_critic.text.contract import check_text_steps
from prm_critic.text.critic import TextCritic
from prm_critic.text.steps import TextStep

__all__ = ["VerifierCritic", "DEFAULT_ERROR_PATTERNS", "DEFAULT_WON_PATTERNS", "DEFAULT_LOST_PATTERNS", "result_text"]

DEFAULT_ERROR_PATTERNS = (
    r"^\s*error\b",
    r"Traceback \(most recent call last\)",
    r"\b[A-Z]\w*(?:Error|Exception):",
    r"I don't understand",
    r"I didn't understand",
    r"That's not a verb I recognise",
    r"\bYou can't\b",
    r"You don't see any such thing",
    r"\bnot a valid\b",
    r"\bcommand not found\b",
)
DEFAULT_WON_PATTERNS = (r"\*\*\*\s*The End\s*\*\*\*", r"\bYou (?:have )?won\b")
DEFAULT_LOST_PATTERNS = (r"\*\*\*\s*You lost!?\s*\*\*\*", r"\bYou lost!", r"\bYou have died\b", r"\bYou are dead\b")

_FEEDBACK_KEYS = {"won", "lost", "error", "progress", "score", "max_score"}


def result_text(step: str) -> str:
    """The tool result part of a step written by ``format_tool_step``; else the whole text."""
    idx = step.rfind("\nresult: ")
    if idx >= 0:
        return step[idx + len("\nresult: "):]
    if step.startswith("result: "):
        return step[len("result: "):]
    return step


def _compile(patterns: Any, name: str) -> list[re.Pattern]:
    if isinstance(patterns, (str, bytes)) or not isinstance(patterns, Sequence):
        raise TypeError(f"{name}: expected a sequence of regex strings, got {type(patterns).__name__}")
    out = []
    for i, p in enumerate(patterns):
        if not isinstance(p, str):
            raise TypeError(f"{name}[{i}]: expected a regex string, got {type(p).__name__}")
        try:
            out.append(re.compile(p, re.IGNORECASE | re.MULTILINE))
        except re.error as exc:
            raise ValueError(f"{name}[{i}]: invalid regex {p!r} ({exc})") from None
    return out


def _prob(v: Any, name: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not 0.0 <= v <= 1.0:
        raise ValueError(f"{name}: expected a float in [0, 1], got {v!r}")
    return float(v)


class VerifierCritic(TextCritic):
    """Rule-based critic over execution feedback (see the module docstring for the exact rules).

    Args:
        error_patterns / won_patterns / lost_patterns: case-insensitive regexes matched against a
            step's result text.
        error_success: success of a step whose result is an error.
        neutral_success: success of a step with no evidence.
        half_life: good steps at which the progress heuristic reaches 0.5 (> 0).
    """

    def __init__(self, *, error_patterns: Sequence[str] = DEFAULT_ERROR_PATTERNS,
                 won_patterns: Sequence[str] = DEFAULT_WON_PATTERNS, lost_patterns: Sequence[str] = DEFAULT_LOST_PATTERNS,
                 error_success: float = 0.2, neutral_success: float = 0.5, half_life: float = 10.0):
        self.error_patterns = _compile(error_patterns, "error_patterns")
        self.won_patterns = _compile(won_patterns, "won_patterns")
        self.lost_patterns = _compile(lost_patterns, "lost_patterns")
        self.error_success = _prob(error_success, "error_success")
        self.neutral_success = _prob(neutral_success, "neutral_success")
        if isinstance(half_life, bool) or not isinstance(half_life, (int, float)) or not math.isfinite(half_life) or half_life <= 0:
            raise ValueError(f"half_life: expected a number > 0, got {half_life!r}")
        self.half_life = float(half_life)

    # ------------------------------------------------------------------ rules
    def _match(self, pats: list[re.Pattern], text: str) -> bool:
        return any(p.search(text) for p in pats)

    def is_error(self, step: str) -> bool:
        return self._match(self.error_patterns, result_text(step))

    def is_lost(self, step: str) -> bool:
        return self._match(self.lost_patterns, result_text(step))

    def is_won(self, step: str) -> bool:
        r = result_text(step)
        return self._match(self.won_patterns, r) and not self._match(self.lost_patterns, r)

    def verify(self, step: TextStep, feedback: Mapping[str, Any] | None = None, *, name: str = "feedback") -> dict[str, float]:
        """The verdict of one step: ``{"progress", "success", "error", "won", "lost"}``."""
        fb = dict(feedback or {})
        unknown = sorted(set(fb) - _FEEDBACK_KEYS)
        if unknown:
            raise ValueError(f"{name}: unknown key(s) {unknown}, expected a subset of {sorted(_FEEDBACK_KEYS)}")
        for k in ("won", "lost", "error"):
            if k in fb and not isinstance(fb[k], (bool, np.bool_)):
                raise TypeError(f"{name}[{k!r}]: expected a bool, got {fb[k]!r}")
        lost = bool(fb["lost"]) if "lost" in fb else self.is_lost(step.step)
        lost = lost or any(self.is_lost(h) for h in step.history)
        won = (bool(fb["won"]) if "won" in fb else self.is_won(step.step)) and not lost
        error = bool(fb["error"]) if "error" in fb else self.is_error(step.step)

        if won:
            success = 1.0
        elif lost:
            success = 0.0
        elif error:
            success = self.error_success
        else:
            success = self.neutral_success

        if won:
            progress = 1.0
        elif "progress" in fb:
            progress = _prob(fb["progress"], f"{name}['progress']")
        elif "score" in fb or "max_score" in fb:
            s, m = fb.get("score"), fb.get("max_score")
            if (not isinstance(s, (int, float)) or isinstance(s, bool) or not isinstance(m, (int, float))
                    or isinstance(m, bool) or m <= 0 or not 0 <= s <= m):
                raise ValueError(f"{name}: expected 0 <= score <= max_score with max_score > 0, got score={s!r}, max_score={m!r}")
            progress = float(s) / float(m)
        else:
            seen, n_ok = set(), 0
            for i, h in enumerate((*step.history, step.step)):
                is_err = error if i == len(step.history) else self.is_error(h)
                if not is_err and h not in seen:
                    n_ok += 1
                seen.add(h)
            progress = n_ok / (n_ok + self.half_life)
        return {"progress": progress, "success": success, "error": float(error), "won": float(won), "lost": float(lost)}

    def score(self, steps: Sequence[TextStep], feedback: Sequence[Mapping[str, Any] | None] | None = None) -> StepScores:
        """Score ``B`` steps; ``feedback`` optionally gives one mapping (or None) per step with keys
        ``won``, ``lost``, ``error`` (bools), ``progress`` (float) or ``score`` + ``max_score``."""
        steps = check_text_steps(steps)
        if feedback is None:
            feedback = [None] * len(steps)
        elif isinstance(feedback, Mapping) or not isinstance(feedback, Sequence) or len(feedback) != len(steps):
            got = type(feedback).__name__ if not isinstance(feedback, Sequence) or isinstance(feedback, Mapping) else f"{len(feedback)} items"
            raise ValueError(f"feedback: expected None or a sequence of {len(steps)} mappings (one per step), got {got}")
        rows = [self.verify(s, f, name=f"feedback[{i}]") for i, (s, f) in enumerate(zip(steps, feedback))]
        col = lambda k: np.asarray([r[k] for r in rows], np.float32)  # noqa: E731
        return StepScores(col("progress"), col("success"), {"error": col("error"), "won": col("won"), "lost": col("lost")})
