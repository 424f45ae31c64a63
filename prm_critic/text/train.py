"""Train a :class:`~prm_critic.text.prm.MiniLMStepPRM` on stepwise (TRL-format) examples.

Loss: soft-label binary cross-entropy at every step's separator position, on both heads::

    L = mean over steps t of  BCE(sigmoid(z_t^progress), y_t^progress) + BCE(sigmoid(z_t^success), y_t^success)

Targets per example (:class:`~prm_critic.text.trl_format.StepwiseExample`):

* success ``y^success_t`` = ``labels[t]`` (floats in [0, 1], e.g. Monte-Carlo success rates);
* progress ``y^progress_t`` = ``progress[t]`` when the example has it; otherwise, by
  ``TextTrainConfig.progress_target``: ``"step_index"`` (default) = ``(t + 1) / T`` (a normalised
  step index: how far along the trajectory this step is), or ``"labels"`` = the success labels.

Every training trajectory is encoded by the same :class:`~prm_critic.text.contract.StepContract`
the model scores with (block-causal, so one pass per trajectory trains all its steps exactly as
they are scored later).

``freeze_encoder=True`` trains the head only: encoder features at the step positions are computed
once (one pass per trajectory) and the head is fit on them — seconds on a CPU. A
:class:`FrozenFeatureCache` passed to several such runs (``feature_cache=``) keeps those features
across runs on the same encoder, so each distinct trajectory is encoded once (e.g. one run per data
split and training seed); it also scores a trained head-only model from the kept features.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from prm_critic import validate
from prm_critic._optional import require
from prm_critic.text.contract import Encoded, pad_batch, truncated_per_step
from prm_critic.text.trl_format import StepwiseExample

__all__ = ["TextTrainConfig", "train_text_prm", "step_targets", "FrozenFeatureCache", "BoundFeatures"]

_PROGRESS_TARGETS = ("step_index", "labels")


@dataclass(frozen=True)
class TextTrainConfig:
    """Training settings (validated on construction; errors name the field).

    Attributes:
        lr: learning rate of the head (AdamW).
        encoder_lr: learning rate of the encoder when it is trained.
        epochs: passes over the examples.
        batch_size: trajectories per optimisation step.
        max_length: if set, the model's contract is replaced by one with this ``max_length``
            (kept in the trained model); ``None`` keeps the model's contract.
        freeze_encoder: train the head only, on cached encoder features (fast on CPU).
        seed: seeds the head init (new models), shuffling and dropout.
        progress_target: ``"step_index"`` or ``"labels"``: progress targets of examples without
            ``progress`` labels (see module docstring).
        weight_decay: AdamW weight decay.
        show_progress: show a tqdm bar.
        device: torch device.
        checkpoint_dir: if set, a checkpoint is written there after every epoch (model folder,
            optimizer + RNG state as safetensors, ``state.json`` written last, atomically) plus
            ``loss.png``; a run started again with the same examples and settings resumes after
            the last finished epoch (a kill loses at most the epoch in progress; a larger
            ``epochs`` extends a finished run). The checkpointed model replaces ``model``.
            Another run's folder is an error, not silently reused.
    """

    lr: float = 1e-3
    encoder_lr: float = 3e-5
    epochs: int = 3
    batch_size: int = 8
    max_length: int | None = None
    freeze_encoder: bool = False
    seed: int = 0
    progress_target: str = "step_index"
    weight_decay: float = 0.01
    show_progress: bool = True
    device: str = "cpu"
    checkpoint_dir: str | None = None

    def __post_init__(self):
        for name in ("lr", "encoder_lr"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
                raise ValueError(f"{name}: expected a finite float > 0, got {v!r}")
        if isinstance(self.weight_decay, bool) or not isinstance(self.weight_decay, (int, float)) or not (
                math.isfinite(self.weight_decay) and self.weight_decay >= 0):
            raise ValueError(f"weight_decay: expected a finite float >= 0, got {self.weight_decay!r}")
        for name in ("epochs", "batch_size"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name}: expected an int >= 1, got {v!r}")
        if self.max_length is not None and (isinstance(self.max_length, bool) or not isinstance(self.max_length, int)
                                            or not 16 <= self.max_length <= 512):
            raise ValueError(f"max_length: expected None or an int in [16, 512], got {self.max_length!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise ValueError(f"seed: expected an int, got {self.seed!r}")
        validate.check_choice("progress_target", self.progress_target, _PROGRESS_TARGETS)
        validate.check_flag("freeze_encoder", self.freeze_encoder)
        if self.checkpoint_dir is not None:
            if not isinstance(self.checkpoint_dir, (str, os.PathLike)):
                raise ValueError(f"checkpoint_dir: expected a path or None, got {self.checkpoint_dir!r}")
            object.__setattr__(self, "checkpoint_dir", os.fspath(self.checkpoint_dir))


def step_targets(ex: StepwiseExample, progress_target: str = "step_index") -> np.ndarray:
    """Targets ``(T, 2)`` float32 ``[progress, success]`` of one example (see module docstring)."""
    validate.check_choice("progress_target", progress_target, _PROGRESS_TARGETS)
    succ = np.asarray(ex.labels, np.float32)
    if ex.progress is not None:
        prog: np.ndarray = np.asarray(ex.progress, np.float32)
    elif progress_target == "labels":
        prog = succ.copy()
    else:
        n = len(ex.labels)
        prog = np.arange(1, n + 1, dtype=np.float32) / n
    return np.stack([prog, succ], axis=1)


def _check_examples(examples) -> list[StepwiseExample]:
    examples = validate.check_list("examples", examples, StepwiseExample)
    values = {float(y) for ex in examples for y in ex.labels}
    if len(values) == 1:
        n = sum(len(ex.labels) for ex in examples)
        raise ValueError(f"examples: all {n} step labels of the {len(examples)} examples are {values.pop():g}; a success "
                         f"head learns nothing from labels that never vary (with Monte-Carlo labels: the base policy "
                         f"never won, or always did; label more or other games, or raise k)")
    return examples


def train_text_prm(examples: Sequence[StepwiseExample], *, config: TextTrainConfig | None = None,
                   model=None, feature_cache: "FrozenFeatureCache | None" = None):
    """Fit a MiniLMStepPRM to stepwise examples; returns the trained model (in eval mode).

    Args:
        examples: the training trajectories.
        config: :class:`TextTrainConfig` (default settings if ``None``).
        model: a :class:`~prm_critic.text.prm.MiniLMStepPRM` to continue training; ``None`` builds a
            fresh one on the bundled all-MiniLM-L6-v2 encoder (head seeded by ``config.seed``).
        feature_cache: a :class:`FrozenFeatureCache` (``freeze_encoder=True`` only) to read the encoder
            features of the examples from, and to keep those it computes; the run trains exactly as
            without it (the same features, computed the same way).

    The returned model's ``meta["training"]`` records the config, the number of examples/steps and
    the mean loss of each epoch.
    """
    torch = require("torch")
    config, examples, model = _checked_model(examples, config, model)
    if feature_cache is not None:
        if not isinstance(feature_cache, FrozenFeatureCache):
            raise TypeError(f"feature_cache: expected FrozenFeatureCache or None, got {type(feature_cache).__name__}")
        if not config.freeze_encoder:
            raise ValueError("feature_cache: expected config.freeze_encoder=True (a trained encoder's features change "
                             "every step and cannot be kept)")
    tqdm = require("tqdm", "torch").tqdm

    device = torch.device(config.device)
    rng = random.Random(config.seed)
    torch.manual_seed(config.seed)
    ckpt = Path(config.checkpoint_dir) if config.checkpoint_dir is not None else None
    fingerprint = _fingerprint(examples, config)
    model, resume, history, start_epoch = _resume_state(ckpt, fingerprint, model, config)
    net = model.net.to(device)

    # encode once: windows + targets per example
    data: list[tuple[list[Encoded], np.ndarray]] = []
    for ex in examples:
        wins = model.contract.encode_trajectory(model.tokenizer, ex.prompt, ex.completions, layout=model.layout)
        tgt = step_targets(ex, config.progress_target)
        order = np.concatenate([w.step_indices for w in wins])
        data.append((wins, tgt[order]))
    n_steps = int(sum(len(t) for _, t in data))
    feats, opt = _optimizer(model, data, config, device, tqdm, feature_cache)
    if resume is not None:
        assert ckpt is not None, "a training state is read only from a checkpoint_dir"
        _load_optimizer(opt, ckpt, resume, device)
        rng.setstate(_rng_from_json(resume["python_rng"]))
        torch.set_rng_state(_load_tensors(ckpt / resume["state"])["torch_rng"])
    _fit(_TextRun(model=model, opt=opt, data=data, feats=feats, config=config, ckpt=ckpt, fingerprint=fingerprint,
                  device=device, tqdm=tqdm), rng, history, start_epoch)
    net.eval()
    model.meta = {**model.meta, "training": {"config": asdict(config), "examples": len(data), "steps": n_steps,
                                             "epoch_loss": [round(v, 6) for v in history]}}
    if ckpt is not None:
        _plot_loss(ckpt / "loss.png", history)
    return model


def _checked_model(examples: Sequence[StepwiseExample], config: TextTrainConfig | None, model):
    """:func:`train_text_prm`'s checked config and examples, and the model to train (a fresh one for
    ``None``; with the config's ``max_length`` contract when it sets one)."""
    from prm_critic.text.prm import MiniLMStepPRM

    config = validate.config_from(TextTrainConfig, config)
    examples = _check_examples(examples)
    if model is None:
        model = MiniLMStepPRM.from_pretrained_encoder(seed=config.seed, device=config.device)
    elif not isinstance(model, MiniLMStepPRM):
        raise TypeError(f"model: expected MiniLMStepPRM or None, got {type(model).__name__}")
    if config.max_length is not None and config.max_length != model.contract.max_length:
        c = model.contract
        contract = replace(c, max_length=config.max_length, max_prompt_tokens=min(c.max_prompt_tokens, config.max_length // 2))
        model = MiniLMStepPRM(model.net, model.tokenizer, contract, meta=model.meta, device=config.device,
                              max_batch_tokens=max(model.max_batch_tokens, config.max_length))
    return config, examples, model


def _resume_state(ckpt: Path | None, fingerprint: str, model, config: TextTrainConfig):
    """``(model, state, history, start_epoch)``: the checkpointed model and its state when ``ckpt``
    holds this run, else ``(model, None, [], 0)``."""
    from prm_critic.text.prm import MiniLMStepPRM

    history: list[float] = []
    start_epoch = 0
    resume = _read_state(ckpt, fingerprint) if ckpt is not None else None
    if resume is not None:
        from prm_critic._io import resolve_inside

        assert ckpt is not None, "a training state is read only from a checkpoint_dir"
        model = MiniLMStepPRM.load(resolve_inside(ckpt, resume["model"], what=f"checkpoint_dir: {str(ckpt / _STATE)!r} field 'model'"),
                                   device=config.device)
        history = list(resume["history"])
        start_epoch = int(resume["epochs_done"])
    return model, resume, history, start_epoch


def _tensors(model, wins: list[Encoded], device):
    """The padded batch of ``wins`` on ``device``: the encoder inputs, and the row and position of every step."""
    torch = require("torch")
    bt = pad_batch(wins, model.layout.pad_id)
    t = {k: torch.from_numpy(bt[k]).to(device) for k in ("input_ids", "attention_mask", "segment_ids")}
    return t, torch.from_numpy(bt["step_row"]).to(device), torch.from_numpy(bt["step_positions"]).to(device)


def _step_features(model, wins: list[Encoded], device):
    """The encoder states ``(S, H)`` at the step positions of one trajectory's windows (in window order):
    one pass, no grad, the network in eval mode."""
    torch = require("torch")
    model.net.eval()
    with torch.no_grad():
        t, rows, pos = _tensors(model, wins, device)
        return model.net.hidden(t["input_ids"], t["attention_mask"], t["segment_ids"])[rows, pos].clone()


def _optimizer(model, data: list[tuple[list[Encoded], np.ndarray]], config: TextTrainConfig, device, tqdm,
               feature_cache: "FrozenFeatureCache | None" = None):
    """``(feats, opt)``: with ``freeze_encoder``, the encoder features at the step positions of every
    example (one pass per trajectory, no grad; read from ``feature_cache`` when it holds them) and an
    AdamW over the head; else ``[]`` and an AdamW over the head and the encoder."""
    torch = require("torch")
    net = model.net
    feats: list = []
    if config.freeze_encoder:
        # cache encoder features at step positions (one pass per trajectory, no grad)
        net.eval()
        bound = feature_cache.bind(model) if feature_cache is not None else None
        for wins, _ in tqdm(data, desc="encode steps", unit="traj", disable=not config.show_progress):
            feats.append(bound.features(wins) if bound is not None else _step_features(model, wins, device))
        opt = torch.optim.AdamW(net.head.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    else:
        opt = torch.optim.AdamW([
            {"params": list(net.head.parameters()), "lr": config.lr},
            {"params": list(net.encoder.parameters()), "lr": config.encoder_lr},
        ], weight_decay=config.weight_decay)
    return feats, opt


class FrozenFeatureCache:
    """Encoder features of encoded trajectories under a frozen encoder, computed once and kept.

    With ``freeze_encoder=True``, :func:`train_text_prm` fits the head on the encoder's states at the
    step positions of each example; the encoder is not trained, so those states are a deterministic
    function of the encoder's weights and the encoded windows. One cache passed to several runs
    (``train_text_prm(..., feature_cache=cache)``, e.g. one per data split and training seed) encodes
    each distinct trajectory once, and each run trains exactly as it would without the cache.
    :meth:`bind` also gives a head-only view of a trained model that scores trajectories from the kept
    features (:meth:`BoundFeatures.score_trajectory`).

    A cache serves one encoder: the first model bound fixes its weights' fingerprint
    (:func:`~prm_critic.text.prm.encoder_fingerprint`), and a model whose encoder differs is refused
    (``ValueError``) rather than served another encoder's features. Features are keyed by the
    windows' token ids, masks, segments and step positions, and kept on the CPU.
    """

    def __init__(self) -> None:
        self.fingerprint: str | None = None
        self._feats: dict[str, Any] = {}
        self.computed = 0  #: trajectories encoded so far (the rest were read from the cache)

    def __len__(self) -> int:
        return len(self._feats)

    def bind(self, model) -> "BoundFeatures":
        """A view of the cache for ``model`` (a :class:`~prm_critic.text.prm.MiniLMStepPRM`), after checking
        that its encoder is the cache's; valid while that model's encoder weights stay unchanged."""
        from prm_critic.text.prm import MiniLMStepPRM, encoder_fingerprint

        if not isinstance(model, MiniLMStepPRM):
            raise TypeError(f"model: expected MiniLMStepPRM, got {type(model).__name__}")
        fp = encoder_fingerprint(model.net.encoder)
        if self.fingerprint is None:
            self.fingerprint = fp
        elif fp != self.fingerprint:
            raise ValueError(f"feature_cache: holds the features of encoder {self.fingerprint[:12]}..., got a model "
                             f"whose encoder is {fp[:12]}... (use one cache per encoder)")
        return BoundFeatures(self, model)

    @staticmethod
    def key(wins: Sequence[Encoded], pad_id: int) -> str:
        """The cache key of one trajectory's windows."""
        h = hashlib.sha256(f"pad {int(pad_id)}\n".encode())
        for w in wins:
            for a in (w.input_ids, w.attention_mask, w.segment_ids, w.step_positions):
                a = np.ascontiguousarray(a, dtype=np.int64)
                h.update(f"{a.size}\n".encode())
                h.update(a.tobytes())
        return h.hexdigest()


class BoundFeatures:
    """:meth:`FrozenFeatureCache.bind`'s view of the cache for one model."""

    def __init__(self, cache: FrozenFeatureCache, model) -> None:
        self.cache = cache
        self.model = model

    def _device(self):
        return next(self.model.net.parameters()).device

    def features(self, wins: list[Encoded]):
        """The encoder states ``(S, H)`` at the step positions of one trajectory's windows (window order),
        as :func:`train_text_prm` computes them: read from the cache, or computed (one pass) and kept."""
        k = FrozenFeatureCache.key(wins, self.model.layout.pad_id)
        f = self.cache._feats.get(k)
        if f is None:
            f = _step_features(self.model, wins, self._device()).cpu()
            self.cache._feats[k] = f
            self.cache.computed += 1
        return f

    def score_trajectory(self, prompt: str, steps: Sequence[str]):
        """The model's scores of one trajectory from the kept features: the StepScores ``(T,)`` of
        ``model.score_trajectory(prompt, steps)`` (up to float error), without an encoder pass for a
        trajectory already in the cache."""
        torch = require("torch")
        from prm_critic.critic import StepScores

        wins = self.model.encode(prompt, steps)
        net = self.model.net
        net.eval()
        with torch.inference_mode():
            p = torch.sigmoid(net.head(net.dropout(self.features(wins).to(self._device())))).float().cpu().numpy()
        return StepScores(p[:, 0], p[:, 1], {"truncated": truncated_per_step(wins)})


@dataclass(frozen=True)
class _TextRun:
    """What one :func:`train_text_prm` run fixes before its first epoch, passed whole to :func:`_fit`."""

    model: Any  # MiniLMStepPRM
    opt: Any
    data: list[tuple[list[Encoded], np.ndarray]]  # windows and targets per example
    feats: list  # cached encoder features per example (freeze_encoder), else []
    config: TextTrainConfig
    ckpt: Path | None  # checkpoint_dir
    fingerprint: str  # of the examples and config, written with each checkpoint
    device: Any
    tqdm: Any


def _fit(run: _TextRun, rng: random.Random, history: list[float], start_epoch: int) -> None:
    """Epochs ``start_epoch .. config.epochs - 1``: each epoch's mean loss is appended to ``history``
    and, with ``run.ckpt``, a checkpoint is written after it."""
    torch = require("torch")
    model, opt, data, feats, config, device = run.model, run.opt, run.data, run.feats, run.config, run.device
    net = model.net
    bce = torch.nn.BCEWithLogitsLoss()
    n_batches = math.ceil(len(data) / config.batch_size)
    bar = run.tqdm(total=config.epochs * n_batches, initial=start_epoch * n_batches, desc="train text PRM",
               unit="batch", disable=not config.show_progress)
    if config.freeze_encoder:
        for p in net.encoder.parameters():
            p.requires_grad_(False)
    try:
        for epoch in range(start_epoch, config.epochs):
            net.train()
            if config.freeze_encoder:
                net.encoder.eval()
            idx = list(range(len(data)))
            rng.shuffle(idx)
            tot, cnt = 0.0, 0
            for i in range(0, len(idx), config.batch_size):
                b = idx[i:i + config.batch_size]
                y = torch.from_numpy(np.concatenate([data[j][1] for j in b])).to(device)
                if config.freeze_encoder:
                    z = net.head(net.dropout(torch.cat([feats[j] for j in b]).to(device)))
                else:
                    t, rows, pos = _tensors(model, [w for j in b for w in data[j][0]], device)
                    z = net.logits(t["input_ids"], t["attention_mask"], t["segment_ids"])[rows, pos]
                loss = bce(z, y)
                opt.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_([p for p in net.parameters() if p.requires_grad], 1.0)
                opt.step()
                tot += float(loss.detach()) * len(y)
                cnt += len(y)
                bar.update(1)
                bar.set_postfix(loss=f"{tot / cnt:.4f}")
            history.append(tot / cnt)
            if run.ckpt is not None:
                net.eval()
                _write_state(run.ckpt, model, opt, rng, history, epoch + 1, run.fingerprint, config)
    finally:
        for p in net.encoder.parameters():
            p.requires_grad_(True)
        bar.close()

# ---------------------------------------------------------------------- checkpoint / resume
_STATE = "state.json"


def _fingerprint(examples: Sequence[StepwiseExample], config: TextTrainConfig) -> str:
    h = hashlib.sha256()
    for ex in examples:
        h.update(json.dumps(ex.to_dict(), sort_keys=True).encode())
        h.update(b"\n")
    # epochs is left out on purpose: re-running with more epochs extends a finished run
    cfg = {k: v for k, v in asdict(config).items() if k not in ("show_progress", "device", "checkpoint_dir", "epochs")}
    h.update(json.dumps(cfg, sort_keys=True).encode())
    return h.hexdigest()


def _rng_to_json(state) -> list:
    return [state[0], list(state[1]), state[2]]


def _rng_from_json(d) -> tuple:
    return (d[0], tuple(d[1]), d[2])


def _load_tensors(path: Path) -> dict:
    from safetensors.torch import load_file

    from prm_critic.integrity import CheckpointError

    try:
        return load_file(str(path))
    except Exception as exc:  # safetensors raises its own error type
        raise CheckpointError(f"checkpoint_dir: {str(path)!r} is corrupt or not a safetensors file ({exc})") from exc


def _read_state(ckpt: Path, fingerprint: str) -> dict | None:
    from prm_critic.integrity import CheckpointError

    f = ckpt / _STATE
    if not f.is_file():
        return None
    try:
        st = json.loads(f.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"checkpoint_dir: {str(f)!r} is not valid JSON ({exc})") from exc
    if st.get("fingerprint") != fingerprint:
        raise ValueError(f"checkpoint_dir: {str(ckpt)!r} holds a run with other examples or settings; "
                         "use a new checkpoint_dir (or delete it) to start over")
    return st


def _load_optimizer(opt, ckpt: Path, st: dict, device) -> None:
    from prm_critic._io import resolve_inside
    from prm_critic.integrity import check_sha256

    f = resolve_inside(ckpt, st["state"], what=f"checkpoint_dir: {str(ckpt / _STATE)!r} field 'state'")
    if st.get("state_sha256") is None:
        from prm_critic.integrity import CheckpointError

        raise CheckpointError(f"checkpoint_dir: {str(ckpt / _STATE)!r} records no 'state_sha256' (a training state "
                              "from an older version); use a new checkpoint_dir (or delete it) to start over")
    check_sha256(f.read_bytes() if f.is_file() else b"", st["state_sha256"], file=f, doc=ckpt / _STATE,
                 field="state_sha256", allow_unverified=False)
    t = _load_tensors(f)
    state: dict[int, dict[str, Any]] = {}
    for k, v in t.items():
        if k.startswith("opt."):
            _, idx, name = k.split(".", 2)
            state.setdefault(int(idx), {})[name] = v.to(device)
    opt.load_state_dict({"state": state, "param_groups": st["param_groups"]})


def _write_state(ckpt: Path, model, opt, rng, history, epochs_done: int, fingerprint: str, config) -> None:
    """Epoch checkpoint: model folder + optimizer/RNG tensors, then ``state.json`` (atomic) points
    at them; older epoch folders are removed only after that."""
    import shutil

    torch = require("torch")
    from safetensors.torch import save as save_bytes

    from prm_critic._io import atomic_write_bytes

    ckpt.mkdir(parents=True, exist_ok=True)
    name = f"epoch-{epochs_done:04d}"
    model.save(ckpt / name)
    sd = opt.state_dict()
    tensors = {"torch_rng": torch.get_rng_state()}
    for idx, st in sd["state"].items():
        for k, v in st.items():
            tensors[f"opt.{idx}.{k}"] = (v if torch.is_tensor(v) else torch.tensor(v)).detach().cpu().contiguous()
    state_file = f"{name}.state.safetensors"
    data = save_bytes(tensors)
    atomic_write_bytes(ckpt / state_file, data)
    from prm_critic.integrity import sha256_bytes

    doc = {"epochs_done": epochs_done, "model": name, "state": state_file, "state_sha256": sha256_bytes(data),
           "history": history,
           "python_rng": _rng_to_json(rng.getstate()), "param_groups": sd["param_groups"],
           "fingerprint": fingerprint, "config": asdict(config)}
    atomic_write_bytes(ckpt / _STATE, json.dumps(doc).encode())
    for old in ckpt.glob("epoch-*"):
        if old.name not in (name, state_file):
            shutil.rmtree(old) if old.is_dir() else old.unlink()


def _plot_loss(path: Path, history: list[float]) -> None:
    matplotlib = require("matplotlib", "torch")
    matplotlib.use("Agg")
    plt = require("matplotlib.pyplot", "torch")

    fig, ax = plt.subplots(figsize=(5, 3.2))
    ax.plot(range(1, len(history) + 1), history, marker="o", ms=3)
    ax.set_xlabel("epoch")
    ax.set_ylabel("mean BCE (progress + success)")
    ax.set_title("text PRM training loss")
    fig.tight_layout()
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=100)
    plt.close(fig)
    os.replace(tmp, path)
