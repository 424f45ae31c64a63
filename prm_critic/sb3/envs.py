"""Env chains for SB3 training with PRM rewards, and critic resolution.

One training env is::

    make_env(spec) -> PRMRewardShaper(critic, gamma = the algorithm's gamma)   (if shaping)
                   -> DeadEndPruner(critic, threshold, patience)                (if prune)
                   -> PRMMonitor(spec)                                          (always last)

The shaper sits at gym level *inside* the vector env, so every SB3 algorithm stores the shaped
reward (a ``VecEnvWrapper`` placed outside ``VecNormalize`` is ignored by off-policy algorithms),
and HER relabels through the shaper's ``compute_reward``. The monitor comes last so that
``rollout/ep_rew_mean`` is the shaped return the learner optimises; it also records the original
return from ``info["prm_original_reward"]``. (``make_vec_env`` puts its Monitor *before*
``wrapper_class``, which would log the original reward only — hence this explicit chain.)
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Mapping

from prm_critic import validate
from prm_critic._optional import require
from prm_critic.critic import BaseCritic
from prm_critic.robotics.spec import TaskSpec, load_spec
from prm_critic.sb3.monitor import PRMMonitor

__all__ = ["SHAPING_MODES", "CRITIC_NAMES", "resolve_critic", "make_train_env", "make_vec_train_env", "check_prune", "critic_reference",
           "critic_fingerprint", "critic_config_fingerprint"]

#: Values of ``shaping`` accepted by :func:`make_train_env` (passed to the shaper as ``mode``).
SHAPING_MODES = ("potential", "subgoal", "replace")
#: Critics :func:`resolve_critic` knows by name (anything else is a path to a critic file).
CRITIC_NAMES = ("subgoal",)


def check_prune(prune: Any) -> dict[str, Any] | None:
    """Validate ``prune`` (``None`` or a dict with ``threshold`` and ``patience``, optional ``head``)."""
    if prune is None:
        return None
    if not isinstance(prune, Mapping):
        raise ValueError(f"prune: expected None or a dict(threshold=..., patience=...), got {prune!r}")
    allowed = {"threshold", "patience", "head"}
    extra = set(prune) - allowed
    if extra or not {"threshold", "patience"} <= set(prune):
        raise ValueError(f"prune: expected keys threshold, patience (and optional head), got {sorted(prune)}")
    validate.check_prob("prune['threshold']", prune["threshold"], hint=" (a critic score)")
    validate.positive_int("prune['patience']", prune["patience"], unit="env steps")
    return dict(prune)


def critic_reference(critic: Any) -> str | None:
    """A JSON-friendly reference to the critic (for checkpoints and logs)."""
    if critic is None or isinstance(critic, str):
        return critic
    if isinstance(critic, os.PathLike):
        return str(critic)
    return f"<{type(critic).__module__}.{type(critic).__qualname__}>"


def _ensemble_members(critic: Any) -> list | None:
    """The members of an :class:`~prm_critic.models.ensemble.EnsembleCritic`; ``None`` for any other
    critic (if that module was never imported, no ensemble exists, and torch is not imported here)."""
    import sys

    mod = sys.modules.get("prm_critic.models.ensemble")
    return list(critic.members) if mod is not None and isinstance(critic, mod.EnsembleCritic) else None


def critic_fingerprint(critic: Any) -> str | None:
    """SHA-256 of what a critic scores with, so that a resumed run can tell it is the same critic.

    A learned torch critic (:class:`~prm_critic.models.TorchStateCritic`): its weights (every tensor
    of the state dict, with its name, dtype and shape, in name order). An ensemble
    (:class:`~prm_critic.models.ensemble.EnsembleCritic`): the hash of its members' fingerprints in
    order (``None`` if one of them has none). An ONNX critic: its model
    file's bytes. ``None`` for anything else (no critic, the spec's ``SubgoalCritic``, whose scores
    follow from the spec, or a critic type this function does not know)."""
    import hashlib

    if critic is None or isinstance(critic, str):
        return None
    members = _ensemble_members(critic)
    if members is not None:
        parts = [critic_fingerprint(m) for m in members]
        known = [v for v in parts if v is not None]
        if len(known) != len(parts):
            return None
        return hashlib.sha256(("ensemble-mean|" + "|".join(known)).encode()).hexdigest()
    net = getattr(critic, "net", None)
    state_dict = getattr(net, "state_dict", None)
    if callable(state_dict):
        h = hashlib.sha256()
        for name, t in sorted(state_dict().items()):
            t = t.detach().cpu().contiguous()
            h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
            h.update(t.numpy().tobytes())
        return h.hexdigest()
    path = getattr(critic, "path", None)
    if path is not None and str(path).endswith(".onnx") and Path(path).is_file():
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    return None


def critic_config_fingerprint(critic: Any) -> str | None:
    """SHA-256 of what besides the weights changes a critic's scores, the companion of
    :func:`critic_fingerprint` in a resumed run's configuration.

    A learned torch critic: its architecture (``net.config()``: widths, activation) and its declared
    input layout (how the env's observation becomes its input). An ensemble: the hash of its members'
    in order (``None`` if one of them has none). ``None`` for anything else (an ONNX critic's file
    bytes, in :func:`critic_fingerprint`, already hold its graph and metadata)."""
    import hashlib
    import json

    if critic is None or isinstance(critic, str):
        return None
    members = _ensemble_members(critic)
    if members is not None:
        parts = [critic_config_fingerprint(m) for m in members]
        if any(v is None for v in parts):
            return None
        return hashlib.sha256(("ensemble-mean|" + "|".join(parts)).encode()).hexdigest()  # type: ignore[arg-type]
    config = getattr(getattr(critic, "net", None), "config", None)
    if not callable(config):
        return None
    layout: Any = critic.critic_info().layout if callable(getattr(critic, "critic_info", None)) else None
    if layout is not None and hasattr(layout, "to_dict"):
        layout = layout.to_dict()
    body = json.dumps({"net": config(), "layout": layout}, sort_keys=True, default=repr)
    return hashlib.sha256(body.encode()).hexdigest()


def resolve_critic(critic: Any, spec: "str | TaskSpec | None", env=None) -> BaseCritic | None:
    """Turn ``critic`` into a :class:`BaseCritic`.

    Args:
        critic: ``None``; a name from :data:`CRITIC_NAMES` (``"subgoal"``: the :class:`SubgoalCritic`
            of the spec, needs ``env``); a :class:`BaseCritic`; or a path: ``.json`` /
            ``.safetensors`` / checkpoint stem -> :func:`prm_critic.models.load_state_critic`,
            ``.onnx`` -> ``prm_critic.onnx.OnnxCritic``.
        spec: the task spec; only ``"subgoal"`` needs it (a checkpoint carries its own task).
        env: the env (for ``"subgoal"``: observation layout and maze geometry).
    """
    if critic is None or isinstance(critic, BaseCritic):
        return critic
    if isinstance(critic, str) and critic == "subgoal":
        from prm_critic.robotics.subgoals import SubgoalCritic

        if spec is None:
            raise ValueError("spec: critic='subgoal' needs the task spec (a built-in name or a TOML path), got None")
        if env is None:
            raise ValueError("env: critic='subgoal' needs the env, got None")
        return SubgoalCritic(load_spec(spec), env)
    if spec is not None:
        load_spec(spec)  # a bad spec is named here, as for every critic
    if isinstance(critic, (str, os.PathLike)):
        p = Path(critic)
        if p.suffix == ".onnx":
            if not p.is_file():
                raise FileNotFoundError(f"critic: ONNX file {str(p)!r} does not exist")
            from prm_critic.onnx import OnnxCritic  # needs onnxruntime: its own error names the extra

            return OnnxCritic(p)
        from prm_critic.models import load_state_critic
        from prm_critic.models.checkpoint import checkpoint_paths
        from prm_critic.models.ensemble import is_critic_ensemble, load_critic_ensemble

        if is_critic_ensemble(p):
            return load_critic_ensemble(p)
        w, j = checkpoint_paths(p)
        if not (w.exists() or j.exists()):
            raise FileNotFoundError(
                f"critic: expected 'subgoal', a BaseCritic, or a path to a critic checkpoint (.json/.safetensors/.onnx), "
                f"got {str(critic)!r} (no such file)")
        return load_state_critic(p)
    raise ValueError(f"critic: expected None, 'subgoal', a BaseCritic or a checkpoint path, got {critic!r}")


def make_train_env(spec: "str | TaskSpec", *, critic: Any = None, shaping: str | None = None, scale: float = 1.0,
                   gamma: float = 0.99, head: str = "progress", prune: Mapping[str, Any] | None = None,
                   monitor_file: str | None = None, demo_starts: Mapping[str, Any] | None = None, **make_kwargs):
    """One training env: ``make_env -> shaper -> pruner -> PRMMonitor`` (module docstring).

    ``demo_starts``: ``None`` or ``dict(demos=Demonstrations, prob=p)``: a
    :class:`~prm_critic.wrappers.demo_starts.DemoStarts` directly on the task env (under the shaper), so
    that episodes start from demonstration states with probability ``p``.

    ``critic`` is resolved by :func:`resolve_critic` against this env (a path is loaded per call:
    pass a :class:`BaseCritic` to share one instance across vector envs).
    """
    from prm_critic.robotics.make import make_env

    spec = load_spec(spec)
    prune = check_prune(prune)
    validate.check_choice("shaping", shaping, SHAPING_MODES, allow_none=True)
    if (shaping is not None or prune is not None) and critic is None:
        raise ValueError(f"critic: shaping={shaping!r} / prune={prune!r} need a critic, got None")
    env = make_env(spec, **make_kwargs)
    if demo_starts is not None:
        from prm_critic.wrappers.demo_starts import DemoStarts

        env = DemoStarts(env, demo_starts["demos"], prob=demo_starts["prob"])
    crit = resolve_critic(critic, spec, env)
    from prm_critic import wrappers

    if shaping is not None:
        # the critic's subgoal flags per step feed PRMMonitor's episode log (prm/subgoal_hit/*)
        env = wrappers.PRMRewardShaper(env, crit, gamma=gamma, mode=shaping, scale=scale, head=head,
                                       info_subgoals=bool(getattr(getattr(crit, "spec", None), "subgoals", None)))
    if prune is not None:
        p = dict(prune)
        env = wrappers.DeadEndPruner(env, crit, threshold=p["threshold"], patience=p["patience"],
                                     head=p.get("head", "success"))
    return PRMMonitor(env, spec, filename=monitor_file)


def make_vec_train_env(spec: "str | TaskSpec", n_envs: int = 1, *, seed: int | None = None, **kwargs):
    """``DummyVecEnv`` of ``n_envs`` :func:`make_train_env` chains, seeded ``seed + i``."""
    DummyVecEnv = require("stable_baselines3.common.vec_env").DummyVecEnv
    validate.positive_int("n_envs", n_envs)
    spec = load_spec(spec)

    def factory(i: int) -> Callable[[], Any]:
        return lambda: make_train_env(spec, **kwargs)

    venv = DummyVecEnv([factory(i) for i in range(n_envs)])
    if seed is not None:
        venv.seed(seed)
    return venv
