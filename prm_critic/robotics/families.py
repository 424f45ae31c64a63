"""The registry of step-label families: what ``prm-critic label --family NAME`` and
:func:`prm_critic.robotics.labels.label` run, and what ``train-critic --label`` accepts.

A family is a :class:`LabelFamily`: its name (the folder ``labels/<name>``), the options it takes
(names from :data:`OPTION_DEFAULTS`), ``run(job) -> Path`` (writes ``labels/<name>/shard_*.npz`` and
``labels/<name>.json`` for a :class:`LabelJob`), ``record(options, trust_pickle) -> dict`` (its checked
parameter record, what ``labels/<name>.json`` stores) and whether it restores simulator snapshots.
:func:`register_label_family` adds one; the built-ins are ``subgoal``, ``mc``, ``mc_bisect``,
``outcome``, ``steps_to_success``, and the spec-free ``demo_progress`` and ``success_contrast``
(:mod:`prm_critic.robotics.labels`, :mod:`prm_critic.robotics.demos`). This module imports nothing heavy, so the command
line lists the families without importing gymnasium; the built-ins import their labellers when run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional

import numpy as np

from prm_critic import validate

if TYPE_CHECKING:
    from prm_critic.parallel import Executor

__all__ = ["LabelFamily", "LabelJob", "OPTION_DEFAULTS", "register_label_family", "unregister_label_family",
           "get_label_family", "label_families", "families_taking"]

#: every label option and its default (the command line's ``--k``, ``--stride``, ...); a family takes a subset
OPTION_DEFAULTS: dict[str, Any] = {"k": 8, "stride": 1, "gamma": 0.99, "seed": 0, "rollout_policy": "scripted",
                                   "threshold": 0.0, "resolution": 1, "min_estimates": 2}


@dataclass(frozen=True)
class LabelJob:
    """One labelling request, passed whole to a family's ``run``.

    Attributes:
        out_dir: the data folder written by ``prm-critic collect``.
        family: the family's name.
        options: every option of :data:`OPTION_DEFAULTS`, defaults filled in (the family reads its own).
        progress: show a progress bar.
        trust_pickle: allow a stable-baselines3 ``.zip`` rollout policy.
        policy_loader: ``path -> SB3 model`` for a policy-checkpoint rollout policy.
        executor, workers, address: where state-level tasks run (:mod:`prm_critic.parallel`); ``"auto"``:
            resolve it with :func:`prm_critic.parallel.choose_executor` once the job's size is known.
    """

    out_dir: Path
    family: str
    options: dict[str, Any]
    progress: bool = True
    trust_pickle: bool = False
    policy_loader: Any = None
    executor: "str | Executor" = "local"
    workers: Optional[int] = None
    address: Optional[str] = None


def _default_record(family: str, options: tuple[str, ...]) -> Callable[[dict[str, Any], bool], dict[str, Any]]:
    def record(opts: dict[str, Any], trust_pickle: bool) -> dict[str, Any]:
        return {"family": family, **{name: opts[name] for name in options}}

    return record


@dataclass(frozen=True)
class LabelFamily:
    """One step-label family.

    Args:
        name: registry key, the label folder ``labels/<name>`` and the command line's choice; a
            non-empty string of letters, digits and ``_``.
        run: ``run(job: LabelJob) -> Path``: label every shard of ``job.out_dir`` (resumable) and return
            the folder ``labels/<name>``.
        options: the options it takes (names from :data:`OPTION_DEFAULTS`); another option given to
            it is refused.
        record: ``record(options, trust_pickle) -> dict``: the checked parameter record (raises on a bad
            value); default ``{"family": name, **its options}``.
        snapshots: ``True`` when it restores the simulator snapshot of states (refused on data without
            snapshots, such as Minari imports).
        description: one line for ``prm-critic label --help``.
        spec_free: ``True`` when its labels read nothing of the task spec's subgoals: a critic trained on
            it learns both heads from the family's labels (:func:`prm_critic.robotics.dataset.load_steps`
            gives them as ``progress`` too), so a task without a hand-written spec can be learned.
    """

    name: str
    run: Callable[[LabelJob], Path]
    options: tuple[str, ...] = ()
    record: Optional[Callable[[dict[str, Any], bool], dict[str, Any]]] = field(default=None, compare=False)
    snapshots: bool = False
    description: str = ""
    spec_free: bool = False

    def __post_init__(self) -> None:
        name = self.name
        if not isinstance(name, str) or not name or not name.replace("_", "").isalnum() or not name.isascii():
            raise validate.ArgumentError(f"name: expected a non-empty string of letters, digits and '_' (a folder "
                                         f"name), got {name!r}")
        if not callable(self.run):
            raise validate.ArgumentError(f"run: expected a callable run(job) -> Path for label family {name!r}, "
                                         f"got {self.run!r}")
        if self.record is not None and not callable(self.record):
            raise validate.ArgumentError(f"record: expected a callable record(options, trust_pickle) -> dict or "
                                         f"None for label family {name!r}, got {self.record!r}")
        if isinstance(self.options, str) or not isinstance(self.options, (tuple, list)):
            raise validate.ArgumentError(f"options: expected a tuple of option names for label family {name!r}, "
                                         f"got {self.options!r}")
        for opt in self.options:
            validate.check_choice(f"options of label family {name!r}", opt, list(OPTION_DEFAULTS))
        if len(set(self.options)) != len(self.options):
            raise validate.ArgumentError(f"options: label family {name!r} lists an option twice: {list(self.options)}")
        object.__setattr__(self, "options", tuple(self.options))
        validate.check_flag("snapshots", self.snapshots)
        validate.check_flag("spec_free", self.spec_free)
        if not isinstance(self.description, str):
            raise validate.ArgumentError(f"description: expected a string for label family {name!r}, "
                                         f"got {self.description!r}")

    def params(self, options: dict[str, Any], trust_pickle: bool = False) -> dict[str, Any]:
        """The checked parameter record for ``options`` (every option of :data:`OPTION_DEFAULTS`)."""
        record = self.record if self.record is not None else _default_record(self.name, self.options)
        return record(options, trust_pickle)


_FAMILIES: dict[str, LabelFamily] = {}


def register_label_family(family: LabelFamily, *, replace: bool = False) -> LabelFamily:
    """Add ``family`` to the registry (``replace=True`` replaces one of the same name).

    Raises:
        ArgumentError: ``family`` is not a :class:`LabelFamily`, or its name is taken and not ``replace``.
    """
    return validate.register(_FAMILIES, family, LabelFamily, arg="family",
                             cls_name="prm_critic.robotics.families.LabelFamily", noun="label family", replace=replace)


def unregister_label_family(name: str) -> LabelFamily:
    """Remove and return the family registered as ``name`` (an unknown name is refused, with a near miss)."""
    return _FAMILIES.pop(validate.check_choice("family", name, label_families()))


def get_label_family(name: str) -> LabelFamily:
    """The registered family ``name`` (:class:`~prm_critic.validate.ArgumentError` with a near miss otherwise)."""
    return _FAMILIES[validate.check_choice("family", name, label_families())]


def label_families() -> tuple[str, ...]:
    """Names of the registered families, in registration order."""
    return tuple(_FAMILIES)


def families_taking(option: str) -> tuple[str, ...]:
    """Names of the registered families that take ``option``."""
    validate.check_choice("option", option, list(OPTION_DEFAULTS))
    return tuple(f.name for f in _FAMILIES.values() if option in f.options)


# ------------------------------------------------------------------------------------ built-ins
def _check_count(name: str, v: Any, minimum: int) -> None:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or int(v) < minimum:
        raise ValueError(f"{name}: expected an integer >= {minimum}, got {v!r}")


def _gamma_record(family: str) -> Callable[[dict[str, Any], bool], dict[str, Any]]:
    def record(opts: dict[str, Any], trust_pickle: bool) -> dict[str, Any]:
        gamma = opts["gamma"]
        if isinstance(gamma, bool) or not isinstance(gamma, (int, float)) or not 0.0 < float(gamma) <= 1.0:
            raise ValueError(f"gamma: expected a number in (0, 1], got {gamma!r}")
        return {"family": family, "gamma": float(gamma)}
    return record


def _mc_record(opts: dict[str, Any], trust_pickle: bool) -> dict[str, Any]:
    from prm_critic.robotics.collection import policy_id

    _check_count("k", opts["k"], 1)
    _check_count("stride", opts["stride"], 1)
    _check_count("seed", opts["seed"], 0)
    policy_id(opts["rollout_policy"], name="rollout_policy", trust_pickle=trust_pickle)
    return {"family": "mc", "k": int(opts["k"]), "stride": int(opts["stride"]), "seed": int(opts["seed"]),
            "rollout_policy": str(opts["rollout_policy"])}


def _bisect_record(opts: dict[str, Any], trust_pickle: bool) -> dict[str, Any]:
    from prm_critic.robotics.bisect_labels import bisect_params

    stride = opts["stride"]
    if isinstance(stride, bool) or stride != 1:
        raise ValueError(f"stride: family 'mc_bisect' chooses the states it estimates by binary search, so it "
                         f"takes no stride (got {stride!r}); set its granularity with resolution")
    return bisect_params(k=opts["k"], seed=opts["seed"], threshold=opts["threshold"], resolution=opts["resolution"],
                         rollout_policy=opts["rollout_policy"], trust_pickle=trust_pickle,
                         min_estimates=opts["min_estimates"])


def _run_arrays(job: LabelJob) -> Path:
    from prm_critic.robotics.labels import run_array_family

    return run_array_family(job)


def _run_mc(job: LabelJob) -> Path:
    from prm_critic.robotics.labels import run_mc

    return run_mc(job)


def _run_bisect(job: LabelJob) -> Path:
    from prm_critic.robotics.labels import run_bisect

    return run_bisect(job)


register_label_family(LabelFamily(
    "subgoal", _run_arrays, description="the spec's subgoal progress of each state"))
register_label_family(LabelFamily(
    "mc", _run_mc, ("k", "stride", "seed", "rollout_policy"), _mc_record, snapshots=True,
    description="Monte-Carlo: the fraction of k continuations from each state's snapshot that succeed"))
register_label_family(LabelFamily(
    "mc_bisect", _run_bisect, ("k", "seed", "threshold", "resolution", "rollout_policy", "min_estimates"),
    _bisect_record,
    snapshots=True,
    description="mc estimates only where a binary search for the drop of the success estimate needs them, "
                "the other steps interpolated"))
register_label_family(LabelFamily(
    "outcome", _run_arrays, ("gamma",), _gamma_record("outcome"),
    description="the episode's success discounted by gamma per step to its end"))
register_label_family(LabelFamily(
    "steps_to_success", _run_arrays, ("gamma",), _gamma_record("steps_to_success"),
    description="gamma to the power of the steps from the state to the first success at or after it in its "
                "episode (0 if none): the behaviour's discounted value of reaching success"))
register_label_family(LabelFamily(
    "demo_progress", _run_arrays, description="spec-free: t / L along each successful episode (L: its steps to "
    "success), 1 on later states that still succeed; failed episodes unlabelled", spec_free=True))
register_label_family(LabelFamily(
    "success_contrast", _run_arrays, description="spec-free: 1 on the states of successful episodes, 0 on those of "
    "failed ones (a success classifier's targets; needs both)", spec_free=True))
