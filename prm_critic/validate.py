"""Argument checks shared by the whole library: one place, one message style.

Every check returns the value in its canonical type (``int``, ``float``, ``bool``, ``str``,
``Path``) or raises :class:`ArgumentError` naming the argument, the value and what was expected::

    positive_int("n_envs", 0)          # ArgumentError: n_envs: expected a positive integer, got 0
    check_gamma("gamma", 1.5)           # ArgumentError: gamma: expected a number in (0, 1], got 1.5
    check_choice("algo", "sax", ALGOS)  # ArgumentError: algo: expected one of [...], got 'sax'; did you mean 'sac'?

:class:`ArgumentError` is both a ``ValueError`` and a ``TypeError``: a wrong value and a wrong
type are the same mistake for the caller (a bad argument), and ``except ValueError`` catches both.
``bool`` is never accepted as a number (``True`` is an ``int`` in Python). numpy scalars are
accepted (they register as :class:`numbers.Integral` / :class:`numbers.Real`).
The checks that take ``allow_none`` are typed ``int`` / ``float`` / ``str`` without it and
``... | None`` with it, so a caller's attribute gets the narrow type.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import numbers
import os
from pathlib import Path
from typing import Any, Literal, Mapping, Sequence, TypeVar, overload

__all__ = [
    "ArgumentError", "check_int", "positive_int", "check_number", "check_prob", "check_gamma", "check_seed",
    "check_flag", "check_str", "check_choice", "check_file", "env_kind", "check_one_env", "check_list", "config_from",
    "config_dict", "config_from_dict", "set_checked", "DictConfig",
]


class ArgumentError(ValueError, TypeError):
    """An argument the library cannot use; the message names it, its value and what was expected."""


def _is_int(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, numbers.Integral)


def _is_real(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, numbers.Real)


@overload
def check_int(name: str, value: Any, *, minimum: int, allow_none: Literal[False] = ..., hint: str = ...) -> int: ...
@overload
def check_int(name: str, value: Any, *, minimum: int, allow_none: bool, hint: str = ...) -> int | None: ...
def check_int(name: str, value: Any, *, minimum: int, allow_none: bool = False, hint: str = "") -> int | None:
    """``value`` as an ``int >= minimum`` (``None`` too with ``allow_none``); ``hint`` is added to the message."""
    if value is None and allow_none:
        return None
    if not _is_int(value):
        expected = "an int" + (" or None" if allow_none else "")
        raise ArgumentError(f"{name}: expected {expected} >= {minimum}{hint}, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise ArgumentError(f"{name}: expected an int >= {minimum}{hint}, got {value!r}")
    return int(value)


@overload
def positive_int(name: str, value: Any, *, allow_none: Literal[False] = ..., unit: str = ...) -> int: ...
@overload
def positive_int(name: str, value: Any, *, allow_none: bool, unit: str = ...) -> int | None: ...
def positive_int(name: str, value: Any, *, allow_none: bool = False, unit: str = "") -> int | None:
    """``value`` as an ``int > 0`` (``None`` too with ``allow_none``); ``unit`` is named in the message."""
    if value is None and allow_none:
        return None
    if not _is_int(value) or value <= 0:
        what = ("None or a positive integer" if allow_none else "a positive integer") + (f" ({unit})" if unit else "")
        raise ArgumentError(f"{name}: expected {what}, got {value!r}")
    return int(value)


@overload
def check_number(name: str, value: Any, *, low: float | None = ..., high: float | None = ..., positive: bool = ...,
                 allow_none: Literal[False] = ...) -> float: ...
@overload
def check_number(name: str, value: Any, *, low: float | None = ..., high: float | None = ..., positive: bool = ...,
                 allow_none: bool) -> float | None: ...
def check_number(name: str, value: Any, *, low: float | None = None, high: float | None = None,
                 positive: bool = False, allow_none: bool = False) -> float | None:
    """``value`` as a finite ``float`` with ``low <= value <= high`` (and ``> 0`` with ``positive``)."""
    if value is None and allow_none:
        return None
    ok = _is_real(value)
    if ok:
        v = float(value)
        ok = math.isfinite(v) and (low is None or v >= low) and (high is None or v <= high) and (not positive or v > 0)
    if not ok:
        rng = ([] if not positive else ["> 0"]) + ([] if low is None else [f">= {low}"]) \
            + ([] if high is None else [f"<= {high}"])
        what = "a finite number" + (f" {' and '.join(rng)}" if rng else "") + (" or None" if allow_none else "")
        raise ArgumentError(f"{name}: expected {what}, got {value!r}")
    return float(value)


@overload
def check_prob(name: str, value: Any, *, allow_none: Literal[False] = ..., noun: str = ...,
               hint: str = ...) -> float: ...
@overload
def check_prob(name: str, value: Any, *, allow_none: bool, noun: str = ..., hint: str = ...) -> float | None: ...
def check_prob(name: str, value: Any, *, allow_none: bool = False, noun: str = "a number",
               hint: str = "") -> float | None:
    """``value`` as a ``float`` in ``[0, 1]`` (a probability or a critic score); ``hint`` is added to the message."""
    if value is None and allow_none:
        return None
    if not _is_real(value) or not 0.0 <= float(value) <= 1.0:
        if not _is_real(value):
            raise ArgumentError(f"{name}: expected {noun} in [0, 1]{' or None' if allow_none else ''}, "
                                f"got {type(value).__name__} {value!r}")
        raise ArgumentError(f"{name}: expected {noun} in [0, 1]{hint}, got {value!r}")
    return float(value)


def check_gamma(name: str, value: Any, *, hint: str = "") -> float:
    """A discount factor: a ``float`` in ``(0, 1]``; ``hint`` is added to the message."""
    if not _is_real(value) or not math.isfinite(float(value)) or not 0.0 < float(value) <= 1.0:
        raise ArgumentError(f"{name}: expected a number in (0, 1]{hint}, got {value!r}")
    return float(value)


def check_seed(name: str, value: Any) -> int:
    """A seed numpy and the RL libraries accept: an ``int`` in ``[0, 2**32)``."""
    if not _is_int(value) or not 0 <= value < 2**32:
        raise ArgumentError(f"{name}: expected an integer in [0, 2**32), got {value!r}")
    return int(value)


def check_flag(name: str, value: Any) -> bool:
    """A ``bool`` flag (``1``, ``"yes"`` and ``None`` are refused: no truthiness guessing)."""
    if not isinstance(value, bool):
        raise ArgumentError(f"{name}: expected True or False, got {value!r}")
    return value


@overload
def check_str(name: str, value: Any, *, allow_none: Literal[False] = ...) -> str: ...
@overload
def check_str(name: str, value: Any, *, allow_none: bool) -> str | None: ...
def check_str(name: str, value: Any, *, allow_none: bool = False) -> str | None:
    """A non-empty ``str`` (``None`` too with ``allow_none``)."""
    if value is None and allow_none:
        return None
    if not isinstance(value, str) or not value:
        expected = "a non-empty str" + (" or None" if allow_none else "")
        raise ArgumentError(f"{name}: expected {expected}, got {type(value).__name__} {value!r}")
    return value


@overload
def check_choice(name: str, value: Any, choices: Sequence[str], *, allow_none: Literal[False] = ...) -> str: ...
@overload
def check_choice(name: str, value: Any, choices: Sequence[str], *, allow_none: bool) -> str | None: ...
def check_choice(name: str, value: Any, choices: Sequence[str], *, allow_none: bool = False) -> str | None:
    """One of ``choices``; a near miss is named (``did you mean ...?``)."""
    if value is None and allow_none:
        return None
    if not isinstance(value, str) or value not in choices:
        close = difflib.get_close_matches(value, list(choices), n=1) if isinstance(value, str) else []
        hint = f"; did you mean {close[0]!r}?" if close else ""
        none = " or None" if allow_none else ""
        raise ArgumentError(f"{name}: expected one of {list(choices)}{none}, got {value!r}{hint}")
    return value


C = TypeVar("C")


def check_list(name: str, value: Any, cls: type[C], *, noun: str = "", allow_empty: bool = False) -> list[C]:
    """``value`` (a sequence, not a ``str``) as a list of ``cls`` instances, non-empty unless ``allow_empty``
    (the message names ``noun``, default the class name)."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise ArgumentError(f"{name}: expected a list of {cls.__name__}, got {type(value).__name__}")
    items = list(value)
    if not items and not allow_empty:
        raise ArgumentError(f"{name}: expected at least one {noun or cls.__name__}, got an empty list")
    for i, v in enumerate(items):
        if not isinstance(v, cls):
            raise ArgumentError(f"{name}[{i}]: expected {cls.__name__}, got {type(v).__name__}")
    return items


def config_from(cls: type[C], config: C | None = None, /, **fields: Any) -> C:
    """The one way an entry point takes its settings: ``config`` (an instance of the frozen dataclass
    ``cls``) or ``cls(**fields)``, never both. A keyword that is not a field of ``cls`` is refused
    naming the fields (and a near miss); each value is checked by ``cls`` itself."""
    an = "an" if cls.__name__[:1] in "AEIOU" or cls.__name__[:2].isupper() else "a"
    if config is not None:
        if fields:
            raise ArgumentError(f"config: pass {an} {cls.__name__} or its fields as keyword arguments, not both "
                                f"(got config and {sorted(fields)})")
        if not isinstance(config, cls):
            raise ArgumentError(f"config: expected {an} {cls.__name__} or None, got {type(config).__name__} {config!r}")
        return config
    known = [f.name for f in dataclasses.fields(cls) if f.init]  # type: ignore[arg-type]
    for name in fields:
        if name not in known:
            close = difflib.get_close_matches(name, known, n=1)
            raise ArgumentError(f"{name}: not a setting of {cls.__name__}; expected one of {known}"
                                + (f"; did you mean {close[0]!r}?" if close else ""))
    return cls(**fields)


def config_dict(config: Any) -> dict[str, Any]:
    """A frozen config's fields as JSON-ready values (tuples as lists): what ``config_from_dict`` reads."""
    return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(config).items()}


def config_from_dict(cls: type[C], d: Any, *, name: str = "config") -> C:
    """``cls(**d)`` for a dict read back (e.g. from JSON); a key that is not a field of ``cls`` is refused."""
    known = sorted(f.name for f in dataclasses.fields(cls))  # type: ignore[arg-type]
    unknown = sorted(set(d) - set(known))
    if unknown:
        raise ArgumentError(f"{name}: unknown field(s) {unknown}; expected fields from {known}")
    return cls(**d)


def set_checked(config: Any, checked: Mapping[str, Any]) -> None:
    """Store the checked values on a frozen dataclass, from its ``__post_init__``."""
    for name, value in checked.items():
        object.__setattr__(config, name, value)


class DictConfig:
    """``to_dict`` / ``from_dict`` of a frozen config dataclass (:func:`config_dict`, :func:`config_from_dict`)."""

    def to_dict(self) -> dict[str, Any]:
        return config_dict(self)

    @classmethod
    def from_dict(cls: type[C], d: Mapping[str, Any]) -> C:
        return config_from_dict(cls, d)


def check_file(name: str, path: Any, *, what: str = "file") -> Path:
    """``path`` (a ``str`` or ``os.PathLike``) as a :class:`Path` to an existing file."""
    if not isinstance(path, (str, os.PathLike)):
        raise ArgumentError(f"{name}: expected a path to a {what}, got {type(path).__name__} {path!r}")
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{name}: {what} {str(p)!r} does not exist")
    return p


#: the kinds of env (:func:`env_kind`), told apart by their classes' bases
SINGLE_ENV = "single gymnasium.Env"
GYM_VECTOR_ENV = "gymnasium.vector.VectorEnv"
SB3_VEC_ENV = "stable-baselines3 VecEnv"
_KIND_OF_BASE = {("gymnasium", "Env"): SINGLE_ENV, ("gymnasium", "VectorEnv"): GYM_VECTOR_ENV,
                 ("stable_baselines3", "VecEnv"): SB3_VEC_ENV}


def env_kind(env: Any) -> str | None:
    """Which kind of env ``env`` is (``SINGLE_ENV``, ``GYM_VECTOR_ENV``, ``SB3_VEC_ENV``), from its
    class's bases, without importing gymnasium or stable-baselines3; ``None`` for anything else."""
    for cls in type(env).__mro__:
        kind = _KIND_OF_BASE.get(((cls.__module__ or "").split(".")[0], cls.__name__))
        if kind is not None:
            return kind
    return None


def check_one_env(name: str, env: Any, *, what: str, fix: str) -> Any:
    """``env`` unchanged, unless it is a vector env (gymnasium ``VectorEnv`` or stable-baselines3
    ``VecEnv``) where ``what`` takes one env: that mistake is named, with ``fix`` (its batched spaces
    would otherwise fail later, in a check that blames the spec or the space)."""
    kind = env_kind(env)
    if kind in (GYM_VECTOR_ENV, SB3_VEC_ENV):
        n = getattr(env, "num_envs", None)
        of = f" of {n} envs" if isinstance(n, int) else ""
        raise ArgumentError(f"{name}: {what} takes one env, got {type(env).__name__}, a {kind}{of}; {fix}")
    return env


def register(table: dict, item: Any, cls: Any, *, arg: str, cls_name: str, noun: str, replace: bool) -> Any:
    """Add ``item`` (an instance of ``cls``, keyed by its ``name``) to a registry ``table`` and return it; a name
    already taken is refused unless ``replace``. The one body of every ``register_*`` function."""
    if not isinstance(item, cls):
        raise ArgumentError(f"{arg}: expected a {cls_name}, got {type(item).__name__} {item!r}")
    check_flag("replace", replace)
    if item.name in table and not replace:
        raise ArgumentError(f"{arg}: a {noun} named {item.name!r} is already registered; pass replace=True to "
                            "replace it")
    table[item.name] = item
    return item
