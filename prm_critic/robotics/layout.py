"""Where each observation key lives in the flat critic-input vector (numpy only).

:class:`CriticInputLayout` concatenates a spec's ``critic_input`` keys into one float32 vector per
step and tells where each key and each subgoal expression lives in it; its :meth:`~CriticInputLayout.flatten`
(through :class:`ObsFlattener`, the one flattener: collection, labels, datasets and the env wrappers
all use it) turns observations into checked critic inputs. :func:`success_from_info` reads a step's
success flag from ``info`` per the spec. None of these needs gymnasium, so deployed critics (ONNX) and
wrappers can use them without the ``robotics`` extra.
"""

from __future__ import annotations

import math
import operator
from typing import Any, Mapping

import numpy as np

from prm_critic.robotics.spec import ObsExpr, SpecError, TaskSpec

__all__ = ["CriticInputLayout", "ObsFlattener", "layout_from", "success_from_info"]

#: rows up to this width are checked finite through their Python floats, longer ones (and batches) by np.isfinite
_SHORT_ROW = 256


class CriticInputLayout:
    """Where each observation key lives in the flat critic-input vector.

    ``critic_input = ["observation", "achieved_goal", "desired_goal"]`` with sizes 25, 3, 3 gives
    ``slices = {"observation": slice(0, 25), "achieved_goal": slice(25, 28), ...}`` and
    ``obs_dim = 31``. For a ``Box`` observation space, the only key is ``"obs"``.
    """

    def __init__(self, keys: tuple[str, ...] | list[str], sizes: Mapping[str, int]):
        self.keys = tuple(keys)
        self.sizes = {k: int(sizes[k]) for k in self.keys}
        self.slices: dict[str, slice] = {}
        start = 0
        for k in self.keys:
            self.slices[k] = slice(start, start + self.sizes[k])
            start += self.sizes[k]
        self.obs_dim = start
        self._flattener = ObsFlattener(self)

    def __reduce__(self):
        # rebuilt from its keys and sizes (the flattener's key getter may be a lambda, which does not pickle)
        return (type(self), (self.keys, self.sizes))

    @classmethod
    def from_space(cls, spec: TaskSpec, observation_space) -> "CriticInputLayout":
        from prm_critic._optional import require

        gym = require("gymnasium")
        sizes: dict[str, int] = {}
        if isinstance(observation_space, gym.spaces.Dict):
            for k in spec.critic_input:
                if k not in observation_space.spaces:
                    raise SpecError(
                        f"critic_input: key {k!r} is not in the observation space; expected keys from "
                        f"{sorted(observation_space.spaces)}"
                    )
                sp = observation_space.spaces[k]
                if not isinstance(sp, gym.spaces.Box):
                    raise SpecError(f"critic_input: key {k!r} must be a Box space, got {type(sp).__name__}")
                sizes[k] = int(np.prod(sp.shape))
        else:
            if tuple(spec.critic_input) != ("obs",):
                raise SpecError(
                    f"critic_input: a Box observation space has the single key 'obs', got {list(spec.critic_input)}"
                )
            sizes["obs"] = int(np.prod(observation_space.shape))
        return cls(spec.critic_input, sizes)

    def to_dict(self) -> dict[str, Any]:
        return {"keys": list(self.keys), "sizes": dict(self.sizes), "obs_dim": self.obs_dim}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "CriticInputLayout":
        return cls(data["keys"], data["sizes"])

    def expr_index(self, expr: ObsExpr) -> slice:
        """Slice of the flat vector that ``expr`` (e.g. ``observation[3:6]``) selects."""
        if expr.key not in self.slices:
            raise SpecError(f"expression {expr}: key {expr.key!r} is not in critic_input {list(self.keys)}")
        base = self.slices[expr.key]
        idx = range(base.start, base.stop)[expr.start : expr.stop]
        if len(idx) == 0:
            raise SpecError(f"expression {expr}: selects nothing from {expr.key!r} of size {self.sizes[expr.key]}")
        return slice(idx.start, idx.stop)

    def flatten(self, obs: Any, *, batched: bool | None = None, name: str = "observation") -> np.ndarray:
        """Critic input from one observation or a batch, checked.

        Args:
            obs: a dict of arrays (shape ``(d_k,)`` or ``(B, d_k)`` per key; other keys are ignored)
                or, for ``["obs"]``, an array ``(D,)`` / ``(B, D)``.
            batched: ``True`` for a batch, ``False`` for one observation; ``None`` (the default): a
                batch when the first key's value (or the array) is 2-D.
            name: what the error messages call ``obs``.

        Returns:
            a fresh float32 array ``(obs_dim,)`` or ``(B, obs_dim)``.

        Raises:
            KeyError / TypeError / ValueError naming ``name``, the key (and the batch row) for a
            missing key, a non-numeric dtype, a wrong size, NaN or inf.
        """
        if batched is None:
            first = obs.get(self.keys[0]) if isinstance(obs, Mapping) else obs
            batched = np.ndim(first) == 2 if first is not None else False
        return self._flattener(obs, name, batched=batched)


def layout_from(layout: Any) -> CriticInputLayout | None:
    """``layout`` as a :class:`CriticInputLayout`: one as it is, its :meth:`~CriticInputLayout.to_dict`
    (as checkpoint metadata stores it) rebuilt, ``None`` for ``None``."""
    if layout is None or isinstance(layout, CriticInputLayout):
        return layout
    if isinstance(layout, Mapping) and isinstance(layout.get("keys"), (list, tuple)) and isinstance(layout.get("sizes"), Mapping):
        return CriticInputLayout.from_dict(layout)
    raise TypeError(f"layout: expected a CriticInputLayout or its to_dict() ({{'keys': [...], 'sizes': {{...}}}}), got "
                    f"{type(layout).__name__} {layout!r:.80}")


def success_from_info(spec: TaskSpec, info: Mapping[str, Any], terminated: bool = False,
                      truncated: bool = False) -> bool | None:
    """Success flag of one step from what the env returned, per the spec's success source
    (:mod:`prm_critic.robotics.success`); ``None`` when it comes from the state (all subgoals hold)."""
    try:
        return spec.success.step_flag(info, terminated=terminated, truncated=truncated)
    except KeyError as exc:
        raise KeyError(f"{exc.args[0]} (spec {spec.name})") from None


def _locate(layout: CriticInputLayout, col: int) -> str:
    for k, sl in layout.slices.items():
        if sl.start <= col < sl.stop:
            return f"{k}[{col - sl.start}]"
    return f"[{col}]"


def _check_numeric(a: np.ndarray, name: str) -> None:
    if a.dtype.kind not in "fiub":  # float, signed/unsigned int, bool
        raise TypeError(f"{name}: expected a real-valued numeric array, got dtype {a.dtype}")


def _per_step(a: np.ndarray) -> np.ndarray:
    """A batch ``(B, ...)`` as ``(B, values per step)`` (an empty batch keeps its width; a scalar: one row)."""
    return a.reshape(1, -1) if a.ndim == 0 else a.reshape(a.shape[0], int(np.prod(a.shape[1:])))


class ObsFlattener:
    """One validated pass from an observation (or a batch) to its float32 critic input, ``(D,)`` or
    ``(B, D)``: one fast path and the checked one it falls back to.

    The fast path (:meth:`__call__`; :meth:`batch` for a batch) is the wrappers' per-step path, with
    the checks where they can fail and nothing else: the keys are fetched in one go
    (``operator.itemgetter``; a missing key fails there), each value's last dimension compared with
    its key's size, then the values joined and cast to float32 by one ``np.concatenate`` along the
    last axis into a fresh array with ``casting="same_kind"`` (which refuses exactly the non-numeric
    dtypes: the only dtypes that cast ``same_kind`` to float32 are float, int, unsigned and bool). A
    result of one dimension (two for a batch) means every value had it (``np.concatenate`` joins
    values of one dimensionality only), so with the last dimensions each value's shape was
    ``(size,)`` (``(B, size)``). The result is checked finite: one row of up to 256 entries by the sum
    of its Python floats (float32 values cannot add up to a float64 overflow; in the control loop,
    right after the env's step, this costs less than ``np.isfinite``), anything longer by
    ``np.isfinite``. Anything else (a missing key, a wrong size, dtype or shape, a value without a
    shape, NaN/inf) goes through :meth:`checked`, which flattens any shape of the right size and
    raises the error naming the key otherwise. The critic receives a row that is already checked and
    does not check it again.
    """

    __slots__ = ("layout", "_get", "_sizes", "_short")

    def __init__(self, layout: CriticInputLayout):
        self.layout = layout
        self._sizes = [layout.sizes[k] for k in layout.keys]
        self._short = layout.obs_dim <= _SHORT_ROW
        get = operator.itemgetter(*layout.keys)
        # a tuple of the values (itemgetter of one key gives the value itself; a Box observation is its value)
        self._get = (lambda obs: (obs,)) if layout.keys == ("obs",) else \
            get if len(layout.keys) > 1 else (lambda obs: (get(obs),))

    def __reduce__(self):
        # rebuilt from its layout (its key getter may be a lambda, which does not pickle)
        return (type(self), (self.layout,))

    def __call__(self, obs: Any, name: str = "observation", *, batched: bool = False) -> np.ndarray:
        """Critic input ``(D,)`` of one observation, ``(B, D)`` of a batch when ``batched`` (a fresh
        float32 array), checked; errors name ``name`` and the key."""
        try:
            parts = self._get(obs)
            out = np.concatenate(parts, axis=-1, dtype=np.float32, casting="same_kind") \
                if [a.shape[-1] for a in parts] == self._sizes else None
        except (KeyError, TypeError, AttributeError, ValueError, IndexError):
            out = None  # a missing key, not a mapping, a value without a shape, a non-numeric dtype, ...
        if out is None or out.ndim != 1 + batched or not (
                math.isfinite(sum(out.tolist())) if self._short and not batched else np.isfinite(out).all()):
            # raises, naming the key (returns the input when only the shape was unusual, e.g. (1, size))
            return self.checked(obs, batched=batched, name=name)
        return out

    #: the per-step path under the name the wrappers bind (``self._flatten = ObsFlattener(layout).one``)
    one = __call__

    def batch(self, obs: Any, name: str = "observation") -> np.ndarray:
        """Critic inputs ``(B, D)`` of a batch of observations (vector envs, datasets), same checks."""
        return self(obs, name, batched=True)

    def checked(self, obs: Any, *, batched: bool = False, name: str = "observation") -> np.ndarray:
        """The checked path (and the reference of the fast one): critic input(s) of ``obs``, float32
        ``(D,)`` for one observation, ``(B, D)`` when ``batched``, each check in turn in Python.

        Raises one clear error naming ``name`` (and the key) for a missing key, a wrong size or dtype,
        NaN or inf.
        """
        parts = []
        if isinstance(obs, Mapping):
            for k in self.layout.keys:
                if k not in obs:
                    raise KeyError(f"{name}: missing key {k!r}; expected keys {list(self.layout.keys)}")
                a = np.asarray(obs[k])
                _check_numeric(a, f"{name}[{k!r}]")
                a = _per_step(a) if batched else a.reshape(-1)
                if a.shape[-1] != self.layout.sizes[k]:
                    raise ValueError(
                        f"{name}[{k!r}]: expected {self.layout.sizes[k]} values per step (critic layout "
                        f"{dict(self.layout.sizes)}), got {a.shape[-1]} (shape {np.shape(obs[k])})"
                    )
                parts.append(a)
        else:
            if self.layout.keys != ("obs",):
                raise TypeError(f"{name}: expected a dict with keys {list(self.layout.keys)}, got {type(obs).__name__}")
            a = np.asarray(obs)
            _check_numeric(a, name)
            a = _per_step(a) if batched else a.reshape(-1)
            if a.shape[-1] != self.layout.obs_dim:
                raise ValueError(
                    f"{name}: expected {self.layout.obs_dim} values per step (critic obs_dim), got {a.shape[-1]} "
                    f"(shape {np.shape(obs)})"
                )
            parts.append(a)
        if batched and len({p.shape[0] for p in parts}) != 1:
            raise ValueError(f"{name}: keys have different batch sizes {[p.shape[0] for p in parts]}")
        x = np.concatenate(parts, axis=-1).astype(np.float32, copy=False) if len(parts) > 1 \
            else np.array(parts[0], dtype=np.float32)  # always a fresh array (infos keep it)
        if not np.isfinite(x).all():
            x2 = np.atleast_2d(x)
            bad = np.argwhere(~np.isfinite(x2))[0]
            row = f" (batch row {int(bad[0])})" if batched else ""
            raise ValueError(
                f"{name}: expected finite values, got {x2[tuple(bad)]} at {_locate(self.layout, int(bad[1]))}{row}; "
                "the critic cannot score NaN/inf"
            )
        return x
