"""Run the RL benchmark plan one run at a time (one CPU core), skipping finished runs.

    OMP_NUM_THREADS=1 python -m benchmarks.rl.sweep --plan core
    OMP_NUM_THREADS=1 python -m benchmarks.rl.sweep --plan more
    # two cores: two sweeps share the plan (a run in progress in the other sweep is skipped)
    OMP_NUM_THREADS=1 python -m benchmarks.rl.sweep --plan push medium lever seeds &
    OMP_NUM_THREADS=1 python -m benchmarks.rl.sweep --plan medium push lever seeds &
    python -m benchmarks.rl.report

Each run is a subprocess (``run.py``): a crash or kill affects that run only; rerunning the sweep
skips runs with a ``done.json`` marker and restarts unfinished ones.

On Ray (``pip install "prm-critic[ray]"``), each run is one task on a worker (one CPU each); a run is
seeded by its own seed, so it gives the same result wherever it runs. Run folders are written by
``run.py`` on the worker's machine: use one machine, or nodes sharing this repository's folder::

    OMP_NUM_THREADS=1 python -m benchmarks.rl.sweep --plan core more --executor ray --workers 2

``--plan-file PLAN.json`` runs a plan of one's own instead: a JSON list of runs
``[task, config, [seeds], scale, prune]`` (optionally followed by a spec TOML path, relative to the
plan file, and an env-step budget). ``--root``, ``--steps``, ``--eval-freq``, ``--eval-episodes`` and
``--learning-starts`` are passed to every run (default: each task's settings, as in the results;
``--steps`` applies to runs without a budget of their own).

Several sweeps may run at once on one plan (and one ``--root``), here or on Ray: each run is trained by
one of them only. A sweep skips a run that another process holds (``run.py``'s per-run lock) and names
those runs at the end (``sweep: N of M runs skipped, running in another process``); they do not change
its exit status. A run started by a sweep ends when that sweep dies (Linux), so a killed sweep leaves no
run holding its lock; the next sweep resumes it.

A run that fails (any other non-zero exit) does not stop the others; the sweep then exits with status 1 and
names every failed run as ``task config seed`` (the config's label, e.g. ``prm_her_s10``).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

# (task, config, seeds, scale, prune[, spec TOML (str)][, env-step budget (int)]), run in this order: the most informative runs first, so that
# a sweep cut short by the time budget still has every config of a task at seed 0.
FR, UM = "FetchReach-v4", "PointMaze_UMaze-v3"
PLANS = {
    "core": [
        (FR, "her", (0,), 1.0, False), (FR, "prm_her", (0,), 10.0, False),
        (FR, "sparse", (0,), 1.0, False), (FR, "prm", (0,), 10.0, False),
        (UM, "her", (0,), 1.0, False), (UM, "prm_her", (0,), 10.0, False),
        (FR, "her", (1,), 1.0, False), (FR, "prm_her", (1,), 10.0, False),
        (FR, "prm_her", (0,), 10.0, True),     # dead-end pruning
        (FR, "prm_her", (0,), 1.0, False),     # second shaping scale
        (UM, "sparse", (0,), 1.0, False), (UM, "prm", (0,), 10.0, False),
        (FR, "sparse", (1,), 1.0, False), (FR, "prm", (1,), 10.0, False),
    ],
    "more": [
        (UM, "prm_her", (0,), 10.0, True),
        (FR, "prm", (0,), 1.0, False), (FR, "prm_her", (1,), 1.0, False),
        (FR, "her", (2,), 1.0, False), (FR, "prm_her", (2,), 10.0, False),
        (FR, "sparse", (2,), 1.0, False), (FR, "prm", (2,), 10.0, False),
        (UM, "her", (1,), 1.0, False), (UM, "prm_her", (1,), 10.0, False),
        (UM, "sparse", (1,), 1.0, False), (UM, "prm", (1,), 10.0, False),
    ],
    # PointMaze_Medium-v3, 100k steps, seed 0 (a 40k-step run is kept beside as eval.steps-40000.csv)
    "medium": [
        ("PointMaze_Medium-v3", "her", (0,), 1.0, False), ("PointMaze_Medium-v3", "prm_her", (0,), 10.0, False),
        ("PointMaze_Medium-v3", "prm", (0,), 10.0, False), ("PointMaze_Medium-v3", "sparse", (0,), 1.0, False),
    ],
    # FetchPush-v4, 100k steps, seed 0 (HER alone needs ~180k+ for 80% in the zoo's TQC logs)
    "push": [
        ("FetchPush-v4", "her", (0,), 1.0, False), ("FetchPush-v4", "prm_her", (0,), 10.0, False),
        ("FetchPush-v4", "prm", (0,), 10.0, False), ("FetchPush-v4", "sparse", (0,), 1.0, False),
    ],
    # FetchPush's shaped runs under its former "near the object" spec
    "push_near_object": [
        ("FetchPush-v4", "prm_her", (0,), 10.0, False, "specs/near_object.toml"),
        ("FetchPush-v4", "prm", (0,), 10.0, False, "specs/near_object.toml"),
    ],
    # the potential-scale lever (vs SAC's entropy bonus): scale 30 besides scale 10
    "lever": [
        ("PointMaze_Medium-v3", "prm_her", (0,), 30.0, False), ("PointMaze_Medium-v3", "prm", (0,), 30.0, False),
    ],
    "lever_push": [("FetchPush-v4", "prm_her", (0,), 30.0, False)],
    # second seeds of Medium and Push, the goal-deciding configs (her, prm_her) first
    "seeds": [
        ("PointMaze_Medium-v3", "her", (1,), 1.0, False), ("PointMaze_Medium-v3", "prm_her", (1,), 10.0, False),
        ("FetchPush-v4", "her", (1,), 1.0, False), ("FetchPush-v4", "prm_her", (1,), 10.0, False),
        ("PointMaze_Medium-v3", "prm", (1,), 10.0, False), ("PointMaze_Medium-v3", "sparse", (1,), 1.0, False),
        ("FetchPush-v4", "prm", (1,), 10.0, False), ("FetchPush-v4", "sparse", (1,), 1.0, False),
    ],
    # second seeds of the goal-deciding configs, with budgets that can decide the goals
    # (HER on FetchPush to 200k as seed 0; Medium to where HER may reach 80%, PRM+HER to 2/3 of it)
    "decide": [
        ("FetchPush-v4", "her", (1,), 1.0, False, 200_000),
        ("FetchPush-v4", "prm_her", (1,), 10.0, False, 150_000),
        ("PointMaze_Medium-v3", "her", (1,), 1.0, False, 300_000),
        ("PointMaze_Medium-v3", "prm_her", (1,), 10.0, False, 200_000),
        ("FetchPush-v4", "prm_her", (0,), 10.0, False, 150_000),  # extends seed 0 (100k) to seed 1's budget
    ],
    # more seeds at the task budgets (HER on FetchPush to 200k as seed 0), FetchPush's
    # goal-deciding configs to three seeds first
    "seeds5": [
        ("FetchPush-v4", "her", (1,), 1.0, False, 200_000), ("FetchPush-v4", "prm_her", (1, 2), 10.0, False),
        ("FetchPush-v4", "her", (2,), 1.0, False, 200_000),
        ("PointMaze_Medium-v3", "her", (1,), 1.0, False), ("PointMaze_Medium-v3", "prm_her", (1,), 10.0, False),
        ("PointMaze_Medium-v3", "her", (2,), 1.0, False), ("PointMaze_Medium-v3", "prm_her", (2,), 10.0, False),
        ("PointMaze_Medium-v3", "prm", (1,), 10.0, False), ("FetchPush-v4", "prm", (1,), 10.0, False),
        (UM, "her", (1, 2), 1.0, False), (UM, "prm_her", (1, 2), 10.0, False),
        (UM, "prm", (1, 2), 10.0, False), (UM, "sparse", (1, 2), 1.0, False),
    ],
}


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Linux: the run gets SIGTERM when the process that started it (this sweep, or its Ray worker)
    dies, even by SIGKILL, so a killed sweep leaves no run training on, holding its lock."""
    import ctypes
    import signal

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _run_cmd(ctx, cmd: list[str]) -> tuple[int, float]:
    """Executor task: one run as a subprocess (one CPU thread); its exit code and seconds."""
    import os

    t = time.time()
    print(" ".join(cmd[1:]), flush=True)
    rc = subprocess.call(cmd, env={"OMP_NUM_THREADS": "1", **os.environ},
                         preexec_fn=_die_with_parent if sys.platform == "linux" else None)
    return rc, time.time() - t


def load_plan_file(path: Path) -> list[tuple]:
    """A plan from a JSON file (see the module docstring), checked entry by entry."""
    from benchmarks.rl.run import CONFIGS, TASKS

    try:
        runs = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise SystemExit(f"--plan-file: cannot read {str(path)!r} as JSON ({exc})") from None
    if not isinstance(runs, list) or not runs:
        raise SystemExit(f"--plan-file: {str(path)!r}: expected a non-empty JSON list of runs, got {runs!r}")
    plan = []
    for i, r in enumerate(runs):
        where = f"--plan-file: {str(path)!r}, run {i}"
        if not (isinstance(r, list) and 5 <= len(r) <= 7):
            raise SystemExit(f"{where}: expected [task, config, [seeds], scale, prune(, spec)(, steps)], got {r!r}")
        task, config, seeds, scale, prune, *extra = r
        if task not in TASKS:
            raise SystemExit(f"{where}: task: expected one of {sorted(TASKS)}, got {task!r}")
        if config not in CONFIGS:
            raise SystemExit(f"{where}: config: expected one of {list(CONFIGS)}, got {config!r}")
        if not (isinstance(seeds, list) and seeds and all(isinstance(x, int) and x >= 0 for x in seeds)):
            raise SystemExit(f"{where}: seeds: expected a non-empty list of integers >= 0, got {seeds!r}")
        if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not isinstance(prune, bool):
            raise SystemExit(f"{where}: expected a number scale and a true/false prune, got {scale!r}, {prune!r}")
        if not all(isinstance(e, str) or (isinstance(e, int) and not isinstance(e, bool) and e > 0) for e in extra):
            raise SystemExit(f"{where}: expected a spec path (string) and/or a step budget (integer > 0), got {extra!r}")
        extra = [str((Path(path).parent / e).resolve()) if isinstance(e, str) else e for e in extra]
        plan.append((task, config, tuple(seeds), float(scale), prune, *extra))
    return plan


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--plan", nargs="+", default=["core"], choices=sorted(PLANS))
    p.add_argument("--algo", default="sac", choices=["sac", "tqc"])
    p.add_argument("--executor", choices=["local", "ray"], default="local",
                   help="local: one run after the other here; ray: runs in parallel on Ray workers")
    p.add_argument("--workers", type=int, default=None, help="ray: worker processes (default: one per CPU)")
    p.add_argument("--address", default=None, help="ray: address of an existing cluster")
    p.add_argument("--plan-file", type=Path, default=None, help="JSON plan to run instead of --plan")
    p.add_argument("--root", type=Path, default=None, help="folder of the run folders (default: results/runs)")
    for name, what in (("steps", "env-step budget"), ("eval-freq", "evaluate every N env steps"),
                       ("eval-episodes", "episodes per evaluation"), ("learning-starts", "random steps before training")):
        p.add_argument(f"--{name}", type=int, default=None, help=f"{what} of every run (default: per task)")
    a = p.parse_args(argv)
    runs = load_plan_file(a.plan_file) if a.plan_file is not None else [r for plan in a.plan for r in PLANS[plan]]
    common = ["--root", str(a.root)] if a.root is not None else []
    for name in ("eval_freq", "eval_episodes", "learning_starts"):
        if getattr(a, name) is not None:
            common += ["--" + name.replace("_", "-"), str(getattr(a, name))]
    from benchmarks.rl.run import EXIT_HELD, config_label

    cmds, names = [], []
    for task, config, seeds, scale, prune, *extra in runs:
        spec = [e for e in extra if isinstance(e, str)]
        steps = [e for e in extra if isinstance(e, int)]
        for seed in seeds:
            cmd = [sys.executable, str(HERE / "run.py"), "--task", task, "--config", config, "--seed", str(seed),
                   "--scale", str(scale), "--algo", a.algo] + (["--prune"] if prune else [])
            cmd += ["--spec", str(HERE / spec[0])] if spec else []
            cmd += ["--steps", str(steps[0])] if steps else (["--steps", str(a.steps)] if a.steps else [])
            cmds.append(cmd + common)
            names.append(f"{task} {config_label(config, scale, prune, spec[0] if spec else None)} {seed}")
    from prm_critic.parallel import Task, make_executor

    ex = make_executor(a.executor, workers=a.workers, address=a.address)
    tasks = [Task(key=name, desc=f"run {name} ({' '.join(cmd[1:])})", payload=cmd) for name, cmd in zip(names, cmds)]
    failed, held = [], []
    with ex.start(dict) as pool:
        for i, (run, (rc, secs)) in enumerate(pool.map(_run_cmd, tasks)):
            print(f"  [{i + 1}/{len(tasks)}] rc={rc} in {secs:.0f}s: {run}", flush=True)
            if rc == EXIT_HELD:
                held.append(run)
            elif rc != 0:
                failed.append(f"{run} (exit status {rc})")
    if held:
        print(f"sweep: {len(held)} of {len(tasks)} runs skipped, running in another process (task config seed): "
              + "; ".join(held), flush=True)
    if failed:
        print(f"sweep: {len(failed)} of {len(tasks)} runs failed (task config seed): " + "; ".join(failed),
              file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
