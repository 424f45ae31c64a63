"""Run a small exported MLP critic with numpy alone: :class:`NumpyMLPCritic`, the batch-1 fast path.

In a control loop the critic is called right after a physics step, which evicts the caches; for a
small critic the fixed cost of an onnxruntime call (its per-call machinery, not the weights) is then
most of the time. :class:`NumpyMLPCritic` reads the same exported ``.onnx`` file as
:class:`~prm_critic.onnx.OnnxCritic` (the same checks of the file's bytes, content hash and metadata,
before anything runs), recognises the MLP that :func:`~prm_critic.onnx.export_state_critic` writes,
and computes it with a few numpy calls on preallocated float32 buffers::

    z      = clip((obs - obs_mean) / obs_std, lo, hi)     Sub, Div, Clip
    h      = act(W h + b)                                 per hidden layer: Gemm (or MatMul + Add), then
                                                          Relu, Tanh, Elu or SiLU (Sigmoid + Mul)
    scores = sigmoid(W h + b)                             the head: Gemm (or MatMul + Add) to 2, Sigmoid

Anything else in the graph (another operator, a tensor that is not a float32 initializer, a branch) is
refused when the critic is built (:class:`UnsupportedGraphError`, naming the file, the node and what
was expected); such a file runs with :class:`~prm_critic.onnx.OnnxCritic`.

Scores: float32 arithmetic as onnxruntime's, not bit for bit (the matrix products sum in another
order; each bias is summed inside its matrix-vector product, as one more column); the scores agree
with onnxruntime's within :data:`ATOL` (absolute, on scores in [0, 1]), which
``tests/test_onnx_fast.py`` checks on random MLPs, sizes, activations and inputs. The final sigmoid
is computed in float64 and rounded to float32, so ``score_one(x)`` equals ``score(x[None])`` exactly
and a batch row by row within :data:`ATOL`.

Needs numpy, and the ``onnx`` package to read the file's initializers (both in the ``onnx`` extra);
not onnxruntime, not torch.
"""

from __future__ import annotations

import math
import os
import struct
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from prm_critic._optional import require
from prm_critic.critic import StepScores, as_obs_batch, check_row
from prm_critic.onnx.runtime import OnnxModelError, _ExportedCritic, _existing_file

__all__ = ["NumpyMLPCritic", "UnsupportedGraphError", "ATOL", "ACTIVATIONS"]

#: the largest absolute difference between :class:`NumpyMLPCritic`'s scores and onnxruntime's that
#: ``tests/test_onnx_fast.py`` accepts (scores are probabilities in [0, 1])
ATOL = 1e-5
#: hidden-layer activations recognised (the ONNX operators each is exported as)
ACTIVATIONS = {"relu": "Relu", "tanh": "Tanh", "elu": "Elu", "silu": "Sigmoid + Mul"}
_F32 = np.dtype(np.float32)
_F32_PAIR = struct.Struct("ff")  # packs two floats as float32: rounds them as numpy's cast does
_FLOAT = 1  # onnx.TensorProto.FLOAT
_CHAIN = ("Sub, Div, Clip (each optional), then layers of Gemm (or MatMul + Add) with Relu, Tanh, Elu or SiLU "
          "(Sigmoid + Mul) between them, ending in a 2-wide layer and a Sigmoid that writes the output")


class UnsupportedGraphError(OnnxModelError):
    """An exported critic's graph is not the MLP :class:`NumpyMLPCritic` runs (run it with
    :class:`~prm_critic.onnx.OnnxCritic`)."""


@dataclass(frozen=True)
class _Layer:
    weight: np.ndarray  # (out, in) float32
    bias: np.ndarray  # (out,) float32
    activation: str | None  # None: the head (sigmoid)
    alpha: float = 1.0  # Elu's alpha


@dataclass(frozen=True)
class _MLP:
    mean: np.ndarray
    std: np.ndarray
    clip: tuple[float, float] | None
    layers: tuple[_Layer, ...]


class _Walk:
    """Reads an exported critic's graph node by node along the chain ``input -> ... -> output``."""

    def __init__(self, model, where: str, in_name: str, out_name: str, obs_dim: int):
        from onnx import numpy_helper

        self.where, self.out_name = where, out_name
        self.nodes = list(model.graph.node)
        self.i = 0
        self.cur, self.width = in_name, obs_dim
        self.init = {t.name: t for t in model.graph.initializer}
        self._to_array = numpy_helper.to_array

    # ------------------------------------------------------------------ helpers
    def peek(self, k: int = 0):
        j = self.i + k
        return self.nodes[j] if j < len(self.nodes) else None

    def fail(self, node, expected: str) -> UnsupportedGraphError:
        if node is None:
            got = f"the graph ends after {len(self.nodes)} nodes at tensor {self.cur!r}"
        else:
            got = (f"node {self.nodes.index(node)} {node.name or '<unnamed>'!r} ({node.op_type}: inputs "
                   f"{list(node.input)}, outputs {list(node.output)})")
        return UnsupportedGraphError(
            f"path: {self.where!r}: {got} is not what NumpyMLPCritic runs: expected {expected}. It runs the MLP "
            f"export_state_critic writes ({_CHAIN}); run this file with OnnxCritic")

    def const(self, node, name: str, what: str) -> np.ndarray:
        """The float32 initializer ``name`` (an input of ``node``), as a numpy array."""
        t = self.init.get(name)
        if t is None or t.data_type != _FLOAT:
            found = "not an initializer" if t is None else f"an initializer of ONNX data type {t.data_type}"
            raise self.fail(node, f"{what} as a float32 initializer (input {name!r} is {found})")
        return np.asarray(self._to_array(t), np.float32)

    def take(self, op: str, n_inputs: tuple[int, ...], expected: str, attrs: tuple[str, ...] = ()):
        """The next node, checked: operator ``op`` in the default domain, the current tensor as its
        first input, ``n_inputs`` inputs, one output, no attributes but ``attrs``; advances past it."""
        node = self.peek()
        if (node is None or node.op_type != op or node.domain not in ("", "ai.onnx") or len(node.input) not in n_inputs
                or node.input[0] != self.cur or len(node.output) != 1
                or any(a.name not in attrs for a in node.attribute)):
            raise self.fail(node, expected)
        self.i += 1
        return node

    def attr(self, node, name: str, default):
        from onnx import helper

        for a in node.attribute:
            if a.name == name:
                return helper.get_attribute_value(a)
        return default

    def vector(self, node, name: str, size: int, what: str) -> np.ndarray:
        a = self.const(node, name, what)
        if a.size not in (1, size) or a.ndim > 2 or (a.ndim == 2 and a.shape[0] != 1):
            raise self.fail(node, f"{what} of shape ({size},) (input {name!r} has shape {a.shape})")
        return np.ascontiguousarray(np.broadcast_to(a.reshape(-1), (size,)), np.float32)

    # ------------------------------------------------------------------ the chain
    def normaliser(self) -> tuple[np.ndarray, np.ndarray, tuple[float, float] | None]:
        d = self.width
        mean, std, clip = np.zeros(d, np.float32), np.ones(d, np.float32), None
        node = self.peek()
        if node is not None and node.op_type == "Sub":
            node = self.take("Sub", (2,), "Sub(obs, obs_mean)")
            mean = self.vector(node, node.input[1], d, "obs_mean")
            self.cur = node.output[0]
            node = self.peek()
        if node is not None and node.op_type == "Div":
            node = self.take("Div", (2,), "Div(z, obs_std)")
            std = self.vector(node, node.input[1], d, "obs_std")
            self.cur = node.output[0]
            node = self.peek()
        if node is not None and node.op_type == "Clip":
            node = self.take("Clip", (1, 2, 3), "Clip(z, lo, hi) with scalar bounds")
            bounds = []
            for k, default in ((1, -np.inf), (2, np.inf)):
                name = node.input[k] if len(node.input) > k else ""
                bounds.append(float(self.vector(node, name, 1, "a scalar Clip bound")[0]) if name else default)
            clip = (bounds[0], bounds[1])
            self.cur = node.output[0]
        return mean, std, clip

    def linear(self) -> tuple[np.ndarray, np.ndarray]:
        """A Gemm (alpha = beta = 1, transA = 0) or a MatMul with an optional Add of the bias."""
        node = self.peek()
        expected = f"a linear layer on {self.cur!r} of width {self.width}: Gemm or MatMul (+ Add)"
        if node is not None and node.op_type == "Gemm":
            node = self.take("Gemm", (2, 3), expected, attrs=("alpha", "beta", "transA", "transB"))
            if (self.attr(node, "alpha", 1.0), self.attr(node, "beta", 1.0), self.attr(node, "transA", 0)) != (1.0, 1.0, 0):
                raise self.fail(node, "a Gemm with alpha = 1, beta = 1 and transA = 0")
            w = self.const(node, node.input[1], "the weight matrix")
            w = w if self.attr(node, "transB", 0) else w.T
        else:
            node = self.take("MatMul", (2,), expected)
            w = self.const(node, node.input[1], "the weight matrix").T
        if w.ndim != 2 or w.shape[1] != self.width:
            raise self.fail(node, f"a weight matrix with {self.width} inputs (got shape {w.shape})")
        out = w.shape[0]
        bias = np.zeros(out, np.float32)
        if node.op_type == "Gemm" and len(node.input) == 3 and node.input[2]:
            bias = self.vector(node, node.input[2], out, "a bias")
        self.cur = node.output[0]
        nxt = self.peek()
        if node.op_type == "MatMul" and nxt is not None and nxt.op_type == "Add" and self.cur in nxt.input:
            add = self.take("Add", (2,), "Add(x, bias)") if nxt.input[0] == self.cur else self._add_bias_first()
            others = [n for n in add.input if n != self.cur]
            if len(others) != 1:  # Add(h, h): no bias operand
                raise self.fail(add, "Add(x, bias) with a bias initializer, not the layer's output added to itself")
            bias = self.vector(add, others[0], out, "a bias")
            self.cur = add.output[0]
        self.width = out
        return np.ascontiguousarray(w, np.float32), bias

    def _add_bias_first(self):
        """``Add(bias, x)``: the same layer with its operands the other way round."""
        node = self.peek()
        if len(node.input) != 2 or node.input[1] != self.cur or len(node.output) != 1 or node.attribute:
            raise self.fail(node, "Add(x, bias)")
        self.i += 1
        return node

    def activation(self) -> tuple[str, float]:
        node = self.peek()
        if node is None:
            raise self.fail(None, "an activation or the final Sigmoid")
        op = node.op_type
        if op in ("Relu", "Tanh"):
            self.cur = self.take(op, (1,), op).output[0]
            return op.lower(), 1.0
        if op == "Elu":
            node = self.take("Elu", (1,), "Elu", attrs=("alpha",))
            self.cur = node.output[0]
            return "elu", float(self.attr(node, "alpha", 1.0))
        if op == "Sigmoid":
            pre = self.cur
            sig = self.take("Sigmoid", (1,), "Sigmoid").output[0]
            mul = self.peek()
            if (mul is None or mul.op_type != "Mul" or sorted(mul.input) != sorted([pre, sig]) or len(mul.output) != 1
                    or mul.attribute or mul.domain not in ("", "ai.onnx")):
                raise self.fail(mul, f"Mul({pre!r}, {sig!r}) after the Sigmoid (SiLU), or that Sigmoid writing "
                                     f"the output {self.out_name!r} after a 2-wide layer")
            self.i += 1
            self.cur = mul.output[0]
            return "silu", 1.0
        raise self.fail(node, f"an activation on {self.cur!r} ({', '.join(ACTIVATIONS.values())}) or the final "
                              f"Sigmoid writing the output {self.out_name!r}")

    def is_head_end(self) -> bool:
        """The next node is the final Sigmoid: the last node, writing the graph's output."""
        node = self.peek()
        return (node is not None and node.op_type == "Sigmoid" and self.i == len(self.nodes) - 1
                and list(node.output) == [self.out_name])

    def read(self) -> _MLP:
        mean, std, clip = self.normaliser()
        layers: list[_Layer] = []
        while True:
            w, b = self.linear()
            if self.is_head_end():
                node = self.take("Sigmoid", (1,), "Sigmoid")
                if self.width != 2:
                    raise self.fail(node, f"a last layer of width 2 (progress, success), got {self.width}")
                layers.append(_Layer(w, b, None))
                return _MLP(mean, std, clip, tuple(layers))
            act, alpha = self.activation()
            layers.append(_Layer(w, b, act, alpha))


def read_mlp(model, where: str, in_name: str, out_name: str, obs_dim: int) -> _MLP:
    """The MLP of an exported critic's ``ModelProto`` (``where``: the file, for messages);
    :class:`UnsupportedGraphError` on anything else."""
    return _Walk(model, where, in_name, out_name, obs_dim).read()


def _packed(arrays: list[np.ndarray]) -> list[np.ndarray]:
    """Copies of the float32 ``arrays`` laid out one after the other in one 64-byte aligned block,
    each C-contiguous and starting on a cache line."""
    sizes = [-(-max(a.size, 1) // 16) * 16 for a in arrays]
    block = np.zeros(sum(sizes) + 16, np.float32)
    off = (-block.ctypes.data % 64) // 4
    out = []
    for a, n in zip(arrays, sizes):
        v = block[off : off + a.size].reshape(a.shape)
        v[...] = a
        out.append(v)
        off += n
    return out


def _sigmoid(v: float) -> float:
    """``1 / (1 + exp(-v))`` in float64 without overflow (``nan`` stays ``nan``)."""
    if v >= 0.0:
        return 1.0 / (1.0 + math.exp(-v))
    e = math.exp(v)
    return e / (1.0 + e)


class NumpyMLPCritic(_ExportedCritic):
    """An MLP critic exported by :func:`~prm_critic.onnx.export_state_critic`, run with numpy.

    The control-loop fast path for small critics: the same file, checks, metadata and scores as
    :class:`~prm_critic.onnx.OnnxCritic` (within :data:`ATOL`), without onnxruntime's per-call cost.
    A drop-in :class:`~prm_critic.critic.StateCritic`: ``score``, ``score_one`` (what
    :class:`~prm_critic.wrappers.PRMRewardShaper` and :class:`~prm_critic.wrappers.DeadEndPruner` call
    per step), ``score_rows`` (the vector wrappers), ``critic_info``, ``check_env``.

    Args:
        path: the ``.onnx`` file (either batch variant: the graph's batch size is not used, any
            batch is scored).
        env: if given, :meth:`check_env` is run on it at load time.
        allow_unverified: as for :class:`~prm_critic.onnx.OnnxCritic`: accept a file without a
            content hash, or whose hash does not match, with a ``RuntimeWarning``.

    Attributes:
        meta: the decoded metadata (task, layout, obs_dim, batch, heads, label family, ...).
        obs_dim: width ``D`` of one critic input.
        batch: the exported graph's batch (``1`` or ``"dynamic"``; informational here).
        sizes: the layer widths, ``(obs_dim, hidden..., 2)``.
        activations: the hidden layers' activations (``"relu"``, ``"tanh"``, ``"elu"``, ``"silu"``).

    Raises:
        FileNotFoundError: ``path`` does not exist.
        OnnxModelError: the file fails the checks :class:`~prm_critic.onnx.OnnxCritic` makes (corrupt,
            modified after export, external data, not a prm-critic critic, signature), or ``env`` does
            not fit.
        UnsupportedGraphError: the graph is not the MLP above (e.g. an exported ``SubgoalCritic``);
            the message names the node and what was expected.

    An instance is not meant to be shared between threads that call it at the same time (the batch-1
    buffers are shared); calls are serialised with a lock.
    """

    def __init__(self, path: "str | os.PathLike", *, env: Any = None, allow_unverified: bool = False):
        from prm_critic import validate

        validate.check_flag("allow_unverified", allow_unverified)
        self.path = _existing_file(path)
        self._load(allow_unverified)
        if env is not None:
            self.check_env(env)

    # ------------------------------------------------------------------ setup
    def _load(self, allow_unverified: bool) -> None:
        """Check the file's bytes, decode its metadata, read the MLP and lay out its weights."""
        onnx = require("onnx")
        data, raw = self._read_checked(allow_unverified)
        self._decode_meta(raw)
        try:
            model = onnx.load_from_string(data)
        except Exception as exc:  # checked above; a parser that still refuses it
            raise OnnxModelError(f"path: {str(self.path)!r} is corrupt or not an ONNX model ({exc})") from exc
        g = model.graph
        inits = {t.name for t in g.initializer}
        ins = [i for i in g.input if i.name not in inits]  # IR < 4 may list initializers as inputs
        dims = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?")
                for d in ins[0].type.tensor_type.shape.dim] if ins else None
        self._check_io([i.name for i in ins], [o.name for o in g.output], dims)
        mlp = read_mlp(model, str(self.path), self._in_name, self._out_name, self.obs_dim)
        self.sizes = (self.obs_dim, *(layer.weight.shape[0] for layer in mlp.layers))
        self.activations = tuple(str(layer.activation) for layer in mlp.layers[:-1])
        self._mlp = mlp
        self._lock = threading.Lock()
        self._probe = np.full(self.obs_dim, 1e-30, np.float32)
        self._row = np.zeros(self.obs_dim, np.float32)
        self._one = self._one_row_kernel(mlp)

    def _one_row_kernel(self, mlp: _MLP):
        """The batch-1 computation on preallocated buffers: ``run(src)`` scores the float32 row
        ``src`` ``(obs_dim,)`` and returns the two logits. Each layer's weights and bias are one
        ``(out, in + 1)`` matrix and its input a buffer ending in a constant 1, so one matrix-vector
        product per layer adds the bias too; each activation writes into the next layer's input."""
        d, layers = self.obs_dim, mlp.layers
        lo, hi = mlp.clip if mlp.clip is not None else (-np.inf, np.inf)
        consts = _packed([mlp.mean, mlp.std, np.full(d, lo, np.float32), np.full(d, hi, np.float32)]
                         + [np.concatenate([ly.weight, ly.bias[:, None]], axis=1) for ly in layers]
                         + [np.zeros(ly.weight.shape[0], np.float32) for ly in layers]
                         + [np.full(ly.weight.shape[0], v, np.float32) for ly in layers for v in (1.0, ly.alpha)])
        n = len(layers)
        mean, std, lov, hiv = consts[:4]
        mats, zeros, ones_alpha = consts[4 : 4 + n], consts[4 + n : 4 + 2 * n], consts[4 + 2 * n :]
        for c in consts:
            c.flags.writeable = False
        ins = _packed([np.ones(ly.weight.shape[1] + 1, np.float32) for ly in layers])  # [h, 1]
        outs = _packed([np.zeros(ly.weight.shape[0], np.float32) for ly in layers]
                       + [np.zeros(ly.weight.shape[0], np.float32) for ly in layers])
        z = ins[0][:d]
        hidden = tuple((mats[k], ins[k], outs[k], layers[k].activation, ins[k + 1][:-1], zeros[k], outs[n + k],
                        ones_alpha[2 * k], ones_alpha[2 * k + 1], layers[k].alpha != 1.0) for k in range(n - 1))
        head_w, head_in, logits = mats[-1], ins[-1], outs[n - 1]
        clip = mlp.clip is not None
        sub, div, mx, mn, dot = np.subtract, np.divide, np.maximum, np.minimum, np.dot
        tanh, exp, add, neg, mul = np.tanh, np.exp, np.add, np.negative, np.multiply
        tolist = logits.tolist

        def run(src: np.ndarray) -> list[float]:
            sub(src, mean, z)
            div(z, std, z)
            if clip:
                mx(z, lov, out=z)
                mn(z, hiv, out=z)
            for w, xin, y, act, nxt, zero, tmp, one, alpha, scaled in hidden:
                dot(w, xin, y)
                if act == "relu":
                    mx(y, zero, out=nxt)
                elif act == "tanh":
                    tanh(y, nxt)
                elif act == "elu":  # max(y, 0) + alpha * (exp(min(y, 0)) - 1)
                    mn(y, zero, out=tmp)
                    exp(tmp, tmp)
                    sub(tmp, one, tmp)
                    if scaled:
                        mul(tmp, alpha, tmp)
                    mx(y, zero, out=nxt)
                    add(nxt, tmp, nxt)
                else:  # silu: y * sigmoid(y) = y / (1 + exp(-y)); exp overflows to inf for y < -88 (-> -0.0)
                    neg(y, tmp)
                    with np.errstate(over="ignore"):
                        exp(tmp, tmp)
                    add(tmp, one, tmp)
                    div(y, tmp, nxt)
            dot(head_w, head_in, logits)
            return tolist()

        return run

    # ------------------------------------------------------------------ scoring
    def score_one(self, x: Any, *, check: bool = True) -> tuple[float, float]:
        """Score one critic input ``x`` of shape ``(obs_dim,)``; returns ``(progress, success)``.

        As :meth:`OnnxCritic.score_one <prm_critic.onnx.OnnxCritic.score_one>`: the same checks and
        errors; ``check=False`` skips the shape, dtype and finiteness checks for a caller that has
        already validated ``x`` (the env wrappers do), and a non-finite ``x`` then gives non-finite
        scores instead of an error. Equal to ``score(x[None])``.
        """
        a = x
        if check:
            a = check_row(x, self.obs_dim, flatten=self._flatten_obs)
        with self._lock:
            if getattr(a, "dtype", None) is _F32:
                src = a
            else:  # converted to float32 first, as onnxruntime's input buffer does
                src = self._row
                src[...] = a
            if check and not math.isfinite(src.dot(self._probe)):
                raise self._non_finite(src, a)
            l0, l1 = self._one(src)
            # the sigmoid in float64, rounded to float32 (as the batch path's scores are)
            return _F32_PAIR.unpack(_F32_PAIR.pack(_sigmoid(l0), _sigmoid(l1)))

    def score(self, steps: npt.ArrayLike) -> StepScores:
        """Score ``steps`` of shape ``(B, obs_dim)``; returns progress and success ``(B,)``."""
        out = self._score_rows(as_obs_batch(steps, self.obs_dim, name="steps", flatten=self._flatten_obs))
        return StepScores(out[:, 0], out[:, 1])

    def _score_rows(self, x: np.ndarray) -> np.ndarray:
        """One row: the batch-1 path (so ``score(x[None])`` equals ``score_one(x)``); more: matrix products."""
        b = x.shape[0]
        if b <= 1:
            out = np.zeros((b, 2), np.float32)
            if b:
                with self._lock:
                    row = self._row
                    row[...] = x[0]
                    l0, l1 = self._one(row)
                out[0] = (_sigmoid(l0), _sigmoid(l1))
            return out
        mlp = self._mlp
        h = np.subtract(x, mlp.mean, dtype=np.float32)
        np.divide(h, mlp.std, out=h)
        if mlp.clip is not None:
            np.clip(h, *mlp.clip, out=h)
        for layer in mlp.layers:
            h = h @ layer.weight.T
            h += layer.bias
            _activate(h, layer)
        logits = h.astype(np.float64)
        e = np.exp(-np.abs(logits))
        return np.where(logits >= 0, 1.0 / (1.0 + e), e / (1.0 + e)).astype(np.float32)

    def __repr__(self) -> str:
        return (f"NumpyMLPCritic({str(self.path)!r}, task={self.task!r}, obs_dim={self.obs_dim}, "
                f"sizes={self.sizes}, activations={self.activations})")


def _activate(h: np.ndarray, layer: _Layer) -> None:
    """A hidden layer's activation in place on a batch (the same operations as the batch-1 path)."""
    act = layer.activation
    if act == "relu":
        np.maximum(h, 0, out=h)
    elif act == "tanh":
        np.tanh(h, out=h)
    elif act == "elu":
        t = np.exp(np.minimum(h, 0))
        t -= 1
        if layer.alpha != 1.0:
            t *= np.float32(layer.alpha)
        np.maximum(h, 0, out=h)
        h += t
    elif act == "silu":
        with np.errstate(over="ignore"):
            t = np.exp(-h)
        t += 1
        np.divide(h, t, out=h)
