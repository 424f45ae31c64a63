"""Learned critics (torch)."""

from prm_critic.models.checkpoint import CheckpointError, load_state_critic, save_state_critic
from prm_critic.models.state_critic import StateCriticNet, TorchStateCritic

__all__ = ["StateCriticNet", "TorchStateCritic", "save_state_critic", "load_state_critic", "CheckpointError"]
