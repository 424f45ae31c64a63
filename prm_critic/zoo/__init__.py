"""rl-baselines3-zoo (``rl_zoo3``) integration: PRM reward shaping and dead-end pruning from a
hyperparams YAML, in one ``env_wrapper`` entry built from plain keyword arguments.

* :class:`PRMWrapper`: ``env_wrapper: [{prm_critic.zoo.PRMWrapper: {critic: subgoal, ...}}]``; the
  critic by name or path, shaper and optional pruner sharing one critic call per step, the
  algorithm's ``gamma`` read from the hyperparams, pruning off on zoo's evaluation envs.
* :class:`PRMZooCallback`: ``callback: [prm_critic.zoo.PRMZooCallback]``; checks ``model.gamma``
  against the wrappers' at training start, switches pruning off on every ``EvalCallback``'s env,
  and logs the shaped and original episode returns (``prm/...``).

``docs/rl_zoo.md`` has the YAML and what zoo's ``Monitor`` (under the wrapper) records.
Classes are imported lazily, so that importing this package needs neither gymnasium nor SB3.
"""

from __future__ import annotations

from prm_critic._lazy import lazy_exports

__all__ = ["PRMWrapper", "PRMZooCallback"]

_LAZY = {
    "PRMWrapper": "prm_critic.zoo.wrapper",
    "PRMZooCallback": "prm_critic.zoo.callback",
}

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
