"""The critic interface shared by robot state critics, text critics and exported ONNX critics.

A critic is batch-first: a batch of ``B`` steps goes in, per-step scores come out.

* State critics (robots): a step is the critic-input vector of one state, so the batch is a
  float array of shape ``(B, obs_dim)``.
* Text critics (agents): a step is a :class:`prm_critic.text.TextStep` (the context so far plus the
  step's text), so the batch is a sequence of ``B`` of them.

Every critic returns :class:`StepScores` with two arrays of shape ``(B,)``, values in [0, 1]:

* ``progress``: how far along the task this step is (subgoal progress);
* ``success``: the probability that the task can still be completed from this step ("promise").

Types: :class:`BaseCritic` is generic in the type of the batch it scores, ``BaseCritic[StepsT]``.
:class:`StateCritic` is ``BaseCritic[numpy.typing.ArrayLike]`` (the ``(B, obs_dim)`` batch) and
:class:`prm_critic.text.TextCritic` is ``BaseCritic[Sequence[TextStep]]``, so a type checker
(mypy, pyright) rejects a text batch given to a state critic and the other way round. A plain
``BaseCritic`` annotation accepts any critic. ``StepsT`` is contravariant: a critic that accepts
any array-like is also a ``BaseCritic[numpy.ndarray]``.
"""

from __future__ import annotations

import abc
import asyncio
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Generic, Mapping, Protocol, TypeVar, runtime_checkable

import numpy as np
import numpy.typing as npt

from prm_critic import validate

__all__ = ["StepScores", "BaseCritic", "StateCritic", "StepsT", "check_critic", "check_scores", "as_obs_batch", "check_row",
           "RandomCritic", "ConstantCritic", "CriticInfo", "OneRowCritic", "RowsCritic", "fast_path"]

#: The type of a batch of steps a critic scores (contravariant: it is only ever an input).
StepsT = TypeVar("StepsT", contravariant=True)


@dataclass(frozen=True)
class StepScores:
    """Per-step scores for a batch of ``B`` steps.

    Attributes:
        progress: float32 array, shape ``(B,)``, in [0, 1].
        success: float32 array, shape ``(B,)``, in [0, 1].
        extra: optional named per-step arrays of shape ``(B,)`` (e.g. raw logits).
    """

    progress: np.ndarray
    success: np.ndarray
    extra: dict[str, np.ndarray] = field(default_factory=dict)

    def __post_init__(self):
        p = np.asarray(self.progress, dtype=np.float32).reshape(-1)
        s = np.asarray(self.success, dtype=np.float32).reshape(-1)
        if p.shape != s.shape:
            raise ValueError(f"progress and success must have the same shape (B,), got {p.shape} and {s.shape}")
        object.__setattr__(self, "progress", p)
        object.__setattr__(self, "success", s)

    def __len__(self) -> int:
        return int(self.progress.shape[0])

    def get(self, head: str) -> np.ndarray:
        """Return the head named ``head`` (``"progress"``, ``"success"`` or a key of ``extra``)."""
        if head == "progress":
            return self.progress
        if head == "success":
            return self.success
        if head in self.extra:
            return self.extra[head]
        raise KeyError(f"head: expected 'progress', 'success' or one of {sorted(self.extra)}, got {head!r}")


@dataclass(frozen=True)
class CriticInfo:
    """What a critic declares about the task it was made for; every field is optional (``None``: unknown).

    :meth:`BaseCritic.critic_info` returns it; the env wrappers read it (never the critic's other
    attributes) to check the critic against the env at construction.

    Attributes:
        task: the task (spec) name, e.g. ``"FetchPush-v4"``; a built-in task name also gives its env id.
        env_id: the gymnasium id of the env the critic was made for.
        layout: the critic-input layout (a ``CriticInputLayout`` or its ``to_dict()``).
        spec: the task spec (a ``TaskSpec``, or its ``to_dict()`` as stored in checkpoint metadata).
        labels: what the critic was trained on (the label family, e.g. ``"subgoal"``).
        evaluator: the critic's own subgoal evaluator (``SubgoalCritic``), which a shaper may reuse.
    """

    task: str | None = None
    env_id: str | None = None
    layout: Any = None
    spec: Any = None
    labels: str | None = None
    evaluator: Any = None

    @classmethod
    def from_meta(cls, meta: Mapping[str, Any], **over: Any) -> "CriticInfo":
        """The declaration stored in checkpoint / export metadata (``task``, ``env_id``, ``layout``,
        ``spec``, ``label_family``); keywords in ``over`` replace fields."""
        def text(key: str) -> str | None:
            v = meta.get(key)
            return v if isinstance(v, str) and v else None

        fields = dict(task=text("task"), env_id=text("env_id"), layout=meta.get("layout"), spec=meta.get("spec"),
                      labels=text("label_family"))
        fields.update(over)
        return cls(**fields)


@runtime_checkable
class OneRowCritic(Protocol):
    """A critic with a batch-1 fast path: ``score_one(x)`` on one input ``(obs_dim,)`` returns
    ``(progress, success)`` as two floats, the same as :meth:`BaseCritic.score` on ``x[None]``;
    ``check=False`` skips the input checks for a caller that validated ``x`` (float32, finite).
    The single-env wrappers use it when the critic has it."""

    def score_one(self, x: Any, *, check: bool = True) -> tuple[float, float]: ...


@runtime_checkable
class RowsCritic(Protocol):
    """A critic with an unchecked batch path: ``score_rows(x)`` on ``(B, obs_dim)`` returns the
    ``(B, 2)`` progress/success array; ``check=False`` as for :class:`OneRowCritic`. The vector
    wrappers use it when the critic has it."""

    def score_rows(self, x: Any, *, check: bool = True) -> np.ndarray: ...


class BaseCritic(abc.ABC, Generic[StepsT]):
    """A process reward model: scores each step of a trajectory.

    ``BaseCritic[StepsT]`` scores a batch of type ``StepsT``. Subclasses implement :meth:`score`;
    state critics derive from :class:`StateCritic`, text critics from
    :class:`prm_critic.text.TextCritic`. ``obs_dim`` is set by state critics (``None`` for text).
    """

    #: Size of one step's input vector for state critics; ``None`` for text critics.
    obs_dim: int | None = None

    @abc.abstractmethod
    def score(self, steps: StepsT) -> StepScores:
        """Score a batch of ``B`` steps.

        Args:
            steps: state critics: array-like of shape ``(B, obs_dim)``; text critics: a sequence
                of ``B`` :class:`~prm_critic.text.TextStep`.

        Returns:
            :class:`StepScores` with ``progress`` and ``success`` of shape ``(B,)``.
        """

    async def ascore(self, steps: StepsT) -> StepScores:
        """Score a batch of ``B`` steps without blocking the event loop.

        The same batch and result as :meth:`score` (``progress`` and ``success`` of shape ``(B,)``).
        The default runs :meth:`score` in a worker thread (:func:`asyncio.to_thread`), so a critic
        that calls a remote model or a slow network lets other tasks run meanwhile; critics with a
        native async client override it (e.g. :class:`~prm_critic.text.LLMJudgeCritic` with a chat
        model's ``ainvoke``). The async paths of the LangGraph critic node and middleware call it.
        """
        return await asyncio.to_thread(self.score, steps)

    def __call__(self, steps: StepsT) -> StepScores:
        return self.score(steps)

    def potential(self, steps: StepsT, head: str = "progress") -> np.ndarray:
        """Shorthand for ``self.score(steps).get(head)``; shape ``(B,)``."""
        return self.score(steps).get(head)

    def critic_info(self) -> CriticInfo:
        """What this critic declares about the task it was made for (:class:`CriticInfo`).

        The default declares nothing, and the env wrappers then warn that their task/env check was
        skipped. A critic made for a task overrides it, e.g. ``return CriticInfo(task="FetchPush-v4",
        layout=layout)``; the built-in state critics return what their checkpoint, export or spec holds.
        """
        return CriticInfo()


class StateCritic(BaseCritic[npt.ArrayLike]):
    """A critic of robot states: ``score(x)`` with ``x`` array-like of shape ``(B, obs_dim)``.

    Subclasses set ``obs_dim`` (the width of one critic input) and implement :meth:`score`
    (usually starting with :func:`as_obs_batch`).
    """

    #: Width of one critic input.
    obs_dim: int

    @abc.abstractmethod
    def score(self, steps: npt.ArrayLike) -> StepScores:
        """Score ``steps`` of shape ``(B, obs_dim)``; returns progress and success ``(B,)``."""

    def input_layout(self) -> Any:
        """The layout that turns the env's own observation (a dict) into this critic's input: an object
        with ``flatten(obs, *, batched, name)`` (a ``robotics.layout.CriticInputLayout``), or ``None``
        when the critic does not know it. The default: :meth:`critic_info`'s ``layout`` when it is such
        an object; critics whose declaration holds the layout as a dict override it."""
        layout = self.critic_info().layout
        return layout if callable(getattr(layout, "flatten", None)) else None

    def _flatten_obs(self, obs: Any, *, batched: bool | None, name: str) -> np.ndarray:
        """``obs``, the env's own observation (a dict; ``batched``: of a batch), as critic-input row(s)."""
        layout = self.input_layout()
        if layout is None:
            keys = sorted(obs) if isinstance(obs, Mapping) else "..."
            raise TypeError(
                f"{name}: got the env's observation, a dict (keys {keys}), but {type(self).__name__} declares no input "
                f"layout to flatten it with; pass critic-input rows of shape (B, {self.obs_dim}) (one row: "
                f"({self.obs_dim},)) built with the task's layout, CriticInputLayout.from_space(spec, "
                f"env.observation_space).flatten(obs)")
        return layout.flatten(obs, batched=batched, name=name)


def check_row(x: Any, obs_dim: int, *, flatten: Any = None) -> np.ndarray:
    """``x`` as one critic-input row for a batch-1 fast path (``score_one``): an array of shape
    ``(obs_dim,)`` with a real-valued numeric dtype (not converted); else one error naming what was expected.
    ``flatten`` (a critic's ``flatten(obs, *, batched, name)``): the env's own observation, a dict,
    is flattened with it first; without it a dict is refused."""
    if type(x) is np.ndarray:
        a = x
    elif isinstance(x, Mapping):
        a = _flatten_dicts(x, obs_dim, flatten, "x", batched=False)
    else:
        a = np.asarray(x)
    if a.shape != (obs_dim,):
        raise ValueError(f"x: expected shape ({obs_dim},), got shape {a.shape}")
    if a.dtype.kind not in "fiub":
        raise TypeError(f"x: expected a real-valued numeric array of shape ({obs_dim},), got dtype {a.dtype}")
    return a


def _flatten_dicts(obs: Any, obs_dim: int | None, flatten: Any, name: str, *, batched: bool | None) -> np.ndarray:
    """The env's own observation(s) as critic input: a dict (one observation, or a batch with ``(B, d_k)``
    values) or a sequence of dicts, flattened with ``flatten``; refused without one."""
    if flatten is None:
        first = obs if isinstance(obs, Mapping) else obs[0]
        raise TypeError(
            f"{name}: got the env's observation, a dict (keys {sorted(first)}), but this critic does not know the layout "
            f"that flattens it; pass critic-input rows of shape (B, {obs_dim}) built with the task's layout, "
            "CriticInputLayout.from_space(spec, env.observation_space).flatten(obs)")
    if isinstance(obs, Mapping):
        return np.asarray(flatten(obs, batched=batched, name=name))
    return np.stack([np.asarray(flatten(o, batched=False, name=f"{name}[{i}]")) for i, o in enumerate(obs)])


def as_obs_batch(obs: Any, obs_dim: int | None, *, name: str = "obs", flatten: Any = None) -> np.ndarray:
    """Validate and convert a batch of state-critic inputs to float32 ``(B, obs_dim)``.

    ``flatten`` (a critic that knows its input layout passes :meth:`StateCritic._flatten_obs`): the env's
    own observations are accepted too, a dict (of one observation, or of a batch) or a sequence of
    dicts, flattened with it first; without it a dict is refused, naming how to pass critic-input rows.
    Raises one clear error naming ``name``, the value and what was expected for: non-numeric dtype,
    wrong number of dimensions, wrong width, NaN or inf.
    """
    if not isinstance(obs, np.ndarray) and (isinstance(obs, Mapping) or (
            isinstance(obs, (list, tuple)) and len(obs) > 0 and isinstance(obs[0], Mapping))):
        obs = _flatten_dicts(obs, obs_dim, flatten, name, batched=None)
        obs = obs[None, :] if obs.ndim == 1 else obs
    arr = np.asarray(obs)
    if arr.dtype == object or not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)
                                   or arr.dtype == np.bool_):
        raise TypeError(f"{name}: expected a real-valued numeric array of shape (B, {obs_dim}), got dtype {arr.dtype}")
    if arr.ndim != 2:
        raise ValueError(f"{name}: expected shape (B, {obs_dim}) (batch-first, 2-D), got shape {arr.shape}")
    if obs_dim is not None and arr.shape[1] != obs_dim:
        raise ValueError(f"{name}: expected shape (B, {obs_dim}), got shape {arr.shape} (width {arr.shape[1]} != {obs_dim})")
    arr = arr.astype(np.float32, copy=False)
    if not np.all(np.isfinite(arr)):
        bad = np.argwhere(~np.isfinite(arr))[0]
        raise ValueError(f"{name}: expected finite values, got {arr[tuple(bad)]} at index {tuple(int(i) for i in bad)}")
    return arr


def check_scores(scores: Any, n: int, *, critic: Any = None, head: str | None = None,
                 name: str = "critic") -> StepScores:
    """Check what a critic returned for a batch of ``n`` steps against the :class:`StepScores` contract.

    ``progress`` and ``success``: shape ``(n,)``, finite, in [0, 1]; every ``extra`` head: a numeric
    array of shape ``(n,)``, finite (it may hold raw logits); ``head`` (the score a caller decides
    with, when given): one of the heads, in [0, 1] (it is compared with probabilities). Returns
    ``scores``; otherwise raises one ``TypeError`` / ``ValueError`` naming ``name``, the critic's
    type, the head, the step and the value.
    """
    who = f"{name}.score"
    by = f" (critic {type(critic).__name__})" if critic is not None else ""
    if not isinstance(scores, StepScores):
        raise TypeError(f"{who}: expected StepScores, got {type(scores).__name__}{by}")
    if len(scores) != n:
        raise ValueError(f"{who}: expected {n} scores (one per step), got {len(scores)}{by}")
    if not isinstance(scores.extra, Mapping):
        raise TypeError(f"{who}: expected extra to be a dict of per-step arrays, got {type(scores.extra).__name__}{by}")
    heads: dict[str, np.ndarray] = {"progress": scores.progress, "success": scores.success}
    for k, v in scores.extra.items():
        a = np.asarray(v)
        if a.dtype.kind not in "fiub":
            raise TypeError(f"{who}: expected extra head {k!r} to be numeric, got dtype {a.dtype}{by}")
        if a.shape != (n,):
            raise ValueError(f"{who}: expected extra head {k!r} of shape ({n},) (one per step), got shape {a.shape}{by}")
        heads[str(k)] = a
    for h, a in heads.items():
        bad = np.flatnonzero(~np.isfinite(a))
        if bad.size:
            raise ValueError(f"{who}: expected finite {h} scores, got {float(a[bad[0]]):.6g} at step {int(bad[0])}{by}")
    if head is not None and head not in heads:
        raise ValueError(f"{who}: head {head!r} is not among the critic's heads {sorted(heads)}{by}")
    for h in dict.fromkeys(((head,) if head is not None else ()) + ("progress", "success")):  # the deciding head first
        a = heads[h]
        out = np.flatnonzero((a < 0) | (a > 1))
        if out.size:
            raise ValueError(f"{who}: expected {h} scores in [0, 1] (probabilities), got {float(a[out[0]]):.6g} at step "
                             f"{int(out[0])}{by}; a critic whose model gives logits returns sigmoid(logit)")
    return scores


def _defining_class(obj: Any, attr: str) -> type | None:
    """The class in ``type(obj)``'s MRO whose own namespace defines ``attr``, or ``None``."""
    for klass in type(obj).__mro__:
        if attr in vars(klass):
            return klass
    return None


def fast_path(critic: Any, attr: str) -> Any:
    """``critic``'s fast path ``attr`` (``"score_one"``, :class:`OneRowCritic`; ``"score_rows"``,
    :class:`RowsCritic`) as a bound method, or ``None`` when it has none *or* when it would not give
    :meth:`BaseCritic.score`'s result: a subclass that overrides ``score`` (on the class or the
    instance) below the class that defined the fast path inherits a fast path of the old ``score``, so
    callers must use ``score`` instead. Every library path that uses a fast path takes it from here."""
    fn = getattr(critic, attr, None)
    if not callable(fn):
        return None
    if "score" in getattr(critic, "__dict__", {}) and attr not in critic.__dict__:
        return None  # score replaced on the instance, the fast path not
    if attr in getattr(critic, "__dict__", {}):
        return fn
    own, base = _defining_class(critic, attr), _defining_class(critic, "score")
    if own is None or base is None:
        return fn
    return fn if issubclass(own, base) else None


def _slice(steps: Any, i: int) -> Any:
    if isinstance(steps, np.ndarray):
        return steps[i : i + 1]
    return [steps[i]]


def check_critic(critic: BaseCritic[StepsT], steps: StepsT, *, rtol: float = 1e-4, atol: float = 1e-5) -> StepScores:
    """Check that ``critic`` follows the interface; return its batched scores.

    Checks: the batched call returns :class:`StepScores` of shape ``(B,)`` per head, values are
    finite and in [0, 1], each element of the batched call agrees with a single-step call on the
    same input, and every fast path the critic has (``score_one``, ``score_rows``, on critic-input
    rows) gives the batched call's scores (within ``rtol``/``atol``). Raises ``AssertionError``
    naming the first violation.
    """
    n = len(steps)  # type: ignore[arg-type]  # every batch type of a critic has a length
    if n == 0:
        raise ValueError("steps: expected a non-empty batch, got 0 steps")
    batched = critic.score(steps)
    if not isinstance(batched, StepScores):
        raise AssertionError(f"critic.score must return StepScores, got {type(batched).__name__}")
    for head in ("progress", "success"):
        v = batched.get(head)
        if v.shape != (n,):
            raise AssertionError(f"{head}: expected shape ({n},), got {v.shape}")
        if not np.all(np.isfinite(v)):
            raise AssertionError(f"{head}: got non-finite scores {v}")
        if np.any(v < 0) or np.any(v > 1):
            raise AssertionError(f"{head}: expected values in [0, 1], got min {v.min()} max {v.max()}")
    for i in range(n):
        single = critic.score(_slice(steps, i))
        for head in ("progress", "success"):
            a, b = batched.get(head)[i], single.get(head)
            if b.shape != (1,):
                raise AssertionError(f"{head}: single-step call returned shape {b.shape}, expected (1,)")
            if not np.allclose(a, b[0], rtol=rtol, atol=atol):
                raise AssertionError(
                    f"{head}: batched score {a!r} at index {i} differs from the single-step score {b[0]!r}"
                )
    _check_fast_paths(critic, steps, batched, rtol=rtol, atol=atol)
    return batched


def _check_fast_paths(critic: Any, steps: Any, batched: StepScores, *, rtol: float, atol: float) -> None:
    """Every fast path ``critic`` has (``score_one``, ``score_rows``) gives ``score``'s result on ``steps``."""
    one, rows = getattr(critic, "score_one", None), getattr(critic, "score_rows", None)
    if not (callable(one) or callable(rows)):
        return
    x = np.asarray(steps)
    if x.ndim != 2 or x.dtype.kind not in "fiub":
        return  # fast paths take critic-input rows only
    want = np.stack([batched.progress, batched.success], axis=1)
    got = {}
    if callable(one):
        got["score_one"] = np.array([[float(v) for v in one(x[i])] for i in range(len(x))])
    if callable(rows):
        got["score_rows"] = np.asarray(rows(x), dtype=np.float64)
    for attr, out in got.items():
        where = getattr(_defining_class(critic, attr), "__name__", "?")
        if out.shape != want.shape:
            raise AssertionError(f"{attr} (defined in {where}): returned shape {out.shape}, expected {want.shape}")
        bad = np.argwhere(~np.isclose(out, want, rtol=rtol, atol=atol))
        if bad.size:
            i, j = (int(v) for v in bad[0])
            head = ("progress", "success")[j]
            raise AssertionError(
                f"{attr} (defined in {where}): {head} {out[i, j]!r} at index {i} differs from score's {want[i, j]!r}; "
                f"a critic that overrides score must override {attr} too (or set {attr} = None in the subclass)")


# --------------------------------------------------------------------------- uninformed controls


def _step_key(step: Any) -> bytes:
    """The bytes a control critic hashes for one step: a state row's dtype and bytes, a text step's
    ``(prompt, history, step)`` (its ``extra`` notes are not part of the step), else ``repr``."""
    if isinstance(step, np.ndarray):
        return step.dtype.str.encode() + b"|" + np.ascontiguousarray(step).tobytes()
    if all(hasattr(step, a) for a in ("prompt", "history", "step")):
        return json.dumps([step.prompt, list(step.history), step.step]).encode("utf-8", "surrogatepass")
    if isinstance(step, str):
        return step.encode("utf-8", "surrogatepass")
    return repr(step).encode("utf-8", "surrogatepass")


def _batch_items(steps: Any) -> list:
    if isinstance(steps, np.ndarray):
        if steps.ndim != 2:
            raise ValueError(f"steps: expected a (B, obs_dim) array or a sequence of steps, got shape {steps.shape}")
        return list(steps)
    try:
        return list(steps)
    except TypeError:
        raise TypeError(f"steps: expected a batch (a sequence of steps or a (B, obs_dim) array), got "
                        f"{type(steps).__name__}") from None


def _seeded_uniforms(steps: Any, seed: int, salt: str) -> np.ndarray:
    """One value in [0, 1) per step: a keyed hash (BLAKE2b, key = ``seed``, ``salt``) of the step, so
    the same step gets the same value under the same seed whatever the batch or call order."""
    key = f"{seed}:{salt}".encode()[:64]
    out = np.empty(len(items := _batch_items(steps)), np.float64)
    for i, s in enumerate(items):
        h = int.from_bytes(hashlib.blake2b(_step_key(s), digest_size=8, key=key).digest(), "little")
        out[i] = (h >> 11) * 2.0 ** -53
    return out


class RandomCritic(BaseCritic[Any]):
    """Uninformed control: every step gets an independent uniform score in [0, 1) per head.

    The score is a seeded random function of the step (a keyed hash of its content), so under one
    ``seed`` it is deterministic, the same in a batch and alone (:func:`check_critic` passes), and
    independent of call order. Put it where a learned critic would go (best-of-N, beam search,
    reward shaping) to measure what the critic's information adds over chance.
    """

    def __init__(self, seed: int = 0):
        self.seed = validate.check_seed("seed", seed)

    def score(self, steps: Any) -> StepScores:
        return StepScores(_seeded_uniforms(steps, self.seed, "progress"), _seeded_uniforms(steps, self.seed, "success"))

    def __repr__(self) -> str:
        return f"RandomCritic(seed={self.seed})"


class ConstantCritic(BaseCritic[Any]):
    """Uninformed control: every step scores ``value`` on both heads, plus a seeded tie-break.

    A search that ranks candidates by score would otherwise break the ties of a constant critic by
    proposal order (not at random). ``tie_break > 0`` adds ``tie_break * u`` with ``u`` in [0, 1) a
    seeded random function of the step (as :class:`RandomCritic`, but independent of it under the
    same ``seed``, so the two controls rank candidates differently): the scores differ by less than
    ``tie_break``, so a threshold that ``value`` clears by more than that prunes nothing, and
    the ranking among candidates is random (scores are float32: near 0.5 the default 1e-3 holds
    about 16800 distinct values, so two steps still tie with chance about 6e-5, and such a tie falls
    back to the search's own order). ``tie_break=0`` gives the bare constant.
    """

    def __init__(self, value: float = 0.5, *, tie_break: float = 1e-3, seed: int = 0):
        value = validate.check_prob("value", value)
        tie_break = validate.check_number("tie_break", tie_break, low=0.0, high=1.0 - value)
        self.value, self.tie_break, self.seed = value, tie_break, validate.check_seed("seed", seed)

    def score(self, steps: Any) -> StepScores:
        n = len(_batch_items(steps))
        if self.tie_break == 0.0:
            v = np.full(n, self.value)
            return StepScores(v, v.copy())
        # float64 sum, then float32: a tie_break too small for float32 near value would re-tie the steps
        return StepScores(self.value + self.tie_break * _seeded_uniforms(steps, self.seed, "tie-break:progress"),
                          self.value + self.tie_break * _seeded_uniforms(steps, self.seed, "tie-break:success"))

    def __repr__(self) -> str:
        return f"ConstantCritic(value={self.value}, tie_break={self.tie_break}, seed={self.seed})"
