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
once (one pass per trajectory) and the head is fit on them — seconds on a CPU.
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass, replace
from typing import Sequence

import numpy as np

from prm_critic._optional import require
from prm_critic.text.contract import Encoded, pad_batch
from prm_critic.text.trl_format import StepwiseExample

__all__ = ["TextTrainConfig", "train_text_prm", "step_targets"]

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
        if self.progress_target not in _PROGRESS_TARGETS:
            raise ValueError(f"progress_target: expected one of {_PROGRESS_TARGETS}, got {self.progress_target!r}")
        if not isinstance(self.freeze_encoder, bool):
            raise ValueError(f"freeze_encoder: expected a bool, got {self.freeze_encoder!r}")


def step_targets(ex: StepwiseExample, progress_target: str = "step_index") -> np.ndarray:
    """Targets ``(T, 2)`` float32 ``[progress, success]`` of one example (see module docstring)."""
    if progress_target not in _PROGRESS_TARGETS:
        raise ValueError(f"progress_target: expected one of {_PROGRESS_TARGETS}, got {progress_target!r}")
    succ = np.asarray(ex.labels, np.float32)
    if ex.progress is not None:
        prog = np.asarray(ex.progress, np.float32)
    elif progress_target == "labels":
        prog = succ.copy()
    else:
        n = len(ex.labels)
        prog = np.arange(1, n + 1, dtype=np.float32) / n
    return np.stack([prog, succ], axis=1)


def _check_examples(examples) -> list[StepwiseExample]:
    if isinstance(examples, (str, bytes)) or not isinstance(examples, Sequence):
        raise TypeError(f"examples: expected a list of StepwiseExample, got {type(examples).__name__}")
    examples = list(examples)
    if not examples:
        raise ValueError("examples: expected at least one StepwiseExample, got an empty list")
    for i, ex in enumerate(examples):
        if not isinstance(ex, StepwiseExample):
            raise TypeError(f"examples[{i}]: expected StepwiseExample, got {type(ex).__name__}")
    return examples


def train_text_prm(examples: Sequence[StepwiseExample], *, config: TextTrainConfig | None = None,
                   model=None):
    """Fit a MiniLMStepPRM to stepwise examples; returns the trained model (in eval mode).

    Args:
        examples: the training trajectories.
        config: :class:`TextTrainConfig` (default settings if ``None``).
        model: a :class:`~prm_critic.text.prm.MiniLMStepPRM` to continue training; ``None`` builds a
            fresh one on the bundled all-MiniLM-L6-v2 encoder (head seeded by ``config.seed``).

    The returned model's ``meta["training"]`` records the config, the number of examples/steps and
    the mean loss of each epoch.
    """
    torch = require("torch")
    from prm_critic.text.prm import MiniLMStepPRM

    config = config or TextTrainConfig()
    if not isinstance(config, TextTrainConfig):
        raise TypeError(f"config: expected TextTrainConfig or None, got {type(config).__name__}")
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
    tqdm = require("tqdm").tqdm

    device = torch.device(config.device)
    net = model.net.to(device)
    rng = random.Random(config.seed)
    torch.manual_seed(config.seed)

    # encode once: windows + targets per example
    data: list[tuple[list[Encoded], np.ndarray]] = []
    for ex in examples:
        wins = model.contract.encode_trajectory(model.tokenizer, ex.prompt, ex.completions, layout=model.layout)
        tgt = step_targets(ex, config.progress_target)
        order = np.concatenate([w.step_indices for w in wins])
        data.append((wins, tgt[order]))
    n_steps = int(sum(len(t) for _, t in data))
    bce = torch.nn.BCEWithLogitsLoss()
    history: list[float] = []

    def batches():
        idx = list(range(len(data)))
        rng.shuffle(idx)
        for i in range(0, len(idx), config.batch_size):
            yield idx[i:i + config.batch_size]

    n_batches = math.ceil(len(data) / config.batch_size)
    bar = tqdm(total=config.epochs * n_batches, desc="train text PRM", unit="batch", disable=not config.show_progress)

    if config.freeze_encoder:
        # cache encoder features at step positions (one pass per trajectory, no grad)
        net.eval()
        feats: list = []
        with torch.no_grad():
            for wins, _ in data:
                bt = pad_batch(wins, model.layout.pad_id)
                t = {k: torch.from_numpy(bt[k]).to(device) for k in ("input_ids", "attention_mask", "segment_ids")}
                h = net.hidden(t["input_ids"], t["attention_mask"], t["segment_ids"])
                feats.append(h[torch.from_numpy(bt["step_row"]).to(device), torch.from_numpy(bt["step_positions"]).to(device)].clone())
        for p in net.encoder.parameters():
            p.requires_grad_(False)
        opt = torch.optim.AdamW(net.head.parameters(), lr=config.lr, weight_decay=config.weight_decay)
        net.train()
        try:
            for _ in range(config.epochs):
                tot, cnt = 0.0, 0
                for b in batches():
                    x = torch.cat([feats[i] for i in b]).to(device)
                    y = torch.from_numpy(np.concatenate([data[i][1] for i in b])).to(device)
                    loss = bce(net.head(net.dropout(x)), y)
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
                    tot += float(loss.detach()) * len(y)
                    cnt += len(y)
                    bar.update(1)
                    bar.set_postfix(loss=f"{tot / cnt:.4f}")
                history.append(tot / cnt)
        finally:
            for p in net.encoder.parameters():
                p.requires_grad_(True)
    else:
        opt = torch.optim.AdamW([
            {"params": list(net.head.parameters()), "lr": config.lr},
            {"params": list(net.encoder.parameters()), "lr": config.encoder_lr},
        ], weight_decay=config.weight_decay)
        net.train()
        for _ in range(config.epochs):
            tot, cnt = 0.0, 0
            for b in batches():
                wins = [w for i in b for w in data[i][0]]
                y = torch.from_numpy(np.concatenate([data[i][1] for i in b])).to(device)
                bt = pad_batch(wins, model.layout.pad_id)
                t = {k: torch.from_numpy(bt[k]).to(device) for k in ("input_ids", "attention_mask", "segment_ids")}
                z = net.logits(t["input_ids"], t["attention_mask"], t["segment_ids"])
                z = z[torch.from_numpy(bt["step_row"]).to(device), torch.from_numpy(bt["step_positions"]).to(device)]
                loss = bce(z, y)
                opt.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
                opt.step()
                tot += float(loss.detach()) * len(y)
                cnt += len(y)
                bar.update(1)
                bar.set_postfix(loss=f"{tot / cnt:.4f}")
            history.append(tot / cnt)
    bar.close()
    net.eval()
    model.meta = {**model.meta, "training": {"config": asdict(config), "examples": len(data), "steps": n_steps,
                                             "epoch_loss": [round(v, 6) for v in history]}}
    return model
