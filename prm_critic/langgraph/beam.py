"""Critic-guided beam search over a forkable tool environment: :class:`BeamSearch` (a ``Runnable``
returning a :class:`~prm_critic.langgraph.search.SearchResult`, configured by :class:`BeamConfig`)
and its LangGraph ``StateGraph`` (:func:`build_beam_search_graph`, uncompiled).

Graph::

    START -> init -(Send x beam)-> expand -> prune -(Send x beam | END)-> expand ...

* ``expand`` (one Send per beam item, run in parallel): ``expand(env_state, history, k)`` -- your
  callable -- proposes up to ``k = min(branch_factor, calls left)`` next steps, each by calling a
  policy/model and executing the tool on a *copy* of the forkable env state, and returns
  ``[(step_text, next_env_state), ...]``. Each proposal counts as one policy call. Candidates are
  collected by a reducer (``operator.add``), as is every key parallel branches write.
* ``prune``: scores all new candidates in one critic batch ``TextStep(prompt, steps so far, step)``,
  aggregates each path's step scores with ``prm_critic.aggregate`` (``aggregate="min"`` etc.),
  and overwrites (``Overwrite``) the beam with the top ``beam_width``::

      score(path) = aggregate([s_1, ..., s_t], how)     s_t = head score of step t
      dead end   <=>  s_t < cut                         (dropped, counted in pruned_dead_end)
      cut = dead_end_threshold                          dead_end_mode="absolute" (default)
      cut = dead_end_threshold * max_c s_t(c)           dead_end_mode="relative" (over this depth's
                                                        non-terminal candidates)

  A candidate with ``is_terminal(env_state)`` true is a solution (the best one is kept, even below
  the threshold -- the environment, not the critic, says it is solved). Terminal outcomes known to
  the environment override the critic's score of that step: a solved step scores 1, a step into a
  finished lost game (``is_lost(env_state)``) scores 0; a lost game is a dead end whatever the cut,
  never kept in the beam, never kept as the best dead end, never ``best`` (``pruned_lost`` counts
  them; they are in ``pruned_dead_end`` too).

  When EVERY new non-terminal candidate is a dead end (an uncalibrated critic can score all of them
  under a fixed threshold), ``on_all_pruned="keep_best"`` (default) keeps the one with the best path
  score among those not lost (ties: proposal order) and goes on; the depth is counted in
  ``all_pruned_kept_best`` and flagged in that depth's ``prm_beam_prune`` event. When every one is
  lost there is nothing to keep: the search ends with ``stop_reason="dead_ends"``. ``on_all_pruned="stop"`` (the earlier
  behaviour) ends the search with ``stop_reason="dead_ends"``. With ``dead_end_mode="relative"``
  the best candidate always survives (its score is >= ``threshold * itself``).

Stops (``stop_reason``, first that applies): ``"solved"``, ``"budget"`` (calls used reached
``policy_budget`` or ``critic_budget``), ``"no_proposals"`` (``expand`` proposed nothing for any beam item: the beam is
empty), ``"dead_ends"`` (every candidate was a dead end and ``on_all_pruned="stop"``),
``"max_depth"`` or ``"recursion_limit"``: one more expand -> prune round needs 2 super-steps and
LangGraph's last node must still see ``RemainingSteps >= 1``, so ``init`` and ``prune`` stop when
``RemainingSteps < 3``. The search therefore never raises ``GraphRecursionError`` for
``recursion_limit >= 2`` (with 1 LangGraph cannot finish any node); with ``recursion_limit`` 2 or
3 it stops at ``init`` (depth 0).
The final state reports ``policy_calls``, ``pruned_dead_end``, ``pruned_lost``, ``pruned_beam``,
``all_pruned_kept_best``, ``depth``, ``solution``, ``best`` and ``stop_reason``; a search that stops
before ``max_depth`` without a solution says why there (``"dead_ends"``, ``"no_proposals"``,
``"budget"``, ``"recursion_limit"``), and :func:`beam_search_result` sets ``stats["stopped_early"]``
when it ran out of candidates (``"dead_ends"``, ``"no_proposals"``).
Every prune also streams a custom event ``{"type": "prm_beam_prune", "depth", "candidates", "kept",
"cut", "all_pruned", "all_pruned_kept_best", "pruned_dead_end", "pruned_lost", "pruned_beam",
"policy_calls", "stop_reason"}``.
The shared :class:`~prm_critic.langgraph.search.SearchResult` of a finished run is
:func:`beam_search_result` ``(final_state, events)`` (what :class:`BeamSearch` returns); the call
budgets are checked by the shared :class:`~prm_critic.langgraph.search.SearchBudget`
(``BeamConfig.guard``; each proposal is scored once, so critic calls equal policy calls).
Input: ``{"prompt": str, "root": initial env state}``. Env states are stored in the graph state,
so with a checkpointer they must be serializable (plain data). In async runs (``ainvoke``,
``astream``) an async ``expand`` is awaited and the critic called with ``ascore``.

Determinism: the search itself draws nothing at random. The ``expand`` branches of one depth run
in parallel threads, in an order that changes from run to run, but their candidates reach ``prune``
in beam order (LangGraph applies the branches' writes in task order) and ties keep that order, so
with an ``expand`` and a critic that are deterministic the search takes the same path on every run.
What is *not* deterministic is an ``expand`` whose result depends on the order of its calls: one
drawing from a random generator shared across calls (the draws go to whichever thread comes first),
or a chat model sampled without a fixed seed. Draw per call from a generator seeded by the state,
as :class:`~prm_critic.langgraph.TextEnvExpand` does. A learned critic's scores can differ in their
last bits across machines and thread counts, which can reorder near-ties.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Annotated, Any, Callable, Mapping, Sequence

from typing_extensions import TypedDict

from prm_critic import _deprecation, validate
from prm_critic.aggregate import AGGREGATES, aggregate as _aggregate
from prm_critic.critic import BaseCritic, StepScores
from prm_critic.langgraph._common import ascore_text_steps, check_critic, check_head, check_prob, lg, score_text_steps
from prm_critic.langgraph.search import (
    Expand, GraphSearch, RemainingSteps, RunnableLambda, SearchBudget, SearchResult, acall_expand, call_expand,
    check_input, emit_event, too_few_steps,
)
from prm_critic.text.steps import TextStep

_graph = lg("langgraph.graph")
_types = lg("langgraph.types")

__all__ = ["BeamSearch", "BeamConfig", "build_beam_search_graph", "BeamState", "beam_search_result"]

STOP_REASONS = ("solved", "dead_ends", "no_proposals", "max_depth", "budget", "recursion_limit")
#: stops where the search ran out of candidates before ``max_depth`` and any limit
EARLY_STOPS = ("dead_ends", "no_proposals")
DEAD_END_MODES = ("absolute", "relative")
ON_ALL_PRUNED = ("keep_best", "stop")
#: super-steps one more expand -> prune round needs (2), plus the one LangGraph needs after it
MIN_REMAINING_STEPS = 3


def _too_few(state) -> bool:
    """True when another expand -> prune round would exceed ``recursion_limit``."""
    return too_few_steps(state, MIN_REMAINING_STEPS)


class BeamState(TypedDict, total=False):
    """State of the beam-search graph.

    A candidate (beam item) is ``{"steps": [str], "step_scores": [float], "score": float,
    "state": env state, "terminal": bool}``.
    """

    prompt: str
    root: Any
    beam: Annotated[list[dict], operator.add]
    candidates: Annotated[list[dict], operator.add]
    depth: int
    policy_calls: Annotated[int, operator.add]
    pruned_dead_end: Annotated[int, operator.add]
    pruned_lost: Annotated[int, operator.add]
    pruned_beam: Annotated[int, operator.add]
    all_pruned_kept_best: Annotated[int, operator.add]
    solution: dict | None
    best: dict | None
    stop_reason: str
    remaining_steps: RemainingSteps


class ExpandInput(TypedDict):
    """What one ``expand`` branch receives through ``Send``."""

    item: dict
    k: int


@dataclass(frozen=True)
class BeamConfig:
    """The checked parameters of :class:`BeamSearch` / :func:`build_beam_search_graph`.

    Attributes:
        beam_width: paths kept after each prune (``>= 1``; 1 is greedy search).
        branch_factor: proposals asked per beam item per depth (``>= 1``).
        max_depth: steps in a path at most (``>= 1``).
        dead_end_threshold: in [0, 1]: drop a candidate whose newest step scores below the cut
            (``dead_end_mode``).
        policy_budget: policy calls (proposals) in total; ``None``: unlimited.
        critic_budget: critic calls (scored steps) in total; ``None``: unlimited (the beam scores
            each proposal once, so it limits the same count as ``policy_budget``).
        is_terminal: ``is_terminal(env_state) -> bool``, true when the task is solved (``None``:
            never; the search then runs to depth or budget and reports ``best``).
        aggregate: how path scores combine step scores: ``"min"``, ``"product"``, ``"last"``, ``"mean"``.
        head: the critic score used (``"success"``, ``"progress"`` or a name in ``StepScores.extra``).
        dead_end_mode: ``"absolute"``: the cut is ``dead_end_threshold``; ``"relative"``: it is
            ``dead_end_threshold`` times the best newest-step score among this depth's candidates
            (a threshold that follows the critic's scale).
        on_all_pruned: when every candidate of a depth is under the cut: ``"keep_best"`` keeps the
            best one not lost and reports it (``all_pruned_kept_best``); ``"stop"`` ends with
            ``stop_reason="dead_ends"``.
        is_lost: ``is_lost(env_state) -> bool``, true when the game is over and lost (``None``: the
            environment tells nothing; then the critic alone judges). A lost candidate scores 0 and
            is never kept (module doc).
        budget: deprecated name of ``policy_budget`` (warns; refused together with it).

    Checked once, in field order, each bad value with one error naming the field, the value and
    what was expected; ints and the threshold are normalised.
    """

    beam_width: int = 3
    branch_factor: int = 3
    max_depth: int = 8
    dead_end_threshold: float = 0.2
    policy_budget: int | None = None
    critic_budget: int | None = None
    is_terminal: Callable[[Any], bool] | None = None
    aggregate: str = "min"
    head: str = "success"
    dead_end_mode: str = "absolute"
    on_all_pruned: str = "keep_best"
    is_lost: Callable[[Any], bool] | None = None
    budget: int | None = None

    def __post_init__(self) -> None:
        fix: dict[str, object] = {
            "beam_width": validate.check_int("beam_width", self.beam_width, minimum=1),
            "branch_factor": validate.check_int("branch_factor", self.branch_factor, minimum=1),
            "max_depth": validate.check_int("max_depth", self.max_depth, minimum=1),
            "dead_end_threshold": check_prob("dead_end_threshold", self.dead_end_threshold),
            "policy_budget": validate.check_int("policy_budget", self.policy_budget, minimum=1, allow_none=True),
            "critic_budget": validate.check_int("critic_budget", self.critic_budget, minimum=1, allow_none=True),
        }
        for name in ("is_terminal", "is_lost"):
            if getattr(self, name) is not None and not callable(getattr(self, name)):
                raise validate.ArgumentError(f"{name}: expected a callable {name}(env_state) -> bool or None, "
                                             f"got {getattr(self, name)!r}")
        fix["aggregate"] = validate.check_choice("aggregate", self.aggregate, sorted(AGGREGATES))
        fix["head"] = check_head(self.head)
        fix["dead_end_mode"] = validate.check_choice("dead_end_mode", self.dead_end_mode, DEAD_END_MODES)
        fix["on_all_pruned"] = validate.check_choice("on_all_pruned", self.on_all_pruned, ON_ALL_PRUNED)
        if self.budget is not None:
            _deprecation.warn("BeamConfig(budget=...) / build_beam_search_graph(budget=...) is deprecated: pass "
                              "policy_budget= (the budget vocabulary every search shares)", stacklevel=3)
            fix["budget"] = validate.check_int("budget", self.budget, minimum=1, allow_none=True)
            if self.policy_budget is not None:
                raise validate.ArgumentError(f"budget: the deprecated name of policy_budget, given together with "
                                             f"it (budget={self.budget!r}, policy_budget={self.policy_budget!r})")
            fix["policy_budget"] = fix["budget"]
        validate.set_checked(self, fix)

    @property
    def guard(self) -> SearchBudget:
        """The shared budget guard of ``policy_budget`` and ``critic_budget``."""
        return SearchBudget(policy_calls=self.policy_budget, critic_calls=self.critic_budget)


def build_beam_search_graph(expand: Expand, critic: BaseCritic, config: BeamConfig | None = None, **params: Any):
    """Build (uncompiled) the beam-search graph of the module doc (:class:`BeamSearch` runs it for you).

    Args:
        expand: ``expand(env_state, history, k) -> [(step_text, next_env_state), ...]`` with at
            most ``k`` items; must not mutate ``env_state`` (fork it).
        critic: a text :class:`~prm_critic.BaseCritic`.
        config: a :class:`BeamConfig`; or pass its fields as keyword arguments (not both).

    Returns:
        an uncompiled ``StateGraph``; compile it with your checkpointer, invoke with
        ``{"prompt": ..., "root": env_state}`` and a ``recursion_limit`` above ``2 * max_depth + 2``;
        :func:`beam_search_result` turns its final state into a ``SearchResult``.
    """
    if not callable(expand):
        raise TypeError(f"expand: expected a callable expand(env_state, history, k), got {type(expand).__name__} {expand!r}")
    critic = check_critic(critic)
    cfg = validate.config_from(BeamConfig, config, **params)
    expand_node, prune = _Expand(expand), _Prune(critic, cfg)
    builder = _graph.StateGraph(BeamState)
    builder.add_node("init", _beam_init)
    builder.add_node("expand", RunnableLambda(expand_node, afunc=expand_node.acall, name="expand"))
    builder.add_node("prune", RunnableLambda(prune, afunc=prune.acall, name="prune"))
    builder.add_edge(_graph.START, "init")
    fan_out = _make_fan_out(cfg)
    builder.add_conditional_edges("init", fan_out, ["expand", _graph.END])
    builder.add_edge("expand", "prune")
    builder.add_conditional_edges("prune", fan_out, ["expand", _graph.END])
    return builder


def _beam_init(state: BeamState) -> dict:
    """The ``init`` node: check the input and start the beam at the root env state."""
    Overwrite = _types.Overwrite
    prompt = check_input(state)
    root = {"steps": [], "step_scores": [], "score": 1.0, "state": state["root"], "terminal": False}
    return {
        "prompt": prompt,
        "beam": Overwrite([root]),
        "candidates": Overwrite([]),
        "depth": 0,
        "policy_calls": Overwrite(0),
        "pruned_dead_end": Overwrite(0),
        "pruned_lost": Overwrite(0),
        "pruned_beam": Overwrite(0),
        "all_pruned_kept_best": Overwrite(0),
        "solution": None,
        "best": None,
        "stop_reason": "recursion_limit" if _too_few(state) else "",
    }


class _Expand:
    """The ``expand`` node (sync and async): ask ``expand`` for up to ``k`` proposals from one beam item."""

    def __init__(self, expand: Expand):
        self.expand = expand

    def __call__(self, inp: ExpandInput) -> dict:
        item = inp["item"]
        return _candidates(item, call_expand(self.expand, item["state"], tuple(item["steps"]), inp["k"]))

    async def acall(self, inp: ExpandInput) -> dict:
        item = inp["item"]
        return _candidates(item, await acall_expand(self.expand, item["state"], tuple(item["steps"]), inp["k"]))


def _candidates(item: dict, proposals: list) -> dict:
    """The candidates one beam item's checked proposals make (each proposal is one policy call)."""
    cands = [{"steps": list(item["steps"]) + [text], "step_scores": list(item["step_scores"]),
              "state": next_state, "terminal": False} for text, next_state, _ in proposals]
    return {"candidates": cands, "policy_calls": len(proposals)}


def _beam_stop_reason(state, cfg: BeamConfig, *, solved, beam, proposed, depth, used) -> str:
    """The first stop reason that applies after a prune (``""``: keep searching)."""
    if solved:
        return "solved"
    if cfg.guard.spent(used, used):  # each proposal is scored once: critic calls == policy calls
        return "budget"
    if not beam:
        return "dead_ends" if proposed else "no_proposals"
    if depth >= cfg.max_depth:
        return "max_depth"
    if _too_few(state):
        return "recursion_limit"
    return ""


class _Prune:
    """The ``prune`` node (sync and async): score the new candidates in one batch and keep the best
    ``cfg.beam_width``."""

    def __init__(self, critic: BaseCritic, cfg: BeamConfig):
        self.critic, self.cfg = critic, cfg

    def _steps(self, state: BeamState) -> tuple[list[dict], list[TextStep]]:
        cands = list(state.get("candidates") or [])
        prompt = state.get("prompt", "")
        return cands, [TextStep(prompt, tuple(c["steps"][:-1]), c["steps"][-1]) for c in cands]

    def __call__(self, state: BeamState) -> dict:
        cands, steps = self._steps(state)
        scores = score_text_steps(self.critic, steps, head=self.cfg.head) if steps else None
        return self._finish(state, cands, scores)

    async def acall(self, state: BeamState) -> dict:
        """The node in async runs: the critic is called with ``ascore``."""
        cands, steps = self._steps(state)
        scores = await ascore_text_steps(self.critic, steps, head=self.cfg.head) if steps else None
        return self._finish(state, cands, scores)

    def _finish(self, state: BeamState, cands: list[dict], step_scores: StepScores | None) -> dict:
        """Prune and rank the scored candidates, decide whether to stop, emit the depth's event."""
        Overwrite, cfg = _types.Overwrite, self.cfg
        new: Any = [] if step_scores is None else step_scores.get(cfg.head)
        depth = int(state.get("depth", 0)) + 1
        scored = []
        for c, s in zip(cands, new):
            terminal = bool(cfg.is_terminal(c["state"])) if cfg.is_terminal is not None else False
            lost = not terminal and cfg.is_lost is not None and bool(cfg.is_lost(c["state"]))
            # the environment's outcome overrides the critic's score of the step
            ss = c["step_scores"] + [1.0 if terminal else 0.0 if lost else float(s)]
            scored.append({**c, "step_scores": ss, "score": float(_aggregate(ss, cfg.aggregate)),
                           "terminal": terminal, "lost": lost})
        solved = [c for c in scored if c["terminal"]]
        n_lost = sum(c["lost"] for c in scored)
        open_ = [c for c in scored if not c["terminal"]]
        playable = [c for c in open_ if not c["lost"]]  # a lost game is a dead end whatever its score
        cut = cfg.dead_end_threshold
        if cfg.dead_end_mode == "relative" and playable:
            cut = cfg.dead_end_threshold * max(c["step_scores"][-1] for c in playable)
        alive = [c for c in playable if c["step_scores"][-1] >= cut]
        all_pruned = bool(open_) and not alive
        kept_best = all_pruned and bool(playable) and not solved and cfg.on_all_pruned == "keep_best"
        if kept_best:  # never give up silently: keep the best dead end not lost, and say so
            alive = [max(playable, key=lambda c: c["score"])]  # max: the first of equals (proposal order)
        n_dead = len(open_) - len(alive)
        alive.sort(key=lambda c: -c["score"])  # stable: ties keep proposal order
        beam = alive[:cfg.beam_width]
        best_prev = state.get("best")
        pool = solved or beam
        best = max(pool, key=lambda c: c["score"]) if pool else best_prev
        if best_prev is not None and best is not None and not solved and best_prev["score"] > best["score"]:
            best = best_prev
        used = int(state.get("policy_calls", 0))
        reason = _beam_stop_reason(state, cfg, solved=solved, beam=beam, proposed=bool(scored), depth=depth, used=used)
        out = {
            "beam": Overwrite(beam),
            "candidates": Overwrite([]),
            "depth": depth,
            "pruned_dead_end": n_dead,
            "pruned_lost": n_lost,
            "pruned_beam": len(alive) - len(beam),
            "all_pruned_kept_best": int(kept_best),
            "best": best,
            "stop_reason": reason,
        }
        if solved:
            out["solution"] = max(solved, key=lambda c: c["score"])
        emit_event({"type": "prm_beam_prune", "depth": depth, "candidates": len(scored), "kept": len(beam),
                    "cut": float(cut), "all_pruned": all_pruned, "all_pruned_kept_best": kept_best,
                    "pruned_dead_end": n_dead, "pruned_lost": n_lost, "pruned_beam": len(alive) - len(beam),
                    "policy_calls": used,
                    "stop_reason": reason})
        return out


def _make_fan_out(cfg: BeamConfig):
    """The router after ``init``/``prune``: one ``Send`` per beam item within the budgets, or ``END``."""
    Send = _types.Send
    branch_factor, guard = cfg.branch_factor, cfg.guard

    def fan_out(state: BeamState):
        if state.get("stop_reason"):
            return _graph.END
        granted = int(state.get("policy_calls", 0))  # used so far plus what earlier Sends may use
        sends = []
        for item in state.get("beam") or []:
            k = guard.grant(branch_factor, granted, granted)  # each proposal is one critic call too
            if k <= 0:
                break
            sends.append(Send("expand", {"item": item, "k": k}))
            granted += k
        return sends or _graph.END

    return fan_out


def beam_search_result(final: dict, events: Sequence[dict] = ()) -> SearchResult:
    """The shared :class:`~prm_critic.langgraph.search.SearchResult` of a finished beam search.

    ``final`` is the graph's final state (``graph.invoke`` output, or the last ``"values"`` chunk of
    a stream), ``events`` the ``prm_beam_prune`` events streamed on ``stream_mode="custom"``. The
    trajectory is the solution if one was found, else ``best`` (else no step: the root state, score
    ``None``). Every proposal is scored once, so ``critic_calls == policy_calls``.
    """
    if not isinstance(final, dict) or "root" not in final:
        raise TypeError(f"final: expected the beam graph's final state (a dict with 'root'), got {final!r:.120}")
    path = final.get("solution") or final.get("best")
    used = int(final.get("policy_calls", 0))
    stats: dict[str, Any] = {k: int(final.get(k, 0)) for k in ("depth", "pruned_dead_end", "pruned_lost", "pruned_beam",
                                                                "all_pruned_kept_best")}
    stats["stopped_early"] = final.get("stop_reason", "") in EARLY_STOPS
    if path is None:
        return SearchResult(steps=(), state=final["root"], score=None, step_scores=(), solved=False,
                            stop_reason=final.get("stop_reason", ""), policy_calls=used, critic_calls=used,
                            events=tuple(events), stats=stats)
    return SearchResult(steps=tuple(path["steps"]), state=path["state"], score=float(path["score"]),
                        step_scores=tuple(float(x) for x in path["step_scores"]), solved=bool(path["terminal"]),
                        stop_reason=final.get("stop_reason", ""), policy_calls=used, critic_calls=used,
                        events=tuple(events), stats=stats)


class BeamSearch(GraphSearch):
    """Critic-guided beam search over a forkable tool environment: one object, sync and async.

    ``BeamSearch(expand, critic, config=None, *, checkpointer=None, **config_fields)``;
    ``search.invoke({"prompt": task, "root": env_state}, config)`` and ``await search.ainvoke(...)``
    run the compiled graph of :func:`build_beam_search_graph` and return a
    :class:`~prm_critic.langgraph.search.SearchResult` (:func:`beam_search_result`, with the run's
    ``prm_beam_prune`` events); the rest is :class:`~prm_critic.langgraph.search.GraphSearch`'s.
    ``config`` is a :class:`BeamConfig`, or its fields are given as keyword arguments (not both).
    Give ``invoke`` a ``recursion_limit`` above ``2 * max_depth + 2`` to let it reach ``max_depth``.
    """

    config_type = BeamConfig
    event_type = "prm_beam_prune"

    def build_graph(self, expand: Expand, critic: BaseCritic, config: BeamConfig) -> Any:
        return build_beam_search_graph(expand, critic, config)

    def result(self, final: Mapping[str, Any], events: tuple[dict, ...]) -> SearchResult:
        return beam_search_result(dict(final), events)
