"""Cost of the PRM env wrappers on FetchPush-v4, side by side in one run.

A. Single env, µs per ``env.step``: the raw env, the shaper with a torch state critic (256x256 MLP)
   called synchronously and under a deadline (one worker thread), the shaper with the
   no-training ``SubgoalCritic``, and shaper + dead-end pruner (two critic calls per step).
B. ``n_envs`` envs in a ``DummyVecEnv``, µs per vector step: raw, one ``PRMRewardShaper`` per env
   (``n_envs`` critic calls of batch 1 per step), and ``VecPRMRewardShaper`` (one call of batch
   ``n_envs`` + dones per step).

Every variant runs in interleaved rounds (A for n steps, B for n steps, ... repeated), so a burst of
load from other processes hits all alike; the table reports the median over rounds of the mean step
time and the best round (least disturbed by load), each with its ratio to the raw env. Torch runs
on one thread.

Run (about 3 minutes on a loaded 2-core machine; quiet-machine time unmeasured)::

    python benchmarks/wrappers_overhead.py
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def _build(n_envs: int):
    from stable_baselines3.common.vec_env import DummyVecEnv

    from prm_critic.critic import BaseCritic, StepScores
    from prm_critic.models.state_critic import StateCriticNet, TorchStateCritic
    from prm_critic.robotics.make import CriticInputLayout, make_env
    from prm_critic.robotics.spec import load_spec
    from prm_critic.robotics.subgoals import SubgoalCritic
    from prm_critic.sb3 import VecPRMRewardShaper
    from prm_critic.wrappers import DeadEndPruner, PRMRewardShaper

    task = "FetchPush-v4"
    probe = make_env(task)
    layout = CriticInputLayout.from_space(load_spec(task), probe.observation_space)
    torch_critic = TorchStateCritic(StateCriticNet(layout.obs_dim, hidden=(256, 256)), {"layout": layout.to_dict()})
    sub = SubgoalCritic(task, probe)

    class ConstantCritic(BaseCritic):
        """Near-free critic: isolates the wrapper's own bookkeeping (flatten, checks, info)."""

        obs_dim = layout.obs_dim

        def score(self, steps):
            n = len(steps)
            return StepScores(np.full(n, 0.5, np.float32), np.full(n, 0.5, np.float32))

    const = ConstantCritic()
    single = {
        "raw env": make_env(task),
        "shaper(constant critic)": PRMRewardShaper(make_env(task), const, gamma=0.98, layout=layout),
        "shaper(torch)": PRMRewardShaper(make_env(task), torch_critic, gamma=0.98),
        "shaper(torch, deadline_s=0.05)": PRMRewardShaper(make_env(task), torch_critic, gamma=0.98, deadline_s=0.05),
        "shaper(SubgoalCritic)": PRMRewardShaper(make_env(task), sub, gamma=0.98),
        "pruner(shaper(torch))": DeadEndPruner(PRMRewardShaper(make_env(task), torch_critic, gamma=0.98),
                                               torch_critic, threshold=0.0, patience=10),
    }
    vec = {
        "DummyVecEnv raw": DummyVecEnv([lambda: make_env(task)] * n_envs),
        f"DummyVecEnv of {n_envs} shaper(torch)": DummyVecEnv(
            [lambda: PRMRewardShaper(make_env(task), torch_critic, gamma=0.98)] * n_envs),
        "VecPRMRewardShaper(torch)": VecPRMRewardShaper(DummyVecEnv([lambda: make_env(task)] * n_envs),
                                                        torch_critic, gamma=0.98),
    }
    return single, vec


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=300, help="steps per variant per round")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--n-envs", type=int, default=8)
    args = p.parse_args(argv)
    import torch
    from tqdm import tqdm

    torch.set_num_threads(1)
    single, vec = _build(args.n_envs)
    rng = np.random.default_rng(0)
    times: dict[str, list[float]] = {k: [] for k in [*single, *vec]}
    for env in single.values():
        env.reset(seed=0)
    for venv in vec.values():
        venv.seed(0)
        venv.reset()
    a1 = rng.uniform(-1, 1, size=(args.steps, 4)).astype(np.float32)
    an = rng.uniform(-1, 1, size=(args.steps, args.n_envs, 4)).astype(np.float32)
    pc = time.perf_counter
    for _ in tqdm(range(args.rounds), desc="rounds"):
        for name, env in single.items():
            t0 = pc()
            for a in a1:
                _, _, term, trunc, _ = env.step(a)
                if term or trunc:
                    env.reset()
            times[name].append((pc() - t0) / args.steps * 1e6)
        for name, venv in vec.items():
            t0 = pc()
            for a in an:
                venv.step(a)
            times[name].append((pc() - t0) / args.steps * 1e6)
    med = {k: float(np.median(v)) for k, v in times.items()}
    best = {k: float(np.min(v)) for k, v in times.items()}
    raw1, rawn = med["raw env"], med["DummyVecEnv raw"]
    braw1, brawn = best["raw env"], best["DummyVecEnv raw"]
    print(f"\nFetchPush-v4, {args.rounds} interleaved rounds x {args.steps} steps, torch threads 1\n")
    print("| single env | µs / step, median of rounds | vs raw | µs / step, best round | vs raw |")
    print("|---|---:|---:|---:|---:|")
    for k in single:
        print(f"| {k} | {med[k]:.0f} | {med[k] / raw1:.3f}x | {best[k]:.0f} | {best[k] / braw1:.3f}x |")
    print(f"\n| {args.n_envs} envs | µs / vector step, median | vs raw | best round | vs raw | critic calls / step |")
    print("|---|---:|---:|---:|---:|---:|")
    calls = {"DummyVecEnv raw": 0, f"DummyVecEnv of {args.n_envs} shaper(torch)": args.n_envs,
             "VecPRMRewardShaper(torch)": 1}
    for k in vec:
        print(f"| {k} | {med[k]:.0f} | {med[k] / rawn:.3f}x | {best[k]:.0f} | {best[k] / brawn:.3f}x | {calls[k]} |")
    dl = single["shaper(torch, deadline_s=0.05)"].stats
    print(f"\ndeadline variant: {dl['calls']} calls, {dl['fallbacks']} fallbacks")


if __name__ == "__main__":
    main()
