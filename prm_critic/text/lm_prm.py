"""Math-Shepherd-style language-model PRMs: a step tag token after each step, the score read as
``p(good) vs p(bad)`` at the tag's position.

Public math PRMs (Math-Shepherd and its descendants) ship as causal (or masked) language models,
not as token classifiers: after every step the text carries a *step tag* (Math-Shepherd: ``"ки"``),
and the step's score is the model's preference for a *good* token (``"+"``) over a *bad* token
(``"-"``) at that position::

    ids    = <bos>? prompt_ids | step_0_ids sep_ids | step_1_ids sep_ids | ...    (sep holds the tag)
    logits = LM(ids)                                                                (L, V)
    score_t = softmax([logits[p_t, good], logits[p_t, bad]])[0]                     p_t = tag of step t

:class:`StepTagLMPRM` renders with the library's :class:`~prm_critic.text.contract.StepContract`
(each piece tokenized on its own; the prompt keeps its head, older steps are dropped from the left,
late steps never; every cut is reported in ``extra["truncated"]``) and reads each step at the
position of the tag inside the separator that follows it.

* A **causal** LM sees only earlier tokens, so ONE pass over a trajectory reads every tag and each
  step's score equals the score of its prefix encoded alone. :meth:`StepTagLMPRM.score` shares one
  row between TextSteps whose contexts are prefixes of each other.
* A **masked** LM is bidirectional: :meth:`StepTagLMPRM.score` gives each TextStep its own row (its
  prefix only, what is known when the step is taken); :meth:`StepTagLMPRM.score_trajectory` runs one
  pass over the whole trajectory (how such models read a full solution), so later steps change
  earlier scores there.

Integrity: a folder is trusted when it holds ``prm.json`` (format ``prm-critic/lm-step-prm``) whose
``files_sha256`` records the SHA-256 of every other file in the folder; every file is checked, and a
file the manifest does not name is refused, before transformers reads anything. Write the manifest
for a folder you trust with :func:`write_lm_prm_manifest`; ``allow_unverified=True`` loads a
folder without one (e.g. a public checkpoint as downloaded). Weights are read from safetensors only
(no pickle).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from prm_critic._io import atomic_write_bytes
from prm_critic._optional import require
from prm_critic.critic import StepScores
from prm_critic import validate
from prm_critic.text.contract import Encoded, StepContract, read_batches, score_in_context, score_trajectory_windows
from prm_critic.text.critic import TextCritic
from prm_critic.text.prm import check_loaded_weights, chunks, window_lengths
from prm_critic.text.steps import TextStep

__all__ = ["StepTagLMPRM", "write_lm_prm_manifest", "verify_lm_prm_folder", "LM_PRM_FORMAT"]

LM_PRM_FORMAT = "prm-critic/lm-step-prm"
FORMAT_VERSION = 1
MANIFEST = "prm.json"
HASHES = "files_sha256"
KINDS = ("causal", "masked")


def _folder_files(d: Path) -> list[str]:
    """Every regular file under ``d`` (relative POSIX names), the manifest excluded."""
    return [f.relative_to(d).as_posix() for f in sorted(d.rglob("*"))
            if f.is_file() and f != d / MANIFEST]


def write_lm_prm_manifest(model_dir: str | os.PathLike) -> Path:
    """Record the SHA-256 of every file of ``model_dir`` in ``model_dir/prm.json`` (atomically).

    Do this once for a folder you trust (e.g. right after downloading and checking a public PRM);
    :class:`StepTagLMPRM` then refuses the folder if any file changes, goes missing, or is added.

    Returns:
        the manifest's path.

    Raises:
        FileNotFoundError: ``model_dir`` has no ``config.json``.
        CheckpointError: ``model_dir`` already holds a ``prm.json`` of another format.
    """
    from prm_critic import __version__
    from prm_critic.integrity import CheckpointError, sha256_bytes

    d = Path(model_dir)
    if not (d / "config.json").is_file():
        raise FileNotFoundError(f"model_dir: {str(d)!r} has no config.json (expected a transformers language-model folder)")
    m = d / MANIFEST
    if m.is_file():
        try:
            old = json.loads(m.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError):
            old = None
        if not isinstance(old, dict) or old.get("format") != LM_PRM_FORMAT:
            raise CheckpointError(f"model_dir: {str(m)!r} exists and is not a {LM_PRM_FORMAT!r} manifest; "
                                  "refusing to overwrite it")
    hashes = {name: sha256_bytes((d / name).read_bytes()) for name in _folder_files(d)}
    doc = {"format": LM_PRM_FORMAT, "format_version": FORMAT_VERSION, "prm_critic_version": __version__,
           HASHES: hashes}
    atomic_write_bytes(m, json.dumps(doc, indent=2, sort_keys=True).encode())
    return m


def verify_lm_prm_folder(model_dir: str | os.PathLike, *, allow_unverified: bool = False) -> bool:
    """Check ``model_dir`` against its ``prm.json`` manifest; ``True`` if verified, ``False`` if it
    has no manifest and ``allow_unverified``.

    Raises:
        FileNotFoundError: the folder has no ``config.json``, or a file the manifest names is missing.
        CheckpointError: no manifest (unless ``allow_unverified``), a manifest of another format or
            a newer version, a hash mismatch, a file name leaving the folder, or a file in the folder
            that the manifest does not name (transformers might read it).
    """
    from prm_critic.integrity import CheckpointError, check_folder_hashes, read_format_doc

    if not isinstance(allow_unverified, bool):
        raise TypeError(f"allow_unverified: expected a bool, got {allow_unverified!r}")
    d = Path(model_dir)
    if not (d / "config.json").is_file():
        raise FileNotFoundError(f"model_dir: {str(d)!r} has no config.json (expected a transformers language-model folder)")
    m = d / MANIFEST
    if not m.is_file():
        if allow_unverified:
            return False
        raise CheckpointError(
            f"model_dir: {str(d)!r} has no {MANIFEST} recording {HASHES!r}, so a damaged or replaced file cannot be "
            "detected; check the folder, then record its hashes with write_lm_prm_manifest(model_dir) (or pass "
            "allow_unverified=True to load it unchecked)")
    doc = read_format_doc(m, fmt=LM_PRM_FORMAT, noun="not an LM PRM manifest", newest=FORMAT_VERSION, newer="manifest")
    hashes = doc.get(HASHES)
    if not isinstance(hashes, dict) or "config.json" not in hashes:
        raise CheckpointError(f"checkpoint: {str(m)!r} field {HASHES!r} is {hashes!r}; expected a mapping of file names "
                              "(including 'config.json') to SHA-256 hex digests")
    check_folder_hashes(d, hashes, doc=m, field=HASHES)
    extra = sorted(set(_folder_files(d)) - set(hashes))
    if extra:
        raise CheckpointError(f"checkpoint: {str(d)!r} holds file(s) {extra} that {MANIFEST} does not record; "
                              "remove them, or record the folder again with write_lm_prm_manifest")
    return True


def _resolve_token(tokenizer, name: str, token: Any) -> int:
    """The single vocabulary id of ``token`` (a str that encodes to exactly one known token, or an id)."""
    n = len(tokenizer)
    if isinstance(token, bool):
        raise TypeError(f"{name}: expected a str (one token) or an int token id, got {token!r}")
    if isinstance(token, int):
        if not 0 <= token < n:
            raise ValueError(f"{name}: token id {token} is outside the tokenizer's vocabulary [0, {n})")
        return token
    if not isinstance(token, str) or not token:
        raise TypeError(f"{name}: expected a non-empty str (one token) or an int token id, got {token!r}")
    ids = [int(i) for i in tokenizer.encode(token, add_special_tokens=False)]
    pieces = tokenizer.convert_ids_to_tokens(ids)
    if len(ids) != 1:
        raise ValueError(
            f"{name}: {token!r} is not a single token in this tokenizer: it encodes to {len(ids)} tokens {ids} "
            f"({pieces}); expected exactly one (pass the token id as an int, or a string that is one vocabulary token)")
    unk = getattr(tokenizer, "unk_token_id", None)
    if unk is not None and ids[0] == int(unk):
        raise ValueError(f"{name}: {token!r} is not in the tokenizer's vocabulary (it encodes to the unknown token "
                         f"{pieces[0]!r}, id {ids[0]}); expected a known single token")
    return ids[0]


def _detect_kind(config) -> str:
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, MODEL_FOR_MASKED_LM_MAPPING_NAMES,
    )

    archs = list(getattr(config, "architectures", None) or [])
    causal = set(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values())
    masked = set(MODEL_FOR_MASKED_LM_MAPPING_NAMES.values())
    if any(a in causal for a in archs):
        return "causal"
    if any(a in masked for a in archs):
        return "masked"
    raise ValueError(f"kind: cannot tell from architectures {archs or None} whether the model is a causal or a masked "
                     "LM; pass kind='causal' or kind='masked'")


class StepTagLMPRM(TextCritic):
    """A PRM shipped as a language model: ``p(good_token)`` vs ``p(bad_token)`` at the step tag.

    ``success = progress = softmax([logit[good], logit[bad]])[0]`` at the tag position after each step
    (module docstring for the layout). Loaded from a local folder with transformers
    (``AutoModelForCausalLM`` or ``AutoModelForMaskedLM``, safetensors only, local files only).

    Checks (each a clear error naming the value): the tag, good and bad tokens are each ONE known
    token of the tokenizer (a str that encodes to several tokens or to the unknown token is refused,
    with its tokenisation; an int is taken as a token id); the separator's tokens contain the tag
    exactly once; the folder matches its ``prm.json`` hashes (unless ``allow_unverified``); no
    weight of the LM (its head included) would be newly initialised.

    Args:
        model_dir: folder with a transformers causal / masked LM and its tokenizer.
        step_tag: the tag token after each step (Math-Shepherd: ``"ки"``), str or token id.
        good_token / bad_token: the tokens whose probabilities are compared (``"+"`` / ``"-"``).
        separator: the text appended after every step; it must contain the tag as one token.
            ``None``: ``" " + step_tag + "\\n"`` (``step_tag`` must then be a str).
        kind: ``"causal"`` or ``"masked"``; ``None``: from the config's architectures.
        max_length: tokens per window; ``None`` = min(1024, the model's position limit).
        max_prompt_tokens: prompt head kept; ``None`` = ``max_length // 4``.
        refill: the contract's history refill fraction (:class:`StepContract`).
        open: what starts the sequence: ``"bos"`` (the tokenizer's BOS if it has one) or ``"none"``.
        allow_unverified: load a folder that has no ``prm.json`` manifest (a mismatch is refused
            regardless).
        device: torch device.
        batch_size: windows per forward pass.

    Raises:
        FileNotFoundError / CheckpointError: see :func:`verify_lm_prm_folder`.
        ValueError: a token check above, an unknown ``kind``, missing LM weights, a bad length.
    """

    def __init__(self, model_dir: str | os.PathLike, *, step_tag: str | int = "ки", good_token: str | int = "+",
                 bad_token: str | int = "-", separator: str | None = None, kind: str | None = None,
                 max_length: int | None = None, max_prompt_tokens: int | None = None, refill: float = 0.5,
                 open: str = "bos", allow_unverified: bool = False, device: str = "cpu", batch_size: int = 16):
        torch = require("torch")
        tf = require("transformers")
        d = Path(model_dir)
        self.verified = verify_lm_prm_folder(d, allow_unverified=allow_unverified)
        if kind is not None and kind not in KINDS:
            raise ValueError(f"kind: expected one of {KINDS} or None, got {kind!r}")
        if open not in ("bos", "none"):
            raise ValueError(f"open: expected 'bos' or 'none', got {open!r}")
        self.batch_size = validate.check_int("batch_size", batch_size, minimum=1)
        if separator is None:
            if not isinstance(step_tag, str):
                raise ValueError(f"separator: None needs step_tag as a str (the default separator is ' ' + step_tag + "
                                 f"'\\n'), got step_tag={step_tag!r}; pass separator=")
            separator = f" {step_tag}\n"
        self.tokenizer = tf.AutoTokenizer.from_pretrained(str(d), local_files_only=True)
        self.step_tag_id = _resolve_token(self.tokenizer, "step_tag", step_tag)
        self.good_id = _resolve_token(self.tokenizer, "good_token", good_token)
        self.bad_id = _resolve_token(self.tokenizer, "bad_token", bad_token)
        if self.good_id == self.bad_id:
            raise ValueError(f"good_token / bad_token: {good_token!r} and {bad_token!r} are the same token (id {self.good_id})")
        if not isinstance(separator, str) or not separator:
            raise ValueError(f"separator: expected a non-empty str or None, got {separator!r}")
        sep_ids = [int(i) for i in self.tokenizer.encode(separator, add_special_tokens=False)]
        hits = [i for i, t in enumerate(sep_ids) if t == self.step_tag_id]
        if len(hits) != 1:
            raise ValueError(
                f"separator: {separator!r} encodes to {sep_ids} ({self.tokenizer.convert_ids_to_tokens(sep_ids)}), which "
                f"holds the step tag {step_tag!r} (id {self.step_tag_id}) {len(hits)} times; expected exactly once")
        #: how many tokens of the separator follow the tag (the contract reads the separator's last token)
        self.tag_back = len(sep_ids) - 1 - hits[0]

        config = tf.AutoConfig.from_pretrained(str(d), local_files_only=True)
        self.kind = kind or _detect_kind(config)
        auto = tf.AutoModelForCausalLM if self.kind == "causal" else tf.AutoModelForMaskedLM
        self.model, info = auto.from_pretrained(str(d), local_files_only=True, output_loading_info=True,
                                                use_safetensors=True)
        check_loaded_weights(d, self.model, info, config, f"a {self.kind} language-model PRM")
        vocab = int(self.model.get_output_embeddings().weight.shape[0]) if self.model.get_output_embeddings() is not None \
            else int(getattr(self.model.config, "vocab_size", len(self.tokenizer)))
        for name, i in (("step_tag", self.step_tag_id), ("good_token", self.good_id), ("bad_token", self.bad_id)):
            if i >= vocab:
                raise ValueError(f"{name}: token id {i} is outside the model's output vocabulary ({vocab} logits)")
        max_length, max_prompt_tokens = window_lengths(self.model.config, max_length, max_prompt_tokens)
        self.contract = StepContract(max_length=max_length, max_prompt_tokens=max_prompt_tokens, separator=separator,
                                     open=open, close_prompt=False, refill=refill)
        self.layout = self.contract.layout(self.tokenizer)
        self.device = torch.device(device)
        self.model.to(self.device).eval()

    # ------------------------------------------------------------------ scoring
    def _run(self, windows: list[Encoded]) -> np.ndarray:
        """``p(good)`` at the tag of every scored step of ``windows``, in window order: ``(S_total,)``."""
        torch = require("torch")

        def forward(bt: dict[str, np.ndarray]) -> np.ndarray:
            ids = torch.from_numpy(bt["input_ids"]).to(self.device)
            att = torch.from_numpy(bt["attention_mask"]).to(self.device)
            rows = torch.from_numpy(bt["step_row"]).to(self.device)
            pos = torch.from_numpy(bt["step_positions"] - self.tag_back).to(self.device)
            # the contract puts the separator's last token at step_positions; the tag sits tag_back before it
            got = ids[rows, pos]
            if not bool((got == self.step_tag_id).all()):
                raise RuntimeError(f"step_tag: expected token id {self.step_tag_id} at every read position, got "
                                   f"{got.tolist()}; this is a bug in the rendering, please report it")
            logits = self.model(input_ids=ids, attention_mask=att).logits
            two = logits[rows, pos][:, [self.good_id, self.bad_id]].float()
            return torch.softmax(two, dim=-1)[:, 0].cpu().numpy()

        with torch.inference_mode():
            return read_batches(windows, chunks(len(windows), self.batch_size), self.layout.pad_id,
                                forward).astype(np.float32)

    def score(self, steps: Sequence[TextStep]) -> StepScores:
        """Score ``B`` TextSteps, each on its own prefix (prompt, kept history, step).

        Returns StepScores ``(B,)`` (``progress == success == p(good)``); ``extra["truncated"]`` is 1.0
        where the step's context was cut (older steps or prompt tail dropped, or the step's own head).
        A causal LM shares one row between steps whose contexts are prefixes of each other.
        """
        p, trunc = score_in_context(self._run, self.contract, self.tokenizer, self.layout, steps,
                                    shared=self.kind == "causal")
        return StepScores(p, p.copy(), {"truncated": trunc})

    def score_trajectory(self, prompt: str, steps: Sequence[str]) -> StepScores:
        """Score all ``T`` steps of one trajectory, reading every tag of a window in one pass: ``(T,)``.

        Causal LM: equal to :meth:`score` on the prefixes. Masked LM: later steps are visible to
        earlier tags (a whole-solution read), so the scores differ from :meth:`score`. A trajectory
        over ``max_length`` is covered by several windows (batched) and ``extra["truncated"]`` marks
        the steps whose history was cut.
        """
        p, trunc = score_trajectory_windows(self._run, self.contract, self.tokenizer, self.layout, prompt, steps)
        return StepScores(p, p.copy(), {"truncated": trunc})
