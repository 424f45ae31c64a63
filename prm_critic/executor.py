"""Deprecated location of :mod:`prm_critic.parallel` (where collection and labelling tasks run).

Every name still resolves here and warns (prm_critic._deprecation), naming the new import.
"""

from __future__ import annotations

from prm_critic import _deprecation

_NAMES = ("EXECUTORS", "Task", "TaskError", "Executor", "Pool", "LocalExecutor", "RayExecutor", "make_executor",
          "RayCostModel", "JobEstimate", "expected_speedup", "ray_installed", "check_executor", "choose_executor",
          "joined_cluster_message", "AUTO_MIN_SPEEDUP", "DEFAULT_RAY_STARTUP_S", "DEFAULT_RAY_TASK_OVERHEAD_S",
          "DEFAULT_CONNECT_S")

__getattr__ = _deprecation.module_getattr(__name__, {
    name: (f"prm_critic.executor.{name} moved to prm_critic.parallel.{name}; import it from prm_critic.parallel",
           f"prm_critic.parallel:{name}")
    for name in _NAMES
})
