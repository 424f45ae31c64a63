"""Train stable-baselines3 policies with PRM subgoal rewards (needs the ``train`` extra).

* :func:`train_policy` - SAC / TQC / PPO (+ HER) on a task with PRM shaping and dead-end pruning
  (its settings: a :class:`TrainPolicyConfig` or its fields as keywords);
  ``backend="sbx"`` trains SAC / TQC / CrossQ with SBX (JAX, the ``sbx`` extra; :data:`BACKENDS`);
* :func:`save_policy` / :func:`load_policy` - safetensors + JSON policy checkpoints (no pickle);
* :func:`evaluate_policy` - a saved policy on its own task: unshaped success and return over seeded
  episodes, optional video frames (:func:`save_evaluation` writes them);
* :class:`PRMStatsCallback`, :class:`UnshapedSuccessEval` - PRM logging and unshaped evaluation;
* :class:`CriticRefreshCallback` - online fine-tuning of a learned critic on outcome labels;
* :func:`save_training_state` / :func:`load_training_state` / :class:`TrainingStateCheckpoint` -
  resumable training (weights, optimisers, replay buffer, RNGs; safetensors + JSON);
* :func:`make_train_env` - the gym-level env chain ``make_env -> shaper -> pruner -> PRMMonitor``;
* :class:`SB3VecPRMRewardShaper` - PRM reward shaping on a stable-baselines3 ``VecEnv`` (one critic
  call per vector step).
"""

from prm_critic.sb3.backends import BACKENDS
from prm_critic.sb3.callbacks import PRMStatsCallback, UnshapedSuccessEval, read_eval_csv
from prm_critic.sb3.checkpoint import PolicyCheckpointError, load_policy, save_policy
from prm_critic.sb3.envs import SHAPING_MODES, make_train_env, make_vec_train_env, resolve_critic
from prm_critic.sb3.evaluate import PolicyEvaluation, evaluate_policy, save_evaluation
from prm_critic.sb3.monitor import PRMMonitor
from prm_critic.sb3.refresh import CriticRefreshCallback
from prm_critic.sb3.resume import (
    TrainingStateCheckpoint,
    TrainingStateError,
    load_training_state,
    save_training_state,
)
from prm_critic.sb3.train import ALGOS, TrainPolicyConfig, predict, train_policy
from prm_critic.sb3.vec_prm_reward_shaper import SB3VecPRMRewardShaper

__all__ = [
    "train_policy", "TrainPolicyConfig", "predict", "ALGOS", "BACKENDS", "SHAPING_MODES", "save_policy", "load_policy", "PolicyCheckpointError",
    "PRMStatsCallback", "UnshapedSuccessEval", "CriticRefreshCallback", "read_eval_csv", "PRMMonitor", "make_train_env",
    "make_vec_train_env", "resolve_critic", "save_training_state", "load_training_state", "TrainingStateCheckpoint",
    "TrainingStateError", "SB3VecPRMRewardShaper", "evaluate_policy", "PolicyEvaluation", "save_evaluation",
]
