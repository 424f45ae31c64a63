"""``PRMZooCallback``: the rl-baselines3-zoo ``callback`` entry that goes with :class:`PRMWrapper`.

At training start it checks, on the model's own training env (``model.get_env()``, through
``VecEnv.env_method``, so ``SubprocVecEnv`` workers included):

* ``gamma``: every wrapper's shaping gamma equals ``model.gamma``, else one error naming both (a
  potential-based shaping term keeps the optimal policy only with the learner's discount);
* no training env is marked as an evaluation env (it would never be pruned);

and switches every ``EvalCallback``'s env to evaluation (no pruning from its next reset): zoo builds
its evaluation envs with the same ``env_wrapper``, and a wrapper built in a ``SubprocVecEnv`` worker
cannot see that it is one.

While training it logs, like :class:`~prm_critic.sb3.PRMStatsCallback` and over the same window::

    prm/ep_return_shaped    mean of info["prm_episode"]["r"]            (the return the learner optimises)
    prm/ep_return_original  mean of info["prm_episode"]["r_original"]   (the env's own; = zoo's Monitor "r")
    prm/pruned_episodes, prm/pruned_frac, prm/train_success, prm/phi_mean, prm/shaping_mean
"""

from __future__ import annotations

import math
from typing import Any, Iterator

from prm_critic._optional import require
from prm_critic.sb3.callbacks import PRMStatsCallback
from prm_critic.zoo.wrapper import PRMWrapper

require("stable_baselines3.common.callbacks")  # a missing extra fails here with the exact ``pip install`` to run
from stable_baselines3.common.callbacks import BaseCallback, CallbackList, EvalCallback, EventCallback  # noqa: E402

__all__ = ["PRMZooCallback"]


def _callbacks(cb: Any) -> Iterator[BaseCallback]:
    """``cb`` and every callback nested in it (``CallbackList`` members, ``EventCallback`` children)."""
    if isinstance(cb, BaseCallback):
        yield cb
    if isinstance(cb, CallbackList):
        for c in cb.callbacks:
            yield from _callbacks(c)
    elif isinstance(cb, EventCallback) and cb.callback is not None:
        yield from _callbacks(cb.callback)


def _settings(venv: Any) -> list[dict[str, Any]] | None:
    """Each env's ``PRMWrapper.prm_zoo_settings()``, or ``None`` when some env has no PRMWrapper."""
    if not all(venv.env_is_wrapped(PRMWrapper)):
        return None
    return list(venv.env_method("prm_zoo_settings"))


class PRMZooCallback(PRMStatsCallback):
    """Checks ``gamma`` at training start, turns pruning off on the evaluation envs, logs PRM
    statistics (module docstring). In the hyperparams YAML: ``callback: prm_critic.zoo.PRMZooCallback``
    (or ``- prm_critic.zoo.PRMZooCallback: {window: 100}`` in a list).

    Args:
        window: number of recent episodes averaged in the ``prm/...`` logs.

    Attributes:
        eval_envs: the evaluation ``VecEnv`` s switched to evaluation at training start.
    """

    def __init__(self, window: int = 100, verbose: int = 0):
        super().__init__(window=window, verbose=verbose)
        self.eval_envs: list[Any] = []

    def _episode_of(self, info: dict[str, Any]) -> dict[str, Any] | None:
        return info.get("prm_episode")

    def _on_training_start(self) -> None:
        model = self.model
        settings = _settings(self.training_env)
        if settings is None:
            raise ValueError(
                "env_wrapper: PRMZooCallback found no prm_critic.zoo.PRMWrapper in the training env; expected "
                "env_wrapper: [{prm_critic.zoo.PRMWrapper: {critic: ...}}] in the same hyperparams")
        model_gamma = getattr(model, "gamma", None)
        for i, s in enumerate(settings):
            if s["evaluation"]:
                raise ValueError(
                    f"evaluation: the PRMWrapper of training env {i} is marked as an evaluation env (evaluation=True), "
                    "so its episodes would never be pruned; expected evaluation unset in the PRMWrapper kwargs")
            g = s["gamma"]
            if s["shaping"] is None or g is None:
                continue
            expected, source = (1.0, f"{type(model).__name__} has no discount (no model.gamma)") \
                if model_gamma is None else (float(model_gamma), f"{type(model).__name__}'s model.gamma")
            if not math.isclose(float(g), expected, rel_tol=0.0, abs_tol=1e-12):
                raise ValueError(
                    f"gamma: PRMWrapper of training env {i} shapes with gamma={g}, but {source} is {expected}; "
                    "potential-based shaping keeps the optimal policy only with the learner's own discount. "
                    "Remove gamma from the PRMWrapper kwargs (it reads the algorithm's) or make the two equal")
        for cb in _callbacks(self.locals.get("callback")):
            if isinstance(cb, EvalCallback) and cb.eval_env is not None and all(cb.eval_env.env_is_wrapped(PRMWrapper)):
                cb.eval_env.env_method("set_evaluation", True)
                self.eval_envs.append(cb.eval_env)
        if self.verbose:
            print(f"PRMZooCallback: {len(settings)} training env(s) checked (gamma {settings[0]['gamma']}), "
                  f"{len(self.eval_envs)} evaluation VecEnv(s) without pruning")
        super()._on_training_start()
