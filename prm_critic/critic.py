"""The critic interface shared by robot state critics, text critics and exported ONNX critics.

A critic is batch-first: a batch of ``B`` steps goes in, per-step scores come out.

* State critics (robots): a step is the critic-input vector of one state, so the batch is a
  float array of shape ``(B, obs_dim)``.
* Text critics (agents): a step is a :class:`prm_critic.text.TextStep` (the context so far plus the
  step's text), so the batch is a sequence of ``B`` of them.

Every critic returns :class:`StepScores` with two arrays of shape ``(B,)``, values in [0, 1]:

* ``progress``: how far along the task this step is (subgoal progress);
* ``success``: the probability that the task can still be completed from this step ("promise").

Types: :class:`BaseCritic` is generic in the type of the batch it scores, ``BaseCritic[StepsT]``.
:class:`StateCritic` is ``BaseCritic[numpy.typing.ArrayLike]`` (the ``(B, obs_dim)`` batch) and
:class:`prm_critic.text.TextCritic` is ``BaseCritic[Sequence[TextStep]]``, so a type checker
(mypy, pyright) rejects a text batch given to a state critic and the other way round. A plain
``BaseCritic`` annotation accepts any critic. ``StepsT`` is contravariant: a critic that accepts
any array-like is also a ``BaseCritic[numpy.ndarray]``.
"""

from __future__ import annotations

import abc
import asyncio
from dataclasses import dataclass, field
from typing import Any, Generic, Sequence, TypeVar

import numpy as np
import numpy.typing as npt

__all__ = ["StepScores", "BaseCritic", "StateCritic", "StepsT", "check_critic", "as_obs_batch"]

#: The type of a batch of steps a critic scores (contravariant: it is only ever an input).
StepsT = TypeVar("StepsT", contravariant=True)


@dataclass(frozen=True)
class StepScores:
    """Per-step scores for a batch of ``B`` steps.

    Attributes:
        progress: float32 array, shape ``(B,)``, in [0, 1].
        success: float32 array, shape ``(B,)``, in [0, 1].
        extra: optional named per-step arrays of shape ``(B,)`` (e.g. raw logits).
    """

    progress: np.ndarray
    success: np.ndarray
    extra: dict[str, np.ndarray] = field(default_factory=dict)

    def __post_init__(self):
        p = np.asarray(self.progress, dtype=np.float32).reshape(-1)
        s = np.asarray(self.success, dtype=np.float32).reshape(-1)
        if p.shape != s.shape:
            raise ValueError(f"progress and success must have the same shape (B,), got {p.shape} and {s.shape}")
        object.__setattr__(self, "progress", p)
        object.__setattr__(self, "success", s)

    def __len__(self) -> int:
        return int(self.progress.shape[0])

    def get(self, head: str) -> np.ndarray:
        """Return the head named ``head`` (``"progress"``, ``"success"`` or a key of ``extra``)."""
        if head == "progress":
            return self.progress
        if head == "success":
            return self.success
        if head in self.extra:
            return self.extra[head]
        raise KeyError(f"head: expected 'progress', 'success' or one of {sorted(self.extra)}, got {head!r}")

    @staticmethod
    def concat(parts: Sequence["StepScores"]) -> "StepScores":
        """Concatenate several batches along the batch axis."""
        if not parts:
            return StepScores(np.zeros(0, np.float32), np.zeros(0, np.float32))
        keys = set(parts[0].extra)
        return StepScores(
            np.concatenate([p.progress for p in parts]),
            np.concatenate([p.success for p in parts]),
            {k: np.concatenate([p.extra[k] for p in parts]) for k in keys if all(k in p.extra for p in parts)},
        )


class BaseCritic(abc.ABC, Generic[StepsT]):
    """A process reward model: scores each step of a trajectory.

    ``BaseCritic[StepsT]`` scores a batch of type ``StepsT``. Subclasses implement :meth:`score`;
    state critics derive from :class:`StateCritic`, text critics from
    :class:`prm_critic.text.TextCritic`. ``obs_dim`` is set by state critics (``None`` for text).
    """

    #: Size of one step's input vector for state critics; ``None`` for text critics.
    obs_dim: int | None = None

    @abc.abstractmethod
    def score(self, steps: StepsT) -> StepScores:
        """Score a batch of ``B`` steps.

        Args:
            steps: state critics: array-like of shape ``(B, obs_dim)``; text critics: a sequence
                of ``B`` :class:`~prm_critic.text.TextStep`.

        Returns:
            :class:`StepScores` with ``progress`` and ``success`` of shape ``(B,)``.
        """

    async def ascore(self, steps: StepsT) -> StepScores:
        """Score a batch of ``B`` steps without blocking the event loop.

        The same batch and result as :meth:`score` (``progress`` and ``success`` of shape ``(B,)``).
        The default runs :meth:`score` in a worker thread (:func:`asyncio.to_thread`), so a critic
        that calls a remote model or a slow network lets other tasks run meanwhile; critics with a
        native async client override it (e.g. :class:`~prm_critic.text.LLMJudgeCritic` with a chat
        model's ``ainvoke``). The async paths of the LangGraph critic node and middleware call it.
        """
        return await asyncio.to_thread(self.score, steps)

    def __call__(self, steps: StepsT) -> StepScores:
        return self.score(steps)

    def potential(self, steps: StepsT, head: str = "progress") -> np.ndarray:
        """Shorthand for ``self.score(steps).get(head)``; shape ``(B,)``."""
        return self.score(steps).get(head)


class StateCritic(BaseCritic[npt.ArrayLike]):
    """A critic of robot states: ``score(x)`` with ``x`` array-like of shape ``(B, obs_dim)``.

    Subclasses set ``obs_dim`` (the width of one critic input) and implement :meth:`score`
    (usually starting with :func:`as_obs_batch`).
    """

    #: Width of one critic input.
    obs_dim: int

    @abc.abstractmethod
    def score(self, steps: npt.ArrayLike) -> StepScores:
        """Score ``steps`` of shape ``(B, obs_dim)``; returns progress and success ``(B,)``."""


def as_obs_batch(obs: Any, obs_dim: int | None, *, name: str = "obs") -> np.ndarray:
    """Validate and convert a batch of state-critic inputs to float32 ``(B, obs_dim)``.

    Raises one clear error naming ``name``, the value and what was expected for: non-numeric dtype,
    wrong number of dimensions, wrong width, NaN or inf.
    """
    arr = np.asarray(obs)
    if arr.dtype == object or not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)
                                   or arr.dtype == np.bool_):
        raise TypeError(f"{name}: expected a real-valued numeric array of shape (B, {obs_dim}), got dtype {arr.dtype}")
    if arr.ndim != 2:
        raise ValueError(f"{name}: expected shape (B, {obs_dim}) (batch-first, 2-D), got shape {arr.shape}")
    if obs_dim is not None and arr.shape[1] != obs_dim:
        raise ValueError(f"{name}: expected shape (B, {obs_dim}), got shape {arr.shape} (width {arr.shape[1]} != {obs_dim})")
    arr = arr.astype(np.float32, copy=False)
    if not np.all(np.isfinite(arr)):
        bad = np.argwhere(~np.isfinite(arr))[0]
        raise ValueError(f"{name}: expected finite values, got {arr[tuple(bad)]} at index {tuple(int(i) for i in bad)}")
    return arr


def _slice(steps: Any, i: int) -> Any:
    if isinstance(steps, np.ndarray):
        return steps[i : i + 1]
    return [steps[i]]


def check_critic(critic: BaseCritic[StepsT], steps: StepsT, *, rtol: float = 1e-4, atol: float = 1e-5) -> StepScores:
    """Check that ``critic`` follows the interface; return its batched scores.

    Checks: the batched call returns :class:`StepScores` of shape ``(B,)`` per head, values are
    finite and in [0, 1], and each element of the batched call agrees with a single-step call on the
    same input (within ``rtol``/``atol``). Raises ``AssertionError`` naming the first violation.
    """
    n = len(steps)  # type: ignore[arg-type]  # every batch type of a critic has a length
    if n == 0:
        raise ValueError("steps: expected a non-empty batch, got 0 steps")
    batched = critic.score(steps)
    if not isinstance(batched, StepScores):
        raise AssertionError(f"critic.score must return StepScores, got {type(batched).__name__}")
    for head in ("progress", "success"):
        v = batched.get(head)
        if v.shape != (n,):
            raise AssertionError(f"{head}: expected shape ({n},), got {v.shape}")
        if not np.all(np.isfinite(v)):
            raise AssertionError(f"{head}: got non-finite scores {v}")
        if np.any(v < 0) or np.any(v > 1):
            raise AssertionError(f"{head}: expected values in [0, 1], got min {v.min()} max {v.max()}")
    for i in range(n):
        single = critic.score(_slice(steps, i))
        for head in ("progress", "success"):
            a, b = batched.get(head)[i], single.get(head)
            if b.shape != (1,):
                raise AssertionError(f"{head}: single-step call returned shape {b.shape}, expected (1,)")
            if not np.allclose(a, b[0], rtol=rtol, atol=atol):
                raise AssertionError(
                    f"{head}: batched score {a!r} at index {i} differs from the single-step score {b[0]!r}"
                )
    return batched
