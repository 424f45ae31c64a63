"""Load collected steps with one label family as flat numpy arrays, and split them by episode.

``load_steps(out_dir, family)`` concatenates every trajectory shard of ``out_dir`` with its label
shard ``labels/<family>/shard_*.npz`` into a :class:`StepTable` (rows ordered by episode, then t).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from prm_critic.robotics.collect import ShardError, load_shard, read_meta
from prm_critic.robotics.make import CriticInputLayout
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
        progress: ``(N,)`` float32 subgoal progress of ``s_t`` (spec progress, in [0, 1]).
        success: ``(N,)`` float32 the family's success label (NaN where ``mask`` is False).
        mask: ``(N,)`` bool, label present.
        spec: the task spec; layout: the critic-input layout; meta: ``meta.json``.
        family: the label family; extra: other per-row arrays (``mc``: ``hard``; all: ``action``,
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
    family: str = "mc"
    extra: dict[str, np.ndarray] = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.x.shape[0])

    def select(self, rows: np.ndarray) -> "StepTable":
        """Sub-table of ``rows`` (bool mask or index array)."""
        take = (lambda a: a[rows])
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


def load_steps(out_dir: "str | Path", family: str = "mc") -> StepTable:
    """All steps of ``out_dir`` with the ``family`` labels (``subgoal``, ``mc`` or ``outcome``).

    Raises:
        FileNotFoundError: no data, or the family was not labelled yet (names the command to run).
        ShardError: a shard file is corrupt (names the file) or label and data shards disagree.
    """
    from prm_critic.robotics.labels import FAMILIES, _evaluator

    if family not in FAMILIES:
        raise ValueError(f"family: expected one of {list(FAMILIES)}, got {family!r}")
    out = Path(out_dir)
    meta = read_meta(out)
    files = sorted((out / "shards").glob("shard_*.npz"))
    if not files:
        raise FileNotFoundError(f"data: no shard files in {str(out / 'shards')!r} (run `prm-critic collect` first)")
    lab_dir = out / "labels" / family
    cols: dict[str, list] = {k: [] for k in ("x", "next_x", "episode", "t", "ep_len", "ep_success", "success",
                                               "mask", "hard", "action", "reward", "terminated", "truncated",
                                               "step_success")}
    for f in files:
        d = load_shard(f)
        lf = lab_dir / f.name
        if not lf.exists():
            raise FileNotFoundError(
                f"labels: {str(lf)!r} does not exist; run `prm-critic label --data {out} --family {family}`"
            )
        lab = load_shard(lf, ("label", "mask"))
        n = len(d["t"])
        if len(lab["label"]) != n:
            raise ShardError(f"label file {str(lf)!r} has {len(lab['label'])} rows, its data shard {str(f)!r} has {n}")
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
    spec = load_spec(meta["spec"])
    layout = CriticInputLayout.from_dict(meta["layout"])
    if spec.subgoals:
        progress = _evaluator(meta).progress(cat["x"]).astype(np.float32)
    else:
        progress = np.full(len(cat["t"]), np.nan, dtype=np.float32)
    extra = {k: cat[k] for k in ("hard", "action", "reward", "terminated", "truncated", "step_success") if k in cat}
    return StepTable(
        x=cat["x"], next_x=cat["next_x"], episode=cat["episode"], t=cat["t"], ep_len=cat["ep_len"],
        ep_success=cat["ep_success"], progress=progress, success=cat["success"], mask=cat["mask"],
        spec=spec, layout=layout, meta=meta, family=family, extra=extra,
    )


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
