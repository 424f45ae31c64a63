"""Load collected steps with one label family as flat numpy arrays, and split them by episode.

``load_steps(out_dir, family)`` concatenates every trajectory shard of ``out_dir`` with its label
shard ``labels/<family>/shard_*.npz`` into a :class:`StepTable` (rows ordered by episode, then t).

``meta.json`` is checked before it is used: its ``spec`` must load, its ``layout`` must name the spec's
``critic_input`` keys in order with one positive integer size each, ``obs_dim = sum(sizes)``, and every
shard's ``x`` / ``next_x`` must be ``(N, obs_dim)``. A disagreement is a :class:`ShardError` naming the
file, the field, its value and what was expected.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from prm_critic import validate
from prm_critic.robotics.collection import ShardError, load_shard, read_meta, shard_files
from prm_critic.robotics.layout import CriticInputLayout
from prm_critic.robotics.spec import TaskSpec, load_spec

__all__ = ["StepTable", "load_steps", "split_episodes"]


@dataclass
class StepTable:
    """Steps of a data set with one label family. All arrays have ``N`` rows.

    Attributes:
        x: ``(N, D)`` float32 critic input of ``s_t``.
        next_x: ``(N, D)`` float32 critic input of ``s_{t+1}``.
        episode: ``(N,)`` int64 global episode index.
        t: ``(N,)`` int64 step index inside the episode.
        ep_len: ``(N,)`` int64 length of the step's episode.
        ep_success: ``(N,)`` bool success of the step's episode.
        progress: ``(N,)`` float32 subgoal progress of ``s_t`` (spec progress, in [0, 1]); for a spec-free
            family (``demo_progress``, ``success_contrast``) the family's label instead (NaN where unlabelled).
        success: ``(N,)`` float32 the family's success label (NaN where ``mask`` is False).
        mask: ``(N,)`` bool, label present.
        spec: the task spec; layout: the critic-input layout; meta: ``meta.json``.
        family: the label family (``None``: read without labels); extra: other per-row arrays (``mc``: ``hard``; all: ``action``,
            ``reward``, ``terminated``, ``truncated``, ``step_success``).
    """

    x: np.ndarray
    next_x: np.ndarray
    episode: np.ndarray
    t: np.ndarray
    ep_len: np.ndarray
    ep_success: np.ndarray
    progress: np.ndarray
    success: np.ndarray
    mask: np.ndarray
    spec: TaskSpec
    layout: CriticInputLayout
    meta: dict[str, Any]
    family: str | None = "mc"
    extra: dict[str, np.ndarray] = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.x.shape[0])

    def select(self, rows: np.ndarray) -> "StepTable":
        """Sub-table of ``rows`` (bool mask or index array)."""
        def take(a: np.ndarray) -> np.ndarray:
            return a[rows]

        return StepTable(
            x=take(self.x), next_x=take(self.next_x), episode=take(self.episode), t=take(self.t),
            ep_len=take(self.ep_len), ep_success=take(self.ep_success), progress=take(self.progress),
            success=take(self.success), mask=take(self.mask), spec=self.spec, layout=self.layout,
            meta=self.meta, family=self.family, extra={k: take(v) for k, v in self.extra.items()},
        )

    @property
    def episodes(self) -> np.ndarray:
        """Sorted unique episode indices."""
        return np.unique(self.episode)


def _check_meta(meta: Any, path: Path) -> tuple[TaskSpec, CriticInputLayout]:
    """Spec and critic-input layout of ``meta.json``, after checking the fields :func:`load_steps` uses."""
    where = f"meta file {str(path)!r}"
    if not isinstance(meta, dict):
        raise ShardError(f"{where}: expected a JSON object, got {type(meta).__name__}")
    for key in ("spec", "layout"):
        if key not in meta:
            raise ShardError(f"{where}: missing field {key!r}; expected the fields written by `prm-critic collect`")
    try:
        spec = load_spec(meta["spec"])
    except Exception as exc:  # SpecError, TypeError from a non-dict value...
        raise ShardError(f"{where}: field 'spec' is not a valid task spec ({type(exc).__name__}: {exc})") from exc
    lay = meta["layout"]
    if not isinstance(lay, dict):
        raise ShardError(f"{where}: field 'layout' must be an object with keys, sizes and obs_dim, got {lay!r}")
    missing = [k for k in ("keys", "sizes", "obs_dim") if k not in lay]
    if missing:
        raise ShardError(f"{where}: layout is missing {missing}; expected keys, sizes and obs_dim")
    keys, sizes, obs_dim = lay["keys"], lay["sizes"], lay["obs_dim"]
    expected_keys = list(spec.critic_input)
    if not isinstance(keys, list) or keys != expected_keys:
        raise ShardError(
            f"{where}: layout keys {keys!r} disagree with the spec's critic_input {expected_keys!r}"
        )
    if not isinstance(sizes, dict) or sorted(sizes) != sorted(keys):
        got = sorted(sizes) if isinstance(sizes, dict) else sizes
        raise ShardError(f"{where}: layout sizes name {got!r}; expected one size for each of {keys!r}")
    for k in keys:
        v = sizes[k]
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ShardError(f"{where}: layout size of {k!r} is {v!r}; expected an integer >= 1")
    total = sum(sizes[k] for k in keys)
    if isinstance(obs_dim, bool) or not isinstance(obs_dim, int) or obs_dim != total:
        raise ShardError(
            f"{where}: layout width obs_dim={obs_dim!r} disagrees with the sum of its sizes {sizes!r} = {total}"
        )
    return spec, CriticInputLayout(keys, sizes)


def _check_width(d: dict[str, np.ndarray], f: Path, meta_path: Path, obs_dim: int) -> None:
    for key in ("x", "next_x"):
        a = d[key]
        if a.ndim != 2 or a.shape[1] != obs_dim:
            got = a.shape[1] if a.ndim == 2 else f"shape {a.shape}"
            raise ShardError(
                f"shard file {str(f)!r}: data width of {key!r} is {got}, but the layout width in "
                f"{str(meta_path)!r} is obs_dim={obs_dim}; the meta file and the data come from different runs"
            )


def load_steps(out_dir: "str | Path", family: str | None = "mc") -> StepTable:
    """All steps of ``out_dir`` with the ``family`` labels (a registered label family:
    :func:`prm_critic.robotics.families.label_families`). ``family=None`` reads the trajectories
    without labels (``success`` NaN, ``mask`` False everywhere): what needs only the states, the
    episodes' outcomes and the spec's progress (distilling a critic, for one) runs on unlabelled data.

    Raises:
        FileNotFoundError: no data, or the family was not labelled yet (names the command to run).
        ShardError: a shard file is corrupt (names the file), label and data shards disagree, or
            ``meta.json`` disagrees with itself or with the data (spec, layout names, sizes, width).
    """
    from prm_critic.robotics.families import get_label_family, label_families
    from prm_critic.robotics.labels import subgoal_evaluator

    if family is not None:
        validate.check_choice("family", family, label_families())
    out = Path(out_dir)
    meta = read_meta(out)
    spec, layout = _check_meta(meta, out / "meta.json")
    files = shard_files(out)
    lab_dir = out / "labels" / (family or "")
    cols: dict[str, list] = {k: [] for k in ("x", "next_x", "episode", "t", "ep_len", "ep_success", "success",
                                               "mask", "hard", "action", "reward", "terminated", "truncated",
                                               "step_success")}
    for f in files:
        d = load_shard(f)
        _check_width(d, f, out / "meta.json", layout.obs_dim)
        n = len(d["t"])
        lab = _label_shard(lab_dir / f.name, f, n, out, family)
        ep_len = dict(zip(d["ep_index"].tolist(), d["ep_len"].tolist()))
        ep_ok = dict(zip(d["ep_index"].tolist(), d["ep_success"].tolist()))
        eps = d["episode"].tolist()
        for key in ("x", "next_x", "episode", "t", "action", "reward", "terminated", "truncated"):
            cols[key].append(d[key])
        cols["step_success"].append(d["success"])
        cols["ep_len"].append(np.asarray([ep_len[e] for e in eps], dtype=np.int64))
        cols["ep_success"].append(np.asarray([ep_ok[e] for e in eps], dtype=bool))
        cols["success"].append(lab["label"].astype(np.float32))
        cols["mask"].append(lab["mask"].astype(bool))
        if "hard" in lab:
            cols["hard"].append(lab["hard"].astype(np.float32))
    cat = {k: np.concatenate(v) for k, v in cols.items() if v}
    if family is not None and get_label_family(family).spec_free:
        # a spec-free family teaches both heads from its own labels: the spec's subgoals are never read
        progress = np.where(cat["mask"], cat["success"], np.nan).astype(np.float32)
    elif spec.subgoals:
        try:
            evaluator = subgoal_evaluator(meta)
        except (KeyError, TypeError, ValueError) as exc:  # SpecError is a ValueError
            raise ShardError(
                f"meta file {str(out / 'meta.json')!r}: its subgoals cannot be evaluated with its layout and "
                f"maze fields ({type(exc).__name__}: {exc})"
            ) from exc
        progress = evaluator.progress(cat["x"]).astype(np.float32)
    else:
        progress = np.full(len(cat["t"]), np.nan, dtype=np.float32)
    extra: dict[str, np.ndarray] = {k: cat[k] for k in ("hard", "action", "reward", "terminated", "truncated", "step_success") if k in cat}
    return StepTable(
        x=cat["x"], next_x=cat["next_x"], episode=cat["episode"], t=cat["t"], ep_len=cat["ep_len"],
        ep_success=cat["ep_success"], progress=progress, success=cat["success"], mask=cat["mask"],
        spec=spec, layout=layout, meta=meta, family=family, extra=extra,
    )


def _label_shard(lf: Path, data_file: Path, n: int, out: Path, family: str | None) -> dict[str, np.ndarray]:
    """The label shard ``lf`` of a data shard of ``n`` rows (``family=None``: no labels, NaN and mask False)."""
    if family is None:
        return {"label": np.full(n, np.nan, np.float32), "mask": np.zeros(n, bool)}
    if not lf.exists():
        raise FileNotFoundError(
            f"labels: {str(lf)!r} does not exist; run `prm-critic label --data {out} --family {family}`"
        )
    lab = load_shard(lf, ("label", "mask"))
    if len(lab["label"]) != n:
        raise ShardError(f"label file {str(lf)!r} has {len(lab['label'])} rows, its data shard {str(data_file)!r} has {n}")
    return lab


def split_episodes(table: StepTable, holdout: float = 0.2, seed: int = 0) -> tuple[StepTable, StepTable]:
    """Split by episode: a random ``holdout`` fraction of episodes (at least one) goes to the test table.

    Returns:
        ``(train, test)``; no episode appears in both.
    """
    if isinstance(holdout, bool) or not isinstance(holdout, (int, float)) or not 0.0 < float(holdout) < 1.0:
        raise ValueError(f"holdout: expected a fraction in (0, 1), got {holdout!r}")
    eps = table.episodes
    if len(eps) < 2:
        raise ValueError(f"table: need at least 2 episodes to split, got {len(eps)}")
    rng = np.random.default_rng(seed)
    n_test = min(len(eps) - 1, max(1, int(round(holdout * len(eps)))))
    test_eps = rng.choice(eps, size=n_test, replace=False)
    is_test = np.isin(table.episode, test_eps)
    return table.select(~is_test), table.select(is_test)
