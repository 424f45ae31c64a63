"""State critic: an MLP over the critic-input vector with normalisation inside the module.

``StateCriticNet(x) -> scores`` with ``x`` float32 ``(B, obs_dim)`` and ``scores`` float32 ``(B, 2)``
= ``[progress, success]`` probabilities. Normalisation ``(x - mean) / std`` uses buffers saved with
the weights and exported with the ONNX graph, so no normaliser is ever left behind.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
from torch import nn

from prm_critic.critic import BaseCritic, StepScores, as_obs_batch

__all__ = ["StateCriticNet", "TorchStateCritic", "HEADS"]

HEADS = ("progress", "success")

_ACTS = {"relu": nn.ReLU, "tanh": nn.Tanh, "silu": nn.SiLU, "elu": nn.ELU}


class StateCriticNet(nn.Module):
    """MLP critic with input normalisation buffers.

    Args:
        obs_dim: width of the critic input.
        hidden: hidden layer sizes.
        activation: one of ``relu``, ``tanh``, ``silu``, ``elu``.
    """

    def __init__(self, obs_dim: int, hidden: Sequence[int] = (256, 256), activation: str = "relu"):
        super().__init__()
        if isinstance(obs_dim, bool) or not isinstance(obs_dim, int) or obs_dim <= 0:
            raise ValueError(f"obs_dim: expected a positive int, got {obs_dim!r}")
        if activation not in _ACTS:
            raise ValueError(f"activation: expected one of {sorted(_ACTS)}, got {activation!r}")
        hidden = tuple(int(h) for h in hidden)
        if not hidden or any(h <= 0 for h in hidden):
            raise ValueError(f"hidden: expected a non-empty list of positive sizes, got {hidden!r}")
        self.obs_dim = obs_dim
        self.hidden = hidden
        self.activation = activation
        self.register_buffer("obs_mean", torch.zeros(obs_dim))
        self.register_buffer("obs_std", torch.ones(obs_dim))
        layers: list[nn.Module] = []
        d = obs_dim
        for h in hidden:
            layers += [nn.Linear(d, h), _ACTS[activation]()]
            d = h
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(d, len(HEADS))

    def set_normalization(self, mean: np.ndarray, std: np.ndarray, eps: float = 1e-6) -> None:
        """Set the input normaliser from data statistics (``std`` is floored at ``eps``)."""
        mean = torch.as_tensor(np.asarray(mean, np.float32).reshape(-1))
        std = torch.as_tensor(np.maximum(np.asarray(std, np.float32).reshape(-1), eps))
        if mean.shape != (self.obs_dim,) or std.shape != (self.obs_dim,):
            raise ValueError(f"mean/std: expected shape ({self.obs_dim},), got {tuple(mean.shape)} and {tuple(std.shape)}")
        self.obs_mean.copy_(mean)
        self.obs_std.copy_(std)

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """Raw logits ``(B, 2)``: columns ``[progress, success]``."""
        z = (x - self.obs_mean) / self.obs_std
        return self.head(self.body(z))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Probabilities ``(B, 2)``: columns ``[progress, success]``."""
        return torch.sigmoid(self.logits(x))

    def config(self) -> dict:
        return {"obs_dim": self.obs_dim, "hidden": list(self.hidden), "activation": self.activation}


class TorchStateCritic(BaseCritic):
    """:class:`~prm_critic.critic.BaseCritic` around a :class:`StateCriticNet` (eager torch, CPU).

    Args:
        net: the trained network.
        meta: checkpoint metadata (task, layout, label family, ...).
    """

    def __init__(self, net: StateCriticNet, meta: dict | None = None):
        self.net = net.eval()
        self.meta = dict(meta or {})
        self.obs_dim = net.obs_dim

    @torch.no_grad()
    def score(self, steps) -> StepScores:
        """Score ``steps`` of shape ``(B, obs_dim)``; returns progress and success ``(B,)``."""
        x = as_obs_batch(steps, self.obs_dim, name="steps")
        out = self.net(torch.from_numpy(np.ascontiguousarray(x))).numpy()
        return StepScores(out[:, 0], out[:, 1])
