"""Policy checkpoints without pickle: ``<stem>.safetensors`` (the policy ``state_dict``) +
``<stem>.json`` (backend, algorithm, task, policy class and kwargs, algorithm kwargs, gamma, HER,
shaping configuration, critic reference).

Two backends (:mod:`prm_critic.sb3.backends`), one format. ``"backend": "sb3"`` (``format_version``
1; a file without the key is sb3's): the torch policy ``state_dict``. ``"backend": "sbx"``
(``format_version`` 2, which older prm-critic versions refuse instead of misreading): the JAX train
states' ``params`` / ``target_params`` / ``batch_stats``, flattened to ``'/'``-joined keys and written
with ``safetensors.numpy``. The weights file's own header names its backend too, so a JSON and a
weights file of different backends are refused. Loading an sbx checkpoint checks every key strictly:
a missing key, an unknown key, a shape or a dtype that differs from the rebuilt model's is one
:class:`PolicyCheckpointError` naming the key, what was expected and what the file holds.

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
:class:`PolicyCheckpointError` naming the file, the field, the value and the allowed names. An sbx
checkpoint has its own allowlist (``allowed_objects("sbx")``: the JAX activations of ``flax.linen``,
the optax optimizers, the SBX algorithm and policy classes and ``HerReplayBuffer``).
"""

from __future__ import annotations

import functools
import json
import os
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, cast

import numpy as np

from prm_critic import __version__
from prm_critic._optional import require
from prm_critic._io import atomic_write_bytes
from prm_critic.integrity import CheckpointError
from prm_critic.models.checkpoint import checkpoint_paths
from prm_critic.robotics.spec import TaskSpec, load_spec
from prm_critic.sb3.backends import (
    ALGOS,
    BACKENDS,
    DEFAULT_BACKEND,
    SbxWeightsError,
    algo_class,
    check_algo_backend,
    check_backend,
    load_sbx_weights,
    model_backend,
    sbx_weights,
)

if TYPE_CHECKING:  # torch is imported lazily (the sbx backend needs none of it)
    import torch

__all__ = ["save_policy", "load_policy", "PolicyCheckpointError", "allowed_objects"]

FORMAT = "prm-critic/sb3-policy"
#: ``format_version`` of what each backend writes (sb3's is unchanged, so older versions read it).
FORMAT_VERSION = 1
SBX_FORMAT_VERSION = 2
_WRITES = {"sb3": FORMAT_VERSION, "sbx": SBX_FORMAT_VERSION}
#: the newest ``format_version`` this version reads
READS_VERSION = SBX_FORMAT_VERSION
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


_JAX_ACTIVATIONS = ("relu", "tanh", "elu", "gelu", "silu", "swish", "leaky_relu", "sigmoid", "softplus", "selu",
                    "celu", "hard_tanh", "relu6")
_OPTAX_OPTIMIZERS = ("adam", "adamw", "sgd", "rmsprop", "radam", "adamax", "lamb")


@functools.lru_cache(maxsize=None)
def allowed_objects(backend: str = DEFAULT_BACKEND) -> dict[str, Any]:
    """Names (``"module:qualname"``) a policy checkpoint of ``backend`` may give under
    ``"__object__"``, and the objects they stand for. ``"sb3"``: torch activation and optimizer
    classes, stable-baselines3 feature extractors and ``RMSpropTFLike``, and the algorithm, policy
    and ``HerReplayBuffer`` classes of SAC, PPO and (when sb3-contrib is installed) TQC. ``"sbx"``:
    the JAX activations of ``flax.linen``, the optax optimizers, the SBX SAC / TQC / CrossQ
    algorithm and policy classes and ``HerReplayBuffer``."""
    if check_backend(backend) == "sbx":
        return _sbx_allowed_objects()
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
        pass
    else:
        objs.append(sb3_contrib.TQC)
        objs += [sb3_contrib.TQC.policy_aliases[alias] for alias in _POLICY_ALIASES]
    return {f"{o.__module__}:{o.__qualname__}": o for o in objs}


def _sbx_allowed_objects() -> dict[str, Any]:
    nn = require("flax.linen", "sbx")
    optax = require("optax", "sbx")
    sbx = require("sbx", "sbx")
    objs: list[Any] = [getattr(nn, n) for n in _JAX_ACTIVATIONS if hasattr(nn, n)]
    objs += [getattr(optax, n) for n in _OPTAX_OPTIMIZERS if hasattr(optax, n)]
    objs.append(require("stable_baselines3").HerReplayBuffer)
    for cls in (sbx.SAC, sbx.TQC, sbx.CrossQ):
        objs.append(cls)
        objs += [cls.policy_aliases[alias] for alias in _POLICY_ALIASES]
    out = {}
    for o in objs:
        mod, qual = getattr(o, "__module__", None), getattr(o, "__qualname__", None)
        if mod and qual:  # (a jitted function without a name cannot be written by _to_json either)
            out[f"{mod}:{qual}"] = o
    return out


def _from_json(value: Any, where: str = "", file: str = "", backend: str = DEFAULT_BACKEND) -> Any:
    """Inverse of :func:`_to_json`; ``{"__object__": name}`` resolves through :func:`allowed_objects`
    of ``backend`` only (nothing the file names is imported)."""
    if isinstance(value, dict):
        if set(value) == {"__object__"}:
            name = value["__object__"]
            allowed = allowed_objects(backend)
            if not isinstance(name, str) or name not in allowed:
                if isinstance(name, str) and name.startswith("sb3_contrib."):
                    require("sb3_contrib")  # a missing sb3-contrib is a missing extra, not a bad file
                raise PolicyCheckpointError(
                    f"path: {file!r} field {where!r} names {name!r}, which a policy checkpoint may not load; "
                    f"expected one of {sorted(allowed)}")
            return allowed[name]
        return {k: _from_json(v, f"{where}.{k}" if where else k, file, backend) for k, v in value.items()}
    if isinstance(value, list):
        return [_from_json(v, f"{where}[{i}]", file, backend) for i, v in enumerate(value)]
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
        model: a trained SB3 model (SAC, TQC, PPO) or SBX model (SAC, TQC, CrossQ); its backend is
            recorded (``"backend"``) and decides how the weights are written (module docstring).
        spec: the task (stored in full so that loading does not depend on the built-in specs).
        algo: ``"sac"``, ``"tqc"``, ``"ppo"`` or ``"crossq"``: the algorithm of ``model``.
        her: whether it was trained with ``HerReplayBuffer``.
        algo_kwargs: constructor kwargs used (callables that cannot be named are dropped, listed
            in the JSON under ``dropped_kwargs``).
        extra: JSON-able metadata (shaping configuration, critic reference, ...).

    Raises:
        ValueError: ``model`` is not the class of ``algo`` on its backend.
    """
    spec = load_spec(spec)
    backend = model_backend(model)
    cls = algo_class(algo, backend)
    if not isinstance(model, cls):
        raise ValueError(f"algo: {algo!r} on backend={backend!r} is {cls.__module__}.{cls.__name__}, got a model of "
                         f"{type(model).__module__}.{type(model).__name__}; pass the algo the model was built with")
    w, j = checkpoint_paths(path)
    state: dict[str, Any]
    if backend == "sbx":
        state = sbx_weights(model)
    else:
        state = {k: v.detach().cpu().clone().contiguous() for k, v in model.policy.state_dict().items()}
    norm = None
    vn = model.get_vec_normalize_env()
    if vn is not None:
        rms = obs_rms_arrays(vn, state) if backend == "sbx" else obs_rms_tensors(vn, state)
        norm_obs_keys = getattr(vn, "norm_obs_keys", None)
        norm = {"keys": sorted(rms), "dict": isinstance(vn.obs_rms, dict), "clip_obs": float(vn.clip_obs),
                "epsilon": float(vn.epsilon), "count": {k: float(r.count) for k, r in rms.items()},
                "norm_obs_keys": list(norm_obs_keys) if norm_obs_keys else None}
    meta = _policy_meta(model, backend=backend, spec=spec, algo=algo, her=her, algo_kwargs=algo_kwargs, extra=extra)
    meta["vec_normalize"] = norm
    header = {"format": FORMAT, "backend": backend}
    if backend == "sbx":
        data = require("safetensors.numpy", "sbx").save(state, metadata=header)
    else:
        from safetensors.torch import save as save_bytes

        # not sbx: the policy's tensors (and VecNormalize's, from obs_rms_tensors)
        data = save_bytes(cast("dict[str, torch.Tensor]", state), metadata=header)
    atomic_write_bytes(w, data)
    atomic_write_bytes(j, json.dumps(meta, indent=2, sort_keys=True).encode())
    return w


def _policy_meta(model, *, backend: str, spec: TaskSpec, algo: str, her: bool,
                 algo_kwargs: Mapping[str, Any] | None, extra: Mapping[str, Any] | None) -> dict[str, Any]:
    """The JSON side of a policy checkpoint (without ``vec_normalize``)."""
    kw = {k: v for k, v in dict(algo_kwargs or {}).items()
          if k not in ("policy", "policy_kwargs", "replay_buffer_class", "replay_buffer_kwargs")}
    kw_json, dropped = json_kwargs(kw)
    pk_json, pk_dropped = json_kwargs(dict(model.policy_kwargs or {}))
    rb_kwargs = dict((algo_kwargs or {}).get("replay_buffer_kwargs") or {})
    return {
        "format": FORMAT, "format_version": _WRITES[backend], "prm_critic_version": __version__,
        "backend": backend, "algo": algo, "policy": type(model.policy).__name__, "policy_alias": _policy_alias(model),
        "policy_kwargs": pk_json, "algo_kwargs": kw_json, "gamma": float(model.gamma), "her": bool(her),
        "her_kwargs": json_kwargs({k: v for k, v in rb_kwargs.items()})[0] if her else None,
        "dropped_kwargs": dropped + [f"policy_kwargs.{k}" for k in pk_dropped],
        "observation_space": repr(model.observation_space), "action_space": repr(model.action_space),
        "num_timesteps": int(model.num_timesteps), "task": spec.name, "spec": spec.to_dict(),
        "extra": json_kwargs(dict(extra or {}))[0],
    }


def obs_rms_arrays(vn, out: dict) -> dict:
    """Put ``vn``'s observation statistics into ``out`` as float64 numpy arrays
    ``vec_normalize.<key>.mean`` / ``.var`` (key ``""`` for a flat observation); returns the
    running-mean-std objects by key (their ``count`` goes to the JSON side)."""
    rms = vn.obs_rms if isinstance(vn.obs_rms, dict) else {"": vn.obs_rms}
    for key, r in rms.items():
        out[f"{_NORM}.{key}.mean"] = np.array(r.mean, dtype=np.float64)
        out[f"{_NORM}.{key}.var"] = np.array(r.var, dtype=np.float64)
    return rms


def obs_rms_tensors(vn, out: dict) -> dict:
    """:func:`obs_rms_arrays` as float64 torch tensors (the sb3 weights and the training state)."""
    import torch

    arrays: dict[str, Any] = {}
    rms = obs_rms_arrays(vn, arrays)
    out.update((k, torch.from_numpy(a)) for k, a in arrays.items())
    return rms


def _policy_alias(model) -> str:
    spaces = require("gymnasium").spaces
    return "MultiInputPolicy" if isinstance(model.observation_space, spaces.Dict) else "MlpPolicy"


def load_policy(path: str | os.PathLike, env=None, *, device: str = "auto", backend: str | None = None,
                **algo_overrides):
    """Rebuild the algorithm saved by :func:`save_policy` and load its policy weights.

    Args:
        path: checkpoint path or stem.
        env: a gymnasium env or VecEnv with the same spaces (e.g. a shaped training env to keep
            training); ``None``: the unshaped task env ``make_env(spec)``.
        device: torch device (sb3; SBX runs where JAX puts it).
        backend: ``None`` (the checkpoint's own, ``"sb3"`` for a file without one), or the backend
            the caller expects: a checkpoint of the other backend is then refused.
        algo_overrides: constructor kwargs that replace the stored ones (e.g. ``buffer_size``).

    Returns:
        The SB3 (or SBX) model; ``model.prm_checkpoint`` holds the JSON metadata. A policy trained
        with ``normalize_obs=True`` comes back inside a ``VecNormalize`` (``training=False``) holding
        the saved statistics: call :func:`prm_critic.sb3.predict` on raw observations.

    Raises:
        PolicyCheckpointError: missing or corrupt files, another format, a JSON field outside the
            allowlist (``backend``, ``algo``, ``policy_alias``, or an ``"__object__"`` name not in
            :func:`allowed_objects`), a weights file of another backend than its JSON (or than
            ``backend``), or weights that do not fit the rebuilt model (sbx: a missing or unknown
            key, another shape or dtype); the message names the file, the field or key, the value
            and what was expected. Nothing a refused file names is imported.
    """
    w, j = checkpoint_paths(path)
    meta = _checked_meta(w, j)
    saved = meta.get("backend", "sb3")
    if backend is not None and check_backend(backend) != saved:
        raise PolicyCheckpointError(f"backend: {str(j)!r} is a policy of backend={saved!r}, expected backend={backend!r}; "
                                    f"load it with backend={saved!r} (or None)")
    kw = _rebuild_kwargs(meta, str(j), saved)
    env = _policy_env(meta, env)
    _check_env_task(meta, env, j)
    state = _read_weights(w, j, saved)
    norm = meta.get("vec_normalize")
    if norm:
        env = _with_saved_normalization(env, norm, state)
    kw.update(algo_overrides)
    kw["device"] = device
    for k in ("seed",):
        kw.pop(k, None)
    from prm_critic.sb3.train import build_model

    try:
        model = build_model(meta["algo"], env, her=bool(meta.get("her")), algo_kwargs=kw, backend=saved)
    except ValueError as exc:
        raise PolicyCheckpointError(f"env: cannot rebuild {meta['algo']} from {str(j)!r}: {exc}") from exc
    if repr(model.observation_space) != meta["observation_space"] or repr(model.action_space) != meta["action_space"]:
        warnings.warn(f"env: spaces differ from the checkpoint's ({meta['observation_space']}, {meta['action_space']})",
                      stacklevel=2)
    try:
        if saved == "sbx":
            load_sbx_weights(model, state)
        else:
            model.policy.load_state_dict(state, strict=True)
    except (RuntimeError, SbxWeightsError) as exc:
        raise PolicyCheckpointError(f"path: weights in {str(w)!r} do not fit the rebuilt {meta['policy']}: {exc}") from exc
    model.num_timesteps = int(meta.get("num_timesteps", 0))
    model.prm_checkpoint = meta
    return model


def _rebuild_kwargs(meta: Mapping[str, Any], file: str, backend: str) -> dict[str, Any]:
    """The constructor arguments stored in ``meta``, classes resolved through ``backend``'s allowlist."""
    kw = _from_json(meta.get("algo_kwargs") or {}, "algo_kwargs", file, backend)
    kw["policy_kwargs"] = _from_json(meta.get("policy_kwargs") or {}, "policy_kwargs", file, backend)
    kw["policy"] = meta["policy_alias"]
    if meta.get("her") and meta.get("her_kwargs"):
        kw["replay_buffer_kwargs"] = _from_json(meta["her_kwargs"], "her_kwargs", file, backend)
    return kw


def _policy_env(meta: Mapping[str, Any], env):
    """``env`` as a VecEnv (``None``: the checkpoint's task env)."""
    DummyVecEnv = require("stable_baselines3.common.vec_env").DummyVecEnv
    VecEnv = require("stable_baselines3.common.vec_env").VecEnv
    if env is None:
        from prm_critic.robotics.make import make_env

        env = make_env(load_spec(meta["spec"]))
    if not isinstance(env, VecEnv):
        e = env
        env = DummyVecEnv([lambda: e])
    return env


def _check_env_task(meta: Mapping[str, Any], venv, j: Path) -> None:
    """Refuse an env of another task than the policy's (``policy.json``'s spec env id against the
    env's gymnasium id; an env without an id is checked by its spaces only)."""
    want = ((meta.get("spec") or {}).get("task") or {}).get("env_id")
    try:
        specs = venv.get_attr("spec")
    except Exception:  # an env without a gymnasium spec: nothing to compare
        return
    got = sorted({s.id for s in specs if isinstance(getattr(s, "id", None), str)})
    if want and got and got != [want]:
        raise PolicyCheckpointError(
            f"env: {str(j)!r} is a policy for task {meta.get('task')!r} (env id {want!r}), but the env given is "
            f"{', '.join(map(repr, got))}; a policy does not carry over to another task: give an env of {want!r} "
            "(or env=None for its own)")


def _read_weights(w: Path, j: Path, backend: str) -> dict[str, Any]:
    """The arrays of the weights file ``w`` (torch tensors for sb3, numpy arrays for sbx), refused
    when its header names another backend than the JSON ``j`` (a header without one is sb3's)."""
    safetensors = require("safetensors")
    try:
        with safetensors.safe_open(str(w), framework="np") as f:
            header = f.metadata() or {}
    except Exception as exc:
        raise PolicyCheckpointError(f"path: cannot read weights {str(w)!r}: {exc}") from exc
    written = header.get("backend", "sb3")
    if written != backend:
        raise PolicyCheckpointError(f"path: weights {str(w)!r} were written by backend={written!r}, but {str(j)!r} "
                                    f"describes a backend={backend!r} policy; expected the weights saved with that "
                                    "JSON (both files of one save_policy call)")
    load_file = require("safetensors.numpy" if backend == "sbx" else "safetensors.torch").load_file
    try:
        return load_file(str(w))
    except Exception as exc:
        raise PolicyCheckpointError(f"path: cannot read weights {str(w)!r}: {exc}") from exc


def _checked_meta(w: Path, j: Path) -> dict[str, Any]:
    """The JSON metadata of the policy checkpoint ``w`` + ``j``, refused unless both files exist and its
    format, version, ``backend``, ``algo``, ``policy_alias`` and constructor-argument fields are ones
    this version reads."""
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
    if meta.get("format_version", 0) > READS_VERSION:
        raise PolicyCheckpointError(f"path: {str(j)!r} has format_version {meta['format_version']}, this version "
                                    f"reads <= {READS_VERSION}")
    for field, value, allowed in (("backend", meta.get("backend", "sb3"), BACKENDS), ("algo", meta.get("algo"), ALGOS),
                                  ("policy_alias", meta.get("policy_alias"), _POLICY_ALIASES)):
        if not isinstance(value, str) or value not in allowed:
            raise PolicyCheckpointError(f"path: {str(j)!r} field {field!r} is {value!r}; expected one of {list(allowed)}")
    backend = meta.get("backend", "sb3")
    if backend == "sbx" and meta.get("format_version") != SBX_FORMAT_VERSION:
        raise PolicyCheckpointError(f"path: {str(j)!r} field 'format_version' is {meta.get('format_version')!r} for "
                                    f"backend='sbx'; expected {SBX_FORMAT_VERSION}")
    try:
        check_algo_backend(meta["algo"], backend)
    except ValueError as exc:
        raise PolicyCheckpointError(f"path: {str(j)!r} field 'algo': {exc}") from exc
    for field in ("algo_kwargs", "policy_kwargs"):
        if not isinstance(meta.get(field) or {}, dict):
            raise PolicyCheckpointError(f"path: {str(j)!r} field {field!r} is {meta.get(field)!r}; expected an object "
                                        "of constructor arguments")
    return meta


def _numpy(value) -> np.ndarray:
    """A float64 numpy copy of a torch tensor (sb3 weights) or numpy array (sbx weights)."""
    return np.array(value.numpy() if hasattr(value, "numpy") else value, dtype=np.float64)


def _with_saved_normalization(env, norm: Mapping[str, Any], state: dict):
    """``env`` inside a ``VecNormalize`` (``training=False``) holding the checkpoint's observation
    statistics, which are taken out of the weights ``state``."""
    VecNormalize = require("stable_baselines3.common.vec_env").VecNormalize
    if not isinstance(env, VecNormalize):
        env = VecNormalize(env, training=False, norm_obs=True, norm_reward=False, clip_obs=norm["clip_obs"],
                           epsilon=norm["epsilon"], norm_obs_keys=norm.get("norm_obs_keys"))
    for key in norm["keys"]:
        r = env.obs_rms[key] if norm["dict"] else env.obs_rms
        r.mean = _numpy(state.pop(f"{_NORM}.{key}.mean"))
        r.var = _numpy(state.pop(f"{_NORM}.{key}.var"))
        r.count = norm["count"][key]
    return env
