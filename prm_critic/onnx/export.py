"""Export a state critic to ONE self-contained ONNX file, with metadata and a parity check.

The exported graph computes exactly :meth:`StateCriticNet.forward`::

    z      = clip((obs - obs_mean) / obs_std, -obs_clip, obs_clip)
    scores = sigmoid(head(body(z)))                                # (B, 2) = [progress, success]

Normalisation lives inside the graph (the ``obs_mean``/``obs_std``/``obs_clip`` buffers become
initializers; a critic saved before clipping existed has ``obs_clip = inf``), so
the file needs nothing else at deploy time. Interface of every exported state critic:

* input ``obs``: float32 ``(B, obs_dim)`` (``B`` symbolic for ``batch="dynamic"``, fixed to 1 for
  ``batch=1``, the control-loop variant);
* output ``scores``: float32 ``(B, 2)``, columns ``[progress, success]`` in [0, 1].

Every export runs ``onnx.checker.check_model`` and compares onnxruntime against torch on random and
realistic inputs (``rtol=1e-4, atol=1e-5``); a mismatch raises :class:`OnnxExportError` and leaves no
file behind. The file is written atomically (temp file + ``os.replace``) and never has a ``.data``
sidecar (weights are stored inline; an export that would need external data is an error).

The file's ONNX IR version is the exporter's (10, which onnxruntime >= 1.18 loads) unless
``ir_version`` asks for an older one (9: onnxruntime 1.16 and 1.17; at least what the opset needs,
8 for opset 18); it is recorded in the metadata (``ir_version``).

Every file carries its content hash in the metadata (``prm_critic.sha256``: the SHA-256 of the file
with those 64 hex characters set to ``"0"``), so a single changed byte anywhere in the weights, the
graph or the metadata is refused by :class:`~prm_critic.onnx.OnnxCritic` before a session is built.

Progress: each phase (tracing, checking, parity, writing, then the size and hash of the file) is
logged at ``INFO`` on the ``prm_critic.onnx.export`` logger; ``prm-critic export`` prints them.
To see them from Python: ``logging.basicConfig(level=logging.INFO)``.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import warnings
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from prm_critic import __version__
from prm_critic._optional import require
from prm_critic._io import atomic_write_bytes
from prm_critic.models.checkpoint import load_state_critic
from prm_critic.models.state_critic import HEADS, StateCriticNet, TorchStateCritic
from prm_critic.robotics.subgoals import _ArrayOps, eval_expr
from prm_critic.onnx._meta import (
    ATOL,
    DEFAULT_OPSET,
    FORMAT,
    FORMAT_VERSION,
    HASH_KEY,
    INPUT_NAME,
    LABEL_SEMANTICS,
    OUTPUT_NAME,
    RTOL,
    OnnxExportError,
    decode_metadata,
    seal,
)

log = logging.getLogger(__name__)

__all__ = [
    "OnnxExportError",
    "export_state_critic",
    "export_subgoal_critic",
    "read_onnx_metadata",
    "decode_metadata",
    "parity_check",
    "strip_stack_traces",
    "FORMAT",
    "INPUT_NAME",
    "OUTPUT_NAME",
    "DEFAULT_OPSET",
    "min_ir_version",
]


class _ObsToScores:
    """Factory of the torch module that is exported (input named ``obs``)."""

    @staticmethod
    def build(net: StateCriticNet):
        import torch

        class ObsToScores(torch.nn.Module):
            def __init__(self, inner):
                super().__init__()
                self.inner = inner

            def forward(self, obs):
                return self.inner(obs)

        return ObsToScores(net).eval()


def _resolve_net(src: Any) -> tuple[StateCriticNet, dict]:
    if isinstance(src, TorchStateCritic):
        return src.net, dict(src.meta)
    if isinstance(src, StateCriticNet):
        return src, {}
    if isinstance(src, (str, os.PathLike)):
        crit = load_state_critic(src)
        return crit.net, dict(crit.meta)
    raise TypeError(
        "critic_or_checkpoint_path: expected a StateCriticNet, a TorchStateCritic or a checkpoint path, "
        f"got {type(src).__name__}"
    )


def on_cpu(module):
    """``module`` in eval mode on the CPU; a copy when it is elsewhere or in training mode (the caller's
    module is neither moved nor switched to eval)."""
    import copy

    if module.training or any(t.device.type != "cpu" for t in list(module.parameters()) + list(module.buffers())):
        module = copy.deepcopy(module).cpu()
    return module.eval()


def _layout_dict(layout: Any, meta: Mapping[str, Any], obs_dim: int) -> dict | None:
    if layout is None:
        layout = meta.get("layout")
    if layout is None:
        return None
    if hasattr(layout, "to_dict"):
        layout = layout.to_dict()
    if not isinstance(layout, Mapping) or "keys" not in layout or "sizes" not in layout:
        raise OnnxExportError(
            f"layout: expected a CriticInputLayout or a dict with 'keys' and 'sizes', got {layout!r}"
        )
    keys = [str(k) for k in layout["keys"]]
    sizes = {k: int(layout["sizes"][k]) for k in keys}
    total = sum(sizes.values())
    if total != obs_dim:
        raise OnnxExportError(
            f"layout: its keys {keys} with sizes {sizes} add up to {total}, but the critic's obs_dim is {obs_dim}"
        )
    return {"keys": keys, "sizes": sizes, "obs_dim": total}


def _task_name(task: Any, meta: Mapping[str, Any]) -> str | None:
    if task is not None:
        if not isinstance(task, str) or not task:
            raise OnnxExportError(f"task: expected a non-empty string (a task spec name), got {task!r}")
        return task
    if isinstance(meta.get("task"), str):
        return meta["task"]
    table = _spec_table(meta)
    if table is not None and isinstance(table.get("name"), str):
        return table["name"]
    return None


def _spec_table(meta: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The ``[task]`` table of ``meta["spec"]`` (``TaskSpec.to_dict()`` nests it under ``"task"``)."""
    spec = meta.get("spec")
    if not isinstance(spec, Mapping):
        return None
    table = spec.get("task", spec)
    return table if isinstance(table, Mapping) else None


def _normalization_summary(net: StateCriticNet) -> dict:
    mean = net.obs_mean.detach().cpu().numpy().astype(np.float64)
    std = net.obs_std.detach().cpu().numpy().astype(np.float64)
    return {
        "inside_graph": True,
        "formula": "clip((obs - obs_mean) / obs_std, -obs_clip, obs_clip)",
        "clip": float(net.obs_clip) if np.isfinite(float(net.obs_clip)) else None,
        "identity": bool(np.all(mean == 0) and np.all(std == 1)),
        "mean_abs_max": float(np.abs(mean).max()),
        "std_min": float(std.min()),
        "std_max": float(std.max()),
    }


def _jsonable(obj: Any, where: str) -> str:
    try:
        return json.dumps(obj, sort_keys=True)
    except (TypeError, ValueError) as exc:
        raise OnnxExportError(f"{where}: expected JSON-serialisable values, got {obj!r} ({exc})") from exc


@contextlib.contextmanager
def quiet_exporter():
    """Silence the exporter's progress prints and its torchvision registration warnings."""
    loggers = [logging.getLogger(n) for n in ("torch.onnx", "torch.onnx._internal.exporter._registration")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, lv in zip(loggers, levels):
            lg.setLevel(lv)


def _export_proto(net, batch: int | str, opset: int, obs_dim: int | None = None):
    """torch module ``(B, D) -> (B, 2)`` -> ModelProto. Dynamo exporter first; the legacy
    (TorchScript) exporter only if it fails (with a warning saying so)."""
    import torch

    onnx = require("onnx")
    require("onnxscript")
    module = _ObsToScores.build(net)
    log.info("tracing the critic with the torch.onnx dynamo exporter (opset %d, batch %s)", opset, batch)
    x = torch.zeros(1, int(obs_dim if obs_dim is not None else net.obs_dim), dtype=torch.float32)
    dynamo_error: Exception | None = None
    try:
        with quiet_exporter(), torch.no_grad():
            kwargs: dict[str, Any] = {}
            if batch == "dynamic":
                kwargs["dynamic_shapes"] = {"obs": {0: torch.export.Dim("batch")}}
            prog = torch.onnx.export(
                module, (x,), None, dynamo=True, opset_version=opset, external_data=False,
                input_names=[INPUT_NAME], output_names=[OUTPUT_NAME], verbose=False, **kwargs,
            )
            if prog is None:
                raise RuntimeError("torch.onnx.export returned no program")
            return prog.model_proto, "dynamo"
    except Exception as exc:  # fall back, and say so
        dynamo_error = exc
    warnings.warn(
        f"export: the dynamo ONNX exporter failed ({type(dynamo_error).__name__}: {dynamo_error}); "
        "falling back to the legacy TorchScript exporter",
        RuntimeWarning,
        stacklevel=3,
    )
    log.info("tracing the critic with the legacy TorchScript exporter (opset %d, batch %s)", opset, batch)
    buf = io.BytesIO()
    with quiet_exporter(), torch.no_grad():
        dyn = {INPUT_NAME: {0: "batch"}, OUTPUT_NAME: {0: "batch"}} if batch == "dynamic" else None
        # the legacy (dynamo=False) exporter writes to a file-like object; torch annotates f as a path only
        torch.onnx.export(
            module, (x,), buf, dynamo=False, opset_version=opset,  # type: ignore[arg-type]
            input_names=[INPUT_NAME], output_names=[OUTPUT_NAME], dynamic_axes=dyn,
        )
    return onnx.load_from_string(buf.getvalue()), "legacy"


def _parity_inputs(net: StateCriticNet, realistic: np.ndarray | None, seed: int = 0) -> dict[str, np.ndarray]:
    """Named input sets (each float32 ``(N, D)``) for the parity check."""
    rng = np.random.default_rng(seed)
    d = net.obs_dim
    mean = net.obs_mean.detach().cpu().numpy()
    std = net.obs_std.detach().cpu().numpy()
    sets = {
        "random_normal": rng.standard_normal((64, d)),
        "random_uniform_wide": rng.uniform(-10.0, 10.0, (64, d)),
        "zeros": np.zeros((1, d)),
        # data-like inputs: the distribution the normaliser was fitted on
        "realistic_normaliser": mean + std * rng.standard_normal((64, d)),
    }
    if np.isfinite(float(net.obs_clip)):
        # finite inputs far outside the training range, up to the float32 maximum: clipped alike
        big = float(np.finfo(np.float32).max)
        sets["extreme_finite"] = np.stack([np.full(d, big), np.full(d, -big), np.where(np.arange(d) % 2, big, -big),
                                           mean + 1e6 * np.maximum(std, 1.0)])
    if realistic is not None:
        sets["realistic_given"] = realistic
    return {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in sets.items()}


def parity_check(
    model_bytes: bytes,
    net: Any,
    inputs: Mapping[str, np.ndarray],
    *,
    batch: int | str,
    rtol: float = RTOL,
    atol: float = ATOL,
) -> dict[str, float]:
    """Compare onnxruntime (CPU) with the reference on each input set; returns max abs error per set.

    ``net`` is the torch module that was exported, or a callable ``(N, D) float32 -> (N, 2)``.

    Raises:
        OnnxExportError: naming the input set, the worst element and the tolerances.
    """
    import torch

    ort = require("onnxruntime")
    log.info("checking parity: onnxruntime vs the reference on %d input sets (%s; rtol %g, atol %g)",
             len(inputs), ", ".join(inputs), rtol, atol)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(model_bytes, so, providers=["CPUExecutionProvider"])
    errors: dict[str, float] = {}
    if isinstance(net, torch.nn.Module):
        module = net.eval()

        def reference(x):
            with torch.no_grad():
                return module(torch.from_numpy(x)).numpy()
    else:  # a callable (N, D) -> (N, 2), e.g. the numpy subgoal critic
        reference = net
    for name, x in inputs.items():
        ref = np.asarray(reference(x), dtype=np.float32)
        if batch == "dynamic":
            got = sess.run([OUTPUT_NAME], {INPUT_NAME: x})[0]
        else:
            got = np.concatenate([sess.run([OUTPUT_NAME], {INPUT_NAME: x[i : i + 1]})[0] for i in range(len(x))])
        if got.shape != ref.shape:
            raise OnnxExportError(f"parity ({name}): onnxruntime output shape {got.shape} != torch {ref.shape}")
        err = np.abs(got.astype(np.float64) - ref.astype(np.float64))
        errors[name] = float(err.max()) if err.size else 0.0
        if not np.allclose(got, ref, rtol=rtol, atol=atol):
            i = np.unravel_index(np.argmax(err - rtol * np.abs(ref)), err.shape)
            raise OnnxExportError(
                f"parity ({name}): onnxruntime and torch disagree at {tuple(int(k) for k in i)}: "
                f"onnx {got[i]!r} vs torch {ref[i]!r} (|diff| {err[i]:.3g} > atol {atol} + rtol {rtol} * |torch|)"
            )
    log.info("parity OK: max |onnx - reference| %.3g", max(errors.values(), default=0.0))
    return errors


def check_opset_and_path(opset, out_path) -> Path:
    """Validate ``opset`` (17 .. the installed onnx's newest) and an ``out_path`` ending in .onnx."""
    onnx = require("onnx")
    max_opset = onnx.defs.onnx_opset_version()
    if isinstance(opset, bool) or not isinstance(opset, int) or not 17 <= opset <= max_opset:
        raise OnnxExportError(f"opset: expected an int in [17, {max_opset}] (default {DEFAULT_OPSET}), got {opset!r}")
    out = Path(out_path)
    if out.suffix != ".onnx":
        raise OnnxExportError(f"out_path: expected a file name ending in .onnx, got {str(out)!r}")
    return out


def min_ir_version(opset: int) -> int:
    """The lowest ONNX IR version whose files may import default-domain ``opset`` (onnx's version table)."""
    helper = require("onnx").helper
    return int(helper.find_min_ir_version_for([helper.make_opsetid("", opset)]))


def check_ir_version(ir_version, opset: int) -> int | None:
    """Validate ``ir_version``: ``None`` (the exporter's) or an int from what ``opset`` needs
    (:func:`min_ir_version`) to the installed onnx's newest (``onnx.IR_VERSION``)."""
    if ir_version is None:
        return None
    lo, hi = min_ir_version(opset), int(require("onnx").IR_VERSION)
    if isinstance(ir_version, bool) or not isinstance(ir_version, int) or not lo <= ir_version <= hi:
        raise OnnxExportError(f"ir_version: opset {opset} needs IR version >= {lo}; expected an int in [{lo}, {hi}] "
                              f"or None (the exporter's), got {ir_version!r}")
    return ir_version


def _check_args(batch, opset, out_path, extra_meta, ir_version=None) -> tuple[int | str, Path]:
    if isinstance(batch, str) and batch.strip() == "1":
        batch = 1
    if isinstance(batch, bool) or batch not in ("dynamic", 1):
        raise OnnxExportError(f"batch: expected 'dynamic' or 1, got {batch!r}")
    out = check_opset_and_path(opset, out_path)
    check_ir_version(ir_version, opset)
    if out.is_dir():
        raise OnnxExportError(f"out_path: {str(out)!r} is a directory; expected a .onnx file path")
    if extra_meta is not None and not isinstance(extra_meta, Mapping):
        raise OnnxExportError(f"extra_meta: expected a dict of JSON-serialisable values, got {type(extra_meta).__name__}")
    return batch, out


def export_state_critic(
    critic_or_checkpoint_path: "StateCriticNet | TorchStateCritic | str | os.PathLike",
    out_path: "str | os.PathLike",
    *,
    batch: "int | str" = "dynamic",
    opset: int = DEFAULT_OPSET,
    task: str | None = None,
    layout: Any = None,
    extra_meta: Mapping[str, Any] | None = None,
    parity_inputs: np.ndarray | None = None,
    ir_version: int | None = None,
) -> Path:
    """Export a state critic to one self-contained ``.onnx`` file; returns its path.

    Args:
        critic_or_checkpoint_path: a :class:`StateCriticNet`, a :class:`TorchStateCritic`, or the path
            of a checkpoint written by :func:`~prm_critic.models.save_state_critic`.
        out_path: the ``.onnx`` file to write (parent folders are created).
        batch: ``"dynamic"`` (input ``(B, D)``, any ``B``) or ``1`` (fixed ``(1, D)``, control loops).
        opset: ONNX opset of the default domain (pinned to 18 by default).
        task: task spec name stored in the metadata (default: the checkpoint's ``meta["task"]``).
        layout: a :class:`~prm_critic.robotics.CriticInputLayout` or its dict (default: the
            checkpoint's ``meta["layout"]``); its size must equal ``obs_dim``.
        extra_meta: JSON-serialisable values stored under the ``extra`` metadata key.
        parity_inputs: optional real critic inputs ``(N, obs_dim)`` added to the parity check.
        ir_version: the file's ONNX IR version. ``None``: the exporter's (10 with torch's dynamo
            exporter, which onnxruntime < 1.18 refuses); ``9`` makes a file that onnxruntime 1.16 and
            1.17 load (IR 9 cannot carry per-node metadata, so the exporter's name scopes are
            dropped). At least what ``opset`` needs (8 for opset 17 and 18). Recorded in the
            metadata (``ir_version``).

    Returns:
        The written path.

    Raises:
        OnnxExportError: bad arguments, checker failure, or a parity failure (no file is left behind).
    """
    batch, out = _check_args(batch, opset, out_path, extra_meta, ir_version)

    net, meta = _resolve_net(critic_or_checkpoint_path)
    net = on_cpu(net)
    lay = _layout_dict(layout, meta, net.obs_dim)
    task_name = _task_name(task, meta)
    realistic = None
    if parity_inputs is not None:
        from prm_critic.critic import as_obs_batch

        realistic = as_obs_batch(parity_inputs, net.obs_dim, name="parity_inputs")

    proto, exporter = _export_proto(net, batch, opset)

    spec = meta.get("spec") if isinstance(meta.get("spec"), Mapping) else None
    table = _spec_table(meta)
    env_id = table.get("env_id") if table is not None and isinstance(table.get("env_id"), str) else None
    label_family = next((meta[k] for k in ("label_family", "label", "family") if isinstance(meta.get(k), str)), "unknown")
    props = {
        "prm_critic.format": FORMAT,
        "format_version": str(FORMAT_VERSION),
        "prm_critic.version": __version__,
        "task": task_name or "",
        "env_id": env_id or "",
        "layout": _jsonable(lay, "layout"),
        "obs_dim": str(net.obs_dim),
        "batch": str(batch),
        "input_name": INPUT_NAME,
        "output_name": OUTPUT_NAME,
        "heads": _jsonable(list(HEADS), "heads"),
        "label_family": label_family,
        "label_semantics": LABEL_SEMANTICS,
        "normalization": _jsonable(_normalization_summary(net), "normalization"),
        "net": _jsonable(net.config(), "net"),
        "opset": str(opset),
        "exporter": exporter,
        "extra": _jsonable(dict(extra_meta or {}), "extra_meta"),
    }
    if spec is not None:
        props["spec"] = _jsonable(dict(spec), "meta['spec']")
    data = _finalize(proto, props, opset, ir_version)
    parity_check(data, net, _parity_inputs(net, realistic), batch=batch)
    return _write(out, data)


def strip_stack_traces(proto) -> int:
    """Remove the exporter's per-node Python stack traces (they hold the exporting machine's file
    paths); returns how many were removed. Other node metadata (name scopes) is kept."""
    removed = 0
    for node in proto.graph.node:
        keep = [p for p in node.metadata_props if p.key != "pkg.torch.onnx.stack_trace"]
        if len(keep) != len(node.metadata_props):
            removed += len(node.metadata_props) - len(keep)
            del node.metadata_props[:]
            node.metadata_props.extend(keep)
    return removed


#: the first IR version with ``metadata_props`` on graphs, nodes, functions, value infos and tensors
#: and with function ``overload`` (onnx 1.16; onnxruntime 1.18)
_IR_NODE_METADATA = 10


def set_ir_version(proto, ir_version: int) -> int:
    """Write ``ir_version`` into ``proto``; below IR 10, first remove what only IR 10 can carry (the
    ``metadata_props`` of everything but the model, e.g. the exporter's name scopes). Returns how
    many metadata entries were removed. A function ``overload`` (IR 10 only) is an error."""
    removed = 0
    if ir_version < _IR_NODE_METADATA:
        stack = [(f"function {f.name}", f) for f in proto.functions] + [("graph", proto.graph)]
        while stack:
            where, msg = stack.pop()
            for field, value in msg.ListFields():
                if field.name == "metadata_props":
                    removed += len(value)
                    msg.ClearField("metadata_props")
                elif field.name == "overload" and value:
                    raise OnnxExportError(f"ir_version: {where} uses a function overload ({value!r}), which needs "
                                          f"IR version >= {_IR_NODE_METADATA}; got {ir_version}")
                elif field.type == field.TYPE_MESSAGE:
                    items = [value] if hasattr(value, "ListFields") else list(value)  # one message or repeated
                    stack.extend((f"{where}.{field.name}", v) for v in items)
    proto.ir_version = ir_version
    return removed


def _finalize(proto, props: Mapping[str, str], opset: int, ir_version: int | None = None) -> bytes:
    """Check single-file + opset, strip stack traces, set the IR version (``None``: the exporter's)
    and the metadata, run the checker; the serialized model, sealed with its content hash (metadata
    ``prm_critic.sha256``, checked by every load)."""
    onnx = require("onnx")
    from onnx.external_data_helper import uses_external_data

    strip_stack_traces(proto)

    ext = [t.name for t in proto.graph.initializer if uses_external_data(t)]
    if ext:
        raise OnnxExportError(f"export: initializers {ext} use external data; expected one self-contained file")
    opsets = {o.domain: o.version for o in proto.opset_import}
    if opsets.get("", opsets.get("ai.onnx")) != opset:
        raise OnnxExportError(f"export: the graph has opset {opsets}, expected default-domain opset {opset}")
    if ir_version is not None:
        need = int(onnx.helper.find_min_ir_version_for(list(proto.opset_import), ignore_unknown=True))
        if ir_version < need:
            raise OnnxExportError(f"ir_version: the exported graph imports opsets {opsets}, which need IR version "
                                  f">= {need}; got {ir_version}")
        dropped = set_ir_version(proto, ir_version)
        log.info("set the IR version to %d (%d node/graph metadata entries dropped)", ir_version, dropped)
    onnx.helper.set_model_props(proto, {**props, "ir_version": str(proto.ir_version), HASH_KEY: "0" * 64})
    proto.producer_name = "prm-critic"
    proto.producer_version = __version__
    log.info("running onnx.checker on the graph (%d nodes, %d initializers) and sealing its content hash",
             len(proto.graph.node), len(proto.graph.initializer))
    try:
        onnx.checker.check_model(proto, full_check=True)
    except onnx.checker.ValidationError as exc:
        raise OnnxExportError(f"export: onnx.checker rejected the exported graph: {exc}") from exc
    return seal(proto.SerializeToString())


def _write(out: Path, data: bytes) -> Path:
    log.info("writing %s", out)
    atomic_write_bytes(out, data)
    sidecar = [p.name for p in out.parent.glob(out.name + ".data")]
    if sidecar:  # pragma: no cover - guarded above; kept as a last line of defence
        raise OnnxExportError(f"export: unexpected external data file(s) {sidecar} next to {str(out)!r}")
    from prm_critic.onnx._meta import scan_onnx

    log.info("wrote %s: %d bytes, sha256 %s", out, len(data), scan_onnx(data).props.get(HASH_KEY, "?"))
    return out


def _subgoal_module(critic):
    """Torch twin of ``SubgoalCritic.score`` for ``distance`` subgoals: the subgoal rule of
    :mod:`prm_critic.robotics.subgoals` (the one the numpy and one-row paths run) on torch
    operations (:class:`_TorchOps`), in float64 like numpy::

        t_k      = b_k(obs)  (or its approach point b_k + offset_k * unit(b_k - behind_k(obs)))
        d_k      = ||a_k(obs) - t_k||,  holds_k = d_k < threshold_k
        (a_k, b_k, behind_k: the spec's affine expressions, the same operations as the numpy critic)
        m        = max_k (k + 1) * holds_k                       (0 if none holds)
        inside   = sum_k [m == k] * clip(1 - d_k / scale_k, 0, 1)
        progress = clip((m + inside) / n, 0, 1)
        (spec progress "mean": progress = mean_k (1 if holds_k else clip(1 - d_k / scale_k, 0, 1)))
        success  = 1 if all subgoals hold else progress
    """
    import torch

    ev = critic.evaluator
    subgoals = list(critic.spec.subgoals)
    bad = [s.name for s in subgoals if s.kind != "distance"]
    if bad:
        raise OnnxExportError(
            f"critic: subgoals {bad} of spec {critic.spec.name!r} are of kind "
            f"{sorted({s.kind for s in subgoals if s.kind != 'distance'})}; ONNX export supports 'distance' subgoals "
            "only (maze_path needs the maze's shortest-path table) - export a trained StateCriticNet instead"
        )
    if not subgoals:
        raise OnnxExportError(f"critic: spec {critic.spec.name!r} has no subgoals; nothing to export")
    from prm_critic.robotics.subgoals import _rule_distances, _rule_holds, _rule_progress, _rule_success, map_consts

    as_tensor = lambda v: torch.tensor(v, dtype=torch.float64)  # noqa: E731
    nodes = {id(n): map_consts(n, as_tensor) for trio in ev.exprs for n in trio if n is not None}

    class SubgoalProgress(torch.nn.Module):
        def forward(self, obs):
            ops = _TorchOps(obs.to(torch.float64), nodes)
            d = _rule_distances(ev, ops)
            h = _rule_holds(ev, ops, d)
            progress = _rule_progress(ev, ops, h, d)
            return torch.stack([progress, _rule_success(ops, h, progress)], dim=1).to(torch.float32)

    return SubgoalProgress().eval()


class _TorchOps(_ArrayOps):
    """The subgoal rule's operations (``prm_critic.robotics.subgoals._rule_progress`` ...) in torch, for
    export: a point is ``(B, width)``, a number ``(B,)``, float64; a subgoal state is 0/1 in float64 and
    a choice is arithmetic on it (``cond + (1 - cond) * other``), so the graph has no data-dependent
    branches. ``nodes``: the evaluator's resolved expression nodes by ``id``, constants as tensors."""

    def __init__(self, x, nodes: dict[int, tuple]):
        import torch

        self.torch, self.x, self.nodes = torch, x, nodes

    def expr(self, node: tuple, width: int):
        return eval_expr(self.nodes[id(node)], self.x)

    def norm(self, v):
        return self.torch.sqrt((v ** 2).sum(dim=1))

    def unit(self, v, n):
        torch = self.torch
        n = n[:, None]
        return torch.where(n > 0, v / torch.where(n > 0, n, torch.ones_like(n)), torch.zeros_like(v))

    def less(self, d, threshold: float):
        return (d < threshold).to(self.torch.float64)

    def closeness(self, dist, scale: float):
        return self.torch.clamp(1.0 - dist / scale, 0.0, 1.0)

    def geodesic(self, a, b):  # pragma: no cover - _subgoal_module refuses maze_path subgoals first
        raise OnnxExportError("critic: maze_path subgoals cannot be exported")

    def where(self, cond, then: float, other):
        return cond * then + (1.0 - cond) * other()

    def all(self, h: list):
        return self.torch.stack(h, dim=1).amin(dim=1)

    def stage(self, h: list):
        rank = self.torch.arange(1, len(h) + 1, dtype=self.torch.float64)
        return (self.torch.stack(h, dim=1) * rank).amax(dim=1)

    def select(self, m, values: list):
        return sum(((m == float(k)).to(self.torch.float64) * value() for k, value in enumerate(values)),
                   self.torch.zeros_like(m))

    def ladder(self, m, inside, n: int):
        return self.torch.clamp((m + inside) / float(n), 0.0, 1.0)

    def mean(self, values: list):
        return self.torch.stack(values, dim=1).mean(dim=1)


def _subgoal_parity_inputs(critic, realistic: np.ndarray | None, seed: int = 0) -> dict[str, np.ndarray]:
    """Random inputs plus inputs where each subgoal straddles its threshold (so every stage is hit)."""
    rng = np.random.default_rng(seed)
    d = critic.obs_dim
    base = rng.uniform(-1.0, 1.0, (256, d))
    near = base.copy()
    ev = critic.evaluator
    for k, s in enumerate(critic.spec.subgoals):
        direction = rng.standard_normal((len(near), ev.widths[k]))
        direction /= np.linalg.norm(direction, axis=1, keepdims=True)
        dist = rng.uniform(0.0, 2.5 * max(s.threshold, s.scale), (len(near), 1))
        keep = rng.random(len(near)) < 0.7  # some rows keep their random (far) pair
        # place a within `dist` of the subgoal's target point (b, or the approach point b*)
        try:
            near[keep] = ev.place(near[keep], k, ev.target(near, k)[keep] + (direction * dist)[keep])
        except ValueError:  # an `a` that cannot be solved for an observation slice: random rows only
            pass
    sets = {"random_uniform": base, "subgoal_boundaries": near}
    if realistic is not None:
        sets["realistic_given"] = realistic
    return {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in sets.items()}


def export_subgoal_critic(
    critic: Any,
    out_path: "str | os.PathLike",
    *,
    batch: "int | str" = "dynamic",
    opset: int = DEFAULT_OPSET,
    extra_meta: Mapping[str, Any] | None = None,
    parity_inputs: np.ndarray | None = None,
    ir_version: int | None = None,
) -> Path:
    """Export a :class:`~prm_critic.robotics.subgoals.SubgoalCritic` (the no-training spec critic).

    Same interface and metadata as :func:`export_state_critic` (``obs`` ``(B, D)`` -> ``scores``
    ``(B, 2)``; task, layout and spec stored), so :class:`OnnxCritic` runs it. Computed in float64
    inside the graph, like the numpy critic; parity is checked against ``critic.score`` on random
    inputs, inputs straddling every subgoal threshold, and ``parity_inputs``. ``ir_version`` as in
    :func:`export_state_critic`.

    Raises:
        OnnxExportError: a spec with non-``distance`` subgoals (``maze_path``), bad arguments, or a
            parity failure.
    """
    from prm_critic.robotics.subgoals import SubgoalCritic

    if not isinstance(critic, SubgoalCritic):
        raise TypeError(f"critic: expected a SubgoalCritic, got {type(critic).__name__}")
    batch, out = _check_args(batch, opset, out_path, extra_meta, ir_version)
    module = _subgoal_module(critic)
    realistic = None
    if parity_inputs is not None:
        from prm_critic.critic import as_obs_batch

        realistic = as_obs_batch(parity_inputs, critic.obs_dim, name="parity_inputs")
    proto, exporter = _export_proto(module, batch, opset, obs_dim=critic.obs_dim)
    spec = critic.spec
    props = {
        "prm_critic.format": FORMAT,
        "format_version": str(FORMAT_VERSION),
        "prm_critic.version": __version__,
        "task": spec.name,
        "env_id": spec.env_id,
        "layout": _jsonable(critic.layout.to_dict(), "layout"),
        "obs_dim": str(critic.obs_dim),
        "batch": str(batch),
        "input_name": INPUT_NAME,
        "output_name": OUTPUT_NAME,
        "heads": _jsonable(list(HEADS), "heads"),
        "label_family": "subgoal",
        "label_semantics": LABEL_SEMANTICS + " (spec subgoal progress; success = 1 when all subgoals hold, "
                           "else progress)",
        "normalization": _jsonable({"inside_graph": False, "identity": True, "formula": "none: spec distances"},
                                   "normalization"),
        "net": _jsonable({"kind": "subgoal", "subgoals": [s.name for s in spec.subgoals], "dtype": "float64"}, "net"),
        "opset": str(opset),
        "exporter": exporter,
        "extra": _jsonable(dict(extra_meta or {}), "extra_meta"),
        "spec": _jsonable(spec.to_dict(), "spec"),
    }
    data = _finalize(proto, props, opset, ir_version)

    def reference(x):
        sc = critic.score(x)
        return np.stack([sc.progress, sc.success], axis=1)

    parity_check(data, reference, _subgoal_parity_inputs(critic, realistic), batch=batch, rtol=1e-6, atol=1e-6)
    return _write(out, data)


def read_onnx_metadata(path: "str | os.PathLike") -> dict[str, Any]:
    """Metadata of an exported critic, JSON values decoded (``layout``, ``heads``, ...).

    Raises:
        FileNotFoundError: ``path`` does not exist.
        OnnxExportError: ``path`` is not a readable ONNX file.
    """
    onnx = require("onnx")
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"path: {str(p)!r} does not exist (expected an exported .onnx critic)")
    try:
        model = onnx.load(str(p), load_external_data=False)
    except Exception as exc:  # protobuf DecodeError and friends
        raise OnnxExportError(f"path: {str(p)!r} is corrupt or not an ONNX model ({type(exc).__name__}: {exc})") from exc
    return decode_metadata({m.key: m.value for m in model.metadata_props})
