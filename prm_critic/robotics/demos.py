"""Demonstrations: the successful episodes of a data folder, as the input of spec-free critics and of RL.

A demonstrations folder is a ``prm-critic collect`` folder (scripted, random or trained-policy
episodes), a Minari import (:func:`prm_critic.robotics.minari.import_minari`) or a user's own arrays
(:func:`import_arrays`). :func:`load_demos` keeps its successful episodes (the first ``n`` by episode
index) and records what it kept: the folder, the count, the episode indices and a SHA-256 over every
array that changes a critic or a run trained on them (the critic inputs of ``s_t`` and ``s_{t+1}``,
the actions, the success flags and the simulator snapshots), so that every critic and run can name
the demonstrations it used and a changed file is never taken for the same data.

Nothing here reads the task spec's subgoals: the labels below use only the episodes' own success
flags (the env's ``info``), the time index and, for hindsight goals, the env's own
``compute_reward``.

**Labels of the ``demo_progress`` family.** Along a successful demonstration whose first success is
at step ``t*`` (the next state of step ``t*`` succeeds), with ``L = t* + 1`` steps to success::

    y_t = t / L                       for t <= t*      (0 at the start, rising by 1/L per step)
    y_t = 1                           for t > t* where s_t still succeeds
    (unlabelled)                      for t > t* where s_t no longer succeeds, and on failed episodes

*Hindsight* (:func:`hindsight_rows`): every prefix of a successful demonstration is a successful
demonstration for the goal it reached at its end. For a row ``t`` and a goal ``g'`` achieved at a
later state ``j`` of the same demonstration, let ``m`` be the first state (``0 <= m <= j``) whose
achieved goal meets ``g'`` (the env's ``compute_reward``); the row's input gets ``desired_goal = g'``
and the label ``1`` where ``s_t`` meets ``g'``, ``t / m`` where ``t < m``, none otherwise.

*Negatives* (:func:`branch_rows`): from a demonstration state ``s_t`` (``t <= t*``, restored from its
exact snapshot) ``k`` uniformly random actions lead to states labelled by how far they fall behind,
one step of progress lost per random step: ``max(0, (t - i) / L)`` after ``i`` random steps. A
time-reversed clip is not a negative for a state critic: its states are the demonstration's own
(only a sequence model sees the order), so the random-action branches are the negatives that
reach states the demonstration never visited.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from prm_critic import validate
from prm_critic.robotics.collection import ShardError, load_shard, read_meta, shard_files
from prm_critic.robotics.layout import CriticInputLayout
from prm_critic.robotics.spec import TaskSpec, load_spec

__all__ = ["Demonstrations", "DemoError", "check_whole_episodes", "load_demos", "demo_progress_labels", "hindsight_rows", "branch_rows",
           "goal_success_fn", "DemoRows", "success_contrast_labels", "import_arrays", "ARRAY_KEYS"]

#: the per-step arrays a demonstrations hash covers (and :func:`load_demos` keeps)
_HASHED = ("x", "next_x", "action", "success", "sim", "py")


class DemoError(ValueError):
    """Data that cannot serve as demonstrations (no successful episode, fewer than asked for, ...)."""


@dataclass(frozen=True, eq=False)
class Demonstrations:
    """The successful episodes kept from a data folder, each one block of rows ``t = 0, 1, ...``.

    Attributes:
        folder: the data folder.
        spec: its task spec; layout: its critic-input layout; meta: its ``meta.json``.
        episodes: the kept episodes' indices (ascending).
        x, next_x: ``(N, D)`` float32 critic inputs of ``s_t`` and ``s_{t+1}``.
        action: ``(N, A)``; success: ``(N,)`` bool, success of ``s_{t+1}``; episode, t: ``(N,)`` int64.
        sim, py: the snapshots of ``s_t`` (``py`` kind ``null`` where the folder has none).
        sha256: SHA-256 over the kept rows' arrays (:data:`_HASHED`) and the task and layout.
    """

    folder: Path
    spec: TaskSpec
    layout: CriticInputLayout
    meta: dict[str, Any]
    episodes: tuple[int, ...]
    x: np.ndarray
    next_x: np.ndarray
    action: np.ndarray
    success: np.ndarray
    episode: np.ndarray
    t: np.ndarray
    sim: np.ndarray
    py: np.ndarray
    sha256: str
    n_available: int = 0

    def __len__(self) -> int:
        return len(self.episodes)

    @property
    def has_snapshots(self) -> bool:
        """Every kept state can be restored (the folder was collected with a snapshot hook)."""
        return bool(len(self.py)) and json.loads(str(self.py[0])).get("kind") is not None

    def blocks(self) -> list[tuple[int, int]]:
        """``(begin, end)`` row ranges of the kept episodes, in order."""
        starts = np.flatnonzero(np.r_[True, self.episode[1:] != self.episode[:-1]])
        return list(zip(starts.tolist(), np.r_[starts[1:], len(self.episode)].tolist()))

    def steps_to_success(self) -> np.ndarray:
        """Per kept episode, ``L = t* + 1``: the steps to its first success."""
        return np.asarray([int(np.argmax(self.success[b:e])) + 1 for b, e in self.blocks()], dtype=np.int64)

    def subset(self, episodes) -> "Demonstrations":
        """The demonstrations of ``episodes`` only (each must be one of :attr:`episodes`), hashed anew."""
        eps = np.unique(np.asarray(list(episodes), dtype=np.int64))
        unknown = sorted(set(eps.tolist()) - set(self.episodes))
        if unknown:
            raise DemoError(f"episodes: {unknown[:8]} are not demonstrations of {str(self.folder)!r}; expected some of "
                            f"its {len(self.episodes)} successful episodes")
        if not len(eps):
            raise DemoError("episodes: expected at least one demonstration, got none")
        keep = np.isin(self.episode, eps)
        cat = {k: getattr(self, k)[keep] for k in (*_HASHED, "episode", "t")}
        return _make(self.folder, self.spec, self.layout, self.meta, cat, self.n_available)

    def record(self) -> dict[str, Any]:
        """What a critic or a run stores about the demonstrations it used."""
        return {"folder": self.folder.name, "task": self.spec.name, "policy": self.meta.get("policy"),
                "count": len(self.episodes), "available": int(self.n_available),
                "episodes": [int(e) for e in self.episodes], "sha256": self.sha256}


def check_whole_episodes(episode: np.ndarray, t: np.ndarray, where: str) -> tuple[np.ndarray, np.ndarray]:
    """``(starts, ends)`` of the episodes' row blocks; refuses rows that are not whole episodes, each one
    block with ``t = 0, 1, ...`` in order (a :class:`ShardError` naming ``where``)."""
    starts, ends = _block_bounds(np.asarray(episode))
    if len(np.unique(episode[starts])) != len(starts):
        raise ShardError(f"{where}: the steps of an episode are not in one block; expected each episode's steps "
                         "together, in order")
    for b, e in zip(starts, ends):
        if not np.array_equal(t[b:e], np.arange(e - b)):
            raise ShardError(f"{where}: episode {int(episode[b])} has steps t = {t[b:e][:8].tolist()}...; expected "
                             "0, 1, 2, ... in order (whole episodes)")
    return starts, ends


def load_demos(folder: "str | Path", n: int | None = None) -> Demonstrations:
    """The first ``n`` successful episodes of ``folder`` (``None``: all of them) as :class:`Demonstrations`.

    Raises:
        DemoError: the folder holds no successful episode, or fewer than ``n`` (naming how many it has
            and how to get more).
        ShardError / FileNotFoundError: the folder is not readable data (as :func:`load_steps`).
    """
    from prm_critic.robotics.dataset import _check_meta, _check_width

    validate.positive_int("n", n, allow_none=True, unit="demonstrations")
    out = Path(folder)
    meta = read_meta(out)
    spec, layout = _check_meta(meta, out / "meta.json")
    files = shard_files(out, name="demonstrations", hint="run `prm-critic collect` or import data first")
    cols: dict[str, list[np.ndarray]] = {k: [] for k in (*_HASHED, "episode", "t")}
    available = 0
    for f in files:
        d = load_shard(f)
        _check_width(d, f, out / "meta.json", layout.obs_dim)
        check_whole_episodes(d["episode"], d["t"], f"shard file {str(f)!r}")
        ok_eps = [int(e) for e, ok in zip(d["ep_index"].tolist(), d["ep_success"].tolist()) if ok]
        available += len(ok_eps)
        keep = np.isin(d["episode"], ok_eps)
        for k in cols:
            cols[k].append(d[k][keep])
    cat = {k: np.concatenate(v) for k, v in cols.items()}
    order = np.lexsort((cat["t"], cat["episode"]))
    cat = {k: v[order] for k, v in cat.items()}
    eps = np.unique(cat["episode"])
    if available == 0:
        raise DemoError(f"demonstrations: {str(out)!r} holds no successful episode (of "
                        f"{_count_episodes(files)}); expected at least one (collect more episodes, or with a "
                        "better policy)")
    if n is not None:
        if len(eps) < n:
            raise DemoError(f"demonstrations: {str(out)!r} holds {len(eps)} successful episodes, expected at least "
                            f"n={n} (collect more episodes into it, or ask for fewer)")
        eps = eps[:n]
        keep = np.isin(cat["episode"], eps)
        cat = {k: v[keep] for k, v in cat.items()}
    for b, e in zip(*_block_bounds(cat["episode"])):
        if not cat["success"][b:e].any():  # ep_success says it succeeded, yet no step did: the shard disagrees
            raise ShardError(f"demonstrations: episode {int(cat['episode'][b])} of {str(out)!r} is marked successful "
                             "but none of its steps' success flags is set; expected the flags of one run")
    return _make(out, spec, layout, meta, cat, available)


def _make(out: Path, spec: TaskSpec, layout: CriticInputLayout, meta: dict[str, Any], cat: dict[str, np.ndarray],
          available: int) -> Demonstrations:
    h = hashlib.sha256(json.dumps({"task": spec.name, "layout": layout.to_dict()}, sort_keys=True).encode())
    for k in _HASHED:
        a = np.ascontiguousarray(cat[k])
        h.update(f"{k}:{a.dtype.str}:{a.shape}".encode())
        h.update(a.tobytes())
    return Demonstrations(folder=out, spec=spec, layout=layout, meta=meta,
                          episodes=tuple(int(e) for e in np.unique(cat["episode"])),
                          x=cat["x"].astype(np.float32), next_x=cat["next_x"].astype(np.float32), action=cat["action"],
                          success=cat["success"].astype(bool), episode=cat["episode"].astype(np.int64),
                          t=cat["t"].astype(np.int64), sim=cat["sim"], py=cat["py"], sha256=h.hexdigest(),
                          n_available=available)


def _count_episodes(files: list[Path]) -> int:
    return sum(len(load_shard(f, ("ep_index",))["ep_index"]) for f in files)


def _block_bounds(episode: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    starts = np.flatnonzero(np.r_[True, episode[1:] != episode[:-1]]) if len(episode) else np.zeros(0, np.int64)
    return starts, np.r_[starts[1:], len(episode)].astype(np.int64)


# ---------------------------------------------------------------------------------------------- labels
def demo_progress_labels(episode: np.ndarray, t: np.ndarray, step_success: np.ndarray,
                         ep_success: np.ndarray, *, where: str = "steps") -> tuple[np.ndarray, np.ndarray]:
    """``(label, mask)`` of the ``demo_progress`` family for whole episodes in step order (module
    docstring): ``t / L`` up to the first success, ``1`` on later states that still succeed; failed
    episodes and states after a lost success are unlabelled (``mask`` False, label NaN)."""
    episode, t = np.asarray(episode), np.asarray(t)
    step_success, ep_success = np.asarray(step_success, dtype=bool), np.asarray(ep_success, dtype=bool)
    if not (len(episode) == len(t) == len(step_success) == len(ep_success)):
        raise ValueError(f"{where}: episode, t, step_success and ep_success differ in length; expected one row per step")
    check_whole_episodes(episode, t, where)
    label = np.full(len(t), np.nan, dtype=np.float32)
    mask = np.zeros(len(t), dtype=bool)
    for b, e in zip(*_block_bounds(episode)):
        ok = step_success[b:e]
        if not ep_success[b] or not ok.any():
            continue
        ts = int(np.argmax(ok))
        L = ts + 1
        steps = np.arange(e - b)
        lab = np.where(steps <= ts, steps / L, 1.0)
        keep = steps <= ts
        keep[1:] |= (steps[1:] > ts) & ok[:-1]  # s_t (t > t*) still succeeds: the success of step t - 1
        label[b:e][keep] = lab[keep]
        mask[b:e] = keep
    return label, mask


def success_contrast_labels(ep_success: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(label, mask)`` of the ``success_contrast`` family: 1 on every state of a successful episode, 0 on
    every state of a failed one (the classifier's targets; the trainer balances them)."""
    ok = np.asarray(ep_success, dtype=bool)
    return ok.astype(np.float32), np.ones(len(ok), dtype=bool)


def goal_success_fn(env) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """``success(achieved (N, G), desired (N, G)) -> (N,) bool`` from a goal env's own ``compute_reward``
    (a goal is met where the reward equals the reward of a goal met exactly), never from a task spec.

    Raises:
        DemoError: the env has no ``compute_reward`` (hindsight goals need the env's own success test).
    """
    base = env.unwrapped
    fn = getattr(base, "compute_reward", None)
    if not callable(fn):
        raise DemoError(f"hindsight goals: env {type(base).__name__} has no compute_reward(achieved_goal, "
                        "desired_goal, info); expected a gymnasium-robotics goal env")

    def success(achieved: np.ndarray, desired: np.ndarray) -> np.ndarray:
        achieved = np.asarray(achieved, dtype=np.float64)
        desired = np.asarray(desired, dtype=np.float64)
        info = np.array([{}] * len(achieved))
        got = np.asarray(fn(achieved, desired, info), dtype=np.float64).reshape(-1)
        met = np.asarray(fn(desired, desired, info), dtype=np.float64).reshape(-1)
        return np.isclose(got, met)

    return success


@dataclass
class DemoRows:
    """Training rows built from demonstrations: inputs ``x`` ``(N, D)``, labels ``y`` ``(N,)`` and, per
    row, a pseudo-episode id and step (distinct per source), and where each row came from
    (``source``: 0 demonstration, 1 hindsight copy, 2 random-action branch)."""

    x: np.ndarray
    y: np.ndarray
    episode: np.ndarray
    t: np.ndarray
    source: np.ndarray

    def __len__(self) -> int:
        return len(self.y)

    @staticmethod
    def concat(parts: "list[DemoRows]") -> "DemoRows":
        return DemoRows(*(np.concatenate([getattr(p, f) for p in parts]) for f in ("x", "y", "episode", "t", "source")))


def _goal_slices(layout: CriticInputLayout) -> tuple[slice, slice]:
    if "achieved_goal" not in layout.slices or "desired_goal" not in layout.slices:
        raise DemoError(f"hindsight goals: the critic input {list(layout.keys)} lacks achieved_goal or desired_goal; "
                        "expected a goal env's observation keys (use relabel=0 for another env)")
    return layout.slices["achieved_goal"], layout.slices["desired_goal"]


def base_rows(demos: Demonstrations) -> DemoRows:
    """The demonstrations' own labelled states (``demo_progress`` labels)."""
    lab, mask = demo_progress_labels(demos.episode, demos.t, demos.success, np.ones(len(demos.t), bool),
                                     where="demonstrations")
    return DemoRows(demos.x[mask], lab[mask], demos.episode[mask], demos.t[mask], np.zeros(int(mask.sum()), np.int64))


def hindsight_rows(demos: Demonstrations, k: int, success: Callable[[np.ndarray, np.ndarray], np.ndarray],
                   rng: np.random.Generator) -> DemoRows:
    """``k`` hindsight copies of every demonstration state up to its first success (module docstring):
    the goal achieved at a uniformly drawn later state (HER's "future" strategy) replaces the desired
    goal, and the label is the progress along the prefix that first reaches it."""
    validate.positive_int("k", k, unit="copies")
    ag, dg = _goal_slices(demos.layout)
    xs, ys, eps, ts = [], [], [], []
    span = int(demos.episode.max()) + 1
    for b, e in demos.blocks():
        ts_first = int(np.argmax(demos.success[b:e]))
        states = np.concatenate([demos.x[b:ts_first + b + 1], demos.next_x[b + ts_first][None]])  # s_0 .. s_{t*+1}
        n = len(states)
        goals_all = states[:, ag]
        # met[i, j]: state i meets the goal achieved at state j
        met = success(np.repeat(goals_all, n, axis=0), np.tile(goals_all, (n, 1))).reshape(n, n)
        for c in range(k):
            for t in range(n - 1):  # rows s_0 .. s_{t*}
                j = int(rng.integers(t, n))
                m = int(np.argmax(met[:, j]))  # first state meeting goal j (j itself does)
                if met[t, j]:
                    y = 1.0
                elif t < m:
                    y = t / m
                else:
                    continue
                row = states[t].copy()
                row[dg] = goals_all[j]
                xs.append(row)
                ys.append(y)
                eps.append(int(demos.episode[b]) + (c + 1) * span)
                ts.append(t)
    x = np.asarray(xs, dtype=np.float32).reshape(-1, demos.layout.obs_dim)
    return DemoRows(x, np.asarray(ys, np.float32), np.asarray(eps, np.int64), np.asarray(ts, np.int64),
                    np.ones(len(ys), np.int64))


def branch_rows(demos: Demonstrations, n_branches: int, steps: int, rng: np.random.Generator, *, env=None) -> DemoRows:
    """``n_branches`` random-action branches of ``steps`` steps from uniformly drawn demonstration states
    (up to each one's first success), restored from their exact snapshots, labelled by how far they
    fall behind (module docstring). ``env``: one made by :func:`prm_critic.robotics.make.make_env` for
    the task (made here when ``None``).

    Raises:
        DemoError: the demonstrations have no snapshots (a Minari or array import).
    """
    from prm_critic.robotics.make import make_env
    from prm_critic.robotics.snapshot import Snapshot, Snapshotter

    validate.positive_int("n_branches", n_branches, unit="branches")
    validate.positive_int("steps", steps, unit="steps")
    if not demos.has_snapshots:
        raise DemoError(f"branches: the demonstrations of {str(demos.folder)!r} have no simulator snapshots (imported "
                        "data); expected a `prm-critic collect` folder, or branches=0")
    own = env is None
    env = make_env(demos.spec) if own else env
    try:
        env.reset(seed=0)
        snap = Snapshotter(env)
        blocks = demos.blocks()
        L = demos.steps_to_success()
        xs, ys, eps, ts = [], [], [], []
        span = int(demos.episode.max()) + 1
        for i in range(n_branches):
            d = int(rng.integers(len(blocks)))
            b, _ = blocks[d]
            t = int(rng.integers(L[d]))  # a state at or before the first success
            snap.restore(Snapshot.from_arrays(demos.sim[b + t], str(demos.py[b + t])))
            for s in range(1, steps + 1):
                a = rng.uniform(env.action_space.low, env.action_space.high).astype(env.action_space.dtype)
                obs, _, terminated, truncated, _ = env.step(a)
                xs.append(demos.layout.flatten(obs))
                ys.append(max(0.0, (t - s) / L[d]))
                eps.append(10 * span + i)
                ts.append(s)
                if terminated or truncated:
                    break
    finally:
        if own:
            env.close()
    x = np.asarray(xs, dtype=np.float32).reshape(-1, demos.layout.obs_dim)
    return DemoRows(x, np.asarray(ys, np.float32), np.asarray(eps, np.int64), np.asarray(ts, np.int64),
                    np.full(len(ys), 2, np.int64))


# ----------------------------------------------------------------------------------------- import
#: the arrays of a user's own demonstrations file (:func:`import_arrays`)
ARRAY_KEYS = ("episode", "action", "success")


def import_arrays(path: "str | Path", task: "str | TaskSpec", out: "str | Path") -> Path:
    """Write a user's own episodes (an ``.npz`` file) as a data folder that :func:`load_demos`, the label
    families and training read.

    The file holds, for ``N`` steps of whole episodes in order: ``obs/<key>`` ``(N, size)`` and
    ``next_obs/<key>`` ``(N, size)`` for every key of the task's ``critic_input`` (``obs`` and
    ``next_obs`` for a Box observation), ``action`` ``(N, A)``, ``success`` ``(N,)`` (success of the
    next state) and ``episode`` ``(N,)`` (equal on the steps of one episode; ``t`` is counted from 0);
    optionally ``reward``, ``terminated``, ``truncated``. It has no simulator snapshots, so labels and
    branches that restore states are refused on it.
    """
    from prm_critic.robotics.collection import atomic_savez, atomic_write_json

    spec = load_spec(task)
    src = Path(path)
    try:
        with np.load(src, allow_pickle=False) as z:
            data = {k: z[k] for k in z.files}
    except FileNotFoundError:
        raise
    except Exception as exc:
        raise ShardError(f"demonstrations file {str(src)!r} is not a readable .npz ({type(exc).__name__}: {exc})") from exc
    keys = list(spec.critic_input)
    prefix = ("obs", "next_obs")
    names = [f"{p}/{k}" for p in prefix for k in keys] if keys != ["obs"] else list(prefix)
    missing = [k for k in (*names, *ARRAY_KEYS) if k not in data]
    if missing:
        raise ShardError(f"demonstrations file {str(src)!r}: missing arrays {missing}; expected {[*names, *ARRAY_KEYS]} "
                         f"for task {spec.name!r}")
    episode = np.asarray(data["episode"])
    n = len(episode)
    if n == 0:
        raise ShardError(f"demonstrations file {str(src)!r}: no steps")
    if episode.ndim != 1 or episode.dtype.kind not in "iu":
        raise ShardError(f"demonstrations file {str(src)!r}: 'episode' must be (N,) integers, got {episode.dtype} "
                         f"{episode.shape}")
    sizes: dict[str, int] = {}
    cols = {}
    for p in prefix:
        parts = []
        for k in keys:
            a = np.asarray(data[f"{p}/{k}"] if keys != ["obs"] else data[p], dtype=np.float64)
            a = a.reshape(n, -1) if a.ndim == 1 else a
            if a.ndim != 2 or a.shape[0] != n:
                raise ShardError(f"demonstrations file {str(src)!r}: {p}/{k} has shape {a.shape}; expected ({n}, size)")
            if sizes.setdefault(k, a.shape[1]) != a.shape[1]:
                raise ShardError(f"demonstrations file {str(src)!r}: {p}/{k} has width {a.shape[1]}, obs/{k} has "
                                 f"{sizes[k]}; expected the same")
            if not np.all(np.isfinite(a)):
                raise ShardError(f"demonstrations file {str(src)!r}: {p}/{k} holds NaN or inf")
            parts.append(a)
        cols[p] = np.concatenate(parts, axis=1).astype(np.float32)
    layout = CriticInputLayout(keys, sizes)
    starts, ends = _block_bounds(episode)
    if len(np.unique(episode[starts])) != len(starts):
        raise ShardError(f"demonstrations file {str(src)!r}: the steps of an episode are not in one block")
    t = np.concatenate([np.arange(e - b) for b, e in zip(starts, ends)]).astype(np.int64)
    action = np.asarray(data["action"], dtype=np.float32).reshape(n, -1)
    success = np.asarray(data["success"]).astype(bool).reshape(-1)
    if len(success) != n:
        raise ShardError(f"demonstrations file {str(src)!r}: success has {len(success)} rows, episode has {n}")
    ep_ids = episode[starts]
    ep_len = (ends - starts).astype(np.int64)
    ep_ok = np.asarray([bool(success[e - 1]) if spec.success.rule == "final" else bool(success[b:e].any())
                        for b, e in zip(starts, ends)])
    dest = Path(out)
    if (dest / "meta.json").exists():
        raise FileExistsError(f"out: {str(dest)!r} already holds a data folder; expected a new folder")
    meta = {"spec": spec.to_dict(), "layout": layout.to_dict(), "maze": None, "policy": f"arrays:{src.name}",
            "seed": None, "shard_size": len(ep_ids), "episodes": len(ep_ids), "source": "arrays"}
    py = np.asarray([json.dumps({"kind": None})] * n)
    atomic_savez(dest / "shards" / "shard_00000.npz", x=cols["obs"], next_x=cols["next_obs"], action=action,
                 reward=np.asarray(data.get("reward", np.zeros(n)), dtype=np.float32).reshape(n),
                 terminated=np.asarray(data.get("terminated", np.zeros(n)), dtype=bool).reshape(n),
                 truncated=np.asarray(data.get("truncated", np.zeros(n)), dtype=bool).reshape(n),
                 success=success, episode=episode.astype(np.int64), t=t, sim=np.zeros((n, 0)), py=py,
                 ep_index=ep_ids.astype(np.int64), ep_seed=np.full(len(ep_ids), -1, np.int64), ep_len=ep_len,
                 ep_success=ep_ok)
    atomic_write_json(dest / "meta.json", meta)
    return dest
