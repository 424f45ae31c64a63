"""Critic latency: torch eager vs onnxruntime (plain ``run`` and IOBinding), and the env wrappers'
overhead in the control loop, side by side in one run: a FetchPush-v4 step raw, with the reward
shaper (constant critic, OnnxCritic, SubgoalCritic, + dead-end pruner, ``deadline_s``, ``info_subgoals=True``),
a PointMaze step with and without a deadline, and 16 FetchPush envs with the SB3 vector shaper and the
gymnasium one. Each step splits into the inner env's time, the critic's time and the wrapper's own time,
all measured inside the same step (a pass-through timer below the wrapper, a timer around the critic).
``--against REV`` times the same shaper variants over the library as it was at git revision ``REV`` in
the same rounds (``benchmarks.against_rev``; REV's commit is recorded in the raw data).

The critic is a FetchPush-sized state critic (obs_dim 31, hidden 256x256, ReLU), exported by
``prm_critic.onnx.export_state_critic``. All methods run on one thread (``torch.set_num_threads(1)``;
onnxruntime intra/inter-op threads 1, sequential execution, all graph optimisations). Methods are
measured in interleaved rounds (method A for n calls, method B for n calls, ... repeated), so a
burst of load from other processes hits every method alike; percentiles pool all rounds.

Run (about 5 minutes; ``--out docs/latency.md`` writes the raw data to ``benchmarks/results/latency.json``
and renders the doc and its plot from it; ``--render`` rewrites the doc from the raw data alone)::

    python -m benchmarks.latency --out docs/latency.md
    python -m benchmarks.latency --render
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.against_rev import Worker, add_arguments, checkout, serve

ROOT = Path(__file__).resolve().parents[1]
RAW = ROOT / "benchmarks" / "results" / "latency.json"
GPU_RAW = ROOT / "benchmarks" / "results" / "latency_gpu.json"
DOC = ROOT / "docs" / "latency.md"
BATCHES = (1, 16, 64, 1024)
PCTS = (50, 99, 99.9)


def _pcts(ns: list[int] | np.ndarray) -> tuple[float, float, float]:
    a = np.asarray(ns, dtype=np.float64) / 1e3  # microseconds
    return tuple(float(v) for v in np.percentile(a, PCTS))


def _time_calls(fn, n: int, out: list[int]) -> None:
    pc = time.perf_counter_ns
    for _ in range(n):
        t0 = pc()
        fn()
        out.append(pc() - t0)


def _interleaved(methods: dict, rounds: int, per_round: int, warmup: int, bar=None) -> dict[str, list[int]]:
    for fn in methods.values():
        for _ in range(warmup):
            fn()
    times: dict[str, list[int]] = {k: [] for k in methods}
    for _ in range(rounds):
        for k, fn in methods.items():
            _time_calls(fn, per_round, times[k])
        if bar is not None:
            bar.update(1)
    return times


def _cpu_session(ort, path, spinning: bool):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.add_session_config_entry("session.intra_op.allow_spinning", "1" if spinning else "0")
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def bench_critic(args, paths, net, bar) -> list[dict]:
    import onnxruntime as ort
    import torch

    from prm_critic.onnx import OnnxCritic

    rows = []
    rng = np.random.default_rng(0)
    sess_b1 = _cpu_session(ort, paths[1], args.spinning)
    sess_dyn = _cpu_session(ort, paths["dynamic"], args.spinning)
    crit_b1 = OnnxCritic(paths[1], provider="cpu", allow_spinning=args.spinning)
    crit_dyn = OnnxCritic(paths["dynamic"], provider="cpu", allow_spinning=args.spinning)
    for b in BATCHES:
        x = rng.standard_normal((b, 31)).astype(np.float32)
        xt = torch.from_numpy(x.copy())
        sess = sess_b1 if b == 1 else sess_dyn
        xin = x.copy()
        xout = np.zeros((b, 2), np.float32)
        io = sess.io_binding()
        io.bind_cpu_input("obs", xin)
        io.bind_output("scores", "cpu", 0, np.float32, [b, 2], xout.ctypes.data)

        def torch_eager(xt=xt):
            with torch.inference_mode():
                return net(xt)

        methods = {
            "torch eager": torch_eager,
            "ORT run": lambda sess=sess, x=x: sess.run(["scores"], {"obs": x}),
            "ORT IOBinding": lambda sess=sess, io=io: sess.run_with_iobinding(io),
        }
        if b == 1:
            v = x[0].copy()
            methods["OnnxCritic.score_one"] = lambda v=v: crit_b1.score_one(v)
        else:
            methods["OnnxCritic.score"] = lambda x=x: crit_dyn.score(x)
        # same results from every path (a benchmark of wrong answers is no benchmark)
        ref = torch_eager().numpy()
        methods["ORT IOBinding"]()
        np.testing.assert_allclose(xout, ref, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(sess.run(["scores"], {"obs": x})[0], ref, rtol=1e-4, atol=1e-5)
        calls = max(args.min_calls, int(args.iters / max(1.0, b / 16)))
        per_round = max(1, calls // args.rounds)
        times = _interleaved(methods, args.rounds, per_round, args.warmup, bar)
        stats = {k: _pcts(v) for k, v in times.items()}
        t50 = stats["torch eager"][0]
        for k, (p50, p99, p999) in stats.items():
            rows.append({"batch": b, "method": k, "p50": p50, "p99": p99, "p999": p999, "n": len(times[k]),
                         "speedup": t50 / p50, "per_row": p50 / b})
    return rows


def _timed_wrappers():
    """Pass-through wrappers that add up the time spent below them (the inner env's own step), so
    that a wrapper's self time is ``total - inner`` in the same call: far less noisy than the
    difference of two separately measured means on a loaded machine."""
    import gymnasium as gym
    from stable_baselines3.common.vec_env import VecEnvWrapper

    pc = time.perf_counter_ns

    class TimedEnv(gym.Wrapper):
        inner_ns = 0

        def step(self, action):
            t0 = pc()
            out = self.env.step(action)
            self.inner_ns += pc() - t0
            return out

    class TimedVector(gym.vector.VectorWrapper):
        inner_ns = 0

        def step(self, actions):
            t0 = pc()
            out = self.env.step(actions)
            self.inner_ns += pc() - t0
            return out

    class TimedVecEnv(VecEnvWrapper):
        inner_ns = 0

        def reset(self):
            return self.venv.reset()

        def step_wait(self):
            t0 = pc()
            out = self.venv.step_wait()
            self.inner_ns += pc() - t0
            return out

    return TimedEnv, TimedVector, TimedVecEnv


class _CriticClock:
    """Adds up the time spent inside critic calls (``score`` / ``score_one`` / ``score_rows``) of the critics it wraps."""

    ns = 0

    def wrap(self, critic):
        import functools

        pc = time.perf_counter_ns
        for name in ("score", "score_one", "score_rows"):
            fn = getattr(critic, name, None)
            if fn is None:
                continue

            @functools.wraps(fn)  # keeps the signature (the shaper passes check=False to score_one)
            def timed(*a, _fn=fn, **k):
                t0 = pc()
                try:
                    return _fn(*a, **k)
                finally:
                    self.ns += pc() - t0

            setattr(critic, name, timed)
        return critic


def _find_timed(env):
    e = env
    while not hasattr(e, "inner_ns"):
        e = getattr(e, "env", None) or e.venv
    return e


def _reset(variants: dict) -> None:
    for e, kind in variants.values():
        if kind == "sb3":
            e.reset()
        else:
            e.reset(seed=0)


def _step_round(variants: dict, actions: dict, per_round: int, clock: _CriticClock, step_no: dict) -> dict:
    """One round over ``variants`` (name -> (env, kind)), ``per_round`` steps each: per step the total ns, the
    ns spent in the timed inner env and in critic calls; the thread's CPU µs per step over the round."""
    pc, tt = time.perf_counter_ns, time.thread_time_ns
    out = {}
    for k, (e, kind) in variants.items():
        timed = _find_timed(e)
        acts = actions[kind] if kind != "single" else actions[kind][:, :e.action_space.shape[0]]
        total, inner, crit = [], [], []
        c_start = tt()
        for _ in range(per_round):
            a = acts[step_no[k] % len(acts)]
            step_no[k] += 1
            before, c0 = timed.inner_ns, clock.ns
            t0 = pc()
            res = e.step(a)
            total.append(pc() - t0)
            inner.append(timed.inner_ns - before)
            crit.append(clock.ns - c0)
            if kind == "single" and (res[2] or res[3]):
                r0 = tt()
                e.reset()
                c_start += tt() - r0  # resets are not steps: a pruner that ends episodes early resets more
        out[k] = {"total": total, "inner": inner, "critic": crit, "cpu": (tt() - c_start) / per_round / 1e3}
    return out


def _step_rounds(variants: dict, actions: dict, rounds: int, per_round: int, bar, clock: _CriticClock,
                 against=None, group: str = "") -> dict:
    """Interleaved rounds over ``variants`` and, with ``against`` (``(worker, tag)``), the worker's variants of
    ``group`` at the revision, in the same rounds (rows tagged ``tag``). Round 0 is warm-up."""
    res: dict[str, dict[str, list]] = {m: {} for m in ("total", "inner", "critic", "cpu")}
    _reset(variants)
    step_no = {k: 0 for k in variants}
    for r in range(rounds + 1):
        got = _step_round(variants, actions, per_round, clock, step_no)
        if against is not None:
            worker, tag = against
            got.update({f"{k} {tag}": v for k, v in worker({"group": group}).items()})
        if r:
            for k, v in got.items():
                for m in ("total", "inner", "critic"):
                    res[m].setdefault(k, []).extend(v[m])
                res["cpu"].setdefault(k, []).append(v["cpu"])
            if bar is not None:
                bar.update(1)
    return res


def round_server(groups: dict, actions: dict, per_round: dict, clock: _CriticClock):
    """A ``--against`` worker's step over ``groups`` (group -> variants, reset here): one round of the
    requested group per request (``{"group": g}``), as ``_step_round`` reports it."""
    step_no = {k: 0 for g in groups.values() for k in g}
    for g in groups.values():
        _reset(g)
    return lambda req: _step_round(groups[req["group"]], actions, per_round[req["group"]], clock, step_no)


def _shaper_variants(n: int, paths: dict, spin: bool, clock: _CriticClock, raw_rows: bool = True) -> tuple[dict, dict]:
    """The shaper section's single-env variants (name -> env) and vector ones (name -> (env, kind)), over the
    library this process imports; ``raw_rows=False`` leaves out the raw envs (no library code in them)."""
    import gymnasium as gym
    from stable_baselines3.common.vec_env import DummyVecEnv

    from prm_critic.critic import BaseCritic, CriticInfo, StepScores
    from prm_critic.onnx import OnnxCritic
    from prm_critic.robotics.make import CriticInputLayout, make_env, register_robotics_envs
    from prm_critic.robotics.spec import load_spec
    from prm_critic.robotics.subgoals import SubgoalCritic
    from prm_critic.sb3 import SB3VecPRMRewardShaper
    from prm_critic.wrappers import DeadEndPruner, GymVectorPRMRewardShaper, PRMRewardShaper

    TimedEnv, TimedVector, TimedVecEnv = _timed_wrappers()
    push = "FetchPush-v4"
    maze = "PointMaze_UMaze-v3"
    critic = OnnxCritic(paths[1], provider="cpu", allow_spinning=spin)
    critic.check_env(make_env(push))
    critic_layout = critic.layout
    clock.wrap(critic)
    dyn = clock.wrap(OnnxCritic(paths["dynamic"], provider="cpu", allow_spinning=spin))

    class ConstantCritic(BaseCritic):
        """Scores nothing: isolates the wrapper's own cost from the critic's."""

        def __init__(self, layout):
            self.layout, self.obs_dim = layout, layout.obs_dim

        def critic_info(self):
            return CriticInfo(layout=self.layout)

        def score(self, steps):
            n = len(steps)
            return StepScores(np.zeros(n, np.float32), np.zeros(n, np.float32))

        def score_one(self, x):
            return 0.0, 0.0

    maze_env = make_env(maze)
    maze_const = clock.wrap(ConstantCritic(CriticInputLayout.from_space(load_spec(maze), maze_env.observation_space)))
    push_const = clock.wrap(ConstantCritic(critic_layout))
    push_sub = clock.wrap(SubgoalCritic(push, make_env(push)))

    def push_env():
        return TimedEnv(make_env(push))

    register_robotics_envs()
    single = {
        "FetchPush: env.step (raw)": TimedEnv(make_env(push)),
        "FetchPush: PRMRewardShaper(constant critic)": PRMRewardShaper(push_env(), push_const,
                                                                       gamma=0.98),
        "FetchPush: PRMRewardShaper(OnnxCritic)": PRMRewardShaper(push_env(), critic, gamma=0.98),
        "FetchPush: DeadEndPruner(PRMRewardShaper(OnnxCritic))": DeadEndPruner(
            PRMRewardShaper(push_env(), critic, gamma=0.98), critic, threshold=0.0, patience=10),
        "FetchPush: PRMRewardShaper(OnnxCritic, info_subgoals=True)": PRMRewardShaper(
            push_env(), critic, gamma=0.98, spec=push, info_subgoals=True),
        "FetchPush: PRMRewardShaper(OnnxCritic, deadline_s=0.005)": PRMRewardShaper(
            push_env(), clock.wrap(OnnxCritic(paths[1], provider="cpu", allow_spinning=spin)), gamma=0.98,
            deadline_s=0.005),
        "FetchPush: PRMRewardShaper(SubgoalCritic)": PRMRewardShaper(push_env(), push_sub, gamma=0.98),
        "PointMaze: env.step (raw)": TimedEnv(make_env(maze)),
        "PointMaze: PRMRewardShaper(constant critic)": PRMRewardShaper(TimedEnv(make_env(maze)), maze_const,
                                                                       gamma=0.99),
        "PointMaze: PRMRewardShaper(constant critic, deadline_s=0.005)": PRMRewardShaper(
            TimedEnv(make_env(maze)), maze_const, gamma=0.99, deadline_s=0.005),
    }
    # row labels are the keys of the recorded data: they keep the vector shapers' former names
    # (VecPRMRewardShaper = SB3VecPRMRewardShaper, PRMRewardShaperVector = GymVectorPRMRewardShaper)
    vec = {
        f"DummyVecEnv({n}): raw": (TimedVecEnv(DummyVecEnv([lambda: make_env(push)] * n)), "sb3"),
        f"DummyVecEnv({n}): VecPRMRewardShaper(OnnxCritic)": (
            SB3VecPRMRewardShaper(TimedVecEnv(DummyVecEnv([lambda: make_env(push)] * n)), dyn, gamma=0.98), "sb3"),
        f"make_vec({n}, sync): raw": (TimedVector(gym.make_vec(push, num_envs=n, vectorization_mode="sync")), "gym"),
        f"make_vec({n}, sync): PRMRewardShaperVector(OnnxCritic)": (
            GymVectorPRMRewardShaper(TimedVector(gym.make_vec(push, num_envs=n, vectorization_mode="sync")), dyn,
                                     gamma=0.98), "gym"),
    }
    if not raw_rows:
        for k in [k for k in single if k.endswith("(raw)")]:
            single.pop(k).close()
        for k in [k for k in vec if k.endswith(": raw")]:
            vec.pop(k)[0].close()
    return single, vec


def _actions(n: int) -> dict:
    rng = np.random.default_rng(0)
    actions = {"single": rng.uniform(-1, 1, (512, 4)).astype(np.float32)}
    actions["sb3"] = actions["gym"] = rng.uniform(-1, 1, (64, n, 4)).astype(np.float32)
    return actions


def bench_shaper(args, paths, bar, against=None) -> dict:
    """Single FetchPush-v4 env: raw, shaper (constant critic / OnnxCritic / + pruner / ``info_subgoals`` /
    deadline / SubgoalCritic); PointMaze_UMaze-v3 with a constant critic with and without a deadline; and
    ``args.n_envs`` FetchPush envs in an SB3 DummyVecEnv and a gymnasium SyncVectorEnv, raw and with the
    vector shapers (OnnxCritic, dynamic batch). All in one interleaved run; with ``against`` (``(worker,
    tag)``, ``--against REV``) the same variants at the revision take their turn in every round."""
    clock = _CriticClock()
    n = args.n_envs
    single, vec = _shaper_variants(n, paths, args.spinning, clock)
    actions = _actions(n)
    res_single = _step_rounds({k: (e, "single") for k, e in single.items()}, actions, args.rounds,
                              max(1, args.shaper_steps // args.rounds), bar, clock, against, "single")
    res_vec = _step_rounds(vec, actions, args.rounds, max(1, args.vec_steps // args.rounds), bar, clock, against, "vec")
    out = {"single": {}, "vec": {}, "n_envs": n}
    for group, res in (("single", res_single), ("vec", res_vec)):
        for k in res["total"]:
            tot = np.asarray(res["total"][k], np.float64)
            own = tot - np.asarray(res["inner"][k], np.float64)
            crit = np.asarray(res["critic"][k], np.float64)
            wrap = own - crit
            out[group][k] = {"p50": _pcts(tot)[0], "p99": _pcts(tot)[1], "mean": float(tot.mean()) / 1e3,
                             "self_p50": float(np.median(own)) / 1e3, "self_mean": float(own.mean()) / 1e3,
                             "critic_p50": float(np.median(crit)) / 1e3, "critic_mean": float(crit.mean()) / 1e3,
                             "wrapper_p50": float(np.median(wrap)) / 1e3, "wrapper_mean": float(wrap.mean()) / 1e3,
                             "cpu": float(np.median(res["cpu"][k])), "n": len(tot)}
    out["deadline_fallbacks"] = {k: e.stats["fallbacks"] for k, e in single.items() if "deadline" in k}
    if against is not None:
        worker, tag = against
        out["deadline_fallbacks"].update({f"{k} {tag}": v for k, v in worker({"fallbacks": True}).items()})
    for e in single.values():
        e.close()
    for e, _ in vec.values():
        e.close()
    return out


def _worker(config: dict):
    """``--worker``: the shaper section's variants without the raw envs, over the library this process
    imports (``--against``): one round of a group per request, the deadline variants' fallbacks at the end."""
    import torch

    torch.set_num_threads(1)
    clock = _CriticClock()
    with tempfile.TemporaryDirectory(prefix="prm_latency_worker_") as d:  # the critics read their files when built
        single, vec = _shaper_variants(config["n_envs"], _critic_files(Path(d))[1], config["spinning"], clock,
                                       raw_rows=False)
    rounds = round_server({"single": {k: (e, "single") for k, e in single.items()}, "vec": vec},
                          _actions(config["n_envs"]), config["per_round"], clock)

    def step(req: dict) -> dict:
        if "fallbacks" in req:
            return {k: e.stats["fallbacks"] for k, e in single.items() if "deadline" in k}
        return rounds(req)

    return {}, step


def _critic_files(d: Path) -> tuple:
    """The FetchPush-sized state critic (seeded) and its batch-1 and dynamic ONNX exports in ``d``."""
    import torch

    from prm_critic.models.state_critic import StateCriticNet
    from prm_critic.onnx import export_state_critic

    torch.manual_seed(0)
    net = StateCriticNet(31, hidden=(256, 256), activation="relu").eval()
    rng = np.random.default_rng(0)
    net.set_normalization(rng.normal(0, 1, 31), rng.uniform(0.1, 2.0, 31))
    layout = {"keys": ["observation", "achieved_goal", "desired_goal"],
              "sizes": {"observation": 25, "achieved_goal": 3, "desired_goal": 3}}
    return net, {1: export_state_critic(net, d / "c.b1.onnx", batch=1, task="FetchPush-v4", layout=layout),
                 "dynamic": export_state_critic(net, d / "c.onnx", task="FetchPush-v4", layout=layout)}


def bench_in_loop(args, paths, bar) -> dict:
    """The critic right after a MuJoCo step (caches cold) vs called again at once (caches hot), through
    ``OnnxCritic.score_one(x, check=False)`` (the shaper's call), a bare onnxruntime IOBinding run of the
    same batch-1 model (what the runtime itself costs, without prm-critic's Python), and
    ``NumpyMLPCritic.score_one(x, check=False)`` (the same file run with numpy: the fast path). The three
    take turns in blocks of consecutive steps (a control loop calls the same critic every step, so only
    the physics step runs between two of its calls); the first step of each block is not counted."""
    import onnxruntime as ort

    from prm_critic.onnx import NumpyMLPCritic, OnnxCritic
    from prm_critic.robotics.make import make_env

    env = make_env("FetchPush-v4")
    critic = OnnxCritic(paths[1], provider="cpu", env=env, allow_spinning=args.spinning)
    fast = NumpyMLPCritic(paths[1], env=env)
    layout = critic.layout
    rng = np.random.default_rng(1)
    obs, _ = env.reset(seed=0)
    pc = time.perf_counter_ns
    sess = _cpu_session(ort, paths[1], args.spinning)
    xin = np.zeros((1, 31), np.float32)
    xout = np.zeros((1, 2), np.float32)
    io = sess.io_binding()
    io.bind_cpu_input("obs", xin)
    io.bind_output("scores", "cpu", 0, np.float32, [1, 2], xout.ctypes.data)
    turns = (("cold", "hot", critic.score_one), ("ort_cold", "ort_hot", None), ("fast_cold", "fast_hot", fast.score_one))
    times: dict[str, list[int]] = {k: [] for cold, hot, _ in turns for k in (cold, hot)}
    block = max(2, args.shaper_steps // args.rounds // len(turns))
    for r in range(args.rounds + 1):
        for cold, hot, score_one in turns:
            for i in range(block):
                obs, _, term, trunc, _ = env.step(rng.uniform(-1, 1, 4))
                x = layout.flatten(obs)
                if score_one is None:
                    xin[0] = x
                    t0 = pc()
                    sess.run_with_iobinding(io)
                    t1 = pc()
                    sess.run_with_iobinding(io)
                    t2 = pc()
                else:
                    t0 = pc()
                    score_one(x, check=False)
                    t1 = pc()
                    score_one(x, check=False)
                    t2 = pc()
                if r and i:  # round 0 is warm-up; a block's first step follows another path's calls
                    times[cold].append(t1 - t0)
                    times[hot].append(t2 - t1)
                if term or trunc:
                    obs, _ = env.reset()
        if r and bar is not None:
            bar.update(1)
    env.close()
    names = {"cold": COLD_KEY, "hot": HOT_KEY,
             "ort_cold": "onnxruntime IOBinding run after env.step (cold caches)",
             "ort_hot": "onnxruntime IOBinding run repeated at once (hot caches)",
             "fast_cold": FAST_COLD_KEY, "fast_hot": FAST_HOT_KEY}
    return {names[k]: (_pcts(times[k]), len(times[k])) for k in names}


GPU_BATCHES = (1, 16, 64, 1024, 4096)


def bench_gpu(args, paths) -> tuple[list[dict], str]:
    """The CUDA provider against the same machine's CPU provider (1 thread, IOBinding) and torch on CUDA,
    interleaved, per batch size: batch 1 through ``OnnxCritic.score_one`` with a captured CUDA graph, the
    larger batches through ``OnnxCritic.score`` (host buffers: the copies in and out are in the time).
    Every path's scores are compared with torch on the CPU; the largest difference is recorded."""
    import onnxruntime as ort
    import torch

    if "CUDAExecutionProvider" not in ort.get_available_providers():
        return [], "skipped: no CUDA (CUDAExecutionProvider not available in this onnxruntime)"
    from prm_critic.onnx import OnnxCritic

    net = args.net
    gnet = None
    if torch.cuda.is_available():
        import copy

        gnet = copy.deepcopy(net).cuda().eval()
    rows = []
    rng = np.random.default_rng(0)
    cg = OnnxCritic(paths[1], provider="cuda", strict=True, cuda_graph=True)
    dyn = OnnxCritic(paths["dynamic"], provider="cuda", strict=True)
    cpu_b1 = OnnxCritic(paths[1], provider="cpu", allow_spinning=args.spinning)
    cpu_dyn = OnnxCritic(paths["dynamic"], provider="cpu", allow_spinning=args.spinning)
    for b in GPU_BATCHES:
        x = rng.standard_normal((b, 31)).astype(np.float32)
        if b == 1:
            v = x[0].copy()
            methods = {"OnnxCritic CUDA EP + CUDA graph (score_one)": lambda v=v: cg.score_one(v),
                       "OnnxCritic CPU EP, 1 thread (score_one)": lambda v=v: cpu_b1.score_one(v)}
        else:
            methods = {"OnnxCritic CUDA EP (score, host buffers)": lambda x=x: dyn.score(x),
                       "OnnxCritic CPU EP, 1 thread (score)": lambda x=x: cpu_dyn.score(x)}
        if gnet is not None:
            def torch_cuda(x=x):
                with torch.inference_mode():
                    return gnet(torch.from_numpy(x).cuda()).cpu()
            methods["torch CUDA eager (host in, host out)"] = torch_cuda
        with torch.inference_mode():
            ref = net(torch.from_numpy(x)).numpy()
        diffs = {}
        for k, fn in methods.items():
            out = fn()
            if isinstance(out, torch.Tensor):
                got = out.numpy()
            elif isinstance(out, tuple):  # score_one: (progress, success)
                got = np.asarray([out], dtype=np.float32)
            else:  # StepScores
                got = np.stack([out.progress, out.success], axis=-1)
            diffs[k] = float(np.max(np.abs(got - ref)))
            if diffs[k] > 1e-4:  # a benchmark of wrong answers is no benchmark
                raise AssertionError(f"{k} at batch {b}: scores differ from torch on the CPU by {diffs[k]:.3g} (> 1e-4)")
        calls = max(args.min_calls, int(args.iters / max(1.0, b / 16)))
        times = _interleaved(methods, args.rounds, max(1, calls // args.rounds), args.warmup)
        stats = {k: _pcts(t) for k, t in times.items()}
        cpu_p50 = next(p[0] for k, p in stats.items() if "CPU EP" in k)
        for k, (p50, p99, p999) in stats.items():
            rows.append({"batch": b, "method": k, "p50": p50, "p99": p99, "p999": p999, "n": len(times[k]),
                         "per_row": p50 / b, "vs_cpu": cpu_p50 / p50, "max_abs_diff": diffs[k]})
    return rows, "measured"


def gpu_machine() -> str:
    import onnxruntime as ort
    import torch

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no CUDA device seen by torch"
    return (f"{gpu}; {platform.machine()} CPU, {os.cpu_count()} logical cores, nothing else running; "
            f"Python {platform.python_version()}, torch {torch.__version__}, onnxruntime {ort.__version__} "
            f"(providers: {', '.join(ort.get_available_providers())}); {time.strftime('%Y-%m-%d')}")


def _render_gpu(gpu: dict | None, note: str) -> list[str]:
    lines = ["## GPU (CUDA EP)", ""]
    if not gpu or not gpu.get("gpu_rows"):
        return lines + [f"unmeasured — {(gpu or {}).get('gpu_note', note)}.", ""]
    lines += [f"Measured on: {gpu['machine']}", "", "Reproduce on a CUDA machine with `onnxruntime-gpu`:", "",
              "```bash", gpu["command"], "```", "",
              "Batch 1 replays a captured CUDA graph (`cuda_graph=True`, IOBinding, static shapes); larger batches "
              "use the dynamic export with host buffers, so the copies to and from the GPU are in each call. "
              "The CPU provider (1 thread, IOBinding) and torch on CUDA run interleaved on the same machine. "
              "*max |diff|*: the largest difference from torch on the CPU over the batch's scores.", "",
              "| batch | method | p50 | p99 | p99.9 | p50 per row | CPU p50 / p50 | max abs diff | calls |",
              "|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in gpu["gpu_rows"]:
        lines.append(f"| {r['batch']} | {r['method']} | {r['p50']:.1f} | {r['p99']:.1f} | {r['p999']:.1f} | "
                     f"{r['per_row']:.4f} | {r['vs_cpu']:.2f}x | {r['max_abs_diff']:.1e} | {r['n']} |")
    cuda = [r for r in gpu["gpu_rows"] if "CUDA EP" in r["method"]]
    big = [r for r in cuda if r["batch"] == max(GPU_BATCHES)]
    if big:
        r = big[0]
        lines += ["", f"Batch {r['batch']}: the CUDA provider's p50 is {r['p50']:.1f} µs "
                  f"({1e3 * r['per_row']:.1f} ns per row), {r['vs_cpu']:.2f}x the same machine's one-thread CPU provider."]
    one = [r for r in cuda if r["batch"] == 1]
    wins = [r["batch"] for r in cuda if r["vs_cpu"] > 1]
    if one:
        lines += ["", f"In a control loop (batch 1) the GPU is the slower choice: {one[0]['p50']:.1f} µs per call against "
                  f"{one[0]['p50'] * one[0]['vs_cpu']:.1f} µs on one CPU thread (the launch and the copies cost more "
                  "than the whole product on the CPU). Use `provider=\"cpu\"` for a single env; the CUDA provider pays "
                  + (f"from batch {min(wins)} of the measured sizes (vector envs, labelling, offline scoring)."
                     if wins else "at none of the measured sizes.")]
    return lines + [""]


def render(raw: dict, gpu: dict | None = None) -> str:
    """The markdown of ``docs/latency.md`` from the raw-data file's content (and the GPU raw data, where
    one was measured: ``--gpu-only``)."""
    rows, shaper, in_loop = raw["rows"], raw.get("shaper"), raw.get("in_loop")
    gpu_note = raw.get("gpu_note", "")
    lines = ["# Critic latency: torch eager vs onnxruntime", ""]
    lines += ["Reproduce (from the repository root, CPU, about 5 minutes on 2 shared cores):", "", "```bash",
              raw["command"], "```", "",
              f"Generated by `python -m benchmarks.latency --render` from `{RAW.relative_to(ROOT).as_posix()}`, "
              "the raw data that command measured.", ""]
    lines += ["Measured on: " + raw["machine"], ""]
    lines += _render_headline(in_loop, shaper)
    lines += ["![p50 latency per method and batch size](latency.png)", "",
              "Critic: `StateCriticNet(31, hidden=(256, 256), activation='relu')` (FetchPush-v4 size), exported "
              "with `export_state_critic` (opset 18; batch 1 uses the fixed batch-1 export, other batches the "
              "dynamic one). One thread everywhere; torch under `inference_mode`. Times are per call in "
              "microseconds; methods interleaved in rounds on the same inputs, outputs checked equal "
              "(rtol 1e-4, atol 1e-5). `OnnxCritic.*` includes input validation and the copy into the bound buffer.",
              "", "## CPU: per-call latency (µs)", "",
              "| batch | method | p50 | p99 | p99.9 | p50 per row | speed-up vs torch (p50) | calls |",
              "|---:|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['batch']} | {r['method']} | {r['p50']:.1f} | {r['p99']:.1f} | {r['p999']:.1f} | "
                     f"{r['per_row']:.3f} | {r['speedup']:.2f}x | {r['n']} |")
    b1 = {r["method"]: r for r in rows if r["batch"] == 1}
    io = b1["ORT IOBinding"]
    lines += ["", "Goals in a tight loop (batch 1, hot caches: not what a control loop pays, see the headline above):", "",
              f"- ONNX (IOBinding) p50 <= 8 µs: **{'met' if io['p50'] <= 8 else 'not met'}** ({io['p50']:.1f} µs; "
              f"`OnnxCritic.score_one` {b1['OnnxCritic.score_one']['p50']:.1f} µs)",
              f"- ONNX >= 4x faster than torch eager (p50): **{'met' if io['speedup'] >= 4 else 'not met'}** "
              f"({io['speedup']:.2f}x; `score_one` {b1['OnnxCritic.score_one']['speedup']:.2f}x)", ""]
    if shaper is not None:
        lines += _render_shaper(shaper, raw.get("against"))
    if in_loop is not None:
        fast = FAST_COLD_KEY in in_loop
        lines += ["## The critic inside a control loop (µs per `OnnxCritic.score_one`, batch-1 export)", "",
                  "A MuJoCo step evicts the critic's weights (~290 KB) from the core's caches; the first call after "
                  "`env.step` pays for reloading them. This is the figure that matters in a control loop. The bare "
                  "onnxruntime run of the same model "
                  + ("(the three take turns in blocks of consecutive steps, as a control loop calls the same critic "
                     "every step; a block's first step is not counted) " if fast else "(steps alternate between the two) ")
                  + "shows how much of the cold cost is the runtime's own"
                  + ("; `NumpyMLPCritic` runs the same file with numpy (the batch-1 fast path, its scores within "
                     "1e-5 of onnxruntime's)." if fast else "."), "",
                  "| call | p50 | p99 | p99.9 | calls |", "|---|---:|---:|---:|---:|"]
        for k, ((p50, p99, p999), n) in in_loop.items():
            lines.append(f"| {k} | {p50:.1f} | {p99:.1f} | {p999:.1f} | {n} |")
        lines.append("")
    lines += _render_gpu(gpu, gpu_note)
    return "\n".join(lines) + "\n"


COLD_KEY = "OnnxCritic.score_one after env.step (cold caches)"
HOT_KEY = "OnnxCritic.score_one repeated at once (hot caches)"
FAST_COLD_KEY = "NumpyMLPCritic.score_one after env.step (cold caches)"
FAST_HOT_KEY = "NumpyMLPCritic.score_one repeated at once (hot caches)"
GOAL_IN_LOOP_US = 20.0
GOAL_E2E = 0.05


def _render_headline(in_loop: dict | None, shaper: dict | None) -> list[str]:
    """The figures a control loop pays, first: the critic's call right after the physics step (cold
    caches) beside the hot figure, and the shaped step's CPU time against the raw step's, with the
    goals' verdicts computed from them."""
    if not in_loop or COLD_KEY not in in_loop:
        return []
    cold, hot = in_loop[COLD_KEY][0][0], in_loop[HOT_KEY][0][0]
    lines = ["## Headline: the critic in the control loop", "",
             "What a robot's control loop pays is the critic's call right after the physics step, when the "
             "step has evicted the critic's weights from the caches, and the whole shaped step against the raw "
             "one in CPU time. The per-call table further down is a tight loop with hot caches.", "",
             "| figure | value |", "|---|---:|",
             f"| `OnnxCritic.score_one` after `env.step`, p50 (cold) | {cold:.1f} µs |",
             f"| the same call repeated at once, p50 (hot) | {hot:.1f} µs |",
             f"| cold / hot | {cold / hot:.1f}x |"]
    goals = [f"- critic call in the control loop <= {GOAL_IN_LOOP_US:.0f} µs p50 (cold, FetchPush-v4 critic "
             f"256x256): **{'met' if cold <= GOAL_IN_LOOP_US else 'not met'}** ({cold:.1f} µs; hot {hot:.1f} µs; "
             "the distilled 9 KB student: `docs/critic_distill.md`)"]
    if FAST_COLD_KEY in in_loop:
        fcold, fhot = in_loop[FAST_COLD_KEY][0][0], in_loop[FAST_HOT_KEY][0][0]
        lines += [f"| `NumpyMLPCritic.score_one` (the same file, numpy) after `env.step`, p50 (cold) | {fcold:.1f} µs |",
                  f"| the same call repeated at once, p50 (hot) | {fhot:.1f} µs |"]
        goals.append(f"- the same with `NumpyMLPCritic` (numpy, the batch-1 fast path) <= {GOAL_IN_LOOP_US:.0f} µs "
                     f"p50 (cold): **{'met' if fcold <= GOAL_IN_LOOP_US else 'not met'}** ({fcold:.1f} µs; hot "
                     f"{fhot:.1f} µs; its shaped step end to end: `docs/wrappers_overhead.md`)")
    single = (shaper or {}).get("single", {})
    raw = single.get("FetchPush: env.step (raw)")
    if raw is not None:
        lines.append(f"| raw FetchPush-v4 `env.step`, CPU time per step | {raw['cpu']:.1f} µs |")
        lines.append(f"| the cold critic call as a share of it | {100 * cold / raw['cpu']:.1f}% |")
        for k, label in (("FetchPush: PRMRewardShaper(OnnxCritic)", "shaper(OnnxCritic)"),
                         ("FetchPush: DeadEndPruner(PRMRewardShaper(OnnxCritic))", "pruner over shaper(OnnxCritic)")):
            if k in single:
                e2e = single[k]["cpu"] / raw["cpu"] - 1
                lines.append(f"| {label}: CPU time per step vs the raw step | {e2e:+.1%} |")
                goals.append(f"- end to end, {label} <= +{GOAL_E2E:.0%} CPU time over the raw step (load as "
                             f"noted above): **{'met' if e2e <= GOAL_E2E else 'not met'}** ({e2e:+.1%})")
    return lines + ["", "Goals:", ""] + goals + [""]


def _pct(part: float, whole: float) -> str:
    return f"{100 * part / whole:.1f}%"


def _table(first: str, rows: dict, raw_of, cols: list) -> list[str]:
    """A markdown table: one row per ``rows`` entry, a cell per ``(header, cell(v, raw))`` of ``cols``, where
    ``raw`` is the raw env's measurement of the row's group (``raw_of(label)``)."""
    lines = [f"| {first} | " + " | ".join(h for h, _ in cols) + " |", "|---" + "|---:" * len(cols) + "|"]
    for k, v in rows.items():
        lines.append(f"| {k} | " + " | ".join(cell(v, raw_of(k)) for _, cell in cols) + " |")
    return lines


def _rel(key: str):
    return lambda v, raw: f"{100 * (v[key] - raw[key]) / raw[key]:+.1f}%"


def _col(key: str, fmt: str = ".1f", div: float = 1):
    return lambda v, raw: f"{v[key] / div:{fmt}}" if div != 1 else f"{v[key]:{fmt}}"


_CPU = [("CPU", _col("cpu")), ("CPU vs raw", lambda v, raw: f"{v['cpu'] / raw['cpu']:.3f}x")]
_SPLIT = [("self p50", _col("self_p50")), ("critic p50", _col("critic_p50")), ("wrapper p50", _col("wrapper_p50"))]


def _revision_notes(sh: dict, against: dict | None) -> list[str]:
    """What the tagged rows ran: ``[at COMMIT]`` the library at ``--against REV``; ``[earlier ...]`` (older raw
    data) copies of the previous release's code that the script then carried."""
    keys = [*sh["single"], *sh["vec"]]
    lines = []
    if against:
        lines.append(f"Rows marked `[at {against['commit'][:10]}]` ran the library as it was at `{against['rev']}` "
                     f"(commit {against['commit']}), checked out with `git worktree` and stepped in a subprocess "
                     "in the same interleaved rounds (`--against REV`); their *vs raw* figures are against the "
                     "raw env of this run.")
    if any("[earlier" in k for k in keys):
        lines.append("Rows marked `[earlier ...]` ran copies of the previous release's per-step code (the critic "
                     "through `score()` instead of the batch-1 path, the earlier flattening and vector `step_wait`) "
                     "that this script carried when this data was measured; earlier code is now timed against a "
                     "git revision (`--against REV`).")
    return lines + ([""] if lines else [])


def _render_shaper(sh: dict, against: dict | None = None) -> list[str]:
    single, vec, n = sh["single"], sh["vec"], sh["n_envs"]
    lines = ["## Wrapper overhead in the control loop (µs per step, one interleaved run)", "",
             "Every env sits on a pass-through timer and every critic on a call timer, so each step splits, "
             "within the same call, into the inner env's time, the critic's time (*critic*) and the wrapper's "
             "own work (*wrapper*: flatten and validate the observation, the shaping term, the info keys; "
             "*self* = critic + wrapper). Splits measured within one call are barely touched by load from other "
             "processes; the end-to-end overhead (p50 and mean vs the raw env, measured in separate steps) is "
             "shown too and is the noisier figure. The critic is called right after a MuJoCo step, with its "
             "weights evicted from the caches (see the control-loop section below).", "",
             "*CPU*: the thread's CPU time per step over each round (resets excluded; median of rounds) and its ratio to the raw "
             "env's: the end-to-end figure least touched by other processes.", "", *_revision_notes(sh, against)]
    raws = {k.split(":")[0]: v for k, v in single.items() if k.endswith("(raw)")}
    lines += _table("env", single, lambda k: raws[k.split(":")[0]], [
        ("p50", _col("p50")), ("p99", _col("p99")), ("mean", _col("mean")), ("vs raw (p50)", _rel("p50")),
        ("vs raw (mean)", _rel("mean")), *_CPU, *_SPLIT,
        ("self / raw p50", lambda v, raw: _pct(v["self_p50"], raw["p50"])),
        ("wrapper / raw p50", lambda v, raw: _pct(v["wrapper_p50"], raw["p50"])), ("steps", _col("n", "d"))])
    key = "FetchPush: PRMRewardShaper(OnnxCritic)"
    raw = raws["FetchPush"]
    cur = single[key]
    share = 100 * cur["self_p50"] / raw["p50"]
    e2e = 100 * (cur["p50"] - raw["p50"]) / raw["p50"]
    lines += ["", f"Goal: shaper cost <= 5% of a FetchPush step (no deadline, critic included): "
              f"**{'met' if share <= 5 else 'not met'}** (self time {cur['self_p50']:.1f} µs = {share:.1f}% of the "
              f"raw step's p50 {raw['p50']:.1f} µs: critic {cur['critic_p50']:.1f} µs, wrapper "
              f"{cur['wrapper_p50']:.1f} µs = {_pct(cur['wrapper_p50'], raw['p50'])}; end-to-end p50 {e2e:+.1f}%)."]
    sk = "FetchPush: PRMRewardShaper(SubgoalCritic)"
    if sk in single:
        c = single[sk]["critic_p50"]
        lines += [f"Goal: `SubgoalCritic` batch-1 call <= 20 µs in the control loop: **{'met' if c <= 20 else 'not met'}** "
                  f"({c:.1f} µs; CPU per step {single[sk]['cpu'] / raws['FetchPush']['cpu']:.3f}x the raw env's)."]
    mk = "PointMaze: PRMRewardShaper(constant critic)"
    if "PointMaze" in raws and mk in single and "cpu" in raws["PointMaze"]:
        m = single[mk]["cpu"] / raws["PointMaze"]["cpu"] - 1
        lines += [f"Goal: PointMaze constant-critic overhead <= 10% (CPU time per step): "
                  f"**{'met' if m <= 0.10 else 'not met'}** ({100 * m:+.1f}%)."]
    tag = lambda k: k.split(":")[0] + (k[k.index(" [at "):] if " [at " in k else "")
    lines += ["Deadline variants fell back "
              + ", ".join(f"{v} times ({tag(k)})" for k, v in sh["deadline_fallbacks"].items())
              + " (critic later than 5 ms).", ""]
    lines += [f"### {n} FetchPush-v4 envs, one critic call per vector step (µs per vector step)", "",
              f"The critic scores all sub-envs' observations in one batch-{n} call of the dynamic export.", ""]
    vraws = {k.split(":")[0]: v for k, v in vec.items() if k.endswith("raw")}
    lines += _table("vector env", vec, lambda k: vraws[k.split(":")[0]], [
        ("p50", _col("p50")), ("mean", _col("mean")), ("vs raw (p50)", _rel("p50")), *_CPU, *_SPLIT,
        ("self per env-step", _col("self_p50", ".2f", n)), ("wrapper per env-step", _col("wrapper_p50", ".2f", n)),
        ("steps", _col("n", "d"))])
    vk = f"DummyVecEnv({n}): VecPRMRewardShaper(OnnxCritic)"
    per, wper = vec[vk]["self_p50"] / n, vec[vk]["wrapper_p50"] / n
    lines += ["", f"Goal: `VecPRMRewardShaper` <= 3 µs per env-step over {n} envs: "
              f"**{'met' if per <= 3 else 'not met'}** with the critic call ({per:.2f} µs: critic "
              f"{vec[vk]['critic_p50'] / n:.2f} µs, wrapper {wper:.2f} µs); the wrapper's own work alone: "
              f"**{'met' if wper <= 3 else 'not met'}** ({wper:.2f} µs).", ""]
    return lines


def plot(raw: dict, path: Path) -> None:
    """Grouped bars of p50 latency per batch size and method (log scale), and the shaper overhead, from the raw data."""
    rows, shaper = raw["rows"], raw.get("shaper")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    methods = list(dict.fromkeys(r["method"].replace("OnnxCritic.score_one", "OnnxCritic.score") for r in rows))
    fig, axes = plt.subplots(1, 2 if shaper else 1, figsize=(14 if shaper else 7, 4.8), squeeze=False)
    ax = axes[0, 0]
    width = 0.8 / len(methods)
    for j, m in enumerate(methods):
        ys = [next((r["p50"] for r in rows if r["batch"] == b and
                    r["method"].replace("OnnxCritic.score_one", "OnnxCritic.score") == m), np.nan) for b in BATCHES]
        label = "OnnxCritic (score_one at batch 1)" if m == "OnnxCritic.score" else m
        ax.bar(np.arange(len(BATCHES)) + (j - (len(methods) - 1) / 2) * width, ys, width, label=label)
    ax.set_yscale("log")
    ax.set_xticks(np.arange(len(BATCHES)), [f"batch {b}" for b in BATCHES])
    ax.set_ylabel("p50 per call (µs, log)")
    ax.set_title("State critic 31-256-256-2, 1 thread, CPU")
    ax.legend(fontsize=8)
    if shaper:
        ax = axes[0, 1]
        st = shaper["single"]
        names = list(st)
        y = np.arange(len(names))
        ax.barh(y, [st[k]["p50"] for k in names], color="tab:gray", label="p50 step")
        ax.barh(y, [st[k]["critic_p50"] for k in names], color="tab:blue", label="critic (in the step)")
        ax.barh(y, [st[k]["wrapper_p50"] for k in names], left=[st[k]["critic_p50"] for k in names],
                color="tab:red", label="wrapper's own work")
        short = [n.replace("PRMRewardShaper", "Shaper").replace("DeadEndPruner", "Pruner") for n in names]
        ax.set_yticks(y, short, fontsize=6)
        ax.invert_yaxis()
        ax.set_xlabel("µs per env.step (p50)")
        ax.set_title("Wrapper overhead in the control loop")
        ax.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--iters", type=int, default=20000, help="timed calls per method at batch <= 16 (default 20000)")
    p.add_argument("--min-calls", type=int, default=300, help="minimum timed calls per method at large batches")
    p.add_argument("--rounds", type=int, default=20, help="interleaving rounds (default 20)")
    p.add_argument("--warmup", type=int, default=200, help="untimed warm-up calls per method (default 200)")
    p.add_argument("--shaper-steps", type=int, default=3000, help="timed env steps per single-env shaper variant")
    p.add_argument("--vec-steps", type=int, default=200, help="timed vector steps per vector variant")
    p.add_argument("--n-envs", type=int, default=16, help="sub-envs of the vector variants (default 16)")
    p.add_argument("--no-shaper", action="store_true", help="skip the reward-shaper section")
    p.add_argument("--no-spinning", dest="spinning", action="store_false",
                   help="session.intra_op.allow_spinning=0 (kinder to shared cores)")
    p.add_argument("--out", default=None,
                   help="also write the raw data (--raw), the markdown rendered from it to this file "
                        "(e.g. docs/latency.md) and a PNG next to it")
    p.add_argument("--raw", type=Path, default=RAW, help="raw-data JSON written with --out and read by --render")
    p.add_argument("--render", action="store_true", help="only write --md from --raw (no measurement)")
    p.add_argument("--md", type=Path, default=DOC, help="markdown written by --render")
    p.add_argument("--gpu-only", action="store_true",
                   help="measure only the GPU section (needs onnxruntime-gpu and a CUDA device) and write it to "
                        "--gpu-raw, which --render merges into the doc")
    p.add_argument("--gpu-raw", type=Path, default=GPU_RAW, help="GPU raw-data JSON (--gpu-only writes, --render reads)")
    add_arguments(p, "the shaper section's variants")
    args = p.parse_args(argv)
    if args.worker:
        return serve(args.worker, _worker)
    if args.render:
        print(f"wrote {render_file(args.raw, args.md, args.gpu_raw)}")
        return 0
    args.argv = [a for a in argv]
    for name in ("iters", "min_calls", "rounds", "warmup", "shaper_steps", "vec_steps", "n_envs"):
        if getattr(args, name) <= 0:
            p.error(f"--{name.replace('_', '-')}: expected a positive int, got {getattr(args, name)}")
    if args.against and (args.no_shaper or args.gpu_only):
        p.error("--against times the shaper section: expected it without --no-shaper and --gpu-only")

    import onnxruntime as ort
    import torch
    from tqdm import tqdm

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as d, contextlib.ExitStack() as stack:
        net, paths = _critic_files(Path(d))
        args.net = net
        if args.gpu_only:
            return _gpu_only(args, paths)
        total = len(BATCHES) * args.rounds + (0 if args.no_shaper else 3 * args.rounds)
        load0 = os.getloadavg() if hasattr(os, "getloadavg") else None
        against = commit = None
        if args.against:
            path, commit = stack.enter_context(checkout(args.against))
            config = {"n_envs": args.n_envs, "spinning": args.spinning, "per_round": {
                "single": max(1, args.shaper_steps // args.rounds), "vec": max(1, args.vec_steps // args.rounds)}}
            against = (stack.enter_context(Worker("benchmarks.latency", path, config)), f"[at {commit[:10]}]")
        with tqdm(total=total, desc="latency rounds", file=sys.stderr) as bar:
            rows = bench_critic(args, paths, net, bar)
            shaper = None if args.no_shaper else bench_shaper(args, paths, bar, against)
            in_loop = None if args.no_shaper else bench_in_loop(args, paths, bar)
        gpu_rows, gpu_note = bench_gpu(args, paths)
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    env_info = (f"{platform.machine()} CPU, {os.cpu_count()} logical cores shared with other jobs "
                f"(1-min load average {load0[0]:.1f} at the start, {load[0]:.1f} at the end)"
                if load and load0 else f"{platform.machine()} CPU")
    env_info += (f"; Python {platform.python_version()}, torch {torch.__version__}, onnxruntime {ort.__version__}, "
                 f"allow_spinning={'1' if args.spinning else '0'}; {time.strftime('%Y-%m-%d')}")
    raw = {"about": "Latencies in microseconds measured by benchmarks/latency.py; docs/latency.md is rendered "
                    "from this file (--render).",
           "command": f"python -m benchmarks.latency {' '.join(args.argv)}".rstrip(), "machine": env_info,
           **({"against": {"rev": args.against, "commit": commit}} if args.against else {}), "rows": rows, "shaper": shaper,
           "in_loop": None if in_loop is None else {k: [list(p), n] for k, (p, n) in in_loop.items()},
           "gpu_rows": gpu_rows, "gpu_note": gpu_note}
    text = render(raw, _read_gpu(args.gpu_raw))
    print(text)
    if gpu_note != "measured":
        print(gpu_note, file=sys.stderr)
    if args.out:
        from prm_critic._io import atomic_write_bytes

        atomic_write_bytes(args.raw, (json.dumps(raw, indent=1) + "\n").encode())
        atomic_write_bytes(Path(args.out), text.encode())
        png = Path(args.out).with_suffix(".png")
        plot(raw, png)
        print(f"wrote {args.raw}, {args.out} and {png}", file=sys.stderr)
    return 0


def _read_gpu(path: Path) -> dict | None:
    return json.loads(Path(path).read_text()) if Path(path).exists() else None


def _gpu_only(args, paths) -> int:
    gpu_rows, gpu_note = bench_gpu(args, paths)
    if gpu_note != "measured":
        print(f"--gpu-only: {gpu_note}", file=sys.stderr)
        return 1
    raw = {"about": "GPU latencies in microseconds measured by benchmarks/latency.py --gpu-only; "
                    "docs/latency.md renders them in its GPU section.",
           "command": f"python -m benchmarks.latency {' '.join(args.argv)}".rstrip(), "machine": gpu_machine(),
           "gpu_rows": gpu_rows, "gpu_note": gpu_note}
    from prm_critic._io import atomic_write_bytes

    atomic_write_bytes(args.gpu_raw, (json.dumps(raw, indent=1) + "\n").encode())
    print("\n".join(_render_gpu(raw, gpu_note)))
    print(f"wrote {args.gpu_raw}", file=sys.stderr)
    return 0


def render_file(raw_path: Path = RAW, md_path: Path = DOC, gpu_path: Path = GPU_RAW) -> Path:
    from prm_critic._io import atomic_write_bytes

    atomic_write_bytes(md_path, render(json.loads(Path(raw_path).read_text()), _read_gpu(gpu_path)).encode())
    return Path(md_path)


if __name__ == "__main__":
    sys.exit(main())
