"""One run of the RL benchmark: train SAC on a task under one reward config, evaluate on the
unshaped env, write ``eval.csv`` (rows appended atomically) and a ``done.json`` marker.

    python benchmarks/rl/run.py --task FetchReach-v4 --config her --seed 0 --steps 10000

Configs (same algorithm, hyper-parameters, seeds, env-step budget and evaluation for all):

* ``sparse``  - the env's own reward;
* ``her``     - the env's own reward + HerReplayBuffer;
* ``prm``     - potential-based shaping with the spec's SubgoalCritic (``--scale``);
* ``prm_her`` - both.

``--spec PATH`` trains with another spec TOML for the task (the label gets the file's stem, e.g.
``prm_her_s10_near_object``); by default the task's built-in spec is used.

``--critic PATH`` uses a trained critic (a ``prm-critic train-critic`` checkpoint, ``.json`` /
``.safetensors``, or its ONNX export) as the potential instead of the spec's subgoal progress, on
its ``--head`` (``success``: the MC success estimate, a value-like potential; ``progress``); the
label gets ``_critic-<stem>-<head>``. With ``--spec`` the spec still makes the env (its
``make_kwargs``, e.g. a continuing PointMaze, and its success rule) and the critic replaces only its potential;
a critic or demonstrations recorded on another env (env id, ``make_kwargs`` or success rule) are refused.
``--refresh`` (with a torch checkpoint) fine-tunes that critic
on the policy's own episodes during training (:class:`prm_critic.sb3.refresh.CriticRefreshCallback`,
every evaluation period, outcome labels; label suffix ``_refresh``). The refreshed critic is not part
of the training state, so a refresh run cannot resume: killed, it is refused with the folder to
remove. The critic's weights SHA-256 is in ``done.json``, and a run resumed with other weights
under the same path is refused.

``--random-weights SEED`` (with ``--critic``) is the uninformed control of a learned potential: the
same critic with its MLP weights drawn anew (torch's default initialisation under ``SEED``), its
input normalisation, head, scale and gamma unchanged (:func:`random_weights`); label suffix
``_randw<SEED>``.

``--backend sbx`` trains with SBX (JAX) instead of stable-baselines3, resumable the same way; the
label gets ``_sbx``, so its rows are reported beside the SB3 ones, never pooled with them.

``--anneal-steps N`` (``prm_her`` only) moves the shaping scale linearly from ``--scale`` to
``--anneal-end`` (default 0) over the first N env steps and keeps it there
(``train_policy(scale_schedule=...)``: the HER buffer pays every sampled reward at the scale of the
moment); label suffix ``_anneal<N/1000>k`` (``to<END>`` when the end is not 0), before ``_randw``.

``--prune`` adds the DeadEndPruner (threshold/patience per task below). A run whose ``done.json``
exists (for this step budget or a larger one) is skipped; a run in progress in another process is skipped
(per-run lock, released when its process ends, however it ends; ``run.py`` then exits with status 75),
so several sweeps can share the cores; a run killed before finishing resumes from its
last training state (saved at every evaluation, safetensors + JSON: :mod:`prm_critic.sb3.resume`);
one killed before its first state restarts, its evaluations kept as ``eval.killed-N.csv``. A run
finished under a smaller budget is extended from its final state (results of the smaller budget
kept as ``eval.steps-N.csv`` / ``done.steps-N.json``).

Demonstrations without a reward model (the controls of a potential learned from them):
``--demos FOLDER`` (a ``prm-critic collect`` folder; its successful episodes, the first ``--demos-n N``)
or ``--demos-of CRITIC.json`` (exactly the demonstrations that critic was trained on, as its checkpoint
records them, refused unless their SHA-256 matches), with ``--demo-buffer`` (the demonstrations in the
replay buffer, ``train_policy(demo_buffer=True)``) and / or ``--demo-starts P`` (episodes started from
demonstration states with probability P). Label suffix ``_demos-<name>`` plus ``-buffer`` / ``-starts<P>``
(``<name>``: the critic's stem, or the folder's name and count). The demonstrations' record is in
``done.json``. ``--demos-data FOLDER`` names where the folder of ``--demos-of`` is (default
``critic_data/<its folder name>``).

Early stop: a run stops once its verdict is decided, that is, two consecutive evaluations at or above
``--early-stop`` (default 0.8) at or after ``--early-stop-min-steps`` (default: the task's headline
budget, so that the success at that budget is always measured; a run extended beyond it, like HER to
200k, stops as soon as it has reached 80 %). The step is ``stopped_early_at`` in ``done.json``
(``null``: ran its whole budget). ``--early-stop 0`` turns it off; a stopped run is extended by a
later call with a larger ``--steps`` (from its last training state).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results" / "runs"
CONFIGS = ("sparse", "her", "prm", "prm_her")

#: Per-task settings shared by every config (the comparison holds everything else equal).
TASKS = {
    "FetchReach-v4": dict(
        steps=10_000, eval_freq=1_000, eval_episodes=50, normalize_obs=True,
        algo_kwargs=dict(gamma=0.95, learning_rate=1e-3, batch_size=256, learning_starts=1_000,
                         policy_kwargs=dict(net_arch=[64, 64])),
        prune=dict(threshold=0.05, patience=20),
    ),
    "PointMaze_UMaze-v3": dict(
        steps=15_000, eval_freq=5_000, eval_episodes=50, normalize_obs=True,
        algo_kwargs=dict(gamma=0.99, learning_rate=1e-3, batch_size=256, learning_starts=1_000,
                         policy_kwargs=dict(net_arch=[64, 64])),
        prune=dict(threshold=0.3, patience=100),
    ),
    "PointMaze_Medium-v3": dict(
        # a 40k-step run (HER 0.46) is kept as eval.steps-40000.csv beside the 100k runs
        steps=100_000, eval_freq=10_000, eval_episodes=50, normalize_obs=True,
        algo_kwargs=dict(gamma=0.99, learning_rate=1e-3, batch_size=256, learning_starts=1_000,
                         policy_kwargs=dict(net_arch=[64, 64])),
        prune=dict(threshold=0.05, patience=150),
    ),
    "FetchPush-v4": dict(
        # a 2-core-CPU-sized version of rl-baselines3-zoo's HER settings (gamma 0.95, lr 1e-3,
        # tau 0.05; the zoo uses [512]*3 and batch 2048, ~2.5x more compute per update than this)
        steps=100_000, eval_freq=10_000, eval_episodes=50, normalize_obs=True,
        algo_kwargs=dict(gamma=0.95, learning_rate=1e-3, tau=0.05, batch_size=256, learning_starts=1_000,
                         policy_kwargs=dict(net_arch=[256, 256])),
        prune=dict(threshold=0.05, patience=25),
    ),
}


def config_label(config: str, scale: float, prune: bool, spec: "str | Path | None" = None,
                 critic: "str | Path | None" = None, head: str = "success", refresh: bool = False,
                 random_weights: int | None = None, backend: str = "sb3",
                 anneal: "tuple[int, float] | None" = None, demos: "str | None" = None) -> str:
    label = config
    if config.startswith("prm"):
        label += f"_s{scale:g}"
    if prune:
        label += "_prune"
    if spec is not None:
        label += f"_{Path(spec).stem}"
    if critic is not None:
        label += f"_critic-{Path(critic).stem}-{head}"
    if refresh:
        label += "_refresh"
    if anneal is not None:
        n, end = anneal
        label += f"_anneal{n // 1000}k" if n % 1000 == 0 else f"_anneal{n}"
        label += f"to{end:g}" if end else ""
    if random_weights is not None:
        label += f"_randw{random_weights}"
    if demos is not None:
        label += f"_demos-{demos}"
    if backend != "sb3":  # the same config on another library: its own rows, never mixed with SB3's
        label += f"_{backend}"
    return label


def random_weights(critic, seed: int):
    """The uninformed control of a learned torch state critic: a copy whose Linear layers are
    re-initialised (torch's default initialisation, seeded with ``seed``) and whose input
    normalisation (mean, std, clip) and metadata are the critic's own."""
    import copy

    import torch

    from prm_critic.models.state_critic import TorchStateCritic

    if not isinstance(critic, TorchStateCritic):
        raise ValueError(f"--random-weights: needs a torch critic checkpoint (.json / .safetensors), got "
                         f"{type(critic).__name__}")
    net = copy.deepcopy(critic.net)
    gen_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        for m in net.modules():
            if isinstance(m, torch.nn.Linear):
                m.reset_parameters()
    finally:
        torch.random.set_rng_state(gen_state)
    return TorchStateCritic(net, {**critic.meta, "random_weights_seed": int(seed)})


def select_demos(demos, demos_n, demos_of, demos_data, demo_buffer: bool, demo_starts: float, task: str,
                 refresh: bool = False):
    """The run's demonstrations and their label name (``None, None`` without), from ``--demos FOLDER`` (first
    ``--demos-n``) or ``--demos-of CRITIC`` (that critic's own, hash-checked)."""
    uses = demo_buffer or demo_starts or refresh
    if demos is None and demos_of is None:
        if demo_buffer or demo_starts or demos_n is not None or demos_data is not None:
            raise ValueError("--demo-buffer / --demo-starts / --demos-n / --demos-data: need --demos FOLDER or --demos-of "
                             "CRITIC.json")
        return None, None
    if demos is not None and demos_of is not None:
        raise ValueError(f"--demos {str(demos)!r} and --demos-of {str(demos_of)!r}: expected one of them")
    if not uses:
        raise ValueError("--demos / --demos-of: expected --demo-buffer, --demo-starts P and / or --refresh to use them")
    from prm_critic.robotics.demos import load_demos

    if demos_of is not None:
        if demos_n is not None:
            raise ValueError("--demos-n: --demos-of takes the critic's own demonstrations, expected no count")
        meta = json.loads(Path(demos_of).read_text())
        rec = meta.get("meta", meta).get("demonstrations")
        if not isinstance(rec, dict):
            raise ValueError(f"--demos-of: {str(demos_of)!r} records no demonstrations (a critic trained on them, by "
                             "train_potential.py --label demo_progress, does)")
        folder = Path(demos_data) if demos_data is not None else Path("critic_data") / rec["folder"]
        d = load_demos(folder).subset(rec["episodes"])
        if d.sha256 != rec["sha256"]:
            raise ValueError(f"--demos-of: the demonstrations of {str(folder)!r} (SHA-256 {d.sha256[:12]}) are not those "
                             f"{str(demos_of)!r} was trained on ({rec['sha256'][:12]}); collect them with the critic's "
                             "recorded command")
        name = Path(demos_of).stem
    else:
        if demos_data is not None:
            raise ValueError("--demos-data: names the folder of --demos-of; with --demos give the folder itself")
        d = load_demos(demos, demos_n)
        name = f"{Path(demos).name}{len(d)}"
    if d.spec.env_id != task:
        raise ValueError(f"--demos: demonstrations of {d.spec.env_id!r}, expected {task!r}'s")
    name += ("-buffer" if demo_buffer else "") + (f"-starts{demo_starts:g}" if demo_starts else "")
    name += "-positives" if refresh else ""
    return d, name


def _same_env(what: str, recorded: "dict | None", task_spec) -> None:
    """Refuse a critic or demonstrations recorded on another env than the run's (``--spec`` makes the env:
    its ``make_kwargs``, e.g. a continuing PointMaze, and its success rule)."""
    if recorded is None:
        return  # an ONNX export or a critic without a recorded spec: the shaper checks its input layout
    mine = task_spec.to_dict()["task"]
    diff = [k for k in ("env_id", "make_kwargs", "success") if recorded.get(k) != mine.get(k)]
    if diff:
        got = ", ".join(f"{k} {recorded.get(k)!r}, expected {mine.get(k)!r}" for k in diff)
        raise ValueError(f"{what}: recorded on another env than this run's ({got}); give the --spec it was "
                         "collected with")


def run_dir(task: str, label: str, seed: int, root: Path = RESULTS) -> Path:
    return root / task / label / f"seed{seed}"


#: exit status of ``run.py`` when another process holds the run (the sweep reports it as skipped)
EXIT_HELD = 75


class RunInProgress(RuntimeError):
    """Another process holds the run's lock (it is training that run now); ``holder`` names it."""

    def __init__(self, out: Path, holder: str):
        super().__init__(f"skip (running in another process, {holder}): {out}")
        self.out, self.holder = out, holder


def _lock_run(out: Path):
    """Take the run's lock (``out/.lock``) for this process, or raise :class:`RunInProgress`.

    One process per run: a second sweep skips a run in progress elsewhere. The lock is the kernel's
    ``flock`` on the open file, so it ends with the process that holds it, however that process ends
    (a killed run is taken up again by the next sweep, never left locked); the file itself stays and
    records the last holder (``pid host``) for the message of a sweep that finds it held."""
    fd = os.open(out / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    lock = os.fdopen(fd, "r+")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = lock.read().strip()
        lock.close()
        pid, _, host = holder.partition(" ")
        raise RunInProgress(out, f"pid {pid} on {host}" if pid.isdigit() and host else "holder not recorded yet") from None
    lock.truncate(0)
    lock.write(f"{os.getpid()} {socket.gethostname()}\n")
    lock.flush()
    return lock


def run_one(task: str, config: str, seed: int, steps: int | None = None, *, scale: float = 1.0,
            prune: bool = False, algo: str = "sac", root: Path = RESULTS, progress_bar: bool = False,
            spec: "str | Path | None" = None, eval_freq: int | None = None, eval_episodes: int | None = None,
            learning_starts: int | None = None, critic: "str | Path | None" = None, head: str = "success",
            refresh: bool = False, early_stop: float = 0.8, early_stop_min_steps: int | None = None,
            random_weights_seed: int | None = None, backend: str = "sb3", anneal_steps: int | None = None,
            anneal_end: float = 0.0, demos: "str | Path | None" = None, demos_n: int | None = None,
            demos_of: "str | Path | None" = None, demos_data: "str | Path | None" = None, demo_buffer: bool = False,
            demo_starts: float = 0.0) -> Path:
    """One run; ``eval_freq``, ``eval_episodes`` and ``learning_starts`` override the task's settings
    (``None``: the task's own, as in the benchmark's results). ``early_stop`` (``0``: off) and
    ``early_stop_min_steps`` (``None``: the task's headline budget) as in the module docstring."""
    if task not in TASKS:
        raise ValueError(f"--task: expected one of {sorted(TASKS)}, got {task!r}")
    if config not in CONFIGS:
        raise ValueError(f"--config: expected one of {list(CONFIGS)}, got {config!r}")
    for name, v in (("--steps", steps), ("--eval-freq", eval_freq), ("--eval-episodes", eval_episodes),
                    ("--learning-starts", learning_starts)):
        if v is not None and (not isinstance(v, int) or v < (0 if name == "--learning-starts" else 1)):
            raise ValueError(f"{name}: expected a positive integer, got {v!r}")
    if critic is not None:
        if not config.startswith("prm"):
            raise ValueError(f"--critic: a learned potential needs a prm config (prm, prm_her), got --config {config!r}")
        suffixes = ("".join(Path(critic).suffixes[-1:]) or ".json")
        if suffixes not in (".json", ".safetensors", ".onnx"):
            raise ValueError(f"--critic: expected a critic checkpoint (.json / .safetensors) or an .onnx export, "
                             f"got {str(critic)!r}")
    if not 0.0 <= early_stop <= 1.0:
        raise ValueError(f"--early-stop: expected a success rate in [0, 1] (0: off), got {early_stop!r}")
    if early_stop_min_steps is not None and (not isinstance(early_stop_min_steps, int) or early_stop_min_steps < 0):
        raise ValueError(f"--early-stop-min-steps: expected an integer >= 0, got {early_stop_min_steps!r}")
    if random_weights_seed is not None and (critic is None or str(critic).endswith(".onnx") or refresh):
        raise ValueError("--random-weights: the control of a learned torch critic, expected --critic PATH.json "
                         f"without --refresh, got --critic {None if critic is None else str(critic)!r}"
                         f"{' --refresh' if refresh else ''}")
    if head not in ("success", "progress"):
        raise ValueError(f"--head: expected 'success' or 'progress', got {head!r}")
    if backend not in ("sb3", "sbx"):
        raise ValueError(f"--backend: expected 'sb3' (stable-baselines3, torch) or 'sbx' (SBX, JAX), got {backend!r}")
    if anneal_steps is not None:
        if config != "prm_her":
            raise ValueError(f"--anneal-steps: the PRM HER buffer rescales stored rewards, so it needs --config prm_her, "
                             f"got --config {config!r}")
        if isinstance(anneal_steps, bool) or not isinstance(anneal_steps, int) or anneal_steps < 1:
            raise ValueError(f"--anneal-steps: expected a positive integer (env steps), got {anneal_steps!r}")
        if not (anneal_end >= 0.0 and anneal_end < float("inf")):
            raise ValueError(f"--anneal-end: expected a finite scale >= 0, got {anneal_end!r}")
    elif anneal_end != 0.0:
        raise ValueError(f"--anneal-end: needs --anneal-steps, got --anneal-end {anneal_end!r} alone")
    if refresh and (critic is None or str(critic).endswith(".onnx")):
        raise ValueError(f"--refresh: fine-tunes a torch critic checkpoint, expected --critic PATH.json, got "
                         f"--critic {None if critic is None else str(critic)!r}")
    cfg = dict(TASKS[task])
    if eval_freq is not None:
        cfg["eval_freq"] = eval_freq
    if eval_episodes is not None:
        cfg["eval_episodes"] = eval_episodes
    if learning_starts is not None:
        cfg["algo_kwargs"] = {**cfg["algo_kwargs"], "learning_starts": learning_starts}
    steps = steps or cfg["steps"]
    if spec is not None:
        from prm_critic.robotics.spec import load_spec

        if not Path(spec).is_file():
            raise ValueError(f"--spec: expected a spec TOML file, got {str(spec)!r} (no such file)")
        if load_spec(spec).env_id != task:
            raise ValueError(f"--spec: {str(spec)!r} is a spec for {load_spec(spec).env_id!r}, expected one for {task!r}")
    anneal = None if anneal_steps is None else (anneal_steps, float(anneal_end))
    demo_set, demo_name = select_demos(demos, demos_n, demos_of, demos_data, demo_buffer, demo_starts, task, refresh)
    if demo_set is not None:
        from prm_critic.robotics.spec import load_spec

        _same_env("--demos", demo_set.spec.to_dict()["task"], load_spec(spec if spec is not None else task))
    label = config_label(config, scale, prune, spec, critic, head, refresh, random_weights_seed, backend, anneal,
                         demo_name)
    out = run_dir(task, label, seed, root)
    marker = out / "done.json"
    state_ptr = out / "resume" / "latest.json"

    def state_steps() -> int | None:
        return json.loads(state_ptr.read_text())["steps"] if state_ptr.exists() else None

    out.mkdir(parents=True, exist_ok=True)
    # the run's lock, released when this call ends, however it ends (a closed file drops its flock)
    with _lock_run(out):
        if marker.exists():
            done = json.loads(marker.read_text())
            if done.get("steps", 0) >= steps:  # a run with a larger budget contains this one
                print(f"skip (done, {done.get('steps')} steps): {out}")
                return out
            # finished under another budget: keep its results beside the new run, under its budget's name;
            # with a training state that is not past the new budget, the new run continues from it
            extend = (state_steps() or steps + 1) <= steps
            for name in ("eval.csv", "done.json"):
                if (out / name).exists():
                    stem, ext = name.split(".")
                    dst = out / f"{stem}.steps-{done.get('steps')}.{ext}"
                    if extend and name == "eval.csv":
                        dst.write_bytes((out / name).read_bytes())
                    else:
                        os.replace(out / name, dst)
        ev = out / "eval.csv"
        if ev.exists() and state_steps() is None:  # killed before its first training state: start again
            n = 1
            while (out / f"eval.killed-{n}.csv").exists():
                n += 1
            os.replace(ev, out / f"eval.killed-{n}.csv")

        from prm_critic.models.checkpoint import atomic_write_bytes
        from prm_critic.sb3 import train_policy

        shaped = config.startswith("prm")
        t0 = time.perf_counter()
        from prm_critic.robotics.spec import load_spec

        task_spec = load_spec(spec if spec is not None else task)
        critic_arg: Any = "subgoal" if (shaped or prune) else None
        callbacks = []
        if critic is not None:
            from prm_critic.sb3.envs import resolve_critic

            critic_arg = resolve_critic(str(critic), task_spec)  # checked against the task by the shaper
            _same_env(f"--critic {str(critic)!r}", getattr(critic_arg, "meta", {}).get("spec", {}).get("task"), task_spec)
            if random_weights_seed is not None:
                critic_arg = random_weights(critic_arg, random_weights_seed)
            if refresh:
                from prm_critic.sb3.refresh import CriticRefreshCallback

                # a success classifier (success_contrast) refreshes DrS-style: 50/50 batches, and the run's
                # demonstrations (if any) seed the success side
                contrast = getattr(critic_arg, "meta", {}).get("label_family") == "success_contrast"
                callbacks.append(CriticRefreshCallback(
                    critic_arg, head=head, refresh_freq=cfg["eval_freq"], seed=seed, save_path=out / "critic_refreshed",
                    positives=None if demo_set is None else np.concatenate([demo_set.x, demo_set.next_x]),
                    balanced=contrast))
        model = train_policy(
            task_spec, algo=algo, critic=critic_arg, shaping="potential" if shaped else None, head=head if critic else "progress",
            scale=scale, her=config.endswith("her"), prune=cfg["prune"] if prune else None, total_steps=steps,
            seed=seed, eval_freq=cfg["eval_freq"], eval_episodes=cfg["eval_episodes"], log_dir=out,
            algo_kwargs=cfg["algo_kwargs"], normalize_obs=cfg["normalize_obs"], progress_bar=progress_bar,
            checkpoint_freq=cfg["eval_freq"], resume=True, callbacks=callbacks, torch_threads=1, backend=backend,
            early_stop=None if early_stop == 0 else dict(
                threshold=early_stop, consecutive=2,
                min_steps=TASKS[task]["steps"] if early_stop_min_steps is None else early_stop_min_steps),
            scale_schedule=None if anneal is None else dict(end=anneal[1], steps=anneal[0]),
            demos=demo_set if (demo_buffer or demo_starts) else None, demo_buffer=demo_buffer,
            demo_starts=demo_starts,
        )
        wall = time.perf_counter() - t0
        rows = model.prm_eval.rows
        stats = model.prm_stats
        summary = {
            "task": task, "config": config, "label": label, "seed": seed, "steps": steps, "algo": algo,
            "backend": backend,
            "scale": scale if shaped else None, "scale_schedule": model.prm_config.get("scale_schedule"),
            "prune": cfg["prune"] if prune else None,
            "spec": str(spec) if spec is not None else "built-in", "subgoals": task_spec.to_dict()["subgoals"],
            "critic": str(critic) if critic is not None else None, "head": head if critic is not None else "progress",
            "critic_sha256": model.prm_config.get("critic_sha256"), "random_weights": random_weights_seed,
            "refresh": [dict(r) for r in callbacks[0].history] if refresh else None,
            "algo_kwargs": json.loads(json.dumps(cfg["algo_kwargs"])), "normalize_obs": cfg["normalize_obs"],
            "wall_s": round(rows[-1]["train_wall_s"] + rows[-1]["eval_wall_s"], 1) if rows else round(wall, 1),
            "resumed_from": model.prm_resumed_from,
            "early_stop": model.prm_config.get("early_stop"), "stopped_early_at": model.prm_config.get("stopped_early_at"),
            "final_success": rows[-1]["success_rate"] if rows else None,
            "demos": None if demo_set is None else {**demo_set.record(), "buffer": demo_buffer, "starts": demo_starts,
                                                     "refresh_positives": refresh},
            "episodes": stats.n_episodes, "pruned_episodes": stats.pruned_episodes,
            "pruned_env_steps": int(sum(h["l"] for h in stats.history if h["pruned"])),
            "train_success_last100": (sum(h["success"] for h in stats.history[-100:]) / max(1, len(stats.history[-100:]))),
        }
        if prune:  # the DeadEndPruner's own counters (first "stats" attribute down the env chain)
            summary["pruner_stats"] = model.get_env().get_attr("stats")[0]
        atomic_write_bytes(marker, json.dumps(summary, indent=2).encode())
        print(json.dumps(summary))
        return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", required=True, choices=sorted(TASKS))
    p.add_argument("--config", required=True, choices=CONFIGS)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--steps", type=int, default=None, help="env-step budget (default: per task)")
    p.add_argument("--scale", type=float, default=1.0, help="shaping scale (prm configs)")
    p.add_argument("--prune", action="store_true", help="add the DeadEndPruner")
    p.add_argument("--algo", default="sac", choices=["sac", "tqc"])
    p.add_argument("--root", type=Path, default=RESULTS)
    p.add_argument("--progress", action="store_true", help="show a tqdm progress bar")
    p.add_argument("--spec", type=Path, default=None, help="spec TOML to use instead of the built-in one")
    p.add_argument("--eval-freq", type=int, default=None, help="evaluate every N env steps (default: per task)")
    p.add_argument("--eval-episodes", type=int, default=None, help="episodes per evaluation (default: per task)")
    p.add_argument("--learning-starts", type=int, default=None, help="random steps before training (default: per task)")
    p.add_argument("--critic", type=Path, default=None,
                   help="trained critic checkpoint (.json/.safetensors) or .onnx export as the potential (prm configs)")
    p.add_argument("--head", default="success", choices=["success", "progress"],
                   help="--critic: the head used as the potential (default success)")
    p.add_argument("--refresh", action="store_true",
                   help="--critic: fine-tune it on the policy's own episodes every evaluation period")
    p.add_argument("--random-weights", type=int, default=None, metavar="SEED",
                   help="--critic: the uninformed control, the critic's weights drawn anew under SEED "
                        "(normalisation, head, scale and gamma kept)")
    p.add_argument("--backend", default="sb3", choices=["sb3", "sbx"],
                   help="sb3 (stable-baselines3, torch; the benchmark's rows) or sbx (SBX, JAX; label suffix _sbx)")
    p.add_argument("--early-stop", type=float, default=0.8,
                   help="stop after two consecutive evaluations at or above this success (0: off; default 0.8)")
    p.add_argument("--early-stop-min-steps", type=int, default=None,
                   help="--early-stop: not before this step (default: the task's headline budget)")
    p.add_argument("--anneal-steps", type=int, default=None, metavar="N",
                   help="prm_her: move the shaping scale linearly from --scale to --anneal-end over N env steps "
                        "(label suffix _anneal<N>)")
    p.add_argument("--anneal-end", type=float, default=0.0, help="--anneal-steps: the final scale (default 0)")
    p.add_argument("--demos", type=Path, default=None, metavar="FOLDER",
                   help="demonstrations: the successful episodes of a collect folder (first --demos-n)")
    p.add_argument("--demos-n", type=int, default=None, metavar="N", help="--demos: the first N successful episodes")
    p.add_argument("--demos-of", type=Path, default=None, metavar="CRITIC",
                   help="demonstrations: exactly those a critic checkpoint (.json) records (hash-checked)")
    p.add_argument("--demos-data", type=Path, default=None, metavar="FOLDER",
                   help="--demos-of: the folder holding them (default critic_data/<recorded folder name>)")
    p.add_argument("--demo-buffer", action="store_true", help="put the demonstrations into the replay buffer")
    p.add_argument("--demo-starts", type=float, default=0.0, metavar="P",
                   help="start training episodes from demonstration states with probability P")
    a = p.parse_args(argv)
    try:
        run_one(a.task, a.config, a.seed, a.steps, scale=a.scale, prune=a.prune, algo=a.algo, root=a.root,
                progress_bar=a.progress, spec=a.spec, eval_freq=a.eval_freq, eval_episodes=a.eval_episodes,
                learning_starts=a.learning_starts, critic=a.critic, head=a.head, refresh=a.refresh,
                early_stop=a.early_stop, early_stop_min_steps=a.early_stop_min_steps,
                random_weights_seed=a.random_weights, backend=a.backend, anneal_steps=a.anneal_steps,
                anneal_end=a.anneal_end, demos=a.demos, demos_n=a.demos_n, demos_of=a.demos_of,
                demos_data=a.demos_data, demo_buffer=a.demo_buffer, demo_starts=a.demo_starts)
    except RunInProgress as exc:
        print(exc, flush=True)
        return EXIT_HELD
    return 0


if __name__ == "__main__":
    sys.exit(main())
