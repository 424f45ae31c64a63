"""``prm-critic collect``: roll out a behaviour policy on a task and store resumable trajectory shards."""

from __future__ import annotations


DESCRIPTION = """\
Roll out a behaviour policy on a task and store the trajectories, with the MuJoCo state of every step
(what Monte-Carlo labels restore), as resumable shard files in OUT:

  OUT/meta.json        the task spec, observation layout, policy and seeds
  OUT/shards/*.npz     SHARD_SIZE episodes each; episode e is reset with seed SEED + e

Re-running with the same settings resumes (complete shards are kept; more episodes extend the data);
a folder that holds data collected with other settings, or more episodes, is refused, naming each
setting that differs; --overwrite replaces it whole (meta.json, shards and labels). Next step:
prm-critic label --data OUT --family subgoal (or mc, mc_bisect, outcome, steps_to_success).

  prm-critic collect --task PointMaze_UMaze-v3 --episodes 60 --out runs/pm
"""


def register(sub) -> None:
    from prm_critic.commands._help import add_trust_pickle

    p = sub.add_parser("collect", help="collect trajectories (with MuJoCo snapshots) into shards",
                       description=DESCRIPTION)
    p.add_argument("--task", required=True, help="built-in task name or a spec .toml path")
    p.add_argument("--out", required=True, help="output folder (re-run with the same settings to resume)")
    p.add_argument("--episodes", type=int, required=True, help="episodes to collect")
    p.add_argument("--policy", default="scripted",
                   help="scripted (the spec's noisy controller), random, PATH/policy.json (a train-policy checkpoint) "
                        "or PATH.zip (a stable-baselines3 model; needs --trust-pickle)")
    p.add_argument("--seed", type=int, default=0, help="episode e is reset with seed + e")
    p.add_argument("--shard-size", type=int, default=10, help="episodes per shard file")
    p.add_argument("--max-episode-steps", type=int, default=None,
                   help="episode length cap, the TimeLimit (default: the spec's max_episode_steps)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace the data in OUT (its meta.json, shards and labels) instead of resuming it")
    add_trust_pickle(p, "--policy")
    add_executor_args(p)
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.set_defaults(func=run, interrupted=interrupted)


def add_executor_args(p) -> None:
    """``--executor`` / ``--workers`` / ``--address`` (prm_critic.parallel)."""
    from prm_critic.commands._help import install

    p.add_argument("--executor", choices=["local", "ray", "auto"], default="local",
                   help=f"local: this process; ray: Ray workers (needs the ray extra: {install('ray')}); auto: Ray "
                        "where the cost model expects it to be faster (its start-up, ~12 s measured under load, needs a job of tens of "
                        "seconds to pay), local otherwise or without Ray; ray and auto print the expected speed-up "
                        "before the run (override the measured start-up with $PRM_RAY_STARTUP_S); results are "
                        "bit-identical either way")
    p.add_argument("--workers", type=int, default=None,
                   help="ray: worker processes (default: one per CPU of the Ray cluster)")
    p.add_argument("--address", default=None,
                   help="ray: address of an existing cluster ('ray start --head' prints it; 'auto' finds a local one; "
                        "gives up after $PRM_RAY_CONNECT_S seconds, 60 unless set) (default: the Ray instance this "
                        "process started, or a new local one)")


def executor_kwargs(args) -> dict:
    return {"executor": args.executor, "workers": args.workers, "address": args.address}


def load_policy_on_cpu(path):
    """Load a prm-critic policy checkpoint on the CPU (collection and MC rollouts step one env)."""
    from prm_critic.sb3 import load_policy

    return load_policy(path, device="cpu")


def interrupted(args) -> str:
    """What Ctrl-C kept (every complete shard) and how to resume."""
    return f"the complete shards in {args.out}/shards are kept; run the same command again to resume"


def run(args) -> int:
    import numpy as np

    from prm_critic.robotics.collection import collect, load_shard

    out = collect(args.task, args.out, episodes=args.episodes, policy=args.policy, seed=args.seed,
                  shard_size=args.shard_size, max_episode_steps=args.max_episode_steps,
                  progress=not args.no_progress, trust_pickle=args.trust_pickle, policy_loader=load_policy_on_cpu,
                  overwrite=args.overwrite, **executor_kwargs(args))
    per_shard = [load_shard(f, ("ep_success",))["ep_success"] for f in sorted((out / "shards").glob("shard_*.npz"))]
    ok = np.concatenate(per_shard) if per_shard else np.zeros(0, bool)
    print(f"{out}: {len(ok)} episodes, success rate {ok.mean() if len(ok) else float('nan'):.3f}")
    return 0
