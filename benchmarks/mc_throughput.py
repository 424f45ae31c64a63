"""Raw env steps/s vs Monte-Carlo labelling rollout steps/s, side by side, in one run.

raw: ``env.step`` with a fixed stream of uniformly random actions (resets when an episode ends).
mc:  :class:`prm_critic.robotics.labels.MCLabeler` labelling stored states: per continuation one
     snapshot restore + the scripted rollout controller + ``env.step`` until the episode ends; the
     rate counts rollout env steps over the whole labelling time (restores and controller included).
Both single process, same env construction (``make_env``), interleaved in rounds so that load from
other processes on the machine hits both alike; the ratio is mc / raw (goal >= 0.8).

Usage:
    python benchmarks/mc_throughput.py [--seconds 8] [--out docs/mc_throughput.md]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from prm_critic.robotics.collect import collect, load_shard
from prm_critic.robotics.labels import MCLabeler
from prm_critic.robotics.make import make_env

TASKS = ["PointMaze_UMaze-v3", "FetchPush-v4"]


def raw_rate(env, actions, seconds):
    env.reset(seed=0)
    n, i, t0 = 0, 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        _, _, term, trunc, _ = env.step(actions[i % len(actions)])
        n += 1
        i += 1
        if term or trunc:
            env.reset()
    return n / (time.perf_counter() - t0)


def mc_rate(labeler, states, seconds):
    start_steps, t0, j = labeler.steps, time.perf_counter(), 0
    while time.perf_counter() - t0 < seconds:
        s = states[j % len(states)]
        labeler.label_state(s["sim"], s["py"], s["x"], s["episode"], s["t"] + 1000 * (j // len(states)))
        j += 1
    return (labeler.steps - start_steps) / (time.perf_counter() - t0)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=8.0, help="measured seconds per task and method")
    ap.add_argument("--rounds", type=int, default=2, help="interleaved raw/mc rounds per task")
    ap.add_argument("--out", default="docs/mc_throughput.md", help="markdown table output")
    args = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for task in TASKS:
            d = Path(tmp) / task
            collect(task, d, episodes=4, shard_size=4, seed=0, progress=False)
            meta = json.loads((d / "meta.json").read_text())
            sh = load_shard(d / "shards" / "shard_00000.npz")
            states = [{"sim": sh["sim"][i], "py": str(sh["py"][i]), "x": sh["x"][i], "episode": int(sh["episode"][i]),
                       "t": int(sh["t"][i])} for i in range(0, len(sh["t"]), 5)]
            env = make_env(task)
            actions = np.random.default_rng(0).uniform(env.action_space.low, env.action_space.high,
                                                       (10_000,) + env.action_space.shape).astype(np.float32)
            labeler = MCLabeler(meta, k=4, seed=0)
            raw, mc = [], []
            for _ in range(args.rounds):
                raw.append(raw_rate(env, actions, args.seconds / args.rounds))
                mc.append(mc_rate(labeler, states, args.seconds / args.rounds))
            r, m = float(np.mean(raw)), float(np.mean(mc))
            rows.append((task, r, m, m / r))
            print(f"{task}: raw {r:,.0f} steps/s, mc {m:,.0f} steps/s, ratio {m / r:.2f}", flush=True)
            env.close()
            labeler.close()
    cmd = "python benchmarks/mc_throughput.py" + ("" if argv is None and len(sys.argv) == 1 else " " + " ".join(sys.argv[1:]))
    lines = [
        "# Monte-Carlo labelling throughput",
        "",
        "Raw `env.step` (fixed random action stream) vs MC-labelling rollouts (snapshot restore + scripted",
        "rollout controller + `env.step`), single process, interleaved rounds. Ratio = mc / raw (goal >= 0.8).",
        "",
        "| task | raw env steps/s | MC rollout steps/s | ratio |",
        "|---|---:|---:|---:|",
    ]
    lines += [f"| {t} | {r:,.0f} | {m:,.0f} | {q:.2f} |" for t, r, m, q in rows]
    lines += [
        "",
        f"Reproduce: `{cmd}` ({args.seconds:g} s per task and method).",
        f"Measured on: {platform.processor() or platform.machine()}, Python {platform.python_version()}, "
        "2 shared CPU cores (other jobs running); absolute rates vary with load, the ratio is the figure.",
        "",
    ]
    table = "\n".join(lines)
    print(table)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
