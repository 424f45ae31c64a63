"""Learned critics (torch): the state-critic MLP, checkpoints, training, evaluation, and
:func:`train_critic_from_data` (data folder -> evaluated checkpoint), and distillation into a small deploy
critic (:func:`distill_state_critic`, :func:`distill_critic_from_data`), and ensembles: the mean of
several critics' scores (:class:`EnsembleCritic`, a file naming its members with their hashes).

Needs the ``torch`` extra; without it, importing this package
(or any module in it) raises one ImportError with the command that installs it.
"""

from prm_critic._optional import require

require("torch")
require("safetensors.torch")

from prm_critic.integrity import CheckpointError  # noqa: E402
from prm_critic.models.checkpoint import load_state_critic, save_state_critic  # noqa: E402
from prm_critic.models.ensemble import EnsembleCritic, load_critic_ensemble, save_critic_ensemble  # noqa: E402
from prm_critic.models.distill import DistillConfig, distill_critic_from_data, distill_state_critic  # noqa: E402
from prm_critic.models.evaluate import auroc, evaluate_state_critic, plot_episode_scores, spearman  # noqa: E402
from prm_critic.models.pipeline import train_critic_from_data  # noqa: E402
from prm_critic.models.state_critic import StateCriticNet, TorchStateCritic  # noqa: E402
from prm_critic.models.train import TrainConfig, train_state_critic  # noqa: E402

__all__ = [
    "StateCriticNet", "TorchStateCritic", "save_state_critic", "load_state_critic", "CheckpointError",
    "TrainConfig", "train_state_critic", "evaluate_state_critic", "plot_episode_scores", "auroc", "spearman",
    "train_critic_from_data", "DistillConfig", "distill_state_critic", "distill_critic_from_data",
    "EnsembleCritic", "save_critic_ensemble", "load_critic_ensemble",
]
