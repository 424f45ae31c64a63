"""The text PRM network (torch): an encoder plus a (progress, success) head at step positions.

This module imports torch; :mod:`prm_critic.text.prm` and the package import it only when a network
is built or loaded, so the rest of the text package works without torch.
"""

from __future__ import annotations

from typing import Any

from prm_critic._optional import require

require("torch")  # a missing torch fails here with the exact ``pip install`` to run

import torch  # noqa: E402

from prm_critic.text.contract import block_causal_mask  # noqa: E402

__all__ = ["StepPRMNet"]


class StepPRMNet(torch.nn.Module):
    """Encoder + 2-output head at step positions. ``forward`` returns probabilities.

    ``forward(input_ids, attention_mask, segment_ids)``: int64 ``(B, L)`` each ->
    float32 ``(B, L, 2)`` = ``sigmoid`` of the head logits at every token, ``[..., 0]`` progress,
    ``[..., 1]`` success; read them at the contract's ``step_positions``. The block-causal mask is
    built inside the graph from ``segment_ids`` (so an ONNX export keeps it).
    """

    def __init__(self, encoder: Any, dropout: float = 0.1) -> None:
        super().__init__()
        self.encoder = encoder
        hidden = int(encoder.config.hidden_size)
        self.dropout = torch.nn.Dropout(float(dropout))
        self.head = torch.nn.Linear(hidden, 2)

    def hidden(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
               segment_ids: torch.Tensor) -> torch.Tensor:
        """Encoder states ``(B, L, H)`` under the block-causal mask."""
        allowed = block_causal_mask(attention_mask, segment_ids)  # (B, L, L) bool
        dtype = self.head.weight.dtype
        bias = torch.zeros(allowed.shape, dtype=dtype, device=allowed.device)
        bias = bias.masked_fill(~allowed, torch.finfo(dtype).min)[:, None, :, :]
        out = self.encoder(input_ids=input_ids, attention_mask=bias,
                           token_type_ids=torch.zeros_like(input_ids))
        return out.last_hidden_state

    def logits(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
               segment_ids: torch.Tensor) -> torch.Tensor:
        """Head logits ``(B, L, 2)``."""
        return self.head(self.dropout(self.hidden(input_ids, attention_mask, segment_ids)))

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                segment_ids: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.logits(input_ids, attention_mask, segment_ids))
