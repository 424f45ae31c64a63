"""Critic-guided beam search as a LangGraph ``StateGraph`` (returned uncompiled).

Graph::

    START -> init -(Send x beam)-> expand -> prune -(Send x beam | END)-> expand ...

* ``expand`` (one Send per beam item, run in parallel): ``expand(env_state, history, k)`` -- your
  callable -- proposes up to ``k = min(branch_factor, budget left)`` next steps, each by calling a
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

Stops (``stop_reason``, first that applies): ``"solved"``, ``"budget"`` (policy calls used
``>= budget``), ``"no_proposals"`` (``expand`` proposed nothing for any beam item: the beam is
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
:func:`beam_search_result` ``(final_state, events)``; the policy-call budget is checked by
the shared :class:`~prm_critic.langgraph.search.SearchBudget` (``BeamConfig.guard``).
Input: ``{"prompt": str, "root": initial env state}``. Env states are stored in the graph state,
so with a checkpointer they must be serializable (plain data).

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
from typing import TYPE_CHECKING, Annotated, Any, Callable, Iterable, Sequence

from typing_extensions import TypedDict

from prm_critic.aggregate import AGGREGATES, aggregate as _aggregate
from prm_critic.critic import BaseCritic
from prm_critic.langgraph._common import (
    check_choice, check_critic, check_head, check_int, check_prob, lg, score_text_steps,
)
from prm_critic.langgraph.search import SearchBudget, SearchResult, check_proposals, emit_event, too_few_steps
from prm_critic.text.steps import TextStep

_graph = lg("langgraph.graph")
_types = lg("langgraph.types")
if TYPE_CHECKING:
    from langgraph.managed import RemainingSteps
else:  # through require(), so a missing package names the extra to install
    RemainingSteps = lg("langgraph.managed").RemainingSteps

__all__ = ["build_beam_search_graph", "BeamState", "beam_search_result"]

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


def build_beam_search_graph(
    expand: Callable[[Any, tuple[str, ...], int], Sequence[tuple[str, Any]]],
    critic: BaseCritic,
    *,
    beam_width: int = 3,
    branch_factor: int = 3,
    max_depth: int = 8,
    dead_end_threshold: float = 0.2,
    budget: int | None = None,
    is_terminal: Callable[[Any], bool] | None = None,
    aggregate: str = "min",
    head: str = "success",
    dead_end_mode: str = "absolute",
    on_all_pruned: str = "keep_best",
    is_lost: Callable[[Any], bool] | None = None,
):
    """Build (uncompiled) a critic-guided beam search over a forkable tool environment.

    Args:
        expand: ``expand(env_state, history, k) -> [(step_text, next_env_state), ...]`` with at
            most ``k`` items; must not mutate ``env_state`` (fork it).
        critic: a text :class:`~prm_critic.BaseCritic`.
        beam_width: paths kept after each prune (``>= 1``; 1 is greedy search).
        branch_factor: proposals asked per beam item per depth (``>= 1``).
        max_depth: maximum number of steps in a path.
        dead_end_threshold: in [0, 1]: drop a candidate whose newest step scores below the cut
            (``dead_end_mode``).
        budget: maximum policy calls (proposals) in total; ``None``: unlimited.
        is_terminal: ``is_terminal(env_state) -> bool``, true when the task is solved
            (``None``: never; the search then runs to depth/budget and reports ``best``).
        aggregate: how path scores combine step scores: ``"min"``, ``"product"``, ``"last"``,
            ``"mean"``.
        head: the critic score used (``"success"`` or ``"progress"``).
        dead_end_mode: ``"absolute"``: the cut is ``dead_end_threshold``; ``"relative"``: the cut
            is ``dead_end_threshold`` times the best newest-step score among this depth's
            candidates (a threshold that follows the critic's scale).
        on_all_pruned: when every candidate of a depth is under the cut: ``"keep_best"`` keeps the
            best one not lost and reports it (``all_pruned_kept_best``); ``"stop"`` ends with
            ``stop_reason="dead_ends"``.
        is_lost: ``is_lost(env_state) -> bool``, true when the game is over and lost (``None``: the
            environment tells nothing; then the critic alone judges). A lost candidate scores 0 and
            is never kept (module doc).

    Returns:
        an uncompiled ``StateGraph``; compile it with your checkpointer, invoke with
        ``{"prompt": ..., "root": env_state}`` and a ``recursion_limit`` above ``2 * max_depth + 2``.
    """
    if not callable(expand):
        raise TypeError(f"expand: expected a callable expand(env_state, history, k), got {type(expand).__name__} {expand!r}")
    critic = check_critic(critic)
    cfg = BeamConfig(beam_width=beam_width, branch_factor=branch_factor, max_depth=max_depth,
                     dead_end_threshold=dead_end_threshold, budget=budget, is_terminal=is_terminal,
                     aggregate=aggregate, head=head, dead_end_mode=dead_end_mode, on_all_pruned=on_all_pruned,
                     is_lost=is_lost)
    return _wire_beam_graph(_beam_init, _make_expand_node(expand), _make_prune_node(critic, cfg), _make_fan_out(cfg))


@dataclass(frozen=True)
class BeamConfig:
    """The checked search parameters of :func:`build_beam_search_graph` (its arguments of the same
    names), passed whole to the graph's nodes. Checked in field order; ints and the threshold are
    normalised."""

    beam_width: int = 3
    branch_factor: int = 3
    max_depth: int = 8
    dead_end_threshold: float = 0.2
    budget: int | None = None
    is_terminal: Callable[[Any], bool] | None = None
    aggregate: str = "min"
    head: str = "success"
    dead_end_mode: str = "absolute"
    on_all_pruned: str = "keep_best"
    is_lost: Callable[[Any], bool] | None = None

    def __post_init__(self) -> None:
        fix: dict[str, object] = {
            "beam_width": check_int("beam_width", self.beam_width, minimum=1),
            "branch_factor": check_int("branch_factor", self.branch_factor, minimum=1),
            "max_depth": check_int("max_depth", self.max_depth, minimum=1),
            "dead_end_threshold": check_prob("dead_end_threshold", self.dead_end_threshold),
            "budget": check_int("budget", self.budget, minimum=1, allow_none=True),
        }
        if self.is_terminal is not None and not callable(self.is_terminal):
            raise TypeError(f"is_terminal: expected a callable is_terminal(env_state) -> bool or None, "
                            f"got {self.is_terminal!r}")
        if self.aggregate not in AGGREGATES:
            raise ValueError(f"aggregate: expected one of {sorted(AGGREGATES)}, got {self.aggregate!r}")
        if self.is_lost is not None and not callable(self.is_lost):
            raise TypeError(f"is_lost: expected a callable is_lost(env_state) -> bool or None, got {self.is_lost!r}")
        fix["head"] = check_head(self.head)
        fix["dead_end_mode"] = check_choice("dead_end_mode", self.dead_end_mode, DEAD_END_MODES)
        fix["on_all_pruned"] = check_choice("on_all_pruned", self.on_all_pruned, ON_ALL_PRUNED)
        for name, value in fix.items():
            object.__setattr__(self, name, value)

    @property
    def guard(self) -> SearchBudget:
        """The shared budget guard: ``budget`` limits policy calls (each proposal is scored once,
        so critic calls equal policy calls)."""
        return SearchBudget(policy_calls=self.budget)


def _beam_init(state: BeamState) -> dict:
    """The ``init`` node: check the input and start the beam at the root env state."""
    Overwrite = _types.Overwrite
    if "root" not in state:
        raise KeyError("root: the input must hold the initial env state under 'root' (and the task under 'prompt')")
    prompt = state.get("prompt", "")
    if not isinstance(prompt, str):
        raise TypeError(f"prompt: expected str, got {type(prompt).__name__} {prompt!r}")
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


def _make_expand_node(expand):
    """The ``expand`` node: ask ``expand`` for up to ``k`` proposals from one beam item."""

    def expand_node(inp: ExpandInput) -> dict:
        item, k = inp["item"], inp["k"]
        proposals = check_proposals(expand(item["state"], tuple(item["steps"]), k), k)
        cands = []
        for text, next_state, _ in proposals:
            cands.append({"steps": list(item["steps"]) + [text], "step_scores": list(item["step_scores"]),
                          "state": next_state, "terminal": False})
        return {"candidates": cands, "policy_calls": len(proposals)}

    return expand_node


def _beam_stop_reason(state, cfg: BeamConfig, *, solved, beam, proposed, depth, used) -> str:
    """The first stop reason that applies after a prune (``""``: keep searching)."""
    if solved:
        return "solved"
    if cfg.guard.spent(policy_used=used):
        return "budget"
    if not beam:
        return "dead_ends" if proposed else "no_proposals"
    if depth >= cfg.max_depth:
        return "max_depth"
    if _too_few(state):
        return "recursion_limit"
    return ""


def _make_prune_node(critic, cfg: BeamConfig):
    """The ``prune`` node: score the new candidates in one batch and keep the best ``cfg.beam_width``."""
    Overwrite = _types.Overwrite
    is_terminal, dead_end_threshold = cfg.is_terminal, cfg.dead_end_threshold

    def prune(state: BeamState) -> dict:
        cands = list(state.get("candidates") or [])
        prompt = state.get("prompt", "")
        depth = int(state.get("depth", 0)) + 1
        if cands:
            steps = [TextStep(prompt, tuple(c["steps"][:-1]), c["steps"][-1]) for c in cands]
            new: Iterable[float] = score_text_steps(critic, steps, head=cfg.head).get(cfg.head)
        else:
            new = []
        scored = []
        for c, s in zip(cands, new):
            terminal = bool(is_terminal(c["state"])) if is_terminal is not None else False
            lost = not terminal and cfg.is_lost is not None and bool(cfg.is_lost(c["state"]))
            # the environment's outcome overrides the critic's score of the step
            ss = c["step_scores"] + [1.0 if terminal else 0.0 if lost else float(s)]
            scored.append({**c, "step_scores": ss, "score": float(_aggregate(ss, cfg.aggregate)),
                           "terminal": terminal, "lost": lost})
        solved = [c for c in scored if c["terminal"]]
        n_lost = sum(c["lost"] for c in scored)
        open_ = [c for c in scored if not c["terminal"]]
        playable = [c for c in open_ if not c["lost"]]  # a lost game is a dead end whatever its score
        cut = dead_end_threshold
        if cfg.dead_end_mode == "relative" and playable:
            cut = dead_end_threshold * max(c["step_scores"][-1] for c in playable)
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

    return prune


def _make_fan_out(cfg: BeamConfig):
    """The router after ``init``/``prune``: one ``Send`` per beam item within the budget, or ``END``."""
    Send = _types.Send
    branch_factor, guard = cfg.branch_factor, cfg.guard

    def fan_out(state: BeamState):
        if state.get("stop_reason"):
            return _graph.END
        granted = int(state.get("policy_calls", 0))  # used so far plus what earlier Sends may use
        sends = []
        for item in state.get("beam") or []:
            k = guard.grant(branch_factor, policy_used=granted)
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


def _wire_beam_graph(init, expand_node, prune, fan_out):
    """Wire ``START -> init -> (expand -> prune)* -> END`` into an uncompiled ``StateGraph``."""
    builder = _graph.StateGraph(BeamState)
    builder.add_node("init", init)
    builder.add_node("expand", expand_node)
    builder.add_node("prune", prune)
    builder.add_edge(_graph.START, "init")
    builder.add_conditional_edges("init", fan_out, ["expand", _graph.END])
    builder.add_edge("expand", "prune")
    builder.add_conditional_edges("prune", fan_out, ["expand", _graph.END])
    return builder
