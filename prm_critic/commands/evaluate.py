"""``prm-critic evaluate``: run a saved policy on its own task (unshaped success and return over seeded
episodes; optional video of the first ones). The library form is :func:`prm_critic.sb3.evaluate_policy`."""

from __future__ import annotations

EVAL_SEED = 10_000  # prm_critic.sb3.evaluate.EVAL_SEED (not imported: --help needs no stable-baselines3)


DESCRIPTION = """\
Load a policy saved by prm-critic train-policy and run it on the task stored in its policy.json, without
shaping or pruning, over --episodes episodes (episode i reset with seed --seed + i, the seeds of
train-policy's own evaluation). Prints the success rate and the mean return with 95% intervals; with
--out, writes evaluation.json (per-episode values) and, with --video-episodes, a GIF of each recorded
episode.

  prm-critic evaluate runs/policy --episodes 20
  MUJOCO_GL=egl prm-critic evaluate runs/policy --episodes 20 --out runs/policy/eval --video-episodes 2
"""


def register(sub) -> None:
    p = sub.add_parser("evaluate",
                       help="run a saved policy on its own task: unshaped success rate and return over seeded episodes",
                       description=DESCRIPTION)
    p.add_argument("policy", help="a train-policy output folder, or its policy.json / .safetensors / their stem")
    p.add_argument("--task", default=None,
                   help="the task you expect, built-in task name or a spec .toml path: refused when it is not the "
                        "policy's (default: the task in policy.json)")
    p.add_argument("--episodes", type=int, default=50, help="episodes to run")
    p.add_argument("--seed", type=int, default=EVAL_SEED, help="seed of the first episode; episode i uses seed + i")
    p.add_argument("--stochastic", action="store_true", help="sample actions from the policy instead of its mean action")
    p.add_argument("--out", default=None, help="folder for evaluation.json and the GIFs (default: print only)")
    p.add_argument("--video-episodes", type=int, default=0,
                   help="record this many first episodes as GIFs in --out (needs an env that renders; without a "
                        "display, MuJoCo needs MUJOCO_GL=egl)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace another evaluation in --out (other policy file, task, seeds or settings) instead of "
                        "refusing it")
    p.add_argument("--device", default="cpu", help="torch device of the policy")
    p.set_defaults(func=run)


def run(args) -> int:
    from prm_critic.sb3.evaluate import evaluate_policy, save_evaluation

    if args.video_episodes and args.out is None:
        raise ValueError(f"--video-episodes: needs --out (the folder for the GIFs), got --video-episodes "
                         f"{args.video_episodes} alone")
    ev = evaluate_policy(args.policy, task=args.task, episodes=args.episodes, seed=args.seed,
                         deterministic=not args.stochastic, video_episodes=args.video_episodes, device=args.device)
    print("\n".join(ev.lines()))
    if args.out is not None:
        paths = save_evaluation(ev, args.out, overwrite=args.overwrite)
        print(f"wrote {', '.join(str(p) for p in paths)}")
    return 0
