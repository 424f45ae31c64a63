"""Success sources: where a step's success flag comes from (a spec's ``[task] success.source``).

A source is a :class:`SuccessSource` in a registry, like the label families
(:mod:`prm_critic.robotics.families`): the spec names it, and every place that needs a step's
success (collection, Monte-Carlo labels, Minari import, the training monitor, evaluation, the zoo
wrapper) asks the source, never tests its name. Built in:

=================  =====================================================================================
``info``           ``info[key]`` is true (Fetch ``is_success``, PointMaze ``success``)
``kitchen_tasks``  FrankaKitchen's ``info["tasks_to_complete"]`` is empty
``subgoals``       every subgoal of the spec holds on the step's next state (envs without a success flag,
                   e.g. Pusher); ``reads_state``: the flag comes from the critic input, not ``info``
``survived``       the episode reached the time limit without terminating: the step is truncated and
                   not terminated, and not cut short by the dead-end pruner (``info["prm_pruned"]``),
                   e.g. InvertedPendulum (terminated when the pole falls)
=================  =====================================================================================

The spec's ``rule`` turns step flags into the episode's: ``"final"`` (the last step's flag) or ``"any"``.

A new source: ``register_success_source(SuccessSource("name", flag, description=...))`` before the spec
that names it is loaded; ``flag(success, info, terminated, truncated)`` returns the step's flag (or
``None`` for a source with ``reads_state=True``), ``success`` being the spec's ``SuccessSpec``.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping

from prm_critic import validate

if TYPE_CHECKING:
    from prm_critic.robotics.spec import SuccessSpec

__all__ = ["SuccessSource", "register_success_source", "unregister_success_source", "get_success_source",
           "success_sources"]

#: ``flag(success, info, terminated, truncated)`` -> the step's success flag, ``None`` for a state source
SuccessFlag = Callable[["SuccessSpec", Mapping[str, Any], bool, bool], "bool | None"]


@dataclass(frozen=True)
class SuccessSource:
    """One way to read a step's success.

    Args:
        name: what a spec's ``success.source`` names.
        flag: ``flag(success, info, terminated, truncated)`` -> the step's flag (``None`` when
            ``reads_state``).
        reads_state: the flag is "every subgoal holds" on the step's next critic input (the spec must have
            subgoals; the callers build a ``SubgoalEvaluator``).
        needs_key: the spec's ``success.key`` names an info key (a string).
        description: one line for error messages and docs.
    """

    name: str
    flag: SuccessFlag
    reads_state: bool = False
    needs_key: bool = False
    description: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise validate.ArgumentError(f"name: expected a non-empty string, got {self.name!r}")
        if not callable(self.flag):
            raise validate.ArgumentError(f"flag: expected a callable (success, info, terminated, truncated) -> bool, "
                                         f"got {type(self.flag).__name__}")


_SOURCES: dict[str, SuccessSource] = {}


def register_success_source(source: SuccessSource, *, replace: bool = False) -> SuccessSource:
    """Add ``source`` to the registry (``replace=True`` to redefine a name); returns it."""
    if not isinstance(source, SuccessSource):
        raise TypeError(f"source: expected a SuccessSource, got {type(source).__name__}")
    if source.name in _SOURCES and not replace:
        raise ValueError(f"source: {source.name!r} is already registered; pass replace=True to redefine it")
    _SOURCES[source.name] = source
    return source


def unregister_success_source(name: str) -> None:
    """Remove a registered source (a test's, or a redefinition's)."""
    if name not in _SOURCES:
        raise KeyError(f"name: no success source {name!r}; registered: {sorted(_SOURCES)}")
    del _SOURCES[name]


def get_success_source(name: str) -> SuccessSource:
    """The registered source ``name``.

    Raises:
        KeyError: no such source (the message lists the registered ones and the closest name).
    """
    try:
        return _SOURCES[name]
    except (KeyError, TypeError):
        close = difflib.get_close_matches(str(name), list(_SOURCES), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise KeyError(f"success source {name!r} is not registered; expected one of {sorted(_SOURCES)}{hint}") from None


def success_sources() -> tuple[str, ...]:
    """The registered source names, in registration order."""
    return tuple(_SOURCES)


def _info_flag(success: "SuccessSpec", info: Mapping[str, Any], terminated: bool, truncated: bool) -> bool:
    key = success.key
    if key is None:  # SuccessSpec.from_dict refuses this; a SuccessSpec built by hand may not
        raise KeyError("success.key is None; source 'info' needs the info key as a string")
    if key not in info:
        raise KeyError(f"info: missing success key {key!r}")
    return bool(info[key])


def _kitchen_flag(success: "SuccessSpec", info: Mapping[str, Any], terminated: bool, truncated: bool) -> bool:
    return len(info.get("tasks_to_complete", [1])) == 0


def _state_flag(success: "SuccessSpec", info: Mapping[str, Any], terminated: bool, truncated: bool) -> None:
    return None


def _survived_flag(success: "SuccessSpec", info: Mapping[str, Any], terminated: bool, truncated: bool) -> bool:
    return bool(truncated) and not terminated and not info.get("prm_pruned", False)


register_success_source(SuccessSource("info", _info_flag, needs_key=True, description="info[key] is true"))
register_success_source(SuccessSource("subgoals", _state_flag, reads_state=True,
                                      description="every subgoal holds on the next state"))
register_success_source(SuccessSource("kitchen_tasks", _kitchen_flag,
                                      description="info['tasks_to_complete'] is empty"))
register_success_source(SuccessSource("survived", _survived_flag,
                                      description="the episode reached the time limit without terminating"))
