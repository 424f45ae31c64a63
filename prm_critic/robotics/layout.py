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

#: rows up to this width are checked finite through their Python floats, longer ones by a dot product
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
        # rebuilt from its keys and sizes (the flattener holds closures that do not pickle)
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
        f = self._flattener
        if batched is None:
            first = obs.get(self.keys[0]) if isinstance(obs, Mapping) else obs
            batched = np.ndim(first) == 2 if first is not None else False
        return f.batch(obs, name) if batched else f(obs, name)


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


class ObsFlattener:
    """One validated pass from an observation to its float32 critic input ``(D,)``.

    The per-step path of the wrappers, with the checks where they can fail and nothing else: the keys
    are fetched in one go (``operator.itemgetter``; a missing key fails there), each value's length
    compared with its key's size (``len``, which allocates nothing, unlike ``.shape``), then the values
    joined and cast to float32 by one ``np.concatenate`` into a fresh array with
    ``casting="same_kind"`` (which refuses exactly the non-numeric dtypes: the only dtypes that cast
    ``same_kind`` to float32 are float, int, unsigned and bool). A 1-D result means every value was
    1-D (``np.concatenate`` joins values of one dimensionality only), so with the lengths each value's
    shape was ``(size,)``. The whole row is checked finite by the sum of its entries (one ``tolist``;
    rows over 256 entries: one dot product, ``x . 1e-30`` is finite for any finite float32 row and
    inf/NaN as soon as one entry is). A key of the right size in another shape is copied into its
    slice. Anything unusual (a missing key, a wrong size or dtype, a value without a length, NaN/inf)
    goes through :meth:`checked`, which raises the error naming the key. The critic receives a row
    that is already checked and does not check it again.
    """

    __slots__ = ("layout", "one", "_fields", "_keys", "_sizes", "_get", "_dim", "_probe", "_probes", "_box",
                 "_box_shape", "_short")

    def __init__(self, layout: CriticInputLayout):
        self.layout = layout
        self._fields = tuple((k, layout.slices[k], layout.sizes[k]) for k in layout.keys)
        self._keys = tuple(layout.keys)
        self._sizes = tuple(layout.sizes[k] for k in layout.keys)
        get = operator.itemgetter(*self._keys)
        # a tuple of the keys' values (itemgetter of one key gives the value itself)
        self._get = get if len(self._keys) > 1 else (lambda obs: (get(obs),))
        self._dim = layout.obs_dim
        self._probe = np.full(layout.obs_dim, 1e-30, np.float32)
        self._short = layout.obs_dim <= _SHORT_ROW
        self._probes: dict[int, np.ndarray] = {}  # batch size -> flat probe of B * D entries
        self._box = layout.keys == ("obs",)
        self._box_shape = (layout.obs_dim,)
        #: ``one(obs, name="observation")``: the per-step path as a plain function (the wrappers call it
        #: every step), with everything it reads bound in its closure: no attribute look-ups
        self.one = _one_row_function(self)

    def __reduce__(self):
        # rebuilt from its layout (its one-row function is a closure, which does not pickle)
        return (type(self), (self.layout,))

    def __call__(self, obs: Any, name: str = "observation") -> np.ndarray:
        """Critic input ``(D,)`` of one observation (a fresh float32 array); :attr:`one` is the same
        function, called without going through the instance."""
        return self.one(obs, name)

    def _finite_row(self, out: np.ndarray) -> bool:
        """Every entry of the float32 row is finite: the sum of its entries as Python floats (float64)
        is finite exactly then (float32 values cannot add up to a float64 overflow). In the control
        loop, right after the env's step, this costs less than a BLAS dot product; long rows take the
        dot product with the probe."""
        if self._short:
            return math.isfinite(sum(out.tolist()))
        with np.errstate(invalid="ignore"):  # inf + -inf: NaN, reported by the error raised after
            return math.isfinite(out.dot(self._probe))

    def _slow(self, obs: Mapping, name: str) -> np.ndarray:
        """A key of the right size in another shape (e.g. ``(1, size)``): copied into its slice;
        anything else raises through :meth:`checked`."""
        out = np.empty(self._dim, np.float32)
        for k, sl, size in self._fields:
            a = obs.get(k)
            if type(a) is not np.ndarray or a.size != size or a.dtype.kind not in "fiub":
                return self.checked(obs, name=name)
            out[sl] = a.reshape(-1)
        if not self._finite_row(out):
            return self.checked(obs, name=name)
        return out

    def checked(self, obs: Any, *, batched: bool = False, name: str = "observation") -> np.ndarray:
        """The checked path (and the reference of the fast ones): critic input(s) of ``obs``, float32
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
                a = a.reshape(a.shape[0] if a.ndim else 1, -1) if batched else a.reshape(-1)
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
            a = a.reshape(a.shape[0] if a.ndim else 1, -1) if batched else a.reshape(-1)
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

    def _finite(self, out: np.ndarray) -> bool:
        n = out.shape[0]
        probe = self._probes.get(n)
        if probe is None:
            if len(self._probes) >= 8:  # a few batch sizes (vector envs); a dataset's many lengths don't pile up
                self._probes.clear()
            probe = self._probes[n] = np.full(n * self._dim, 1e-30, np.float32)
        return math.isfinite(out.reshape(-1).dot(probe))

    def batch(self, obs: Any, name: str = "observation") -> np.ndarray:
        """Critic inputs ``(B, D)`` of a batch of observations (vector envs), same checks."""
        if self._box:
            if type(obs) is not np.ndarray or obs.ndim < 1 or obs.dtype.kind not in "fiub" \
                    or obs.size != obs.shape[0] * self._dim:
                return self.checked(obs, batched=True, name=name)
            out = obs.astype(np.float32, order="C").reshape(obs.shape[0], self._dim)
        else:
            if not isinstance(obs, dict):
                return self.checked(obs, batched=True, name=name)
            first = obs.get(self._keys[0])
            n = first.shape[0] if type(first) is np.ndarray and first.ndim else -1
            parts = []
            join = True
            for k, _sl, size in self._fields:
                a = obs.get(k)
                if type(a) is not np.ndarray or a.ndim < 1 or a.shape[0] != n or a.size != n * size \
                        or a.dtype.kind not in "fiub":
                    return self.checked(obs, batched=True, name=name)
                join = join and a.ndim == 2
                parts.append(a)
            if join:
                out = np.concatenate(parts, axis=1, dtype=np.float32, casting="unsafe")
            else:
                out = np.empty((max(n, 0), self._dim), np.float32)
                for a, (_k, sl, size) in zip(parts, self._fields):
                    out[:, sl] = a.reshape(n, size)
        if out.size and not self._finite(out):
            return self.checked(obs, batched=True, name=name)  # raises, naming key and row
        return out


def _one_row_function(f: ObsFlattener):
    """``f``'s per-step path, ``one(obs, name="observation") -> (D,) float32``, as a closure over what it
    reads (the wrappers call it every step, right after the env's step, when nothing is in the caches:
    each attribute look-up and call level avoided counts). Three variants, the same checks (see
    :class:`ObsFlattener`): a ``Box`` observation, a dict of three keys (the goal-conditioned
    ``observation``, ``achieved_goal``, ``desired_goal``: three lengths compared one by one), any other
    dict (the lengths compared as one tuple)."""
    checked, slow, finite_row = f.checked, f._slow, f._finite_row
    short, dim, sizes, get = f._short, f._dim, f._sizes, f._get
    f32, concatenate, isfinite, ndarray = np.float32, np.concatenate, math.isfinite, np.ndarray
    # a missing key, not a mapping, a value without a length, values of different dimensionality, a
    # non-numeric dtype: the checked path raises the error naming the key
    unusual = (KeyError, TypeError, AttributeError, ValueError, IndexError)

    if f._box:
        shape = f._box_shape

        def one(obs: Any, name: str = "observation") -> np.ndarray:
            if type(obs) is not ndarray or obs.size != dim or obs.dtype.kind not in "fiub":
                return checked(obs, name=name)
            out = obs.astype(f32) if obs.shape == shape else obs.astype(f32, order="C").reshape(-1)
            # finite: the sum of the row's Python floats (see ObsFlattener._finite_row), inlined
            if not (isfinite(sum(out.tolist())) if short else finite_row(out)):
                return checked(obs, name=name)  # raises, naming the key
            return out

    elif len(sizes) == 3:
        n0, n1, n2 = sizes
        get3 = operator.itemgetter(*f._keys)  # three keys: a tuple of their values

        def one(obs: Any, name: str = "observation") -> np.ndarray:
            try:
                a, b, c = parts = get3(obs)
                out = concatenate(parts, dtype=f32, casting="same_kind") \
                    if len(a) == n0 and len(b) == n1 and len(c) == n2 else None
            except unusual:
                return checked(obs, name=name)
            if out is None or out.ndim != 1:  # a key of the right size in another shape, or a wrong size
                return slow(obs, name)
            if not (isfinite(sum(out.tolist())) if short else finite_row(out)):
                return checked(obs, name=name)
            return out

    else:

        def one(obs: Any, name: str = "observation") -> np.ndarray:
            try:
                parts = get(obs)
                out = concatenate(parts, dtype=f32, casting="same_kind") \
                    if tuple(map(len, parts)) == sizes else None
            except unusual:
                return checked(obs, name=name)
            if out is None or out.ndim != 1:
                return slow(obs, name)
            if not (isfinite(sum(out.tolist())) if short else finite_row(out)):
                return checked(obs, name=name)
            return out

    return one
