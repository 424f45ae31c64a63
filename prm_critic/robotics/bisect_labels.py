"""Binary-search Monte-Carlo step labels (family ``mc_bisect``, OmegaPRM-style).

Dense ``mc`` labels run ``k`` continuations from every ``stride``-th state. ``mc_bisect`` runs them
only at the states a binary search needs, per episode of ``T`` states ``s_0 .. s_{T-1}``:

1. estimate ``v`` at ``min(min_estimates, T)`` states spread evenly over the episode (``k``
   continuations each, exactly as ``mc`` does): ``g_i = floor(i * (T-1) / (n-1) + 1/2)``, ``i = 0 .. n-1``,
   so both ends ``v(0)`` and ``v(T-1)`` always (the default ``min_estimates = 2``: the ends only);
2. for every pair of consecutive grid states ``a < b`` with ``v(a) > threshold >= v(b)`` (the success
   probability drops between them), bisect: ``lo, hi = a, b``; while ``hi - lo > resolution``: estimate
   ``v(m)``, ``m = (lo + hi) // 2``; ``lo = m`` if ``v(m) > threshold`` else ``hi = m``. This locates the
   drop to ``<= threshold`` (OmegaPRM's "first error step") within ``resolution`` steps using about
   ``log2((b - a) / resolution)`` more estimated states instead of ``T / stride``;
3. a pair without such a drop (e.g. a successful episode whose last state succeeds, or an episode
   hopeless from its start) gets no estimate between its two states.

Why a grid of more than two states (``min_estimates``): with the ends only, an episode whose first
estimate is 0 (no continuation of ``k`` succeeded, likely at small ``k`` even where the success
probability is not 0) and whose last estimate is 0 has no drop to search for, so it is labelled 0
throughout, though states in its middle may succeed often; the grid estimates some of them and
searches the drops they expose.

Every state of the episode is then labelled by linear interpolation between the estimates of the
nearest estimated states on its left and right (``np.interp`` over the estimated ``(t, v(t))``):

``label_t = v(a) + (v(b) - v(a)) * (t - a) / (b - a)``, ``a <= t <= b`` consecutive estimated steps.

Why interpolation (not the left estimate): by construction, inside a searched bracket every estimated
state left of the located drop has ``v > threshold`` and every one right of it ``v <= threshold``, so
interpolation never crosses the drop by more than ``resolution`` steps, and where the success
probability decays or rises gradually (a successful episode climbing to its goal) it follows the trend
instead of holding a stale value. Estimated states keep exactly the label ``mc`` would give them: continuation ``j`` of step
``(episode, t)`` draws from ``default_rng([seed, episode, t, j])``, so labels do not depend on shard
order, resumption or which worker ran them.

Mask: every step is labelled (``mask = True``): inferring the states between estimates is the point
of the family. The label shard also stores ``estimated`` (True where the label is a ``k``-rollout
estimate, False where it is interpolated) and ``hard = label > 0``.

Every estimated state is first checked to replay its recorded step (restore the snapshot, step the
recorded action, compare the critic input, reward and flags exactly), as for ``mc``.

Cost: ``labels/mc_bisect.stats.json`` (and ``labels/mc.stats.json`` for dense labels) records per
shard and in total the labelled and estimated states, the rollouts, the rollout steps (env steps in
continuations) and the replay-check steps. Each label shard also stores its own cost record (arrays
``cost`` and ``cost_keys``, written in the same atomic write as its labels), and every run rebuilds the
stats file from them before labelling (:func:`sync_stats`): a kill between the two writes loses nothing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import numpy as np

from prm_critic.robotics.collection import ShardError, atomic_savez, atomic_write_json, load_shard

__all__ = ["FAMILY", "DEFAULT_MIN_ESTIMATES", "bisect_params", "bisect_episode", "grid_states", "label_bisect",
           "read_stats", "update_stats", "cost_arrays", "sync_stats"]

FAMILY = "mc_bisect"
#: states of each episode estimated before any search (:func:`bisect_episode`): the two ends
DEFAULT_MIN_ESTIMATES = 2
STAT_KEYS = ("episodes", "states", "estimated_states", "rollouts", "rollout_steps", "replay_steps")


def bisect_params(*, k: int = 8, seed: int = 0, threshold: float = 0.0, resolution: int = 1,
                  rollout_policy: str = "scripted", trust_pickle: bool = False,
                  min_estimates: int = DEFAULT_MIN_ESTIMATES) -> dict[str, Any]:
    """Validated parameter record of ``mc_bisect`` (what ``labels/mc_bisect.json`` stores).

    ``min_estimates`` is recorded only when it is not the default (2, the ends only), so a label folder
    written before the option existed resumes with the same record."""
    from prm_critic.robotics.collection import policy_id

    for name, v in (("k", k), ("resolution", resolution)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or int(v) < 1:
            raise ValueError(f"{name}: expected an integer >= 1, got {v!r}")
    if isinstance(min_estimates, bool) or not isinstance(min_estimates, (int, np.integer)) or int(min_estimates) < 2:
        raise ValueError(f"min_estimates: expected an integer >= 2 (the two ends of an episode are always estimated), "
                         f"got {min_estimates!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or int(seed) < 0:
        raise ValueError(f"seed: expected an integer >= 0, got {seed!r}")
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0.0 <= float(threshold) < 1.0:
        raise ValueError(f"threshold: expected a number in [0, 1) (the success estimate at or below which a state "
                         f"counts as dropped), got {threshold!r}")
    policy_id(rollout_policy, name="rollout_policy", trust_pickle=trust_pickle)
    record = {"family": FAMILY, "k": int(k), "seed": int(seed), "threshold": float(threshold),
              "resolution": int(resolution), "rollout_policy": str(rollout_policy)}
    if int(min_estimates) != DEFAULT_MIN_ESTIMATES:
        record["min_estimates"] = int(min_estimates)
    return record


def grid_states(T: int, n: int) -> np.ndarray:
    """The ``min(n, T)`` distinct states ``floor(i * (T-1) / (n-1) + 1/2)`` spread evenly over ``0 .. T-1``
    (both ends included; ``[0]`` for ``T = 1``)."""
    T, n = int(T), max(2, int(n))
    if T <= n:
        return np.arange(T, dtype=np.int64)
    # consecutive points are >= 1 apart, so rounding half up keeps them distinct
    return np.floor(np.arange(n) * ((T - 1) / (n - 1)) + 0.5).astype(np.int64)


def bisect_episode(T: int, estimate: Callable[[int], float], *, threshold: float = 0.0,
                   resolution: int = 1, min_estimates: int = DEFAULT_MIN_ESTIMATES) -> tuple[np.ndarray, np.ndarray]:
    """Labels of one episode's ``T`` states from estimates at the states a binary search needs.

    Args:
        T: number of states (steps) of the episode.
        estimate: ``i -> v(i)``, the success estimate of state ``i`` (called once per estimated state).
        threshold: ``v <= threshold`` counts as dropped.
        resolution: stop bisecting when the bracket ``[lo, hi]`` is at most this many steps wide.
        min_estimates: states estimated before any search, spread evenly over the episode
            (:func:`grid_states`; all ``T`` when ``T <= min_estimates``), an int >= 2. The default 2
            estimates the two ends only.

    Returns:
        ``(label, estimated)``: ``(T,)`` float32 labels (estimates, linearly interpolated between
        consecutive estimated states) and the ``(T,)`` bool mask of estimated states.
    """
    T = int(T)
    if T < 1:
        raise ValueError(f"T: expected an episode of at least one step, got {T}")
    est: dict[int, float] = {}

    def ev(i: int) -> float:
        if i not in est:
            est[i] = float(estimate(i))
        return est[i]

    if isinstance(min_estimates, bool) or not isinstance(min_estimates, (int, np.integer)) or int(min_estimates) < 2:
        raise ValueError(f"min_estimates: expected an integer >= 2, got {min_estimates!r}")
    grid = [int(g) for g in grid_states(T, int(min_estimates))]
    values = [ev(g) for g in grid]  # both ends are always estimated, first to last
    for a, b, v_a, v_b in zip(grid[:-1], grid[1:], values[:-1], values[1:]):
        if not v_a > threshold >= v_b:
            continue
        lo, hi = a, b
        while hi - lo > resolution:
            mid = (lo + hi) // 2
            if ev(mid) > threshold:
                lo = mid
            else:
                hi = mid
    xs = np.asarray(sorted(est), dtype=np.float64)
    lab = np.interp(np.arange(T, dtype=np.float64), xs, [est[int(i)] for i in xs]).astype(np.float32)
    estimated = np.zeros(T, dtype=bool)
    estimated[xs.astype(np.int64)] = True
    return lab, estimated


def read_stats(out_dir: "str | Path", family: str) -> dict[str, Any]:
    """``labels/<family>.stats.json`` (rollout cost per shard and in total); ``{}`` when absent."""
    path = Path(out_dir) / "labels" / f"{family}.stats.json"
    if not path.exists():
        return {}
    try:
        doc = json.loads(path.read_text())
        if not isinstance(doc, dict) or not isinstance(doc.get("shards"), dict):
            raise ValueError("expected an object with a 'shards' object")
    except ValueError as exc:
        raise ShardError(f"label stats file {str(path)!r} is not a valid stats record ({exc}); delete it and "
                         f"relabel the family {family!r}") from exc
    return doc


def update_stats(out_dir: "str | Path", family: str, shard: str, record: dict[str, int]) -> None:
    """Store one shard's labelling cost in ``labels/<family>.stats.json`` and recompute the total."""
    doc = read_stats(out_dir, family) or {"family": family, "shards": {}}
    doc["shards"][shard] = {k: int(record[k]) for k in STAT_KEYS}
    doc["total"] = {k: int(sum(r[k] for r in doc["shards"].values())) for k in STAT_KEYS}
    atomic_write_json(Path(out_dir) / "labels" / f"{family}.stats.json", doc)


def cost_arrays(record: dict[str, int]) -> dict[str, np.ndarray]:
    """A shard's cost record as the arrays its label file stores with its labels (``cost``, ``cost_keys``)."""
    return {"cost": np.asarray([int(record[k]) for k in STAT_KEYS], dtype=np.int64),
            "cost_keys": np.asarray(STAT_KEYS)}


def _shard_cost(path: Path) -> dict[str, int] | None:
    """The cost record stored in the label file ``path``; ``None`` for a label file without one."""
    with np.load(path, allow_pickle=False) as z:
        if "cost" not in z.files:
            return None
        cost, keys = z["cost"], z["cost_keys"] if "cost_keys" in z.files else None
    if keys is None or keys.tolist() != list(STAT_KEYS) or cost.shape != (len(STAT_KEYS),):
        raise ShardError(f"label file {str(path)!r}: cost record has keys {None if keys is None else keys.tolist()} "
                         f"and shape {cost.shape}; expected keys {list(STAT_KEYS)}, one value each; delete the file "
                         f"to relabel its shard")
    return {k: int(v) for k, v in zip(STAT_KEYS, cost.tolist())}


def sync_stats(out_dir: "str | Path", family: str, files: "list[Path]") -> set[str]:
    """Rebuild ``labels/<family>.stats.json`` from the cost records in the label files of ``files``.

    A label file without a cost record (written before label files carried one) keeps its entry of the
    stats file. Returns the names of the label files that have neither: their cost is unknown, so the
    caller labels those shards again (labels are seeded per state, so they come out identical).
    """
    out = Path(out_dir)
    old = read_stats(out, family).get("shards", {})
    lab_dir = out / "labels" / family
    shards: dict[str, dict[str, int]] = {}
    unknown: set[str] = set()
    for f in files:
        target = lab_dir / f.name
        if not target.exists():
            continue
        try:
            record = _shard_cost(target)
        except ShardError:
            raise
        except Exception:  # an unreadable label file: labelled again by the caller (shards_todo)
            continue
        if record is None:
            record = old.get(f.name)
        if record is None:
            unknown.add(f.name)
        else:
            shards[f.name] = {k: int(record[k]) for k in STAT_KEYS}
    if shards or old:
        doc = {"family": family, "shards": shards,
               "total": {k: int(sum(r[k] for r in shards.values())) for k in STAT_KEYS}}
        atomic_write_json(out / "labels" / f"{family}.stats.json", doc)
    return unknown


def _episodes(d: dict[str, np.ndarray]) -> list[np.ndarray]:
    """Row indices of each episode of a shard, ordered by ``t`` (checked to be 0 .. T-1)."""
    out = []
    for e in np.unique(d["episode"]):
        idx = np.nonzero(d["episode"] == e)[0]
        idx = idx[np.argsort(d["t"][idx], kind="stable")]
        if not np.array_equal(d["t"][idx], np.arange(len(idx))):
            raise ShardError(f"episode {int(e)}: steps are not 0 .. {len(idx) - 1} (got t = {d['t'][idx].tolist()[:10]}...)")
        out.append(idx)
    return out


def label_bisect(out_dir: "str | Path", *, k: int = 8, seed: int = 0, threshold: float = 0.0, resolution: int = 1,
                 rollout_policy: str = "scripted", progress: bool = True, trust_pickle: bool = False,
                 policy_loader: Any = None, min_estimates: int = DEFAULT_MIN_ESTIMATES) -> Path:
    """Label every trajectory shard of ``out_dir`` with ``mc_bisect`` (resumable per shard).

    What :func:`prm_critic.robotics.labels.label` runs for ``family="mc_bisect"``.

    Returns:
        the folder ``out_dir/labels/mc_bisect``.
    """
    from prm_critic._optional import require
    from prm_critic.robotics.collection import check_policy_loader, read_meta
    from prm_critic.robotics.labels import MCLabeler, check_stored_params, shard_files, shards_todo

    tqdm = require("tqdm.auto").tqdm  # the robotics extra installs it

    out = Path(out_dir)
    meta = read_meta(out)
    params = bisect_params(k=k, seed=seed, threshold=threshold, resolution=resolution,
                           rollout_policy=rollout_policy, trust_pickle=trust_pickle, min_estimates=min_estimates)
    check_policy_loader(params["rollout_policy"], policy_loader, name="rollout_policy")
    files = shard_files(out)
    lab_dir = out / "labels" / FAMILY
    check_stored_params(out, FAMILY, params)
    unknown = sync_stats(out, FAMILY, files)  # a corrupt stats file is refused before any rollout
    labeler = MCLabeler(meta, k=params["k"], seed=params["seed"], rollout_policy=params["rollout_policy"],
                        trust_pickle=trust_pickle, policy_loader=policy_loader, family=FAMILY)
    try:
        atomic_write_json(out / "labels" / f"{FAMILY}.json", params)
        todo = shards_todo(files, lab_dir, relabel=unknown)
        bar = tqdm(total=len(todo), desc=f"label {FAMILY} ({out.name})", unit="shard", disable=not progress)
        for f in todo:
            d = load_shard(f)
            n = len(d["t"])
            soft = np.full(n, np.nan, dtype=np.float32)
            estimated = np.zeros(n, dtype=bool)
            steps0, checks, episodes = labeler.steps, 0, _episodes(d)
            for idx in episodes:
                def estimate(i: int, idx=idx, d=d) -> float:
                    r = int(idx[i])
                    row = {key: d[key][r] for key in ("action", "next_x", "reward", "terminated", "truncated")}
                    return labeler.label_state(d["sim"][r], str(d["py"][r]), d["x"][r], d["episode"][r], d["t"][r],
                                               row=row)

                lab, est = bisect_episode(len(idx), estimate, threshold=params["threshold"],
                                          resolution=params["resolution"],
                                          min_estimates=params.get("min_estimates", DEFAULT_MIN_ESTIMATES))
                soft[idx], estimated[idx] = lab, est
                checks += int(est.sum())
            hard = (soft > 0).astype(np.float32)
            n_est = int(estimated.sum())
            record = {"episodes": len(episodes), "states": n, "estimated_states": n_est,
                      "rollouts": n_est * params["k"], "rollout_steps": labeler.steps - steps0 - checks,
                      "replay_steps": checks}
            atomic_savez(lab_dir / f.name, label=soft, soft=soft, hard=hard, mask=np.ones(n, dtype=bool),
                         estimated=estimated, k=np.int64(params["k"]), **cost_arrays(record))
            update_stats(out, FAMILY, f.name, record)
            bar.update(1)
        bar.close()
    finally:
        labeler.close()
    return lab_dir
