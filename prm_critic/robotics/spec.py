"""Declarative task specs: ordered subgoals, success signal, goal keys, critic input layout.

A spec is a small TOML file (or a dict). The built-in ones live in the project's ``envs/specs/``
folder and ship inside the wheel. A spec for your own env is about ten lines::

    [task]
    name = "FetchPush-v4"
    env_id = "FetchPush-v4"
    critic_input = ["observation", "achieved_goal", "desired_goal"]
    goal_keys = ["achieved_goal", "desired_goal"]
    success = { source = "info", key = "is_success", rule = "final" }
    controller = { name = "fetch_push" }

    [[subgoals]]
    name = "gripper_near_object"
    a = "observation[0:3]"
    b = "observation[3:6]"
    threshold = 0.05
    scale = 0.3

    [[subgoals]]
    name = "object_at_goal"
    a = "achieved_goal"
    b = "desired_goal"
    threshold = 0.05
    scale = 0.3

Subgoal ``kind = "distance"`` (default) holds when ``||a - b|| < threshold``; inside the current
subgoal, progress grows as ``clip(1 - ||a - b|| / scale, 0, 1)``. ``a`` and ``b`` are affine
expressions (:class:`Expr`) over the keys named in ``critic_input``: ``key``, ``key[i]``,
``key[start:stop]``, constants (``b = 0``, ``b = [0.1, 0, 0]``), ``+``, ``-`` and ``*`` / ``/`` by a
constant, e.g. for Reacher-v5, whose ``obs[8:10]`` is fingertip - target::

    a = "obs[8:10]"                   # or the fingertip itself: a = "obs[8:10] + obs[4:6]"
    b = 0                             #                          b = "obs[4:6]"

A scalar constant fits any width; every other operand, and ``a``, ``b`` and ``behind``, must have
the same width. Other kinds (``maze_path``) are evaluated by :mod:`prm_critic.robotics.subgoals`.

An *approach point* replaces ``b`` by the point ``offset`` beyond ``b`` on the line from
``behind`` through ``b``::

    b* = b + offset * (b - behind) / ||b - behind||        (b* = b where b == behind)

e.g. ``behind = "desired_goal"``, ``offset = 0.06`` is the spot behind the block from which a push
moves it towards the goal. A pusher touching the block sits there for the whole push, so the
subgoal keeps holding while the block moves (with ``b`` = the block itself the gripper-block
distance straddles the threshold mid-push and the potential drops).

Unknown or misspelled fields raise :class:`SpecError` naming the field (with a suggestion); an
expression that cannot be read, or whose widths differ, raises one naming the spec file, the
subgoal, the field, the text and what was expected.
"""

from __future__ import annotations

import difflib
import math
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Mapping, NoReturn

from prm_critic.robotics.success import get_success_source

try:
    import tomllib  # Python >= 3.11
except ImportError:  # pragma: no cover - Python 3.10: the `tomli` backport, a declared dependency there
    try:
        import tomli as tomllib
    except ImportError as exc:
        raise ImportError(
            "prm_critic.robotics reads TOML task specs and needs `tomllib` (Python >= 3.11) or the "
            "`tomli` backport on Python 3.10, which is missing: pip install \"tomli>=2\""
        ) from exc

__all__ = ["SpecError", "SubgoalSpec", "SuccessSpec", "TaskSpec", "load_spec", "list_builtin_specs", "ObsExpr", "Expr"]


class SpecError(ValueError):
    """A task spec is invalid (unknown field, bad value, unknown task)."""


_EXPR = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_ ]*?)\s*(?:\[\s*(-?\d*)\s*:\s*(-?\d*)\s*\])?\s*$")


@dataclass(frozen=True)
class ObsExpr:
    """A parsed ``key`` or ``key[start:stop]`` expression over the critic-input keys."""

    key: str
    start: int | None = None
    stop: int | None = None

    @classmethod
    def parse(cls, text: str, where: str) -> "ObsExpr":
        m = _EXPR.match(text) if isinstance(text, str) else None
        if not m:
            raise SpecError(f"{where}: expected an expression like 'observation[0:3]' or 'desired_goal', got {text!r}")
        key, a, b = m.group(1), m.group(2), m.group(3)
        return cls(key, int(a) if a else None, int(b) if b else None)

    def __str__(self) -> str:
        if self.start is None and self.stop is None:
            return self.key
        return f"{self.key}[{'' if self.start is None else self.start}:{'' if self.stop is None else self.stop}]"


_TOKEN = re.compile(r"\s*(?:(?P<num>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)|(?P<name>[A-Za-z_][A-Za-z0-9_]*)|(?P<op>[-+*/()\[\]:,]))")

#: expression node kinds: ("const", float | tuple[float, ...]), ("ref", ObsExpr), ("neg", node),
#: ("add" | "sub" | "mul" | "div", left, right)
SCALAR = 0  # width of a scalar constant: it broadcasts to any width


def _const_width(v: Any) -> int:
    return SCALAR if isinstance(v, float) else len(v)


def _fold(op: str, l: Any, r: Any) -> Any:
    """Combine two constants (scalars broadcast; vectors of the same length element by element)."""
    import operator

    f = {"add": operator.add, "sub": operator.sub, "mul": operator.mul, "div": operator.truediv}[op]
    if isinstance(l, float) and isinstance(r, float):
        return f(l, r)
    n = len(l) if not isinstance(l, float) else len(r)
    ls = [l] * n if isinstance(l, float) else list(l)
    rs = [r] * n if isinstance(r, float) else list(r)
    return tuple(f(x, y) for x, y in zip(ls, rs))


def _fmt_num(v: float) -> str:
    return str(int(v)) if float(v).is_integer() and abs(v) < 1e15 else repr(float(v))


def _render(node: tuple, prec: int = 0) -> str:
    kind = node[0]
    if kind == "const":
        v = node[1]
        return _fmt_num(v) if isinstance(v, float) else "[" + ", ".join(_fmt_num(x) for x in v) + "]"
    if kind == "ref":
        return str(node[1])
    if kind == "neg":
        s = "-" + _render(node[1], 3)
        return f"({s})" if prec > 3 else s
    p = 1 if kind in ("add", "sub") else 2
    sym = {"add": "+", "sub": "-", "mul": "*", "div": "/"}[kind]
    s = f"{_render(node[1], p)} {sym} {_render(node[2], p + 1)}"
    return f"({s})" if prec > p else s


def _refs(node: tuple) -> list["ObsExpr"]:
    if node[0] == "ref":
        return [node[1]]
    if node[0] == "const":
        return []
    return [r for child in node[1:] for r in _refs(child)]


def _consts(node: tuple) -> list:
    if node[0] == "const":
        return [node[1]]
    if node[0] == "ref":
        return []
    return [c for child in node[1:] for c in _consts(child)]


def expr_width(node: tuple, ref_width, on_error) -> int | None:
    """Width of ``node``: ``SCALAR`` (0) for a scalar constant, ``None`` when a key's size is not
    known yet. ``ref_width(ObsExpr)`` gives a key selection's width (or ``None``); ``on_error(msg)``
    raises. Operands of ``+``, ``-``, ``*``, ``/`` must have the same width unless one is a scalar."""
    kind = node[0]
    if kind == "const":
        return _const_width(node[1])
    if kind == "ref":
        return ref_width(node[1])
    if kind == "neg":
        return expr_width(node[1], ref_width, on_error)
    l, r = expr_width(node[1], ref_width, on_error), expr_width(node[2], ref_width, on_error)
    if l is None or r is None:
        return None
    if l != SCALAR and r != SCALAR and l != r:
        sym = {"add": "+", "sub": "-", "mul": "*", "div": "/"}[kind]
        on_error(f"'{_render(node[1], 1)}' (width {l}) {sym} '{_render(node[2], 2)}' (width {r}): "
                 "expected operands of the same width (a scalar constant fits any width)")
    return max(l, r)


class _Parser:
    """Recursive descent over the expression grammar (see :class:`Expr`); never ``eval``."""

    def __init__(self, text: str, fail: Callable[[str], NoReturn]):
        self.text, self.fail, self.pos = text, fail, 0
        self.toks: list[tuple[str, str, int]] = []
        i = 0
        while i < len(text):
            if text[i:].strip() == "":
                break
            m = _TOKEN.match(text, i)
            if not m:
                j = len(text) - len(text[i:].lstrip())
                fail(f"unexpected character {text[j]!r} at position {j}; expected a key such as 'obs[0:3]', "
                     "a number, a list of numbers, + - * / or parentheses")
            kind = m.lastgroup
            assert kind is not None, "every alternative of _TOKEN is a named group"
            self.toks.append((kind, m.group(kind), m.start(kind)))
            i = m.end()
        self.k = 0

    def peek(self) -> tuple[str, str, int]:
        return self.toks[self.k] if self.k < len(self.toks) else ("end", "", len(self.text))

    def take(self, value: str | None = None, kind: str | None = None, expected: str = "") -> tuple[str, str, int]:
        t = self.peek()
        if (value is not None and t[1] != value) or (kind is not None and t[0] != kind):
            found = "the end of the text" if t[0] == "end" else repr(t[1])
            self.fail(f"expected {expected or repr(value)} at position {t[2]}, found {found}")
        self.k += 1
        return t

    def parse(self) -> tuple:
        if not self.toks:
            self.fail("the expression is empty; expected a key such as 'obs[0:3]', a number or a list of numbers")
        node = self.sum()
        t = self.peek()
        if t[0] != "end":
            self.fail(f"unexpected {t[1]!r} at position {t[2]}; expected + - * / or the end of the expression")
        return node

    def sum(self) -> tuple:
        node = self.prod()
        while self.peek()[1] in ("+", "-") and self.peek()[0] == "op":
            op = "add" if self.take()[1] == "+" else "sub"
            node = self.combine(op, node, self.prod())
        return node

    def prod(self) -> tuple:
        node = self.unary()
        while self.peek()[1] in ("*", "/") and self.peek()[0] == "op":
            t = self.take()
            op = "mul" if t[1] == "*" else "div"
            right = self.unary()
            if op == "mul" and _refs(node) and _refs(right):
                self.fail(f"'*' at position {t[2]} multiplies two observation terms; expected a constant on one side "
                          "(expressions are affine: keys, constants, + - and * or / by a constant)")
            if op == "div":
                if _refs(right):
                    self.fail(f"'/' at position {t[2]} divides by an observation term; expected a constant divisor")
                v = right[1]
                if any(x == 0 for x in ((v,) if isinstance(v, float) else v)):
                    self.fail(f"'/' at position {t[2]} divides by zero ({_render(right)}); expected a non-zero constant")
            node = self.combine(op, node, right)
        return node

    def combine(self, op: str, l: tuple, r: tuple) -> tuple:
        if l[0] == "const" and r[0] == "const":
            wl, wr = _const_width(l[1]), _const_width(r[1])
            if wl != SCALAR and wr != SCALAR and wl != wr:
                sym = {"add": "+", "sub": "-", "mul": "*", "div": "/"}[op]
                self.fail(f"'{_render(l)}' (width {wl}) {sym} '{_render(r)}' (width {wr}): expected constants of the "
                          "same width (a scalar fits any width)")
            return ("const", _fold(op, l[1], r[1]))
        return (op, l, r)

    def unary(self) -> tuple:
        t = self.peek()
        if t[0] == "op" and t[1] in ("-", "+"):
            self.take()
            node = self.unary()
            if t[1] == "+":
                return node
            if node[0] == "const":
                v = node[1]
                return ("const", -v if isinstance(v, float) else tuple(-x for x in v))
            return ("neg", node)
        return self.atom()

    def number(self) -> float:
        sign = 1.0
        while self.peek()[0] == "op" and self.peek()[1] in ("-", "+"):
            sign = -sign if self.take()[1] == "-" else sign
        return sign * float(self.take(kind="num", expected="a number")[1])

    def index(self) -> int | None:
        t = self.peek()
        if t[0] == "op" and t[1] in (":", "]"):
            return None
        neg = False
        if t[0] == "op" and t[1] == "-":
            self.take()
            neg = True
        tok = self.take(kind="num", expected="an integer index")
        if not tok[1].isdigit():
            self.fail(f"index {tok[1]!r} at position {tok[2]} is not an integer; expected e.g. obs[0:3]")
        return -int(tok[1]) if neg else int(tok[1])

    def atom(self) -> tuple:
        t = self.peek()
        if t[0] == "num":
            self.take()
            return ("const", float(t[1]))
        if t[0] == "op" and t[1] == "(":
            self.take()
            node = self.sum()
            self.take(")", expected="')'")
            return node
        if t[0] == "op" and t[1] == "[":
            self.take()
            vals = [self.number()]
            while self.peek()[1] == ",":
                self.take()
                if self.peek()[1] == "]":
                    break
                vals.append(self.number())
            self.take("]", expected="',' or ']' in the list of numbers")
            return ("const", tuple(vals))
        if t[0] == "name":
            self.take()
            if self.peek()[1] != "[" or self.peek()[0] != "op":
                return ("ref", ObsExpr(t[1]))
            self.take()
            start = self.index()
            if self.peek()[1] == "]":  # key[i]: one element
                self.take()
                if start is None:
                    self.fail(f"empty index after {t[1]!r}; expected key[i] or key[start:stop]")
                return ("ref", ObsExpr(t[1], start, start + 1 if start != -1 else None))
            self.take(":", expected="':' or ']'")
            stop = self.index()
            self.take("]", expected="']'")
            return ("ref", ObsExpr(t[1], start, stop))
        found = "the end of the text" if t[0] == "end" else repr(t[1])
        self.fail(f"expected a key such as 'obs[0:3]', a number, a list of numbers or '(' at position {t[2]}, "
                  f"found {found}")
        raise AssertionError  # pragma: no cover


@dataclass(frozen=True)
class Expr:
    """A subgoal point: an affine expression over the critic-input keys.

    Grammar (a small parser, never ``eval``)::

        expr   := term (("+" | "-") term)*
        term   := factor (("*" | "/") factor)*     one side of "*" and the divisor of "/" are constants
        factor := ("-" | "+") factor | NUMBER | "[" NUMBER ("," NUMBER)* "]" | key | key[i] | key[start:stop]
                  | "(" expr ")"

    e.g. ``"observation[0:3]"``, ``"obs[4:6] + [0.1, 0]"``, ``"0.5 * (obs[0:2] - obs[2:4])"``; in TOML a
    plain number or list of numbers is a constant too (``b = 0``, ``b = [0.1, 0, 0]``). A scalar
    constant takes the width of what it is combined with; every other operand must match widths.
    """

    node: tuple

    @classmethod
    def parse(cls, value: Any, where: str) -> "Expr":
        """Parse a TOML value (string, number or list of numbers); errors name ``where`` and the text."""
        if isinstance(value, bool) or not isinstance(value, (str, int, float, list, tuple)):
            raise SpecError(f"{where}: expected an expression such as 'observation[0:3]', a number or a list of "
                            f"numbers, got {value!r}")
        if not isinstance(value, str):
            vals = [value] if isinstance(value, (int, float)) else list(value)
            if not vals or any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in vals):
                raise SpecError(f"{where}: expected a number or a non-empty list of numbers, got {value!r}")
            if not all(math.isfinite(v) for v in vals):
                raise SpecError(f"{where}: expected finite numbers, got {value!r}")
            return cls(("const", float(value) if isinstance(value, (int, float)) else tuple(float(v) for v in vals)))

        def fail(msg: str) -> NoReturn:
            raise SpecError(f"{where}: cannot read {value!r}: {msg}")

        node = _Parser(value, fail).parse()
        for c in _consts(node):
            if not all(math.isfinite(v) for v in (c if isinstance(c, tuple) else (c,))):
                fail(f"the constant {_render(('const', c))} is not finite; expected finite numbers")
        return cls(node)

    @property
    def refs(self) -> list[ObsExpr]:
        """The key selections the expression reads, in order."""
        return _refs(self.node)

    @property
    def is_constant(self) -> bool:
        return self.node[0] == "const"

    @property
    def key(self) -> str | None:
        """The key of a plain ``key`` / ``key[start:stop]`` expression, else ``None``."""
        return self.node[1].key if self.node[0] == "ref" else None

    def static_width(self, on_error) -> int | None:
        """Width known from the text alone (``SCALAR`` for a scalar constant), else ``None``."""
        def ref_width(r: ObsExpr) -> int | None:
            if r.start is not None and r.stop is not None and (r.start >= 0) == (r.stop >= 0):
                if r.stop <= r.start:
                    on_error(f"{r} selects nothing; expected start < stop")
                return r.stop - r.start
            if r.start is not None and r.start < 0 and r.stop is None:
                return -r.start
            return None
        return expr_width(self.node, ref_width, on_error)

    def __str__(self) -> str:
        return _render(self.node)


def _check_fields(data: Mapping[str, Any], allowed: set[str], required: set[str], where: str) -> None:
    if not isinstance(data, Mapping):
        raise SpecError(f"{where}: expected a table of fields, got {type(data).__name__} {data!r}")
    for k in data:
        if k not in allowed:
            close = difflib.get_close_matches(k, sorted(allowed), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f"; expected one of {sorted(allowed)}"
            raise SpecError(f"{where}: unknown field {k!r}{hint}")
    for k in sorted(required):
        if k not in data:
            raise SpecError(f"{where}: missing required field {k!r}")


def _num(v: Any, where: str, *, positive: bool = False) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise SpecError(f"{where}: expected a number, got {v!r}")
    if positive and not v > 0:
        raise SpecError(f"{where}: expected a number > 0, got {v!r}")
    return float(v)


SUBGOAL_KINDS = ("distance", "maze_path")


@dataclass(frozen=True)
class SubgoalSpec:
    """One ordered subgoal.

    Attributes:
        name: identifier reported in ``info["prm_subgoals"]``.
        kind: ``"distance"`` or ``"maze_path"``.
        a, b: the two points compared (``||a - b||``), as :class:`Expr` (a key selection, a
            constant such as ``0`` or ``[0.1, 0, 0]``, or an affine expression of them).
        threshold: the subgoal holds when the distance is below it.
        scale: distance over which progress inside the subgoal goes from 0 to 1.
        behind, offset: optional approach point (``distance`` subgoals only): ``b`` is replaced by
            ``b + offset * (b - behind) / ||b - behind||`` (see the module docstring).
        where: where the subgoal was read from (``"my_task.toml.subgoals[0]"``), for error messages.
    """

    name: str
    a: Expr
    b: Expr
    threshold: float
    scale: float
    kind: str = "distance"
    behind: Expr | None = None
    offset: float = 0.0
    where: str = field(default="spec.subgoals", compare=False, repr=False)

    _FIELDS = frozenset({"name", "kind", "a", "b", "threshold", "scale", "behind", "offset"})

    def field_where(self, side: str) -> str:
        """``"<file>.subgoals[i].<side> (subgoal '<name>')"``: the prefix of an error about one field."""
        return f"{self.where}.{side} (subgoal {self.name!r})"

    def check_widths(self, widths: Mapping[str, int | None]) -> int | None:
        """Check that ``a``, ``b`` (and ``behind``) have one width; return it (``None``: not known yet).

        ``widths`` maps each side to its width (``SCALAR`` = 0 for a scalar constant, which fits any
        width; ``None`` when not known yet). Raises :class:`SpecError` naming the field and texts."""
        sides = [k for k in ("a", "b", "behind") if getattr(self, k) is not None]
        if not any(getattr(self, k).refs for k in sides):
            raise SpecError(f"{self.where} (subgoal {self.name!r}): "
                            + ", ".join(f"{k} = {str(getattr(self, k))!r}" for k in sides)
                            + " are all constants; expected a or b to read the observation (e.g. 'obs[8:10]')")
        known = [(k, widths.get(k)) for k in sides if widths.get(k) not in (None, SCALAR)]
        for k, w in known[1:]:
            k0, w0 = known[0]
            if w != w0:
                raise SpecError(f"{self.field_where(k)}: {str(getattr(self, k))!r} has width {w} but "
                                f"{k0} = {str(getattr(self, k0))!r} has width {w0}; expected the same width "
                                "(a scalar constant such as 0 fits any width)")
        if any(widths.get(k) is None for k in sides):
            return None
        return known[0][1] if known else SCALAR

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str) -> "SubgoalSpec":
        _check_fields(data, set(cls._FIELDS), {"name", "a", "b", "threshold"}, where)
        kind = data.get("kind", "distance")
        if kind not in SUBGOAL_KINDS:
            raise SpecError(f"{where}.kind: expected one of {list(SUBGOAL_KINDS)}, got {kind!r}")
        threshold = _num(data["threshold"], f"{where}.threshold", positive=True)
        scale = _num(data.get("scale", 10 * threshold), f"{where}.scale", positive=True)
        name = data["name"]
        if not isinstance(name, str) or not name:
            raise SpecError(f"{where}.name: expected a non-empty string, got {name!r}")
        behind, offset = data.get("behind"), 0.0
        if ("behind" in data) != ("offset" in data):
            have, need = ("behind", "offset") if "behind" in data else ("offset", "behind")
            raise SpecError(f"{where}.{need}: an approach point needs both 'behind' and 'offset'; "
                            f"got {have} = {data[have]!r} without {need}")
        if behind is not None:
            if kind != "distance":
                raise SpecError(f"{where}.behind: approach points apply to kind 'distance' subgoals, got kind {kind!r}")
            behind = Expr.parse(behind, f"{where}.behind (subgoal {name!r})")
            offset = _num(data["offset"], f"{where}.offset", positive=True)
        out = cls(
            name=name,
            a=Expr.parse(data["a"], f"{where}.a (subgoal {name!r})"),
            b=Expr.parse(data["b"], f"{where}.b (subgoal {name!r})"),
            threshold=threshold,
            scale=scale,
            kind=kind,
            behind=behind,
            offset=offset,
            where=where,
        )
        widths = {}
        for side in ("a", "b", "behind"):
            e = getattr(out, side)
            if e is not None:
                def fail(msg, side=side, e=e):
                    raise SpecError(f"{out.field_where(side)}: in {str(e)!r}: {msg}")
                widths[side] = e.static_width(fail)
        out.check_widths(widths)
        return out

    def to_dict(self) -> dict[str, Any]:
        d = {"name": self.name, "kind": self.kind, "a": str(self.a), "b": str(self.b),
             "threshold": self.threshold, "scale": self.scale}
        if self.behind is not None:
            d.update(behind=str(self.behind), offset=self.offset)
        return d


SUCCESS_RULES = ("final", "any")


@dataclass(frozen=True)
class SuccessSpec:
    """Where an episode's success comes from.

    ``source``: a registered success source (:mod:`prm_critic.robotics.success`): ``"info"``
    (``info[key]``: Fetch ``is_success``, PointMaze ``success``), ``"subgoals"`` (all subgoals hold,
    for envs without a success flag, e.g. Pusher), ``"kitchen_tasks"`` (FrankaKitchen's
    ``tasks_to_complete`` is empty), ``"survived"`` (the episode reached the time limit without
    terminating, e.g. InvertedPendulum), or one you registered.
    ``rule="final"``: the episode succeeded if the last step succeeded; ``"any"``: if any step did.
    """

    source: str = "info"
    key: str | None = None
    rule: str = "final"

    _FIELDS = frozenset({"source", "key", "rule"})

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str) -> "SuccessSpec":
        _check_fields(data, set(cls._FIELDS), {"source"}, where)
        src = data["source"]
        try:
            source = get_success_source(src)
        except KeyError as exc:
            raise SpecError(f"{where}.source: {exc.args[0]}") from None
        rule = data.get("rule", "final")
        if rule not in SUCCESS_RULES:
            raise SpecError(f"{where}.rule: expected one of {list(SUCCESS_RULES)}, got {rule!r}")
        key = data.get("key")
        if source.needs_key and not isinstance(key, str):
            raise SpecError(f"{where}.key: source {src!r} needs the info key as a string, got {key!r}")
        return cls(source=src, key=key, rule=rule)

    @property
    def reads_state(self) -> bool:
        """The step's flag is "every subgoal holds" on its next critic input (a ``SubgoalEvaluator``'s)."""
        return get_success_source(self.source).reads_state

    @property
    def info_key(self) -> str | None:
        """The info key the source reads (``key`` for a source that needs one), else ``None``."""
        return self.key if get_success_source(self.source).needs_key else None

    def step_flag(self, info: Mapping[str, Any], *, terminated: bool = False, truncated: bool = False) -> bool | None:
        """The step's success flag from what the env returned, ``None`` when it comes from the state
        (:attr:`reads_state`)."""
        return get_success_source(self.source).flag(self, info, terminated, truncated)

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "key": self.key, "rule": self.rule}


_TASK_FIELDS = {
    "name", "env_id", "make_kwargs", "max_episode_steps", "critic_input", "goal_keys",
    "flatten_goals", "success", "controller", "description", "progress",
}

#: how subgoal progress combines the subgoals (``prm_critic.robotics.subgoals`` module docstring)
PROGRESS_MODES = ("ladder", "mean")


@dataclass(frozen=True)
class TaskSpec:
    """A robot task: how to build the env, what the critic sees, subgoals and success.

    Attributes:
        name: spec name (``load_spec(name)``), usually the env id.
        env_id: the gymnasium id passed to ``gymnasium.make``.
        make_kwargs: extra keyword arguments for ``gymnasium.make``.
        max_episode_steps: TimeLimit override (``None``: the registered default).
        critic_input: observation keys, in order, concatenated into the critic input vector.
            For a plain ``Box`` observation space use ``["obs"]``.
        goal_keys: ``(achieved_key, desired_key)`` for goal-conditioned envs, else ``None``.
        flatten_goals: for dict-of-dict goals (FrankaKitchen): the task names, in order, whose goal
            vectors are concatenated into flat ``achieved_goal`` / ``desired_goal`` arrays.
        success: :class:`SuccessSpec`.
        subgoals: ordered :class:`SubgoalSpec` tuple.
        controller: behaviour controller: ``{"name": ..., **params}``.
        progress: how subgoal progress combines the subgoals: ``"ladder"`` (default: the highest
            subgoal that holds plus closeness to the next one) or ``"mean"`` (mean closeness over
            all subgoals, 1 for those that hold; no stage to fall back from).
    """

    name: str
    env_id: str
    critic_input: tuple[str, ...]
    success: SuccessSpec
    subgoals: tuple[SubgoalSpec, ...]
    make_kwargs: dict[str, Any] = field(default_factory=dict)
    max_episode_steps: int | None = None
    goal_keys: tuple[str, str] | None = None
    flatten_goals: tuple[str, ...] | None = None
    controller: dict[str, Any] = field(default_factory=lambda: {"name": "random"})
    description: str = ""
    progress: str = "ladder"

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "spec") -> "TaskSpec":
        _check_fields(data, {"task", "subgoals"}, {"task"}, where)
        t = data["task"]
        w = f"{where}.task"
        _check_fields(t, _TASK_FIELDS, {"name", "env_id", "critic_input", "success"}, w)
        crit = t["critic_input"]
        if not isinstance(crit, list) or not crit or not all(isinstance(k, str) for k in crit):
            raise SpecError(f"{w}.critic_input: expected a non-empty list of observation keys, got {crit!r}")
        goal_keys = t.get("goal_keys")
        if goal_keys is not None:
            if not (isinstance(goal_keys, list) and len(goal_keys) == 2 and all(isinstance(k, str) for k in goal_keys)):
                raise SpecError(f"{w}.goal_keys: expected [achieved_key, desired_key], got {goal_keys!r}")
            goal_keys = tuple(goal_keys)
        flat = t.get("flatten_goals")
        if flat is not None:
            if not (isinstance(flat, list) and flat and all(isinstance(k, str) for k in flat)):
                raise SpecError(f"{w}.flatten_goals: expected a non-empty list of task names, got {flat!r}")
            flat = tuple(flat)
        mes = t.get("max_episode_steps")
        if mes is not None and (isinstance(mes, bool) or not isinstance(mes, int) or mes <= 0):
            raise SpecError(f"{w}.max_episode_steps: expected a positive integer, got {mes!r}")
        mk = t.get("make_kwargs", {})
        if not isinstance(mk, Mapping):
            raise SpecError(f"{w}.make_kwargs: expected a table, got {mk!r}")
        ctrl = t.get("controller", {"name": "random"})
        if not isinstance(ctrl, Mapping) or not isinstance(ctrl.get("name"), str):
            raise SpecError(f"{w}.controller: expected a table with a 'name' string, got {ctrl!r}")
        raw_sub = data.get("subgoals", [])
        if not isinstance(raw_sub, list):
            raise SpecError(f"{where}.subgoals: expected a list of tables ([[subgoals]]), got {raw_sub!r}")
        subgoals = tuple(SubgoalSpec.from_dict(s, f"{where}.subgoals[{i}]") for i, s in enumerate(raw_sub))
        names = [s.name for s in subgoals]
        if len(set(names)) != len(names):
            raise SpecError(f"{where}.subgoals: subgoal names must be unique, got {names}")
        for s in subgoals:
            for side in ("a", "b", "behind"):
                e = getattr(s, side)
                for r in (e.refs if e is not None else []):
                    if r.key not in crit:
                        close = difflib.get_close_matches(r.key, crit, n=1)
                        hint = f"; did you mean {close[0]!r}?" if close else ""
                        raise SpecError(f"{s.field_where(side)}: in {str(e)!r}: key {r.key!r} is not in "
                                        f"critic_input {crit}{hint}")
        progress = t.get("progress", "ladder")
        if progress not in PROGRESS_MODES:
            raise SpecError(f"{w}.progress: expected one of {list(PROGRESS_MODES)}, got {progress!r}")
        success = SuccessSpec.from_dict(t["success"], f"{w}.success")
        if success.reads_state and not subgoals:
            raise SpecError(f"{w}.success: source {success.source!r} needs at least one [[subgoals]] entry")
        return cls(
            name=t["name"], env_id=t["env_id"], critic_input=tuple(crit), success=success,
            subgoals=subgoals, make_kwargs=dict(mk), max_episode_steps=mes, goal_keys=goal_keys,
            flatten_goals=flat, controller=dict(ctrl), description=t.get("description", ""), progress=progress,
        )

    def to_dict(self) -> dict[str, Any]:
        task: dict[str, Any] = {
            "name": self.name, "env_id": self.env_id, "critic_input": list(self.critic_input),
            "success": self.success.to_dict(), "make_kwargs": dict(self.make_kwargs),
            "controller": dict(self.controller), "description": self.description,
        }
        if self.max_episode_steps is not None:
            task["max_episode_steps"] = self.max_episode_steps
        if self.goal_keys is not None:
            task["goal_keys"] = list(self.goal_keys)
        if self.flatten_goals is not None:
            task["flatten_goals"] = list(self.flatten_goals)
        if self.progress != "ladder":  # the default is left out: older readers keep loading these dicts
            task["progress"] = self.progress
        task["success"] = {k: v for k, v in task["success"].items() if v is not None}
        return {"task": task, "subgoals": [s.to_dict() for s in self.subgoals]}


def _specs_dir() -> Path:
    """Folder of the built-in specs: inside the wheel (``prm_critic/_specs``) or, in a source
    checkout with an editable install, the project's ``envs/specs`` data folder."""
    packaged = resources.files("prm_critic") / "_specs"
    if packaged.is_dir():
        return Path(str(packaged))
    source = Path(__file__).resolve().parents[2] / "envs" / "specs"
    if source.is_dir():
        return source
    raise SpecError("built-in specs not found: the prm-critic installation is incomplete (no prm_critic/_specs)")


def _spec_files() -> dict[str, Path]:
    out = {}
    for p in sorted(_specs_dir().glob("*.toml")):
        with open(p, "rb") as f:
            name = tomllib.load(f).get("task", {}).get("name", p.stem)
        out[name] = p
    return out


def list_builtin_specs() -> list[str]:
    """Names of the built-in task specs."""
    return sorted(_spec_files())


def load_spec(spec: "str | Path | Mapping[str, Any] | TaskSpec") -> TaskSpec:
    """Load a task spec from a built-in name, a TOML path, a dict or a :class:`TaskSpec`."""
    if isinstance(spec, TaskSpec):
        return spec
    if isinstance(spec, Mapping):
        return TaskSpec.from_dict(spec)
    p = Path(spec)
    if p.suffix == ".toml" or p.exists():
        if not p.is_file():
            raise SpecError(f"spec: file {str(p)!r} does not exist")
        try:
            with open(p, "rb") as f:
                data = tomllib.load(f)
        except tomllib.TOMLDecodeError as exc:
            raise SpecError(f"spec: {str(p)!r} is not valid TOML: {exc}") from exc
        return TaskSpec.from_dict(data, where=p.name)
    files = _spec_files()
    if str(spec) not in files:
        close = difflib.get_close_matches(str(spec), list(files), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise SpecError(f"task: unknown task {str(spec)!r}; expected one of {sorted(files)}{hint}")
    with open(files[str(spec)], "rb") as f:
        return TaskSpec.from_dict(tomllib.load(f), where=files[str(spec)].name)
