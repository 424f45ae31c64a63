"""The text critic base class: ``BaseCritic`` over a sequence of :class:`TextStep`."""

from __future__ import annotations

import abc
from typing import Sequence

from prm_critic.critic import BaseCritic, StepScores
from prm_critic.text.steps import TextStep

__all__ = ["TextCritic"]


class TextCritic(BaseCritic[Sequence[TextStep]]):
    """A critic of agent steps: ``score(steps)`` with ``steps`` a sequence of ``B`` :class:`TextStep`.

    Every step carries the context so far (prompt and earlier steps) and its own text; the critic
    returns :class:`~prm_critic.critic.StepScores` of shape ``(B,)``. ``obs_dim`` is ``None``.
    """

    @abc.abstractmethod
    def score(self, steps: Sequence[TextStep]) -> StepScores:
        """Score ``B`` text steps; returns progress and success ``(B,)``."""
