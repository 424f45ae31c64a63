"""Collect trajectories of a task into resumable, atomically written shards.

Layout of ``out_dir``::

    meta.json                       spec, critic-input layout, maze geometry, policy, seed, shard_size, episodes
    shards/shard_00000.npz          episodes [0, shard_size), np.savez (no pickled objects)
    shards/shard_00001.npz          episodes [shard_size, 2 * shard_size) ...

Per step ``(N,)`` rows: ``x`` / ``next_x`` ``(N, D)`` float32 critic inputs of ``s_t`` / ``s_{t+1}``,
``action (N, A)``, ``reward``, ``terminated``, ``truncated``, ``success`` (of ``s_{t+1}``),
``episode`` (global index), ``t``, ``sim (N, S)`` float64 snapshot of ``s_t`` and ``py (N,)`` its
Python state as fixed-width unicode JSON (``"kind": null`` for an env without a snapshot hook: its
snapshots cannot be restored, so it gets ``subgoal`` and ``outcome`` labels but no ``mc``). Per
episode ``(E,)``: ``ep_index``, ``ep_seed``, ``ep_len``, ``ep_success``.

Episode ``e`` is reset with seed ``seed + e`` and its controller draws from
``default_rng([seed + e, 1])``, so a re-run reproduces it bit for bit: complete shards are skipped,
a killed run loses at most the shards being written (temp file + ``os.replace``). Each episode is
one task of the chosen executor (``executor="local" | "ray" | "auto"``, :mod:`prm_critic.parallel`): workers
return episodes, the driver writes a shard once all its episodes are back, so the shards are the
same whatever the executor, worker count or order.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
from pathlib import Path
from typing import Any, cast

import numpy as np

from prm_critic import validate
from prm_critic._io import _MISSING, claim_output, setting_diffs
from prm_critic._optional import require
from prm_critic.parallel import Executor, JobEstimate, Task, check_executor, choose_executor
from prm_critic.robotics.make import make_env, step_cost
from prm_critic.robotics.layout import CriticInputLayout, success_from_info
from prm_critic.robotics.snapshot import Snapshotter
from prm_critic.robotics.spec import TaskSpec, load_spec

__all__ = ["collect", "shard_path", "read_meta", "load_shard", "atomic_savez", "SHARD_KEYS", "ShardError"]

#: keys every trajectory shard holds
SHARD_KEYS = (
    "x", "next_x", "action", "reward", "terminated", "truncated", "success", "episode", "t", "sim", "py",
    "ep_index", "ep_seed", "ep_len", "ep_success",
)


class ShardError(ValueError):
    """A shard or meta file is unreadable or inconsistent."""


def shard_path(out_dir: "str | Path", k: int, sub: str = "shards") -> Path:
    return Path(out_dir) / sub / f"shard_{k:05d}.npz"


def atomic_savez(path: Path, **arrays: np.ndarray) -> None:
    """``np.savez`` to ``path`` through a temp file in the same folder and ``os.replace``.

    A temp file of ``path`` left by a killed writer (its process is gone) is removed first."""
    path.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_temps(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            # Any: savez also takes allow_pickle: bool by keyword, and mypy checks **arrays against it
            np.savez(f, **cast("dict[str, Any]", arrays))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def _remove_stale_temps(path: Path) -> None:
    for tmp in path.parent.glob(f".{path.name}.tmp-*"):
        pid = tmp.name.rsplit("-", 1)[-1]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:  # its writer is gone: a leftover of a killed run
            tmp.unlink(missing_ok=True)
        except PermissionError:  # alive, another user's
            pass


def atomic_write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True))
    os.replace(tmp, path)


def load_shard(path: "str | Path", keys: tuple[str, ...] = SHARD_KEYS) -> dict[str, np.ndarray]:
    """Read a shard (``allow_pickle=False``); a corrupt or incomplete file is a :class:`ShardError`
    naming it."""
    path = Path(path)
    try:
        with np.load(path, allow_pickle=False) as z:
            missing = [k for k in keys if k not in z.files]
            if missing:
                raise ShardError(f"shard file {str(path)!r}: missing arrays {missing}; expected {list(keys)}")
            return {k: z[k] for k in z.files}
    except ShardError:
        raise
    except FileNotFoundError:
        raise
    except Exception as exc:  # zipfile.BadZipFile, ValueError, EOFError, OSError...
        raise ShardError(
            f"shard file {str(path)!r} is corrupt or unreadable ({type(exc).__name__}: {exc}); "
            f"delete it and re-run the command that wrote it"
        ) from exc


def read_meta(out_dir: "str | Path") -> dict[str, Any]:
    p = Path(out_dir) / "meta.json"
    if not p.is_file():
        raise FileNotFoundError(f"data: {str(p)!r} does not exist (run `prm-critic collect` first)")
    try:
        return json.loads(p.read_text())
    except json.JSONDecodeError as exc:
        raise ShardError(f"meta file {str(p)!r} is not valid JSON: {exc}") from exc


def shard_files(out_dir: Path, *, name: str = "data", hint: str = "run `prm-critic collect` first") -> list[Path]:
    """The trajectory shard files of the data folder ``out_dir``, in order; none is refused naming ``name``."""
    files = sorted((out_dir / "shards").glob("shard_*.npz"))
    if not files:
        raise FileNotFoundError(f"{name}: no shard files in {str(out_dir / 'shards')!r} ({hint})")
    return files


POLICY_CHOICES = ("'scripted', 'random', a prm-critic policy checkpoint (policy.json + policy.safetensors, as "
                  "written by train-policy) or a stable-baselines3 model .zip")


def policy_id(policy: Any, *, name: str = "policy", task: str | None = None, trust_pickle: bool = False) -> str:
    """Check ``policy`` and return how it is recorded: ``"scripted"``, ``"random"`` or the resolved
    path of a model zip / policy checkpoint JSON. ``task``: refuse a checkpoint trained on another task;
    a model zip is refused unless ``trust_pickle`` (loading it unpickles, which can run its code)."""
    if policy in ("scripted", "random"):
        return str(policy)
    p = Path(str(policy))
    if p.suffix == ".zip":
        if not p.is_file():
            raise FileNotFoundError(f"{name}: model file {str(p)!r} does not exist")
        from prm_critic.robotics.controllers import check_pickle_trust

        check_pickle_trust(p, trust_pickle, name=name)
        return str(p.resolve())
    from prm_critic._io import checkpoint_paths

    w, j = checkpoint_paths(p)
    if not (w.is_file() and j.is_file()):
        raise ValueError(f"{name}: expected {POLICY_CHOICES}, got {policy!r}"
                         + (f" (no {j.name} + {w.name} there)" if p.suffix in (".json", ".safetensors") or len(p.parts) > 1 else ""))
    try:
        doc = json.loads(j.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{name}: {str(j)!r} is not valid JSON: {exc}") from exc
    if not isinstance(doc, dict) or doc.get("format") != "prm-critic/sb3-policy":
        fmt = doc.get("format") if isinstance(doc, dict) else None
        raise ValueError(f"{name}: {str(j)!r} is not a prm-critic policy checkpoint (format {fmt!r}, expected "
                         f"'prm-critic/sb3-policy'; a critic checkpoint is not a policy)")
    if task is not None and doc.get("task") != task:
        raise ValueError(f"{name}: {str(j)!r} is a policy for {doc.get('task')!r}, expected one for {task!r}")
    return str(j.resolve())


def check_policy_loader(policy: str, policy_loader: Any, *, name: str = "policy") -> None:
    """Refuse a prm-critic policy checkpoint ``policy`` (as returned by :func:`policy_id`) without a
    ``policy_loader``: rebuilding the trained algorithm is the SB3 integration's job
    (:func:`prm_critic.sb3.load_policy`), which this data layer does not import."""
    if policy in ("scripted", "random") or str(policy).endswith(".zip"):
        return
    if policy_loader is None:
        raise ValueError(f"{name}: {str(policy)!r} is a prm-critic policy checkpoint; loading it needs the SB3 "
                         "integration: pass policy_loader=prm_critic.sb3.load_policy (the CLI does)")
    if not callable(policy_loader):
        raise TypeError(f"policy_loader: expected a callable path -> SB3 model such as prm_critic.sb3.load_policy, "
                        f"got {type(policy_loader).__name__}")


def make_policy(spec: TaskSpec, env, policy: str, *, trust_pickle: bool = False, policy_loader: Any = None,
                **params: Any):
    """Controller for ``policy`` (``"scripted"``: the spec's controller; ``"random"``; a model zip,
    loaded only with ``trust_pickle=True``, or a prm-critic policy checkpoint, loaded with
    ``policy_loader(path)``, e.g. :func:`prm_critic.sb3.load_policy`, whose observation
    normalisation is applied)."""
    from prm_critic.robotics.controllers import SB3Controller, load_sb3_model, make_controller

    if policy == "scripted":
        return make_controller(spec, env, **params)
    if policy == "random":
        return make_controller(spec, env, name="random")
    if str(policy).endswith(".zip"):
        return SB3Controller(load_sb3_model(policy, trust_pickle=trust_pickle))
    check_policy_loader(policy, policy_loader)
    return SB3Controller(policy_loader(policy))


def _maze_dict(env) -> dict | None:
    if hasattr(env.unwrapped, "maze"):
        from prm_critic.robotics.subgoals import MazeGeometry

        return MazeGeometry.from_env(env).to_dict()
    return None


def collect(
    spec: "str | TaskSpec",
    out_dir: "str | Path",
    *,
    episodes: int,
    policy: str = "scripted",
    seed: int = 0,
    shard_size: int = 10,
    max_episode_steps: int | None = None,
    progress: bool = True,
    trust_pickle: bool = False,
    policy_loader: Any = None,
    executor: "str | Executor" = "local",
    workers: int | None = None,
    address: str | None = None,
    overwrite: bool = False,
) -> Path:
    """Collect ``episodes`` episodes of ``spec`` with ``policy`` into ``out_dir`` (resumable).

    The output folder follows one rule: the same settings resume (complete shards are kept, more
    episodes extend the data), other settings or fewer episodes than it holds are refused naming each
    difference, and ``overwrite=True`` replaces it whole (its ``meta.json``, ``shards`` and ``labels``).

    Args:
        spec: built-in spec name, TOML path, dict or :class:`TaskSpec`.
        out_dir: output folder (created).
        episodes: total number of episodes (re-running with more extends the data set).
        policy: ``"scripted"`` (the spec's controller), ``"random"``, a prm-critic policy checkpoint
            (``policy.json`` from ``train_policy``; its observation normalisation is applied) or a
            stable-baselines3 ``.zip`` (needs ``trust_pickle=True``).
        seed: episode ``e`` is reset with ``seed + e``.
        shard_size: episodes per shard file.
        max_episode_steps: TimeLimit override (recorded in the stored spec).
        progress: show a tqdm bar over episodes.
        trust_pickle: allow ``policy`` to be a stable-baselines3 ``.zip``. Loading one unpickles
            objects stored in the file, which runs arbitrary code from it: only for files you trust.
        policy_loader: ``path -> SB3 model`` for a prm-critic policy checkpoint ``policy``:
            :func:`prm_critic.sb3.load_policy` (needed only for such a ``policy``).
        executor: ``"local"`` (this process), ``"ray"`` or ``"auto"`` (Ray where the cost model expects it
            to be faster, :func:`prm_critic.parallel.choose_executor`; ``"ray"`` and ``"auto"`` print
            their choice and expected speed-up to stderr); each episode is one task, so the shards are
            bit-identical whatever the executor, worker count or order.
        workers: Ray worker processes (``None``: one per CPU of the Ray cluster).
        address: an existing Ray cluster to run on (``"auto"``, ``"head:6379"``).
        overwrite: replace the data already in ``out_dir`` (of any settings) instead of resuming it.

    Returns:
        ``out_dir`` as a Path.
    """
    tqdm = require("tqdm.auto").tqdm  # the robotics extra installs it

    spec, episodes, shard_size, seed = _checked_run(spec, episodes, shard_size, seed, max_episode_steps)
    pol = policy_id(policy, task=spec.name, trust_pickle=trust_pickle)
    check_policy_loader(pol, policy_loader)
    check_executor(executor, workers=workers, address=address)
    out = Path(out_dir)
    _check_out_dir(out)
    maze = _write_meta(out, spec, pol, seed, shard_size, episodes, overwrite=overwrite)
    todo, done_eps = _shards_todo(out, episodes, shard_size)
    if not todo:
        return out
    tasks = [Task(key=(k, e), desc=f"episode {e} of {shard_path(out, k).name}", payload=e)
             for k in todo for e in range(k * shard_size, min((k + 1) * shard_size, episodes))]
    ex = choose_executor(executor, workers=workers, address=address,
                         estimate=functools.partial(collect_estimate, spec, len(tasks)))
    setup = functools.partial(CollectWorker, spec.to_dict(), maze, ship_policy(pol, ex.remote), seed,
                              trust_pickle, policy_loader)
    pending: dict[int, dict[int, dict[str, Any]]] = {k: {} for k in todo}
    bar = tqdm(total=episodes, initial=done_eps, desc=f"collect {spec.name}", unit="ep", disable=not progress)
    try:
        with ex.start(setup) as pool:
            for (k, e), ep in pool.map(run_episode_task, tasks):
                pending[k][e] = ep
                bar.update(1)
                eps = range(k * shard_size, min((k + 1) * shard_size, episodes))
                if len(pending[k]) == len(eps):
                    done_shard = pending.pop(k)
                    _write_shard(shard_path(out, k), [done_shard[i] for i in eps], seed)
    finally:
        bar.close()
    return out


def _check_out_dir(out: Path) -> None:
    """Refuse an ``out_dir`` that is a file or lies under one (one line, not ``FileExistsError``)."""
    for p in (out, *out.parents):
        if p.exists() and not p.is_dir():
            raise ValueError(f"out_dir: expected a folder to collect into, got {str(out)!r}"
                             + (" (an existing file)" if p == out else f" (under {str(p)!r}, an existing file)"))
        if p.exists():
            return


def collect_estimate(spec: "str | TaskSpec", episodes: int) -> JobEstimate:
    """What collecting ``episodes`` episodes of ``spec`` costs (for ``executor="auto"``): at most the
    time limit's env steps each, at the per-step cost measured here (:func:`step_cost`)."""
    step_s, limit = step_cost(spec)
    steps = episodes * (limit or 1000)
    what = f"{episodes:,} episodes, up to {steps:,} env steps" if limit else \
        f"{episodes:,} episodes, ~{steps:,} env steps (no time limit: 1,000 steps each assumed)"
    return JobEstimate(units=steps, unit_s=step_s, tasks=episodes, what=what)


def _checked_run(spec: "str | TaskSpec", episodes: Any, shard_size: Any, seed: Any,
                 max_episode_steps: Any) -> tuple[TaskSpec, int, int, int]:
    """:func:`collect`'s spec (loaded, with its TimeLimit override) and checked counts."""
    spec = load_spec(spec)
    episodes = validate.check_int("episodes", episodes, minimum=1)
    shard_size = validate.check_int("shard_size", shard_size, minimum=1)
    seed = validate.check_int("seed", seed, minimum=0)
    if max_episode_steps is not None:
        spec = dataclasses.replace(spec, max_episode_steps=validate.check_int("max_episode_steps", max_episode_steps, minimum=1))
    return spec, episodes, shard_size, seed


def _write_meta(out: Path, spec: TaskSpec, pol: str, seed: int, shard_size: int, episodes: int, *,
                overwrite: bool) -> dict | None:
    """Write ``out/meta.json`` for this run, refusing a folder that holds data of other settings or
    more episodes (:func:`prm_critic._io.claim_output`; ``overwrite`` removes that data first);
    returns the maze geometry (``None`` for an env without a maze)."""
    env = make_env(spec)
    try:
        env.reset(seed=seed)
        layout = CriticInputLayout.from_space(spec, env.observation_space)
        maze = _maze_dict(env)
    finally:
        env.close()
    meta = {
        "format": 1,
        "task": spec.name,
        "spec": spec.to_dict(),
        "layout": layout.to_dict(),
        "maze": maze,
        "policy": pol,
        "seed": seed,
        "shard_size": shard_size,
        "episodes": episodes,
    }
    meta_path = out / "meta.json"
    diffs = None
    if meta_path.exists():
        old = read_meta(out)
        diffs = [d for key in _RUN_SETTINGS for d in setting_diffs(key, old.get(key, _MISSING), meta[key])]
        if isinstance(old.get("episodes"), int) and old["episodes"] > episodes:  # more episodes extend the data
            diffs.append(("episodes", old["episodes"], episodes))
    claim_output(out, [out / name for name in _OWNED], diffs, overwrite=overwrite, what="out_dir",
                 held="data collected")
    atomic_write_json(meta_path, meta)
    return maze


#: the settings of meta.json a resumed run must repeat
_RUN_SETTINGS = ("task", "spec", "policy", "seed", "shard_size", "layout")

#: what a collection writes in its folder besides its record, meta.json (``labels`` by ``prm-critic label``):
#: all that ``overwrite`` removes
_OWNED = ("shards", "labels")


def _shards_todo(out: Path, episodes: int, shard_size: int) -> tuple[list[int], int]:
    """The shard indices still to write (missing or incomplete) and the episodes already in complete shards."""
    n_shards = (episodes + shard_size - 1) // shard_size
    todo: list[int] = []
    done_eps = 0
    for k in range(n_shards):
        eps = list(range(k * shard_size, min((k + 1) * shard_size, episodes)))
        path = shard_path(out, k)
        if path.exists():
            try:
                done = load_shard(path, ("ep_index",))["ep_index"].tolist()
            except ShardError:
                done = None
            if done == eps:
                done_eps += len(eps)
                continue
        todo.append(k)
    return todo, done_eps


def _write_shard(path: Path, eps: list[dict[str, Any]], seed: int) -> None:
    """One trajectory shard from its episodes' arrays (in episode order), written atomically."""
    cat = {key: np.concatenate([ep[key] for ep in eps]) for key in _STEP_KEYS}
    atomic_savez(
        path,
        **{key: cat[key] for key in ("x", "next_x", "action", "reward", "terminated", "truncated", "success")},
        episode=np.concatenate([np.full(len(ep["t"]), ep["episode"], dtype=np.int64) for ep in eps]),
        t=cat["t"], sim=cat["sim"], py=cat["py"],
        ep_index=np.asarray([ep["episode"] for ep in eps], dtype=np.int64),
        ep_seed=np.asarray([seed + ep["episode"] for ep in eps], dtype=np.int64),
        ep_len=np.asarray([len(ep["t"]) for ep in eps], dtype=np.int64),
        ep_success=np.asarray([ep["ep_success"] for ep in eps], dtype=bool),
    )


_STEP_KEYS = ("x", "next_x", "action", "reward", "terminated", "truncated", "success", "t", "sim", "py")
_STEP_DTYPES = {"x": np.float32, "next_x": np.float32, "action": np.float32, "reward": np.float32,
                "terminated": bool, "truncated": bool, "success": bool, "t": np.int64, "sim": np.float64,
                "py": np.str_}


def ship_policy(policy: str, remote: bool) -> "str | dict[str, Any]":
    """What workers receive for ``policy`` (as returned by :func:`policy_id`): the name itself for
    ``"scripted"``/``"random"`` or a local executor; for remote workers, the policy's files (a model zip,
    or a checkpoint's JSON + safetensors) as bytes, so a cluster node needs no copy of them."""
    if not remote or policy in ("scripted", "random"):
        return policy
    p = Path(policy)
    if p.suffix == ".zip":
        files = [p]
    else:
        from prm_critic._io import checkpoint_paths

        w, j = checkpoint_paths(p)
        files = [j, w]
    return {"source": str(p), "main": files[0].name, "files": {f.name: f.read_bytes() for f in files}}


def unship_policy(policy: "str | dict[str, Any]", folder: "str | Path") -> str:
    """A path to the policy on this worker: the shipped files written into ``folder`` (see :func:`ship_policy`)."""
    if isinstance(policy, str):
        return policy
    from prm_critic._io import atomic_write_bytes

    for name, data in policy["files"].items():
        atomic_write_bytes(Path(folder) / name, data)
    return str(Path(folder) / policy["main"])


class CollectWorker:
    """A collection worker's context: one env, its controller, snapshotter and success evaluator.

    Built by every worker from picklable parts (the spec as a dict, the maze geometry, the policy);
    :func:`run_episode_task` runs one episode with it.
    """

    def __init__(self, spec: dict, maze: dict | None, policy: "str | dict[str, Any]", seed: int,
                 trust_pickle: bool = False, policy_loader: Any = None):
        import tempfile

        self.spec = load_spec(spec)
        self.base_seed = int(seed)
        self._tmp = tempfile.TemporaryDirectory(prefix="prm-critic-policy-") if not isinstance(policy, str) else None
        self.env = make_env(self.spec)
        try:
            self.env.reset(seed=seed)
            self.layout = CriticInputLayout.from_space(self.spec, self.env.observation_space)
            self.evaluator = None
            if self.spec.success.reads_state:
                from prm_critic.robotics.subgoals import MazeGeometry, SubgoalEvaluator

                self.evaluator = SubgoalEvaluator(self.spec, self.layout, MazeGeometry.from_dict(maze) if maze else None)
            if isinstance(policy, str):
                pol = policy
            else:
                assert self._tmp is not None, "a shipped policy (not a str) gets its temp folder above"
                pol = unship_policy(policy, self._tmp.name)
            self.ctrl = make_policy(self.spec, self.env, pol, trust_pickle=trust_pickle, policy_loader=policy_loader)
            self.snap = Snapshotter(self.env, strict=False)  # an env without a snapshot hook: subgoal/outcome labels only
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        self.env.close()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None


def run_episode_task(ctx: CollectWorker, e: int) -> dict[str, Any]:
    """Episode ``e`` (reset with ``seed + e``, controller rng ``[seed + e, 1]``) as arrays of its steps."""
    ep = _run_episode(ctx.env, ctx.spec, ctx.layout, ctx.ctrl, ctx.snap, ctx.evaluator, ctx.base_seed + e)
    arrays: dict[str, Any] = {key: np.asarray(ep[key], dtype=_STEP_DTYPES[key]) for key in _STEP_KEYS}
    arrays["episode"] = int(e)
    arrays["ep_success"] = bool(ep["ep_success"])
    return arrays


def step_success(spec: TaskSpec, info, next_x: np.ndarray | None, evaluator, *, terminated: bool = False,
                 truncated: bool = False) -> bool:
    """Success flag of ``s_{t+1}`` per the spec's success source (:mod:`prm_critic.robotics.success`).
    ``next_x`` and ``evaluator`` may be ``None`` unless the flag comes from the state (all subgoals hold)."""
    s = success_from_info(spec, info, terminated, truncated)
    if s is None:
        assert next_x is not None, "a state success source: callers pass next_x with the evaluator"
        s = bool(evaluator.all_hold(next_x[None])[0])
    return bool(s)


def _run_episode(env, spec, layout, ctrl, snap, evaluator, ep_seed: int) -> dict[str, Any]:
    obs, _ = env.reset(seed=ep_seed)
    ctrl.reset(obs, np.random.default_rng([ep_seed, 1]))
    out: dict[str, Any] = {k: [] for k in ("x", "next_x", "action", "reward", "terminated", "truncated",
                                             "success", "t", "sim", "py")}
    x = layout.flatten(obs)
    t = 0
    while True:
        sim, py = snap.get().to_arrays()
        action = ctrl.act(obs)
        obs, reward, terminated, truncated, info = env.step(action)
        nx = layout.flatten(obs)
        out["x"].append(x)
        out["next_x"].append(nx)
        out["action"].append(np.asarray(action, dtype=np.float32).reshape(-1))
        out["reward"].append(float(reward))
        out["terminated"].append(bool(terminated))
        out["truncated"].append(bool(truncated))
        out["success"].append(step_success(spec, info, nx, evaluator, terminated=terminated, truncated=truncated))
        out["t"].append(t)
        out["sim"].append(sim)
        out["py"].append(py)
        x = nx
        t += 1
        if terminated or truncated:
            break
    succ = out["success"]
    out["ep_success"] = bool(succ[-1]) if spec.success.rule == "final" else bool(any(succ))
    return out
