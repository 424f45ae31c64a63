"""Run the RL benchmark plan one run at a time (one CPU core), skipping finished runs.

    OMP_NUM_THREADS=1 python benchmarks/rl/sweep.py --plan core
    OMP_NUM_THREADS=1 python benchmarks/rl/sweep.py --plan more
    # two cores: two sweeps share the plan (a run in progress elsewhere is skipped)
    OMP_NUM_THREADS=1 python benchmarks/rl/sweep.py --plan push medium lever seeds &
    OMP_NUM_THREADS=1 python benchmarks/rl/sweep.py --plan medium push lever seeds &
    python benchmarks/rl/report.py

Each run is a subprocess (``run.py``): a crash or kill affects that run only; rerunning the sweep
skips runs with a ``done.json`` marker and restarts unfinished ones.

On Ray (``pip install "prm-critic[ray]"``), each run is one task on a worker (one CPU each); a run is
seeded by its own seed, so it gives the same result wherever it runs. Run folders are written by
``run.py`` on the worker's machine: use one machine, or nodes sharing this repository's folder::

    OMP_NUM_THREADS=1 python benchmarks/rl/sweep.py --plan core more --executor ray --workers 2
"""

from __future__ import annotations

import argparse
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


def _run_cmd(ctx, cmd: list[str]) -> tuple[int, float]:
    """Executor task: one run as a subprocess (one CPU thread); its exit code and seconds."""
    import os

    t = time.time()
    print(" ".join(cmd[1:]), flush=True)
    rc = subprocess.call(cmd, env={"OMP_NUM_THREADS": "1", **os.environ})
    return rc, time.time() - t


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--plan", nargs="+", default=["core"], choices=sorted(PLANS))
    p.add_argument("--algo", default="sac", choices=["sac", "tqc"])
    p.add_argument("--executor", choices=["local", "ray"], default="local",
                   help="local: one run after the other here; ray: runs in parallel on Ray workers")
    p.add_argument("--workers", type=int, default=None, help="ray: worker processes (default: one per CPU)")
    p.add_argument("--address", default=None, help="ray: address of an existing cluster")
    a = p.parse_args(argv)
    cmds = []
    for plan in a.plan:
        for task, config, seeds, scale, prune, *extra in PLANS[plan]:
            spec = [e for e in extra if isinstance(e, str)]
            steps = [e for e in extra if isinstance(e, int)]
            for seed in seeds:
                cmd = [sys.executable, str(HERE / "run.py"), "--task", task, "--config", config, "--seed", str(seed),
                       "--scale", str(scale), "--algo", a.algo] + (["--prune"] if prune else [])
                cmd += ["--spec", str(HERE / spec[0])] if spec else []
                cmd += ["--steps", str(steps[0])] if steps else []
                cmds.append(cmd)
    from prm_critic.executor import Task, make_executor

    ex = make_executor(a.executor, workers=a.workers, address=a.address)
    tasks = [Task(key=" ".join(cmd[1:]), desc=" ".join(cmd[1:]), payload=cmd) for cmd in cmds]
    with ex.start(dict) as pool:
        for i, (run, (rc, secs)) in enumerate(pool.map(_run_cmd, tasks)):
            print(f"  [{i + 1}/{len(tasks)}] rc={rc} in {secs:.0f}s: {run}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
