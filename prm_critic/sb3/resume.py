"""Resumable SB3 training without pickle: the whole training state every ``save_freq`` env steps.

A training-state checkpoint is two files, each written atomically, then a pointer written last::

    <dir>/state-<steps>.safetensors  tensors: policy weights (actor, critics, targets; SBX: the JAX
                                     train states and PRNG keys), optimiser
                                     moments, entropy coefficient, the filled part of the replay
                                     buffer (HER episode bookkeeping and stored infos included),
                                     VecNormalize statistics, the torch RNG
    <dir>/state-<steps>.json         the rest: env-step / update / episode counters, buffer position,
                                     optimiser hyper-parameters, numpy and python RNG states,
                                     callback state and the run's configuration (``extra``)
    <dir>/latest.json                {"steps": N, "weights": ..., "meta": ...}

A kill at any moment leaves the previous checkpoint readable; older states are deleted only after
the pointer has moved.

Resuming is statistically equivalent to an uninterrupted run, not bit-identical: the env restarts
with a fresh episode (seeded from the step count), so an episode in progress at the checkpoint is
dropped (its transitions stay in the buffer, but HER never samples them: their episode never
ended), and the gradient step(s) of the checkpoint's last env step are skipped. PPO's rollout
buffer is not saved: the rollout that ended at the checkpoint is collected again. With HER, a
checkpoint taken before the first episode ended leaves no sampleable episode: SB3 then refuses to
train until one ends (keep ``save_freq`` above the episode length).

The relabelling rows of :class:`~prm_critic.sb3.her.PRMHerReplayBuffer` (``prm_rows``) are saved
like the buffer's own arrays. Replay-buffer ``infos`` (HerReplayBuffer with ``copy_info_dict=True``) keep every key that all stored infos hold as a
number or a numeric array of one shape (the shaper's ``prm_*`` keys, ``is_success``, ...); other
keys (``terminal_observation``, ``episode``) are not saved.

SBX models (``backend="sbx"``) are saved the same way; their JAX train states are stored whole
(parameters, target parameters, batch statistics, the optax optimiser state and step count) with the
PRNG keys training draws from (:func:`prm_critic.sb3.backends.sbx_training_arrays`), as tensors
``sbx.<state>/<tree path>``. A state is loaded only into a model of the backend that wrote it.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from prm_critic import validate
from prm_critic._optional import require
from prm_critic._io import atomic_write_bytes
from prm_critic.integrity import CheckpointError
from prm_critic.sb3.backends import model_backend

require("stable_baselines3.common.callbacks")  # a missing extra fails here with the exact ``pip install`` to run
from stable_baselines3.common.callbacks import BaseCallback  # noqa: E402

__all__ = ["TrainingStateCheckpoint", "TrainingStateError", "latest_training_state", "load_training_state",
           "save_training_state", "to_jsonable"]

FORMAT = "prm-critic/sb3-training-state"
FORMAT_VERSION = 1
_SCALE_ROW = "scale"  # prm_critic.sb3.her.SCALE_ROW (her.py needs SB3 at import; this module does not)
_BUFFER_ARRAYS = ("observations", "next_observations", "actions", "rewards", "dones", "timeouts",
                  "ep_start", "ep_length", "prm_rows")  # prm_rows: PRMHerReplayBuffer's relabelling rows


class TrainingStateError(CheckpointError):
    """A training-state checkpoint is missing, corrupt, or does not fit the model it is loaded into."""


def to_jsonable(value: Any) -> Any:
    """``value`` with numpy scalars/arrays turned into Python numbers/lists (dicts and lists recursed)."""
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value


def _sbx_tensors(model, tensors: dict, meta: dict) -> None:
    """An SBX model's JAX training state (train states with their optimiser states, PRNG keys) as
    tensors ``sbx.<key>``; uint32 arrays (PRNG keys) are stored as int32 of the same bits."""
    from prm_critic.sb3.backends import sbx_training_arrays

    uint32 = []
    for key, a in sbx_training_arrays(model).items():
        if a.dtype == np.uint32:
            a = a.view(np.int32)
            uint32.append(key)
        tensors[f"sbx.{key}"] = _tensor(a)
    meta["sbx"] = {"uint32": uint32}


def _load_sbx_tensors(model, t: Mapping, meta: Mapping) -> None:
    from prm_critic.sb3.backends import SbxWeightsError, load_sbx_training_arrays

    if "sbx" not in meta:
        raise TrainingStateError(f"model: the training state was written by a stable-baselines3 {meta['algo']}, "
                                 f"got the SBX model {type(model).__module__}.{type(model).__name__}")
    uint32 = set(meta["sbx"]["uint32"])
    arrays = {}
    for k, v in t.items():
        if k.startswith("sbx."):
            a = v.numpy()
            arrays[k[4:]] = a.view(np.uint32) if k[4:] in uint32 else a
    try:
        load_sbx_training_arrays(model, arrays)
    except SbxWeightsError as exc:
        raise TrainingStateError(f"model: the training state does not fit this model: {exc}") from exc


def _optimizers(model) -> dict[str, Any]:
    torch = require("torch")
    cands = (("policy", getattr(model.policy, "optimizer", None)),
             ("actor", getattr(getattr(model, "actor", None), "optimizer", None)),
             ("critic", getattr(getattr(model, "critic", None), "optimizer", None)),
             ("ent_coef", getattr(model, "ent_coef_optimizer", None)))
    out: dict[str, Any] = {}
    for name, opt in cands:
        if isinstance(opt, torch.optim.Optimizer) and all(opt is not o for o in out.values()):
            out[name] = opt
    return out


def _tensor(a: np.ndarray):
    return require("torch").from_numpy(np.array(a, copy=True, order="C"))


def _buffer_state(rb, tensors: dict, meta: dict) -> None:
    n = rb.buffer_size if rb.full else rb.pos
    info: dict[str, Any] = {"class": type(rb).__name__, "buffer_size": int(rb.buffer_size), "n_envs": int(rb.n_envs),
            "pos": int(rb.pos), "full": bool(rb.full), "n": int(n), "arrays": [], "info_keys": []}
    for attr in _BUFFER_ARRAYS:
        v = getattr(rb, attr, None)
        if isinstance(v, dict):
            for k, a in v.items():
                tensors[f"buffer.{attr}.{k}"] = _tensor(a[:n])
            info["arrays"].append(attr)
        elif isinstance(v, np.ndarray):
            tensors[f"buffer.{attr}"] = _tensor(v[:n])
            info["arrays"].append(attr)
    infos = getattr(rb, "infos", None)
    if isinstance(infos, np.ndarray) and n > 0:
        flat = [d if isinstance(d, Mapping) else {} for d in infos[:n].reshape(-1)]
        keys = set(flat[0]).intersection(*flat[1:]) if flat else set()
        for k in sorted(keys):
            try:
                arr = np.stack([np.asarray(d[k]) for d in flat])
            except ValueError:  # shapes differ
                continue
            if arr.dtype.kind not in "biuf":
                continue
            tensors[f"buffer.infos.{k}"] = _tensor(arr.reshape(n, infos.shape[1], *arr.shape[1:]))
            info["info_keys"].append(k)
    if hasattr(rb, "_current_ep_start"):
        info["current_ep_start"] = [int(v) for v in rb._current_ep_start]
    meta["buffer"] = info


def _restore_buffer(rb, tensors: Mapping, info: Mapping) -> None:
    if type(rb).__name__ != info["class"]:
        raise TrainingStateError(f"replay buffer: the checkpoint holds a {info['class']}, the model has a "
                                 f"{type(rb).__name__} (her= differs?)")
    if int(rb.n_envs) != info["n_envs"]:
        raise TrainingStateError(f"n_envs: the checkpoint has {info['n_envs']} envs, the model {rb.n_envs}")
    n, size = info["n"], int(rb.buffer_size)
    if n > size or (info["full"] and info["pos"] != 0 and size != info["buffer_size"]):
        raise TrainingStateError(f"buffer_size: the checkpoint's buffer holds {n} transitions (size "
                                 f"{info['buffer_size']}, position {info['pos']}); it does not fit a buffer of size {size}")
    for attr in info["arrays"]:
        v = getattr(rb, attr)
        if isinstance(v, dict):
            for k in v:
                if f"buffer.{attr}.{k}" not in tensors and (attr, k) == ("prm_rows", _SCALE_ROW):
                    continue  # a state from before scale schedules: no schedule, the rows stay NaN
                v[k][:n] = tensors[f"buffer.{attr}.{k}"].numpy()
        else:
            v[:n] = tensors[f"buffer.{attr}"].numpy()
    if size == info["buffer_size"]:
        rb.pos, rb.full = info["pos"], info["full"]
    else:
        rb.pos, rb.full = n % size, n >= size
    if info["info_keys"]:
        cols = {k: tensors[f"buffer.infos.{k}"].numpy() for k in info["info_keys"]}
        for i in range(n):
            for e in range(info["n_envs"]):
                rb.infos[i, e] = {k: c[i, e] for k, c in cols.items()}
    if hasattr(rb, "_current_ep_start"):
        # the episode in progress at the checkpoint never ends: the next one starts at the current position
        rb._current_ep_start[:] = rb.pos


def save_training_state(directory: str | os.PathLike, model, *, extra: Mapping[str, Any] | None = None,
                        keep: int = 1) -> Path:
    """Save ``model``'s whole training state under ``directory`` (module docstring); returns the
    weights path. ``extra``: JSON-able state of the caller (callbacks, configuration). ``keep``:
    how many states to keep (>= 1)."""
    torch = require("torch")
    save_bytes = require("safetensors.torch").save
    if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
        raise ValueError(f"keep: expected an integer >= 1, got {keep!r}")
    directory = Path(directory)
    steps = int(model.num_timesteps)
    tensors: dict[str, Any] = {f"policy.{k}": v.detach().cpu().clone().contiguous()
                               for k, v in model.policy.state_dict().items()}
    meta: dict[str, Any] = {"format": FORMAT, "format_version": FORMAT_VERSION, "algo": type(model).__name__,
                            "num_timesteps": steps, "n_updates": int(getattr(model, "_n_updates", 0)),
                            "episode_num": int(getattr(model, "_episode_num", 0)), "optimizers": {}}
    log_ent = getattr(model, "log_ent_coef", None)
    if isinstance(log_ent, torch.Tensor):
        tensors["log_ent_coef"] = log_ent.detach().cpu().clone()
    for name, opt in _optimizers(model).items():
        sd = opt.state_dict()
        keys: dict[str, list[str]] = {}
        scalars: dict[str, dict[str, Any]] = {}
        for pid, st in sd["state"].items():
            for k, v in st.items():
                if isinstance(v, torch.Tensor):
                    tensors[f"optim.{name}.{pid}.{k}"] = v.detach().cpu().clone().contiguous()
                    keys.setdefault(str(pid), []).append(k)
                else:
                    scalars.setdefault(str(pid), {})[k] = v
        meta["optimizers"][name] = {"param_groups": to_jsonable(sd["param_groups"]), "tensor_keys": keys,
                                    "scalars": to_jsonable(scalars)}
    if model_backend(model) == "sbx":
        _sbx_tensors(model, tensors, meta)
    rb = getattr(model, "replay_buffer", None)
    if rb is not None:
        _buffer_state(rb, tensors, meta)
    vn = model.get_vec_normalize_env()
    if vn is not None:
        from prm_critic.sb3.checkpoint import obs_rms_tensors

        rms = obs_rms_tensors(vn, tensors)
        meta["vec_normalize"] = {"dict": isinstance(vn.obs_rms, dict), "count": {k: float(r.count) for k, r in rms.items()},
                                 "ret": [float(vn.ret_rms.mean), float(vn.ret_rms.var), float(vn.ret_rms.count)]}
    tensors["rng.torch"] = torch.get_rng_state().clone()
    np_state = np.random.get_state()
    if not isinstance(np_state, tuple):  # numpy gives a dict for a bit generator other than MT19937
        raise TrainingStateError(f"numpy's global RNG: expected the legacy MT19937 state (a tuple), got a "
                                 f"{type(np_state).__name__} (np.random.set_bit_generator changed it?)")
    py_state = random.getstate()
    meta["rng"] = {"numpy": [np_state[0], np_state[1].tolist(), *[to_jsonable(v) for v in np_state[2:]]],
                   "python": [py_state[0], list(py_state[1]), py_state[2]]}
    meta["extra"] = to_jsonable(dict(extra or {}))

    w = directory / f"state-{steps}.safetensors"
    j = directory / f"state-{steps}.json"
    atomic_write_bytes(w, save_bytes(tensors, metadata={"format": FORMAT}))
    atomic_write_bytes(j, json.dumps(meta).encode())
    atomic_write_bytes(directory / "latest.json",
                       json.dumps({"format": FORMAT, "steps": steps, "weights": w.name, "meta": j.name}).encode())
    # drop older states (the pointer already names the new one)
    states = sorted(directory.glob("state-*.json"), key=lambda p: int(p.stem.split("-")[1]))
    for old in states[:-keep]:
        for p in (old, old.with_suffix(".safetensors")):
            p.unlink(missing_ok=True)
    return w


def latest_training_state(directory: str | os.PathLike) -> dict[str, Any] | None:
    """The JSON part of the newest training state under ``directory`` (``None`` when there is none)."""
    ptr = Path(directory) / "latest.json"
    if not ptr.is_file():
        return None
    try:
        p = json.loads(ptr.read_text())
        meta = json.loads((Path(directory) / p["meta"]).read_text())
    except (OSError, KeyError, json.JSONDecodeError) as exc:
        raise TrainingStateError(f"directory: the training state under {str(directory)!r} is unreadable: {exc}") from exc
    if meta.get("format") != FORMAT:
        raise TrainingStateError(f"directory: {str(directory)!r} does not hold a prm-critic training state "
                                 f"(format {meta.get('format')!r}, expected {FORMAT!r})")
    if meta.get("format_version", 0) > FORMAT_VERSION:
        raise TrainingStateError(f"directory: training state format_version {meta['format_version']}, this version "
                                 f"reads <= {FORMAT_VERSION}")
    meta["_weights"] = str(Path(directory) / p["weights"])
    return meta


def load_training_state(directory: str | os.PathLike, model) -> dict[str, Any]:
    """Load the newest training state under ``directory`` into ``model`` (built with the same
    algorithm, spaces and policy); returns its JSON part (``["extra"]``: the caller's state).

    Raises:
        TrainingStateError: no state, an unreadable one, or one that does not fit ``model``.
    """
    torch = require("torch")
    load_file = require("safetensors.torch").load_file
    meta = latest_training_state(directory)
    if meta is None:
        raise TrainingStateError(f"directory: no training state (latest.json) under {str(directory)!r}")
    if meta["algo"] != type(model).__name__:
        raise TrainingStateError(f"model: the training state is for {meta['algo']}, got {type(model).__name__}")
    try:
        t = load_file(meta["_weights"])
    except Exception as exc:
        raise TrainingStateError(f"directory: cannot read {meta['_weights']!r}: {exc}") from exc
    if model_backend(model) == "sbx":
        _load_sbx_tensors(model, t, meta)
    elif "sbx" in meta:
        raise TrainingStateError(f"model: the training state was written by an SBX {meta['algo']}, got the "
                                 f"stable-baselines3 model {type(model).__module__}.{type(model).__name__}")
    policy = {k[len("policy."):]: v for k, v in t.items() if k.startswith("policy.")}
    try:
        model.policy.load_state_dict(policy, strict=True)
    except RuntimeError as exc:
        raise TrainingStateError(f"model: the saved policy does not fit this model: {exc}") from exc
    if "log_ent_coef" in t:
        with torch.no_grad():
            model.log_ent_coef.copy_(t["log_ent_coef"])
    opts = _optimizers(model)
    if set(opts) != set(meta["optimizers"]):
        raise TrainingStateError(f"model: optimisers {sorted(opts)} do not match the saved {sorted(meta['optimizers'])}")
    for name, opt in opts.items():
        om = meta["optimizers"][name]
        state: dict[int, dict[str, Any]] = {}
        for pid, keys in om["tensor_keys"].items():
            state.setdefault(int(pid), {}).update({k: t[f"optim.{name}.{pid}.{k}"] for k in keys})
        for pid, sc in om["scalars"].items():
            state.setdefault(int(pid), {}).update(sc)
        opt.load_state_dict({"state": state, "param_groups": om["param_groups"]})
    if "buffer" in meta:
        rb = getattr(model, "replay_buffer", None)
        if rb is None:
            raise TrainingStateError("model: the training state holds a replay buffer, the model has none")
        _restore_buffer(rb, t, meta["buffer"])
    if "vec_normalize" in meta:
        vn = model.get_vec_normalize_env()
        if vn is None:
            raise TrainingStateError("model: the training state has VecNormalize statistics, the model's env has no "
                                     "VecNormalize (normalize_obs= differs?)")
        nm = meta["vec_normalize"]
        for key, count in nm["count"].items():
            r = vn.obs_rms[key] if nm["dict"] else vn.obs_rms
            r.mean = t[f"vec_normalize.{key}.mean"].numpy().copy()
            r.var = t[f"vec_normalize.{key}.var"].numpy().copy()
            r.count = count
        vn.ret_rms.mean, vn.ret_rms.var, vn.ret_rms.count = nm["ret"]
    torch.set_rng_state(t["rng.torch"])
    s = meta["rng"]["numpy"]
    np.random.set_state((s[0], np.asarray(s[1], dtype=np.uint32), *s[2:]))
    p = meta["rng"]["python"]
    random.setstate((p[0], tuple(p[1]), p[2]))
    model.num_timesteps = int(meta["num_timesteps"])
    model._n_updates = int(meta["n_updates"])
    model._episode_num = int(meta["episode_num"])
    return meta


class TrainingStateCheckpoint(BaseCallback):
    """Save the training state (:func:`save_training_state`) every ``save_freq`` env steps and at
    the end of training.

    States are written at the end of a rollout (off-policy: after the step's transition is stored,
    before its gradient steps), so the replay buffer and the counters agree.

    Args:
        directory: where the states go.
        save_freq: env steps between states (summed over vector envs); > 0.
        extra_fn: returns the caller's JSON-able state to store with each checkpoint.
        save_on_end: also save when training ends (a run can then be extended).
    """

    def __init__(self, directory: str | os.PathLike, *, save_freq: int,
                 extra_fn: Callable[[], Mapping[str, Any]] | None = None, save_on_end: bool = True, verbose: int = 0):
        super().__init__(verbose)
        self.directory = Path(directory)
        self.save_freq = validate.positive_int("save_freq", save_freq)
        self.extra_fn = extra_fn
        self.save_on_end = save_on_end
        self._next = save_freq

    def _save(self) -> None:
        save_training_state(self.directory, self.model, extra=self.extra_fn() if self.extra_fn else None)
        if self.verbose:
            print(f"[checkpoint] training state at {self.num_timesteps} env steps -> {self.directory}")

    def _on_training_start(self) -> None:
        self._next = (self.num_timesteps // self.save_freq + 1) * self.save_freq

    def _on_step(self) -> bool:
        return True

    def _on_rollout_end(self) -> None:
        if self.num_timesteps >= self._next:
            self._next = (self.num_timesteps // self.save_freq + 1) * self.save_freq
            self._save()

    def _on_training_end(self) -> None:
        if self.save_on_end:  # also when a state was saved at this step: that one predates its gradient steps
            self._save()
