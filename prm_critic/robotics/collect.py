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
a killed run loses at most the shard being written (temp file + ``os.replace``).
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from prm_critic._optional import require
from prm_critic.robotics.make import make_env
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
    """``np.savez`` to ``path`` through a temp file in the same folder and ``os.replace``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            np.savez(f, **arrays)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


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


def _check_int(name: str, v: Any, lo: int) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or int(v) < lo:
        raise ValueError(f"{name}: expected an integer >= {lo}, got {v!r}")
    return int(v)


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
) -> Path:
    """Collect ``episodes`` episodes of ``spec`` with ``policy`` into ``out_dir`` (resumable).

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

    Returns:
        ``out_dir`` as a Path.
    """
    tqdm = require("tqdm.auto").tqdm  # the robotics extra installs it

    spec = load_spec(spec)
    episodes = _check_int("episodes", episodes, 1)
    shard_size = _check_int("shard_size", shard_size, 1)
    seed = _check_int("seed", seed, 0)
    if max_episode_steps is not None:
        spec = dataclasses.replace(spec, max_episode_steps=_check_int("max_episode_steps", max_episode_steps, 1))
    pol = policy_id(policy, task=spec.name, trust_pickle=trust_pickle)
    check_policy_loader(pol, policy_loader)
    out = Path(out_dir)
    env = make_env(spec)
    env.reset(seed=seed)
    layout = CriticInputLayout.from_space(spec, env.observation_space)
    meta = {
        "format": 1,
        "task": spec.name,
        "spec": spec.to_dict(),
        "layout": layout.to_dict(),
        "maze": _maze_dict(env),
        "policy": pol,
        "seed": seed,
        "shard_size": shard_size,
        "episodes": episodes,
    }
    meta_path = out / "meta.json"
    if meta_path.exists():
        old = read_meta(out)
        for key in ("task", "spec", "policy", "seed", "shard_size", "layout"):
            if old.get(key) != meta[key]:
                ov = old.get(key) if key != "spec" else "(a different spec)"
                nv = meta[key] if key != "spec" else "(this spec)"
                raise ValueError(
                    f"out_dir: {str(out)!r} already holds data with {key}={ov!r}, but this run has {key}={nv!r}; "
                    f"use another folder (or the same settings to resume)"
                )
    atomic_write_json(meta_path, meta)

    evaluator = None
    if spec.success.source == "subgoals":
        from prm_critic.robotics.subgoals import MazeGeometry, SubgoalEvaluator

        evaluator = SubgoalEvaluator(spec, layout, MazeGeometry.from_dict(meta["maze"]) if meta["maze"] else None)
    ctrl = make_policy(spec, env, pol, trust_pickle=trust_pickle, policy_loader=policy_loader)
    snap = Snapshotter(env, strict=False)  # an env without a snapshot hook: subgoal/outcome labels only

    n_shards = (episodes + shard_size - 1) // shard_size
    bar = tqdm(total=episodes, desc=f"collect {spec.name}", unit="ep", disable=not progress)
    try:
        for k in range(n_shards):
            eps = list(range(k * shard_size, min((k + 1) * shard_size, episodes)))
            path = shard_path(out, k)
            if path.exists():
                try:
                    done = load_shard(path, ("ep_index",))["ep_index"].tolist()
                except ShardError:
                    done = None
                if done == eps:
                    bar.update(len(eps))
                    continue
            rows: dict[str, list] = {key: [] for key in SHARD_KEYS}
            for e in eps:
                ep = _run_episode(env, spec, layout, ctrl, snap, evaluator, seed + e)
                n = len(ep["t"])
                for key in ("x", "next_x", "action", "reward", "terminated", "truncated", "success", "t", "sim", "py"):
                    rows[key].extend(ep[key])
                rows["episode"].extend([e] * n)
                rows["ep_index"].append(e)
                rows["ep_seed"].append(seed + e)
                rows["ep_len"].append(n)
                rows["ep_success"].append(ep["ep_success"])
                bar.update(1)
            atomic_savez(
                path,
                x=np.asarray(rows["x"], dtype=np.float32),
                next_x=np.asarray(rows["next_x"], dtype=np.float32),
                action=np.asarray(rows["action"], dtype=np.float32),
                reward=np.asarray(rows["reward"], dtype=np.float32),
                terminated=np.asarray(rows["terminated"], dtype=bool),
                truncated=np.asarray(rows["truncated"], dtype=bool),
                success=np.asarray(rows["success"], dtype=bool),
                episode=np.asarray(rows["episode"], dtype=np.int64),
                t=np.asarray(rows["t"], dtype=np.int64),
                sim=np.asarray(rows["sim"], dtype=np.float64),
                py=np.asarray(rows["py"], dtype=np.str_),
                ep_index=np.asarray(rows["ep_index"], dtype=np.int64),
                ep_seed=np.asarray(rows["ep_seed"], dtype=np.int64),
                ep_len=np.asarray(rows["ep_len"], dtype=np.int64),
                ep_success=np.asarray(rows["ep_success"], dtype=bool),
            )
    finally:
        bar.close()
        env.close()
    return out


def step_success(spec: TaskSpec, info, next_x: np.ndarray, evaluator) -> bool:
    """Success flag of ``s_{t+1}`` per the spec (info key, kitchen tasks or all subgoals hold)."""
    s = success_from_info(spec, info)
    if s is None:
        s = bool(evaluator.all_hold(next_x[None])[0])
    return bool(s)


def _run_episode(env, spec, layout, ctrl, snap, evaluator, ep_seed: int) -> dict[str, Any]:
    obs, _ = env.reset(seed=ep_seed)
    ctrl.reset(obs, np.random.default_rng([ep_seed, 1]))
    out: dict[str, list] = {k: [] for k in ("x", "next_x", "action", "reward", "terminated", "truncated",
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
        out["success"].append(step_success(spec, info, nx, evaluator))
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
