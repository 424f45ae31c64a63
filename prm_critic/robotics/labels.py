"""Step labels for collected trajectories: ``subgoal``, ``mc`` (Math-Shepherd), ``mc_bisect`` and ``outcome``.

Each family writes ``out_dir/labels/<family>/shard_00000.npz`` (one per trajectory shard, atomic,
resumable per shard) and ``out_dir/labels/<family>.json`` with its parameters. All labels are float32
and never rounded.

* ``subgoal``: ``label_t = progress(s_t)`` (:meth:`SubgoalEvaluator.progress`), in [0, 1].
* ``mc``: for every ``stride``-th step (``t % stride == 0``), restore the exact snapshot of ``s_t`` into
  one live rollout env (made once, reused for every rollout) and run ``k`` continuations with the
  rollout policy (the scripted controller with its noise) until the episode ends (termination or the
  episode's own TimeLimit). ``soft_t = (# continuations that succeed) / k``, ``hard_t = soft_t > 0``.
  Success of a continuation follows the spec's rule (``final``: its last step; ``any``: any step).
  Unlabelled steps hold NaN and ``mask = False``. Continuation ``j`` of step ``(episode, t)`` draws
  from ``default_rng([seed, episode, t, j])``: labels do not depend on shard order or resumption.
  The env needs a snapshot hook (:func:`prm_critic.robotics.snapshot.register_snapshot_hook`); one
  without is refused before any rollout. Before its rollouts, every labelled state is checked: restore
  its snapshot, step the recorded action and compare the critic input, reward and flags with the
  recorded ``next_x``, ``reward``, ``terminated``, ``truncated`` (exactly); a mismatch stops labelling
  with a :class:`~prm_critic.robotics.snapshot.ReplayMismatchError` naming the env, episode and step.
  The rollout cost of each shard goes to ``labels/mc.stats.json``.
* ``mc_bisect``: ``mc`` estimates only where a binary search for the drop of the success estimate
  needs them, every other step interpolated between them (OmegaPRM-style, far fewer rollout steps);
  see :mod:`prm_critic.robotics.bisect_labels`.
* ``outcome``: ``label_t = gamma ** (T - 1 - t) * ep_success`` (``T`` = episode length).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from prm_critic.robotics.collect import (
    ShardError,
    atomic_savez,
    atomic_write_json,
    check_policy_loader,
    load_shard,
    make_policy,
    policy_id,
    read_meta,
    step_success,
)
from prm_critic.robotics.make import make_env
from prm_critic.robotics.layout import CriticInputLayout
from prm_critic.robotics.snapshot import Snapshot, Snapshotter, SnapshotUnsupportedError
from prm_critic.robotics.spec import load_spec

__all__ = ["FAMILIES", "label", "label_params", "unflatten_obs", "MCLabeler"]

FAMILIES = ("subgoal", "mc", "mc_bisect", "outcome")


def _shard_files(out_dir: Path) -> list[Path]:
    files = sorted((out_dir / "shards").glob("shard_*.npz"))
    if not files:
        raise FileNotFoundError(f"data: no shard files in {str(out_dir / 'shards')!r} (run `prm-critic collect` first)")
    return files


def unflatten_obs(layout: CriticInputLayout, x: np.ndarray):
    """Raw observation (dict of float64 arrays, or an array for ``["obs"]``) from a critic input ``(D,)``.

    Needs ``critic_input`` to cover every observation key the controller reads.
    """
    x = np.asarray(x, dtype=np.float64)
    if layout.keys == ("obs",):
        return x.copy()
    return {k: x[layout.slices[k]].copy() for k in layout.keys}


def subgoal_evaluator(meta: dict):
    from prm_critic.robotics.subgoals import MazeGeometry, SubgoalEvaluator

    spec = load_spec(meta["spec"])
    layout = CriticInputLayout.from_dict(meta["layout"])
    maze = MazeGeometry.from_dict(meta["maze"]) if meta.get("maze") else None
    return SubgoalEvaluator(spec, layout, maze)


def label_params(family: str, *, k: int = 8, stride: int = 1, gamma: float = 0.99, seed: int = 0,
                 rollout_policy: str = "scripted", trust_pickle: bool = False, threshold: float = 0.0,
                 resolution: int = 1) -> dict[str, Any]:
    """Validated parameter record of a label family (what ``labels/<family>.json`` stores;
    ``trust_pickle`` is checked, not stored). ``threshold`` and ``resolution``: ``mc_bisect`` only."""
    if family not in FAMILIES:
        raise ValueError(f"family: expected one of {list(FAMILIES)}, got {family!r}")
    if family == "mc_bisect":
        from prm_critic.robotics.bisect_labels import bisect_params

        if isinstance(stride, bool) or stride != 1:
            raise ValueError(f"stride: family 'mc_bisect' chooses the states it estimates by binary search, so it "
                             f"takes no stride (got {stride!r}); set its granularity with resolution")
        return bisect_params(k=k, seed=seed, threshold=threshold, resolution=resolution,
                             rollout_policy=rollout_policy, trust_pickle=trust_pickle)
    if family == "subgoal":
        return {"family": family}
    if family == "outcome":
        if isinstance(gamma, bool) or not isinstance(gamma, (int, float)) or not 0.0 < float(gamma) <= 1.0:
            raise ValueError(f"gamma: expected a number in (0, 1], got {gamma!r}")
        return {"family": family, "gamma": float(gamma)}
    for name, v in (("k", k), ("stride", stride)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or int(v) < 1:
            raise ValueError(f"{name}: expected an integer >= 1, got {v!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or int(seed) < 0:
        raise ValueError(f"seed: expected an integer >= 0, got {seed!r}")
    policy_id(rollout_policy, name="rollout_policy", trust_pickle=trust_pickle)
    return {"family": family, "k": int(k), "stride": int(stride), "seed": int(seed),
            "rollout_policy": str(rollout_policy)}


class MCLabeler:
    """Monte-Carlo continuation labels from snapshots, with ONE rollout env reused for all rollouts.

    Args:
        meta: the data folder's ``meta.json`` content.
        k: continuations per labelled state.
        seed: base seed of the continuations.
        rollout_policy: ``"scripted"`` (the spec's noisy controller), ``"random"``, a prm-critic
            policy checkpoint (``policy.json``) or a stable-baselines3 model zip (needs
            ``trust_pickle=True``: loading it unpickles, which runs code from the file).
        policy_loader: ``path -> SB3 model`` for a policy checkpoint ``rollout_policy``
            (:func:`prm_critic.sb3.load_policy`).
    """

    def __init__(self, meta: dict, *, k: int = 8, seed: int = 0, rollout_policy: str = "scripted",
                 trust_pickle: bool = False, policy_loader: Any = None, family: str = "mc"):
        self.spec = load_spec(meta["spec"])
        self.layout = CriticInputLayout.from_dict(meta["layout"])
        self.k = int(k)
        self.seed = int(seed)
        self.env = make_env(self.spec)
        try:
            self.env.reset(seed=self.seed)
            self.snap = Snapshotter(self.env)  # refuses an env without a snapshot hook
        except SnapshotUnsupportedError as exc:
            self.env.close()
            raise SnapshotUnsupportedError(f"family {family!r} restores snapshots of every labelled state: {exc}") from exc
        except Exception:
            self.env.close()
            raise
        self.ctrl = make_policy(self.spec, self.env, rollout_policy, trust_pickle=trust_pickle,
                                policy_loader=policy_loader)
        self.evaluator = subgoal_evaluator(meta) if self.spec.success.source == "subgoals" else None
        self.steps = 0  # env steps taken in rollouts (for throughput measurements)

    def rollout(self, snapshot: Snapshot, obs, rng: np.random.Generator) -> bool:
        """One continuation from ``snapshot`` (raw ``obs`` of that state); True when it succeeds."""
        self.snap.restore(snapshot)
        self.ctrl.reset(obs, rng)
        final = self.spec.success.rule == "final"
        ok = False
        while True:
            action = self.ctrl.act(obs)
            obs, _, terminated, truncated, info = self.env.step(action)
            self.steps += 1
            nx = self.layout.flatten(obs) if self.evaluator is not None else None
            ok = step_success(self.spec, info, nx, self.evaluator)
            if ok and not final:
                return True
            if terminated or truncated:
                return ok if final else False

    def check(self, snapshot: Snapshot, row: dict[str, Any], episode: int, t: int) -> None:
        """Restore ``snapshot``, replay the row's recorded ``action`` and require the recorded
        ``next_x``, ``reward``, ``terminated`` and ``truncated`` exactly (:class:`ReplayMismatchError`
        naming the env, episode and step otherwise)."""
        expected = {"obs": np.asarray(row["next_x"], dtype=np.float32),
                    "reward": np.float32(row["reward"]),
                    "terminated": bool(row["terminated"]), "truncated": bool(row["truncated"])}
        self.snap.check_replay(snapshot, np.asarray(row["action"], dtype=np.float32), expected,
                               transform=self.layout.flatten, where=f"episode {int(episode)}, step {int(t)}")
        self.steps += 1

    def label_state(self, sim: np.ndarray, py: str, x: np.ndarray, episode: int, t: int,
                    row: dict[str, Any] | None = None) -> float:
        """Soft label (fraction of ``k`` continuations that succeed) of one stored state.

        ``row``: the stored step (``action``, ``next_x``, ``reward``, ``terminated``, ``truncated``);
        when given, the snapshot is first checked to replay it (:meth:`check`).
        """
        snapshot = Snapshot.from_arrays(sim, py)
        if row is not None:
            self.check(snapshot, row, episode, t)
        obs = unflatten_obs(self.layout, x)
        wins = 0
        for j in range(self.k):
            rng = np.random.default_rng([self.seed, int(episode), int(t), j])
            wins += self.rollout(snapshot, obs, rng)
        return wins / self.k

    def close(self) -> None:
        self.env.close()


def label(out_dir: "str | Path", family: str, *, k: int = 8, stride: int = 1, gamma: float = 0.99,
          seed: int = 0, rollout_policy: str = "scripted", progress: bool = True,
          trust_pickle: bool = False, policy_loader: Any = None, threshold: float = 0.0,
          resolution: int = 1) -> Path:
    """Label every trajectory shard of ``out_dir`` with ``family`` (resumable per shard).

    ``threshold`` and ``resolution`` are the ``mc_bisect`` search parameters
    (:func:`prm_critic.robotics.bisect_labels.bisect_episode`).

    ``trust_pickle=True`` allows an ``mc`` ``rollout_policy`` that is a stable-baselines3 ``.zip``
    (loading one unpickles objects stored in the file, which runs arbitrary code from it). An ``mc``
    ``rollout_policy`` that is a prm-critic policy checkpoint needs ``policy_loader``
    (:func:`prm_critic.sb3.load_policy`).

    Returns:
        the folder ``out_dir/labels/<family>``.
    """
    from tqdm.auto import tqdm

    if family == "mc_bisect":
        from prm_critic.robotics.bisect_labels import label_bisect

        label_params(family, k=k, stride=stride, seed=seed, rollout_policy=rollout_policy, trust_pickle=trust_pickle,
                     threshold=threshold, resolution=resolution)
        return label_bisect(out_dir, k=k, seed=seed, threshold=threshold, resolution=resolution,
                            rollout_policy=rollout_policy, progress=progress, trust_pickle=trust_pickle,
                            policy_loader=policy_loader)
    out = Path(out_dir)
    meta = read_meta(out)
    params = label_params(family, k=k, stride=stride, gamma=gamma, seed=seed, rollout_policy=rollout_policy,
                          trust_pickle=trust_pickle)
    if family == "mc":
        check_policy_loader(params["rollout_policy"], policy_loader, name="rollout_policy")
    files = _shard_files(out)
    lab_dir = out / "labels" / family
    pjson = out / "labels" / f"{family}.json"
    if pjson.exists():
        old = json.loads(pjson.read_text())
        if old != params:
            diff = {kk: (old.get(kk), params.get(kk)) for kk in set(old) | set(params) if old.get(kk) != params.get(kk)}
            raise ValueError(
                f"family: {str(lab_dir)!r} holds {family!r} labels made with other parameters "
                f"(stored vs requested: {diff}); delete that folder to relabel, or pass the stored parameters"
            )
    # an env without a snapshot hook is refused here, before anything is written
    labeler = MCLabeler(meta, k=params["k"], seed=params["seed"], rollout_policy=params["rollout_policy"],
                        trust_pickle=trust_pickle, policy_loader=policy_loader) \
        if family == "mc" else None
    evaluator = subgoal_evaluator(meta) if family == "subgoal" else None
    try:
        atomic_write_json(pjson, params)

        todo = []
        for f in files:
            target = lab_dir / f.name
            if target.exists():
                try:
                    n_lab = len(load_shard(target, ("label",))["label"])
                    n_rows = len(load_shard(f, ("t",))["t"])
                    if n_lab == n_rows:
                        continue
                except ShardError:
                    pass
            todo.append(f)

        if family == "mc":
            # progress over labelled states of the shards still to do
            counts = []
            for f in todo:
                t = load_shard(f, ("t",))["t"]
                counts.append(int(np.sum(t % params["stride"] == 0)))
            bar = tqdm(total=sum(counts), desc=f"label mc ({out.name})", unit="state", disable=not progress)
        else:
            bar = tqdm(total=len(todo), desc=f"label {family} ({out.name})", unit="shard", disable=not progress)
        for f in todo:
            d = load_shard(f)
            n = len(d["t"])
            if family == "subgoal":
                lab = evaluator.progress(d["x"]).astype(np.float32)
                atomic_savez(lab_dir / f.name, label=lab, mask=np.ones(n, dtype=bool))
                bar.update(1)
            elif family == "outcome":
                ep_len = dict(zip(d["ep_index"].tolist(), d["ep_len"].tolist()))
                ep_ok = dict(zip(d["ep_index"].tolist(), d["ep_success"].tolist()))
                T = np.asarray([ep_len[e] for e in d["episode"].tolist()], dtype=np.float64)
                ok = np.asarray([ep_ok[e] for e in d["episode"].tolist()], dtype=np.float64)
                lab = (params["gamma"] ** (T - 1 - d["t"]) * ok).astype(np.float32)
                atomic_savez(lab_dir / f.name, label=lab, mask=np.ones(n, dtype=bool))
                bar.update(1)
            else:
                mask = d["t"] % params["stride"] == 0
                soft = np.full(n, np.nan, dtype=np.float32)
                steps0 = labeler.steps
                for i in np.nonzero(mask)[0]:
                    row = {key: d[key][i] for key in ("action", "next_x", "reward", "terminated", "truncated")}
                    soft[i] = labeler.label_state(d["sim"][i], str(d["py"][i]), d["x"][i], d["episode"][i],
                                                  d["t"][i], row=row)
                    bar.update(1)
                hard = np.where(mask, (soft > 0).astype(np.float32), np.float32(np.nan)).astype(np.float32)
                atomic_savez(lab_dir / f.name, label=soft, soft=soft, hard=hard, mask=mask,
                             k=np.int64(params["k"]))
                from prm_critic.robotics.bisect_labels import update_stats

                n_est = int(mask.sum())
                update_stats(out, family, f.name, {
                    "episodes": len(np.unique(d["episode"])), "states": n, "estimated_states": n_est,
                    "rollouts": n_est * params["k"], "rollout_steps": labeler.steps - steps0 - n_est,
                    "replay_steps": n_est})
        bar.close()
    finally:
        if labeler is not None:
            labeler.close()
    return lab_dir
