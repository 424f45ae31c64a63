"""``prm-critic label``: write step labels (subgoal, Monte-Carlo, binary-search Monte-Carlo or outcome)."""

from __future__ import annotations


from prm_critic.commands.collect import add_executor_args


DESCRIPTION = """\
Write one label family's step labels for the trajectories in a folder written by prm-critic collect,
as DATA/labels/FAMILY/shard_*.npz (resumable per shard: a labelled shard is kept). The families:

{families}

An option a family does not take is refused. Next step: prm-critic train-critic --data DATA
--family FAMILY --out CRITIC.

  prm-critic label --data runs/pm --family mc --k 8 --stride 4
"""


def register(sub) -> None:
    from prm_critic.commands._help import add_trust_pickle
    from prm_critic.robotics.families import OPTION_DEFAULTS, families_taking, get_label_family, label_families

    def takers(option: str) -> str:
        return ", ".join(families_taking(option))

    def default(option: str) -> str:
        # family options default to None (not given): label() refuses one given to a family that does not take it
        return f" (default: {OPTION_DEFAULTS[option]})"

    names = label_families()
    width = max(len(n) for n in names)
    families = "\n".join(f"  {n:<{width}}  {get_label_family(n).description or '(a registered family)'}" for n in names)
    p = sub.add_parser("label", help=f"label collected steps: {' | '.join(names)}",
                       description=DESCRIPTION.format(families=families))
    p.add_argument("--data", required=True, help="data folder written by prm-critic collect")
    p.add_argument("--family", "--label", dest="family", required=True, choices=names,
                   help="label family (the list above); --label is the same option")
    p.add_argument("--k", type=int, default=None, help=f"{takers('k')}: continuations per estimated state" + default("k"))
    p.add_argument("--stride", type=int, default=None,
                   help=f"{takers('stride')}: label every stride-th step" + default("stride"))
    p.add_argument("--gamma", type=float, default=None, help=f"{takers('gamma')}: discount" + default("gamma"))
    p.add_argument("--threshold", type=float, default=None,
                   help=f"{takers('threshold')}: a success estimate at or below this counts as dropped"
                        + default("threshold"))
    p.add_argument("--resolution", type=int, default=None,
                   help=f"{takers('resolution')}: stop bisecting when the drop is located within this many steps"
                        + default("resolution"))
    p.add_argument("--min-estimates", type=int, default=None,
                   help=f"{takers('min_estimates')}: states of each episode estimated before any search, spread "
                        "evenly over it (2: the two ends); more keeps an episode whose first and last estimates are "
                        "0 from being labelled 0 throughout" + default("min_estimates"))
    p.add_argument("--seed", type=int, default=None, help=f"{takers('seed')}: rollout seed" + default("seed"))
    p.add_argument("--rollout-policy", default=None,
                   help=f"{takers('rollout_policy')}: scripted, random, PATH/policy.json (train-policy checkpoint) or "
                        "PATH.zip (needs --trust-pickle)" + default("rollout_policy"))
    add_trust_pickle(p, "--rollout-policy")
    add_executor_args(p)
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.set_defaults(func=run, interrupted=interrupted)


def interrupted(args) -> str:
    """What Ctrl-C kept (every labelled shard) and how to resume."""
    return f"the labelled shards in {args.data}/labels are kept; run the same command again to resume"


def run(args) -> int:
    from prm_critic.commands.collect import executor_kwargs, load_policy_on_cpu
    from prm_critic.robotics.bisect_labels import read_stats
    from prm_critic.robotics.dataset import load_steps
    from prm_critic.robotics.labels import label

    out = label(args.data, args.family, k=args.k, stride=args.stride, gamma=args.gamma, seed=args.seed,
                rollout_policy=args.rollout_policy, progress=not args.no_progress, trust_pickle=args.trust_pickle,
                policy_loader=load_policy_on_cpu, threshold=args.threshold, resolution=args.resolution,
                min_estimates=args.min_estimates,
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
