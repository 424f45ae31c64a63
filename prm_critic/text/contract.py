"""The text step contract: ONE rendering of (prompt, steps) to tokens, shared by training, scoring,
ONNX export and serving.

Layout (``T`` steps, ``sep`` = the separator's token ids, ``open`` = ``[CLS]`` or ``<bos>`` or
nothing, ``close`` = ``sep`` after the prompt or nothing)::

    open  prompt_ids  close | step_0_ids sep | step_1_ids sep | ... | step_{T-1}_ids sep
    seg 0 ..................| seg 1 ........ | seg 2 ........ | ... | seg T

* The score of step ``t`` is read at the LAST token of the separator that follows it (as TRL's
  ``PRMTrainer``, TRL 0.13 to 1.13, puts each step's label on the last token of
  ``step + separator``): ``step_positions[t]``.
* ``segment_ids`` give each token its segment: 0 for ``open``/prompt/``close``, ``k + 1`` for the
  ``k``-th step of the window (padding: 0, masked by ``attention_mask``). Models that want step
  ``t``'s score to depend only on the prompt and steps ``<= t`` (so that one pass over the whole
  trajectory equals scoring each prefix separately, also for a bidirectional encoder) let token
  ``i`` attend to token ``j`` only if ``segment_ids[j] <= segment_ids[i]`` (:func:`block_causal_mask`).
* Truncation, when ``open + prompt + close + steps`` exceeds ``max_length`` tokens:

  1. the prompt keeps its HEAD: at most ``max_prompt_tokens`` tokens (the objective is usually
     stated first);
  2. whole steps of OLDER history are dropped from the left: when the window overflows, oldest
     steps are dropped until the kept steps use at most ``refill`` of the step budget (default
     0.5). The kept history then stays put until the window overflows again, so consecutive steps
     share one window and a long trajectory is scored with about ``1 / (1 - refill)`` times its
     tokens instead of one window per step. ``refill=1.0`` drops as little as possible (every step
     beyond the limit then needs its own window). The start of step ``t``'s context is a
     deterministic function of ``(prompt, steps[:t+1])`` (:meth:`StepContract.starts`);
  3. if the scored step alone still does not fit, its own text is cut from the left (its end,
     where a tool result's outcome usually is, is kept).

  Late steps are therefore never dropped (TRL cuts from the right and silently loses the labels
  of late steps). Every truncation is reported in :class:`Encoded` (``truncated``,
  ``dropped_steps``, ``prompt_tokens_dropped``, ``step_tokens_dropped``).

Scoring step ``t`` *in context* means encoding ``(prompt, steps[:t+1])`` with the rule above and
reading the last position. :meth:`StepContract.encode_trajectory` covers all ``T`` steps of one
trajectory with as few windows as possible such that every step sees exactly the context it would
see when encoded alone (usually ONE window: all steps in one forward pass).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from prm_critic import validate
from prm_critic.text.steps import TextStep

__all__ = ["StepContract", "TokenLayout", "Encoded", "pad_batch", "block_causal_mask", "check_text_steps", "batch_by_tokens"]

_OPEN = ("cls", "bos", "none")


@dataclass(frozen=True)
class TokenLayout:
    """The contract resolved against one tokenizer (token ids only; cheap to keep around)."""

    open_ids: tuple[int, ...]
    close_ids: tuple[int, ...]
    sep_ids: tuple[int, ...]
    pad_id: int


@dataclass(frozen=True)
class Encoded:
    """One encoded window of one trajectory (1-D arrays, length ``L <= max_length``).

    Attributes:
        input_ids: int64 ``(L,)``.
        attention_mask: int64 ``(L,)``, all ones (padding is added by :func:`pad_batch`).
        segment_ids: int64 ``(L,)``: 0 for the prompt part, ``k + 1`` for the window's ``k``-th step.
        step_positions: int64 ``(S,)``: index of the token whose output scores each scored step.
        step_indices: int64 ``(S,)``: which step of the trajectory (0-based) each position scores.
        first_step: index of the oldest trajectory step present in the window.
        dropped_steps: how many older steps were dropped before ``first_step`` (== ``first_step``).
        prompt_tokens_dropped: prompt tokens cut from the end of the prompt.
        step_tokens_dropped: tokens cut from the left of the (single) over-long scored step.
    """

    input_ids: np.ndarray
    attention_mask: np.ndarray
    segment_ids: np.ndarray
    step_positions: np.ndarray
    step_indices: np.ndarray
    first_step: int = 0
    dropped_steps: int = 0
    prompt_tokens_dropped: int = 0
    step_tokens_dropped: int = 0

    @property
    def truncated(self) -> bool:
        return bool(self.dropped_steps or self.prompt_tokens_dropped or self.step_tokens_dropped)

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])


@dataclass(frozen=True)
class StepContract:
    """How a trajectory becomes tokens, and where each step's score is read.

    Args:
        max_length: maximum tokens per window (>= 8; at most the model's position limit).
            Default 512 (MiniLM's limit).
        max_prompt_tokens: the prompt keeps at most this many tokens (its head); must leave room
            for steps: ``max_prompt_tokens <= max_length // 2``.
        separator: text appended after every step, encoded with
            ``tokenizer.encode(separator, add_special_tokens=False)``; ``None`` = the tokenizer's
            ``sep_token`` (``[SEP]`` for BERT). The score is read at its last token.
        open: what starts the sequence: ``"cls"`` (BERT ``[CLS]``), ``"bos"`` (the tokenizer's
            BOS if it has one, as TRL does), or ``"none"``.
        close_prompt: append the separator after the prompt too (BERT style); TRL does not.
        refill: in (0, 1]: after an overflow, the kept steps use at most this fraction of the
            step budget (see the truncation rule above).
    """

    max_length: int = 512
    max_prompt_tokens: int = 128
    separator: str | None = None
    open: str = "cls"
    close_prompt: bool = True
    refill: float = 0.5

    def __post_init__(self):
        validate.check_int("max_length", self.max_length, minimum=8)
        if (isinstance(self.max_prompt_tokens, bool) or not isinstance(self.max_prompt_tokens, int)
                or not 0 <= self.max_prompt_tokens <= self.max_length // 2):
            raise ValueError(
                f"max_prompt_tokens: expected an int in [0, max_length // 2 = {self.max_length // 2}], "
                f"got {self.max_prompt_tokens!r}")
        validate.check_str("separator", self.separator, allow_none=True)
        validate.check_choice("open", self.open, _OPEN)
        validate.check_flag("close_prompt", self.close_prompt)
        if (isinstance(self.refill, bool) or not isinstance(self.refill, (int, float))
                or not 0.0 < float(self.refill) <= 1.0):
            raise ValueError(f"refill: expected a float in (0, 1], got {self.refill!r}")

    # ------------------------------------------------------------------ (de)serialisation
    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "StepContract":
        return validate.config_from_dict(cls, dict(d), name="contract")

    @classmethod
    def trl(cls, *, separator: str = "\n", max_length: int = 1024, max_prompt_tokens: int = 256,
            refill: float = 0.5) -> "StepContract":
        """The layout TRL's PRMTrainer (TRL <= 1.13) trains on: ``<bos>? prompt (step sep)*``, read at ``sep``'s
        last token."""
        return cls(max_length=max_length, max_prompt_tokens=max_prompt_tokens, separator=separator,
                   open="bos", close_prompt=False, refill=refill)

    # ------------------------------------------------------------------ tokenizer binding
    def layout(self, tokenizer) -> TokenLayout:
        """Resolve the contract's special tokens against ``tokenizer``.

        Raises ValueError if the separator encodes to no tokens (e.g. ``"\\n"`` under a BERT
        tokenizer, which drops whitespace) or to the unknown token (a character outside the
        vocabulary), or the tokenizer lacks a token the contract needs.
        """
        if self.separator is None:
            sep_tok = getattr(tokenizer, "sep_token", None)
            if sep_tok is None:
                raise ValueError("separator: None means the tokenizer's sep_token, but this tokenizer has none; pass separator=")
            sep_ids: tuple[int, ...] = (int(tokenizer.convert_tokens_to_ids(sep_tok)),)
        else:
            sep_ids = tuple(int(i) for i in tokenizer.encode(self.separator, add_special_tokens=False))
            if not sep_ids:
                raise ValueError(
                    f"separator: {self.separator!r} encodes to no tokens with this tokenizer (it drops it); "
                    "choose a separator that survives tokenization, e.g. its sep_token")
        unk = getattr(tokenizer, "unk_token_id", None)
        if unk is not None and int(unk) in sep_ids:
            shown = self.separator if self.separator is not None else getattr(tokenizer, "sep_token", None)
            raise ValueError(
                f"separator: {shown!r} is not in the tokenizer's vocabulary: it encodes to "
                f"{tokenizer.convert_ids_to_tokens(list(sep_ids))} (ids {list(sep_ids)}, unknown token id {int(unk)}), "
                "so scores would be read at unknown-token positions; expected a separator made of known tokens, "
                "e.g. the tokenizer's sep_token")
        if self.open == "cls":
            cls_id = getattr(tokenizer, "cls_token_id", None)
            if cls_id is None:
                raise ValueError("open: 'cls' but the tokenizer has no cls_token; use open='bos' or 'none'")
            open_ids: tuple[int, ...] = (int(cls_id),)
        elif self.open == "bos":
            bos = getattr(tokenizer, "bos_token_id", None)
            open_ids = () if bos is None else (int(bos),)
        else:
            open_ids = ()
        close_ids = sep_ids if self.close_prompt else ()
        pad = getattr(tokenizer, "pad_token_id", None)
        if pad is None:
            pad = getattr(tokenizer, "eos_token_id", None)
        pad = 0 if pad is None else int(pad)
        if len(open_ids) + len(close_ids) + self.max_prompt_tokens + len(sep_ids) + 1 > self.max_length:
            raise ValueError(f"max_length: {self.max_length} leaves no room for a step after the prompt and separators")
        return TokenLayout(open_ids, close_ids, sep_ids, pad)

    def tokenize(self, tokenizer, texts: Sequence[str]) -> list[list[int]]:
        """Token ids of each text, without special tokens (batched)."""
        if not texts:
            return []
        return [list(x) for x in tokenizer(list(texts), add_special_tokens=False)["input_ids"]]

    # ------------------------------------------------------------------ planning
    def _budget(self, lay: TokenLayout, n_prompt: int) -> int:
        """Tokens available for steps (each step's tokens + its separator)."""
        return self.max_length - len(lay.open_ids) - min(n_prompt, self.max_prompt_tokens) - len(lay.close_ids)

    def starts(self, lay: TokenLayout, n_prompt: int, step_lens: Sequence[int]) -> list[int]:
        """For each step ``t``, the oldest step kept when ``(prompt, steps[:t+1])`` is encoded.

        Depends only on the lengths of the prompt and of steps ``<= t``: on overflow, drop the oldest
        steps until the kept ones use at most ``refill * budget`` tokens (never the step itself).
        """
        budget = self._budget(lay, n_prompt)
        target = self.refill * budget
        cost = [n + len(lay.sep_ids) for n in step_lens]
        out, s, used = [], 0, 0
        for t, c in enumerate(cost):
            used += c
            if used > budget:
                while s < t and used > target:
                    used -= cost[s]
                    s += 1
            out.append(s)
        return out

    # ------------------------------------------------------------------ encoding
    def _render(self, lay: TokenLayout, prompt_ids: list[int], step_ids: Sequence[list[int]], first: int,
                last: int, scored: Sequence[int]) -> Encoded:
        p = prompt_ids[: self.max_prompt_tokens]
        ids = list(lay.open_ids) + p + list(lay.close_ids)
        seg = [0] * len(ids)
        budget = self._budget(lay, len(prompt_ids))
        positions, step_cut = {}, 0
        for k, t in enumerate(range(first, last + 1)):
            s = step_ids[t]
            room = budget - len(lay.sep_ids)
            if first == last and len(s) > room:  # a single over-long step: keep its end
                step_cut = len(s) - room
                s = s[step_cut:]
            ids.extend(s)
            ids.extend(lay.sep_ids)
            seg.extend([k + 1] * (len(s) + len(lay.sep_ids)))
            positions[t] = len(ids) - 1
        assert len(ids) <= self.max_length, (len(ids), self.max_length)
        scored = list(scored)
        return Encoded(
            input_ids=np.asarray(ids, dtype=np.int64),
            attention_mask=np.ones(len(ids), dtype=np.int64),
            segment_ids=np.asarray(seg, dtype=np.int64),
            step_positions=np.asarray([positions[t] for t in scored], dtype=np.int64),
            step_indices=np.asarray(scored, dtype=np.int64),
            first_step=first,
            dropped_steps=first,
            prompt_tokens_dropped=max(0, len(prompt_ids) - self.max_prompt_tokens),
            step_tokens_dropped=step_cut,
        )

    def encode(self, tokenizer, prompt: str, steps: Sequence[str], *, layout: TokenLayout | None = None) -> Encoded:
        """Encode ``(prompt, steps)`` so that the LAST step gets as much context as fits; every step
        kept in the window gets a position (``step_indices`` says which)."""
        steps = _check_steps(prompt, steps)
        lay = layout or self.layout(tokenizer)
        ids = self.tokenize(tokenizer, [prompt, *steps])
        starts = self.starts(lay, len(ids[0]), [len(s) for s in ids[1:]])
        first, last = starts[-1], len(steps) - 1
        return self._render(lay, ids[0], ids[1:], first, last, range(first, last + 1))

    def encode_trajectory(self, tokenizer, prompt: str, steps: Sequence[str], *,
                          layout: TokenLayout | None = None, token_ids: list[list[int]] | None = None) -> list[Encoded]:
        """Windows covering all ``T`` steps; step ``t`` is scored in the window whose context is the
        one :meth:`encode` gives ``(prompt, steps[:t+1])``. One window when nothing is truncated.

        ``token_ids`` may pass pre-tokenized ``[prompt_ids, step_0_ids, ...]``.
        """
        steps = _check_steps(prompt, steps)
        lay = layout or self.layout(tokenizer)
        ids = token_ids if token_ids is not None else self.tokenize(tokenizer, [prompt, *steps])
        starts = self.starts(lay, len(ids[0]), [len(s) for s in ids[1:]])
        out, t = [], 0
        while t < len(steps):
            u = t
            while u + 1 < len(steps) and starts[u + 1] == starts[t]:
                u += 1
            out.append(self._render(lay, ids[0], ids[1:], starts[t], u, range(t, u + 1)))
            t = u + 1
        return out


    def plan_steps(self, tokenizer, steps: Sequence[TextStep], *, layout: TokenLayout | None = None
                   ) -> tuple[list[Encoded], list[tuple[int, int]]]:
        """Windows for a batch of TextSteps scored in context: a step whose in-context encoding is a
        prefix of another step's window shares that window (one forward row).

        Returns ``(windows, where)``: ``where[i] = (window index, index into that window's
        step_positions)`` for ``steps[i]``. ``step_indices`` / ``first_step`` of each window count
        steps of the original trajectory (``history`` + ``step``).
        """
        contract = self
        lay = layout or self.layout(tokenizer)
        steps = check_text_steps(steps)
        # tokenize every distinct text once
        texts: dict[str, int] = {}
        for s in steps:
            for x in (s.prompt, *s.history, s.step):
                texts.setdefault(x, len(texts))
        order = list(texts)
        ids = contract.tokenize(tokenizer, order)
        tok = {x: ids[i] for i, x in enumerate(order)}

        # context (prompt, kept steps) of each TextStep under the truncation rule
        ctx = []
        for s in steps:
            full = (*s.history, s.step)
            start = contract.starts(lay, len(tok[s.prompt]), [len(tok[x]) for x in full])[-1]
            ctx.append((s.prompt, full[start:], start))
        # longest first; a shorter context joins a window whose kept steps start with it
        order_idx = sorted(range(len(steps)), key=lambda i: -len(ctx[i][1]))
        prefix_owner: dict[tuple, int] = {}
        groups: list[tuple[str, tuple[str, ...], int]] = []
        member: dict[int, tuple[int, int]] = {}
        for i in order_idx:
            prompt, kept, start = ctx[i]
            key = (prompt, kept)
            g = prefix_owner.get(key)
            if g is None:
                g = len(groups)
                groups.append((prompt, kept, start))
                for k in range(1, len(kept) + 1):
                    prefix_owner.setdefault((prompt, kept[:k]), g)
            member[i] = (g, len(kept) - 1)
        windows: list[Encoded] = []
        for prompt, kept, start in groups:
            tids = [tok[prompt]] + [tok[x] for x in kept]
            w = contract._render(lay, tids[0], tids[1:], 0, len(kept) - 1, range(len(kept)))
            # report truncation relative to the original trajectory
            windows.append(Encoded(w.input_ids, w.attention_mask, w.segment_ids, w.step_positions,
                                   w.step_indices + start, start, start, w.prompt_tokens_dropped,
                                   w.step_tokens_dropped))
        return windows, [member[i] for i in range(len(steps))]


def _check_steps(prompt: Any, steps: Any) -> list[str]:
    if not isinstance(prompt, str):
        raise TypeError(f"prompt: expected str, got {type(prompt).__name__}")
    return validate.check_list("steps", steps, str, noun="step")


def pad_batch(windows: Sequence[Encoded], pad_id: int = 0) -> dict[str, np.ndarray]:
    """Right-pad windows to a batch: ``input_ids``, ``attention_mask``, ``segment_ids`` of shape
    ``(B, L_max)`` int64, plus ``step_row`` / ``step_positions`` of shape ``(S_total,)`` (the row and
    token index of every scored step, in window order)."""
    if not windows:
        raise ValueError("windows: expected at least one Encoded window, got none")
    n = max(len(w) for w in windows)
    b = len(windows)
    ids = np.full((b, n), pad_id, dtype=np.int64)
    att = np.zeros((b, n), dtype=np.int64)
    seg = np.zeros((b, n), dtype=np.int64)
    rows, pos = [], []
    for i, w in enumerate(windows):
        m = len(w)
        ids[i, :m] = w.input_ids
        att[i, :m] = w.attention_mask
        seg[i, :m] = w.segment_ids
        rows.append(np.full(len(w.step_positions), i, dtype=np.int64))
        pos.append(w.step_positions)
    return {"input_ids": ids, "attention_mask": att, "segment_ids": seg,
            "step_row": np.concatenate(rows), "step_positions": np.concatenate(pos)}


def block_causal_mask(attention_mask, segment_ids):
    """Boolean ``(B, L, L)`` mask: query ``i`` may attend to key ``j`` iff ``j`` is not padding and
    ``segment_ids[j] <= segment_ids[i]``. Works on numpy arrays and torch tensors alike."""
    keys_ok = attention_mask[:, None, :] > 0
    return (segment_ids[:, None, :] <= segment_ids[:, :, None]) & keys_ok


def check_text_steps(steps: Any, name: str = "steps") -> list[TextStep]:
    """Validate a batch of TextSteps: a non-empty sequence whose items are all :class:`TextStep`."""
    if isinstance(steps, (str, bytes, TextStep)) or not isinstance(steps, Sequence):
        raise TypeError(f"{name}: expected a sequence of TextStep, got {type(steps).__name__}")
    steps = list(steps)
    if not steps:
        raise ValueError(f"{name}: expected a non-empty batch of TextStep, got 0 steps")
    for i, s in enumerate(steps):
        if not isinstance(s, TextStep):
            raise TypeError(f"{name}[{i}]: expected TextStep, got {type(s).__name__} ({str(s)[:60]!r})")
    return steps


def batch_by_tokens(windows: Sequence[Any], max_batch_tokens: int) -> list[list[int]]:
    """Group window indices into batches whose padded size ``width * count`` stays within
    ``max_batch_tokens`` (longest windows first, so padding is small). A window longer than the
    budget gets a batch of its own."""
    order = sorted(range(len(windows)), key=lambda i: -len(windows[i]))
    batches: list[list[int]] = []
    cur: list[int] = []
    for i in order:
        width = len(windows[cur[0]]) if cur else len(windows[i])
        if cur and width * (len(cur) + 1) > max_batch_tokens:
            batches.append(cur)
            cur = []
        cur.append(i)
    if cur:
        batches.append(cur)
    return batches


def read_batches(windows: Sequence[Encoded], batches: Sequence[Sequence[int]], pad_id: int,
                 forward: Callable[[dict[str, np.ndarray]], Any]) -> np.ndarray:
    """``forward(pad_batch(batch))`` -> one row per scored step of the batch, for each batch of window
    indices (:func:`batch_by_tokens`, or consecutive chunks), put back in window order."""
    out: dict[int, Any] = {}
    for b in batches:
        ws = [windows[i] for i in b]
        sel = forward(pad_batch(ws, pad_id))
        k = 0
        for i, w in zip(b, ws):
            out[i] = sel[k:k + len(w.step_positions)]
            k += len(w.step_positions)
    return np.concatenate([out[i] for i in range(len(windows))])


def score_in_context(run: Callable[[list[Encoded]], np.ndarray], contract: StepContract, tokenizer,
                     layout: TokenLayout, steps: Any, *, shared: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """``run(windows)`` (one row per scored step, in window order) at each TextStep of ``steps`` scored in
    context, and 1.0 where that context was cut. ``shared``: steps whose contexts are prefixes of each
    other share one window (:meth:`StepContract.plan_steps`); otherwise each step gets a window of its own
    prefix, read at its last step (what a bidirectional model needs)."""
    steps = check_text_steps(steps)
    if shared:
        windows, where = contract.plan_steps(tokenizer, steps, layout=layout)
    else:
        windows = [replace(w, step_positions=w.step_positions[-1:], step_indices=w.step_indices[-1:])
                   for w in (contract.encode(tokenizer, s.prompt, [*s.history, s.step], layout=layout) for s in steps)]
        where = [(i, 0) for i in range(len(steps))]
    out = run(windows)
    offsets = np.cumsum([0] + [len(w.step_positions) for w in windows])
    return (out[np.asarray([offsets[g] + k for g, k in where])],
            np.asarray([float(windows[g].truncated) for g, _ in where], np.float32))


def score_trajectory_windows(run: Callable[[list[Encoded]], np.ndarray], contract: StepContract, tokenizer,
                             layout: TokenLayout, prompt: str, steps: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """``run(windows)`` over the windows of one trajectory (:meth:`StepContract.encode_trajectory`), and
    per step 1.0 where its history was cut."""
    windows = contract.encode_trajectory(tokenizer, prompt, steps, layout=layout)
    return run(windows), truncated_per_step(windows)


def truncated_per_step(windows: Sequence[Encoded]) -> np.ndarray:
    """1.0 for each scored step of ``windows`` whose window was cut, in window order."""
    return np.concatenate([np.full(len(w.step_positions), float(w.truncated), np.float32) for w in windows])
