"""Robotics side of prm-critic: task specs, env construction, trajectories, labels."""

from prm_critic.robotics.spec import SubgoalSpec, SuccessSpec, TaskSpec, list_builtin_specs, load_spec

__all__ = ["TaskSpec", "SubgoalSpec", "SuccessSpec", "load_spec", "list_builtin_specs"]
