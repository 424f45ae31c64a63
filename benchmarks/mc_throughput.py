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

crossover (``--crossover``, needs ``prm-critic[ray]``): where Ray pays. Whole runs, start-up to
shutdown, of the MC labelling of ``--sizes`` stored PointMaze states on the local executor and on
``RayExecutor(--workers)`` starting its own Ray instance as ``prm-critic label --executor ray`` does,
interleaved in ``--rounds`` rounds, with each run's wall seconds (start-up, work, shutdown), CPU
seconds and 1-min load average, and the per-task cost (no-op tasks). Fitted to them: the executor
cost model (:class:`prm_critic.parallel.RayCostModel`, whose defaults are these fits) and the
crossover, the job size where Ray's speed-up reaches 1, measured and by the model. Only the
``crossover`` section of the raw data is replaced; the others keep their own measurement.

The measured rates go to ``benchmarks/results/mc_throughput.json`` (``--raw``) and
``docs/mc_throughput.md`` is rendered from that file alone (``--render`` rewrites it without measuring).

Usage:
    python -m benchmarks.mc_throughput [--seconds 8] [--out docs/mc_throughput.md]
    python -m benchmarks.mc_throughput --crossover --rounds 3 --sizes 96,384,1152
    python -m benchmarks.mc_throughput --render
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.report_io import add_doc_arguments, machine, measured_on, render_only, write_measurement

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
    from prm_critic.parallel import LocalExecutor, RayExecutor
    from prm_critic.robotics.collection import load_shard
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


def _timed(labeler, payload):
    """Executor task: the MC label of one state, the rollout env steps it took and the worker's CPU seconds."""
    c0 = time.process_time()
    v, n = _counted(labeler, payload)
    return v, n, time.process_time() - c0


def _noop(ctx, payload):
    """Executor task that does nothing: what is left of its wall time is the executor's per-task cost."""
    return payload


def crossover_runs(meta, d, sizes, rounds, workers=2, noop_tasks=200):
    """Whole runs, start-up to shutdown, of the MC labelling of ``n`` stored states (for ``n`` in ``sizes``)
    on the local executor and on ``RayExecutor(workers)`` starting its own Ray instance (``ray.init`` as
    ``prm-critic label --executor ray`` does), interleaved: each round runs every size on both, the order
    of the two flipped every other round. One row per run."""
    from prm_critic.parallel import LocalExecutor, RayExecutor, Task
    from prm_critic.robotics.collection import load_shard
    from prm_critic.robotics.labels import label_params, mc_setup, state_tasks

    f = d / "shards" / "shard_00000.npz"
    sh = load_shard(f)
    order = np.random.default_rng(0).permutation(len(sh["t"]))  # nested job sizes of alike states
    params = label_params("mc", k=4, seed=0)
    out = []
    for r in range(rounds):
        for n in sizes:
            tasks = state_tasks(f, sh, np.sort(order[:n]))
            for name in (("local", "ray") if r % 2 == 0 else ("ray", "local")):
                ex = LocalExecutor() if name == "local" else RayExecutor(workers)
                load = os.getloadavg()[0]
                cpu0, t0 = time.process_time(), time.perf_counter()
                pool = ex.start(mc_setup(meta, params, remote=ex.remote))
                t1 = time.perf_counter()
                res = [v for _, v in pool.map(_timed, tasks)]
                t2 = time.perf_counter()
                noop_s = None
                if name == "ray":  # the per-task cost: no-op tasks, one per worker call
                    pool.call_s = 0.0
                    list(pool.map(_noop, [Task(key=i, desc=f"no-op {i}", payload=i) for i in range(noop_tasks)]))
                    noop_s = (time.perf_counter() - t2) / noop_tasks
                t3 = time.perf_counter()
                pool.close()
                t4 = time.perf_counter()
                row = {"round": r, "states": n, "executor": name, "workers": 1 if name == "local" else workers,
                       "startup_s": t1 - t0, "map_s": t2 - t1, "close_s": t4 - t3,
                       "total_s": (t1 - t0) + (t2 - t1) + (t4 - t3),
                       "rollout_steps": int(sum(x[1] for x in res)),
                       "task_cpu_s": float(sum(x[2] for x in res)), "driver_cpu_s": time.process_time() - cpu0,
                       "noop_task_s": noop_s, "load_1min": load}
                out.append(row)
                print(f"crossover round {r}: {n} states on {name}: {row['total_s']:.1f} s (start-up "
                      f"{row['startup_s']:.1f} s, map {row['map_s']:.1f} s, close {row['close_s']:.1f} s), "
                      f"load {load:.1f}", flush=True)
    return out


def fit_crossover(cx: dict) -> dict:
    """The executor cost model (:class:`prm_critic.parallel.RayCostModel`) fitted to the ``--crossover``
    runs, and the crossover: where Ray's speed-up over local reaches 1, measured and by the model.

    local seconds = set-up + ``c * steps`` (``c``: the local work seconds per rollout step); Ray start-up
    ``startup_s``: the median of start-up + shutdown; ``task_overhead_s``: the median no-op task time;
    ``parallel``: the effective workers of Ray's work phase, ``c * steps / (map - states * overhead)``.
    """
    from prm_critic.parallel import RayCostModel

    runs = cx["runs"]
    loc = [r for r in runs if r["executor"] == "local"]
    ray = [r for r in runs if r["executor"] == "ray"]
    c = sum(r["map_s"] for r in loc) / sum(r["rollout_steps"] for r in loc)
    a = float(np.mean([r["startup_s"] + r["close_s"] for r in loc]))
    startup = float(np.median([r["startup_s"] + r["close_s"] for r in ray]))
    overhead = float(np.median([r["noop_task_s"] for r in ray]))
    work = sum(r["map_s"] - r["states"] * overhead for r in ray)
    parallel = float(c * sum(r["rollout_steps"] for r in ray) / work)
    model = RayCostModel(startup_s=round(startup, 1), task_overhead_s=round(overhead, 4))
    workers = cx["workers"]
    rows = []
    for n in cx["sizes"]:
        lo = [r for r in loc if r["states"] == n]
        ra = [r for r in ray if r["states"] == n]
        steps = float(np.mean([r["rollout_steps"] for r in lo]))
        t_lo, t_ra = float(np.mean([r["total_s"] for r in lo])), float(np.mean([r["total_s"] for r in ra]))
        rows.append({"states": n, "steps": steps, "local_s": t_lo, "ray_s": t_ra,
                     "ray_startup_s": float(np.mean([r["startup_s"] + r["close_s"] for r in ra])),
                     "ray_map_s": float(np.mean([r["map_s"] for r in ra])),
                     "speedup": t_lo / t_ra, "model": model.speedup(steps, float(c), workers, n),
                     "round_speedups": [x["total_s"] / y["total_s"] for x in lo for y in ra if x["round"] == y["round"]],
                     "cpu_local": float(np.mean([r["driver_cpu_s"] for r in lo])),  # its tasks ran in it
                     "cpu_ray": float(np.mean([r["task_cpu_s"] + r["driver_cpu_s"] for r in ra])),
                     "load": float(np.mean([r["load_1min"] for r in lo + ra]))})
    steps_per_state = sum(r["steps"] for r in rows) / sum(r["states"] for r in rows)
    # measured crossover: where the measured speed-up crosses 1, linear in log(states) between sizes
    measured = None
    for x, y in zip(rows, rows[1:]):
        if (x["speedup"] - 1) * (y["speedup"] - 1) <= 0 and x["speedup"] != y["speedup"]:
            f = (1 - x["speedup"]) / (y["speedup"] - x["speedup"])
            measured = float(np.exp(np.log(x["states"]) + f * (np.log(y["states"]) - np.log(x["states"]))))
            break
    cross_s = model.crossover_s(workers, float(c) * steps_per_state)
    return {"local_intercept_s": float(a), "step_s": float(c), "startup_s": model.startup_s,
            "task_overhead_s": model.task_overhead_s, "parallel": parallel, "rows": rows,
            "steps_per_state": steps_per_state, "measured_states": measured,
            "measured_s": None if measured is None else float(c) * steps_per_state * measured,
            "model_s": cross_s, "model_states": cross_s / (float(c) * steps_per_state),
            "auto_s": _auto_threshold_s(model, workers, float(c) * steps_per_state)}


def _auto_threshold_s(model, workers: int, task_s: float) -> float:
    """Seconds of local work from which ``--executor auto`` picks Ray (expected speed-up >= AUTO_MIN_SPEEDUP)."""
    from prm_critic.parallel import AUTO_MIN_SPEEDUP

    # speed-up x: W s = x (S + W s / w + W o / task_s)  =>  W = x S / (1 - x / w - x o / task_s)
    gain = 1 - AUTO_MIN_SPEEDUP / workers - AUTO_MIN_SPEEDUP * model.task_overhead_s / task_s
    return AUTO_MIN_SPEEDUP * model.startup_s / gain if gain > 0 else float("inf")


def render_crossover(cx: dict, workers_startup: list[float]) -> list[str]:
    """The "where Ray pays" section of the doc from the ``crossover`` runs."""
    from prm_critic.parallel import AUTO_MIN_SPEEDUP

    fit = fit_crossover(cx)
    w = cx["workers"]
    startup_note = "" if not workers_startup else (
        f" (the section above measured {min(workers_startup):.1f}-{max(workers_startup):.1f} s for the workers "
        "alone, Ray already running, at a lower load)")
    ls, le = cx["load_start"], cx["load_end"]
    lines = [
        "",
        "## Where Ray pays: whole runs, local vs Ray",
        "",
        f"Whole runs as `prm-critic label --family mc` makes them: MC labelling (k = {cx['k']}) of {', '.join(map(str, cx['sizes']))} "
        f"stored {cx['task']} states (nested subsets, alike states), each on the local executor and on "
        f"`RayExecutor({w})` starting its own local Ray instance (`ray.init`, {w} actors each building its env) "
        "and shutting it down: wall seconds from start-up to shutdown. "
        f"{cx['rounds']} interleaved rounds (every size on both executors per round, the order of the two flipped "
        "every other round); the table shows the means. CPU s: the tasks' CPU seconds (in the workers) plus "
        "the driver's (for local they are one process; Ray workers' start-up not counted).",
        "",
        "| states | rollout steps | local s | Ray s | of which Ray start-up + shutdown s | measured speed-up | "
        "model speed-up | speed-up per round | CPU s local | CPU s Ray | 1-min load |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    lines += [f"| {r['states']} | {r['steps']:,.0f} | {r['local_s']:.1f} | {r['ray_s']:.1f} | {r['ray_startup_s']:.1f} | "
              f"{r['speedup']:.2f} | {r['model']:.2f} | {', '.join(f'{x:.2f}' for x in r['round_speedups'])} | "
              f"{r['cpu_local']:.1f} | {r['cpu_ray']:.1f} | {r['load']:.1f} |"
              for r in fit["rows"]]
    agree = "" if fit["measured_s"] is None else (
        f" `--executor auto` switches to Ray at ~{fit['auto_s']:.0f} s of local work, "
        + ("above the measured crossover, so it keeps local for every job size whose mean measured speed-up is "
           "below 1" if fit["measured_s"] <= fit["auto_s"] else "below the measured crossover, so it picks Ray for "
           "some job sizes whose mean measured speed-up is below 1")
        + "; single rounds vary widely under this load (speed-up per round).")
    meas = ("not within the sizes measured" if fit["measured_states"] is None else
            f"at ~{fit['measured_states']:,.0f} states (~{fit['measured_s']:.0f} s of local work)")
    lines += [
        "",
        f"**Crossover** ({w} Ray workers reach the local executor's speed): measured {meas}; the cost model "
        f"puts it at ~{fit['model_s']:.0f} s of local work (~{fit['model_states']:,.0f} states here).{agree}",
        "",
        f"Cost model fitted to these runs (`prm_critic.parallel.RayCostModel`): local = units x unit_s "
        f"(here {fit['step_s'] * 1e6:.0f} us per rollout step, plus {fit['local_intercept_s']:.2f} s of set-up); "
        f"Ray = start-up + units x unit_s / workers + tasks x task overhead, with start-up + shutdown "
        f"**{fit['startup_s']:.1f} s** (median) and **{fit['task_overhead_s'] * 1e3:.1f} ms** per task "
        "(median wall time of no-op tasks sent one per worker call). These are the library's defaults "
        f"(`RayCostModel(startup_s={fit['startup_s']:.1f}, task_overhead_s={fit['task_overhead_s']:.4f})`; "
        "`$PRM_RAY_STARTUP_S` / `$PRM_RAY_TASK_OVERHEAD_S` override them). The model takes the workers as "
        f"{w}-fold parallel; Ray's work phase measured {fit['parallel']:.2f}-fold here. "
        f"`--executor auto` picks Ray from an expected {AUTO_MIN_SPEEDUP:g}x (a margin for the model's error), "
        f"i.e. from ~{fit['auto_s']:.0f} s of local work with {w} workers; `--executor ray` and `auto` print "
        "the expected speed-up before the run.",
        "",
        f"Reproduce: `{cx['command']}` ({cx['wall_s'] / 60:.1f} min).",
        f"Measured on: {cx['machine']}, at nice {cx['nice']}, shared with other jobs: 1-min load average "
        f"{ls[0]:.1f} at the start and {le[0]:.1f} at the end on {cx['cores']} cores. Under this load Ray's "
        f"start-up is long{startup_note}; with less load it is shorter and the crossover earlier: set "
        "`$PRM_RAY_STARTUP_S` to what your machine measures.",
    ]
    return lines


def render(raw: dict) -> str:
    """The markdown of ``docs/mc_throughput.md`` from the raw-data file's content."""
    lines = [
        "# Monte-Carlo labelling throughput",
        "",
        f"Generated by `python -m benchmarks.mc_throughput --render` from `{RAW.relative_to(ROOT).as_posix()}`, "
        "the raw data the commands below measured.",
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
    tail = [
        "",
        f"Reproduce: `{raw['command']}` ({raw['seconds']:g} s per task and method).",
        measured_on(raw['machine'], "; absolute rates vary with load, the ratio is the figure."),
        *([f"Load: {raw['load']}. A speed-up needs idle cores: with a load average above the core count, "
           "2 workers get less than 2 cores."] if raw.get("load") else []),
    ]
    lines += tail
    if raw.get("crossover"):
        lines += render_crossover(raw["crossover"], [r["startup"] for r in raw.get("executor_rows", [])
                                                     if r.get("startup") is not None])
    return "\n".join(lines + [""])


def _command(argv) -> str:
    return "python -m benchmarks.mc_throughput" + ("" if argv is None and len(sys.argv) == 1 else
                                                    " " + " ".join(sys.argv[1:] if argv is None else argv))


def crossover_main(args, argv) -> int:
    """``--crossover``: measure, fit, write the ``crossover`` section of the raw data and render the doc."""
    from prm_critic.robotics.collection import collect

    sizes = [int(x) for x in args.sizes.split(",")]
    load0, t0 = os.getloadavg(), time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp) / "pm"
        collect("PointMaze_UMaze-v3", d, episodes=8, shard_size=8, seed=0, progress=False)
        meta = json.loads((d / "meta.json").read_text())
        runs = crossover_runs(meta, d, sizes, args.rounds, workers=args.workers)
    load1 = os.getloadavg()
    raw = json.loads(args.raw.read_text()) if args.raw.exists() else {"rows": []}
    raw["crossover"] = {
        "command": _command(argv), "task": "PointMaze_UMaze-v3", "k": 4, "sizes": sizes, "rounds": args.rounds,
        "workers": args.workers, "wall_s": time.perf_counter() - t0,
        "machine": machine(),
        "cores": os.cpu_count(), "nice": os.nice(0), "load_start": list(load0), "load_end": list(load1),
        "runs": runs}
    print(render(raw))
    write_measurement(render, raw, args.raw, args.doc)
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=8.0, help="measured seconds per task and method")
    ap.add_argument("--rounds", type=int, default=2, help="interleaved raw/mc rounds per task")
    add_doc_arguments(ap, RAW, DOC, doc_flag="--out")
    ap.add_argument("--executors", action="store_true", help="also measure local vs Ray (1 and 2 workers)")
    ap.add_argument("--states", type=int, default=32, help="stored states labelled per executor measurement")
    ap.add_argument("--crossover", action="store_true",
                    help="only measure where Ray pays: whole local and Ray runs (start-up to shutdown) of --sizes "
                         "states, fit the executor cost model and keep the other sections of --raw as they are")
    ap.add_argument("--sizes", default="24,96,384", help="--crossover: states per job (comma-separated)")
    ap.add_argument("--workers", type=int, default=2, help="--crossover: Ray workers")
    args = ap.parse_args(argv)
    if render_only(args, render):
        return 0
    if args.crossover:
        return crossover_main(args, argv)
    from prm_critic.robotics.collection import collect, load_shard
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
    cmd = "python -m benchmarks.mc_throughput" + ("" if argv is None and len(sys.argv) == 1 else " " + " ".join(sys.argv[1:]))
    data = {"about": "Steps per second measured by benchmarks/mc_throughput.py; docs/mc_throughput.md is rendered "
                     "from this file (--render).",
            "command": cmd, "seconds": args.seconds, "rounds": args.rounds,
            "machine": machine(),
            "rows": rows}
    if args.executors:
        import ray

        ray.shutdown()
        load1 = os.getloadavg()
        data.update({"executor_rows": ex_rows, "executor_states": args.states,
                     "load": f"1-min load average {load0[0]:.1f} at the start and {load1[0]:.1f} at the end on "
                             f"{os.cpu_count()} cores shared with other jobs"})
    print(render(data))
    write_measurement(render, data, args.raw, args.doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
