"""The offline base policy: sample among the admissible commands, with a weak verb prior.

``p(c | history) ∝ w(verb(c)) * r^[c already issued]`` over the admissible commands ``c``, where
``w`` is a small per-verb table (taking, opening, moving, preparing and eating the meal are a bit
more likely; examining, dropping, putting away and eating ingredients are less likely) and
``r = repeat_penalty`` discourages re-issuing a command. It knows nothing about the recipe; it is
a cheap stand-in for an LLM proposer: :class:`~agents.textworld_agent.llm_policy.LLMPolicy` is the
real one (a chat model constrained to the admissible commands), and any LangChain chat model can
replace it in the graph, see :mod:`agents.textworld_agent.graph`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

__all__ = ["BasePolicy", "UNIFORM_PRIOR", "WEAK_PRIOR"]

#: verb -> weight; anything else gets ``default``
WEAK_PRIOR: dict[str, float] = {
    "take": 2.0, "open": 1.5, "go": 1.5, "cook": 1.0, "slice": 1.0, "dice": 1.0, "chop": 1.0,
    "prepare": 2.0, "eat meal": 3.0, "examine cookbook": 1.0, "read": 1.0,
    "examine": 0.3, "look": 0.3, "inventory": 0.3, "eat": 0.3, "drop": 0.3, "put": 0.3,
    "insert": 0.3, "close": 0.3, "unlock": 1.0, "lock": 0.2,
}
UNIFORM_PRIOR: dict[str, float] = {}


@dataclass
class BasePolicy:
    """Samples commands among the admissible ones.

    Args:
        prior: verb (or exact command prefix, e.g. ``"eat meal"``) -> weight; longest match wins.
        default: weight of commands that match no entry.
        repeat_penalty: factor applied to commands already in the history, in (0, 1].
    """

    prior: dict[str, float] = field(default_factory=lambda: dict(WEAK_PRIOR))
    default: float = 1.0
    repeat_penalty: float = 0.3

    def __post_init__(self):
        if not 0 < self.repeat_penalty <= 1:
            raise ValueError(f"repeat_penalty: expected a float in (0, 1], got {self.repeat_penalty!r}")
        if not self.default > 0:
            raise ValueError(f"default: expected a float > 0, got {self.default!r}")
        for k, v in self.prior.items():
            if not v > 0:
                raise ValueError(f"prior: expected positive weights, got {k!r}: {v!r}")
        self._keys = sorted(self.prior, key=len, reverse=True)

    def weight(self, command: str) -> float:
        for k in self._keys:
            if command == k or command.startswith(k + " "):
                return self.prior[k]
        return self.default

    def probs(self, admissible: Sequence[str], history: Sequence[str] = ()) -> np.ndarray:
        """Sampling probabilities over ``admissible``, shape ``(A,)``."""
        if len(admissible) == 0:
            raise ValueError("admissible: expected at least one admissible command, got none")
        seen = set(history)
        w = np.array([self.weight(c) * (self.repeat_penalty if c in seen else 1.0) for c in admissible])
        return w / w.sum()

    def sample(self, admissible: Sequence[str], history: Sequence[str], rng: np.random.Generator,
               n: int = 1, *, distinct: bool = False, intro: str = "", feedbacks: Sequence[str] = ()) -> list[str]:
        """Draw ``n`` commands (one policy call each). ``distinct``: without replacement (at most A).
        ``intro`` and ``feedbacks`` (the game's texts, read by :class:`~agents.textworld_agent.llm_policy.LLMPolicy`)
        are not used: this policy sees only the commands."""
        if n < 1:
            raise ValueError(f"n: expected an int >= 1, got {n!r}")
        adm = list(admissible)
        p = self.probs(adm, history)
        if distinct:
            k = min(n, len(adm))
            idx = rng.choice(len(adm), size=k, replace=False, p=p)
        else:
            idx = rng.choice(len(adm), size=n, replace=True, p=p)
        return [adm[i] for i in idx]
