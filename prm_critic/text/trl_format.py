"""TRL's stepwise-supervision format, with soft (float) labels kept as floats.

One example is ``{"prompt": str, "completions": list[str], "labels": list[float]}``: the prompt
and the ``T`` steps that follow it, one label per step -- the layout of the Hugging Face stepwise
datasets (``trl-lib/math_shepherd`` and the like) and of TRL's ``PRMTrainer``.

Which TRL works with what:

* ``PRMTrainer`` was added in TRL 0.13 and lived in ``trl.experimental.prm`` in its last releases;
  TRL 1.13 is the last release that has it (it was removed in 1.14). It expects ``bool`` labels
  and casts each label with ``int()``, so a soft label such as 0.7 trains as 0. For TRL <= 1.13,
  write hard labels: ``write_stepwise_jsonl(path, examples, bool_threshold=0.5)`` (or
  ``to_columns(..., bool_threshold=...)``) writes ``label >= bool_threshold`` as ``true``/``false``.
* With TRL >= 1.14 there is no ``PRMTrainer``; the files are plain JSON Lines that
  ``datasets.load_dataset("json", ...)`` reads with any version.
* This library's own trainer (:func:`prm_critic.text.train.train_text_prm`) and readers keep soft
  labels as floats.

Differences from TRL, on purpose:

* labels are floats in [0, 1] and stay floats (Monte-Carlo labels such as 0.7 are the point of
  soft labels). ``bool`` / ``int`` labels are accepted and converted to 0.0 / 1.0 (a file written
  with ``bool_threshold`` reads back as 0.0 / 1.0).
* an optional second label list, ``progress`` (same length as ``labels``), carries a progress
  target per step; ``labels`` is the success ("promise") target. See
  :func:`prm_critic.text.train.train_text_prm` for what is used when ``progress`` is absent.

JSON Lines files hold one example per line; :func:`write_stepwise_jsonl` writes atomically.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from prm_critic import validate
from prm_critic._io import atomic_write_bytes
from prm_critic.text.steps import NON_UTF8_KEY, clean_text

__all__ = [
    "StepwiseExample",
    "read_stepwise_jsonl",
    "write_stepwise_jsonl",
    "to_columns",
    "from_columns",
]


def _as_labels(values: Any, name: str, n: int) -> list[float]:
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise TypeError(f"{name}: expected a list of {n} floats in [0, 1], got {type(values).__name__}")
    out = []
    for i, v in enumerate(values):
        if isinstance(v, bool):
            v = float(v)
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            v = float(v)
        else:
            try:  # numpy scalars
                import numpy as np

                if isinstance(v, (np.floating, np.integer, np.bool_)):
                    v = float(v)
                else:
                    raise TypeError
            except TypeError:
                raise TypeError(f"{name}[{i}]: expected a float in [0, 1], got {v!r} ({type(v).__name__})") from None
        if not math.isfinite(v) or v < 0.0 or v > 1.0:
            raise ValueError(f"{name}[{i}]: expected a float in [0, 1], got {v!r}")
        out.append(v)
    if len(out) != n:
        raise ValueError(f"{name}: expected {n} labels (one per completion step), got {len(out)}")
    return out


@dataclass
class StepwiseExample:
    """One stepwise-supervised trajectory.

    Attributes:
        prompt: the task / objective.
        completions: the ``T >= 1`` step texts, in order.
        labels: ``T`` floats in [0, 1]: per-step success ("promise") targets.
        progress: optional ``T`` floats in [0, 1]: per-step progress targets.
        extra: notes, not written to files: ``"non_utf8_replaced"`` counts the characters of
            ``prompt`` and ``completions`` that were not valid Unicode (e.g. tool output decoded
            with ``surrogateescape``) and were replaced by U+FFFD
            (:func:`prm_critic.text.clean_text`); absent when there were none.

    Raises:
        TypeError / ValueError naming the field on a wrong type, an empty step list, a label outside
        [0, 1], or a label list whose length differs from ``completions``.
    """

    prompt: str
    completions: list[str]
    labels: list[float]
    progress: list[float] | None = field(default=None)
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    def __post_init__(self):
        if not isinstance(self.prompt, str):
            raise TypeError(f"prompt: expected str, got {type(self.prompt).__name__}")
        comps = validate.check_list("completions", self.completions, str, noun="step")
        self.prompt, replaced = clean_text(self.prompt)
        for i, c in enumerate(comps):
            comps[i], n = clean_text(c)
            replaced += n
        self.extra = dict(self.extra or {})
        if replaced:
            self.extra[NON_UTF8_KEY] = int(self.extra.get(NON_UTF8_KEY, 0)) + replaced
        self.completions = comps
        self.labels = _as_labels(self.labels, "labels", len(comps))
        if self.progress is not None:
            self.progress = _as_labels(self.progress, "progress", len(comps))

    def __len__(self) -> int:
        return len(self.completions)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"prompt": self.prompt, "completions": list(self.completions), "labels": list(self.labels)}
        if self.progress is not None:
            d["progress"] = list(self.progress)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], *, where: str = "example") -> "StepwiseExample":
        if not isinstance(d, Mapping):
            raise TypeError(f"{where}: expected an object with prompt, completions, labels, got {type(d).__name__}")
        missing = [k for k in ("prompt", "completions", "labels") if k not in d]
        if missing:
            raise KeyError(f"{where}: missing field(s) {missing} (expected prompt, completions, labels[, progress])")
        try:
            return cls(d["prompt"], d["completions"], d["labels"], d.get("progress"))
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"{where}: {exc}") from None


def read_stepwise_jsonl(path: str | os.PathLike) -> list[StepwiseExample]:
    """Read a JSON Lines file of stepwise examples (blank lines are skipped).

    Errors name the file and the 1-based line number.
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"path: {str(p)!r} does not exist (expected a .jsonl file of stepwise examples)")
    out = []
    with p.open("r", encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{p.name}:{lineno}"
            try:
                d = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{where}: not valid JSON ({exc.msg})") from None
            out.append(StepwiseExample.from_dict(d, where=where))
    return out


def _check_threshold(bool_threshold: Any) -> float | None:
    if bool_threshold is None:
        return None
    if (isinstance(bool_threshold, bool) or not isinstance(bool_threshold, (int, float))
            or not math.isfinite(bool_threshold) or not 0.0 < float(bool_threshold) <= 1.0):
        raise ValueError(f"bool_threshold: expected None (soft float labels) or a float in (0, 1] (labels >= it are "
                         f"written true), got {bool_threshold!r}")
    return float(bool_threshold)


def _labels_out(labels: list[float], threshold: float | None) -> list:
    return list(labels) if threshold is None else [v >= threshold for v in labels]


def write_stepwise_jsonl(path: str | os.PathLike, examples: Iterable[StepwiseExample], *,
                         bool_threshold: float | None = None) -> Path:
    """Write ``examples`` as JSON Lines, atomically (temp file in the same folder + ``os.replace``).

    Args:
        bool_threshold: ``None`` (default): labels are written as floats (soft labels kept). A float
            in (0, 1]: ``labels`` are written as booleans ``label >= bool_threshold``, for TRL's
            ``PRMTrainer`` (TRL <= 1.13), which would otherwise turn every soft label below 1 into
            0. ``progress`` labels, if any, stay floats (TRL does not read them).
    """
    threshold = _check_threshold(bool_threshold)
    p = Path(path)
    lines = []
    for i, ex in enumerate(examples):
        if not isinstance(ex, StepwiseExample):
            raise TypeError(f"examples[{i}]: expected StepwiseExample, got {type(ex).__name__}")
        d = ex.to_dict()
        d["labels"] = _labels_out(ex.labels, threshold)
        lines.append(json.dumps(d, ensure_ascii=False))
    data = ("\n".join(lines) + ("\n" if lines else "")).encode("utf-8")
    atomic_write_bytes(p, data)
    return p


def to_columns(examples: Sequence[StepwiseExample], *, bool_threshold: float | None = None) -> dict[str, list]:
    """Examples -> a Hugging Face ``datasets``-style dict of lists (``Dataset.from_dict`` input).

    The ``progress`` column is present only if every example has progress labels.
    ``bool_threshold``: as in :func:`write_stepwise_jsonl` (``None``: float labels).
    """
    threshold = _check_threshold(bool_threshold)
    cols: dict[str, list] = {"prompt": [], "completions": [], "labels": []}
    with_progress = bool(examples) and all(ex.progress is not None for ex in examples)
    if with_progress:
        cols["progress"] = []
    for ex in examples:
        cols["prompt"].append(ex.prompt)
        cols["completions"].append(list(ex.completions))
        cols["labels"].append(_labels_out(ex.labels, threshold))
        if with_progress:
            assert ex.progress is not None, "with_progress: every example has progress labels"
            cols["progress"].append(list(ex.progress))
    return cols


def from_columns(columns: Mapping[str, Sequence]) -> list[StepwiseExample]:
    """A dict of lists (e.g. ``dataset.to_dict()``) -> examples. Columns must have equal lengths."""
    missing = [k for k in ("prompt", "completions", "labels") if k not in columns]
    if missing:
        raise KeyError(f"columns: missing column(s) {missing} (expected prompt, completions, labels[, progress])")
    n = len(columns["prompt"])
    for k in ("completions", "labels", "progress"):
        if k in columns and len(columns[k]) != n:
            raise ValueError(f"columns[{k!r}]: expected {n} rows like 'prompt', got {len(columns[k])}")
    prog = columns.get("progress")
    return [
        StepwiseExample.from_dict(
            {"prompt": columns["prompt"][i], "completions": columns["completions"][i], "labels": columns["labels"][i],
             **({"progress": prog[i]} if prog is not None else {})},
            where=f"row {i}",
        )
        for i in range(n)
    ]
