"""What the critic-guided LangGraph searches share: budgets, the step-limit guard, events, results.

The searches (:func:`~prm_critic.langgraph.build_beam_search_graph`,
:class:`~prm_critic.langgraph.MCTSSearch`) explore a *forkable* tool environment through one
user callable, the same protocol for every search::

    expand(env_state, history, k) -> [(step_text, next_env_state), ...]     at most k items

``expand`` proposes next steps (each proposal is one policy call), executes each tool on a *copy*
of ``env_state`` (it must not mutate ``env_state``: a search keeps and revisits old states) and
returns the step texts with the forked next states. :func:`call_expand` (sync runs) and
:func:`acall_expand` (async runs: an async ``expand`` is awaited) call it and check what it returned
with :func:`check_proposals`.
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
* :func:`check_input`: the one check of a search's input ``{"prompt": str, "root": env state}``.
* :class:`GraphSearch`: the shape of every search object -- a LangChain ``Runnable``
  ``Search(expand, critic, config=None, *, checkpointer=None, **config_fields)`` whose ``invoke`` /
  ``ainvoke`` run its compiled graph and return a :class:`SearchResult`. A search subclass names its
  frozen config (``config_type``) and defines ``build_graph`` and ``result``.

Budgets have one vocabulary in every search's config: ``policy_budget`` (proposals) and
``critic_budget`` (scored steps), both ``None`` for unlimited, read through :class:`SearchBudget`.

Stop reasons every search uses in the same sense: ``"solved"`` (``is_terminal`` held for a
state), ``"budget"`` (a call budget is spent), ``"recursion_limit"`` (another round would pass
``recursion_limit``); each search adds its own (beam: ``"dead_ends"``, ``"no_proposals"``,
``"max_depth"``; MCTS: ``"exhausted"``, ``"max_iterations"``).
"""

from __future__ import annotations

import asyncio
import inspect
import math
import numbers
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Mapping

from prm_critic import validate
from prm_critic._optional import require

if TYPE_CHECKING:
    from langchain_core.runnables import Runnable, RunnableLambda
    from langgraph.managed import RemainingSteps
else:  # through require(), so a missing package names the extra to install
    Runnable = require("langchain_core.runnables", "agents").Runnable
    RunnableLambda = require("langchain_core.runnables", "agents").RunnableLambda
    RemainingSteps = require("langgraph.managed", "agents").RemainingSteps

__all__ = ["SearchBudget", "SearchResult", "GraphSearch", "check_input", "check_proposals", "call_expand",
           "acall_expand", "too_few_steps", "emit_event", "SHARED_STOP_REASONS"]

#: a search's ``expand(env_state, history, k) -> [(step_text, next_env_state), ...]``
Expand = Callable[[Any, tuple, int], Any]

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


def call_expand(expand: Any, env_state: Any, history: tuple[str, ...], k: int, *,
                allow_prior: bool = False) -> list[tuple[str, Any, float | None]]:
    """``expand(env_state, history, k)`` in a sync run, checked by :func:`check_proposals`; an
    awaitable (an async ``expand``) is refused, naming ``ainvoke``."""
    raw = expand(env_state, history, k)
    if inspect.isawaitable(raw):
        if inspect.iscoroutine(raw):
            raw.close()
        raise TypeError("expand: returned an awaitable (an async expand); run the search with ainvoke / astream, "
                        "or pass a sync expand")
    return check_proposals(raw, k, allow_prior=allow_prior)


async def acall_expand(expand: Any, env_state: Any, history: tuple[str, ...], k: int, *,
                       allow_prior: bool = False) -> list[tuple[str, Any, float | None]]:
    """:func:`call_expand` in an async run: an async ``expand`` is awaited, a sync one runs in a worker thread."""
    if inspect.iscoroutinefunction(expand):
        raw = await expand(env_state, history, k)
    else:
        raw = await asyncio.to_thread(expand, env_state, history, k)
        if inspect.isawaitable(raw):
            raw = await raw
    return check_proposals(raw, k, allow_prior=allow_prior)


def check_input(state: Any) -> str:
    """The task prompt of a search input ``{"prompt": str, "root": env state}`` (``prompt`` may be left out)."""
    if not isinstance(state, Mapping):
        raise TypeError(f"input: expected a mapping {{'prompt': str, 'root': env state}}, got {type(state).__name__}")
    if "root" not in state:
        raise KeyError("root: the input must hold the initial env state under 'root' (and the task under 'prompt')")
    prompt = state.get("prompt", "")
    if not isinstance(prompt, str):
        raise TypeError(f"prompt: expected str, got {type(prompt).__name__} {prompt!r}")
    return prompt


def _recursion_limit(config: Any) -> int | None:
    if config is None:
        return None
    if not isinstance(config, Mapping):
        raise TypeError(f"config: expected a RunnableConfig mapping or None, got {type(config).__name__} {config!r}")
    if "recursion_limit" not in config:
        return None
    return validate.check_int("recursion_limit", config["recursion_limit"], minimum=1)


def _no_kwargs(method: str, kwargs: Mapping[str, Any]) -> None:
    if kwargs:
        raise TypeError(f"{method}: expected (input, config) only, got keyword arguments {sorted(kwargs)}")


class GraphSearch(Runnable[Mapping[str, Any], SearchResult]):
    """A critic-guided search over a forkable tool environment: one object, sync and async.

    ``search.invoke({"prompt": task, "root": env_state}, config)`` and ``await search.ainvoke(...)``
    run the compiled graph (``search.graph``; stream it with ``stream_mode="custom"`` for live
    progress) and return a :class:`SearchResult`. A LangChain ``Runnable`` (``batch``, ``abatch``,
    ``with_config`` work); ``config`` is the graph's run config (``recursion_limit``, callbacks,
    ``configurable``). ``recursion_limit=1`` (with which LangGraph finishes no node) returns the root
    with ``stop_reason="recursion_limit"`` without a run.

    Args:
        expand: ``expand(env_state, history, k) -> [(step_text, next_env_state), ...]``, at most ``k``
            items, must not mutate ``env_state`` (fork it); a coroutine function is awaited in async
            runs (and refused by ``invoke``).
        critic: a text :class:`~prm_critic.BaseCritic`.
        config: the search's config (``config_type``); or pass its fields as keyword arguments (not both).
        checkpointer: passed to ``compile`` (env states must then be serializable).

    A subclass sets ``config_type`` (a frozen dataclass checked in ``__post_init__``) and
    ``event_type`` (the ``"type"`` of its custom stream events) and defines :meth:`build_graph`
    (the uncompiled graph) and :meth:`result` (its final state and events to a ``SearchResult``).
    """

    config_type: ClassVar[type]
    event_type: ClassVar[str]

    def __init__(self, expand: Any, critic: Any, config: Any = None, *, checkpointer: Any = None, **params: Any):
        self.config = validate.config_from(self.config_type, config, **params)
        self.expand, self.critic = expand, critic
        self.graph = self.build_graph(expand, critic, self.config).compile(checkpointer=checkpointer)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({type(self.critic).__name__}, {self.config!r})"

    def build_graph(self, expand: Any, critic: Any, config: Any) -> Any:
        """The search's uncompiled ``StateGraph``."""
        raise NotImplementedError

    def result(self, final: Mapping[str, Any], events: tuple[dict, ...]) -> SearchResult:
        """The :class:`SearchResult` of a finished run: the graph's final state and its custom events."""
        raise NotImplementedError

    def _early(self, input: Any, config: Any) -> SearchResult | None:
        """The result without a run: ``recursion_limit=1`` lets LangGraph finish no node."""
        check_input(input)
        if _recursion_limit(config) != 1:
            return None
        return self.result({"root": input["root"], "stop_reason": "recursion_limit"}, ())

    def _finish(self, chunks: list[tuple[str, Any]]) -> SearchResult:
        """The result of a run streamed with ``stream_mode=["custom", "values"]``: the last values and
        the search's own custom events."""
        final: Any = next((chunk for mode, chunk in reversed(chunks) if mode == "values"), None)
        events = tuple(chunk for mode, chunk in chunks
                       if mode == "custom" and isinstance(chunk, dict) and chunk.get("type") == self.event_type)
        return self.result(final, events)

    def invoke(self, input: Any, config: Any = None, **kwargs: Any) -> SearchResult:
        """Run the search to its stop; ``input`` is ``{"prompt": str, "root": env state}``."""
        _no_kwargs("invoke", kwargs)
        if inspect.iscoroutinefunction(self.expand):
            raise TypeError(f"expand: {self.expand!r} is a coroutine function; run the search with ainvoke")
        early = self._early(input, config)
        if early is not None:
            return early
        return self._finish(list(self.graph.stream(dict(input), config, stream_mode=["custom", "values"])))

    async def ainvoke(self, input: Any, config: Any = None, **kwargs: Any) -> SearchResult:
        """:meth:`invoke` for async code: the critic is called with ``ascore``, an async ``expand`` awaited."""
        _no_kwargs("ainvoke", kwargs)
        early = self._early(input, config)
        if early is not None:
            return early
        return self._finish([c async for c in self.graph.astream(dict(input), config, stream_mode=["custom", "values"])])
