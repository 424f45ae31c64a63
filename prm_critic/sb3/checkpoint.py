"""Policy checkpoints without pickle: ``<stem>.safetensors`` (the policy ``state_dict``) +
``<stem>.json`` (algorithm, task, policy class and kwargs, algorithm kwargs, gamma, HER, shaping
configuration, critic reference).

:func:`load_policy` rebuilds the algorithm from the JSON and loads the weights; ``predict`` then
gives the same actions as before saving. This is the *policy* checkpoint (for deployment and
evaluation); the whole *training* state (optimisers, replay buffer, RNGs: what resuming needs) is
:mod:`prm_critic.sb3.resume` (``train_policy(..., checkpoint_freq=N, resume=True)``). SB3's own ``model.save`` (a zip that contains pickled objects) still works but is
not this project's checkpoint format.

Classes in the kwargs (``policy_kwargs={"activation_fn": torch.nn.Tanh}``) are stored by name,
``{"__object__": "module:qualname"}``. Loading resolves only names on an allowlist (:func:`allowed_objects`:
the torch activation and optimizer classes, the stable-baselines3 feature extractors, and the SB3 /
sb3-contrib algorithm, policy and replay-buffer classes of the supported algorithms), without
importing anything the file names; ``algo`` must be one of :data:`~prm_critic.sb3.ALGOS` and
``policy_alias`` ``"MlpPolicy"`` or ``"MultiInputPolicy"``. Anything else is refused with a
:class:`PolicyCheckpointError` naming the file, the field, the value and the allowed names.
"""

from __future__ import annotations

import functools
import json
import os
import warnings
from pathlib import Path
from typing import Any, Mapping

from prm_critic import __version__
from prm_critic._optional import require
from prm_critic._io import atomic_write_bytes
from prm_critic.integrity import CheckpointError
from prm_critic.models.checkpoint import checkpoint_paths
from prm_critic.robotics.spec import TaskSpec, load_spec

__all__ = ["save_policy", "load_policy", "PolicyCheckpointError", "allowed_objects"]

FORMAT = "prm-critic/sb3-policy"
FORMAT_VERSION = 1
_NORM = "vec_normalize"


class PolicyCheckpointError(CheckpointError):
    """A policy checkpoint is missing, corrupt or not a prm-critic SB3 policy."""


def _to_json(value: Any, where: str) -> Any:
    """JSON form of kwargs values; classes/functions become ``{"__object__": "module.qualname"}``."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, Mapping):
        return {str(k): _to_json(v, f"{where}.{k}") for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_to_json(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, type) or callable(value):
        mod, qual = getattr(value, "__module__", None), getattr(value, "__qualname__", None)
        if mod and qual and "<" not in qual:
            return {"__object__": f"{mod}:{qual}"}
    raise _Unserialisable(where, value)


class _Unserialisable(Exception):
    def __init__(self, where, value):
        super().__init__(f"{where}: {value!r}")
        self.where = where


_ACTIVATIONS = ("ReLU", "Tanh", "ELU", "SELU", "CELU", "GELU", "SiLU", "Mish", "LeakyReLU", "Sigmoid", "Softplus",
                "Hardswish", "Hardtanh", "ReLU6", "Identity")
_OPTIMIZERS = ("Adam", "AdamW", "SGD", "RMSprop", "Adamax", "NAdam", "RAdam", "Adagrad")
_EXTRACTORS = ("FlattenExtractor", "CombinedExtractor", "NatureCNN")
_POLICY_ALIASES = ("MlpPolicy", "MultiInputPolicy")


@functools.lru_cache(maxsize=None)
def allowed_objects() -> dict[str, Any]:
    """Names (``"module:qualname"``) a policy checkpoint may give under ``"__object__"``, and the
    objects they stand for: torch activation and optimizer classes, stable-baselines3 feature
    extractors and ``RMSpropTFLike``, and the algorithm, policy and ``HerReplayBuffer`` classes of
    SAC, PPO and (when sb3-contrib is installed) TQC."""
    torch = require("torch")
    sb3 = require("stable_baselines3")
    layers = require("stable_baselines3.common.torch_layers")
    objs: list[Any] = [getattr(torch.nn, n) for n in _ACTIVATIONS if hasattr(torch.nn, n)]
    objs += [getattr(torch.optim, n) for n in _OPTIMIZERS if hasattr(torch.optim, n)]
    objs += [getattr(layers, n) for n in _EXTRACTORS if hasattr(layers, n)]
    try:
        objs.append(require("stable_baselines3.common.sb2_compat.rmsprop_tf_like").RMSpropTFLike)
    except ImportError:  # pragma: no cover - older stable-baselines3
        pass
    objs += [sb3.SAC, sb3.PPO, sb3.HerReplayBuffer]
    for alias in _POLICY_ALIASES:
        objs += [sb3.SAC.policy_aliases[alias], sb3.PPO.policy_aliases[alias]]
    try:
        import sb3_contrib
    except ImportError:
        sb3_contrib = None
    if sb3_contrib is not None:
        objs.append(sb3_contrib.TQC)
        objs += [sb3_contrib.TQC.policy_aliases[alias] for alias in _POLICY_ALIASES]
    return {f"{o.__module__}:{o.__qualname__}": o for o in objs}


def _from_json(value: Any, where: str = "", file: str = "") -> Any:
    """Inverse of :func:`_to_json`; ``{"__object__": name}`` resolves through :func:`allowed_objects`
    only (nothing the file names is imported)."""
    if isinstance(value, dict):
        if set(value) == {"__object__"}:
            name = value["__object__"]
            allowed = allowed_objects()
            if not isinstance(name, str) or name not in allowed:
                if isinstance(name, str) and name.startswith("sb3_contrib."):
                    require("sb3_contrib")  # a missing sb3-contrib is a missing extra, not a bad file
                raise PolicyCheckpointError(
                    f"path: {file!r} field {where!r} names {name!r}, which a policy checkpoint may not load; "
                    f"expected one of {sorted(allowed)}")
            return allowed[name]
        return {k: _from_json(v, f"{where}.{k}" if where else k, file) for k, v in value.items()}
    if isinstance(value, list):
        return [_from_json(v, f"{where}[{i}]", file) for i, v in enumerate(value)]
    return value


def json_kwargs(kwargs: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    out, dropped = {}, []
    for k, v in kwargs.items():
        try:
            out[k] = _to_json(v, k)
        except _Unserialisable:
            dropped.append(k)
    return out, dropped


def save_policy(path: str | os.PathLike, model, *, spec: "str | TaskSpec", algo: str, her: bool = False,
                algo_kwargs: Mapping[str, Any] | None = None, extra: Mapping[str, Any] | None = None) -> Path:
    """Save ``model``'s policy weights (safetensors) and configuration (JSON); returns the weights path.

    Args:
        path: checkpoint path or stem (``policy`` -> ``policy.safetensors`` + ``policy.json``).
        model: a trained SB3 model (SAC, TQC, PPO).
        spec: the task (stored in full so that loading does not depend on the built-in specs).
        algo: ``"sac"``, ``"tqc"`` or ``"ppo"``.
        her: whether it was trained with ``HerReplayBuffer``.
        algo_kwargs: constructor kwargs used (callables that cannot be named are dropped, listed
            in the JSON under ``dropped_kwargs``).
        extra: JSON-able metadata (shaping configuration, critic reference, ...).
    """
    spec = load_spec(spec)
    w, j = checkpoint_paths(path)
    state = {k: v.detach().cpu().clone().contiguous() for k, v in model.policy.state_dict().items()}
    norm = None
    vn = model.get_vec_normalize_env()
    if vn is not None:
        rms = obs_rms_tensors(vn, state)
        norm = {"keys": sorted(rms), "dict": isinstance(vn.obs_rms, dict), "clip_obs": float(vn.clip_obs),
                "epsilon": float(vn.epsilon), "count": {k: float(r.count) for k, r in rms.items()},
                "norm_obs_keys": list(vn.norm_obs_keys) if getattr(vn, "norm_obs_keys", None) else None}
    kw = {k: v for k, v in dict(algo_kwargs or {}).items()
          if k not in ("policy", "policy_kwargs", "replay_buffer_class", "replay_buffer_kwargs")}
    kw_json, dropped = json_kwargs(kw)
    pk_json, pk_dropped = json_kwargs(dict(model.policy_kwargs or {}))
    rb_kwargs = dict((algo_kwargs or {}).get("replay_buffer_kwargs") or {})
    meta = {
        "format": FORMAT, "format_version": FORMAT_VERSION, "prm_critic_version": __version__,
        "algo": algo, "policy": type(model.policy).__name__, "policy_alias": _policy_alias(model),
        "policy_kwargs": pk_json, "algo_kwargs": kw_json, "gamma": float(model.gamma), "her": bool(her),
        "her_kwargs": json_kwargs({k: v for k, v in rb_kwargs.items()})[0] if her else None,
        "dropped_kwargs": dropped + [f"policy_kwargs.{k}" for k in pk_dropped],
        "observation_space": repr(model.observation_space), "action_space": repr(model.action_space),
        "num_timesteps": int(model.num_timesteps), "task": spec.name, "spec": spec.to_dict(),
        "extra": json_kwargs(dict(extra or {}))[0],
        "vec_normalize": norm,
    }
    from safetensors.torch import save as save_bytes

    atomic_write_bytes(w, save_bytes(state, metadata={"format": FORMAT}))
    atomic_write_bytes(j, json.dumps(meta, indent=2, sort_keys=True).encode())
    return w


def obs_rms_tensors(vn, out: dict) -> dict:
    """Put ``vn``'s observation statistics into ``out`` as float64 tensors
    ``vec_normalize.<key>.mean`` / ``.var`` (key ``""`` for a flat observation); returns the
    running-mean-std objects by key (their ``count`` goes to the JSON side)."""
    import numpy as np
    import torch

    rms = vn.obs_rms if isinstance(vn.obs_rms, dict) else {"": vn.obs_rms}
    for key, r in rms.items():
        out[f"{_NORM}.{key}.mean"] = torch.from_numpy(np.array(r.mean, dtype=np.float64))
        out[f"{_NORM}.{key}.var"] = torch.from_numpy(np.array(r.var, dtype=np.float64))
    return rms


def _policy_alias(model) -> str:
    spaces = require("gymnasium").spaces
    return "MultiInputPolicy" if isinstance(model.observation_space, spaces.Dict) else "MlpPolicy"


def load_policy(path: str | os.PathLike, env=None, *, device: str = "auto", **algo_overrides):
    """Rebuild the algorithm saved by :func:`save_policy` and load its policy weights.

    Args:
        path: checkpoint path or stem.
        env: a gymnasium env or VecEnv with the same spaces (e.g. a shaped training env to keep
            training); ``None``: the unshaped task env ``make_env(spec)``.
        device: torch device.
        algo_overrides: constructor kwargs that replace the stored ones (e.g. ``buffer_size``).

    Returns:
        The SB3 model; ``model.prm_checkpoint`` holds the JSON metadata. A policy trained with
        ``normalize_obs=True`` comes back inside a ``VecNormalize`` (``training=False``) holding the
        saved statistics: call :func:`prm_critic.sb3.predict` on raw observations.

    Raises:
        PolicyCheckpointError: missing or corrupt files, another format, or a JSON field outside the
            allowlist (``algo``, ``policy_alias``, or an ``"__object__"`` name not in
            :func:`allowed_objects`); the message names the file, the field, the value and the
            allowed names. Nothing a refused file names is imported.
    """
    load_file = require("safetensors.torch").load_file
    w, j = checkpoint_paths(path)
    meta = _checked_meta(w, j)
    from prm_critic.sb3.train import build_model

    kw = _from_json(meta.get("algo_kwargs") or {}, "algo_kwargs", str(j))
    kw["policy_kwargs"] = _from_json(meta.get("policy_kwargs") or {}, "policy_kwargs", str(j))
    kw["policy"] = meta["policy_alias"]
    if meta.get("her") and meta.get("her_kwargs"):
        kw["replay_buffer_kwargs"] = _from_json(meta["her_kwargs"], "her_kwargs", str(j))
    spec = load_spec(meta["spec"])
    DummyVecEnv = require("stable_baselines3.common.vec_env").DummyVecEnv
    VecEnv = require("stable_baselines3.common.vec_env").VecEnv
    if env is None:
        from prm_critic.robotics.make import make_env

        env = make_env(spec)
    if not isinstance(env, VecEnv):
        e = env
        env = DummyVecEnv([lambda: e])
    norm = meta.get("vec_normalize")
    try:
        state = load_file(str(w))
    except Exception as exc:
        raise PolicyCheckpointError(f"path: cannot read weights {str(w)!r}: {exc}") from exc
    if norm:
        env = _with_saved_normalization(env, norm, state)
    kw.update(algo_overrides)
    kw["device"] = device
    for k in ("seed",):
        kw.pop(k, None)
    try:
        model = build_model(meta["algo"], env, her=bool(meta.get("her")), algo_kwargs=kw)
    except ValueError as exc:
        raise PolicyCheckpointError(f"env: cannot rebuild {meta['algo']} from {str(j)!r}: {exc}") from exc
    if repr(model.observation_space) != meta["observation_space"] or repr(model.action_space) != meta["action_space"]:
        warnings.warn(f"env: spaces differ from the checkpoint's ({meta['observation_space']}, {meta['action_space']})",
                      stacklevel=2)
    try:
        model.policy.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        raise PolicyCheckpointError(f"path: weights in {str(w)!r} do not fit the rebuilt {meta['policy']}: {exc}") from exc
    model.num_timesteps = int(meta.get("num_timesteps", 0))
    model.prm_checkpoint = meta
    return model


def _checked_meta(w: Path, j: Path) -> dict[str, Any]:
    """The JSON metadata of the policy checkpoint ``w`` + ``j``, refused unless both files exist and its
    format, version, ``algo``, ``policy_alias`` and constructor-argument fields are ones this version reads."""
    if not j.is_file() or not w.is_file():
        raise PolicyCheckpointError(f"path: expected a policy checkpoint {w.name} + {j.name} at {str(w.parent)!r}, "
                                    f"missing {', '.join(str(p.name) for p in (w, j) if not p.is_file())}")
    try:
        meta = json.loads(j.read_text())
    except json.JSONDecodeError as exc:
        raise PolicyCheckpointError(f"path: {str(j)!r} is not valid JSON: {exc}") from exc
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        fmt = meta.get("format") if isinstance(meta, dict) else None
        raise PolicyCheckpointError(f"path: {str(j)!r} is not a prm-critic SB3 policy (format {fmt!r}, "
                                    f"expected {FORMAT!r})")
    if meta.get("format_version", 0) > FORMAT_VERSION:
        raise PolicyCheckpointError(f"path: {str(j)!r} has format_version {meta['format_version']}, this version "
                                    f"reads <= {FORMAT_VERSION}")
    from prm_critic.sb3.train import ALGOS

    for field, value, allowed in (("algo", meta.get("algo"), ALGOS),
                                  ("policy_alias", meta.get("policy_alias"), _POLICY_ALIASES)):
        if not isinstance(value, str) or value not in allowed:
            raise PolicyCheckpointError(f"path: {str(j)!r} field {field!r} is {value!r}; expected one of {list(allowed)}")
    for field in ("algo_kwargs", "policy_kwargs"):
        if not isinstance(meta.get(field) or {}, dict):
            raise PolicyCheckpointError(f"path: {str(j)!r} field {field!r} is {meta.get(field)!r}; expected an object "
                                        "of constructor arguments")
    return meta


def _with_saved_normalization(env, norm: Mapping[str, Any], state: dict):
    """``env`` inside a ``VecNormalize`` (``training=False``) holding the checkpoint's observation
    statistics, which are taken out of the weights ``state``."""
    VecNormalize = require("stable_baselines3.common.vec_env").VecNormalize
    if not isinstance(env, VecNormalize):
        env = VecNormalize(env, training=False, norm_obs=True, norm_reward=False, clip_obs=norm["clip_obs"],
                           epsilon=norm["epsilon"], norm_obs_keys=norm.get("norm_obs_keys"))
    for key in norm["keys"]:
        r = env.obs_rms[key] if norm["dict"] else env.obs_rms
        r.mean = state.pop(f"{_NORM}.{key}.mean").numpy()
        r.var = state.pop(f"{_NORM}.{key}.var").numpy()
        r.count = norm["count"][key]
    return env
