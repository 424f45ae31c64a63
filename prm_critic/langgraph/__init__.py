"""LangGraph / LangChain integration of step critics.

* :class:`StepCriticNode` with its routers ``node.router()`` (after the critic) and
  ``node.agent_router()`` (after the agent): a critic node for hand-built ``StateGraph`` agents
  (records, custom stream events, retry / end / backtrack, and an end before ``recursion_limit``
  instead of ``GraphRecursionError``). The module-level ``route_after_critic``, ``critic_router``,
  ``route_after_agent`` and ``agent_router`` are deprecated spellings of those routers.
* :class:`PRMBestOfNMiddleware`, :class:`PRMStepScoringMiddleware`: middleware for langchain v1
  ``create_agent`` (best-of-N tool calls before any tool runs; scoring executed steps).
* The searches over a forkable tool environment, one shape: a ``Runnable`` built from ``(expand,
  critic, config)`` whose ``invoke`` / ``ainvoke`` return a :class:`SearchResult`, budgets
  ``policy_budget`` / ``critic_budget``:
  :class:`BeamSearch` (:class:`BeamConfig`, :func:`build_beam_search_graph`): critic-guided beam
  search; :class:`MCTSSearch` (:class:`MCTSConfig`, :func:`build_mcts_graph`): Monte Carlo tree
  search with the critic's step scores as values (PUCT/UCT). The registry (:func:`get_search`,
  :func:`register_search`, :class:`SearchKind`, :func:`searches`) names them ``"beam"`` and ``"mcts"``.
* :class:`TextEnvExpand`: the searches' ``expand`` over a forkable text environment
  (:mod:`prm_critic.text.envs`: TextWorld, TextWorldExpress, your own).
* ``search`` (:class:`SearchBudget`, :class:`SearchResult`): what the searches share -- the
  call budgets, the step-limit guard, custom stream events, the result type.
* :class:`CheckpointBacktracker`, :func:`backtrack_to_best`: fork a checkpointed run back to just
  before its first low-scoring step.

Needs the ``agents`` extra (``pip install "prm-critic[agents]"``); importing this package without
it raises an ImportError naming that command.
"""

from prm_critic import _deprecation
from prm_critic._optional import require as _require

_require("langgraph", "agents")
_require("langchain", "agents")

from prm_critic.langgraph._common import format_tool_call, render_steps  # noqa: E402
from prm_critic.langgraph.backtrack import BacktrackResult, CheckpointBacktracker, backtrack_to_best  # noqa: E402
from prm_critic.langgraph.search import GraphSearch, SearchBudget, SearchResult  # noqa: E402
from prm_critic.langgraph.beam import (  # noqa: E402
    BeamConfig, BeamSearch, BeamState, beam_search_result, build_beam_search_graph,
)
from prm_critic.langgraph.mcts import MCTSConfig, MCTSSearch, MCTSState, build_mcts_graph, mcts_search_result  # noqa: E402
from prm_critic.langgraph.registry import SearchKind, get_search, register_search, searches, unregister_search  # noqa: E402
from prm_critic.langgraph.text_env import TextEnvExpand  # noqa: E402
from prm_critic.langgraph.middleware import (  # noqa: E402
    BestOfNState,
    PRMBestOfNMiddleware,
    PRMStepScoringMiddleware,
    StepScoresState,
)
from prm_critic.langgraph import node as _node  # noqa: E402
from prm_critic.langgraph.node import CriticState, StepCriticNode, add_step_records  # noqa: E402

__all__ = [
    "StepCriticNode",
    "CriticState",
    "add_step_records",
    "PRMBestOfNMiddleware",
    "PRMStepScoringMiddleware",
    "BestOfNState",
    "StepScoresState",
    "BeamSearch",
    "BeamConfig",
    "build_beam_search_graph",
    "BeamState",
    "beam_search_result",
    "MCTSSearch",
    "MCTSConfig",
    "MCTSState",
    "build_mcts_graph",
    "mcts_search_result",
    "TextEnvExpand",
    "SearchBudget",
    "SearchResult",
    "GraphSearch",
    "SearchKind",
    "get_search",
    "register_search",
    "unregister_search",
    "searches",
    "CheckpointBacktracker",
    "BacktrackResult",
    "backtrack_to_best",
    "format_tool_call",
    "render_steps",
]

__getattr__ = _deprecation.module_getattr(__name__, _node.OLD_ROUTERS)  # the deprecated router spellings
