"""Where do a benchmark run's failed evaluation episodes end? (Stuck mid-way, or hovering at the goal?)

Loads each run's final policy (``policy.safetensors`` + ``policy.json``), replays the first
``--episodes`` evaluation episodes (same seeds as the benchmark's evaluation) on the unshaped env and
prints, for the failed ones, the final straight-line distance to the goal and the spec potential
``Phi`` (``SubgoalCritic`` progress) of the last state.

    OMP_NUM_THREADS=1 python benchmarks/rl/diagnose_failures.py --task PointMaze_Medium-v3 --labels prm_s10 her prm_her_s10
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from run import RESULTS, run_dir  # noqa: E402


def diagnose(task: str, label: str, seed: int, episodes: int) -> dict:
    from prm_critic.robotics.make import make_env, success_from_info
    from prm_critic.robotics.spec import load_spec
    from prm_critic.robotics.subgoals import SubgoalCritic
    from prm_critic.sb3 import load_policy, predict

    spec = load_spec(task)
    model = load_policy(run_dir(task, label, seed, RESULTS) / "policy")
    env = make_env(spec)
    critic = SubgoalCritic(spec, env)
    n_sub = len(spec.subgoals)
    ok_n, dists, phis, final_stage, best_stage = 0, [], [], [], []
    for i in range(episodes):
        obs, _ = env.reset(seed=10_000 + i)  # the benchmark's evaluation seeds
        ok_any = ok_last = False
        best = 0
        while True:
            action, _ = predict(model, obs)
            obs, _, term, trunc, info = env.step(action)
            ok_last = bool(success_from_info(spec, info, term))
            ok_any |= ok_last
            best = max(best, int(critic.score(critic.layout.flatten(obs)[None]).extra["subgoals_reached"][0]))
            if term or trunc:
                break
        if (ok_any if spec.success.rule == "any" else ok_last):
            ok_n += 1
            continue
        s = critic.score(critic.layout.flatten(obs)[None])
        dists.append(float(np.linalg.norm(obs["achieved_goal"] - obs["desired_goal"])))
        phis.append(float(s.progress[0]))
        final_stage.append(int(s.extra["subgoals_reached"][0]))
        best_stage.append(best)
    env.close()
    hist = lambda v: " ".join(f"{k}:{v.count(k)}" for k in range(n_sub + 1))  # noqa: E731
    return {"label": label, "successes": ok_n, "episodes": episodes, "failed": len(dists),
            "dist": float(np.median(dists)) if dists else float("nan"),
            "phi": float(np.median(phis)) if phis else float("nan"),
            "final_stage": hist(final_stage), "best_stage": hist(best_stage)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", required=True)
    p.add_argument("--labels", nargs="+", required=True, help="run labels, e.g. her prm_s10 prm_her_s10")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--episodes", type=int, default=20)
    a = p.parse_args(argv)
    print(f"{a.task}, seed {a.seed}, first {a.episodes} evaluation episodes of each run's final policy")
    print("Failed episodes: median final distance to the goal, median final Phi, and how many subgoals")
    print("held at the end / at best during the episode (count of failed episodes per number of subgoals).")
    print("| run | successes | median final distance to goal | median final Phi | subgoals held at the end | most subgoals held |")
    print("|---|---|---|---|---|---|")
    for label in a.labels:
        r = diagnose(a.task, label, a.seed, a.episodes)
        print(f"| {r['label']} | {r['successes']}/{r['episodes']} | {r['dist']:.2f} | {r['phi']:.2f} | "
              f"{r['final_stage']} | {r['best_stage']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
