"""Which RL library trains the policy: ``"sb3"`` (stable-baselines3 / sb3-contrib, torch; the
default) or ``"sbx"`` (SBX, the JAX implementations, the ``sbx`` extra).

Both backends run the same env chain (:mod:`prm_critic.sb3.envs`: the shaper inside the vector env,
HER relabelling through its ``compute_reward``), the same callbacks and the same unshaped
evaluation; only the algorithm class differs::

    algo      sb3                        sbx
    sac       stable_baselines3.SAC      sbx.SAC
    tqc       sb3_contrib.TQC            sbx.TQC
    ppo       stable_baselines3.PPO      -  (SBX's PPO has no policy for Dict observations)
    crossq    -                          sbx.CrossQ

SBX is imported only when ``backend="sbx"`` is used. Its weights are the JAX train states
(``actor_state``, ``qf_state`` / ``qf1_state`` + ``qf2_state``, ``ent_coef_state``); their
``params`` / ``target_params`` / ``batch_stats`` trees are flattened to ``'/'``-joined keys
(:func:`sbx_weights`), e.g. ``actor_state/params/params/Dense_0/kernel``, so that a policy
checkpoint stays safetensors + JSON (:mod:`prm_critic.sb3.checkpoint`).
"""

from __future__ import annotations

import difflib
import inspect
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from prm_critic import validate
from prm_critic._optional import install_hint, require

if TYPE_CHECKING:  # the lazily imported algorithm classes, for type checkers
    from stable_baselines3.common.base_class import BaseAlgorithm

__all__ = ["BACKENDS", "DEFAULT_BACKEND", "ALGOS", "OFF_POLICY", "check_backend", "check_algo_backend",
           "algo_class", "algo_default", "check_algo_kwargs", "model_backend", "sbx_weights", "load_sbx_weights",
           "SbxWeightsError", "sbx_training_arrays", "load_sbx_training_arrays"]

#: Values of ``backend``.
BACKENDS = ("sb3", "sbx")
#: The backend ``train_policy`` uses when none is given.
DEFAULT_BACKEND = "sb3"
#: Supported algorithms (each on the backends of :data:`_CLASSES`).
ALGOS = ("sac", "tqc", "ppo", "crossq")
OFF_POLICY = ("sac", "tqc", "crossq")

#: backend -> algo -> (module, class name)
_CLASSES: dict[str, dict[str, tuple[str, str]]] = {
    "sb3": {"sac": ("stable_baselines3", "SAC"), "tqc": ("sb3_contrib", "TQC"), "ppo": ("stable_baselines3", "PPO")},
    "sbx": {"sac": ("sbx", "SAC"), "tqc": ("sbx", "TQC"), "crossq": ("sbx", "CrossQ")},
}
#: why an algorithm is not on a backend, and what to pass instead
_NOT_ON = {
    ("crossq", "sb3"): "CrossQ is trained with SBX (JAX) here; pass backend='sbx' (CLI: --backend sbx; "
                       "install it with {install})",
    ("ppo", "sbx"): "SBX's PPO has no policy for Dict observations (MultiInputPolicy), which the goal-conditioned "
                    "tasks have; pass backend='sb3' for PPO",
}
#: algo -> the JAX train states of an SBX model (``ent_coef_state`` on the model, the others on its policy)
SBX_TRAIN_STATES: dict[str, tuple[str, ...]] = {
    "sac": ("actor_state", "qf_state", "ent_coef_state"),
    "tqc": ("actor_state", "qf1_state", "qf2_state", "ent_coef_state"),
    "crossq": ("actor_state", "qf_state", "ent_coef_state"),
}
_TREE_FIELDS = ("params", "target_params", "batch_stats")


def check_backend(backend: Any) -> str:
    """``backend`` if it is one of :data:`BACKENDS`; else one error naming the value and the choices."""
    return validate.check_choice("backend", backend, BACKENDS)


def check_algo_backend(algo: Any, backend: Any) -> None:
    """Refuse an unknown ``algo`` or ``backend``, and an algorithm the backend does not provide
    (the message names both and what to pass instead)."""
    validate.check_choice("algo", algo, ALGOS)
    check_backend(backend)
    if algo not in _CLASSES[backend]:
        raise ValueError(f"algo={algo!r} is not available with backend={backend!r}: {_NOT_ON[(algo, backend)].format(install=install_hint('sbx'))}; "
                         f"backend={backend!r} provides algo in {list(_CLASSES[backend])}")


def algo_class(algo: str, backend: str = DEFAULT_BACKEND) -> type[BaseAlgorithm]:
    """The class of ``algo`` on ``backend`` (module docstring); a missing package fails with the
    exact ``pip install`` to run."""
    check_algo_backend(algo, backend)
    module, name = _CLASSES[backend][algo]
    return getattr(require(module), name)


def algo_default(algo: str, name: str, backend: str = DEFAULT_BACKEND) -> Any:
    """Default value of constructor argument ``name`` of ``algo``'s class on ``backend`` (e.g. ``gamma``)."""
    return inspect.signature(algo_class(algo, backend).__init__).parameters[name].default


def check_algo_kwargs(algo: str, algo_kwargs: Mapping[str, Any] | None,
                      backend: str = DEFAULT_BACKEND) -> dict[str, Any]:
    """Validate ``algo_kwargs`` against ``algo``'s constructor on ``backend`` before any env is
    built: an unknown key is named with the closest known one, arguments ``train_policy`` sets
    itself are refused, and ``gamma`` must lie in (0, 1]."""
    if algo_kwargs is None:
        return {}
    if not isinstance(algo_kwargs, Mapping):
        raise ValueError(f"algo_kwargs: expected None or a dict of {algo} constructor arguments, got {algo_kwargs!r}")
    cls = algo_class(algo, backend)
    params = set(inspect.signature(cls.__init__).parameters) - {"self", "args", "kwargs"}
    own = {"env": "the task", "seed": "seed=", "verbose": "verbose=", "tensorboard_log": "log_dir="}
    for key in algo_kwargs:
        if key in own:
            raise ValueError(f"algo_kwargs[{key!r}]: set by train_policy itself (use {own[key]}), "
                             f"got algo_kwargs[{key!r}]={algo_kwargs[key]!r}")
        if key not in params:
            close = difflib.get_close_matches(str(key), sorted(params), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ValueError(f"algo_kwargs: {key!r} is not an argument of {cls.__name__}{hint} "
                             f"(expected some of {sorted(params - set(own))})")
    if "gamma" in algo_kwargs:
        validate.check_gamma("algo_kwargs['gamma']", algo_kwargs["gamma"])
    return dict(algo_kwargs)


def model_backend(model: Any) -> str:
    """``"sbx"`` for a model of an SBX class, else ``"sb3"``."""
    return "sbx" if type(model).__module__.split(".")[0] == "sbx" else "sb3"


def _sbx_algo(model: Any) -> str:
    for algo, (_, name) in _CLASSES["sbx"].items():
        if type(model).__name__ == name:
            return algo
    raise ValueError(f"model: expected an SBX model of {[n for _, n in _CLASSES['sbx'].values()]}, "
                     f"got {type(model).__module__}.{type(model).__name__}")


def _train_states(model: Any) -> list[tuple[str, Any, Any]]:
    """``(name, owner, state)`` of each JAX train state of the SBX ``model``."""
    out = []
    for name in SBX_TRAIN_STATES[_sbx_algo(model)]:
        owner = model if name == "ent_coef_state" else model.policy
        state = getattr(owner, name, None)
        if state is None:
            raise ValueError(f"model: the {type(model).__name__} has no train state {name!r} "
                             f"(expected {list(SBX_TRAIN_STATES[_sbx_algo(model)])})")
        out.append((name, owner, state))
    return out


def _path_key(entry: Any) -> str:
    for attr in ("key", "name", "idx"):
        if hasattr(entry, attr):
            return str(getattr(entry, attr))
    raise ValueError(f"model: unexpected entry {entry!r} in a train-state tree")  # pragma: no cover - flax trees


def _flat_leaves(prefix: str, tree: Any) -> tuple[list[tuple[str, Any]], Any]:
    """``([(key, leaf)], treedef)`` of ``tree``, keys ``prefix/a/b/...``."""
    tree_util = require("jax", "sbx").tree_util
    with_path, treedef = tree_util.tree_flatten_with_path(tree)
    return [(prefix + "/" + "/".join(_path_key(p) for p in path), leaf) for path, leaf in with_path], treedef


def _as_array(leaf: Any) -> np.ndarray:
    """``leaf`` as a numpy array in JAX's own dtype: a Python ``int`` counter (a fresh CrossQ's
    BatchRenorm steps) becomes int32, as training makes it; 0-d stays 0-d (``np.array`` copies
    without ``ascontiguousarray``'s promotion of 0-d to shape (1,))."""
    jnp = require("jax.numpy", "sbx")
    return np.array(jnp.asarray(leaf), copy=True, order="C")


def sbx_weights(model: Any) -> dict[str, np.ndarray]:
    """The SBX ``model``'s ``params`` / ``target_params`` / ``batch_stats`` of every train state,
    flattened to ``'/'``-joined keys (``<state>/<field>/<tree path>``), as numpy arrays."""
    out: dict[str, np.ndarray] = {}
    for name, _, state in _train_states(model):
        for field in _TREE_FIELDS:
            tree = getattr(state, field, None)
            if tree is None:
                continue
            leaves, _ = _flat_leaves(f"{name}/{field}", tree)
            out.update((key, _as_array(leaf)) for key, leaf in leaves)
    return out


class SbxWeightsError(ValueError):
    """SBX weights that do not fit the model they are loaded into; the message names the key, what the
    model expects and what the weights hold."""


def _describe(a: np.ndarray) -> str:
    return f"an array of shape {tuple(a.shape)} and dtype {a.dtype}"


def _check_sbx_arrays(model: Any, arrays: Mapping[str, np.ndarray]) -> None:
    expected = sbx_weights(model)
    name = type(model).__name__
    missing = [k for k in expected if k not in arrays]
    if missing:
        more = f" ({len(missing) - 1} more keys are missing)" if len(missing) > 1 else ""
        raise SbxWeightsError(f"key {missing[0]!r}: expected {_describe(expected[missing[0]])} (the rebuilt {name} "
                              f"has it), got no such key{more}")
    unknown = sorted(set(arrays) - set(expected))
    if unknown:
        states = sorted({k.split("/", 1)[0] for k in expected})
        raise SbxWeightsError(f"key {unknown[0]!r}: expected only the rebuilt {name}'s {len(expected)} keys (under "
                              f"{states}), got an extra key holding {_describe(np.asarray(arrays[unknown[0]]))}")
    for key, want in expected.items():
        got = np.asarray(arrays[key])
        if got.shape != want.shape:
            raise SbxWeightsError(f"key {key!r}: expected shape {tuple(want.shape)} (the rebuilt {name}), "
                                  f"got shape {tuple(got.shape)}")
        if got.dtype != want.dtype:
            raise SbxWeightsError(f"key {key!r}: expected dtype {want.dtype} (the rebuilt {name}), got dtype {got.dtype}")


def load_sbx_weights(model: Any, arrays: Mapping[str, np.ndarray]) -> None:
    """Put ``arrays`` (as written by :func:`sbx_weights`) into the SBX ``model``'s train states, in place.

    The keys must be exactly the model's, each with the model's shape and dtype.

    Raises:
        SbxWeightsError: a missing key, an extra key, or a shape or dtype that differs (one error,
            naming the key, what the model expects and what ``arrays`` holds).
    """
    _check_sbx_arrays(model, arrays)
    jax = require("jax", "sbx")
    for name, owner, state in _train_states(model):
        new = {}
        for field in _TREE_FIELDS:
            tree = getattr(state, field, None)
            if tree is None:
                continue
            leaves, treedef = _flat_leaves(f"{name}/{field}", tree)
            new[field] = jax.tree_util.tree_unflatten(treedef, [jax.numpy.asarray(arrays[k]) for k, _ in leaves])
        setattr(owner, name, state.replace(**new))


#: the JAX PRNG keys of an SBX model that training draws from: (owner, attribute)
_SBX_KEYS = (("model", "key"), ("policy", "key"), ("policy", "noise_key"))


def sbx_training_arrays(model: Any) -> dict[str, np.ndarray]:
    """Everything of the SBX ``model``'s training state that lives in JAX: every leaf of every train
    state (``step``, ``params``, ``target_params``, ``batch_stats`` and the optimiser state, e.g.
    Adam's moments and count), keyed ``<state>/<tree path>``, and the PRNG keys training draws
    from (``rng/model.key``, ``rng/policy.key``, ``rng/policy.noise_key``), as numpy arrays."""
    out: dict[str, np.ndarray] = {}
    for name, _, state in _train_states(model):
        leaves, _ = _flat_leaves(name, state)
        out.update((key, _as_array(leaf)) for key, leaf in leaves)
    for owner, attr in _SBX_KEYS:
        obj = model if owner == "model" else model.policy
        out[f"rng/{owner}.{attr}"] = _as_array(getattr(obj, attr))
    return out


def load_sbx_training_arrays(model: Any, arrays: Mapping[str, np.ndarray]) -> None:
    """Put what :func:`sbx_training_arrays` wrote back into the SBX ``model``, in place; the keys,
    shapes and dtypes must be exactly the model's (:class:`SbxWeightsError` names the first that
    differs)."""
    expected = sbx_training_arrays(model)
    name = type(model).__name__
    for key in sorted(set(expected) | set(arrays)):
        if key not in arrays:
            raise SbxWeightsError(f"key {key!r}: expected {_describe(expected[key])} (the rebuilt {name} has it), "
                                  "got no such key in the training state")
        if key not in expected:
            raise SbxWeightsError(f"key {key!r}: the training state holds it, the rebuilt {name} has no such key")
        got, want = np.asarray(arrays[key]), expected[key]
        if got.shape != want.shape or got.dtype != want.dtype:
            raise SbxWeightsError(f"key {key!r}: expected {_describe(want)} (the rebuilt {name}), got {_describe(got)}")
    jax = require("jax", "sbx")
    for sname, owner, state in _train_states(model):
        leaves, treedef = _flat_leaves(sname, state)
        setattr(owner, sname, jax.tree_util.tree_unflatten(treedef, [jax.numpy.asarray(arrays[k]) for k, _ in leaves]))
    for own, attr in _SBX_KEYS:
        setattr(model if own == "model" else model.policy, attr, jax.numpy.asarray(arrays[f"rng/{own}.{attr}"]))
