"""Learned critics (torch): the state-critic MLP, checkpoints, training, evaluation, and
:func:`train_critic_from_data` (data folder -> evaluated checkpoint)."""

from prm_critic.integrity import CheckpointError
from prm_critic.models.checkpoint import load_state_critic, save_state_critic
from prm_critic.models.evaluate import auroc, evaluate_state_critic, plot_episode_scores, spearman
from prm_critic.models.pipeline import train_critic_from_data
from prm_critic.models.state_critic import StateCriticNet, TorchStateCritic
from prm_critic.models.train import TrainConfig, train_state_critic

__all__ = [
    "StateCriticNet", "TorchStateCritic", "save_state_critic", "load_state_critic", "CheckpointError",
    "TrainConfig", "train_state_critic", "evaluate_state_critic", "plot_episode_scores", "auroc", "spearman",
    "train_critic_from_data",
]
