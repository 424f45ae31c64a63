"""Evaluate a spec's ordered subgoals on batches of critic inputs, and the spec-based critic.

Progress of a state (Markov, so it can serve as a shaping potential)::

    m        = 1 + index of the highest subgoal that holds (0 if none holds)
    inside   = clip(1 - ||a_m - b_m|| / scale_m, 0, 1)   for the next subgoal m (0 if m == n)
    progress = (m + inside) / n

With ``progress = "mean"`` in the spec's ``[task]`` table, every subgoal counts at once instead::

    close_k  = 1 if subgoal k holds, else clip(1 - ||a_k - b_k|| / scale_k, 0, 1)
    progress = mean_k close_k

(no stage to fall back from when an earlier subgoal stops holding; the subgoals' order no longer
matters).

``a``, ``b`` and ``behind`` are affine expressions over the critic input
(:class:`~prm_critic.robotics.spec.Expr`: key selections, constants, ``+``, ``-``, ``*`` / ``/`` by a
constant), e.g. ``a = "obs[8:10]"``, ``b = 0`` for "the fingertip-to-target vector is zero".

A ``distance`` subgoal with an approach point (``behind``, ``offset``) compares ``a`` with
``b* = b + offset * (b - behind) / ||b - behind||`` instead of ``b``.

``maze_path`` subgoals measure distance along the shortest path through the maze's free cells
(BFS over cells from the goal's cell): ``geo = ||p - centre(next cell)|| + S * (cells_left - 1) + ||centre(goal cell) - g||`` inside
the path, ``||p - g||`` in the goal's cell; ``inside = clip(1 - geo / geo_max, 0, 1)``.

The rule above is written once (``_rule_target``, ``_rule_distances``, ``_rule_holds``,
``_rule_progress``, ``_rule_success``) over a set of operations; each path supplies its own: numpy on
a batch (:class:`SubgoalEvaluator`), torch for ONNX export (``prm_critic.onnx.export``), and, one row at
a time (the env wrappers' control loop, :meth:`SubgoalCritic.score_one` and
:meth:`SubgoalEvaluator.holds_one`), straight-line Python traced from the rule once per spec and
compiled, run on the row's Python floats with the numpy path's operations in the same order (the same
floats), maze distances from tables built once (:meth:`MazeGeometry.geodesic_fn`).
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any, Callable, Mapping, cast

import numpy as np
import numpy.typing as npt

from prm_critic import validate
from prm_critic.critic import CriticInfo, StateCritic, StepScores, as_obs_batch, check_row
from prm_critic.robotics.layout import CriticInputLayout
from prm_critic.robotics.spec import SpecError, TaskSpec, expr_width, load_spec

__all__ = ["MazeGeometry", "SubgoalEvaluator", "SubgoalCritic", "eval_expr", "map_consts"]

#: widths (and, for ``progress = "mean"``, subgoal counts) up to which a numpy reduction along a row
#: adds left to right, so the compiled one-row path can add in the same order; wider ones fall back
_SEQUENTIAL_SUM = 7
_F32 = np.float32


class MazeGeometry:
    """Shortest-path geometry of a gymnasium-robotics maze (JSON-serialisable)."""

    def __init__(self, maze_map, scaling: float, x_center: float, y_center: float):
        self.maze_map = np.asarray([[1 if c == 1 else 0 for c in row] for row in maze_map], dtype=np.int64)
        self.scaling = float(scaling)
        self.x_center = float(x_center)
        self.y_center = float(y_center)
        self.rows, self.cols = self.maze_map.shape
        self.free = self.maze_map == 0
        # all-pairs BFS distances between free cells (mazes are small: <= a few hundred cells)
        cells = [(i, j) for i in range(self.rows) for j in range(self.cols) if self.free[i, j]]
        self._index = {c: k for k, c in enumerate(cells)}
        self.cells = np.asarray(cells, dtype=np.int64)
        n = len(cells)
        self.dist = np.full((n, n), -1, dtype=np.int64)
        for s, c in enumerate(cells):
            d = self.dist[s]
            d[s] = 0
            q = deque([c])
            while q:
                ci, cj = q.popleft()
                for di, dj in ((1, 0), (-1, 0), (0, 1), (0, -1)):
                    nb = (ci + di, cj + dj)
                    k = self._index.get(nb)
                    if k is not None and d[k] < 0:
                        d[k] = d[self._index[(ci, cj)]] + 1
                        q.append(nb)
        finite = self.dist[self.dist >= 0]
        self.max_cells = int(finite.max()) if finite.size else 0
        # lookup tables for the batched queries: grid -> cell index (-1 on walls / outside), and for
        # every (cell, goal cell) the neighbours one step closer to the goal (ascending, -1 padded)
        self._grid = np.full((self.rows, self.cols), -1, dtype=np.int64)
        for k, (ci, cj) in enumerate(cells):
            self._grid[ci, cj] = k
        adjacent = self.dist == 1
        self._next = np.full((n, n, 4), -1, dtype=np.int64)
        for a in range(n):
            nbs = np.nonzero(adjacent[a])[0]
            for g in range(n):
                closer = nbs[self.dist[nbs, g] == self.dist[a, g] - 1] if self.dist[a, g] > 0 else nbs[:0]
                self._next[a, g, : len(closer)] = closer
        self.centers = np.stack(
            [(self.cells[:, 1] + 0.5) * self.scaling - self.x_center, self.y_center - (self.cells[:, 0] + 0.5) * self.scaling],
            axis=1,
        ) if n else np.zeros((0, 2))

    @classmethod
    def from_env(cls, env) -> "MazeGeometry":
        maze = validate.check_one_env("env", env, what="MazeGeometry.from_env", fix=(
            "pass one env (prm_critic.robotics.make_env(task)): every sub-env has the same maze")).unwrapped.maze
        return cls(maze.maze_map, maze.maze_size_scaling, maze.x_map_center, maze.y_map_center)

    def to_dict(self) -> dict[str, Any]:
        return {"maze_map": self.maze_map.tolist(), "scaling": self.scaling,
                "x_center": self.x_center, "y_center": self.y_center}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "MazeGeometry":
        return cls(d["maze_map"], d["scaling"], d["x_center"], d["y_center"])

    def cell_index(self, xy: np.ndarray) -> np.ndarray:
        """Index (into ``self.cells``) of the free cell containing each point ``(B, 2)``; nearest free
        cell centre when a point lies in a wall cell or outside the maze."""
        xy = np.asarray(xy, dtype=np.float64)
        i = np.floor((self.y_center - xy[:, 1]) / self.scaling).astype(np.int64)
        j = np.floor((xy[:, 0] + self.x_center) / self.scaling).astype(np.int64)
        inside = (i >= 0) & (i < self.rows) & (j >= 0) & (j < self.cols)
        out = np.full(len(xy), -1, dtype=np.int64)
        out[inside] = self._grid[i[inside], j[inside]]
        miss = out < 0
        if miss.any():
            d = np.linalg.norm(xy[miss, None, :] - self.centers[None, :, :], axis=2)
            out[miss] = np.argmin(d, axis=1)
        return out

    def geodesic(self, p: np.ndarray, g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Path distance from points ``p`` to goals ``g`` (both ``(B, 2)``) and cells left ``(B,)``.

        In the goal's cell it is ``||p - g||``; elsewhere ``||p - centre(next)|| + S * (cells_left - 1)
        + ||centre(goal cell) - g||``, ``next`` being the neighbour one step closer to the goal cell
        that is nearest to ``p``; ``inf`` where the goal cell is unreachable."""
        p = np.asarray(p, dtype=np.float64)
        g = np.asarray(g, dtype=np.float64)
        cp, cg = self.cell_index(p), self.cell_index(g)
        cells_left = self.dist[cp, cg]
        geo = np.linalg.norm(p - g, axis=1)
        away = np.nonzero(cells_left > 0)[0]
        if away.size:
            cand = self._next[cp[away], cg[away]]  # (A, 4)
            d = np.linalg.norm(self.centers[np.maximum(cand, 0)] - p[away, None, :], axis=2)
            d[cand < 0] = np.inf
            nxt = cand[np.arange(away.size), np.argmin(d, axis=1)]
            geo[away] = (np.linalg.norm(p[away] - self.centers[nxt], axis=1) + self.scaling * (cells_left[away] - 1)
                         + np.linalg.norm(self.centers[cg[away]] - g[away], axis=1))
        geo[cells_left < 0] = np.inf
        return geo, cells_left

    @property
    def geo_max(self) -> float:
        return self.scaling * (self.max_cells + 1)

    def geodesic_fn(self) -> Callable[[float, float, float, float], float]:
        """``geo(px, py, gx, gy)``: :meth:`geodesic` of one point and goal on Python floats, from
        tables built once here (cell grid, cell centres, BFS distances, the closer neighbours of
        every cell pair); the same operations in the same order, so the same float."""
        rows, cols, s, xc, yc = self.rows, self.cols, self.scaling, self.x_center, self.y_center
        grid = self._grid.tolist()
        centers = [tuple(c) for c in self.centers.tolist()]
        dist = self.dist.tolist()
        nxt = [[tuple(c for c in cand if c >= 0) for cand in row] for row in self._next.tolist()]
        sqrt, inf = math.sqrt, math.inf

        def cell(x: float, y: float) -> int:
            fi = (yc - y) / s
            fj = (x + xc) / s
            if 0.0 <= fi < rows and 0.0 <= fj < cols:  # floor(f) in [0, n) exactly when f in [0, n)
                k = grid[int(fi)][int(fj)]
                if k >= 0:
                    return k
            best, kbest = inf, 0  # argmin: the first of equal distances
            for k, (cx, cy) in enumerate(centers):
                dx, dy = x - cx, y - cy
                d = sqrt(dx * dx + dy * dy)
                if d < best or k == 0:
                    best, kbest = d, k
                elif d != d:  # NaN: argmin takes the first one
                    return k if best == best else kbest
            return kbest

        def geo(px: float, py: float, gx: float, gy: float) -> float:
            cp, cg = cell(px, py), cell(gx, gy)
            left = dist[cp][cg]
            if left < 0:
                return inf
            if left == 0:
                dx, dy = px - gx, py - gy
                return sqrt(dx * dx + dy * dy)
            best, pick = inf, -1
            for c in nxt[cp][cg]:
                cx, cy = centers[c]
                dx, dy = cx - px, cy - py
                d = sqrt(dx * dx + dy * dy)
                if d < best or pick < 0:
                    best, pick = d, c
                elif d != d and best == best:  # NaN: argmin takes the first one
                    best, pick = d, c
            cx, cy = centers[pick]
            dx, dy = px - cx, py - cy
            ex, ey = centers[cg][0] - gx, centers[cg][1] - gy
            return sqrt(dx * dx + dy * dy) + s * (left - 1) + sqrt(ex * ex + ey * ey)

        return geo


def _ref_slice(r, layout: CriticInputLayout, fail) -> tuple[int, int]:
    """``(start, stop)`` in the flat critic input of the key selection ``r`` (an ``ObsExpr``)."""
    if r.key not in layout.slices:
        fail(f"key {r.key!r} is not in critic_input {list(layout.keys)}")
    n = layout.sizes[r.key]
    if (r.start is not None and not -n <= r.start < n) or (r.stop is not None and not -n <= r.stop <= n):
        fail(f"{r} reaches outside {r.key!r}, which has size {n}; expected indices in [{-n}, {n}]")
    idx = range(layout.slices[r.key].start, layout.slices[r.key].stop)[r.start:r.stop]
    if len(idx) == 0:
        fail(f"{r} selects nothing from {r.key!r} of size {n}")
    return idx.start, idx.stop


def _resolve(node: tuple, layout: CriticInputLayout, fail) -> tuple:
    """``node`` with key selections turned into ``("slice", start, stop)`` of the flat critic input
    and vector constants into float64 arrays."""
    kind = node[0]
    if kind == "const":
        v = node[1]
        return ("const", v if isinstance(v, float) else np.asarray(v, dtype=np.float64))
    if kind == "ref":
        return ("slice", *_ref_slice(node[1], layout, fail))
    return (kind, *(_resolve(c, layout, fail) for c in node[1:]))


def eval_expr(node: tuple, x):
    """Value of a resolved expression node on a batch ``x`` ``(B, D)`` (numpy, or torch when the
    constants were mapped to tensors by :func:`map_consts`): ``(B, w)``, or the constant itself."""
    kind = node[0]
    if kind == "const":
        return node[1]
    if kind == "slice":
        return x[:, node[1]:node[2]]
    if kind == "neg":
        return -eval_expr(node[1], x)
    left, right = eval_expr(node[1], x), eval_expr(node[2], x)
    if kind == "add":
        return left + right
    if kind == "sub":
        return left - right
    if kind == "mul":
        return left * right
    return left / right


def map_consts(node: tuple, fn) -> tuple:
    """Copy of a resolved node with every vector constant passed through ``fn`` (e.g. ``torch.tensor``)."""
    if node[0] == "const":
        return node if isinstance(node[1], float) else ("const", fn(node[1]))
    if node[0] == "slice":
        return node
    return (node[0], *(map_consts(c, fn) for c in node[1:]))


# --- the subgoal rule, written once; the batch (numpy), one-row (generated Python) and export (torch,
# prm_critic.onnx.export) paths each run it with their own operations ---------------------------------


def _rule_target(ev: "SubgoalEvaluator", ops, k: int):
    """The point subgoal ``k`` compares ``a`` with: ``b``, or its approach point
    ``b* = b + offset * (b - behind) / ||b - behind||`` (``b`` where ``b == behind``)."""
    _, nb, nbehind = ev.exprs[k]
    w = ev.widths[k]
    b = ops.expr(nb, w)
    if nbehind is None:
        return b
    away = ops.sub(b, ops.expr(nbehind, w))
    return ops.add(b, ops.scale(ev.spec.subgoals[k].offset, ops.unit(away, ops.norm(away))))


def _rule_distances(ev: "SubgoalEvaluator", ops) -> list:
    """Per subgoal ``d_k = ||a_k - t_k||`` (``t_k`` from :func:`_rule_target`)."""
    return [ops.norm(ops.sub(ops.expr(ev.exprs[k][0], ev.widths[k]), _rule_target(ev, ops, k)))
            for k in range(len(ev.exprs))]


def _rule_holds(ev: "SubgoalEvaluator", ops, d: list) -> list:
    """Per subgoal ``holds_k = d_k < threshold_k``."""
    return [ops.less(dk, s.threshold) for dk, s in zip(d, ev.spec.subgoals)]


def _rule_progress(ev: "SubgoalEvaluator", ops, h: list, d: list):
    """Spec progress from the subgoals' states ``h`` and distances ``d`` (module docstring)."""
    subgoals = ev.spec.subgoals
    n = len(subgoals)

    def close(k: int):  # closeness to subgoal k: clip(1 - dist / scale, 0, 1)
        if subgoals[k].kind == "maze_path":
            assert ev.maze is not None, "SubgoalEvaluator refuses a maze_path subgoal without the maze"
            geo = ops.geodesic(ops.expr(ev.exprs[k][0], 2), ops.expr(ev.exprs[k][1], 2))
            return ops.closeness(geo, ev.maze.geo_max)
        return ops.closeness(d[k], subgoals[k].scale)

    if ev.spec.progress == "mean":
        return ops.mean([ops.where(h[k], 1.0, lambda k=k: close(k)) for k in range(n)])
    m = ops.stage(h)  # 1 + the highest subgoal that holds (0 if none); the next one's closeness counts inside it
    return ops.ladder(m, ops.select(m, [lambda k=k: close(k) for k in range(n)]), n)


def _rule_success(ops, h: list, p):
    """``success = 1`` where every subgoal holds, else the progress ``p``."""
    return ops.where(ops.all(h), 1.0, lambda: p)


class _ArrayOps:
    """The rule's arithmetic on arrays (numpy, torch): their own operators."""

    def sub(self, a, b):
        return a - b

    def add(self, a, b):
        return a + b

    def scale(self, c: float, v):
        return c * v


class _NumpyOps(_ArrayOps):
    """The rule's operations on a batch ``x`` ``(B, D)``: a point is ``(B, width)``, a number ``(B,)``,
    both float64 (what ``SubgoalEvaluator`` computes)."""

    def __init__(self, x: np.ndarray, maze: MazeGeometry | None):
        self.x, self.maze = x, maze

    def expr(self, node: tuple, width: int) -> np.ndarray:
        return np.broadcast_to(eval_expr(node, self.x), (self.x.shape[0], width))

    def norm(self, v):
        return np.linalg.norm(v, axis=1)

    def unit(self, v, n):
        n = n[:, None]
        return np.divide(v, n, out=np.zeros_like(v), where=n > 0)

    def less(self, d, threshold: float):
        return d < threshold

    def closeness(self, dist, scale: float):
        return np.clip(1.0 - dist / scale, 0.0, 1.0)

    def geodesic(self, a, b):
        assert self.maze is not None, "SubgoalEvaluator refuses a maze_path subgoal without the maze"
        return self.maze.geodesic(a, b)[0]

    def where(self, cond, then: float, other: Callable[[], Any]):
        return np.where(cond, then, other())

    def all(self, h: list):
        return np.logical_and.reduce(h)

    def stage(self, h: list):
        stacked = np.stack(h, axis=1)
        return np.where(stacked.any(axis=1), len(h) - np.argmax(stacked[:, ::-1], axis=1), 0)

    def select(self, m, values: list):
        out = np.zeros(self.x.shape[0])
        for k, value in enumerate(values):
            sel = m == k
            if sel.any():
                out[sel] = value()[sel]
        return out

    def ladder(self, m, inside, n: int):
        return np.clip((m + inside) / n, 0.0, 1.0)

    def mean(self, values: list):
        return np.stack(values, axis=1).mean(axis=1)


class _SourceOps:
    """The rule's operations as straight-line Python for one critic-input row ``v`` (a list of floats):
    a point is a list of per-component names, a number one name; every operation is written in
    the order numpy applies it (squares added left to right, up to ``_SEQUENTIAL_SUM`` of them), so
    the generated code computes the batch's float64 numbers."""

    def __init__(self, maze: MazeGeometry | None):
        self.lines: list[str] = []
        self.names: dict[str, Any] = {"sqrt": math.sqrt}
        self.maze = maze
        self._indent = ""
        self._count = 0
        self._bound: dict[tuple[int, int], list[str]] = {}  # top-level points already computed

    def _let(self, value: str) -> str:
        self._count += 1
        name = f"t{self._count}"
        self.lines.append(f"{self._indent}{name} = {value}")
        return name

    def _const(self, value: float) -> str:
        name = f"c{len(self.names)}"
        self.names[name] = float(value)
        return name

    def _parts(self, node: tuple, width: int) -> list[str]:
        kind = node[0]
        if kind == "const":
            v = node[1]
            if isinstance(v, float):
                return [self._const(v)] * width
            vals = [self._const(c) for c in np.asarray(v, dtype=np.float64).reshape(-1).tolist()]
            return vals * width if len(vals) == 1 else vals  # numpy broadcasts a width-1 constant
        if kind == "slice":
            return [f"v[{i}]" for i in range(node[1], node[2])]
        if kind == "neg":
            return [f"(-{e})" for e in self._parts(node[1], width)]
        op = {"add": "+", "sub": "-", "mul": "*", "div": "/"}[kind]
        return [f"({a} {op} {b})" for a, b in zip(self._parts(node[1], width), self._parts(node[2], width))]

    def expr(self, node: tuple, width: int) -> list[str]:
        key = (id(node), width)
        if key in self._bound:
            return self._bound[key]
        names = [self._let(e) for e in self._parts(node, width)]
        if not self._indent:
            self._bound[key] = names
        return names

    def sub(self, a, b):
        return [self._let(f"{x} - {y}") for x, y in zip(a, b)]

    def add(self, a, b):
        return [self._let(f"{x} + {y}") for x, y in zip(a, b)]

    def scale(self, c: float, v):
        name = self._const(c)
        return [f"({name} * {e})" for e in v]

    def norm(self, v):
        return self._let("sqrt(" + " + ".join(f"{c} * {c}" for c in v) + ")")

    def unit(self, v, n):
        out = [f"u{self._count + 1 + i}" for i in range(len(v))]
        self._count += len(v)
        self.lines.append(f"{self._indent}if {n} > 0:")
        self.lines.extend(f"{self._indent}    {u} = {e} / {n}" for u, e in zip(out, v))
        self.lines.append(f"{self._indent}else:")
        self.lines.extend(f"{self._indent}    {u} = 0.0" for u in out)
        return out

    def less(self, d, threshold: float):
        return self._let(f"{d} < {self._const(threshold)}")

    def _clip01(self, name: str) -> str:
        self.lines.append(f"{self._indent}{name} = 0.0 if {name} < 0.0 else (1.0 if {name} > 1.0 else {name})")
        return name

    def closeness(self, dist, scale: float):
        return self._clip01(self._let(f"1.0 - {dist} / {self._const(scale)}"))

    def geodesic(self, a, b):
        assert self.maze is not None, "SubgoalEvaluator refuses a maze_path subgoal without the maze"
        self.names["geo"] = self.maze.geodesic_fn()
        return self._let(f"geo({', '.join([*a, *b])})")

    def _branches(self, out: str, cases: list[tuple[str, Callable[[], str]]]) -> str:
        """``if c0: out = f0() elif c1: ... else: out = f_last()`` (the last case's condition is ignored)."""
        outer = self._indent
        for i, (cond, value) in enumerate(cases):
            last = i == len(cases) - 1
            self.lines.append(f"{outer}{'else' if last else ('if ' if i == 0 else 'elif ') + cond}:")
            self._indent = outer + "    "
            self.lines.append(f"{self._indent}{out} = {value()}")
            self._indent = outer
        return out

    def where(self, cond, then: float, other: Callable[[], str]):
        self._count += 1
        return self._branches(f"w{self._count}", [(cond, lambda: repr(float(then))), ("", other)])

    def all(self, h: list):
        return " and ".join(h)

    def stage(self, h: list):
        expr = "0"
        for k, hk in enumerate(h):
            expr = f"{k + 1} if {hk} else ({expr})"
        return self._let(expr)

    def select(self, m, values: list):
        self._count += 1
        cases = [(f"{m} == {k}", value) for k, value in enumerate(values)]
        return self._branches(f"s{self._count}", [*cases, ("", lambda: "0.0")])

    def ladder(self, m, inside, n: int):
        return self._clip01(self._let(f"({m} + {inside}) / {n}"))

    def mean(self, values: list):
        return self._let("(" + " + ".join(values) + f") / {len(values)}")


def _compile_rows(ev: "SubgoalEvaluator"):
    """``(score, holds)`` for one row ``v`` (list of floats) of ``ev``'s critic input:
    ``score(v) -> (progress, success)`` and ``holds(v) -> tuple[bool, ...]``, the same values as
    :class:`SubgoalCritic.score` / :meth:`SubgoalEvaluator.holds` on the batch ``[v]``: the rule
    (:func:`_rule_progress` ...) traced once with :class:`_SourceOps` and compiled. ``None`` when a
    subgoal compares points wider than numpy adds left to right (or ``mean`` progress has more
    subgoals than that), where the one-row path could round differently.

    Generated rather than run on the row's floats through the rule directly: that costs several
    microseconds more per row (``python -m benchmarks.subgoal_one_row``)."""
    n = len(ev.spec.subgoals)
    if n == 0 or max(ev.widths) > _SEQUENTIAL_SUM or (ev.spec.progress == "mean" and n > _SEQUENTIAL_SUM):
        return None
    ops = _SourceOps(ev.maze)
    h = _rule_holds(ev, ops, d := _rule_distances(ev, ops))
    holds_lines = list(ops.lines)
    success = _rule_success(ops, h, p := _rule_progress(ev, ops, h, d))
    src = "def score(v):\n" + "".join(f"    {line}\n" for line in ops.lines)
    src += f"    return {p}, {success}\n"
    src += "def holds(v):\n" + "".join(f"    {line}\n" for line in holds_lines)
    src += "    return (" + "".join(f"{hk}, " for hk in h) + ")\n"
    ns = dict(ops.names)
    exec(compile(src, f"<subgoals {ev.spec.name}>", "exec"), ns)  # noqa: S102 - code built above from the parsed spec
    return ns["score"], ns["holds"]


class SubgoalEvaluator:
    """Batched subgoal states and progress for one spec and critic-input layout.

    Args:
        spec: the task spec.
        layout: where the spec's keys live in the critic-input vector.
        maze: geometry for ``maze_path`` subgoals (``MazeGeometry.from_env(env)``).

    Raises:
        SpecError: an expression reads a key that is not in the layout or reaches outside it, or
            ``a``, ``b`` and ``behind`` have different widths (the error names the spec file, the
            subgoal, the field and the text).
    """

    def __init__(self, spec: TaskSpec, layout: CriticInputLayout, maze: MazeGeometry | None = None):
        self.spec = spec
        self.layout = layout
        self.maze = maze
        #: per subgoal: resolved ``a``, ``b``, ``behind`` (or None) nodes, see :func:`eval_expr`
        self.exprs: list[tuple[tuple, tuple, tuple | None]] = []
        #: per subgoal: the width of the compared points
        self.widths: list[int] = []
        for s in spec.subgoals:
            nodes, widths = {}, {}
            for side in ("a", "b", "behind"):
                e = getattr(s, side)
                if e is None:
                    continue

                def fail(msg, side=side, e=e, s=s):
                    raise SpecError(f"{s.field_where(side)}: in {str(e)!r}: {msg}")

                def ref_width(r, fail=fail) -> int:
                    i, j = _ref_slice(r, layout, fail)
                    return j - i

                nodes[side] = _resolve(e.node, layout, fail)
                widths[side] = expr_width(e.node, ref_width, fail)
            w = s.check_widths(widths)
            if s.kind == "maze_path":
                if maze is None:
                    raise SpecError(f"subgoal {s.name!r}: kind 'maze_path' needs the maze (pass env or maze)")
                if w != 2:
                    raise SpecError(f"{s.field_where('a')}: maze_path compares 2-D positions, got "
                                    f"a = {str(s.a)!r} of width {w}")
            self.exprs.append((nodes["a"], nodes["b"], nodes.get("behind")))
            assert w is not None, "every key selection resolved against the layout, so every width is known"
            self.widths.append(int(w))
        # the one-row path (compiled from the resolved nodes; None: the batched path serves one row too)
        self._rows = _compile_rows(self)

    @property
    def names(self) -> list[str]:
        return [s.name for s in self.spec.subgoals]

    def point(self, x: np.ndarray, k: int, side: str) -> np.ndarray:
        """Value of subgoal ``k``'s ``side`` (``"a"``, ``"b"`` or ``"behind"``) on ``x``, ``(B, width)``."""
        x = np.asarray(x, dtype=np.float64)
        node = self.exprs[k][("a", "b", "behind").index(side)]
        if node is None:
            raise ValueError(f"side: subgoal {self.spec.subgoals[k].name!r} has no {side!r}")
        return np.broadcast_to(eval_expr(node, x), (x.shape[0], self.widths[k]))

    def target(self, x: np.ndarray, k: int) -> np.ndarray:
        """The point subgoal ``k`` compares ``a`` with: ``b``, or its approach point ``b*``, ``(B, size)``."""
        return _rule_target(self, _NumpyOps(np.asarray(x, dtype=np.float64), self.maze), k)

    def place(self, x: np.ndarray, k: int, point: np.ndarray) -> np.ndarray:
        """Copy of ``x`` ``(B, D)`` with the observation part read by subgoal ``k``'s ``a`` moved so that
        ``a == point`` (``(B, width)``): the first key selection in ``a`` that ``a`` depends on
        element by element is solved for (``a = c * obs[i:j] + rest`` with ``c != 0``).

        Raises:
            ValueError: ``a`` is a constant or no key selection in it can be solved for.
        """
        x = np.array(x, dtype=np.float64, copy=True)
        point = np.broadcast_to(np.asarray(point, dtype=np.float64), (x.shape[0], self.widths[k]))
        slices = []

        def walk(node):
            if node[0] == "slice":
                slices.append(node)
            elif node[0] != "const":
                for c in node[1:]:
                    walk(c)

        walk(self.exprs[k][0])
        for _, i, j in slices:
            zero, one = x.copy(), x.copy()
            zero[:, i:j], one[:, i:j] = 0.0, 1.0
            base = self.point(zero, k, "a")
            coef = self.point(one, k, "a") - base
            if np.any(coef == 0):
                continue
            trial = x.copy()
            trial[:, i:j] = (point - base) / coef
            if np.allclose(self.point(trial, k, "a"), point, rtol=1e-9, atol=1e-9):
                return trial
        raise ValueError(f"subgoal {self.spec.subgoals[k].name!r}: cannot solve a = {str(self.spec.subgoals[k].a)!r} "
                         "for an observation slice")

    def distances(self, x: np.ndarray) -> np.ndarray:
        """Per-subgoal straight-line distances ``||a - b||`` (``b*`` for approach points), ``(B, n)``."""
        x = np.asarray(x, dtype=np.float64)
        out = np.empty((x.shape[0], len(self.exprs)))
        for k, dk in enumerate(_rule_distances(self, _NumpyOps(x, self.maze))):
            out[:, k] = dk
        return out

    def holds(self, x: np.ndarray, distances: np.ndarray | None = None) -> np.ndarray:
        """Which subgoals hold, ``(B, n)`` bool. ``distances`` (``(B, n)`` from :meth:`distances`)
        skips recomputing them when the caller already has them."""
        d = self.distances(x) if distances is None else distances
        h = _rule_holds(self, _NumpyOps(np.asarray(x, dtype=np.float64), self.maze), list(d.T))
        return np.stack(h, axis=1) if h else np.zeros(d.shape, dtype=bool)

    def progress(self, x: np.ndarray, holds: np.ndarray | None = None,
                 distances: np.ndarray | None = None) -> np.ndarray:
        """Spec progress in [0, 1], ``(B,)``; see the module docstring. ``holds`` (``(B, n)`` from
        :meth:`holds`) and ``distances`` (``(B, n)`` from :meth:`distances`) skip recomputing what
        the caller already has; both must come from this same ``x``."""
        x = np.asarray(x, dtype=np.float64)
        n = len(self.spec.subgoals)
        if n == 0:
            raise SpecError(f"spec {self.spec.name!r} has no subgoals: subgoal progress is undefined")
        if distances is None:
            distances = self.distances(x)
        if holds is None:
            holds = self.holds(x, distances=distances)
        return _rule_progress(self, _NumpyOps(x, self.maze), list(holds.T), list(distances.T))

    def holds_one(self, x: np.ndarray) -> tuple[bool, ...]:
        """:meth:`holds` of one critic input ``x`` ``(D,)`` (float32, already validated, e.g. by the
        env wrappers): the same values, without the batch's intermediate arrays."""
        if self._rows is None:
            return tuple(bool(b) for b in self.holds(np.asarray(x, dtype=np.float32)[None, :])[0])
        return self._rows[1](x.tolist() if x.dtype == np.float32 else x.astype(np.float32).tolist())

    def all_hold(self, x: np.ndarray) -> np.ndarray:
        """``(B,)`` bool: every subgoal holds (success for ``source = "subgoals"``)."""
        # numpy's stubs type ndarray.all(axis=...) as possibly a scalar; on (B, n) it is (B,)
        return cast(np.ndarray, self.holds(x).all(axis=1))


class SubgoalCritic(StateCritic):
    """A critic computed from the spec alone (no training): ``progress`` = spec progress,
    ``success`` = 1 where all subgoals hold, else the spec progress (a heuristic promise).

    Useful as a shaping potential out of the box, and as label family (a).
    """

    def __init__(self, spec: "str | TaskSpec", env=None, *, layout: CriticInputLayout | None = None,
                 maze: MazeGeometry | None = None):
        self.spec = load_spec(spec)
        if env is not None:
            validate.check_one_env("env", env, what="SubgoalCritic", fix=(
                "build the critic from one env (prm_critic.robotics.make_env(task)); the vector shapers "
                "(GymVectorPRMRewardShaper, SB3VecPRMRewardShaper) score every sub-env with it"))
        if layout is None:
            if env is None:
                raise ValueError("env: SubgoalCritic needs the env (or an explicit layout), got None")
            layout = CriticInputLayout.from_space(self.spec, env.observation_space)
        if maze is None and any(s.kind == "maze_path" for s in self.spec.subgoals):
            if env is None:
                raise ValueError("env: a maze_path spec needs the env (or maze=MazeGeometry), got None")
            maze = MazeGeometry.from_env(env)
        self.layout = layout
        self.obs_dim = layout.obs_dim
        self.evaluator = SubgoalEvaluator(self.spec, layout, maze)
        self._probe = np.full(self.obs_dim, 1e-30, np.float32)
        rows = self.evaluator._rows
        self._score_row = None if rows is None else rows[0]

    def critic_info(self) -> CriticInfo:
        """The spec's task and env id, the layout, the spec and the subgoal evaluator."""
        return CriticInfo(task=self.spec.name, env_id=self.spec.env_id, layout=self.layout, spec=self.spec,
                          labels="subgoal", evaluator=self.evaluator)

    def score_one(self, x: Any, *, check: bool = True) -> tuple[float, float]:
        """Score one critic input ``x`` of shape ``(obs_dim,)``; returns ``(progress, success)``, the
        same floats as :meth:`score` on ``x[None]``.

        The batch-1 path of the control loop: the subgoals are evaluated by straight-line code
        compiled once from the spec, on the row as Python floats (no intermediate arrays); maze
        distances come from tables built once. ``check=False`` skips the shape, dtype and
        finiteness checks for a caller that has already validated ``x`` as float32 (the env
        wrappers validate each observation once, naming its key).
        """
        a = x
        if check:
            a = check_row(x, self.obs_dim, flatten=self._flatten_obs).astype(np.float32, copy=False)  # what score() scores: the row as float32
            if not math.isfinite(a.dot(self._probe)):
                bad = int(np.argwhere(~np.isfinite(a))[0][0])
                raise ValueError(f"x: expected finite values, got {a[bad]} at index {bad}")
        elif a.dtype != np.float32:
            a = a.astype(np.float32)
        if self._score_row is None:
            sc = self.score(a[None, :])
            return float(sc.progress[0]), float(sc.success[0])
        p, s = self._score_row(a.tolist())
        return float(_F32(p)), float(_F32(s))  # score()'s StepScores hold float32

    def score(self, steps: npt.ArrayLike) -> StepScores:
        """Score ``steps`` of shape ``(B, obs_dim)``; returns progress and success ``(B,)``."""
        x = as_obs_batch(steps, self.obs_dim, name="steps", flatten=self._flatten_obs)
        d = self.evaluator.distances(x)  # once: subgoal states and progress both use them
        h = self.evaluator.holds(x, distances=d)
        p = self.evaluator.progress(x, holds=h, distances=d)
        return StepScores(p, np.where(h.all(axis=1), 1.0, p), {"subgoals_reached": h.sum(axis=1).astype(np.float32)})
