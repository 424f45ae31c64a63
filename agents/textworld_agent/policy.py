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
from prm_critic.text.envs.base import SamplingPolicy

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
class BasePolicy(SamplingPolicy):
    """The library's :class:`~prm_critic.text.envs.SamplingPolicy` with :data:`WEAK_PRIOR` as its prior.

    Args:
        prior: verb (or exact command prefix, e.g. ``"eat meal"``) -> weight; longest match wins.
        default: weight of commands that match no entry.
        repeat_penalty: factor applied to commands already in the history, in (0, 1].
    """

    prior: dict[str, float] = field(default_factory=lambda: dict(WEAK_PRIOR))
