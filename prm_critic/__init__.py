"""prm-critic: process reward models (step-level critics) for robots and tool-using agents.

A critic scores every step of a trajectory: ``progress`` in [0, 1] (how far along the task is)
and ``success`` in [0, 1] (the probability that the task can still be completed from this step,
the "promise"). The same interface serves MuJoCo state critics, text critics for LangGraph
agents, and exported ONNX critics.
"""

__version__ = "0.2.0"

from prm_critic.aggregate import aggregate, agg_last, agg_mean, agg_min, agg_product
from prm_critic.critic import BaseCritic, ConstantCritic, RandomCritic, StateCritic, StepScores, check_critic

__all__ = [
    "__version__",
    "BaseCritic",
    "StateCritic",
    "StepScores",
    "check_critic",
    "RandomCritic",
    "ConstantCritic",
    "aggregate",
    "agg_min",
    "agg_product",
    "agg_last",
    "agg_mean",
]
