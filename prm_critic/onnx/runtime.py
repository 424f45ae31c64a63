"""Run an exported critic with onnxruntime: :class:`OnnxCritic`, a :class:`~prm_critic.critic.BaseCritic`.

``OnnxCritic(path).score(x)`` with ``x`` float32 ``(B, obs_dim)`` returns :class:`StepScores` with
``progress`` and ``success`` of shape ``(B,)``; ``score_one(x)`` with ``x`` ``(obs_dim,)`` returns
``(progress, success)`` as two floats, the control-loop fast path, and ``score_rows(x)`` the
``(B, 2)`` float32 scores of a batch (the vector wrappers' path).

Latency settings (CPU): one intra-op and one inter-op thread, sequential execution, all graph
optimisations, and IOBinding to preallocated numpy buffers (no per-call allocation of inputs or
outputs). ``allow_spinning=False`` stops the worker from busy-waiting, which is kinder to cores
shared with other processes (at some cost in latency).

Providers: ``"cpu"``, ``"cuda"``, ``"tensorrt"`` or ``"auto"`` (CUDA when onnxruntime offers it,
else CPU; TensorRT only when asked for, because it builds an engine at load time). The provider
actually running the graph is ``.provider``. onnxruntime falls back to CPU when a GPU provider
cannot load; prm-critic then warns with onnxruntime's reason (usually missing CUDA / cuDNN
libraries), and ``strict=True`` turns that into an error: the strict chain is the GPU provider(s)
alone with ``session.disable_cpu_ep_fallback``, and the error says whether the provider failed to
load (and why) or loaded but cannot run every node. A tiny MLP is launch-bound on a GPU: for
batch-1 control loops the CPU provider is usually the fastest.

Before any session is built the file's bytes are checked: a well-formed model, no tensor in
external data files, the prm-critic format, and the content hash written at export (metadata
``prm_critic.sha256``); the session is then built from those same bytes.

An instance is not meant to be shared between threads that call it at the same time (the batch-1
buffers are shared); calls are serialised with a lock.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import sys
import tempfile
import threading
import warnings
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np
import numpy.typing as npt

from prm_critic import validate
from prm_critic._optional import install_hint, require
from prm_critic.critic import CriticInfo, StateCritic, StepScores, as_obs_batch, check_row
from prm_critic.onnx._meta import FORMAT, INPUT_NAME, OUTPUT_NAME, check_model_bytes, decode_metadata

__all__ = ["OnnxCritic", "OnnxModelError", "installed_runtimes", "PROVIDERS"]

#: user-facing provider names -> onnxruntime execution providers
PROVIDERS = {
    "cpu": "CPUExecutionProvider",
    "cuda": "CUDAExecutionProvider",
    "tensorrt": "TensorrtExecutionProvider",
}
_GPU = ("CUDAExecutionProvider", "TensorrtExecutionProvider")
_CORRUPT_ERRORS = ("InvalidProtobuf", "InvalidGraph", "NoModel", "ModelLoaded")
_WARNED_DISTS = False
_MAX_CACHED_BATCHES = 8


class OnnxModelError(ValueError):
    """An ONNX critic file is corrupt, is not a prm-critic critic, or does not fit the env/provider."""


def installed_runtimes() -> list[str]:
    """The onnxruntime distributions installed (``onnxruntime``, ``onnxruntime-gpu``, ...)."""
    from importlib import metadata

    found = []
    for dist in ("onnxruntime", "onnxruntime-gpu"):
        try:
            metadata.distribution(dist)
        except metadata.PackageNotFoundError:
            continue
        found.append(dist)
    return found


def _warn_double_install() -> None:
    global _WARNED_DISTS
    if _WARNED_DISTS:
        return
    _WARNED_DISTS = True
    dists = installed_runtimes()
    if "onnxruntime" in dists and "onnxruntime-gpu" in dists:
        warnings.warn(
            "both 'onnxruntime' and 'onnxruntime-gpu' are installed; they share the 'onnxruntime' module and "
            "whichever was installed last wins, which may hide the CUDA provider. Keep one: "
            f"pip uninstall -y onnxruntime onnxruntime-gpu && {install_hint('gpu')}",
            RuntimeWarning,
            stacklevel=3,
        )


class _NativeLog:
    """Capture onnxruntime's native log (written to file descriptor 2) and Python warnings while a
    GPU session is built, so that a provider that fails to load can be reported with its reason."""

    _ANSI = re.compile(r"\x1b\[[0-9;]*m")
    _PREFIX = re.compile(r"^\S+ \S+ \[([A-Z]):onnxruntime:[^\]]*\]\s*")  # "<date> <time> [W:onnxruntime:..., file:line fn]"

    def __init__(self) -> None:
        self.text = ""
        self.warned: list[warnings.WarningMessage] = []
        self._extra: list[str] = []

    def __enter__(self) -> "_NativeLog":
        self._warn_ctx = warnings.catch_warnings(record=True)
        self.warned = self._warn_ctx.__enter__()
        warnings.simplefilter("always")
        self._tmp = None
        try:
            sys.stderr.flush()
            self._saved = os.dup(2)
            self._tmp = tempfile.TemporaryFile()
            os.dup2(self._tmp.fileno(), 2)
        except OSError:  # pragma: no cover - no file descriptor 2
            self._tmp = None
        return self

    def __exit__(self, *exc) -> None:
        if self._tmp is not None:
            os.dup2(self._saved, 2)
            os.close(self._saved)
            self._tmp.seek(0)
            self.text = self._ANSI.sub("", self._tmp.read().decode("utf-8", "replace"))
            self._tmp.close()
        self._warn_ctx.__exit__(*exc)

    def extra(self, line: str) -> None:
        self._extra.append(line)

    def parts(self) -> list[str]:
        """The captured log lines (without timestamps) and warnings."""
        parts = [self._PREFIX.sub(r"[\1] ", " ".join(ln.split())) for ln in self.text.splitlines() if ln.strip()]
        return parts + [f"{w.category.__name__}: {w.message}" for w in self.warned] + self._extra

    def cause(self, limit: int = 1500, *more: "_NativeLog") -> str:
        """The captured lines and warnings (with those of ``more``), deduplicated, one line, at most
        ``limit`` characters."""
        parts = self.parts() + [p for log in more for p in log.parts()]
        out = " | ".join(dict.fromkeys(parts)) or "no details"
        return out if len(out) <= limit else "..." + out[-limit:]

    def replay(self) -> None:
        """Pass what was captured on to the real stderr and warnings (the session was built)."""
        if self.text:
            sys.stderr.write(self.text)
        for w in self.warned:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)


def _is_int(v: Any, lo: int) -> bool:
    return not isinstance(v, bool) and isinstance(v, (int, np.integer)) and int(v) >= lo


def _check_init_args(provider, *, strict, intra_op_threads, inter_op_threads, allow_spinning, io_binding, cuda_graph,
                     device_id, allow_unverified) -> None:
    """Check :class:`OnnxCritic`'s settings (before the file is touched)."""
    if provider not in ("auto", *PROVIDERS):
        raise ValueError(f"provider: expected one of 'auto', 'cpu', 'cuda', 'tensorrt', got {provider!r}")
    for name, val in (("strict", strict), ("allow_spinning", allow_spinning), ("io_binding", io_binding),
                      ("cuda_graph", cuda_graph), ("allow_unverified", allow_unverified)):
        validate.check_flag(name, val)
    for name, num in (("intra_op_threads", intra_op_threads), ("inter_op_threads", inter_op_threads)):
        if not _is_int(num, 0):
            raise ValueError(f"{name}: expected an int >= 0 (0 = onnxruntime default), got {num!r}")
    if not _is_int(device_id, 0):
        raise ValueError(f"device_id: expected an int >= 0, got {device_id!r}")
    if cuda_graph and provider not in ("cuda", "auto"):
        raise ValueError(f"cuda_graph: needs provider='cuda' (or 'auto' on a CUDA machine), got provider={provider!r}")
    if cuda_graph and not io_binding:
        raise ValueError("cuda_graph: needs io_binding=True (CUDA graphs replay fixed device buffers), got io_binding=False")


def _session_options(ort, intra_op_threads: int, inter_op_threads: int, allow_spinning: bool, *, strict_gpu: bool):
    """The latency session options (threads, sequential execution, all graph optimisations)."""
    so = ort.SessionOptions()
    so.intra_op_num_threads = int(intra_op_threads)
    so.inter_op_num_threads = int(inter_op_threads)
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.add_session_config_entry("session.intra_op.allow_spinning", "1" if allow_spinning else "0")
    so.add_session_config_entry("session.inter_op.allow_spinning", "1" if allow_spinning else "0")
    if strict_gpu:
        # the CPU EP is not in a strict chain (onnxruntime rejects an explicit CPU EP together with
        # this option as a conflicting configuration)
        so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    return so


def _existing_file(path: "str | os.PathLike") -> Path:
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"path: {str(p)!r} does not exist (expected an exported .onnx critic)")
    return p


class _ExportedCritic(StateCritic):
    """What every runner of an exported critic file shares: the file's checks before it is run, its
    decoded metadata, the graph's signature against it, and the env checks. :class:`OnnxCritic`
    (onnxruntime) and :class:`~prm_critic.onnx.fast.NumpyMLPCritic` (numpy) derive from it; it runs
    nothing itself."""

    path: Path
    meta: dict[str, Any]
    batch: "int | str"
    task: "str | None"

    def _read_checked(self, allow_unverified: bool) -> tuple[bytes, dict[str, str]]:
        """The file's bytes and raw metadata, checked (well-formed, self-contained, the prm-critic
        format, the content hash) before anything runs them; called from the subclass's ``__init__``
        helper, so that an ``allow_unverified`` warning points at the code that built the critic."""
        data = self.path.read_bytes()
        raw = check_model_bytes(data, str(self.path), fmt=FORMAT, error=OnnxModelError,
                                allow_unverified=allow_unverified, stacklevel=5)
        return data, raw

    def _decode_meta(self, raw: Mapping[str, str]) -> None:
        """Decode the metadata: ``meta``, ``obs_dim``, ``batch``, ``task`` and the input/output names."""
        try:
            self.meta = decode_metadata(raw)
        except ValueError as exc:
            raise OnnxModelError(f"path: {str(self.path)!r} has corrupt metadata: {exc}") from exc
        self.obs_dim = int(self.meta["obs_dim"])
        self.batch = self.meta.get("batch", "dynamic")
        self.task = self.meta.get("task")
        self._in_name = self.meta.get("input_name", INPUT_NAME)
        self._out_name = self.meta.get("output_name", OUTPUT_NAME)

    def _check_io(self, in_names: list[str], out_names: list[str], in_shape: Any) -> None:
        """The graph has one input and one output, named as the metadata says, the input ``(B, obs_dim)``."""
        if in_names != [self._in_name] or out_names != [self._out_name]:
            raise OnnxModelError(
                f"path: {str(self.path)!r} has inputs {in_names} and outputs {out_names}; "
                f"expected one input {self._in_name!r} and one output {self._out_name!r}"
            )
        shape = list(in_shape)
        if len(shape) != 2 or shape[1] != self.obs_dim:
            raise OnnxModelError(
                f"path: {str(self.path)!r} input {self._in_name!r} has shape {shape}, but its metadata says "
                f"obs_dim={self.obs_dim}; expected (B, {self.obs_dim})"
            )

    @property
    def layout(self):
        """The :class:`~prm_critic.robotics.CriticInputLayout` stored at export (``None`` if none)."""
        lay = self.meta.get("layout")
        if lay is None:
            return None
        from prm_critic.robotics.layout import CriticInputLayout

        return CriticInputLayout.from_dict(lay)

    @property
    def spec(self):
        """The task spec (:class:`~prm_critic.robotics.TaskSpec`) stored at export, or ``None``."""
        if "_spec" not in self.__dict__:
            doc = self.meta.get("spec")
            spec = None
            if isinstance(doc, Mapping):
                from prm_critic.robotics.spec import load_spec

                spec = load_spec(dict(doc))
            self.__dict__["_spec"] = spec
        return self.__dict__["_spec"]

    def critic_info(self) -> CriticInfo:
        """The task, env id, layout, spec and label family stored at export."""
        return CriticInfo.from_meta(self.meta, layout=self.layout, spec=self.spec)

    def check_env(self, env: Any) -> None:
        """Check that ``env`` is the task this critic was exported for and that its observations fit.

        Raises:
            OnnxModelError: another task (by env id), a missing observation key, or a size mismatch.
        """
        spec = getattr(env, "spec", None)
        env_id = getattr(spec, "id", None)
        expected = self.meta.get("env_id") or self.task
        if expected and env_id and env_id != expected:
            raise OnnxModelError(
                f"env: the critic {str(self.path)!r} was exported for task {self.task!r} (env id {expected!r}), "
                f"but the env is {env_id!r}"
            )
        space = getattr(env, "observation_space", None)
        if space is None:
            raise OnnxModelError(f"env: expected a gymnasium env with an observation_space, got {type(env).__name__}")
        lay = self.meta.get("layout")
        spaces = getattr(space, "spaces", None)
        if isinstance(spaces, Mapping):
            if lay is None:
                raise OnnxModelError(
                    f"env: the observation space is a Dict {sorted(spaces)}, but the critic {str(self.path)!r} was "
                    "exported without a layout; re-export it with layout=CriticInputLayout.from_space(spec, space)"
                )
            for k in lay["keys"]:
                if k not in spaces:
                    raise OnnxModelError(
                        f"env: observation key {k!r} expected by the critic is missing; env keys {sorted(spaces)}"
                    )
                key_size = int(np.prod(spaces[k].shape))
                if key_size != int(lay["sizes"][k]):
                    raise OnnxModelError(
                        f"env: observation {k!r} has size {key_size}, but the critic {str(self.path)!r} expects "
                        f"{lay['sizes'][k]} (layout {lay['sizes']}, obs_dim {self.obs_dim})"
                    )
            return
        shape = getattr(space, "shape", None)
        size = int(np.prod(shape)) if shape is not None else None
        if size != self.obs_dim:
            raise OnnxModelError(
                f"env: observation size {size} (shape {shape}) does not match the critic's obs_dim {self.obs_dim} "
                f"({str(self.path)!r})"
            )

    # ------------------------------------------------------------------ scoring shared by the runners
    def score_rows(self, x: Any, *, check: bool = True) -> np.ndarray:
        """Score a batch ``x`` of shape ``(B, obs_dim)``; returns a fresh float32 array ``(B, 2)`` whose
        columns are ``progress`` and ``success`` (the same values as :meth:`score`).

        The batch twin of :meth:`score_one` for the vector wrappers: ``check=False`` skips the shape,
        dtype and finiteness checks for a caller that has already validated ``x`` (a float32 ``(B,
        obs_dim)`` array); a non-finite ``x`` then gives non-finite scores instead of an error.
        """
        if check:
            x = as_obs_batch(x, self.obs_dim, name="x", flatten=self._flatten_obs)
        return self._score_rows(x)

    def _score_rows(self, x: np.ndarray) -> np.ndarray:
        """Scores ``(B, 2)`` of a validated float32 batch: the runner's own."""
        raise NotImplementedError

    @staticmethod
    def _non_finite(row: np.ndarray, x: Any) -> ValueError:
        """The error of ``score_one`` for an input ``x`` whose float32 copy ``row`` is not finite."""
        bad = int(np.argwhere(~np.isfinite(row))[0][0])
        return ValueError(f"x: expected finite values, got {x[bad]} at index {bad}")


class OnnxCritic(_ExportedCritic):
    """A critic exported by :func:`~prm_critic.onnx.export_state_critic`, run by onnxruntime.

    Args:
        path: the ``.onnx`` file.
        provider: ``"auto"``, ``"cpu"``, ``"cuda"`` or ``"tensorrt"``.
        strict: when a GPU provider is requested and cannot run the whole graph, raise instead of
            falling back to CPU.
        intra_op_threads: onnxruntime intra-op threads (``0`` = onnxruntime's default, all cores).
        inter_op_threads: onnxruntime inter-op threads (``0`` = default).
        allow_spinning: let idle worker threads spin (lower latency; set ``False`` on shared cores).
        io_binding: bind inputs/outputs to preallocated buffers (batch 1 and repeated batch sizes).
        env: if given, :meth:`check_env` is run on it at load time.
        cuda_graph: CUDA provider only: capture the graph once and replay it (``enable_cuda_graph``);
            needs a batch-1 model and ``io_binding=True``.
        device_id: GPU index for the CUDA / TensorRT providers.
        allow_unverified: accept a file without a content hash (exported by an older prm-critic), or
            a well-formed file whose hash does not match (e.g. re-saved by onnxsim or onnxslim), with a
            ``RuntimeWarning`` naming both hashes; :func:`~prm_critic.onnx.seal_onnx` (``prm-critic
            export --reseal FILE``) re-seals such a file on purpose.

    Attributes:
        provider: the execution provider that runs the graph (``get_providers()[0]``).
        meta: the decoded metadata (task, layout, obs_dim, batch, heads, label family, ...).
        obs_dim: width ``D`` of one critic input.
        batch: ``1`` (fixed batch-1 graph) or ``"dynamic"``.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        OnnxModelError: the file is corrupt or was modified after export (content hash; unless
            ``allow_unverified``), keeps
            tensors in external data files, has no content hash (unless ``allow_unverified``), or is
            not a prm-critic critic (all checked before a session is built); a strict GPU request
            not met (the message carries onnxruntime's reason); ``env`` does not match the critic.
    """

    def __init__(
        self,
        path: "str | os.PathLike",
        *,
        provider: str = "auto",
        strict: bool = False,
        intra_op_threads: int = 1,
        inter_op_threads: int = 1,
        allow_spinning: bool = True,
        io_binding: bool = True,
        env: Any = None,
        cuda_graph: bool = False,
        device_id: int = 0,
        allow_unverified: bool = False,
    ):
        _check_init_args(provider, strict=strict, intra_op_threads=intra_op_threads, inter_op_threads=inter_op_threads,
                         allow_spinning=allow_spinning, io_binding=io_binding, cuda_graph=cuda_graph,
                         device_id=device_id, allow_unverified=allow_unverified)
        self.path = _existing_file(path)
        _warn_double_install()
        ort = require("onnxruntime")
        self._ort = ort

        providers, requested = self._provider_chain(ort, provider, strict, cuda_graph, int(device_id))
        so = _session_options(ort, intra_op_threads, inter_op_threads, allow_spinning,
                              strict_gpu=strict and requested in _GPU)
        raw = self._open_session(so, providers, provider, requested, strict, allow_unverified)
        self._read_meta(raw, cuda_graph)
        self._init_buffers(io_binding, cuda_graph, int(device_id))
        if env is not None:
            self.check_env(env)

    # ------------------------------------------------------------------ setup
    def _open_session(self, so, providers: list, provider: str, requested: str, strict: bool,
                      allow_unverified: bool) -> dict[str, str]:
        """Check the file's bytes, build the session, and refuse/warn on a GPU fallback; returns the raw metadata."""
        ort, p = self._ort, self.path
        # format, single file and content hash are checked on the bytes, before any session is built
        data, raw = self._read_checked(allow_unverified)
        log = _NativeLog() if requested in _GPU else None
        try:
            with log if log is not None else contextlib.nullcontext():
                self.session = ort.InferenceSession(data, so, providers=providers)
        except Exception as exc:
            kind = type(exc).__name__
            if kind in _CORRUPT_ERRORS or "Protobuf parsing failed" in str(exc) or "INVALID_PROTOBUF" in str(exc):
                raise OnnxModelError(f"path: {str(p)!r} is corrupt or not an ONNX model ({kind}: {exc})") from exc
            if requested in _GPU:
                raise self._gpu_error(provider, requested, data, providers, exc, log) from exc
            raise OnnxModelError(f"path: onnxruntime could not load {str(p)!r} ({kind}: {exc})") from exc
        if log is not None:
            log.replay()
        self.providers = list(self.session.get_providers())
        self.provider = self.providers[0]
        if requested in _GPU and self.provider != requested:
            msg = (f"provider={provider!r}: {requested} failed to load, the session runs on {self.provider} "
                   f"(session providers {self.providers}); onnxruntime reported: {log.cause() if log is not None else 'nothing'}")
            if strict:
                raise OnnxModelError(msg + " (strict=True: not falling back to CPU)")
            # stacklevel 3: the warning points at the code that built the OnnxCritic
            warnings.warn(msg + "; falling back to CPUExecutionProvider", RuntimeWarning, stacklevel=3)
        return raw

    def _read_meta(self, raw: dict[str, str], cuda_graph: bool) -> None:
        """Decode the metadata and check the graph's signature against it."""
        self._decode_meta(raw)
        self._check_signature()
        if cuda_graph and self.batch != 1:
            raise ValueError(f"cuda_graph: needs a batch-1 export (static shapes), got a model with batch={self.batch!r}")

    def _init_buffers(self, io_binding: bool, cuda_graph: bool, device_id: int) -> None:
        """Preallocate the batch-1 buffers and, with ``io_binding``, bind them."""
        self.io_binding = io_binding
        self._cuda_graph = bool(cuda_graph and self.provider == "CUDAExecutionProvider")
        self._lock = threading.Lock()
        self._one_shape = (1, self.obs_dim)
        self._in1 = np.zeros((1, self.obs_dim), np.float32)
        self._out1 = np.zeros((1, 2), np.float32)
        self._bindings: dict[int, tuple[Callable[[], Any], np.ndarray, np.ndarray]] = {}
        self._row, self._out_row = self._in1[0], self._out1[0]
        self._probe = np.full(self.obs_dim, 1e-30, np.float32)
        self._io1 = None
        self._fast_run: Callable[[], None] | None = None
        if io_binding:
            self._io1 = self._make_binding_one(device_id)
            if not self._cuda_graph:
                self._fast_run = self._bound_runner(self._io1, self._in1)
    @staticmethod
    def _provider_chain(ort, provider: str, strict: bool, cuda_graph: bool, device_id: int):
        available = list(ort.get_available_providers())
        if provider == "auto":
            requested = "CUDAExecutionProvider" if "CUDAExecutionProvider" in available else "CPUExecutionProvider"
        else:
            requested = PROVIDERS[provider]
        if requested in _GPU and hasattr(ort, "preload_dlls"):
            try:  # loads the CUDA/cuDNN libraries shipped as pip packages (onnxruntime-gpu[cuda,cudnn])
                ort.preload_dlls()
            except Exception as exc:  # pragma: no cover - depends on the GPU stack
                warnings.warn(f"onnxruntime.preload_dlls() failed: {exc}", RuntimeWarning, stacklevel=3)
        if requested not in available:
            msg = (
                f"provider={provider!r}: {requested} is not available in this onnxruntime "
                f"(available: {available}); for CUDA install the GPU runtime alone: "
                f"pip uninstall -y onnxruntime && {install_hint('gpu')}"
            )
            if strict:
                raise OnnxModelError(msg + " (strict=True: not falling back to CPU)")
            warnings.warn(msg + "; falling back to CPUExecutionProvider", RuntimeWarning, stacklevel=3)
            return ["CPUExecutionProvider"], "CPUExecutionProvider"
        # use_tf32=0: full float32 matrix products. With TF32 (the provider's default) a row's score
        # changed with the batch it came in (1e-4 apart on an H200), so a batched call and a single-step
        # call disagreed; a critic this small gains no measurable time from TF32.
        cuda_opts: dict[str, Any] = {"device_id": device_id, "use_tf32": "0"}
        if cuda_graph:
            cuda_opts["enable_cuda_graph"] = "1"
        chain: list[Any] = []
        if requested == "TensorrtExecutionProvider":
            chain.append(("TensorrtExecutionProvider", {"device_id": device_id}))
            if "CUDAExecutionProvider" in available:
                chain.append(("CUDAExecutionProvider", cuda_opts))
        elif requested == "CUDAExecutionProvider":
            chain.append(("CUDAExecutionProvider", cuda_opts))
        if not (strict and requested in _GPU):
            chain.append("CPUExecutionProvider")
        return chain, requested

    def _gpu_error(self, provider: str, requested: str, data: bytes, chain: list, exc: Exception,
                   log: "_NativeLog | None") -> "OnnxModelError":
        """The error for a GPU session that could not be built: did the provider load, and if not, why."""
        ort = self._ort
        probe_log = _NativeLog()
        loaded = None
        try:  # the same chain without the strict option: does the provider itself load?
            with probe_log:
                probe = ort.InferenceSession(data, providers=[*chain, "CPUExecutionProvider"]
                                             if "CPUExecutionProvider" not in chain else chain)
            loaded = requested in probe.get_providers()
        except Exception as probe_exc:  # pragma: no cover - depends on the GPU stack
            probe_log.extra(f"{type(probe_exc).__name__}: {probe_exc}")
        cause = probe_log.cause(1500, log) if log is not None else probe_log.cause()
        if loaded is False:
            return OnnxModelError(
                f"provider={provider!r}: {requested} is listed by onnxruntime.get_available_providers() but failed "
                f"to load, so {str(self.path)!r} cannot run on it; onnxruntime reported: {cause.rstrip('.')}. Usually the CUDA / "
                "cuDNN libraries that this onnxruntime build needs are missing or of another version: "
                f"install onnxruntime-gpu[cuda,cudnn] with {install_hint('gpu')}, or see onnxruntime's CUDA requirements"
            )
        return OnnxModelError(
            f"provider={provider!r}: onnxruntime could not run {str(self.path)!r} on {requested} "
            f"({type(exc).__name__}: {exc}); onnxruntime reported: {cause}"
        )

    def _check_signature(self) -> None:
        ins, outs = self.session.get_inputs(), self.session.get_outputs()
        self._check_io([i.name for i in ins], [o.name for o in outs], ins[0].shape if ins else None)

    def _make_binding_one(self, device_id: int):
        ort = self._ort
        io = self.session.io_binding()
        if self._cuda_graph:
            # CUDA graphs replay fixed device addresses: bind device buffers once, copy into them per call
            self._in_dev = ort.OrtValue.ortvalue_from_numpy(self._in1, "cuda", device_id)
            self._out_dev = ort.OrtValue.ortvalue_from_shape_and_type([1, 2], np.float32, "cuda", device_id)
            io.bind_ortvalue_input(self._in_name, self._in_dev)
            io.bind_ortvalue_output(self._out_name, self._out_dev)
        else:
            io.bind_cpu_input(self._in_name, self._in1)
            io.bind_output(self._out_name, "cpu", 0, np.float32, [1, 2], self._out1.ctypes.data)
        return io

    def _direct_runner(self, io):
        """``session.run_with_iobinding(io)`` without the Python wrapper's per-call checks (graph-capture
        bookkeeping that does not apply to a CPU binding); the public call if the internals differ."""
        sess = getattr(self.session, "_sess", None)
        native = getattr(io, "_iobinding", None)
        if sess is None or native is None or not hasattr(sess, "run_with_iobinding"):
            return lambda: self.session.run_with_iobinding(io)
        run = sess.run_with_iobinding
        return lambda _io=io: run(native, None)  # _io: the binding lives as long as its runner

    def _bound_runner(self, io, xin: np.ndarray) -> Callable[[], None]:
        """A runner of ``io`` that scores what ``xin`` holds at the time of the call.

        The CPU provider reads a bound host input when it runs, so binding once is enough. A device
        provider (CUDA, TensorRT) copies a bound host input to the device when it is bound, not when it
        runs: a buffer bound once and refilled would be scored with the data it held at bind time, every
        row the same stale input. There the runner binds the input again before each run (one host to
        device copy, as a plain ``run`` makes)."""
        run = self._direct_runner(io)
        if self.provider == "CPUExecutionProvider":
            return run
        name = self._in_name

        def rebind_and_run(_io=io, _xin=xin, _run=run) -> None:
            _io.bind_cpu_input(name, _xin)
            _run()

        return rebind_and_run

    def _binding_for(self, b: int):
        entry = self._bindings.get(b)
        if entry is None:
            if len(self._bindings) >= _MAX_CACHED_BATCHES:
                self._bindings.pop(next(iter(self._bindings)))
            xin = np.zeros((b, self.obs_dim), np.float32)
            xout = np.zeros((b, 2), np.float32)
            io = self.session.io_binding()
            io.bind_cpu_input(self._in_name, xin)
            io.bind_output(self._out_name, "cpu", 0, np.float32, [b, 2], xout.ctypes.data)
            entry = (self._bound_runner(io, xin), xin, xout)
            self._bindings[b] = entry
        return entry

    # ------------------------------------------------------------------ scoring
    def _run_one(self) -> None:
        """Score ``self._in1`` into ``self._out1`` (caller holds the lock)."""
        if self._io1 is None:
            self._out1[...] = self.session.run([self._out_name], {self._in_name: self._in1})[0]
        elif self._cuda_graph:
            self._in_dev.update_inplace(self._in1)
            self.session.run_with_iobinding(self._io1)
            self._out1[...] = self._out_dev.numpy()
        else:
            assert self._fast_run is not None  # set together with _io1 when CUDA graphs are off
            self._fast_run()

    def score_one(self, x: Any, *, check: bool = True) -> tuple[float, float]:
        """Score one critic input ``x`` of shape ``(obs_dim,)``; returns ``(progress, success)``.

        The batch-1 fast path: ``x`` is copied into a preallocated float32 buffer bound to the session.
        ``check=False`` skips the shape, dtype and finiteness checks for a caller that has already
        validated ``x`` (the env wrappers validate each observation once, naming its key); a
        non-finite ``x`` then gives non-finite scores instead of an error.
        """
        a = x
        if check:
            a = check_row(x, self.obs_dim, flatten=self._flatten_obs)
        with self._lock:
            row = self._row
            row[...] = a
            # one dot product with a tiny probe: finite for any finite row (|x| * 1e-30 * D cannot
            # overflow), inf or nan as soon as one entry is inf or nan (no numpy warning for a lone inf)
            if check and not math.isfinite(row.dot(self._probe)):
                raise self._non_finite(row, a)
            if self._fast_run is not None:
                self._fast_run()
            else:
                self._run_one()
            progress, success = self._out_row.tolist()
            return progress, success

    def score(self, steps: npt.ArrayLike) -> StepScores:
        """Score ``steps`` of shape ``(B, obs_dim)``; returns progress and success ``(B,)``.

        A batch-1 model scores a batch row by row; a dynamic model scores it in one call.
        """
        if (type(steps) is np.ndarray and steps.shape == self._one_shape
                and steps.dtype in (np.float32, np.float64)):
            # batch-1 fast path (the shaper's per-step call): no intermediate arrays
            with self._lock:
                self._in1[...] = steps
                if math.isfinite(self._row.dot(self._probe)):
                    self._run_one()
                    out = self._out1.copy()
                    return StepScores(out[:, 0], out[:, 1])
            # non-finite input: fall through for the full check and its error message
        out = self._score_rows(as_obs_batch(steps, self.obs_dim, name="steps", flatten=self._flatten_obs))
        return StepScores(out[:, 0], out[:, 1])

    def _score_rows(self, x: np.ndarray) -> np.ndarray:
        b = x.shape[0]
        if b == 0:
            return np.zeros((0, 2), np.float32)
        with self._lock:
            if b == 1 or self.batch == 1:
                out = np.empty((b, 2), np.float32)
                for i in range(b):
                    self._in1[0] = x[i]
                    self._run_one()
                    out[i] = self._out1[0]
            elif self.io_binding:
                run, xin, xout = self._binding_for(b)
                xin[...] = x
                run()
                out = xout.copy()
            else:
                out = self.session.run([self._out_name], {self._in_name: np.ascontiguousarray(x)})[0]
        return out

    def __repr__(self) -> str:
        return (f"OnnxCritic({str(self.path)!r}, task={self.task!r}, obs_dim={self.obs_dim}, batch={self.batch!r}, "
                f"provider={self.provider!r})")
