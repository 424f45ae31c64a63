"""``prm-critic label``: write step labels (subgoal, Monte-Carlo, binary-search Monte-Carlo or outcome)."""

from __future__ import annotations


from prm_critic.commands.collect import add_executor_args


def register(sub) -> None:
    from prm_critic.robotics.families import families_taking, get_label_family, label_families

    def takers(option: str) -> str:
        return ", ".join(families_taking(option))

    names = label_families()
    p = sub.add_parser("label", help=f"label collected steps: {' | '.join(names)}")
    p.add_argument("--data", required=True, help="folder written by `prm-critic collect`")
    p.add_argument("--family", required=True, choices=names,
                   help="label family (" + "; ".join(f"{n}: {get_label_family(n).description}" for n in names
                                                     if get_label_family(n).description) + ")")
    # family options default to None (not given): label() refuses one given to a family that does not take it
    p.add_argument("--k", type=int, default=None, help=f"{takers('k')}: continuations per estimated state (default 8)")
    p.add_argument("--stride", type=int, default=None, help=f"{takers('stride')}: label every stride-th step (default 1)")
    p.add_argument("--gamma", type=float, default=None, help=f"{takers('gamma')}: discount (default 0.99)")
    p.add_argument("--threshold", type=float, default=None,
                   help=f"{takers('threshold')}: a success estimate at or below this counts as dropped (default 0)")
    p.add_argument("--resolution", type=int, default=None,
                   help=f"{takers('resolution')}: stop bisecting when the drop is located within this many steps "
                        "(default 1)")
    p.add_argument("--seed", type=int, default=None, help=f"{takers('seed')}: rollout seed (default 0)")
    p.add_argument("--rollout-policy", default=None, help=f"{takers('rollout_policy')}: scripted | random | PATH/policy.json (train-policy checkpoint) | PATH.zip (needs --trust-pickle)")
    p.add_argument("--trust-pickle", action="store_true",
                   help="allow --rollout-policy to be a stable-baselines3 .zip: loading one unpickles objects stored in the "
                        "file, which runs arbitrary code from it (only for files you trust)")
    add_executor_args(p)
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.set_defaults(func=run)


def run(args) -> int:
    from prm_critic.commands.collect import executor_kwargs, load_policy_on_cpu
    from prm_critic.robotics.bisect_labels import read_stats
    from prm_critic.robotics.dataset import load_steps
    from prm_critic.robotics.labels import label

    out = label(args.data, args.family, k=args.k, stride=args.stride, gamma=args.gamma, seed=args.seed,
                rollout_policy=args.rollout_policy, progress=not args.no_progress, trust_pickle=args.trust_pickle,
                policy_loader=load_policy_on_cpu, threshold=args.threshold, resolution=args.resolution,
                **executor_kwargs(args))
    tab = load_steps(args.data, args.family)
    lab = tab.success[tab.mask]
    line = f"{out}: {int(tab.mask.sum())} of {len(tab)} steps labelled, mean label {lab.mean():.3f}"
    total = read_stats(args.data, args.family).get("total")  # families that record their rollout cost
    if total:
        line += (f"; {total['estimated_states']} states estimated with {total['rollouts']} rollouts, "
                 f"{total['rollout_steps']} rollout steps")
    print(line)
    return 0
