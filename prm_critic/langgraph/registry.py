"""The registry of searches: name -> search class and its config, what a benchmark or an app
dispatches on (like the label families, :mod:`prm_critic.robotics.families`).

=========  =====================================================================================
``beam``   :class:`~prm_critic.langgraph.BeamSearch` (:class:`~prm_critic.langgraph.BeamConfig`):
           the ``beam_width`` best paths per depth, dead-end pruning
``mcts``   :class:`~prm_critic.langgraph.MCTSSearch` (:class:`~prm_critic.langgraph.MCTSConfig`):
           Monte Carlo tree search with the critic's path values (PUCT / UCT)
=========  =====================================================================================

Every registered search takes ``(expand, critic, config=None, *, checkpointer=None, **config_fields)``
and its ``invoke`` / ``ainvoke`` return a :class:`~prm_critic.langgraph.SearchResult`::

    kind = get_search("beam")
    result = kind.build(expand, critic, policy_budget=40, is_terminal=solved).invoke({"prompt": task, "root": s0})

A search of your own: ``register_search(SearchKind("best_first", BestFirstSearch, BestFirstConfig))``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from prm_critic import validate
from prm_critic.langgraph.beam import BeamConfig, BeamSearch
from prm_critic.langgraph.mcts import MCTSConfig, MCTSSearch

__all__ = ["SearchKind", "register_search", "unregister_search", "get_search", "searches"]


@dataclass(frozen=True)
class SearchKind:
    """One registered search.

    Args:
        name: the registry key (a non-empty string of letters, digits and ``_``).
        search: the search class: ``search(expand, critic, config, *, checkpointer=None)`` is a
            ``Runnable`` whose ``invoke`` returns a ``SearchResult``.
        config: its config class, a frozen dataclass (checked in ``__post_init__``).
        description: one line for listings and error messages.
    """

    name: str
    search: type
    config: type
    description: str = ""

    def __post_init__(self) -> None:
        name = self.name
        if not isinstance(name, str) or not name or not name.replace("_", "").isalnum() or not name.isascii():
            raise validate.ArgumentError(f"name: expected a non-empty string of letters, digits and '_', got {name!r}")
        if not isinstance(self.search, type):
            raise validate.ArgumentError(f"search: expected the search class of {name!r}, got {self.search!r}")
        params = getattr(self.config, "__dataclass_params__", None)
        if not isinstance(self.config, type) or params is None or not params.frozen:
            raise validate.ArgumentError(f"config: expected a frozen dataclass (the config class of search {name!r}), "
                                         f"got {self.config!r}")
        if not isinstance(self.description, str):
            raise validate.ArgumentError(f"description: expected a string for search {name!r}, got {self.description!r}")

    def build(self, expand: Any, critic: Any, config: Any = None, *, checkpointer: Any = None, **params: Any) -> Any:
        """The search object ``search(expand, critic, config, checkpointer=...)``; ``config`` may be
        given as its fields instead (:func:`prm_critic.validate.config_from`)."""
        return self.search(expand, critic, validate.config_from(self.config, config, **params), checkpointer=checkpointer)


_SEARCHES: dict[str, SearchKind] = {}


def register_search(kind: SearchKind, *, replace: bool = False) -> SearchKind:
    """Add ``kind`` to the registry (``replace=True`` replaces one of the same name); returns it."""
    return validate.register(_SEARCHES, kind, SearchKind, arg="kind", cls_name="prm_critic.langgraph.SearchKind",
                             noun="search", replace=replace)


def unregister_search(name: str) -> SearchKind:
    """Remove and return the search registered as ``name`` (an unknown name is refused, with a near miss)."""
    return _SEARCHES.pop(validate.check_choice("search", name, searches()))


def get_search(name: str) -> SearchKind:
    """The registered search ``name`` (:class:`~prm_critic.validate.ArgumentError` with a near miss otherwise)."""
    return _SEARCHES[validate.check_choice("search", name, searches())]


def searches() -> tuple[str, ...]:
    """Names of the registered searches, in registration order."""
    return tuple(_SEARCHES)


register_search(SearchKind("beam", BeamSearch, BeamConfig,
                           description="the beam_width best paths per depth, with dead-end pruning"))
register_search(SearchKind("mcts", MCTSSearch, MCTSConfig,
                           description="Monte Carlo tree search with the critic's path values (PUCT / UCT)"))
