"""What the critic-guided LangGraph searches share: budgets, the step-limit guard, events, results.

The searches (:func:`~prm_critic.langgraph.build_beam_search_graph`,
:class:`~prm_critic.langgraph.MCTSSearch`) explore a *forkable* tool environment through one
user callable, the same protocol for every search::

    expand(env_state, history, k) -> [(step_text, next_env_state), ...]     at most k items

``expand`` proposes next steps (each proposal is one policy call), executes each tool on a *copy*
of ``env_state`` (it must not mutate ``env_state``: a search keeps and revisits old states) and
returns the step texts with the forked next states. :func:`check_proposals` checks what it returned.
Every proposal is then scored once by the critic (one critic call per scored step).

* :class:`SearchBudget`: limits on policy calls and critic calls. It holds no counters (a graph
  search keeps its counts in the graph state, where reducers add the counts of parallel branches);
  it answers from the counts used so far::

      left      = min(limit_policy - policy_used, limit_critic - critic_used)   (None: unlimited)
      grant(n)  = min(n, left), at least 0                                      (calls one step may use)
      spent     = policy_used >= limit_policy  or  critic_used >= limit_critic

* :func:`too_few_steps`: LangGraph counts every super-step against ``recursion_limit`` and shows
  what is left as ``RemainingSteps`` (``r``); the last node of a run must still see ``r >= 1``, so a
  search whose next round needs ``n`` super-steps stops when ``r < n + 1``, with
  ``stop_reason="recursion_limit"`` instead of ``GraphRecursionError``.
* :func:`emit_event`: a search's progress on ``stream_mode="custom"`` (a no-op outside a graph run).
* :class:`SearchResult`: what a search found -- the best trajectory and its final env state, its
  score, the calls used, why the search stopped, and the events it emitted.

Stop reasons every search uses in the same sense: ``"solved"`` (``is_terminal`` held for a
state), ``"budget"`` (a call budget is spent), ``"recursion_limit"`` (another round would pass
``recursion_limit``); each search adds its own (beam: ``"dead_ends"``, ``"no_proposals"``,
``"max_depth"``; MCTS: ``"exhausted"``, ``"max_iterations"``).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from typing import Any, Mapping

from prm_critic import validate
from prm_critic._optional import require

__all__ = ["SearchBudget", "SearchResult", "check_proposals", "too_few_steps", "emit_event", "SHARED_STOP_REASONS"]

#: stop reasons with one meaning across the searches (each search adds its own)
SHARED_STOP_REASONS = ("solved", "budget", "recursion_limit")


def emit_event(event: dict) -> None:
    """Send ``event`` on ``stream_mode="custom"``; a no-op outside a running graph."""
    config = require("langgraph.config", "agents")
    try:
        writer = config.get_stream_writer()
    except RuntimeError:  # called outside a graph run
        return
    writer(event)


def too_few_steps(state: Mapping[str, Any], needed: int, *, key: str = "remaining_steps") -> bool:
    """True when ``state[key]`` (LangGraph's ``RemainingSteps``) is below ``needed``.

    ``needed`` is the super-steps of the search's next round plus the one LangGraph needs after it
    (its last node must see ``RemainingSteps >= 1``). A state without the key never stops here.
    """
    remaining = state.get(key)
    return remaining is not None and remaining < needed


@dataclass(frozen=True)
class SearchBudget:
    """Limits on the calls a search may make; ``None``: unlimited.

    Attributes:
        policy_calls: proposals the policy may make in total (``>= 1``).
        critic_calls: steps the critic may score in total (``>= 1``).

    Stateless: every method takes the counts used so far (see the module doc for the formulas).
    """

    policy_calls: int | None = None
    critic_calls: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "policy_calls",
                           validate.check_int("policy_calls", self.policy_calls, minimum=1, allow_none=True))
        object.__setattr__(self, "critic_calls",
                           validate.check_int("critic_calls", self.critic_calls, minimum=1, allow_none=True))

    @property
    def limited(self) -> bool:
        """True when at least one limit is set."""
        return self.policy_calls is not None or self.critic_calls is not None

    def left(self, policy_used: int = 0, critic_used: int = 0) -> int | None:
        """Calls still allowed of the tighter limit (``None``: unlimited; may be negative when over)."""
        lefts = [limit - used for limit, used in ((self.policy_calls, policy_used), (self.critic_calls, critic_used))
                 if limit is not None]
        return min(lefts) if lefts else None

    def grant(self, want: int, policy_used: int = 0, critic_used: int = 0) -> int:
        """How many of ``want`` calls fit in what is left (``>= 0``)."""
        left = self.left(policy_used, critic_used)
        return max(0, want if left is None else min(want, left))

    def spent(self, policy_used: int = 0, critic_used: int = 0) -> bool:
        """True when a limit is reached (``used >= limit``)."""
        return ((self.policy_calls is not None and policy_used >= self.policy_calls)
                or (self.critic_calls is not None and critic_used >= self.critic_calls))


@dataclass(frozen=True)
class SearchResult:
    """What a search found.

    Attributes:
        steps: the best trajectory's step texts, oldest first (``()`` when no step was taken).
        state: its final env state (the root state when no step was taken).
        score: its path score (the search's aggregate of ``step_scores``; ``None`` without steps).
        step_scores: the critic's score of each step (the search's ``head``).
        solved: ``is_terminal(state)`` held (the environment, not the critic, says so).
        stop_reason: why the search stopped (module doc).
        policy_calls: proposals made; critic_calls: steps scored.
        events: the custom stream events the search emitted, in order.
        stats: search-specific counts (beam: depth and pruning counts; MCTS: iterations, tree size).
    """

    steps: tuple[str, ...]
    state: Any
    score: float | None
    step_scores: tuple[float, ...]
    solved: bool
    stop_reason: str
    policy_calls: int
    critic_calls: int
    events: tuple[dict, ...] = ()
    stats: dict[str, Any] = field(default_factory=dict)


def _check_prior(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(float(value)) \
            or float(value) < 0:
        raise validate.ArgumentError(f"expand: expected a prior that is a finite number >= 0, got {value!r}")
    return float(value)


def check_proposals(proposals: Any, k: int, *, allow_prior: bool = False) -> list[tuple[str, Any, float | None]]:
    """Check what ``expand`` returned: at most ``k`` ``(step_text, next_env_state)`` pairs.

    With ``allow_prior``, ``(step_text, next_env_state, prior)`` triples are accepted too (a prior
    on every proposal or on none; priors finite, ``>= 0``, with a positive sum). Returns
    ``[(step_text, next_env_state, prior or None), ...]``.
    """
    what = ("(step_text, next_env_state) pairs or (step_text, next_env_state, prior) triples" if allow_prior
            else "(step_text, next_env_state) pairs")
    try:
        items = list(proposals)
    except TypeError:
        raise TypeError(f"expand: expected a sequence of {what}, got {proposals!r}") from None
    if len(items) > k:
        raise ValueError(f"expand: asked for at most k={k} proposals, got {len(items)}")
    sizes = (2, 3) if allow_prior else (2,)
    out: list[tuple[str, Any, float | None]] = []
    for p in items:
        if not (isinstance(p, (tuple, list)) and len(p) in sizes and isinstance(p[0], str)):
            kind = what if allow_prior else "(step_text: str, next_env_state) pairs"
            raise TypeError(f"expand: expected {kind}, got {p!r}")
        out.append((p[0], p[1], _check_prior(p[2]) if len(p) == 3 else None))
    with_prior = sum(prior is not None for _, _, prior in out)
    if with_prior not in (0, len(out)):
        raise validate.ArgumentError(f"expand: expected a prior on every proposal or on none, got {with_prior} "
                                     f"of {len(out)} with a prior")
    if with_prior and sum(prior or 0.0 for _, _, prior in out) <= 0:
        raise validate.ArgumentError(f"expand: expected priors with a positive sum, got "
                                     f"{[prior for _, _, prior in out]}")
    return out
