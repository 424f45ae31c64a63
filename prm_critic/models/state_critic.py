"""State critic: an MLP over the critic-input vector with normalisation inside the module.

``StateCriticNet(x) -> scores`` with ``x`` float32 ``(B, obs_dim)`` and ``scores`` float32 ``(B, 2)``
= ``[progress, success]`` probabilities. The input is normalised and clipped first::

    z = clip((x - obs_mean) / obs_std, -obs_clip, obs_clip)
    obs_std = max(std of the training inputs, std_floor)            (per feature)

``std_floor`` (default :data:`STD_FLOOR` = 1e-2) keeps a feature that was (nearly) constant in
training from turning sensor noise into a huge ``z``: with the floor, noise ``delta`` on such a
feature moves ``z`` by at most ``delta / std_floor``. ``obs_clip`` (default :data:`OBS_CLIP` = 10, as
stable-baselines3's ``VecNormalize``) bounds ``z`` for inputs far outside the training range, so any
finite input, even near the float32 maximum, gives finite scores. ``obs_mean``, ``obs_std`` and
``obs_clip`` are buffers saved with the weights and exported with the ONNX graph, so no normaliser
is ever left behind. A checkpoint saved before ``obs_clip`` existed loads unchanged (no clipping,
``obs_clip = inf``).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import numpy.typing as npt
import torch
from torch import nn

from prm_critic import validate
from prm_critic.critic import CriticInfo, StateCritic, StepScores, as_obs_batch
from prm_critic.robotics.layout import layout_from

__all__ = ["StateCriticNet", "TorchStateCritic", "HEADS", "STD_FLOOR", "OBS_CLIP"]

HEADS = ("progress", "success")

#: Default floor of the per-feature standard deviation of the input normaliser.
STD_FLOOR = 1e-2
#: Default bound of the normalised input ``|z|`` (as stable-baselines3's ``VecNormalize.clip_obs``).
OBS_CLIP = 10.0


def check_std_floor(std_floor) -> float:
    """``std_floor`` as a float; a clear error unless it is a finite number > 0."""
    return validate.check_number("std_floor", std_floor, positive=True)


def check_obs_clip(obs_clip) -> float:
    """``obs_clip`` as a float (``None``: no clipping, ``inf``); a clear error unless it is > 0."""
    if obs_clip is None:
        return float("inf")
    if isinstance(obs_clip, bool) or not isinstance(obs_clip, (int, float, np.integer, np.floating)) \
            or np.isnan(obs_clip) or obs_clip <= 0:
        raise ValueError(f"obs_clip: expected a number > 0 or None (no clipping), got {obs_clip!r}")
    return float(obs_clip)

ACTIVATIONS = {"relu": nn.ReLU, "tanh": nn.Tanh, "silu": nn.SiLU, "elu": nn.ELU}


class StateCriticNet(nn.Module):
    """MLP critic with input normalisation buffers: ``z = clip((x - obs_mean) / obs_std, ±obs_clip)``.

    A new net normalises with the identity (``obs_mean = 0``, ``obs_std = 1``) and clips at
    :data:`OBS_CLIP`; :meth:`set_normalization` sets the statistics (and the clip) from data.

    Args:
        obs_dim: width of the critic input.
        hidden: hidden layer sizes.
        activation: one of ``relu``, ``tanh``, ``silu``, ``elu``.
    """

    # registered buffers (``register_buffer`` in ``__init__``): tensors, not submodules
    obs_mean: torch.Tensor
    obs_std: torch.Tensor
    obs_clip: torch.Tensor

    def __init__(self, obs_dim: int, hidden: Sequence[int] = (256, 256), activation: str = "relu"):
        super().__init__()
        if isinstance(obs_dim, bool) or not isinstance(obs_dim, int) or obs_dim <= 0:
            raise ValueError(f"obs_dim: expected a positive int, got {obs_dim!r}")
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation: expected one of {sorted(ACTIVATIONS)}, got {activation!r}")
        hidden = tuple(int(h) for h in hidden)
        if not hidden or any(h <= 0 for h in hidden):
            raise ValueError(f"hidden: expected a non-empty list of positive sizes, got {hidden!r}")
        self.obs_dim = obs_dim
        self.hidden = hidden
        self.activation = activation
        self.register_buffer("obs_mean", torch.zeros(obs_dim))
        self.register_buffer("obs_std", torch.ones(obs_dim))
        self.register_buffer("obs_clip", torch.tensor(OBS_CLIP))
        layers: list[nn.Module] = []
        d = obs_dim
        for h in hidden:
            layers += [nn.Linear(d, h), ACTIVATIONS[activation]()]
            d = h
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(d, len(HEADS))

    def set_normalization(self, mean: np.ndarray, std: np.ndarray, std_floor: float = STD_FLOOR,
                          obs_clip: float | None = OBS_CLIP) -> None:
        """Set the input normaliser from data statistics.

        ``obs_std = max(std, std_floor)`` per feature and ``z`` is clipped to ``[-obs_clip, obs_clip]``
        (``obs_clip=None``: no clipping). ``mean`` and ``std`` must be finite, ``std >= 0``.
        """
        std_floor = check_std_floor(std_floor)
        clip = check_obs_clip(obs_clip)
        mean_np = np.asarray(mean, np.float64).reshape(-1)
        std_np = np.asarray(std, np.float64).reshape(-1)
        if mean_np.shape != (self.obs_dim,) or std_np.shape != (self.obs_dim,):
            raise ValueError(f"mean/std: expected shape ({self.obs_dim},), got {mean_np.shape} and {std_np.shape}")
        for name, a in (("mean", mean_np), ("std", std_np)):
            bad = ~np.isfinite(a) | (np.abs(a) > np.finfo(np.float32).max)
            if bad.any():
                i = int(np.argmax(bad))
                raise ValueError(f"{name}: expected finite float32 statistics, got {a[i]} for feature {i}")
        if (std_np < 0).any():
            i = int(np.argmax(std_np < 0))
            raise ValueError(f"std: expected standard deviations >= 0, got {std_np[i]} for feature {i}")
        self.obs_mean.copy_(torch.as_tensor(mean_np.astype(np.float32)))
        self.obs_std.copy_(torch.as_tensor(np.maximum(std_np, std_floor).astype(np.float32)))
        self.obs_clip.fill_(clip)

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        """``clip((x - obs_mean) / obs_std, -obs_clip, obs_clip)``: what the MLP sees."""
        z = (x - self.obs_mean) / self.obs_std
        return torch.clamp(z, -self.obs_clip, self.obs_clip)

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """Raw logits ``(B, 2)``: columns ``[progress, success]``."""
        return self.head(self.body(self.normalize(x)))

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # checkpoints saved before input clipping existed have no obs_clip: they load unchanged
        # (no clipping), so their scores are the ones they always gave
        key = prefix + "obs_clip"
        if key not in state_dict and (prefix + "obs_std") in state_dict:
            state_dict[key] = torch.tensor(float("inf"))
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Probabilities ``(B, 2)``: columns ``[progress, success]``."""
        return torch.sigmoid(self.logits(x))

    def config(self) -> dict:
        return {"obs_dim": self.obs_dim, "hidden": list(self.hidden), "activation": self.activation}


class TorchStateCritic(StateCritic):
    """:class:`~prm_critic.critic.BaseCritic` around a :class:`StateCriticNet` (eager torch, CPU).

    Args:
        net: the trained network.
        meta: checkpoint metadata (task, layout, label family, ...).
    """

    def __init__(self, net: StateCriticNet, meta: dict | None = None):
        self.net = net.eval()
        self.meta = dict(meta or {})
        self.obs_dim = net.obs_dim

    def critic_info(self) -> CriticInfo:
        """The task, env id, layout, spec and label family of the checkpoint metadata."""
        return CriticInfo.from_meta(self.meta)

    def input_layout(self) -> Any:
        """The checkpoint metadata's layout as a ``CriticInputLayout`` (``None`` without one)."""
        return layout_from(self.meta.get("layout"))

    @torch.no_grad()
    def score(self, steps: npt.ArrayLike) -> StepScores:
        """Score ``steps`` of shape ``(B, obs_dim)`` (or the env's own observations, dicts, flattened
        with :meth:`input_layout`); returns progress and success ``(B,)``."""
        x = as_obs_batch(steps, self.obs_dim, name="steps", flatten=self._flatten_obs)
        out = self.net(torch.from_numpy(np.ascontiguousarray(x))).numpy()
        return StepScores(out[:, 0], out[:, 1])
