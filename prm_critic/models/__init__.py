"""Learned critics (torch): the state-critic MLP, checkpoints, training and evaluation."""

from prm_critic.models.checkpoint import CheckpointError, load_state_critic, save_state_critic
from prm_critic.models.evaluate import auroc, evaluate_state_critic, plot_episode_scores, spearman
from prm_critic.models.state_critic import StateCriticNet, TorchStateCritic
from prm_critic.models.train import TrainConfig, train_state_critic

__all__ = [
    "StateCriticNet", "TorchStateCritic", "save_state_critic", "load_state_critic", "CheckpointError",
    "TrainConfig", "train_state_critic", "evaluate_state_critic", "plot_episode_scores", "auroc", "spearman",
]
