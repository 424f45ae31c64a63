"""Cost of the PRM env wrappers in the control loop, current and reference per-step paths side by side in one run.

Single envs (FetchPush-v4, PointMaze_UMaze-v3), µs of CPU time per ``env.step``: the raw env, the
reward shaper with a constant critic (the wrapper's own work), with the no-training
``SubgoalCritic`` (its batch-1 path ``score_one``), shaper + dead-end pruner, ``info_subgoals=True``,
a torch state critic (256x256 MLP, one thread), and the committed FetchPush critic (256x256) and its
distilled student (32x32) exported to ONNX, each run by onnxruntime (``OnnxCritic``) and by numpy
(``NumpyMLPCritic``, the batch-1 fast path for small critics). Rows marked ``[reference]`` run the previous
per-step path in the same run: the previous flattening (a shape tuple per step, through the flattener
instance), critic call (through a closure) and info (two dicts merged), a pruner over a shaper with
another critic flattening the observation again, and, for the ``SubgoalCritic``, its batched numpy path
(``score(x[None])``, ``holds(x[None])``), which is what the shaper called before the batch-1 path
existed. A floor row: a wrapper doing only the per-step work any shaper must do (flatten, finiteness
check, info copy; no size checks, no critic). ``n_envs`` FetchPush envs in an SB3 ``DummyVecEnv``
raw and under ``SB3VecPRMRewardShaper`` (one batched critic call per vector step; the row keeps the
label of its recorded data, ``VecPRMRewardShaper``, the class's former name).

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

    python benchmarks/wrappers_overhead.py --out docs/wrappers_overhead.md
    python benchmarks/wrappers_overhead.py --render
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
import types
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RAW = ROOT / "benchmarks" / "results" / "wrappers_overhead.json"
DOC = ROOT / "docs" / "wrappers_overhead.md"
GOAL_SUBGOAL_US = 20.0
GOAL_WRAPPER_US = 5.0
GOAL_MAZE_CONST = 0.10
GOAL_IN_LOOP_US = 20.0
GOAL_E2E = 0.05


class _PreviousFlattener:
    """The flattening of the previous version (a shape tuple per step, compared with the expected
    shapes; one concatenation; the row checked finite by the sum of its Python floats; called through
    the instance), kept here so that the benchmark puts it side by side with the current one."""

    def __init__(self, layout):
        import operator

        self._shapes = tuple((layout.sizes[k],) for k in layout.keys)
        self._get = operator.itemgetter(*layout.keys)
        self._shape = operator.attrgetter("shape")

    def __call__(self, obs, name="observation"):
        parts = self._get(obs)
        assert tuple(map(self._shape, parts)) == self._shapes
        out = np.concatenate(parts, dtype=np.float32, casting="same_kind")
        assert math.isfinite(sum(out.tolist()))
        return out


_NAN = float("nan")


def _previous_entry(caller):
    """The previous handle to the critic's ``score_one``: a closure that adds ``check=False`` when it
    takes that keyword."""
    fn = caller._score_one
    return (lambda x, _fn=fn: _fn(x, check=False)) if fn is not None and caller._one_check else fn


def _previous_one(caller, x):
    """The previous ``CriticCaller.one`` without a deadline: the critic's ``score_one`` through a
    closure that adds ``check=False`` (or ``score(x[None])`` for a critic without it)."""
    caller.stats["calls"] += 1
    caller.last_heads = None
    if caller._score_one is None:
        out, caller.last_heads = caller._run_one(x)
        return out
    progress, success = caller.previous_entry(x)
    heads = {"progress": float(progress), "success": float(success)}
    v = heads[caller.head]
    assert math.isfinite(v)
    caller.last_heads = heads
    return v


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


def _previous_shaper_step(self, action):
    """The previous ``PRMRewardShaper.step``: the info built by merging two dicts."""
    if self._x is None:
        raise RuntimeError("step: call reset() before step()")
    obs, reward, terminated, truncated, info = self.env.step(action)
    x_next = self._flatten(obs)
    phi_next = _previous_one(self._caller, x_next)
    heads = self._caller.last_heads
    phi = self._phi
    r = float(reward)
    subgoals = self._subgoals(x_next) if self._eval_subgoals else None
    if self.mode == "subgoal":
        new = [n for n, b in subgoals.items() if b and n not in self._claimed]
        self._claimed.update(new)
        shaping = self.subgoal_bonus * len(new)
    elif phi_next is None or phi is None:
        shaping = 0.0
    elif self.mode == "potential":
        shaping = self.scale * (self.gamma * (0.0 if terminated else phi_next) - phi)
    else:
        shaping = self.scale * phi_next - r
    info = {**info, "prm_original_reward": r, "prm_phi": _NAN if phi is None else phi,
            "prm_next_phi": _NAN if phi_next is None else phi_next, "prm_shaping": float(shaping),
            "prm_fallback": phi_next is None, "prm_terminated": bool(terminated), "prm_x": self._x,
            "prm_next_x": x_next}
    if self.info_subgoals:
        info["prm_subgoals"] = subgoals
    if heads is not None:
        info["prm_next_scores"] = heads
    self._x, self._phi = x_next, phi_next
    return obs, r + shaping, terminated, truncated, info


def _previous_pruner_step(self, action):
    """The previous ``DeadEndPruner.step``: with another critic than the shaper's below, the observation
    flattened a second time; the info built by merging two dicts."""
    obs, reward, terminated, truncated, info = self.env.step(action)
    self._elapsed += 1
    if self._shares_shaper:
        c = self._score(obs, info)
    else:
        c = _previous_one(self._caller, self._flatten(obs))
    if c is None:
        self._unknown += 1
        pruned = False
    else:
        self._below = self._below + 1 if c < self.threshold else 0
        pruned = bool(self._below >= self.patience and not terminated and not truncated)
    info = {**info, "prm_pruned": pruned, "prm_prune_score": float("nan") if c is None else c}
    if pruned:
        truncated = True
        self._pruned += 1
        if self.max_episode_steps is not None:
            self._saved += max(self.max_episode_steps - self._elapsed, 0)
    if (terminated or truncated) and self._active:
        self._episodes += 1
        self._active = False
    return obs, reward, terminated, truncated, info


def _timers():
    """``latency.py``'s pass-through timing wrappers (gym and SB3 VecEnv), loaded by path."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("prm_bench_latency", Path(__file__).resolve().parent / "latency.py")
    assert spec is not None and spec.loader is not None
    latency = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(latency)
    timed_env, _, timed_vec_env = latency._timed_wrappers()
    return timed_env, timed_vec_env


class _CriticClock:
    """Adds up the time spent inside critic calls (``score`` / ``score_one``) of the critics it wraps."""

    ns = 0

    def wrap(self, critic):
        import functools

        pc = time.perf_counter_ns
        for name in ("score", "score_one"):
            fn = getattr(critic, name, None)
            if not callable(fn):
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


def _build(n_envs: int, clock: _CriticClock, tmp: Path):
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
    TimedEnv, TimedVecEnv = _timers()

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

    class BatchedSubgoalCritic(SubgoalCritic):
        """The SubgoalCritic without its batch-1 path: the shaper calls ``score(x[None])``."""

        score_one = None  # type: ignore[assignment]

    class ReferenceShaper(PRMRewardShaper):
        """The previous per-step path: previous flattening, critic call and info; subgoals through the
        batched ``holds``."""

        step = _previous_shaper_step

        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            self._flatten = _PreviousFlattener(self.layout)
            self._caller.previous_entry = _previous_entry(self._caller)

        def _subgoals(self, x):
            if self.evaluator is None:
                return None
            h = self.evaluator.holds(x[None, :])[0]
            return {n: bool(b) for n, b in zip(self.evaluator.names, h)}

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

    class ReferencePruner(DeadEndPruner):
        """The previous per-step path of the pruner: previous flattening (again, over a shaper with
        another critic), critic call and info."""

        step = _previous_pruner_step

        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            self._flatten = _PreviousFlattener(self.layout)
            self._caller.previous_entry = _previous_entry(self._caller)

    single: dict[str, dict] = {}
    critics: dict = {}
    for task, gamma in (("FetchPush-v4", 0.98), ("PointMaze_UMaze-v3", 0.99)):
        probe = make_env(task)
        layout = CriticInputLayout.from_space(load_spec(task), probe.observation_space)
        const = clock.wrap(ConstantCritic(layout, task))
        sub = clock.wrap(SubgoalCritic(task, probe))
        ref = clock.wrap(BatchedSubgoalCritic(task, probe))

        def env(task=task):
            return TimedEnv(make_env(task))

        v = single[task] = {
            "raw env": env(),
            "pass-through gym.Wrapper (floor)": PassThrough(env()),
            FLATTEN_FLOOR: flatten_floor(layout)(env()),
            "shaper(constant critic)": PRMRewardShaper(env(), const, gamma=gamma),
            "shaper(constant critic) [reference]": ReferenceShaper(env(), const, gamma=gamma),
            DEADLINE_ROW: PRMRewardShaper(env(), const, gamma=gamma, deadline_s=1.0),
            f"{DEADLINE_ROW} [executor]": ExecutorDeadlineShaper(env(), const, gamma=gamma, deadline_s=1.0),
            "shaper(SubgoalCritic)": PRMRewardShaper(env(), sub, gamma=gamma),
            "shaper(SubgoalCritic) [reference]": ReferenceShaper(env(), ref, gamma=gamma),
        }
        if task == "FetchPush-v4":
            net = StateCriticNet(layout.obs_dim, hidden=(256, 256))
            tc = clock.wrap(TorchStateCritic(net, {"layout": layout.to_dict()}))
            v.update({
                "pruner(shaper(SubgoalCritic))": DeadEndPruner(PRMRewardShaper(env(), sub, gamma=gamma), sub,
                                                               threshold=0.0, patience=10),
                "pruner(shaper(SubgoalCritic)) [reference]": ReferencePruner(
                    ReferenceShaper(env(), ref, gamma=gamma), ref, threshold=0.0, patience=10),
                "shaper(SubgoalCritic, info_subgoals=True)": PRMRewardShaper(env(), sub, gamma=gamma,
                                                                             info_subgoals=True),
                "shaper(SubgoalCritic, info_subgoals=True) [reference]": ReferenceShaper(
                    env(), ref, gamma=gamma, info_subgoals=True),
                "shaper(torch 256x256)": PRMRewardShaper(env(), tc, gamma=gamma),
            })
            for label, exported in _onnx_critics(tmp, probe).items():
                oc = clock.wrap(exported)
                critics[label] = oc
                v[f"shaper({label})"] = PRMRewardShaper(env(), oc, gamma=gamma)
                if label == f"NumpyMLPCritic {TEACHER_NAME}":
                    v[f"shaper({label}) [reference]"] = ReferenceShaper(env(), oc, gamma=gamma)
                if label.endswith(TEACHER_NAME):  # the README's deploy loop: Phi = the export, pruned on the subgoals
                    v[f"pruner(SubgoalCritic) over shaper({label})"] = DeadEndPruner(
                        PRMRewardShaper(env(), oc, gamma=gamma), sub, threshold=0.05, patience=20)
                    if label.startswith("NumpyMLPCritic"):
                        v[f"pruner(SubgoalCritic) over shaper({label}) [reference]"] = ReferencePruner(
                            ReferenceShaper(env(), oc, gamma=gamma), sub, threshold=0.05, patience=20)
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
    return single, vec, critics


#: the row of the shaper calling its critic on its deadline thread (never late: the hand-over's cost)
DEADLINE_ROW = "shaper(constant critic, deadline_s=1)"
#: the row of a wrapper doing only the per-step work any shaper must do (no checks, no critic)
FLATTEN_FLOOR = "floor: flatten + finiteness check + info copy, no critic"
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


def _inner(env):
    e = env
    while not hasattr(e, "inner_ns"):
        e = getattr(e, "env", None) or e.venv
    return e


def _rounds(variants: dict, actions: np.ndarray, rounds: int, steps: int, clock: _CriticClock, vector: bool,
            bar) -> dict:
    """Interleaved rounds; per variant: CPU µs per step of each round, and per step the total, inner
    and critic ns (perf counter). Round 0 is warm-up."""
    pc, tt = time.perf_counter_ns, time.thread_time_ns
    cpu: dict[str, list[float]] = {k: [] for k in variants}
    split: dict[str, dict[str, list[int]]] = {k: {"total": [], "inner": [], "critic": []} for k in variants}
    for e in variants.values():
        if vector:
            e.seed(0)
            e.reset()
        else:
            e.reset(seed=0)
    for r in range(rounds + 1):
        for k, e in variants.items():
            inner = _inner(e)
            tot, inn, cri = split[k]["total"], split[k]["inner"], split[k]["critic"]
            c_start = tt()
            for i in range(steps):
                a = actions[i % len(actions)]
                before, c0 = inner.inner_ns, clock.ns
                t0 = pc()
                out = e.step(a)
                dt = pc() - t0
                if r:
                    tot.append(dt)
                    inn.append(inner.inner_ns - before)
                    cri.append(clock.ns - c0)
                if not vector and (out[2] or out[3]):
                    r0 = tt()
                    e.reset()
                    c_start += tt() - r0  # resets are not steps: a pruner that ends episodes early resets more
            if r:
                cpu[k].append((tt() - c_start) / steps / 1e3)
        if bar is not None:
            bar.update(1)
    rows = {}
    for k in variants:
        t = np.asarray(split[k]["total"], np.float64)
        own = t - np.asarray(split[k]["inner"], np.float64)
        crit = np.asarray(split[k]["critic"], np.float64)
        rows[k] = {"cpu_us": float(np.median(cpu[k])), "cpu_rounds": [round(c, 3) for c in cpu[k]],
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


def measure(args) -> dict:
    from tqdm import tqdm

    import tempfile

    clock = _CriticClock()
    tmp = Path(tempfile.mkdtemp(prefix="prm_wrappers_overhead_"))
    single, vec, critics = _build(args.n_envs, clock, tmp)
    rng = np.random.default_rng(0)
    out: dict = {"rows": {}, "vec": {}}
    load0 = os.getloadavg()
    with tqdm(total=(len(single) + 1) * (args.rounds + 1) + 1, desc="rounds", file=sys.stderr) as bar:
        for task, variants in single.items():
            n_act = variants["raw env"].action_space.shape[0]
            acts = rng.uniform(-1, 1, (512, n_act)).astype(np.float32)
            out["rows"][task] = _rounds(variants, acts, args.rounds, args.steps, clock, False, bar)
        acts = rng.uniform(-1, 1, (64, args.n_envs, 4)).astype(np.float32)
        out["vec"] = _rounds(vec, acts, args.rounds, args.vec_steps, clock, True, bar)
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
        "# Env wrappers in the control loop: CPU time per step, current and reference paths", "",
        "Reproduce (from the repository root, CPU):", "", "```bash", raw["command"], "```", "",
        "Generated by `python benchmarks/wrappers_overhead.py --render` from "
        "`benchmarks/results/wrappers_overhead.json`, the raw data that command measured.", "",
        "Measured on: " + raw["machine"], "",
        f"{s['rounds']} interleaved rounds of {s['steps']} steps per variant (vector envs: {s['vec_steps']} vector "
        "steps), after a warm-up round. *CPU µs / step*: the thread's CPU time per round (resets excluded) divided by its steps, "
        "median over rounds; *vs raw*: its ratio to the raw env of the same task. *self*, *critic*, *wrapper*: "
        "medians over all steps of the per-step split (the wrapper's time below the outer `step` and above the "
        "inner env's; *critic* = inside the critic's `score_one` / `score`; *wrapper* = self - critic). The "
        "critic is called right after a MuJoCo step (cold caches). `[reference]`: the previous per-step path "
        "in the same run (the previous flattening, a shape tuple per step through the flattener instance; the "
        "previous critic call, through a closure; the info built by merging two dicts; a pruner over a shaper "
        "with another critic flattening the observation again; for the `SubgoalCritic`, its batched numpy "
        "path `score(x[None])` and `holds(x[None])`). *" + FLATTEN_FLOOR + "*: a wrapper doing only what "
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
    vrows = raw["vec"]
    vraw = vrows[f"DummyVecEnv({n}) raw"]["cpu_us"]
    lines += [f"## {n} FetchPush-v4 envs, one critic call per vector step", "",
              "| vector env | CPU µs / vector step | vs raw | self p50 µs | critic p50 µs | wrapper p50 µs | wrapper per env-step µs | steps |",
              "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for k, r in vrows.items():
        lines.append(f"| {k} | {r['cpu_us']:.1f} | {r['cpu_us'] / vraw:.3f}x | {r['self_p50']:.1f} | "
                     f"{r['critic_p50']:.1f} | {r['wrapper_p50']:.1f} | {r['wrapper_p50'] / n:.2f} | {r['steps']} |")
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


def _task_tables(rows_by_task: dict, level: str, suffix: str) -> list[str]:
    """One table per task of single-env variants (CPU time per step against the raw env, per-step split)."""
    lines = []
    for task, rows in rows_by_task.items():
        raw_cpu = rows["raw env"]["cpu_us"]
        lines += [f"{level} {task}{suffix}", "",
                  "| variant | CPU µs / step | vs raw | self p50 µs | critic p50 µs | wrapper p50 µs | wrapper mean µs | steps |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|"]
        for k, r in rows.items():
            lines.append(f"| {k} | {r['cpu_us']:.1f} | {r['cpu_us'] / raw_cpu:.3f}x | {r['self_p50']:.1f} | "
                         f"{r['critic_p50']:.1f} | {r['wrapper_p50']:.1f} | {r['wrapper_mean']:.1f} | {r['steps']} |")
        lines.append("")
    return lines


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
    sub = [(t, raw["rows"][t]["shaper(SubgoalCritic)"]["critic_p50"],
            raw["rows"][t]["shaper(SubgoalCritic) [reference]"]["critic_p50"]) for t in raw["rows"]]
    w_now, w_ref = push["shaper(constant critic)"]["wrapper_p50"], push["shaper(constant critic) [reference]"]["wrapper_p50"]
    mz = maze["shaper(constant critic)"]["cpu_us"] / maze["raw env"]["cpu_us"] - 1
    mz_ref = maze["shaper(constant critic) [reference]"]["cpu_us"] / maze["raw env"]["cpu_us"] - 1
    ch = raw.get("cold_hot")
    lines: list[str] = []
    lines += [f"- `SubgoalCritic` batch-1 call <= {GOAL_SUBGOAL_US:.0f} µs in the control loop: "
              + _goal(all(c <= GOAL_SUBGOAL_US for _, c, _ in sub)) + " ("
              + "; ".join(f"{t}: {c:.1f} µs, reference path {r:.1f} µs" for t, c, r in sub) + ")"]
    if ch:
        for k in (f"{runner} {name}" for name in (TEACHER_NAME, STUDENT_NAME) for runner in RUNNERS):
            if k in ch:
                lines += [f"- {k}: batch-1 call <= {GOAL_IN_LOOP_US:.0f} µs p50 in the control loop (cold): "
                          + _goal(ch[k]["cold"]["p50"] <= GOAL_IN_LOOP_US)
                          + f" ({ch[k]['cold']['p50']:.1f} µs cold; hot {ch[k]['hot']['p50']:.1f} µs)"]
    floor = push.get("pass-through gym.Wrapper (floor)")
    flat = push.get(FLATTEN_FLOOR)
    lines += [f"- shaper's own work <= {GOAL_WRAPPER_US:.0f} µs per FetchPush step (constant critic, wrapper p50): "
              + _goal(w_now <= GOAL_WRAPPER_US) + f" ({w_now:.1f} µs; reference path {w_ref:.1f} µs"
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
            ref = push.get(f"{k} [reference]")
            lines += [f"- end to end, {k} <= +{GOAL_E2E:.0%} CPU time over the raw FetchPush step ("
                      + ("load as noted above" if condition is None else condition) + "): " + _goal(e2e <= GOAL_E2E)
                      + f" ({e2e:+.1%}" + (f"; reference path {ref['cpu_us'] / raw_push - 1:+.1%}" if ref else "") + ")"]
    mz_flat = maze.get(FLATTEN_FLOOR)
    lines += [f"- PointMaze constant-critic overhead <= {GOAL_MAZE_CONST:.0%} of the raw step (CPU time): "
              + _goal(mz <= GOAL_MAZE_CONST) + f" ({mz:+.1%}; reference path {mz_ref:+.1%}"
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
    argv = sys.argv[1:] if argv is None else argv
    args = p.parse_args(argv)
    from prm_critic._io import atomic_write_bytes

    if args.render:
        atomic_write_bytes(args.md, render(json.loads(Path(args.raw).read_text())).encode())
        return 0
    raw = measure(args)
    shown = [a if not a.startswith("/") else Path(a).name for a in argv]
    if args.idle:
        if not Path(args.raw).exists():
            raise SystemExit(f"--idle: {args.raw} does not exist (expected the loaded measurement to add the idle one to)")
        full = json.loads(Path(args.raw).read_text())
        raw["machine"] = raw["machine"].replace("shared with other jobs", "with the other jobs paused")
        full["idle"] = {"command": f"python benchmarks/wrappers_overhead.py {' '.join(shown)}".rstrip(),
                        "note": args.note, **raw}
        full.pop("previous_idle", None)  # this code's idle measurement replaces the previous code's
        raw = full
    else:
        raw = {"about": "CPU time and per-step splits in microseconds measured by benchmarks/wrappers_overhead.py; "
                        "docs/wrappers_overhead.md is rendered from this file (--render).",
               "command": f"python benchmarks/wrappers_overhead.py {' '.join(shown)}".rstrip(), **raw}
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
