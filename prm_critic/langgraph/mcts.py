"""Monte Carlo tree search with PRM values over a forkable tool environment, as a LangGraph graph.

Graph (one simulation per super-step)::

    START -> init -> iterate -> iterate -> ... -> END

A tree node is a path of steps from the root: its env state, visit count ``N``, value sum ``W``,
prior ``P`` and PRM path value ``v``. One ``iterate`` is one simulation:

1. **Select.** From the root, while the node is expanded, go to the open child ``c`` of ``p`` with
   the highest score (ties broken by a generator seeded with ``(seed, iteration)``)::

       PUCT (selection="puct"):  Q(c) + c_puct * P(c) * sqrt(N(p)) / (1 + N(c))
       UCT  (selection="uct"):   Q(c) + c_uct * sqrt(ln N(p) / N(c))
       Q(c) = W(c) / N(c)                          c_puct = c_uct = exploration

2. **Expand** the leaf ``L`` exactly as the beam search forks: ``expand(L.state, history, k)`` --
   your callable -- proposes up to ``k = min(branch_factor, calls left)`` next steps, each executed
   on a *copy* of the env state, and returns ``[(step_text, next_env_state), ...]``; a third item
   per proposal is the policy's prior (on all proposals or none). The prior of child ``c`` is
   ``P(c) = prior_c / sum prior`` or, where the policy gives none, uniform ``1 / n`` over the ``n``
   proposals; with ``prior="critic"``, ``P(c) = s_c / sum s`` over the siblings' step scores (the
   PRM as a prior too). Each proposal is one policy call.
3. **Evaluate** with the PRM: one critic batch scores the new steps ``TextStep(prompt, history,
   step)`` (one critic call each); a child's value is its path score
   ``v(c) = aggregate([s_1, ..., s_t, s_c], how)`` with ``s`` the ``head`` score (default
   ``aggregate="last"``: a success head's latest score is the PRM's estimate of
   ``P(success | path)``, a state value). No rollouts: the critic is the value estimate.
4. **Back up** one value per simulation, the leaf's value under its best proposal::

       v_sim = max_c v(c)         (v(L) when expand proposed nothing)
       N(a) += 1,  W(a) += v_sim  for every node a on the path from the root to L
       N(c) = 1,   W(c) = v(c)    for each new child c (its evaluation is its first visit)

   so ``Q`` of a node is the mean over the simulations through it of the best PRM value one step
   past their leaf (the environment is deterministic given the forked state: what a path is worth
   is what its best continuation is worth).

Terminal outcomes known to the environment override the critic: a child whose state is solved
(``is_terminal``) gets the step score 1, one whose game is over and lost (``is_lost``) the step score
0 (so its value is what a lost path is worth under the aggregate: 0 with ``"last"``, ``"min"``,
``"product"``), whatever the critic said.

A node is *closed* (never selected again) when it is terminal, lost, at ``max_depth``, expanded with
no proposals, or all its children are closed.

Stops (``stop_reason``, first that applies after an iteration): ``"solved"`` (``is_terminal``
holds for a new child; also at ``init`` when the root is terminal), ``"budget"`` (policy calls or
critic calls reached their budget), ``"exhausted"`` (the root is closed: nothing left to expand),
``"max_iterations"``, ``"recursion_limit"``: each iteration is one super-step and LangGraph's last
node must still see ``RemainingSteps >= 1``, so ``init`` and ``iterate`` stop when
``RemainingSteps < 2`` -- a run does at most ``recursion_limit - 2`` iterations and never raises
``GraphRecursionError`` for ``recursion_limit >= 2``. :class:`MCTSSearch` also takes
``recursion_limit=1`` (with which LangGraph cannot finish any node): it then runs no node and
returns the root with ``stop_reason="recursion_limit"``.

The answer (:class:`~prm_critic.langgraph.search.SearchResult`): the solution when one was found,
else the principal variation -- from the root, the most visited child not lost (ties: higher ``Q``,
then proposal order) down to a node without such a child: a lost game is never the answer. Every iteration streams a custom event ``{"type":
"prm_mcts_iteration", "iteration", "leaf", "depth", "k", "proposals", "step_scores", "values",
"policy_calls", "critic_calls", "nodes", "root_visits", "stop_reason"}`` (and keeps it in the
state's ``events``, so the result holds the same events however the graph was run). Input:
``{"prompt": str, "root": initial env state}``. Env states live in the graph state, so with a
checkpointer they must be serializable (plain data). Under one ``seed``, with a deterministic
``expand`` and critic, two runs give the same result and the same events (the iterations run one
after another; what can break it is an ``expand`` or critic that is not deterministic: see the beam
module's note on determinism).
"""

from __future__ import annotations

import math
import operator
import random
from dataclasses import dataclass
from typing import Annotated, Any, Callable, Mapping, Sequence

from typing_extensions import TypedDict

from prm_critic import validate
from prm_critic.aggregate import AGGREGATES, aggregate as _aggregate
from prm_critic.critic import BaseCritic, StepScores
from prm_critic.langgraph._common import ascore_text_steps, check_critic, check_head, lg, score_text_steps
from prm_critic.langgraph.search import (
    Expand, GraphSearch, RemainingSteps, RunnableLambda, SearchBudget, SearchResult, acall_expand, call_expand,
    check_input, emit_event, too_few_steps,
)
from prm_critic.text.steps import TextStep

_graph = lg("langgraph.graph")
_types = lg("langgraph.types")

__all__ = ["MCTSConfig", "MCTSSearch", "MCTSState", "build_mcts_graph", "mcts_search_result"]

STOP_REASONS = ("solved", "budget", "exhausted", "max_iterations", "recursion_limit")
SELECTIONS = ("puct", "uct")
#: where PUCT's prior ``P(c)`` comes from (:class:`MCTSConfig`'s ``prior``)
PRIORS = ("policy", "critic")
#: super-steps one more iteration needs (1), plus the one LangGraph needs after it
MIN_REMAINING_STEPS = 2


@dataclass(frozen=True)
class MCTSConfig:
    """The checked parameters of :class:`MCTSSearch` / :func:`build_mcts_graph`.

    Attributes:
        branch_factor: proposals asked per expansion (``>= 1``).
        max_iterations: simulations at most (``>= 1``).
        max_depth: steps in a path at most (``>= 1``); nodes at this depth are not expanded.
        policy_budget: policy calls (proposals) in total; ``None``: unlimited.
        critic_budget: critic calls (scored steps) in total; ``None``: unlimited.
        selection: ``"puct"`` (priors) or ``"uct"`` (module doc for both formulas).
        exploration: the exploration constant ``c_puct`` / ``c_uct`` (finite, ``>= 0``).
        aggregate: how a path's step scores make its value: ``"last"``, ``"min"``, ``"product"``,
            ``"mean"``.
        head: the critic score used (``"success"``, ``"progress"`` or a name in ``StepScores.extra``).
        is_terminal: ``is_terminal(env_state) -> bool``, true when the task is solved (``None``:
            never; the search then runs to a budget or limit and reports the principal variation).
        is_lost: ``is_lost(env_state) -> bool``, true when the game is over and lost (``None``: the
            environment tells nothing). A lost child scores 0, is closed, and is never the answer.
        seed: seeds the tie-breaks of selection (an int in ``[0, 2**32)``).
        prior: PUCT's prior ``P(c)``: ``"policy"`` (the policy's priors, else uniform) or
            ``"critic"`` (the children's step scores from the critic, normalised over the siblings;
            uniform when they are all 0): the PRM as a prior as well as a value.

    Checked once, in field order, each bad value with one error naming the field, the value and
    what was expected; ints and floats are normalised.
    """

    branch_factor: int = 3
    max_iterations: int = 50
    max_depth: int = 8
    policy_budget: int | None = None
    critic_budget: int | None = None
    selection: str = "puct"
    exploration: float = 1.0
    aggregate: str = "last"
    head: str = "success"
    is_terminal: Callable[[Any], bool] | None = None
    seed: int = 0
    is_lost: Callable[[Any], bool] | None = None
    prior: str = "policy"

    def __post_init__(self) -> None:
        fix: dict[str, Any] = {
            "branch_factor": validate.check_int("branch_factor", self.branch_factor, minimum=1),
            "max_iterations": validate.check_int("max_iterations", self.max_iterations, minimum=1),
            "max_depth": validate.check_int("max_depth", self.max_depth, minimum=1),
            "policy_budget": validate.check_int("policy_budget", self.policy_budget, minimum=1, allow_none=True),
            "critic_budget": validate.check_int("critic_budget", self.critic_budget, minimum=1, allow_none=True),
            "selection": validate.check_choice("selection", self.selection, SELECTIONS),
            "exploration": validate.check_number("exploration", self.exploration, low=0.0),
            "aggregate": validate.check_choice("aggregate", self.aggregate, sorted(AGGREGATES)),
            "head": check_head(self.head),
            "prior": validate.check_choice("prior", self.prior, PRIORS),
        }
        if self.is_terminal is not None and not callable(self.is_terminal):
            raise validate.ArgumentError(f"is_terminal: expected a callable is_terminal(env_state) -> bool or None, "
                                         f"got {type(self.is_terminal).__name__} {self.is_terminal!r}")
        if self.is_lost is not None and not callable(self.is_lost):
            raise validate.ArgumentError(f"is_lost: expected a callable is_lost(env_state) -> bool or None, "
                                         f"got {type(self.is_lost).__name__} {self.is_lost!r}")
        fix["seed"] = validate.check_seed("seed", self.seed)
        validate.set_checked(self, fix)

    @property
    def guard(self) -> SearchBudget:
        """The shared budget guard of ``policy_budget`` and ``critic_budget``."""
        return SearchBudget(policy_calls=self.policy_budget, critic_calls=self.critic_budget)


class MCTSState(TypedDict, total=False):
    """State of the MCTS graph.

    ``nodes`` is the tree, a list indexed by node id (the root is 0); a node is ``{"parent",
    "children", "step", "state", "depth", "step_scores", "value", "prior", "visits", "value_sum",
    "expanded", "closed", "terminal", "lost"}``. ``solution`` is the id of the solved node (or ``None``).
    """

    prompt: str
    root: Any
    nodes: list[dict]
    iteration: int
    policy_calls: int
    critic_calls: int
    solution: int | None
    stop_reason: str
    events: Annotated[list[dict], operator.add]
    remaining_steps: RemainingSteps


# --------------------------------------------------------------------------- input and tree
def _node(parent: int | None, step: str | None, env_state: Any, depth: int, step_scores: list[float],
          value: float, prior: float, terminal: bool, closed: bool) -> dict:
    visits = 0 if parent is None else 1  # a child's evaluation is its first visit
    return {"parent": parent, "children": [], "step": step, "state": env_state, "depth": depth,
            "step_scores": step_scores, "value": value, "prior": prior, "visits": visits,
            "value_sum": value * visits, "expanded": False, "closed": closed, "terminal": terminal, "lost": False}


def _path(nodes: Sequence[dict], i: int) -> list[int]:
    """Node ids from the root to ``i``."""
    out: list[int] = []
    j: int | None = i
    while j is not None:
        out.append(j)
        j = nodes[j]["parent"]
    return out[::-1]


def _history(nodes: Sequence[dict], i: int) -> tuple[str, ...]:
    return tuple(nodes[j]["step"] for j in _path(nodes, i)[1:])


def _q(node: Mapping[str, Any]) -> float:
    return node["value_sum"] / node["visits"] if node["visits"] else 0.0


def _selection_score(child: Mapping[str, Any], parent_visits: int, cfg: MCTSConfig) -> float:
    """PUCT or UCT score of ``child`` (module doc); children always have ``N >= 1``."""
    if cfg.selection == "puct":
        return _q(child) + cfg.exploration * child["prior"] * math.sqrt(parent_visits) / (1 + child["visits"])
    return _q(child) + cfg.exploration * math.sqrt(math.log(max(parent_visits, 1)) / child["visits"])


def _select(nodes: Sequence[dict], cfg: MCTSConfig, rng: random.Random) -> int:
    """Descend from the root through open children by selection score to an unexpanded node."""
    i = 0
    while nodes[i]["expanded"]:
        kids = [c for c in nodes[i]["children"] if not nodes[c]["closed"]]
        scores = [_selection_score(nodes[c], nodes[i]["visits"], cfg) for c in kids]
        best = max(scores)
        ties = [c for c, s in zip(kids, scores) if s == best]
        i = ties[0] if len(ties) == 1 else rng.choice(ties)
    return i


def _priors(proposals: Sequence[tuple[str, Any, float | None]]) -> list[float]:
    """Normalised policy priors, or uniform ``1 / n`` where the policy gives none."""
    given = [p for _, _, p in proposals]
    if given and given[0] is not None:
        total = sum(p or 0.0 for p in given)
        return [(p or 0.0) / total for p in given]
    return [1.0 / len(proposals)] * len(proposals) if proposals else []


def _critic_priors(scores: Sequence[float]) -> list[float]:
    """The siblings' step scores normalised to sum 1 (uniform when they are all 0)."""
    total = float(sum(max(float(s), 0.0) for s in scores))
    if total <= 0.0:
        return [1.0 / len(scores)] * len(scores) if len(scores) else []
    return [max(float(s), 0.0) / total for s in scores]


def _grow(nodes: Sequence[dict], leaf: int, proposals: Sequence[tuple[str, Any, float | None]],
          scores: Sequence[float], cfg: MCTSConfig) -> tuple[list[dict], list[int]]:
    """The tree after expanding ``leaf`` with the scored proposals and backing their values up.

    Copy on write: changed nodes are new dicts, the others are shared with ``nodes``.
    """
    tree = list(nodes)
    parent = tree[leaf]
    new_ids = []
    priors = _priors(proposals) if cfg.prior == "policy" else _critic_priors(scores)
    for (text, env_state, _), s, prior in zip(proposals, scores, priors):
        terminal = bool(cfg.is_terminal(env_state)) if cfg.is_terminal is not None else False
        lost = not terminal and cfg.is_lost is not None and bool(cfg.is_lost(env_state))
        # the environment's outcome overrides the critic's score of the step
        step_scores = list(parent["step_scores"]) + [1.0 if terminal else 0.0 if lost else float(s)]
        depth = parent["depth"] + 1
        node = _node(leaf, text, env_state, depth, step_scores, float(_aggregate(step_scores, cfg.aggregate)),
                     prior, terminal, closed=terminal or lost or depth >= cfg.max_depth)
        tree.append({**node, "lost": lost})
        new_ids.append(len(tree) - 1)
    tree[leaf] = {**parent, "children": new_ids, "expanded": True}
    v_sim = max((tree[c]["value"] for c in new_ids), default=parent["value"])
    a: int | None = leaf
    while a is not None:  # back up; an expanded node closes when all its children are closed
        node = tree[a]
        tree[a] = {**node, "visits": node["visits"] + 1, "value_sum": node["value_sum"] + v_sim,
                   "closed": all(tree[c]["closed"] for c in node["children"])}
        a = node["parent"]
    return tree, new_ids


# --------------------------------------------------------------------------- the nodes
def _mcts_init(cfg: MCTSConfig) -> Callable[[MCTSState], dict]:
    Overwrite = _types.Overwrite

    def init(state: MCTSState) -> dict:
        """The ``init`` node: check the input and plant the root."""
        prompt = check_input(state)
        terminal = bool(cfg.is_terminal(state["root"])) if cfg.is_terminal is not None else False
        root = _node(None, None, state["root"], 0, [], 0.0, 1.0, terminal, closed=terminal)
        reason = "solved" if terminal else "recursion_limit" if too_few_steps(state, MIN_REMAINING_STEPS) else ""
        return {"prompt": prompt, "nodes": [root], "iteration": 0, "policy_calls": 0, "critic_calls": 0,
                "solution": 0 if terminal else None, "stop_reason": reason, "events": Overwrite([])}

    return init


class _Iterate:
    """The ``iterate`` node (sync and async): one select -> expand -> evaluate -> back-up."""

    def __init__(self, expand: Expand, critic: BaseCritic, cfg: MCTSConfig):
        self.expand, self.critic, self.cfg, self.guard = expand, critic, cfg, cfg.guard

    def _plan(self, state: MCTSState) -> tuple[int, int, tuple[str, ...]]:
        """``(leaf, k, history)``: the selected leaf, the proposals it may ask, its steps."""
        nodes, it = state["nodes"], int(state.get("iteration", 0)) + 1
        leaf = _select(nodes, self.cfg, random.Random(f"prm-mcts:{self.cfg.seed}:{it}"))
        k = self.guard.grant(self.cfg.branch_factor, int(state.get("policy_calls", 0)),
                             int(state.get("critic_calls", 0)))
        return leaf, k, _history(nodes, leaf)

    def _steps(self, state: MCTSState, history: tuple[str, ...], proposals: list) -> list[TextStep]:
        return [TextStep(state.get("prompt", ""), history, text) for text, _, _ in proposals]

    def __call__(self, state: MCTSState) -> dict:
        leaf, k, history = self._plan(state)
        proposals = call_expand(self.expand, state["nodes"][leaf]["state"], history, k, allow_prior=True) if k > 0 else []
        scores = score_text_steps(self.critic, self._steps(state, history, proposals), head=self.cfg.head) if proposals else None
        return self._finish(state, leaf, k, proposals, scores)

    async def acall(self, state: MCTSState) -> dict:
        """The node in async runs: awaits an async ``expand`` (a sync one runs in a worker thread)
        and scores with ``critic.ascore``."""
        leaf, k, history = self._plan(state)
        proposals = (await acall_expand(self.expand, state["nodes"][leaf]["state"], history, k, allow_prior=True)
                     if k > 0 else [])
        scores = await ascore_text_steps(self.critic, self._steps(state, history, proposals), head=self.cfg.head) if proposals else None
        return self._finish(state, leaf, k, proposals, scores)

    def _finish(self, state: MCTSState, leaf: int, k: int, proposals: list, step_scores: StepScores | None) -> dict:
        """Grow the tree, decide whether to stop, emit the iteration's event."""
        scores = [] if step_scores is None else [float(x) for x in step_scores.get(self.cfg.head)]
        nodes, new_ids = _grow(state["nodes"], leaf, proposals, scores, self.cfg)
        it = int(state.get("iteration", 0)) + 1
        policy_calls = int(state.get("policy_calls", 0)) + len(proposals)
        critic_calls = int(state.get("critic_calls", 0)) + len(proposals)
        solved = [c for c in new_ids if nodes[c]["terminal"]]
        solution = max(solved, key=lambda c: nodes[c]["value"]) if solved else None  # max: first of equals
        if solved:
            reason = "solved"
        elif self.guard.spent(policy_calls, critic_calls) or k <= 0:
            reason = "budget"
        elif nodes[0]["closed"]:
            reason = "exhausted"
        elif it >= self.cfg.max_iterations:
            reason = "max_iterations"
        else:
            reason = "recursion_limit" if too_few_steps(state, MIN_REMAINING_STEPS) else ""
        event = {"type": "prm_mcts_iteration", "iteration": it, "leaf": leaf, "depth": nodes[leaf]["depth"], "k": k,
                 "proposals": len(proposals), "step_scores": scores,
                 "values": [nodes[c]["value"] for c in new_ids], "policy_calls": policy_calls,
                 "critic_calls": critic_calls, "nodes": len(nodes), "root_visits": nodes[0]["visits"],
                 "stop_reason": reason}
        emit_event(event)
        return {"nodes": nodes, "iteration": it, "policy_calls": policy_calls, "critic_calls": critic_calls,
                "solution": solution, "stop_reason": reason, "events": [event]}


def _route(state: MCTSState) -> str:
    return _graph.END if state.get("stop_reason") else "iterate"


def build_mcts_graph(expand: Expand, critic: BaseCritic, config: MCTSConfig | None = None):
    """Build (uncompiled) the MCTS graph of the module doc: ``START -> init -> iterate* -> END``.

    Compile it with your checkpointer and invoke it with ``{"prompt": ..., "root": env_state}``;
    :func:`mcts_search_result` turns its final state into a ``SearchResult``. :class:`MCTSSearch`
    does all of this.
    """
    if not callable(expand):
        raise TypeError(f"expand: expected a callable expand(env_state, history, k), got {type(expand).__name__} "
                        f"{expand!r}")
    critic = check_critic(critic)
    if config is None:
        config = MCTSConfig()
    elif not isinstance(config, MCTSConfig):
        raise TypeError(f"config: expected an MCTSConfig or None, got {type(config).__name__} {config!r}")
    node = _Iterate(expand, critic, config)
    builder = _graph.StateGraph(MCTSState)
    builder.add_node("init", _mcts_init(config))
    builder.add_node("iterate", RunnableLambda(node, afunc=node.acall, name="iterate"))
    builder.add_edge(_graph.START, "init")
    builder.add_conditional_edges("init", _route, ["iterate", _graph.END])
    builder.add_conditional_edges("iterate", _route, ["iterate", _graph.END])
    return builder


# --------------------------------------------------------------------------- the answer
def _principal_leaf(nodes: Sequence[dict]) -> int:
    """From the root, the most visited child not lost (ties: higher Q, then proposal order) down to
    a node without such a child."""
    i = 0
    while True:
        kids = [c for c in nodes[i]["children"] if not nodes[c].get("lost")]
        if not kids:
            return i
        i = max(kids, key=lambda c: (nodes[c]["visits"], _q(nodes[c]), -kids.index(c)))


def mcts_search_result(final: Mapping[str, Any]) -> SearchResult:
    """The :class:`~prm_critic.langgraph.search.SearchResult` of a finished MCTS graph run (its
    final state): the solution, else the principal variation (module doc), with the run's events."""
    if not isinstance(final, Mapping) or not final.get("nodes"):
        raise TypeError(f"final: expected the MCTS graph's final state (a mapping with 'nodes'), got {final!r:.120}")
    nodes = final["nodes"]
    end = final["solution"] if final.get("solution") is not None else _principal_leaf(nodes)
    path = _path(nodes, end)
    node = nodes[end]
    stats = {"iterations": int(final.get("iteration", 0)), "nodes": len(nodes), "root_visits": nodes[0]["visits"],
             "depth": node["depth"], "visits": node["visits"], "q": _q(node),
             "max_depth_reached": max(n["depth"] for n in nodes)}
    return SearchResult(steps=tuple(nodes[j]["step"] for j in path[1:]), state=node["state"],
                        score=float(node["value"]) if end != 0 else None,
                        step_scores=tuple(float(s) for s in node["step_scores"]), solved=bool(node["terminal"]),
                        stop_reason=str(final.get("stop_reason", "")), policy_calls=int(final.get("policy_calls", 0)),
                        critic_calls=int(final.get("critic_calls", 0)), events=tuple(final.get("events") or ()),
                        stats=stats)


class MCTSSearch(GraphSearch):
    """MCTS with PRM values over a forkable tool environment: one object, sync and async.

    ``MCTSSearch(expand, critic, config=None, *, checkpointer=None, **config_fields)``;
    ``search.invoke({"prompt": task, "root": env_state}, config)`` and ``await search.ainvoke(...)``
    run the compiled graph of :func:`build_mcts_graph` and return a
    :class:`~prm_critic.langgraph.search.SearchResult` (the module doc says what it holds; its events
    are the ``prm_mcts_iteration`` events the run kept in its state); the rest is
    :class:`~prm_critic.langgraph.search.GraphSearch`'s. ``expand`` may give a prior per proposal:
    ``[(step_text, next_env_state[, prior]), ...]``. ``config`` is an :class:`MCTSConfig`, or its
    fields are given as keyword arguments (not both).
    """

    config_type = MCTSConfig
    event_type = "prm_mcts_iteration"

    def build_graph(self, expand: Expand, critic: BaseCritic, config: MCTSConfig) -> Any:
        return build_mcts_graph(expand, critic, config)

    def result(self, final: Mapping[str, Any], events: tuple[dict, ...]) -> SearchResult:
        if not final.get("nodes"):  # recursion_limit=1: no node ran
            return SearchResult(steps=(), state=final["root"], score=None, step_scores=(), solved=False,
                                stop_reason="recursion_limit", policy_calls=0, critic_calls=0, events=(),
                                stats={"iterations": 0, "nodes": 0})
        return mcts_search_result(final)
