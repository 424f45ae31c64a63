"""``prm-critic train-policy``: train an SB3 policy (SAC / TQC / PPO, optional HER) with PRM rewards;
``--backend sbx`` trains SAC / TQC / CrossQ with SBX (JAX) instead.

    prm-critic train-policy --task FetchReach-v4 --algo sac --critic subgoal --her --steps 10000 --seed 0 --out runs/reach

Writes ``OUT/policy.safetensors`` + ``OUT/policy.json`` (load with ``prm_critic.sb3.load_policy``),
``OUT/eval.csv`` (success on the unshaped env) and ``OUT/logs`` (tensorboard + CSV).
"""

from __future__ import annotations

import argparse
import json

from prm_critic.commands._help import HelpFormatter, install


def library_backend() -> str:
    """``train_policy``'s default backend (imports the SB3 integration)."""
    from prm_critic.sb3 import TrainPolicyConfig

    return TrainPolicyConfig.backend


class _BackendDefaultFormatter(HelpFormatter):
    """Shows the library's default backend in ``--help`` (resolved only when help is printed)."""

    def _expand_help(self, action):
        text = super()._expand_help(action)
        if action.dest == "backend":
            text = f"{text} (default: the library's, {library_backend()})"
        return text


DESCRIPTION = """\
Train a policy on a task with PRM rewards: the spec's subgoal progress or a trained critic as the
potential of a shaped reward (or a subgoal bonus, or the critic's score as the reward), optional
dead-end pruning and HER, evaluated on the unshaped env. Writes OUT/policy.safetensors +
OUT/policy.json (load with prm_critic.sb3.load_policy), OUT/eval.csv (unshaped success) and OUT/logs
(TensorBoard + CSV). OUT/run.json records the run's settings: OUT holding another run is refused,
naming what differs; --resume continues the same run from its saved state; --overwrite replaces it whole.

  prm-critic train-policy --task FetchReach-v4 --algo sac --critic subgoal --her --steps 10000 --out runs/reach
  prm-critic train-policy --task PointMaze_UMaze-v3 --critic runs/pm_critic/critic.json --steps 20000 --out runs/pm
"""


def register(sub) -> None:
    p = sub.add_parser("train-policy", help="train an SB3 policy with PRM subgoal rewards (SAC/TQC/PPO, HER)",
                       description=DESCRIPTION, formatter_class=_BackendDefaultFormatter)
    p.add_argument("--task", required=True, help="built-in task name or a spec .toml path")
    p.add_argument("--algo", default="sac", help="sac, tqc or ppo; crossq with --backend sbx")
    p.add_argument("--backend", default=None,
                   help=f"sb3 (stable-baselines3, torch) or sbx (SBX, JAX: sac, tqc, crossq; needs the sbx extra: "
                        f"{install('sbx')}; no --checkpoint-freq / --resume)")
    p.add_argument("--critic", default=None,
                   help="'subgoal' (spec progress, no training) or a critic checkpoint (.json, .safetensors or .onnx) "
                        "(default: none, the env reward alone)")
    p.add_argument("--shaping", default=None,
                   help="potential, subgoal, replace, or none (default: potential with --critic, else none)")
    p.add_argument("--scale", type=float, default=1.0, help="shaping scale")
    p.add_argument("--head", default="progress", help="critic head used as the potential (progress or success)")
    p.add_argument("--her", action="store_true", help="HerReplayBuffer (off-policy algos, goal-conditioned tasks)")
    p.add_argument("--prune-threshold", type=float, default=None,
                   help="dead-end pruning threshold on the critic's success score; give with --prune-patience "
                        "(default: no pruning)")
    p.add_argument("--prune-patience", type=int, default=None,
                   help="dead-end pruning patience in steps; give with --prune-threshold (default: no pruning)")
    p.add_argument("--steps", type=int, required=True,
                   help="env-step budget (PPO's n_steps is fitted to it unless given in --algo-kwargs; "
                        "a budget the algorithm must round up is stated with the number trained)")
    p.add_argument("--seed", type=int, default=0, help="seed of the envs, the algorithm and the evaluation")
    p.add_argument("--n-envs", type=int, default=1, help="training envs stepped together (one vector env)")
    p.add_argument("--eval-freq", type=int, default=None,
                   help="evaluate on the unshaped env every N steps (default: no evaluation)")
    p.add_argument("--eval-episodes", type=int, default=50, help="episodes per evaluation")
    p.add_argument("--algo-kwargs", default=None,
                   help='JSON dict of algorithm arguments, e.g. \'{"batch_size": 512}\' (default: none, the '
                        "library's per-algorithm settings)")
    p.add_argument("--normalize-obs", action="store_true",
                   help="normalize observations with VecNormalize (obs only; the statistics are saved inside the "
                        "policy checkpoint); the RL benchmark trains with it on every task")
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=True,
                   help="progress bar on stderr over the env-step budget, with ETA; --no-progress hides it (default: shown)")
    p.add_argument("--checkpoint-freq", type=int, default=None,
                   help="save the whole training state (safetensors + JSON) to OUT/resume every N env steps "
                        "(default: never)")
    p.add_argument("--resume", action="store_true",
                   help="continue from OUT/resume when it holds a training state (same settings; --steps is the total)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace the run in OUT (policy, eval.csv, logs, training state) instead of refusing it")
    p.add_argument("--torch-threads", type=int, default=1,
                   help="torch intra-op CPU threads while training (1 is the fastest measured for these "
                        "network sizes; 0: torch's own default)")
    p.add_argument("--early-stop", type=float, default=None, metavar="SUCCESS",
                   help="stop once two consecutive evaluations reach this success rate (needs --eval-freq) "
                        "(default: train the whole budget)")
    p.add_argument("--early-stop-min-steps", type=int, default=0,
                   help="--early-stop: not before this many env steps")
    p.add_argument("--scale-steps", type=int, default=None, metavar="N",
                   help="anneal the shaping scale linearly from --scale to --scale-end over N env steps "
                        "(potential shaping with --her) (default: constant)")
    p.add_argument("--scale-end", type=float, default=None, help="--scale-steps: the final scale (default: 0)")
    p.add_argument("--demos", default=None, metavar="FOLDER",
                   help="demonstrations: the successful episodes of a data folder (prm-critic collect), used by "
                        "--demo-buffer and / or --demo-starts (default: none)")
    p.add_argument("--demos-n", type=int, default=None, metavar="N",
                   help="--demos: the first N successful episodes (default: all)")
    p.add_argument("--demo-buffer", action="store_true",
                   help="put the demonstrations into the replay buffer before training (replayed through the same "
                        "shaper; off-policy, --n-envs 1)")
    p.add_argument("--demo-starts", type=float, default=0.0, metavar="P",
                   help="start training episodes from demonstration states with probability P (default: 0)")
    p.set_defaults(func=run, interrupted=interrupted)


#: the run record in OUT, and every path a run writes there (all that --overwrite removes)
RECORD = "run.json"
OWNED = ("policy.safetensors", "policy.json", "eval.csv", "logs", "resume")
#: options that do not change what is trained (--steps is the total a resumed run goes on to)
_NOT_SETTINGS = ("func", "interrupted", "command", "progress", "resume", "overwrite", "steps", "torch_threads",
                 "checkpoint_freq")


def interrupted(args) -> str:
    """What Ctrl-C kept (the training state, when one is saved) and how to resume."""
    if args.checkpoint_freq is None:
        return ("no training state was saved (no --checkpoint-freq), so the run cannot be continued; run again "
                "with --overwrite to start over")
    return (f"the training state saved every {args.checkpoint_freq} steps in {args.out}/resume is kept; run the same "
            "command with --resume to continue from it")


def _claim_out(args) -> None:
    """The output rule for OUT: the same run resumes (with --resume, from a saved state), another run is
    refused naming what differs, --overwrite replaces it whole."""
    from pathlib import Path

    from prm_critic._io import claim_output, record_diffs, write_record

    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out: expected a folder, got {str(out)!r} (an existing file)")
    settings = {k: v for k, v in sorted(vars(args).items()) if k not in _NOT_SETTINGS}
    settings["command"] = "train-policy"
    state = out / "resume" / "latest.json"
    if args.resume and not args.overwrite and not state.exists():
        raise ValueError(f"--resume: {str(out / 'resume')!r} holds no saved training state, so there is nothing to "
                         "continue (a run saves one with --checkpoint-freq N); run without --resume to start from "
                         "step 0")
    diffs = record_diffs(out / RECORD, settings)
    if diffs is None and args.resume and state.exists():
        pass  # a run from before run records: train_policy checks the training state's own settings
    elif claim_output(out, [out / p for p in OWNED], diffs, overwrite=args.overwrite, what="--out",
                      held="a policy trained") and not args.resume:
        raise ValueError(f"--out: {str(out)!r} already holds this run; pass --resume to continue it from its saved "
                         "training state, or --overwrite to train it again from step 0")
    write_record(out / RECORD, settings)


def run(args) -> int:
    from prm_critic.sb3 import train_policy

    shaping = args.shaping
    if shaping is None:
        shaping = "potential" if args.critic is not None else None
    elif shaping == "none":
        shaping = None
    prune = None
    if (args.prune_threshold is None) != (args.prune_patience is None):
        raise ValueError(f"--prune-threshold/--prune-patience: give both or neither, got "
                         f"{args.prune_threshold!r} and {args.prune_patience!r}")
    if args.prune_threshold is not None:
        prune = {"threshold": args.prune_threshold, "patience": args.prune_patience}
        if shaping is None and args.critic is None:
            raise ValueError("--critic: pruning needs a critic ('subgoal' or a checkpoint path), got none")
    algo_kwargs = None
    if args.algo_kwargs:
        try:
            algo_kwargs = json.loads(args.algo_kwargs)
        except json.JSONDecodeError as exc:
            raise ValueError(f"--algo-kwargs: expected a JSON object, got {args.algo_kwargs!r} ({exc})") from exc
        if not isinstance(algo_kwargs, dict):
            raise ValueError(f"--algo-kwargs: expected a JSON object, got {args.algo_kwargs!r}")
    if args.torch_threads < 0:
        raise ValueError(f"--torch-threads: expected an integer >= 0 (0: torch's default), got {args.torch_threads}")
    if args.early_stop is None and args.early_stop_min_steps:
        raise ValueError(f"--early-stop-min-steps: needs --early-stop, got --early-stop-min-steps "
                         f"{args.early_stop_min_steps} alone")
    early_stop = None if args.early_stop is None else {"threshold": args.early_stop,
                                                        "min_steps": args.early_stop_min_steps}
    if args.scale_steps is None and args.scale_end is not None:
        raise ValueError(f"--scale-end: needs --scale-steps, got --scale-end {args.scale_end} alone")
    scale_schedule = None if args.scale_steps is None else {
        "end": 0.0 if args.scale_end is None else args.scale_end, "steps": args.scale_steps}
    demos = None
    if args.demos is not None:
        from prm_critic.robotics.demos import load_demos

        demos = load_demos(args.demos, args.demos_n)
    elif args.demos_n is not None:
        raise ValueError(f"--demos-n: needs --demos FOLDER, got --demos-n {args.demos_n} alone")
    _claim_out(args)
    model = train_policy(
        args.task, algo=args.algo, critic=args.critic, shaping=shaping, scale=args.scale, head=args.head,
        her=args.her, prune=prune, total_steps=args.steps, seed=args.seed, n_envs=args.n_envs,
        eval_freq=args.eval_freq, eval_episodes=args.eval_episodes, log_dir=args.out, algo_kwargs=algo_kwargs,
        normalize_obs=args.normalize_obs,
        progress=args.progress, checkpoint_freq=args.checkpoint_freq, resume=args.resume,
        torch_threads=args.torch_threads or None, early_stop=early_stop, scale_schedule=scale_schedule,
        demos=demos, demo_buffer=args.demo_buffer, demo_starts=args.demo_starts,
        **({} if args.backend is None else {"backend": args.backend}),
    )
    rows = model.prm_eval.rows if model.prm_eval is not None else []
    last = f", unshaped success {rows[-1]['success_rate']:.2f}" if rows else ""
    asked = ""
    if model.num_timesteps != args.steps:
        asked = f" (--steps {args.steps}: {model.prm_config.get('budget_note', 'rounded up by the algorithm')})"
    stopped = model.prm_config.get("stopped_early_at")
    if stopped is not None:
        asked = f" (stopped early: two evaluations at or above {args.early_stop:g})"
    print(f"trained {args.algo} on {args.task} for {model.num_timesteps} steps{asked}{last}; policy: {args.out}/policy.json")
    return 0
