"""Export the text PRM (:class:`~prm_critic.text.MiniLMStepPRM`) to ONNX, and run it with onnxruntime.

The exported graph is :class:`~prm_critic.text.prm.StepPRMNet` (encoder + head; the block-causal
step mask is built inside the graph from ``segment_ids``)::

    inputs : input_ids, attention_mask, segment_ids   int64 (B, L)     B and L symbolic
    output : scores                                   float32 (B, L, 2) = sigmoid(head(h)),
             [..., 0] progress, [..., 1] success, per token; a step's score is read at its
             separator token (the contract's ``step_positions``).

The tokenizer is not part of the graph: :class:`OnnxTextCritic` takes the PRM's saved folder (or a
tokenizer) and the step contract stored in the metadata, so it encodes exactly as the torch PRM.
One self-contained file (opset 18, weights inline, content hash in the metadata key
``prm_critic.sha256``, verified by :class:`OnnxTextCritic` before a session is built); export is
parity-checked against torch at every non-padding token (``rtol=1e-4``, ``atol=1e-5`` by default).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from prm_critic import __version__, validate
from prm_critic._optional import require
from prm_critic.critic import StepScores
from prm_critic.onnx._meta import (ATOL, DEFAULT_OPSET, HASH_KEY, RTOL, TEXT_FORMAT, OnnxExportError, check_model_bytes,
                                   seal)
from prm_critic.text.contract import (
    StepContract, batch_by_tokens, pad_batch, read_batches, score_in_context, score_trajectory_windows,
)
from prm_critic.text.critic import TextCritic
from prm_critic.text.steps import TextStep

__all__ = ["export_text_prm", "OnnxTextCritic", "TEXT_FORMAT", "TEXT_INPUTS"]

TEXT_INPUTS = ("input_ids", "attention_mask", "segment_ids")
TEXT_OUTPUT = "scores"

_DEFAULT_TEXTS = (
    ("Find the capital of France and report its population.",
     ["search(query='capital of France') -> Paris", "lookup(city='Paris', field='population') -> 2.1 million",
      "answer: Paris, about 2.1 million people"]),
    ("Book a table for two at 7pm.",
     ["list_restaurants(area='centre') -> 3 results", "book(restaurant='Luigi', time='19:00', people=2) -> ok"]),
)


def _batch_for(prm, texts) -> dict[str, np.ndarray]:
    windows = []
    for prompt, steps in texts:
        windows.extend(prm.encode(prompt, steps))
    return pad_batch(windows, prm.layout.pad_id)


def _text_parity(sess, net, batch: Mapping[str, np.ndarray], name: str, rtol: float, atol: float) -> float:
    import torch

    with torch.inference_mode():
        ref = net(*(torch.from_numpy(batch[k]) for k in TEXT_INPUTS)).float().numpy()
    got = sess.run([TEXT_OUTPUT], {k: batch[k] for k in TEXT_INPUTS})[0]
    if got.shape != ref.shape:
        raise OnnxExportError(f"parity ({name}): onnxruntime output shape {got.shape} != torch {ref.shape}")
    valid = batch["attention_mask"].astype(bool)  # compare every non-padding token
    g, r = got[valid], ref[valid]
    err = np.abs(g.astype(np.float64) - r)
    if not np.allclose(g, r, rtol=rtol, atol=atol):
        i = np.unravel_index(np.argmax(err - rtol * np.abs(r)), err.shape)
        raise OnnxExportError(
            f"parity ({name}): onnxruntime and torch disagree at token {tuple(int(k) for k in i)}: onnx {g[i]!r} vs "
            f"torch {r[i]!r} (|diff| {err[i]:.3g} > atol {atol} + rtol {rtol} * |torch|)"
        )
    return float(err.max())


def export_text_prm(
    prm_or_path: Any,
    out_path: "str | os.PathLike",
    *,
    opset: int = DEFAULT_OPSET,
    extra_meta: Mapping[str, Any] | None = None,
    parity_texts: Sequence[tuple[str, Sequence[str]]] | None = None,
    rtol: float = RTOL,
    atol: float = ATOL,
) -> Path:
    """Export a :class:`MiniLMStepPRM` (or the folder it was saved to) to one ``.onnx`` file.

    Args:
        prm_or_path: a ``MiniLMStepPRM`` or its saved folder.
        out_path: the ``.onnx`` file to write.
        opset: default-domain opset (18).
        extra_meta: JSON-serialisable values stored under the ``extra`` metadata key.
        parity_texts: ``[(prompt, [step, ...]), ...]`` trajectories for the parity check (default:
            two short tool-use trajectories).
        rtol, atol: parity tolerances at every non-padding token.

    Raises:
        OnnxExportError: bad arguments, checker failure, or a parity failure (no file is written).
    """
    import torch  # noqa: F401  (first: without torch the export stops here, before the onnx checks)

    onnx = require("onnx")
    require("onnxscript")
    ort = require("onnxruntime")
    from prm_critic._io import atomic_write_bytes
    from prm_critic.onnx.export import check_opset_and_path
    from prm_critic.text.prm import MiniLMStepPRM

    prm = MiniLMStepPRM.load(prm_or_path) if isinstance(prm_or_path, (str, os.PathLike)) else prm_or_path
    if not isinstance(prm, MiniLMStepPRM):
        raise TypeError(f"prm_or_path: expected a MiniLMStepPRM or its saved folder, got {type(prm).__name__}")
    out = check_opset_and_path(opset, out_path)
    texts = list(parity_texts) if parity_texts is not None else list(_DEFAULT_TEXTS)
    if not texts or not all(isinstance(t, (tuple, list)) and len(t) == 2 and isinstance(t[0], str) for t in texts):
        raise OnnxExportError(f"parity_texts: expected a non-empty list of (prompt, [steps]) pairs, got {parity_texts!r}")

    from prm_critic.onnx.export import on_cpu

    net = on_cpu(prm.net)
    example = _batch_for(prm, texts[:1])
    proto = _trace(net, example, opset, max_length=prm.contract.max_length)
    props = _text_props(prm, opset, extra_meta)
    onnx.helper.set_model_props(proto, props)
    proto.producer_name = "prm-critic"
    proto.producer_version = __version__
    try:
        onnx.checker.check_model(proto)
    except onnx.checker.ValidationError as exc:
        raise OnnxExportError(f"export: onnx.checker rejected the exported graph: {exc}") from exc
    data = seal(proto.SerializeToString())
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
    _text_parity(sess, net, example, "export example", rtol, atol)
    _text_parity(sess, net, _batch_for(prm, texts), "all parity texts (padded batch)", rtol, atol)
    atomic_write_bytes(out, data)
    return out


def _trace(net, example: Mapping[str, np.ndarray], opset: int, *, max_length: int):
    """The ONNX graph of ``net`` traced by the dynamo exporter on ``example`` (dynamic batch and
    sequence length up to ``max_length``), its stack traces stripped; refused if not self-contained."""
    import torch

    from prm_critic.onnx.export import quiet_exporter

    args = tuple(torch.from_numpy(example[k]) for k in TEXT_INPUTS)
    batch_dim, seq_dim = torch.export.Dim("batch"), torch.export.Dim("seq", min=2, max=max_length)
    dyn = {k: {0: batch_dim, 1: seq_dim} for k in TEXT_INPUTS}
    with quiet_exporter(), torch.no_grad():
        prog = torch.onnx.export(net, args, None, dynamo=True, opset_version=opset, external_data=False,
                                 input_names=list(TEXT_INPUTS), output_names=[TEXT_OUTPUT],
                                 dynamic_shapes=dyn, verbose=False)
    if prog is None:
        raise RuntimeError("torch.onnx.export returned no program")
    proto = prog.model_proto
    from prm_critic.onnx.export import strip_stack_traces

    strip_stack_traces(proto)
    from onnx.external_data_helper import uses_external_data

    if any(uses_external_data(t) for t in proto.graph.initializer):
        raise OnnxExportError("export: some initializers use external data; expected one self-contained file")
    return proto


def _text_props(prm, opset: int, extra_meta: Mapping[str, Any] | None) -> dict[str, str]:
    """The metadata properties of an exported text PRM (the content hash a placeholder until sealed)."""
    return {
        "prm_critic.format": TEXT_FORMAT,
        "format_version": "1",
        "prm_critic.version": __version__,
        "contract": json.dumps(prm.contract.to_dict(), sort_keys=True),
        "inputs": json.dumps(list(TEXT_INPUTS)),
        "output_name": TEXT_OUTPUT,
        "heads": json.dumps(["progress", "success"]),
        "label_semantics": "scores[b, t, 0] = progress, scores[b, t, 1] = success, read at each step's separator "
                           "token (StepContract step_positions); other tokens are not scores",
        "pad_id": str(prm.layout.pad_id),
        "encoder": json.dumps({"model_type": prm.net.encoder.config.model_type,
                               "hidden_size": prm.net.encoder.config.hidden_size}),
        "meta": json.dumps(prm.meta, sort_keys=True, default=str),
        "opset": str(opset),
        "exporter": "dynamo",
        "extra": json.dumps(dict(extra_meta or {}), sort_keys=True),
        HASH_KEY: "0" * 64,  # placeholder; seal() writes the content hash
    }


class OnnxTextCritic(TextCritic):
    """A text PRM exported by :func:`export_text_prm`, run by onnxruntime (CPU by default).

    ``score(list[TextStep]) -> StepScores (B,)`` exactly like :class:`MiniLMStepPRM` (same
    encoding, windows and truncation), with the forward pass in onnxruntime.

    Args:
        path: the exported ``.onnx``.
        tokenizer: the PRM's saved folder (tokenizer files) or a transformers tokenizer.
        provider: ``"cpu"``, ``"cuda"`` or ``"auto"``.
        intra_op_threads: onnxruntime intra-op threads (``0`` = all cores; a transformer benefits).
        max_batch_tokens: rows are grouped so a forward pass holds at most this many padded tokens.
        allow_unverified: accept a file without a content hash (exported by an older prm-critic), or
            a well-formed file whose hash does not match (e.g. re-saved by onnxsim), with a
            ``RuntimeWarning``; :func:`~prm_critic.onnx.seal_onnx` re-seals such a file on purpose.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        OnnxModelError: the file is corrupt, was modified after export (its content hash does not
            match, unless ``allow_unverified``), keeps tensors in external data files, has no content hash (unless
            ``allow_unverified``), or is not an exported text PRM. All checked before a session is built.
    """

    def __init__(self, path: "str | os.PathLike", tokenizer: Any, *, provider: str = "cpu",
                 intra_op_threads: int = 0, max_batch_tokens: int = 8192, allow_unverified: bool = False):
        ort = require("onnxruntime")
        p = Path(path)
        if not p.is_file():
            raise FileNotFoundError(f"path: {str(p)!r} does not exist (expected an exported text PRM .onnx)")
        if provider not in ("cpu", "cuda", "auto"):
            raise ValueError(f"provider: expected one of 'cpu', 'cuda', 'auto', got {provider!r}")
        validate.check_int("intra_op_threads", intra_op_threads, minimum=0)
        validate.check_flag("allow_unverified", allow_unverified)
        avail = ort.get_available_providers()
        use_cuda = provider in ("cuda", "auto") and "CUDAExecutionProvider" in avail
        providers = (["CUDAExecutionProvider"] if use_cuda else []) + ["CPUExecutionProvider"]
        so = ort.SessionOptions()
        so.intra_op_num_threads = intra_op_threads
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        from prm_critic.onnx.runtime import OnnxModelError

        # every check runs on the bytes, before a session is built
        data = p.read_bytes()
        raw = check_model_bytes(data, str(p), fmt=TEXT_FORMAT, error=OnnxModelError, allow_unverified=allow_unverified,
                                stacklevel=3)
        try:
            self.session = ort.InferenceSession(data, so, providers=providers)
        except Exception as exc:
            raise OnnxModelError(f"path: {str(p)!r} is corrupt or not an ONNX model ({type(exc).__name__}: {exc})") from exc
        self.path = p
        self.provider = self.session.get_providers()[0]
        self.meta: dict[str, Any] = {k: (json.loads(v) if k in ("contract", "inputs", "heads", "encoder", "meta", "extra") else v)
                     for k, v in raw.items()}
        self.contract = StepContract.from_dict(self.meta["contract"])
        if isinstance(tokenizer, (str, os.PathLike)):
            tf = require("transformers")
            tokenizer = tf.AutoTokenizer.from_pretrained(str(tokenizer), local_files_only=True)
        self.tokenizer = tokenizer
        self.layout = self.contract.layout(tokenizer)
        if int(self.meta["pad_id"]) != self.layout.pad_id:
            from prm_critic.onnx.runtime import OnnxModelError

            raise OnnxModelError(f"tokenizer: pad id {self.layout.pad_id} differs from the exported PRM's "
                                 f"{self.meta['pad_id']}; pass the tokenizer saved with the PRM")
        self.max_batch_tokens = int(max_batch_tokens)

    def _run(self, windows) -> np.ndarray:
        def forward(bt: dict[str, np.ndarray]) -> np.ndarray:
            probs = self.session.run([TEXT_OUTPUT], {k: bt[k] for k in TEXT_INPUTS})[0]
            return probs[bt["step_row"], bt["step_positions"]]

        return read_batches(windows, batch_by_tokens(windows, self.max_batch_tokens), self.layout.pad_id, forward)

    def score(self, steps: Sequence[TextStep]) -> StepScores:
        """Score ``B`` TextSteps in context: StepScores ``(B,)`` (``extra["truncated"]`` as the torch PRM)."""
        p, trunc = score_in_context(self._run, self.contract, self.tokenizer, self.layout, steps)
        return StepScores(p[:, 0], p[:, 1], {"truncated": trunc})

    def score_trajectory(self, prompt: str, steps: Sequence[str]) -> StepScores:
        """All ``T`` steps of one trajectory in one pass: StepScores ``(T,)``."""
        p, trunc = score_trajectory_windows(self._run, self.contract, self.tokenizer, self.layout, prompt, steps)
        return StepScores(p[:, 0], p[:, 1], {"truncated": trunc})
