"""``prm-critic label``: write step labels (subgoal, Monte-Carlo or outcome) for collected data."""

from __future__ import annotations


from prm_critic.commands.collect import add_executor_args


def register(sub) -> None:
    p = sub.add_parser("label", help="label collected steps: subgoal | mc | outcome")
    p.add_argument("--data", required=True, help="folder written by `prm-critic collect`")
    p.add_argument("--family", required=True, choices=["subgoal", "mc", "outcome"], help="label family")
    p.add_argument("--k", type=int, default=8, help="mc: continuations per state (default 8)")
    p.add_argument("--stride", type=int, default=1, help="mc: label every stride-th step (default 1)")
    p.add_argument("--gamma", type=float, default=0.99, help="outcome: discount (default 0.99)")
    p.add_argument("--seed", type=int, default=0, help="mc: rollout seed (default 0)")
    p.add_argument("--rollout-policy", default="scripted", help="mc: scripted | random | PATH/policy.json (train-policy checkpoint) | PATH.zip (needs --trust-pickle)")
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
                policy_loader=load_policy_on_cpu, **executor_kwargs(args))
    tab = load_steps(args.data, args.family)
    lab = tab.success[tab.mask]
    print(f"{out}: {int(tab.mask.sum())} of {len(tab)} steps labelled, mean label {lab.mean():.3f}")
    return 0
