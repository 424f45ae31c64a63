"""Step labels for collected trajectories: ``subgoal``, ``mc`` (Math-Shepherd), ``mc_bisect``, ``outcome``
and ``steps_to_success``.

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
  The rollout cost of each shard is stored in its label file and in ``labels/mc.stats.json`` (rebuilt
  from the label files on every run, so a kill between the two writes loses nothing).
* ``mc_bisect``: ``mc`` estimates only where a binary search for the drop of the success estimate
  needs them, every other step interpolated between them (OmegaPRM-style, far fewer rollout steps);
  see :mod:`prm_critic.robotics.bisect_labels`.
* ``outcome``: ``label_t = gamma ** (T - 1 - t) * ep_success`` (``T`` = episode length).
* ``steps_to_success``: ``label_t = gamma ** (t* - t)``, ``t*`` the first step at or after ``t`` whose
  next state succeeds (the shard's per-step ``success``), 0 when no later step succeeds: the value of
  ``s_t`` under the behaviour policy for a reward of 1 on reaching success (discounted Monte-Carlo:
  a value, not a success probability; :func:`steps_to_success_labels`).

``mc`` runs on the chosen executor (``executor="local" | "ray" | "auto"``, :mod:`prm_critic.parallel`): one
task per labelled state (:func:`state_tasks`, run by :func:`label_state_task` on a worker's
:class:`MCLabeler` built by :func:`mc_setup`); :func:`run_shard_tasks` writes a shard's labels once
all its states are back. Other state-level label modes can reuse these pieces.

The families are a registry (:mod:`prm_critic.robotics.families`): :func:`label` runs the registered
family's ``run``; :func:`~prm_critic.robotics.families.register_label_family` adds one.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from prm_critic import validate
from prm_critic._optional import require
from prm_critic.robotics.collection import (
    ShardError,
    atomic_savez,
    atomic_write_json,
    check_policy_loader,
    load_shard,
    make_policy,
    read_meta,
    shard_files,
    ship_policy,
    step_success,
    unship_policy,
)
from prm_critic.parallel import Executor, JobEstimate, Pool, Task, check_executor, choose_executor
from prm_critic.robotics.families import (
    OPTION_DEFAULTS,
    LabelJob,
    families_taking,
    get_label_family,
)
from prm_critic.robotics.make import make_env, step_cost
from prm_critic.robotics.demos import check_whole_episodes, demo_progress_labels, success_contrast_labels
from prm_critic.robotics.layout import CriticInputLayout
from prm_critic.robotics.snapshot import Snapshot, Snapshotter, SnapshotUnsupportedError
from prm_critic.robotics.spec import load_spec

__all__ = ["OPTION_DEFAULTS", "family_options", "label", "label_params",
           "unflatten_obs", "MCLabeler", "state_tasks", "label_state_task", "mc_setup", "run_shard_tasks",
           "label_state_cost_task", "run_array_family", "run_mc", "run_bisect"]


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
                 resolution: int = 1, min_estimates: int = 2) -> dict[str, Any]:
    """Validated parameter record of a label family (what ``labels/<family>.json`` stores;
    ``trust_pickle`` is checked, not stored). ``threshold``, ``resolution`` and ``min_estimates``:
    ``mc_bisect`` only."""
    options = {"k": k, "stride": stride, "gamma": gamma, "seed": seed, "rollout_policy": rollout_policy,
               "threshold": threshold, "resolution": resolution, "min_estimates": min_estimates}
    return get_label_family(family).params(options, trust_pickle)


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

    def __init__(self, meta: dict, *, k: int = 8, seed: int = 0, rollout_policy: "str | dict[str, Any]" = "scripted",
                 trust_pickle: bool = False, policy_loader: Any = None, family: str = "mc"):
        self._tmp = None
        if not isinstance(rollout_policy, str):  # the policy's files, shipped to a worker (ship_policy)
            import tempfile

            self._tmp = tempfile.TemporaryDirectory(prefix="prm-critic-policy-")
            rollout_policy = unship_policy(rollout_policy, self._tmp.name)
        self.spec = load_spec(meta["spec"])
        self.layout = CriticInputLayout.from_dict(meta["layout"])
        self.k = int(k)
        self.seed = int(seed)
        self.env = make_env(self.spec)
        try:
            self.env.reset(seed=self.seed)
            self.snap = Snapshotter(self.env)  # refuses an env without a snapshot hook
        except SnapshotUnsupportedError as exc:
            self.close()
            raise SnapshotUnsupportedError(f"family {family!r} restores snapshots of every labelled state: {exc}") from exc
        except Exception:
            self.close()
            raise
        try:
            self.ctrl = make_policy(self.spec, self.env, rollout_policy, trust_pickle=trust_pickle,
                                    policy_loader=policy_loader)
        except BaseException:
            self.close()
            raise
        self.evaluator = subgoal_evaluator(meta) if self.spec.success.reads_state else None
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
            ok = step_success(self.spec, info, nx, self.evaluator, terminated=terminated, truncated=truncated)
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
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None


#: the stored step of a labelled state that its replay check compares (see :meth:`MCLabeler.check`)
ROW_KEYS = ("action", "next_x", "reward", "terminated", "truncated")


def state_tasks(shard: Path, d: dict[str, np.ndarray], rows: np.ndarray) -> list[Task]:
    """One :class:`~prm_critic.parallel.Task` per labelled row ``i`` of the shard ``d`` (as loaded from
    ``shard``): key ``(shard.name, i)``, payload the state's snapshot, critic input, ids and stored step.
    Run them with :func:`label_state_task` (or any ``fn(MCLabeler, payload)``)."""
    return [Task(key=(shard.name, int(i)),
                 desc=f"episode {int(d['episode'][i])}, step {int(d['t'][i])} ({shard.name}, row {int(i)})",
                 payload={"sim": d["sim"][i], "py": str(d["py"][i]), "x": d["x"][i],
                          "episode": int(d["episode"][i]), "t": int(d["t"][i]),
                          "row": {key: d[key][i] for key in ROW_KEYS}})
            for i in rows]


def label_state_task(labeler: MCLabeler, payload: dict[str, Any]) -> float:
    """Worker side of a :func:`state_tasks` task: the replay-checked soft MC label of one state."""
    return labeler.label_state(payload["sim"], payload["py"], payload["x"], payload["episode"], payload["t"],
                               row=payload["row"])


def label_state_cost_task(labeler: MCLabeler, payload: dict[str, Any]) -> tuple[float, int]:
    """:func:`label_state_task` and the rollout env steps it took (the replay-check step not counted)."""
    before = labeler.steps
    value = label_state_task(labeler, payload)
    return value, labeler.steps - before - 1


def mc_setup(meta: dict, params: dict[str, Any], *, remote: bool, trust_pickle: bool = False,
             policy_loader: Any = None):
    """Picklable ``setup`` building a worker's :class:`MCLabeler` for ``params`` (:func:`label_params`);
    for remote workers the rollout policy's files travel with it (:func:`~prm_critic.robotics.collection.ship_policy`)."""
    return functools.partial(MCLabeler, meta, k=params["k"], seed=params["seed"],
                             rollout_policy=ship_policy(params["rollout_policy"], remote),
                             trust_pickle=trust_pickle, policy_loader=policy_loader)


def run_shard_tasks(pool: Pool, fn: Any, shards: "Iterable[tuple[Path, list[Task]]]",
                    write: Any, on_result: Any = None) -> None:
    """Run every shard's tasks on ``pool`` and call ``write(shard, results)`` (results in task order)
    as soon as all tasks of that shard are back, so a shard is written whole or not at all.

    ``shards`` is consumed lazily (a generator loading one shard at a time keeps memory flat); a shard
    without tasks is written at once; ``on_result(key)`` is called per finished task (progress).
    Task keys are ``(shard.name, ...)`` as made by :func:`state_tasks`.
    """
    want: dict[str, tuple[Path, list[Any]]] = {}
    got: dict[str, dict[Any, Any]] = {}

    def tasks():
        for shard, ts in shards:
            if not ts:
                write(shard, [])
                continue
            want[shard.name] = (shard, [t.key for t in ts])
            got[shard.name] = {}
            yield from ts

    for key, res in pool.map(fn, tasks()):
        name = key[0]
        got[name][key] = res
        if on_result is not None:
            on_result(key)
        shard, keys = want[name]
        if len(got[name]) == len(keys):
            write(shard, [got[name][k] for k in keys])
            del want[name], got[name]


def shards_todo(files: list[Path], lab_dir: Path, relabel: "set[str] | frozenset[str]" = frozenset()) -> list[Path]:
    """The shards of ``files`` without a complete label file in ``lab_dir`` (one label per row), and
    those named in ``relabel`` (label files whose cost record is lost, :func:`~prm_critic.robotics.bisect_labels.sync_stats`)."""
    todo = []
    for f in files:
        target = lab_dir / f.name
        if target.exists() and f.name not in relabel:
            try:
                if len(load_shard(target, ("label",))["label"]) == len(load_shard(f, ("t",))["t"]):
                    continue
            except ShardError:
                pass
        todo.append(f)
    return todo


def check_stored_params(out: Path, family: str, params: dict[str, Any]) -> None:
    """Refuse to continue ``family`` labels of ``out`` that were made with other parameters."""
    pjson = out / "labels" / f"{family}.json"
    if pjson.exists():
        old = json.loads(pjson.read_text())
        if old != params:
            diff = {kk: (old.get(kk), params.get(kk)) for kk in set(old) | set(params) if old.get(kk) != params.get(kk)}
            raise ValueError(
                f"family: {str(out / 'labels' / family)!r} holds {family!r} labels made with other parameters "
                f"(stored vs requested: {diff}); delete that folder to relabel, or pass the stored parameters"
            )


def family_options(family: str, given: dict[str, Any]) -> dict[str, Any]:
    """Every option of :data:`OPTION_DEFAULTS`, its default where ``given`` holds ``None``; an option
    given (not ``None``) to a family that does not take it is an :class:`~prm_critic.validate.ArgumentError`."""
    takes = get_label_family(family).options
    for name, value in given.items():
        if value is None or name in takes:
            continue
        if family == "mc_bisect" and name == "stride":
            raise validate.ArgumentError(
                f"stride: family 'mc_bisect' chooses the states it estimates by binary search, so it takes no "
                f"stride (got {value!r}); set its granularity with resolution")
        takers = families_taking(name)
        raise validate.ArgumentError(f"{name}: family {family!r} takes no {name} (got {value!r}); it is an option "
                                     f"of {', '.join(map(repr, takers))}")
    return {name: OPTION_DEFAULTS[name] if given.get(name) is None else given[name] for name in OPTION_DEFAULTS}


def check_snapshots(out: Path, meta: dict[str, Any], files: list[Path], family: str) -> None:
    """Refuse ``mc`` / ``mc_bisect`` on data whose steps carry no simulator snapshots (imported data)."""
    source = meta.get("source")
    if isinstance(source, dict) and source.get("minari") is not None:
        where = f"was imported from the Minari dataset {source['minari']!r}"
    else:
        sim = load_shard(files[0], ("sim",))["sim"]
        if sim.ndim == 2 and sim.shape[1] > 0:
            return
        where = f"holds steps without simulator snapshots ({files[0].name}: 'sim' has shape {sim.shape})"
    raise validate.ArgumentError(
        f"data: {str(out)!r} {where}; imported steps carry no simulator snapshots, so family {family!r} (which "
        f"restores the snapshot of every state it estimates) cannot label them; expected data written by "
        f"`prm-critic collect`, or family 'subgoal' or 'outcome'")


def label(out_dir: "str | Path", family: str, *, k: int | None = None, stride: int | None = None,
          gamma: float | None = None, seed: int | None = None, rollout_policy: str | None = None,
          progress: bool = True, trust_pickle: bool = False, policy_loader: Any = None,
          executor: "str | Executor" = "local", workers: int | None = None, address: str | None = None,
          threshold: float | None = None, resolution: int | None = None, min_estimates: int | None = None) -> Path:
    """Label every trajectory shard of ``out_dir`` with ``family`` (resumable per shard): a family of the
    registry (:func:`prm_critic.robotics.families.register_label_family`), run with a
    :class:`~prm_critic.robotics.families.LabelJob`; an unknown name is refused with a near miss.

    Options a family does not take are refused when given (``None`` means not given; the defaults are
    :data:`OPTION_DEFAULTS`): ``k``, ``seed`` and ``rollout_policy`` are ``mc`` and ``mc_bisect``
    options, ``stride`` is ``mc``'s, ``gamma`` is ``outcome``'s. ``threshold``, ``resolution`` and
    ``min_estimates`` (states estimated before any search, spread over the episode; default 2, the
    ends) are the ``mc_bisect`` search parameters (:func:`prm_critic.robotics.bisect_labels.bisect_episode`).
    ``mc`` and ``mc_bisect`` refuse data without simulator snapshots (imported from Minari).

    ``trust_pickle=True`` allows an ``mc`` ``rollout_policy`` that is a stable-baselines3 ``.zip``
    (loading one unpickles objects stored in the file, which runs arbitrary code from it). An ``mc``
    ``rollout_policy`` that is a prm-critic policy checkpoint needs ``policy_loader``
    (:func:`prm_critic.sb3.load_policy`).

    ``executor`` (``"local"``, ``"ray"`` or ``"auto"``: Ray where the cost model expects it to be
    faster, :func:`prm_critic.parallel.choose_executor`, which prints its choice to stderr),
    ``workers`` and ``address``: where ``mc`` rollouts run. Each labelled state is one task (its continuations are seeded from
    ``(seed, episode, t, j)``), so labels are bit-identical whatever the executor, worker count or
    order; the driver writes a shard's labels once all its states are back. ``subgoal`` and
    ``outcome`` labels need no env and are computed in this process whatever the executor.

    Returns:
        the folder ``out_dir/labels/<family>``.
    """
    require("tqdm.auto")  # the robotics extra installs it

    opts = family_options(family, {"k": k, "stride": stride, "gamma": gamma, "seed": seed,
                                   "rollout_policy": rollout_policy, "threshold": threshold,
                                   "resolution": resolution, "min_estimates": min_estimates})
    fam = get_label_family(family)
    if fam.snapshots:
        check_snapshots(Path(out_dir), read_meta(out_dir), shard_files(Path(out_dir)), family)
    return fam.run(LabelJob(out_dir=Path(out_dir), family=family, options=opts, progress=progress,
                            trust_pickle=trust_pickle, policy_loader=policy_loader, executor=executor,
                            workers=workers, address=address))


def _prepare(job: LabelJob) -> tuple[dict[str, Any], dict[str, Any], list[Path], Path]:
    """The data's meta, the checked parameter record (refused if it differs from the stored one), the
    shard files and the label folder of ``job``."""
    out = job.out_dir
    meta = read_meta(out)
    params = label_params(job.family, trust_pickle=job.trust_pickle, **job.options)
    return meta, params, shard_files(out), out / "labels" / job.family


def run_array_family(job: LabelJob) -> Path:
    """``subgoal`` and ``outcome`` (registered in :mod:`prm_critic.robotics.families`): numpy over each
    shard's arrays, in this process."""
    meta, params, files, lab_dir = _prepare(job)
    check_stored_params(job.out_dir, job.family, params)
    check_executor(job.executor, workers=job.workers, address=job.address)  # checked, though not used
    if job.executor == "auto":
        choose_executor("auto", workers=job.workers, address=job.address,
                        estimate=JobEstimate(0, 0.0, 0, f"{job.family} labels need no env (computed in this process)"))
    todo = shards_todo(files, lab_dir)
    _label_arrays(require("tqdm.auto").tqdm, job.out_dir, job.family, meta, params, todo, job.progress)
    return lab_dir


def run_mc(job: LabelJob) -> Path:
    """``mc`` (registered in :mod:`prm_critic.robotics.families`): one executor task per labelled state."""
    from prm_critic.robotics.bisect_labels import sync_stats

    meta, params, files, lab_dir = _prepare(job)
    check_policy_loader(params["rollout_policy"], job.policy_loader, name="rollout_policy")
    check_stored_params(job.out_dir, job.family, params)
    check_executor(job.executor, workers=job.workers, address=job.address)
    unknown = sync_stats(job.out_dir, job.family, files)  # a kill after a shard's write leaves its cost in the shard
    todo = shards_todo(files, lab_dir, relabel=unknown)
    if not todo:
        atomic_write_json(job.out_dir / "labels" / f"{job.family}.json", params)
        return lab_dir
    ex = choose_executor(job.executor, workers=job.workers, address=job.address,
                         estimate=functools.partial(mc_estimate, meta, params, todo))
    _label_mc(require("tqdm.auto").tqdm, job.out_dir, meta, params, todo, ex, job.progress, job.trust_pickle,
              job.policy_loader)
    return lab_dir


def mc_estimate(meta: dict[str, Any], params: dict[str, Any], todo: list[Path]) -> JobEstimate:
    """What ``mc`` labelling of the shards ``todo`` costs (for ``executor="auto"``): ``k * (T - t)``
    rollout env steps for the state at step ``t`` of an episode of length ``T``, at the per-step cost
    measured here (:func:`~prm_critic.robotics.make.step_cost`)."""
    k, stride = params["k"], params["stride"]
    states = steps = 0
    for f in todo:
        d = load_shard(f, ("t", "episode", "ep_index", "ep_len"))
        ep_len = dict(zip(d["ep_index"].tolist(), d["ep_len"].tolist()))
        rows = d["t"] % stride == 0
        T = np.asarray([ep_len[e] for e in d["episode"][rows].tolist()], dtype=np.int64)
        states += int(rows.sum())
        steps += k * int(np.maximum(T - d["t"][rows], 1).sum())
    step_s, _ = step_cost(meta["spec"])
    return JobEstimate(units=steps, unit_s=step_s, tasks=states,
                       what=f"{states:,} states x {k} rollouts, ~{steps:,} rollout steps")


def run_bisect(job: LabelJob) -> Path:
    """``mc_bisect`` (registered in :mod:`prm_critic.robotics.families`): its binary searches run in this process."""
    from prm_critic.robotics.bisect_labels import label_bisect

    if job.executor not in ("local", "auto"):
        raise ValueError(f"executor: family 'mc_bisect' runs its binary searches in this process (executor "
                         f"'local'), got {job.executor!r}; use family 'mc' to label on Ray workers")
    if job.executor == "auto":
        choose_executor("auto", workers=job.workers, address=job.address,
                        estimate=JobEstimate(0, 0.0, 0, "mc_bisect runs its binary searches in this process"))
    o = job.options
    label_params(job.family, trust_pickle=job.trust_pickle, **o)
    return label_bisect(job.out_dir, k=o["k"], seed=o["seed"], threshold=o["threshold"], resolution=o["resolution"],
                        min_estimates=o["min_estimates"],
                        rollout_policy=o["rollout_policy"], progress=job.progress, trust_pickle=job.trust_pickle,
                        policy_loader=job.policy_loader)


def steps_to_success_labels(episode: np.ndarray, t: np.ndarray, success: np.ndarray, gamma: float, *,
                            where: str = "steps") -> np.ndarray:
    """``gamma ** (t* - t)`` per row, ``t*`` the first step at or after ``t`` of the same episode whose
    ``success`` flag (success of the step's next state) is set; 0 where none is. Rows must hold whole
    episodes, each one block with ``t = 0, 1, ...`` in order, as a collect shard stores them (anything
    else is refused, naming ``where``). Returns float32 ``(N,)``."""
    episode, t, success = np.asarray(episode), np.asarray(t), np.asarray(success, dtype=bool)
    if not (len(episode) == len(t) == len(success)):
        raise ValueError(f"{where}: episode, t and success differ in length ({len(episode)}, {len(t)}, "
                         f"{len(success)}); expected one row per step")
    out = np.zeros(len(t), dtype=np.float64)
    if not len(t):
        return out.astype(np.float32)
    starts, ends = check_whole_episodes(episode, t, where)
    for b, e in zip(starts, ends):
        steps = np.arange(e - b)
        hits = np.flatnonzero(success[b:e])
        if not len(hits):
            continue
        nxt = np.searchsorted(hits, steps)  # index of the first success at or after each step
        ok = nxt < len(hits)
        out[b:e][ok] = float(gamma) ** (hits[nxt[ok]] - steps[ok])
    return out.astype(np.float32)


def check_outcomes(out: Path, family: str) -> None:
    """Refuse data a spec-free family cannot learn from: ``demo_progress`` needs a successful episode,
    ``success_contrast`` a successful and a failed one (names what is missing and how many of each there are)."""
    n_ok = n = 0
    for f in sorted((out / "shards").glob("shard_*.npz")):
        ok = load_shard(f, ("ep_success",))["ep_success"].astype(bool)
        n, n_ok = n + len(ok), n_ok + int(ok.sum())
    missing = []
    if n_ok == 0:
        missing.append("a successful episode")
    if family == "success_contrast" and n_ok == n:
        missing.append("a failed episode")
    if missing:
        raise ValueError(f"family {family!r}: {str(out)!r} holds {n_ok} successful and {n - n_ok} failed episodes; "
                         f"expected {' and '.join(missing)} (collect more episodes, e.g. with --policy random for "
                         "failures, or a better policy for successes)")


def _label_arrays(tqdm: Any, out: Path, family: str, meta: dict[str, Any], params: dict[str, Any],
                  todo: list[Path], progress: bool) -> None:
    """``subgoal``, ``outcome`` and ``steps_to_success`` labels of the shards ``todo``: numpy over a shard's arrays (no env),
    computed in this process, not shipped to an executor."""
    lab_dir = out / "labels" / family
    evaluator = subgoal_evaluator(meta) if family == "subgoal" else None
    if family in ("demo_progress", "success_contrast"):
        check_outcomes(out, family)
    atomic_write_json(out / "labels" / f"{family}.json", params)
    bar = tqdm(total=len(todo), desc=f"label {family} ({out.name})", unit="shard", disable=not progress)
    for f in todo:
        d = load_shard(f)
        n = len(d["t"])
        if family == "subgoal":
            assert evaluator is not None, "family 'subgoal' builds the evaluator above"
            lab = evaluator.progress(d["x"]).astype(np.float32)
        elif family == "steps_to_success":
            lab = steps_to_success_labels(d["episode"], d["t"], d["success"], params["gamma"], where=str(f))
        elif family in ("demo_progress", "success_contrast"):
            ep_ok = dict(zip(d["ep_index"].tolist(), d["ep_success"].tolist()))
            ok = np.asarray([ep_ok[e] for e in d["episode"].tolist()], dtype=bool)
            lab, mask = (demo_progress_labels(d["episode"], d["t"], d["success"], ok, where=str(f))
                         if family == "demo_progress" else success_contrast_labels(ok))
            atomic_savez(lab_dir / f.name, label=lab, mask=mask)
            bar.update(1)
            continue
        else:
            ep_len = dict(zip(d["ep_index"].tolist(), d["ep_len"].tolist()))
            ep_ok = dict(zip(d["ep_index"].tolist(), d["ep_success"].tolist()))
            T = np.asarray([ep_len[e] for e in d["episode"].tolist()], dtype=np.float64)
            ok = np.asarray([ep_ok[e] for e in d["episode"].tolist()], dtype=np.float64)
            lab = (params["gamma"] ** (T - 1 - d["t"]) * ok).astype(np.float32)
        atomic_savez(lab_dir / f.name, label=lab, mask=np.ones(n, dtype=bool))
        bar.update(1)
    bar.close()


def _label_mc(tqdm: Any, out: Path, meta: dict[str, Any], params: dict[str, Any], todo: list[Path],
              ex: Executor, progress: bool, trust_pickle: bool, policy_loader: Any) -> None:
    """``mc`` labels of the shards ``todo`` (not empty), one executor task per labelled state."""
    family = "mc"
    lab_dir = out / "labels" / family
    pjson = out / "labels" / f"{family}.json"
    # every worker builds its MCLabeler here: an env without a snapshot hook is refused before anything is written
    setup = mc_setup(meta, params, remote=ex.remote, trust_pickle=trust_pickle, policy_loader=policy_loader)
    with ex.start(setup) as pool:
        atomic_write_json(pjson, params)
        total = sum(int(np.sum(load_shard(f, ("t",))["t"] % params["stride"] == 0)) for f in todo)
        bar = tqdm(total=total, desc=f"label mc ({out.name})", unit="state", disable=not progress)

        def shards():
            for f in todo:
                d = load_shard(f)
                yield f, state_tasks(f, d, np.nonzero(d["t"] % params["stride"] == 0)[0])

        def write(f: Path, results: list[tuple[float, int]]) -> None:
            from prm_critic.robotics.bisect_labels import cost_arrays, update_stats

            d = load_shard(f, ("t", "episode"))
            mask = d["t"] % params["stride"] == 0
            soft = np.full(len(mask), np.nan, dtype=np.float32)
            soft[np.nonzero(mask)[0]] = np.asarray([v for v, _ in results], dtype=np.float32)
            hard = np.where(mask, (soft > 0).astype(np.float32), np.float32(np.nan)).astype(np.float32)
            n_est = int(mask.sum())
            record = {"episodes": len(np.unique(d["episode"])), "states": int(len(mask)), "estimated_states": n_est,
                      "rollouts": n_est * params["k"], "rollout_steps": int(sum(n for _, n in results)),
                      "replay_steps": n_est}
            atomic_savez(lab_dir / f.name, label=soft, soft=soft, hard=hard, mask=mask, k=np.int64(params["k"]),
                         **cost_arrays(record))
            update_stats(out, family, f.name, record)

        try:
            run_shard_tasks(pool, label_state_cost_task, shards(), write, on_result=lambda key: bar.update(1))
        finally:
            bar.close()
