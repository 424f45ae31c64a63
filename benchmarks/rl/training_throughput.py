"""RL training throughput: what shaping, the relabelling path, torch threads and the backend cost.

Every config trains SAC + HER on FetchPush-v4 with the RL benchmark's settings (``benchmarks/rl/run.py``
``TASKS``: gamma, learning rate, tau, batch 256, [256, 256] networks, observation normalisation), one
env, one gradient step per env step, built by the library itself (``make_vec_train_env`` +
``build_model``, as ``train_policy`` builds them):

* ``her``              - unshaped HER (SB3's ``HerReplayBuffer``, ``copy_info_dict=True``);
* ``prm_her_infos``    - HER + the spec potential (scale 10), relabelled through copied info dicts
  (SB3's ``HerReplayBuffer(copy_info_dict=True)``: the path ``train_policy`` took before);
* ``prm_her``          - the same, relabelled from compact rows (``PRMHerReplayBuffer``, today's path);
* ``prm_her_learned``  - ``prm_her`` with the committed learned critic (``push_mc``) as the potential;
* ``*_t2``             - the config on 2 torch threads instead of 1;
* ``sbx_*``            - the config on the SBX (JAX) backend, XLA single-threaded.

After an untimed warm-up past ``learning_starts`` (SBX's JIT compilation included), the configs take
turns in rounds of ``--chunk`` env steps, the order reversed every other round, so load from other
processes hits all alike. Each turn records the process CPU time (``time.process_time``: all threads
of this process) and the wall time. The figure is the CPU-time ratio per env step against ``her``,
paired per round, with its mean and a 95 % t-interval over rounds. The 1-min load average is recorded
at the start and end of each measurement.

    python -m benchmarks.rl.training_throughput --label loaded   # measure, append to raw data, write doc
    python -m benchmarks.rl.training_throughput --render         # doc from the committed raw data

The goal this measures: shaped HER at most +5 % CPU time per env step over unshaped HER.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import sys
import time
from pathlib import Path

os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")

from benchmarks.report_io import add_doc_arguments, machine, render_only, write_measurement
from benchmarks.stats import t_interval

ROOT = Path(__file__).resolve().parents[2]
RAW = ROOT / "benchmarks" / "results" / "rl_training_throughput.json"
DOC = ROOT / "docs" / "rl_training_throughput.md"
TASK = "FetchPush-v4"
CRITIC = ROOT / "benchmarks" / "rl" / "critics" / "push_mc.json"
GOAL = 0.05
#: name -> (backend, shaping, relabel path, critic, torch threads)
CONFIGS = {
    "her": ("sb3", None, "infos", None, 1),
    "prm_her_infos": ("sb3", "potential", "infos", "subgoal", 1),
    "prm_her": ("sb3", "potential", "rows", "subgoal", 1),
    "prm_her_learned": ("sb3", "potential", "rows", "learned", 1),
    "her_t2": ("sb3", None, "infos", None, 2),
    "prm_her_t2": ("sb3", "potential", "rows", "subgoal", 2),
    "sbx_her": ("sbx", None, "infos", None, 1),
    "sbx_prm_her": ("sbx", "potential", "rows", "subgoal", 1),
}
BASE = "her"


def _bench_settings() -> dict:
    from benchmarks.rl.run import TASKS

    return TASKS[TASK]


def build(name: str, settings: dict, learning_starts: int, seed: int = 0):
    """The model of config ``name`` (module docstring) on the benchmark's settings."""
    from stable_baselines3.common.vec_env import VecNormalize

    from prm_critic.sb3.envs import make_vec_train_env, resolve_critic
    from prm_critic.sb3.train import build_model

    backend, shaping, path, critic, _ = CONFIGS[name]
    kw = dict(settings["algo_kwargs"], learning_starts=learning_starts)
    crit = None
    if critic == "subgoal":
        crit = "subgoal"
    elif critic == "learned":
        crit = resolve_critic(CRITIC, TASK)
    venv = make_vec_train_env(TASK, 1, seed=seed, critic=crit, shaping=shaping, scale=10.0, gamma=kw["gamma"],
                              head="success" if critic == "learned" else "progress")
    venv = VecNormalize(venv, norm_obs=True, norm_reward=False, gamma=kw["gamma"])
    return build_model("sac", venv, her=True, algo_kwargs=kw, seed=seed, backend=backend, shaped=path == "rows")


def _tinterval(xs: list[float]) -> tuple[float, float, float]:
    """Mean and 95 % t-interval of ``xs`` (NaN bounds for fewer than 2 values)."""
    t = t_interval(xs)
    return t["mean"], *(math.nan if t[k] is None else t[k] for k in ("lo", "hi"))


def measure(args) -> dict:
    import torch

    settings = _bench_settings()
    load0 = os.getloadavg()[0]
    models = {}
    for name in args.configs:
        torch.set_num_threads(CONFIGS[name][4])
        m = build(name, settings, args.learning_starts)
        t0 = time.perf_counter()
        m.learn(args.learning_starts + args.warmup, progress_bar=False)
        print(f"{name}: built and warmed up in {time.perf_counter() - t0:.1f} s", flush=True)
        models[name] = m
    cpu: dict[str, list[float]] = {n: [] for n in args.configs}
    wall: dict[str, list[float]] = {n: [] for n in args.configs}
    for r in range(args.rounds):
        order = list(args.configs) if r % 2 == 0 else list(args.configs)[::-1]
        for name in order:
            torch.set_num_threads(CONFIGS[name][4])
            c0, w0 = time.process_time(), time.perf_counter()
            models[name].learn(args.chunk, reset_num_timesteps=False, progress_bar=False)
            cpu[name].append((time.process_time() - c0) / args.chunk * 1e3)
            wall[name].append((time.perf_counter() - w0) / args.chunk * 1e3)
            print(f"round {r} {name}: {cpu[name][-1]:.1f} ms CPU / {wall[name][-1]:.1f} ms wall per env step",
                  flush=True)
    torch.set_num_threads(1)
    return {"label": args.label, "chunk": args.chunk, "rounds": args.rounds, "warmup": args.warmup,
            "learning_starts": args.learning_starts, "cpu_ms_per_step": cpu, "wall_ms_per_step": wall,
            "load": [round(load0, 2), round(os.getloadavg()[0], 2)]}


def render(raw: dict) -> str:
    lines = ["# RL training throughput: shaping, relabelling, threads, backends", "",
             "Generated by `python -m benchmarks.rl.training_throughput --render` from "
             f"`{RAW.relative_to(ROOT).as_posix()}`; each measurement below was taken by the command shown with it.", "",
             "SAC + HER on FetchPush-v4 with the RL benchmark's settings ([256, 256], batch 256, observation "
             "normalisation), one env, one gradient step per env step. Configs take turns in rounds (order "
             "reversed every other round), so load hits all alike. **CPU ms / step** is the process CPU time "
             "(all its threads) per env step; the ratio is paired per round against unshaped `her` (1 thread), "
             "mean with a 95 % t-interval over rounds.", "",
             "Configs: `her` unshaped HER; `prm_her_infos` the spec potential relabelled through copied info dicts "
             "(SB3's `HerReplayBuffer(copy_info_dict=True)`, the earlier path); `prm_her` the same relabelled from "
             "compact rows (`PRMHerReplayBuffer`, what `train_policy` uses now); `prm_her_learned` with the learned "
             "critic `push_mc` as the potential; `_t2` on 2 torch threads; `sbx_` on the SBX (JAX) backend.", ""]
    for meas in raw["runs"]:
        cpu, wall = meas["cpu_ms_per_step"], meas["wall_ms_per_step"]
        lines += [f"## {meas['label']}", "", f"`{meas['command']}`", "",
                  f"{meas['rounds']} rounds of {meas['chunk']} env steps per config; 1-min load average "
                  f"{meas['load'][0]} at the start, {meas['load'][1]} at the end ({meas['machine']}" + (f"; {meas['versions']}" if "versions" in meas else "") + ").", "",
                  f"| config | CPU ms / step | wall ms / step | CPU ratio vs `{BASE}` (95 % interval) "
                  "| wall ratio vs `her` |",
                  "|---|---:|---:|---|---:|"]
        for name in cpu:
            ratios = [a / b for a, b in zip(cpu[name], cpu[BASE])]
            m, lo, hi = _tinterval(ratios)
            wr = sum(wall[name]) / sum(wall[BASE])
            lines.append(f"| `{name}` | {sum(cpu[name]) / len(cpu[name]):.1f} | {sum(wall[name]) / len(wall[name]):.1f} "
                         f"| {m:.3f} ({lo:.3f}-{hi:.3f}) | {wr:.2f} |")
        lines.append("")
        if "prm_her" in cpu:
            m, lo, hi = _tinterval([a / b for a, b in zip(cpu["prm_her"], cpu[BASE])])
            met = "met" if hi <= 1 + GOAL else ("not met" if lo > 1 + GOAL else "undecided (the interval spans the goal)")
            lines.append(f"Goal, shaped HER at most +{GOAL:.0%} CPU time per env step over unshaped HER: **{met}** "
                         f"(`prm_her` / `her` = {m:.3f}, 95 % interval {lo:.3f}-{hi:.3f}).")
            if "prm_her_infos" in cpu:
                m2, lo2, hi2 = _tinterval([a / b for a, b in zip(cpu["prm_her_infos"], cpu[BASE])])
                lines.append(f"The earlier path (`prm_her_infos`): {m2:.3f} ({lo2:.3f}-{hi2:.3f}).")
            lines.append("")
        if "her_t2" in cpu:
            m, lo, hi = _tinterval([a / b for a, b in zip(wall["her_t2"], wall[BASE])])
            lines.append(f"Threads: 2 torch threads / 1 thread, wall time per env step (`her_t2` / `her`): {m:.2f} "
                         f"({lo:.2f}-{hi:.2f}); `train_policy` defaults to `torch_threads=1`.")
            lines.append("")
    if any("versions" not in m for m in raw["runs"]):  # measurements that did not record their own
        lines += [f"Versions (of the measurements above without their own): {raw['versions']}.", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--label", default="measured", help="name of this measurement in the doc (e.g. idle, loaded)")
    p.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    p.add_argument("--rounds", type=int, default=4, help="rounds per config (default 4)")
    p.add_argument("--chunk", type=int, default=300, help="env steps per config per round (default 300)")
    p.add_argument("--warmup", type=int, default=100, help="untimed steps past learning_starts (default 100)")
    p.add_argument("--learning-starts", type=int, default=200,
                   help="random steps before training (default 200: HER needs one finished 50-step episode)")
    add_doc_arguments(p, RAW, DOC)
    args = p.parse_args(argv)
    for name in ("rounds", "chunk", "learning_starts"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')}: expected an integer >= 1, got {getattr(args, name)}")
    if args.warmup < 0:
        p.error(f"--warmup: expected an integer >= 0, got {args.warmup}")
    if BASE not in args.configs:
        p.error(f"--configs: the ratios are against {BASE!r}, which must be among them, got {args.configs}")
    if render_only(args, render):
        return 0
    import stable_baselines3
    import torch

    versions = f"stable-baselines3 {stable_baselines3.__version__}, torch {torch.__version__}"
    if any(CONFIGS[c][0] == "sbx" for c in args.configs):
        import jax
        import sbx

        versions += f", sbx-rl {sbx.__version__}, jax {jax.__version__}"
    meas = measure(args)
    meas["command"] = "python -m benchmarks.rl.training_throughput" + (
        " " + shlex.join(sys.argv[1:]) if argv is None and len(sys.argv) > 1 else "")
    meas["machine"] = machine()
    meas["versions"] = versions
    raw = json.loads(args.raw.read_text()) if args.raw.exists() else {"runs": []}
    raw["runs"] = [m for m in raw["runs"] if m["label"] != args.label] + [meas]
    raw["versions"] = versions
    print(render(raw))
    write_measurement(render, raw, args.raw, args.doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
