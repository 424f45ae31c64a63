"""Run the RL benchmark plan one run at a time (one CPU core), skipping finished runs.

    OMP_NUM_THREADS=1 python benchmarks/rl/sweep.py --plan baselines
    OMP_NUM_THREADS=1 python benchmarks/rl/sweep.py --plan prm
    python benchmarks/rl/report.py

Each run is a subprocess (``run.py``): a crash or kill affects that run only; rerunning the sweep
skips runs with a ``done.json`` marker and restarts unfinished ones.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

# (task, config, seeds, scale, prune)
PLANS = {
    "baselines": [
        ("FetchReach-v4", "her", (0, 1, 2), 1.0, False),
        ("FetchReach-v4", "sparse", (0, 1, 2), 1.0, False),
        ("PointMaze_UMaze-v3", "her", (0, 1), 1.0, False),
        ("PointMaze_UMaze-v3", "sparse", (0, 1), 1.0, False),
    ],
    "prm": [
        ("FetchReach-v4", "prm_her", (0, 1, 2), 10.0, False),
        ("FetchReach-v4", "prm", (0, 1, 2), 10.0, False),
        ("PointMaze_UMaze-v3", "prm_her", (0, 1), 10.0, False),
        ("PointMaze_UMaze-v3", "prm", (0, 1), 10.0, False),
    ],
    "scales": [
        ("FetchReach-v4", "prm_her", (0, 1, 2), 1.0, False),
        ("FetchReach-v4", "prm", (0, 1, 2), 1.0, False),
        ("PointMaze_UMaze-v3", "prm", (0,), 1.0, False),
    ],
    "prune": [
        ("PointMaze_UMaze-v3", "prm_her", (0,), 10.0, True),
        ("FetchReach-v4", "prm_her", (0,), 10.0, True),
    ],
    # Not run in the first session (needs ~200k+ steps per run): FetchPush-v4 with TQC.
    "push": [
        ("FetchPush-v4", "her", (0, 1), 1.0, False),
        ("FetchPush-v4", "prm_her", (0, 1), 10.0, False),
    ],
}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--plan", nargs="+", default=["baselines"], choices=sorted(PLANS))
    p.add_argument("--algo", default="sac", choices=["sac", "tqc"])
    a = p.parse_args(argv)
    for plan in a.plan:
        for task, config, seeds, scale, prune in PLANS[plan]:
            for seed in seeds:
                cmd = [sys.executable, str(HERE / "run.py"), "--task", task, "--config", config, "--seed", str(seed),
                       "--scale", str(scale), "--algo", a.algo] + (["--prune"] if prune else [])
                t = time.time()
                print(" ".join(cmd[1:]), flush=True)
                rc = subprocess.call(cmd)
                print(f"  rc={rc} in {time.time() - t:.0f}s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
