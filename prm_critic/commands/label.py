"""``prm-critic label``: write step labels (subgoal, Monte-Carlo, binary-search Monte-Carlo or outcome)."""

from __future__ import annotations


from prm_critic.commands.collect import add_executor_args


def register(sub) -> None:
    p = sub.add_parser("label", help="label collected steps: subgoal | mc | mc_bisect | outcome")
    p.add_argument("--data", required=True, help="folder written by `prm-critic collect`")
    p.add_argument("--family", required=True, choices=["subgoal", "mc", "mc_bisect", "outcome"],
                   help="label family (mc_bisect: mc estimates only where a binary search for the drop of the "
                        "success estimate needs them, the other steps interpolated)")
    # family options default to None (not given): label() refuses one given to a family that does not take it
    p.add_argument("--k", type=int, default=None, help="mc, mc_bisect: continuations per estimated state (default 8)")
    p.add_argument("--stride", type=int, default=None, help="mc: label every stride-th step (default 1)")
    p.add_argument("--gamma", type=float, default=None, help="outcome: discount (default 0.99)")
    p.add_argument("--threshold", type=float, default=None,
                   help="mc_bisect: a success estimate at or below this counts as dropped (default 0)")
    p.add_argument("--resolution", type=int, default=None,
                   help="mc_bisect: stop bisecting when the drop is located within this many steps (default 1)")
    p.add_argument("--seed", type=int, default=None, help="mc, mc_bisect: rollout seed (default 0)")
    p.add_argument("--rollout-policy", default=None, help="mc, mc_bisect: scripted | random | PATH/policy.json (train-policy checkpoint) | PATH.zip (needs --trust-pickle)")
    p.add_argument("--trust-pickle", action="store_true",
                   help="allow --rollout-policy to be a stable-baselines3 .zip: loading one unpickles objects stored in the "
                        "file, which runs arbitrary code from it (only for files you trust)")
    add_executor_args(p)
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.set_defaults(func=run)


def run(args) -> int:
    from prm_critic.commands.collect import executor_kwargs, load_policy_on_cpu
    from prm_critic.robotics.dataset import load_steps
    from prm_critic.robotics.labels import label

    out = label(args.data, args.family, k=args.k, stride=args.stride, gamma=args.gamma, seed=args.seed,
                rollout_policy=args.rollout_policy, progress=not args.no_progress, trust_pickle=args.trust_pickle,
                policy_loader=load_policy_on_cpu, threshold=args.threshold, resolution=args.resolution,
                **executor_kwargs(args))
    tab = load_steps(args.data, args.family)
    lab = tab.success[tab.mask]
    line = f"{out}: {int(tab.mask.sum())} of {len(tab)} steps labelled, mean label {lab.mean():.3f}"
    if args.family in ("mc", "mc_bisect"):
        from prm_critic.robotics.bisect_labels import read_stats

        total = read_stats(args.data, args.family).get("total")
        if total:
            line += (f"; {total['estimated_states']} states estimated with {total['rollouts']} rollouts, "
                     f"{total['rollout_steps']} rollout steps")
    print(line)
    return 0
