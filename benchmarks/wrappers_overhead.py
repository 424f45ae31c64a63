"""Cost of the PRM env wrappers in the control loop, per variant, in one interleaved run.

Single envs (FetchPush-v4, PointMaze_UMaze-v3), µs of CPU time per ``env.step``: the raw env, the
reward shaper with a constant critic (the wrapper's own work), with the no-training
``SubgoalCritic`` (its batch-1 path ``score_one``), shaper + dead-end pruner, ``info_subgoals=True``,
a torch state critic (256x256 MLP, one thread), and the committed FetchPush critic (256x256) and its
distilled student (32x32) exported to ONNX, each run by onnxruntime (``OnnxCritic``) and by numpy
(``NumpyMLPCritic``, the batch-1 fast path for small critics). A floor row: a wrapper doing only the
per-step work any shaper must do (flatten, finiteness check, info copy; no size checks, no critic).
``n_envs`` FetchPush envs in an SB3 ``DummyVecEnv`` raw and under ``SB3VecPRMRewardShaper`` (one
batched critic call per vector step; the row keeps the label of its recorded data,
``VecPRMRewardShaper``, the class's former name). ``--against REV`` steps the variants that run the
library over the library as it was at git revision ``REV`` in the same rounds (``benchmarks.against_rev``;
rows tagged with REV's commit, recorded in the raw data).

Every variant runs in interleaved rounds (A for n steps, B for n steps, ... repeated; round 0 is
warm-up), so load from other processes hits all alike. Two measurements per variant:

* CPU time per step: the thread's CPU time (``time.thread_time_ns``) over each round, divided by
  its steps; the table shows the median over rounds and its ratio to the raw env of the same task.
* Per-step split, within the same step: the inner env sits on a pass-through timer and every critic
  on a call timer (``perf_counter_ns``), so each step splits into the inner env's time, the critic's
  time (*critic*) and the wrapper's own work (*wrapper*: flatten and validate the observation, the
  shaping term, the info keys; *self* = critic + wrapper); medians over all steps. The critic runs
  right after a MuJoCo step, i.e. with cold caches, as in training. The timers themselves add about
  0.1-0.3 µs to *wrapper*.

Run (about 4 minutes on a loaded 2-core machine; ``--out`` writes the raw data to
``benchmarks/results/wrappers_overhead.json`` and renders the doc from it; ``--render`` rewrites the
doc from the raw data alone; a measurement without ``--idle`` keeps an idle measurement already in the
raw data as ``previous_idle``, of the code before, not shown in the doc, and says so)::

    python -m benchmarks.wrappers_overhead --out docs/wrappers_overhead.md
    python -m benchmarks.wrappers_overhead --render
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import tempfile
import time
import types
from pathlib import Path

import numpy as np

from benchmarks.against_rev import Worker, add_arguments, checkout, serve
from benchmarks.latency import GOAL_E2E, GOAL_IN_LOOP_US, _actions, _CriticClock, _step_rounds, _timed_wrappers, round_server

ROOT = Path(__file__).resolve().parents[1]
RAW = ROOT / "benchmarks" / "results" / "wrappers_overhead.json"
DOC = ROOT / "docs" / "wrappers_overhead.md"
GOAL_SUBGOAL_US = 20.0
GOAL_WRAPPER_US = 5.0
GOAL_MAZE_CONST = 0.10


def _executor_call(self, run, x):
    """``CriticCaller._call`` on a one-thread ``concurrent.futures.ThreadPoolExecutor`` instead of the
    caller's two-lock worker (the standard alternative, measured side by side with it): ``run(x)``
    within ``deadline_s``, ``None`` when late or busy with a late call."""
    self.stats["calls"] += 1
    self.last_heads = None
    late = getattr(self, "late", None)
    if late is not None and not late.done():
        self.stats["fallbacks"] += 1
        return None
    future = self.executor.submit(run, x)
    try:
        error = future.exception(timeout=self.deadline_s)
    except TimeoutError:
        self.late = future
        self.stats["fallbacks"] += 1
        return None
    self.late = None
    if error is not None:
        raise error
    out, self.last_heads = future.result()
    return out


def _build(n_envs: int, clock: _CriticClock, tmp: Path, library_only: bool = False):
    import torch
    from stable_baselines3.common.vec_env import DummyVecEnv

    import gymnasium as gym

    from prm_critic.critic import BaseCritic, CriticInfo, StepScores
    from prm_critic.models.state_critic import StateCriticNet, TorchStateCritic
    from prm_critic.robotics.make import CriticInputLayout, make_env
    from prm_critic.robotics.spec import load_spec
    from prm_critic.robotics.subgoals import SubgoalCritic
    from prm_critic.sb3 import SB3VecPRMRewardShaper
    from prm_critic.wrappers import DeadEndPruner, PRMRewardShaper

    torch.set_num_threads(1)
    TimedEnv, _, TimedVecEnv = _timed_wrappers()

    class ConstantCritic(BaseCritic):
        """Scores nothing: isolates the wrapper's own cost from the critic's."""

        def __init__(self, layout, task):
            self.layout, self.obs_dim, self.task = layout, layout.obs_dim, task

        def critic_info(self):
            return CriticInfo(task=self.task, layout=self.layout)

        def score(self, steps):
            n = len(steps)
            return StepScores(np.zeros(n, np.float32), np.zeros(n, np.float32))

        def score_one(self, x):
            return 0.0, 0.0

    class PassThrough(gym.Wrapper):
        """A wrapper whose step does nothing but call the inner env's: the floor of any Python wrapper
        right after the physics step."""

        def step(self, action):
            return self.env.step(action)

    def flatten_floor(layout):
        """A wrapper that does only what any shaper must do per step, in the fewest Python operations:
        fetch the critic's keys, one ``np.concatenate`` to float32, the finiteness check, a copy of
        the info with the shaper's eight keys. No checks of the sizes, no critic call, no shaping."""
        import operator

        get, f32, cat, isfinite = operator.itemgetter(*layout.keys), np.float32, np.concatenate, math.isfinite

        class FlattenFloor(gym.Wrapper):
            def step(self, action):
                obs, r, term, trunc, info = self.env.step(action)
                x = cat(get(obs), dtype=f32, casting="same_kind")
                if not isfinite(sum(x.tolist())):
                    raise ValueError("observation: not finite")
                info = info.copy()
                info["prm_original_reward"] = r
                info["prm_phi"] = 0.0
                info["prm_next_phi"] = 0.0
                info["prm_shaping"] = 0.0
                info["prm_fallback"] = False
                info["prm_terminated"] = term
                info["prm_x"] = x
                info["prm_next_x"] = x
                return obs, r, term, trunc, info

        return FlattenFloor

    class ExecutorDeadlineShaper(PRMRewardShaper):
        """The shaper with its deadline calls on a ``concurrent.futures`` executor instead of its worker."""

        def __init__(self, *a, **k):
            from concurrent.futures import ThreadPoolExecutor

            super().__init__(*a, **k)
            self._caller.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="prm-critic-executor")
            self._caller._call = types.MethodType(_executor_call, self._caller)

        def close(self):
            self._caller.executor.shutdown(wait=False)
            super().close()

    single: dict[str, dict] = {}
    critics: dict = {}
    for task, gamma in (("FetchPush-v4", 0.98), ("PointMaze_UMaze-v3", 0.99)):
        probe = make_env(task)
        layout = CriticInputLayout.from_space(load_spec(task), probe.observation_space)
        const = clock.wrap(ConstantCritic(layout, task))
        sub = clock.wrap(SubgoalCritic(task, probe))

        def env(task=task):
            return TimedEnv(make_env(task))

        v = single[task] = {
            "raw env": env(),
            "pass-through gym.Wrapper (floor)": PassThrough(env()),
            FLATTEN_FLOOR: flatten_floor(layout)(env()),
            "shaper(constant critic)": PRMRewardShaper(env(), const, gamma=gamma),
            DEADLINE_ROW: PRMRewardShaper(env(), const, gamma=gamma, deadline_s=1.0),
            f"{DEADLINE_ROW} [executor]": ExecutorDeadlineShaper(env(), const, gamma=gamma, deadline_s=1.0),
            "shaper(SubgoalCritic)": PRMRewardShaper(env(), sub, gamma=gamma),
        }
        if task == "FetchPush-v4":
            net = StateCriticNet(layout.obs_dim, hidden=(256, 256))
            tc = clock.wrap(TorchStateCritic(net, {"layout": layout.to_dict()}))
            v.update({
                "pruner(shaper(SubgoalCritic))": DeadEndPruner(PRMRewardShaper(env(), sub, gamma=gamma), sub,
                                                               threshold=0.0, patience=10),
                "shaper(SubgoalCritic, info_subgoals=True)": PRMRewardShaper(env(), sub, gamma=gamma,
                                                                             info_subgoals=True),
                "shaper(torch 256x256)": PRMRewardShaper(env(), tc, gamma=gamma),
            })
            for label, exported in _onnx_critics(tmp, probe).items():
                oc = clock.wrap(exported)
                critics[label] = oc
                v[f"shaper({label})"] = PRMRewardShaper(env(), oc, gamma=gamma)
                if label.endswith(TEACHER_NAME):  # the README's deploy loop: Phi = the export, pruned on the subgoals
                    v[f"pruner(SubgoalCritic) over shaper({label})"] = DeadEndPruner(
                        PRMRewardShaper(env(), oc, gamma=gamma), sub, threshold=0.05, patience=20)
            critics["torch 256x256"] = tc
        critics.setdefault("SubgoalCritic", {})[task] = sub  # type: ignore[index]
        critics.setdefault("constant", {})[task] = const  # type: ignore[index]
    push = "FetchPush-v4"
    sub_push = single[push]["shaper(SubgoalCritic)"].critic
    vec = {
        f"DummyVecEnv({n_envs}) raw": TimedVecEnv(DummyVecEnv([lambda: make_env(push)] * n_envs)),
        f"DummyVecEnv({n_envs}) VecPRMRewardShaper(SubgoalCritic)": SB3VecPRMRewardShaper(
            TimedVecEnv(DummyVecEnv([lambda: make_env(push)] * n_envs)), sub_push, gamma=0.98),
    }
    if library_only:  # --against's worker: only the rows that run the library (no raw env, floors, alternatives)
        for rows in (*single.values(), vec):
            for k in [k for k in rows if k in NO_LIBRARY or k.endswith((" raw", "[executor]"))]:
                rows.pop(k).close()
    return single, vec, critics


#: rows whose step runs no library code
NO_LIBRARY = ("raw env", "pass-through gym.Wrapper (floor)", "floor: flatten + finiteness check + info copy, no critic")
#: the row of the shaper calling its critic on its deadline thread (never late: the hand-over's cost)
DEADLINE_ROW = "shaper(constant critic, deadline_s=1)"
#: the row of a wrapper doing only the per-step work any shaper must do (no checks, no critic)
FLATTEN_FLOOR = NO_LIBRARY[2]
TEACHER_NAME = "push_mc (256x256, 298 KB)"
STUDENT_NAME = "push_mc_small (distilled, 9 KB)"
#: the two runners of the same exported file: onnxruntime, and numpy (the batch-1 fast path)
RUNNERS = ("OnnxCritic", "NumpyMLPCritic")
RUNNERS_NOTE = (" `OnnxCritic` and `NumpyMLPCritic` run the same exported file: onnxruntime, and numpy "
                "(`prm_critic.onnx.NumpyMLPCritic`, the batch-1 fast path for small MLP critics; its scores equal "
                "onnxruntime's within 1e-5).")


def _onnx_critics(tmp: Path, env) -> dict:
    """The committed FetchPush critic and its distilled student as batch-1 ONNX exports, each run by
    onnxruntime (``OnnxCritic``) and by numpy (``NumpyMLPCritic``): ``{"<runner> <name>": critic}``."""
    from prm_critic.models import load_state_critic
    from prm_critic.onnx import NumpyMLPCritic, OnnxCritic, export_state_critic

    crit = ROOT / "benchmarks" / "rl" / "critics"
    out = {}
    for name, stem in ((TEACHER_NAME, "push_mc"), (STUDENT_NAME, "push_mc_small")):
        path = export_state_critic(load_state_critic(crit / stem), tmp / f"{stem}.b1.onnx", batch=1)
        out[f"OnnxCritic {name}"] = OnnxCritic(path, provider="cpu", env=env)
        out[f"NumpyMLPCritic {name}"] = NumpyMLPCritic(path, env=env)
    return out


def _summary(res: dict) -> dict:
    """Per variant of ``_step_rounds``' result: the median CPU µs per step over rounds and the per-step split."""
    rows = {}
    for k in res["total"]:
        t = np.asarray(res["total"][k], np.float64)
        own = t - np.asarray(res["inner"][k], np.float64)
        crit = np.asarray(res["critic"][k], np.float64)
        rows[k] = {"cpu_us": float(np.median(res["cpu"][k])), "cpu_rounds": [round(c, 3) for c in res["cpu"][k]],
                   "self_p50": float(np.median(own)) / 1e3, "critic_p50": float(np.median(crit)) / 1e3,
                   "wrapper_p50": float(np.median(own - crit)) / 1e3,
                   "wrapper_mean": float((own - crit).mean()) / 1e3, "steps": int(len(t))}
    return rows


def _cold_hot(critics: dict, steps: int, block: int = 100) -> dict:
    """Each FetchPush critic's batch-1 call right after a MuJoCo step (cold caches, as in the control
    loop) and the same call repeated at once (hot caches, as in a micro-benchmark's loop). Critics take
    turns in blocks of ``block`` consecutive steps (a control loop calls the same critic every step),
    on random-action FetchPush-v4 steps; the first step of each block is not counted. µs per call."""
    from prm_critic.robotics.make import make_env

    env = make_env("FetchPush-v4")
    calls = {}
    for name, c in critics.items():
        c = c["FetchPush-v4"] if isinstance(c, dict) else c
        fn = getattr(c, "score_one", None)
        fn = getattr(fn, "__wrapped__", fn)  # the call itself, without the benchmark's clock
        if fn is None:  # no batch-1 path: what the shaper calls instead
            score = getattr(c.score, "__wrapped__", c.score)
            calls[name] = lambda x, check=False, _f=score: _f(x[None])
        else:
            calls[name] = fn if "check" in _params(fn) else (lambda x, check=False, _f=fn: _f(x))
    layout = critics["constant"]["FetchPush-v4"].layout
    times: dict[str, dict[str, list[int]]] = {k: {"cold": [], "hot": []} for k in calls}
    pc = time.perf_counter_ns
    rng = np.random.default_rng(2)
    env.reset(seed=0)
    for _ in range(max(1, -(-steps // block))):
        for k, fn in calls.items():
            for i in range(block):
                obs, _, term, trunc, _ = env.step(rng.uniform(-1, 1, 4))
                x = layout.flatten(obs)
                t0 = pc()
                fn(x, check=False)
                t1 = pc()
                fn(x, check=False)
                t2 = pc()
                if i:
                    times[k]["cold"].append(t1 - t0)
                    times[k]["hot"].append(t2 - t1)
                if term or trunc:
                    env.reset()
    env.close()
    return {k: {m: {"p50": float(np.median(v[m])) / 1e3, "p90": float(np.percentile(v[m], 90)) / 1e3,
                    "n": len(v[m])} for m in ("cold", "hot")} for k, v in times.items()}


def _params(fn) -> tuple[str, ...]:
    import inspect

    try:
        return tuple(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return ()


def _groups(single: dict, vec: dict) -> dict:
    """The interleaved groups of ``_build``'s variants: one per task, and the vector envs."""
    return {**{task: {k: (e, "single") for k, e in v.items()} for task, v in single.items()},
            "vec": {k: (e, "sb3") for k, e in vec.items()}}


def _worker(config: dict):
    """``--worker`` (``--against``): the variants that run the library, over the library this process imports."""
    clock = _CriticClock()
    with tempfile.TemporaryDirectory(prefix="prm_wrappers_overhead_") as d:  # the critics read their files when built
        single, vec, _ = _build(config["n_envs"], clock, Path(d), library_only=True)
    per_round = {**{task: config["steps"] for task in single}, "vec": config["vec_steps"]}
    return {}, round_server(_groups(single, vec), _actions(config["n_envs"]), per_round, clock)


def measure(args, against=None) -> dict:
    from tqdm import tqdm

    clock = _CriticClock()
    with tempfile.TemporaryDirectory(prefix="prm_wrappers_overhead_") as d:  # the critics read their files when built
        single, vec, critics = _build(args.n_envs, clock, Path(d))
    actions = _actions(args.n_envs)
    out: dict = {"rows": {}, "vec": {}}
    load0 = os.getloadavg()
    with tqdm(total=(len(single) + 1) * args.rounds + 1, desc="rounds", file=sys.stderr) as bar:
        for g, variants in _groups(single, vec).items():
            steps = args.vec_steps if g == "vec" else args.steps
            res = _summary(_step_rounds(variants, actions, args.rounds, steps, bar, clock, against, g))
            if g == "vec":
                out["vec"] = res
            else:
                out["rows"][g] = res
        out["cold_hot"] = _cold_hot(critics, args.cold_hot_steps)
        bar.update(1)
    load1 = os.getloadavg()
    for variants in single.values():
        for e in variants.values():
            e.close()
    for e in vec.values():
        e.close()
    out["n_envs"] = args.n_envs
    out["settings"] = {"rounds": args.rounds, "steps": args.steps, "vec_steps": args.vec_steps}
    out["machine"] = (f"{platform.machine()} CPU, {os.cpu_count()} logical cores shared with other jobs (1-min "
                      f"load average {load0[0]:.1f} at the start, {load1[0]:.1f} at the end; this process at "
                      f"niceness {os.nice(0)}); Python "
                      f"{platform.python_version()}, numpy {np.__version__}; {time.strftime('%Y-%m-%d')}")
    return out


def _goal(ok: bool) -> str:
    return "**met**" if ok else "**not met**"


def render(raw: dict) -> str:
    s = raw["settings"]
    lines = [
        "# Env wrappers in the control loop: CPU time per step", "",
        "Reproduce (from the repository root, CPU):", "", "```bash", raw["command"], "```", "",
        "Generated by `python -m benchmarks.wrappers_overhead --render` from "
        "`benchmarks/results/wrappers_overhead.json`, the raw data that command measured.", "",
        "Measured on: " + raw["machine"], "",
        f"{s['rounds']} interleaved rounds of {s['steps']} steps per variant (vector envs: {s['vec_steps']} vector "
        "steps), after a warm-up round. *CPU µs / step*: the thread's CPU time per round (resets excluded) divided by its steps, "
        "median over rounds; *vs raw*: its ratio to the raw env of the same task. *self*, *critic*, *wrapper*: "
        "medians over all steps of the per-step split (the wrapper's time below the outer `step` and above the "
        "inner env's; *critic* = inside the critic's `score_one` / `score`; *wrapper* = self - critic). The "
        "critic is called right after a MuJoCo step (cold caches). " + _revision_note(raw) + "*" + FLATTEN_FLOOR
        + "*: a wrapper doing only what "
        "any shaper must do per step in Python, in the fewest operations (fetch the critic's keys, one "
        "`np.concatenate` to float32, the finiteness check, a copy of the info with the shaper's eight keys; "
        "no size checks, no critic call, no shaping): the floor of the shaper's own work. *" + DEADLINE_ROW
        + "*: the constant critic called on the shaper's deadline thread (never late): *wrapper* holds the "
        "hand-over to that thread and back (wall time; *CPU µs / step* counts the stepping thread only); its "
        "`[executor]` row hands over through a one-thread `concurrent.futures.ThreadPoolExecutor` instead of "
        "the shaper's worker (one daemon thread, two bare locks), the standard alternative it is kept over.", "",
    ]
    lines += _task_tables(raw["rows"], "##", "")
    n = raw["n_envs"]
    lines += [f"## {n} FetchPush-v4 envs, one critic call per vector step", ""]
    lines += _table("vector env | CPU µs / vector step", raw["vec"], raw["vec"][f"DummyVecEnv({n}) raw"]["cpu_us"],
                    "wrapper per env-step µs", lambda r: f"{r['wrapper_p50'] / n:.2f}")
    ch = raw.get("cold_hot")
    if ch:
        lines += ["", "## The critic's call in the control loop: cold against hot (FetchPush-v4, batch 1)", "",
                  "Each critic's batch-1 call (`score_one(x, check=False)`, the shaper's call) right after a MuJoCo "
                  "step, which evicts the critic's weights and the interpreter's working set from the caches "
                  "(*cold*: what a control loop pays), then the same call again at once (*hot*: what a "
                  "micro-benchmark's tight loop reports). Critics take turns in blocks of 100 consecutive steps (a control "
                  "loop calls the same critic every step); the first step of each block is not counted."
                  + (RUNNERS_NOTE if any(k.startswith("NumpyMLPCritic") for k in ch) else ""), "",
                  *_cold_hot_rows(ch)]
    lines += ["", "## Goals", ""]
    idle = raw.get("idle")
    prev = raw.get("previous_idle")
    if prev and not idle:
        lines += ["The idle measurement (other jobs paused) has not been repeated for this run's code: the "
                  f"previous one ({prev['machine'].rsplit('; ', 1)[-1]}) is kept in the raw data as "
                  "`previous_idle` and not shown; `--idle` measures this code's.", ""]
    if idle:
        lines += ["Each goal measured twice: with the other jobs of the machine running (*loaded*, the tables "
                  "above) and with them paused (*idle*, the section below).", ""]
    lines += _goal_lines(raw, "loaded" if idle else None)
    if idle:
        lines += _goal_lines(idle, "idle")
        lines += ["", "## Idle machine", "",
                  "The same measurement with every other job on the machine paused (`SIGSTOP`) for its "
                  "duration: " + idle["machine"] + ". " + idle.get("note", ""), ""]
        lines += _task_tables(idle["rows"], "###", ", idle")
        ich = idle.get("cold_hot")
        if ich:
            lines += ["### The critic's call in the control loop, idle: cold against hot (FetchPush-v4, batch 1)", "",
                      *_cold_hot_rows(ich), ""]
    return "\n".join(lines)


def _revision_note(raw: dict) -> str:
    """What the tagged rows ran: ``[at COMMIT]`` the library at ``--against REV``; ``[reference]`` (older raw
    data) copies of the previous per-step code that the script then carried."""
    keys = [k for rows in (*raw["rows"].values(), raw["vec"]) for k in rows]
    note = ""
    if any(k.endswith("[reference]") for k in keys):
        note += ("`[reference]`: the previous per-step path in the same run (the previous flattening, a shape tuple "
                 "per step through the flattener instance; the previous critic call, through a closure; the info "
                 "built by merging two dicts; a pruner over a shaper with another critic flattening the observation "
                 "again; for the `SubgoalCritic`, its batched numpy path `score(x[None])` and `holds(x[None])`), "
                 "copies of the previous code that this script carried when this data was measured; earlier code "
                 "is now timed against a git revision (`--against REV`). ")
    if raw.get("against"):
        a = raw["against"]
        note += (f"`[at {a['commit'][:10]}]`: the same variant over the library as it was at `{a['rev']}` (commit "
                 f"{a['commit']}), checked out with `git worktree` and stepped in a subprocess in the same "
                 "interleaved rounds (`--against REV`); *vs raw* against this run's raw env. ")
    return note


def _task_tables(rows_by_task: dict, level: str, suffix: str) -> list[str]:
    """One table per task of single-env variants (CPU time per step against the raw env, per-step split)."""
    lines = []
    for task, rows in rows_by_task.items():
        lines += [f"{level} {task}{suffix}", "", *_table("variant | CPU µs / step", rows, rows["raw env"]["cpu_us"],
                                                         "wrapper mean µs", lambda r: f"{r['wrapper_mean']:.1f}"), ""]
    return lines


def _table(first: str, rows: dict, raw_cpu: float, last: str, cell) -> list[str]:
    """Variants against the raw env's CPU time per step (``raw_cpu``), their per-step split, and ``last``."""
    lines = [f"| {first} | vs raw | self p50 µs | critic p50 µs | wrapper p50 µs | {last} | steps |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for k, r in rows.items():
        lines.append(f"| {k} | {r['cpu_us']:.1f} | {r['cpu_us'] / raw_cpu:.3f}x | {r['self_p50']:.1f} | "
                     f"{r['critic_p50']:.1f} | {r['wrapper_p50']:.1f} | {cell(r)} | {r['steps']} |")
    return lines


def _before(rows: dict, k: str) -> tuple[str, dict] | None:
    """Row ``k`` run by earlier code (``k [at COMMIT]``, or ``k [reference]`` in older raw data), named."""
    for key, row in rows.items():
        if key.startswith(f"{k} [") and not key.endswith("[executor]"):
            tag = key[len(k) + 2:-1]
            return ("reference path" if tag == "reference" else tag), row
    return None


def _cold_hot_rows(ch: dict) -> list[str]:
    """The cold/hot table of the critics' batch-1 calls."""
    lines = ["| critic | cold p50 µs | cold p90 µs | hot p50 µs | hot p90 µs | cold / hot | calls |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for k, v in ch.items():
        c, h = v["cold"], v["hot"]
        lines.append(f"| {k} | {c['p50']:.1f} | {c['p90']:.1f} | {h['p50']:.1f} | {h['p90']:.1f} | "
                     f"{c['p50'] / h['p50']:.1f}x | {c['n']} |")
    return lines


def _goal_lines(raw: dict, condition: str | None) -> list[str]:
    """The goals' verdicts on one measurement (``condition``: ``loaded`` / ``idle``, or None when the
    doc has only one)."""
    push, maze = raw["rows"]["FetchPush-v4"], raw["rows"]["PointMaze_UMaze-v3"]
    sub = [(t, raw["rows"][t]["shaper(SubgoalCritic)"]["critic_p50"], _before(raw["rows"][t], "shaper(SubgoalCritic)"))
           for t in raw["rows"]]
    w_now, w_ref = push["shaper(constant critic)"]["wrapper_p50"], _before(push, "shaper(constant critic)")
    mz = maze["shaper(constant critic)"]["cpu_us"] / maze["raw env"]["cpu_us"] - 1
    mz_ref = _before(maze, "shaper(constant critic)")
    ch = raw.get("cold_hot")
    lines: list[str] = []
    lines += [f"- `SubgoalCritic` batch-1 call <= {GOAL_SUBGOAL_US:.0f} µs in the control loop: "
              + _goal(all(c <= GOAL_SUBGOAL_US for _, c, _ in sub)) + " ("
              + "; ".join(f"{t}: {c:.1f} µs" + (f", {b[0]} {b[1]['critic_p50']:.1f} µs" if b else "")
                          for t, c, b in sub) + ")"]
    if ch:
        for k in (f"{runner} {name}" for name in (TEACHER_NAME, STUDENT_NAME) for runner in RUNNERS):
            if k in ch:
                lines += [f"- {k}: batch-1 call <= {GOAL_IN_LOOP_US:.0f} µs p50 in the control loop (cold): "
                          + _goal(ch[k]["cold"]["p50"] <= GOAL_IN_LOOP_US)
                          + f" ({ch[k]['cold']['p50']:.1f} µs cold; hot {ch[k]['hot']['p50']:.1f} µs)"]
    floor = push.get("pass-through gym.Wrapper (floor)")
    flat = push.get(FLATTEN_FLOOR)
    lines += [f"- shaper's own work <= {GOAL_WRAPPER_US:.0f} µs per FetchPush step (constant critic, wrapper p50): "
              + _goal(w_now <= GOAL_WRAPPER_US) + f" ({w_now:.1f} µs"
              + (f"; {w_ref[0]} {w_ref[1]['wrapper_p50']:.1f} µs" if w_ref else "")
              + (f"; on the same timers a wrapper that only calls the inner env's `step` reads "
                 f"{floor['wrapper_p50']:.1f} µs and the raw env {push['raw env']['wrapper_p50']:.1f} µs, the "
                 "timers' own cost" if floor else "")
              + (f"; the floor wrapper (flatten, finiteness check, info copy; no checks, no critic) reads "
                 f"{flat['wrapper_p50']:.1f} µs" if flat else "") + ")"]
    raw_push = push["raw env"]["cpu_us"]
    for k in (row.format(runner) for row in (
            f"shaper({{}} {TEACHER_NAME})", f"pruner(SubgoalCritic) over shaper({{}} {TEACHER_NAME})",
            f"shaper({{}} {STUDENT_NAME})") for runner in RUNNERS):
        if k in push:
            e2e = push[k]["cpu_us"] / raw_push - 1
            ref = _before(push, k)
            lines += [f"- end to end, {k} <= +{GOAL_E2E:.0%} CPU time over the raw FetchPush step ("
                      + ("load as noted above" if condition is None else condition) + "): " + _goal(e2e <= GOAL_E2E)
                      + f" ({e2e:+.1%}" + (f"; {ref[0]} {ref[1]['cpu_us'] / raw_push - 1:+.1%}" if ref else "") + ")"]
    mz_flat = maze.get(FLATTEN_FLOOR)
    lines += [f"- PointMaze constant-critic overhead <= {GOAL_MAZE_CONST:.0%} of the raw step (CPU time): "
              + _goal(mz <= GOAL_MAZE_CONST) + f" ({mz:+.1%}"
              + (f"; {mz_ref[0]} {mz_ref[1]['cpu_us'] / maze['raw env']['cpu_us'] - 1:+.1%}" if mz_ref else "")
              + (f"; the floor wrapper {mz_flat['cpu_us'] / maze['raw env']['cpu_us'] - 1:+.1%}" if mz_flat else "")
              + ")", ""]
    tag = "" if condition is None else f"[{condition}] "
    return [ln.replace("- ", "- " + tag, 1) for ln in lines]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=500, help="steps per single-env variant per round")
    p.add_argument("--vec-steps", type=int, default=50, help="vector steps per vector variant per round")
    p.add_argument("--rounds", type=int, default=12)
    p.add_argument("--n-envs", type=int, default=8)
    p.add_argument("--cold-hot-steps", type=int, default=1500, help="steps per critic for the cold/hot table")
    p.add_argument("--out", default=None, help="write the raw data to --raw and the rendered doc here")
    p.add_argument("--raw", type=Path, default=RAW, help="raw-data JSON written with --out and read by --render")
    p.add_argument("--render", action="store_true", help="only write --md from --raw (no measurement)")
    p.add_argument("--md", type=Path, default=DOC, help="markdown written by --render")
    p.add_argument("--idle", action="store_true",
                   help="store this measurement as the idle one (raw['idle'] of --raw, the rest kept): run it with "
                        "the machine's other jobs paused")
    p.add_argument("--note", default="", help="--idle: how the machine was made idle (recorded in the doc)")
    add_arguments(p, "the variants that run the library")
    argv = sys.argv[1:] if argv is None else argv
    args = p.parse_args(argv)
    if args.worker:
        return serve(args.worker, _worker)
    from prm_critic._io import atomic_write_bytes

    if args.render:
        atomic_write_bytes(args.md, render(json.loads(Path(args.raw).read_text())).encode())
        return 0
    if args.against:
        config = {"n_envs": args.n_envs, "steps": args.steps, "vec_steps": args.vec_steps}
        with checkout(args.against) as (path, commit), Worker("benchmarks.wrappers_overhead", path, config) as w:
            raw = {**measure(args, (w, f"[at {commit[:10]}]")), "against": {"rev": args.against, "commit": commit}}
    else:
        raw = measure(args)
    shown = [a if not a.startswith("/") else Path(a).name for a in argv]
    if args.idle:
        if not Path(args.raw).exists():
            raise SystemExit(f"--idle: {args.raw} does not exist (expected the loaded measurement to add the idle one to)")
        full = json.loads(Path(args.raw).read_text())
        raw["machine"] = raw["machine"].replace("shared with other jobs", "with the other jobs paused")
        full["idle"] = {"command": f"python -m benchmarks.wrappers_overhead {' '.join(shown)}".rstrip(),
                        "note": args.note, **raw}
        full.pop("previous_idle", None)  # this code's idle measurement replaces the previous code's
        raw = full
    else:
        raw = {"about": "CPU time and per-step splits in microseconds measured by benchmarks/wrappers_overhead.py; "
                        "docs/wrappers_overhead.md is rendered from this file (--render).",
               "command": f"python -m benchmarks.wrappers_overhead {' '.join(shown)}".rstrip(), **raw}
        old = json.loads(Path(args.raw).read_text()) if args.out and Path(args.raw).exists() else {}
        prev = old.get("idle") or old.get("previous_idle")
        if prev:
            # the idle measurement was of the code before: kept aside (not shown as this code's), said so
            raw["previous_idle"] = prev
            print(f"note: {args.raw} held an idle measurement of the previous code ({prev['machine'].rsplit('; ', 1)[-1]}); "
                  "it is kept as 'previous_idle' and no longer shown in the doc: rerun with --idle (other jobs "
                  "paused) to measure this code idle", file=sys.stderr)
    text = render(raw)
    print(text)
    if args.out:
        atomic_write_bytes(args.raw, (json.dumps(raw, indent=1) + "\n").encode())
        atomic_write_bytes(Path(args.out), text.encode())
        print(f"wrote {args.raw} and {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
