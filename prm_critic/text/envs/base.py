"""The forkable text environment protocol: what the labeller, the trainer's data and the searches need.

A text environment is a game played by text commands (TextWorld, TextWorldExpress, your own). It
implements :class:`TextEnv`, a small base class that keeps the command history and the rules every
environment shares; a subclass writes three methods::

    _reset()        -> TextStepResult          the intro (command "")
    _step(command)  -> TextStepResult          one command from the current state
    _spawn()        -> TextEnv                 a fresh environment of the same game (not reset)

and gets, from the base class::

    reset()                  the intro; history = []
    step(command)            one command; refused after the episode ended or before reset()
    valid_actions()          the commands valid in the current state (sorted, no duplicates)
    replay(commands)         reset() then step() each command; the last result
    fork()                   a new, independent environment at the same state:
                             _copy_state(other) where the subclass has a state copy,
                             otherwise other.replay(history)  (exact for a deterministic game)
    history, last, intro     the commands since reset, the last result, the intro's feedback

Episode end (``done``): the game says won or lost, or ``max_steps`` commands were issued (then
``won`` is false: an episode out of steps is over without a win). A result's ``score`` /
``max_score`` and ``info`` are game internals (privileged: for labels and oracles, never shown to
the agent or the critic); ``feedback`` and ``valid_actions`` are what the agent sees.

A fork must be *exact*: the forked copy gives the same results (feedback, valid actions, won /
lost, score) as the original would on the same continued commands. :func:`check_fork` tests that
for any environment; replaying is exact when the game is deterministic given its seed.

The policy the labeller and the searches sample commands from is any object with
``sample(valid_actions, history, rng, n=1, *, distinct=False, intro="", feedbacks=()) -> [command]``
(:class:`TextPolicy`); :class:`SamplingPolicy` is a weighted sampler over the valid actions.
"""

from __future__ import annotations

import abc
import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping, Protocol, Sequence, runtime_checkable

import numpy as np

from prm_critic import validate

__all__ = ["TextStepResult", "TextEnv", "TextPolicy", "SamplingPolicy", "ForkMismatchError", "check_fork"]


@dataclass(frozen=True)
class TextStepResult:
    """What one command did.

    Attributes:
        command: the command issued (``""`` for the intro of :meth:`TextEnv.reset`).
        feedback: the game's text (what the agent sees).
        admissible: the valid actions of the new state (sorted; what the agent may issue next).
        done: the episode is over (won, lost, or out of steps).
        won, lost: the game's outcome (``done`` without either: out of steps).
        score, max_score: the game's score (privileged; ``max_score`` 0 when the game has none).
        info: other game internals (privileged), JSON-serialisable.
    """

    command: str
    feedback: str
    admissible: tuple[str, ...]
    done: bool
    won: bool
    lost: bool
    score: float = 0.0
    max_score: float = 0.0
    info: Mapping[str, Any] = field(default_factory=dict)

    def same_as(self, other: "TextStepResult") -> bool:
        """True when ``other`` shows the same game state (every field but ``info``)."""
        return (self.command, self.feedback, tuple(self.admissible), self.done, self.won, self.lost,
                float(self.score), float(self.max_score)) == (
                other.command, other.feedback, tuple(other.admissible), other.done, other.won, other.lost,
                float(other.score), float(other.max_score))


def _check_result(env: "TextEnv", res: Any, what: str) -> TextStepResult:
    if not isinstance(res, TextStepResult):
        raise TypeError(f"{type(env).__name__}.{what}: expected a TextStepResult, got {type(res).__name__} {res!r:.80}")
    return res


class TextEnv(abc.ABC):
    """Base class of forkable text environments (module doc: what a subclass writes).

    Args:
        max_steps: commands per episode at most (``>= 1``); the episode is ``done`` after that many.
    """

    def __init__(self, *, max_steps: int = 50):
        self.max_steps = validate.check_int("max_steps", max_steps, minimum=1)
        self.history: list[str] = []
        self.last: TextStepResult | None = None
        self.intro = ""

    # ---- what a subclass writes
    @abc.abstractmethod
    def _reset(self) -> TextStepResult:
        """Start a new episode of the game; the intro."""

    @abc.abstractmethod
    def _step(self, command: str) -> TextStepResult:
        """Issue ``command`` in the current state (its own ``done`` need not count ``max_steps``)."""

    @abc.abstractmethod
    def _spawn(self) -> "TextEnv":
        """A fresh environment of the same game and settings (not reset)."""

    def _copy_state(self, other: "TextEnv") -> bool:
        """Copy this environment's game state into ``other`` (a spawn); False when there is no
        state copy (the default: :meth:`fork` replays the history instead)."""
        return False

    # ---- what the base class gives
    def reset(self) -> TextStepResult:
        res = _check_result(self, self._reset(), "_reset")
        self.history = []
        self.intro = res.feedback
        self.last = self._finish(res)
        return self.last

    def step(self, command: str) -> TextStepResult:
        if self.last is None:
            raise RuntimeError(f"{type(self).__name__}.step: called before reset()")
        if not isinstance(command, str) or not command.strip():
            raise validate.ArgumentError(f"command: expected a non-empty string, got {command!r}")
        if self.last.done:
            raise RuntimeError(f"command {command!r}: the episode is over (won={self.last.won}, "
                               f"lost={self.last.lost}, steps={len(self.history)}); call reset()")
        self.history.append(command)
        self.last = self._finish(_check_result(self, self._step(command), "_step"))
        return self.last

    def _finish(self, res: TextStepResult) -> TextStepResult:
        """The result with sorted valid actions and ``done`` after ``max_steps`` commands."""
        admissible = tuple(sorted(set(res.admissible)))
        done = bool(res.done or res.won or res.lost or len(self.history) >= self.max_steps)
        if admissible == res.admissible and done == res.done:
            return res
        return dataclasses.replace(res, admissible=admissible, done=done)

    def valid_actions(self) -> list[str]:
        """The commands valid in the current state (``[]`` once the episode is over)."""
        if self.last is None:
            raise RuntimeError(f"{type(self).__name__}.valid_actions: called before reset()")
        return [] if self.last.done else list(self.last.admissible)

    def replay(self, commands: Sequence[str]) -> TextStepResult:
        """Reset and issue ``commands``; the last result (the intro when ``commands`` is empty)."""
        res = self.reset()
        for c in commands:
            res = self.step(c)
        return res

    def fork(self) -> "TextEnv":
        """A new, independent environment at this state (a state copy where the subclass has one,
        otherwise a replay of the history). Refused before :meth:`reset`."""
        if self.last is None:
            raise RuntimeError(f"{type(self).__name__}.fork: called before reset()")
        other = self._spawn()
        if not isinstance(other, TextEnv):
            raise TypeError(f"{type(self).__name__}._spawn: expected a TextEnv, got {type(other).__name__}")
        other.max_steps = self.max_steps
        if self._copy_state(other):
            other.history, other.last, other.intro = list(self.history), self.last, self.intro
        else:
            other.replay(list(self.history))
        return other

    @property
    def won(self) -> bool:
        return bool(self.last is not None and self.last.won)

    @property
    def lost(self) -> bool:
        return bool(self.last is not None and self.last.lost)

    @property
    def done(self) -> bool:
        return bool(self.last is not None and self.last.done)

    def close(self) -> None:
        """Release what the environment holds (a process, a file); the default holds nothing."""
        return None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class ForkMismatchError(AssertionError):
    """A fork gave another result than the original on the same continued commands."""


def check_fork(env: TextEnv, prefix: Sequence[str], continuation: Sequence[str]) -> int:
    """Check that forking ``env`` after ``prefix`` is exact: the fork and the original, both
    continued with ``continuation`` (stopping where the episode ends), give the same results.

    Also checks the fork is independent (stepping the fork does not move the original). Returns the
    number of continued commands compared; raises :class:`ForkMismatchError` naming the first
    command whose results differ.
    """
    env.replay(list(prefix))
    fork = env.fork()
    try:
        if not fork.last or not env.last or not fork.last.same_as(env.last) or fork.history != env.history:
            raise ForkMismatchError(f"{type(env).__name__}: the fork after {list(prefix)} starts at another state: "
                                    f"{fork.last!r:.200} != {env.last!r:.200}")
        n = 0
        for c in continuation:
            if env.last.done:
                break
            a = fork.step(c)
            b = env.step(c)
            n += 1
            if not a.same_as(b):
                raise ForkMismatchError(f"{type(env).__name__}: after {list(prefix)}, command {n} {c!r}: the fork "
                                        f"gave {a!r:.300}, the original {b!r:.300}")
        return n
    finally:
        fork.close()


@runtime_checkable
class TextPolicy(Protocol):
    """What the labeller and the searches sample commands from (module doc)."""

    def sample(self, admissible: Sequence[str], history: Sequence[str], rng: np.random.Generator, n: int = 1, *,
               distinct: bool = False, intro: str = "", feedbacks: Sequence[str] = ()) -> list[str]: ...


@dataclass
class SamplingPolicy:
    """Samples commands among the valid ones, with a per-verb weight and a repeat penalty::

        p(c | history) ∝ w(c) * r^[c already issued]

    Args:
        prior: verb or command prefix (``"take"``, ``"eat meal"``) -> weight; the longest match wins.
            Empty (the default): every command weighs ``default`` (uniform).
        default: the weight of commands that match no entry (``> 0``).
        repeat_penalty: ``r``, the factor of commands already in the history, in (0, 1].
    """

    prior: dict[str, float] = field(default_factory=dict)
    default: float = 1.0
    repeat_penalty: float = 0.3

    def __post_init__(self):
        self.repeat_penalty = validate.check_number("repeat_penalty", self.repeat_penalty, low=0.0, high=1.0)
        if self.repeat_penalty <= 0:
            raise validate.ArgumentError(f"repeat_penalty: expected a float in (0, 1], got {self.repeat_penalty!r}")
        self.default = validate.check_number("default", self.default, positive=True)
        for k, v in self.prior.items():
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not v > 0:
                raise validate.ArgumentError(f"prior: expected positive weights, got {k!r}: {v!r}")
        self._keys = sorted(self.prior, key=len, reverse=True)

    def weight(self, command: str) -> float:
        for k in self._keys:
            if command == k or command.startswith(k + " "):
                return self.prior[k]
        return self.default

    def probs(self, admissible: Sequence[str], history: Sequence[str] = ()) -> np.ndarray:
        """Sampling probabilities over ``admissible``, shape ``(A,)``."""
        if len(admissible) == 0:
            raise validate.ArgumentError("admissible: expected at least one valid action, got none")
        seen = set(history)
        w = np.array([self.weight(c) * (self.repeat_penalty if c in seen else 1.0) for c in admissible])
        return w / w.sum()

    def sample(self, admissible: Sequence[str], history: Sequence[str], rng: np.random.Generator,
               n: int = 1, *, distinct: bool = False, intro: str = "", feedbacks: Sequence[str] = ()) -> list[str]:
        """Draw ``n`` commands (one policy call each); ``distinct``: without replacement (at most
        ``len(admissible)``). ``intro`` / ``feedbacks`` (the game's texts, which a language-model
        policy reads) are not used: this policy sees only the commands."""
        n = validate.check_int("n", n, minimum=1)
        adm = list(admissible)
        p = self.probs(adm, history)
        if distinct:
            idx = rng.choice(len(adm), size=min(n, len(adm)), replace=False, p=p)
        else:
            idx = rng.choice(len(adm), size=n, replace=True, p=p)
        return [adm[i] for i in idx]
