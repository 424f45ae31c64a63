"""Raw env steps/s vs Monte-Carlo labelling rollout steps/s, side by side, in one run.

raw: ``env.step`` with a fixed stream of uniformly random actions (resets when an episode ends).
mc:  :class:`prm_critic.robotics.labels.MCLabeler` labelling stored states: per continuation one
     snapshot restore + the scripted rollout controller + ``env.step`` until the episode ends; the
     rate counts rollout env steps over the whole labelling time (restores and controller included).
Both single process, same env construction (``make_env``), interleaved in rounds so that load from
other processes on the machine hits both alike; the ratio is mc / raw (goal >= 0.8).

executors (``--executors``, needs ``prm-critic[ray]``): the same MC labelling of a fixed set of
stored states as executor tasks (one task per state, :func:`prm_critic.robotics.labels.state_tasks`)
on the local executor and on Ray with 1 and 2 workers (a local Ray instance with 2 CPUs); the rate
counts rollout env steps over the wall time of the whole map (worker start-up, measured apart,
excluded). Speed-up = Ray / local (goal >= 1.8 with 2 workers); per core = rate / (workers * raw)
(goal >= 0.8). Methods are interleaved in rounds.

The measured rates go to ``benchmarks/results/mc_throughput.json`` (``--raw``) and
``docs/mc_throughput.md`` is rendered from that file alone (``--render`` rewrites it without measuring).

Usage:
    python benchmarks/mc_throughput.py [--seconds 8] [--out docs/mc_throughput.md]
    python benchmarks/mc_throughput.py --render
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RAW = ROOT / "benchmarks" / "results" / "mc_throughput.json"
DOC = ROOT / "docs" / "mc_throughput.md"
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


def _counted(labeler, payload):
    """Executor task: the MC label of one state and the rollout env steps it took."""
    from prm_critic.robotics.labels import label_state_task

    s0 = labeler.steps
    v = label_state_task(labeler, payload)
    return v, labeler.steps - s0


def executor_rates(meta, d, n_states, rounds, ray_workers=(1, 2)):
    """{method: [steps/s per round]}, Ray start-up seconds and Ray tasks per worker call, for the same
    tasks on each executor."""
    from prm_critic.executor import LocalExecutor, RayExecutor
    from prm_critic.robotics.collect import load_shard
    from prm_critic.robotics.labels import label_params, mc_setup, state_tasks

    f = d / "shards" / "shard_00000.npz"
    sh = load_shard(f)
    rows = np.arange(0, len(sh["t"]), 5)
    # spread over the episodes: round-robin by episode
    by_ep = [rows[sh["episode"][rows] == e] for e in np.unique(sh["episode"][rows])]
    pick = [r for group in zip(*[np.resize(g, max(map(len, by_ep))) for g in by_ep]) for r in group]
    pick = np.unique(np.asarray(pick[:n_states]))
    tasks = state_tasks(f, sh, pick)
    params = label_params("mc", k=4, seed=0)
    rates: dict[str, list[float]] = {"local": []}
    rates.update({f"ray{w}": [] for w in ray_workers})
    startup: dict[str, list[float]] = {f"ray{w}": [] for w in ray_workers}
    per_call: dict[str, list[float]] = {f"ray{w}": [] for w in ray_workers}
    for _ in range(rounds):
        for name in rates:
            ex = LocalExecutor() if name == "local" else RayExecutor(int(name[3:]))
            t0 = time.perf_counter()
            with ex.start(mc_setup(meta, params, remote=ex.remote)) as pool:
                if name in startup:
                    startup[name].append(time.perf_counter() - t0)
                t1 = time.perf_counter()
                steps = sum(n for _, (_, n) in pool.map(_counted, tasks))
                rates[name].append(steps / (time.perf_counter() - t1))
                if name in per_call:  # how the Ray pool grouped the tasks into worker calls
                    per_call[name].append(pool.tasks / max(pool.calls, 1))
    return rates, startup, per_call, len(tasks)


def render(raw: dict) -> str:
    """The markdown of ``docs/mc_throughput.md`` from the raw-data file's content."""
    lines = [
        "# Monte-Carlo labelling throughput",
        "",
        f"Generated by `python benchmarks/mc_throughput.py --render` from `{RAW.relative_to(ROOT).as_posix()}`, "
        "the raw data the command below measured.",
        "",
        "Raw `env.step` (fixed random action stream) vs MC-labelling rollouts (snapshot restore + scripted",
        "rollout controller + `env.step`), single process, interleaved rounds. Ratio = mc / raw (goal >= 0.8).",
        "",
        "| task | raw env steps/s | MC rollout steps/s | ratio |",
        "|---|---:|---:|---:|",
    ]
    lines += [f"| {r['task']} | {r['raw']:,.0f} | {r['mc']:,.0f} | {r['mc'] / r['raw']:.2f} |" for r in raw["rows"]]
    if raw.get("executor_rows"):
        lines += [
            "",
            "## Local vs Ray executor",
            "",
            f"The same MC labelling (k = 4, {raw['executor_states']} stored states, one task per state) on the "
            "local executor and on Ray workers",
            "(a local Ray instance, `num_cpus=2`); rollout steps over the wall time of the whole map, worker start-up "
            "excluded (shown apart).",
            "Speed-up = Ray / local (goal >= 1.8 with 2 workers); per core = rate / (workers x raw env steps/s) "
            "(goal >= 0.8). Tasks per call: how many tasks the Ray pool sent in one worker call (short tasks go in "
            "groups sized from the mean task time, `RayExecutor(call_s=...)`).",
            "",
            "| task | executor | workers | MC rollout steps/s | speed-up vs local | per core vs raw | start-up s "
            "| tasks per call |",
            "|---|---|---:|---:|---:|---:|---:|---:|",
        ]
        raw_of = {r["task"]: r["raw"] for r in raw["rows"]}
        for r in raw["executor_rows"]:
            local = next(x["rate"] for x in raw["executor_rows"] if x["task"] == r["task"] and x["executor"] == "local")
            su = "" if r["startup"] is None else f"{r['startup']:.1f}"
            lines.append(f"| {r['task']} | {r['executor']} | {r['workers']} | {r['rate']:,.0f} | {r['rate'] / local:.2f} | "
                         f"{r['rate'] / (r['workers'] * raw_of[r['task']]):.2f} | {su} | "
                         f"{r.get('tasks_per_call', 1.0):.1f} |")
    lines += [
        "",
        f"Reproduce: `{raw['command']}` ({raw['seconds']:g} s per task and method).",
        f"Measured on: {raw['machine']}; absolute rates vary with load, the ratio is the figure.",
        *([f"Load: {raw['load']}. A speed-up needs idle cores: with a load average above the core count, "
           "2 workers get less than 2 cores."] if raw.get("load") else []),
        "",
    ]
    return "\n".join(lines)


def render_file(raw_path: Path = RAW, md_path: Path = DOC) -> Path:
    from prm_critic._io import atomic_write_bytes

    atomic_write_bytes(md_path, render(json.loads(Path(raw_path).read_text())).encode())
    return Path(md_path)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=8.0, help="measured seconds per task and method")
    ap.add_argument("--rounds", type=int, default=2, help="interleaved raw/mc rounds per task")
    ap.add_argument("--out", type=Path, default=DOC, help="markdown rendered from the raw data")
    ap.add_argument("--raw", type=Path, default=RAW, help="raw-data JSON the measurement is written to")
    ap.add_argument("--render", action="store_true", help="only write --out from --raw (no measurement)")
    ap.add_argument("--executors", action="store_true", help="also measure local vs Ray (1 and 2 workers)")
    ap.add_argument("--states", type=int, default=32, help="stored states labelled per executor measurement")
    args = ap.parse_args(argv)
    if args.render:
        print(f"wrote {render_file(args.raw, args.out)}")
        return 0
    from prm_critic._io import atomic_write_bytes
    from prm_critic.robotics.collect import collect, load_shard
    from prm_critic.robotics.labels import MCLabeler
    from prm_critic.robotics.make import make_env

    rows, ex_rows = [], []
    load0 = os.getloadavg()
    if args.executors:
        import ray

        ray.init(num_cpus=2, include_dashboard=False, logging_level="WARNING",
                 runtime_env={"env_vars": {"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}})
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
            rows.append({"task": task, "raw": r, "mc": m})
            print(f"{task}: raw {r:,.0f} steps/s, mc {m:,.0f} steps/s, ratio {m / r:.2f}", flush=True)
            env.close()
            labeler.close()
            if args.executors:
                rates, startup, per_call, n = executor_rates(meta, d, args.states, args.rounds)
                for name, v in rates.items():
                    w = 1 if name == "local" else int(name[3:])
                    ex_rows.append({"task": task, "executor": "local" if name == "local" else "ray", "workers": w,
                                    "rate": float(np.mean(v)), "rounds": [float(x) for x in v],
                                    "startup": float(np.mean(startup[name])) if name in startup else None,
                                    "tasks_per_call": float(np.mean(per_call[name])) if name in per_call else 1.0})
                    print(f"{task}: {name} {np.mean(v):,.0f} steps/s ({n} states)", flush=True)
    cmd = "python benchmarks/mc_throughput.py" + ("" if argv is None and len(sys.argv) == 1 else " " + " ".join(sys.argv[1:]))
    data = {"about": "Steps per second measured by benchmarks/mc_throughput.py; docs/mc_throughput.md is rendered "
                     "from this file (--render).",
            "command": cmd, "seconds": args.seconds, "rounds": args.rounds,
            "machine": f"{platform.processor() or platform.machine()}, Python {platform.python_version()}, "
                       f"{os.cpu_count()} CPU cores",
            "rows": rows}
    if args.executors:
        import ray

        ray.shutdown()
        load1 = os.getloadavg()
        data.update({"executor_rows": ex_rows, "executor_states": args.states,
                     "load": f"1-min load average {load0[0]:.1f} at the start and {load1[0]:.1f} at the end on "
                             f"{os.cpu_count()} cores shared with other jobs"})
    atomic_write_bytes(args.raw, (json.dumps(data, indent=1) + "\n").encode())
    print(render(data))
    print(f"wrote {args.raw} and {render_file(args.raw, args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
