"""``prm-critic quickstart``: the whole robotics chain on PointMaze in a few minutes.

collect (noisy scripted controller) -> label (subgoal, Monte-Carlo, outcome) -> train a state
critic on the MC labels -> wrap the env with the PRM reward shaper and the dead-end pruner and
run a few episodes. Every stage is resumable: re-running skips what is already on disk.
"""

from __future__ import annotations

from pathlib import Path


#: The extra the README's quickstart install (``pip install -c constraints-cpu.txt ".[train]"``) provides.
QUICKSTART_EXTRA = "train"

#: the widest line the quickstart prints (a terminal, a log, the README's copy of its output)
WIDTH = 100

#: the critic's held-out metrics the quickstart ends with: (key, name, what it measures, a good value)
METRICS = (
    ("auroc_success", "success AUROC", "do steps of episodes that succeed score above those that fail?",
     "0.5 is chance, 1 perfect; good: 0.85 or more (the goal in docs/critic_label_families.md)"),
    ("auroc_success_early", "early AUROC", "the same on each episode's first 25%, before the outcome shows",
     "0.5 is chance, 1 perfect; good: about 0.7 or more (a rule of thumb)"),
    ("spearman_progress_time", "Spearman(progress, t)", "does progress rise through each successful episode?",
     "1 always rises, 0 no trend, below 0 falls; good: about 0.5 or more (a rule of thumb)"),
)


def next_commands(task: str, checkpoint: "str | Path", out: "str | Path") -> list[tuple[str, str]]:
    """``(extra, command)`` for each "Next:" line the quickstart prints; a command whose extra is
    not the quickstart's own starts with the ``pip install`` that provides it."""
    from shlex import quote

    ckpt = Path(checkpoint).with_suffix("")
    return [
        ("train", f"prm-critic train-policy --task {quote(task)} --critic {quote(f'{ckpt}.json')} --her --steps 20000 "
                     f"--out {quote(str(Path(out) / 'policy'))}"),
        ("onnx", f"prm-critic export --checkpoint {quote(str(ckpt))} --out critic.onnx"),
    ]


def _next_lines(task: str, checkpoint: "str | Path", out: "str | Path") -> list[str]:
    from prm_critic._optional import install_command

    lines = []
    for extra, cmd in next_commands(task, checkpoint, out):
        lines.append(cmd if extra == QUICKSTART_EXTRA else f"{install_command(extra)} && {cmd}")
    return lines


def wrap(text: str, indent: str = "", width: int = WIDTH) -> list[str]:
    """``text`` in lines of at most ``width`` characters, each starting with ``indent``."""
    import textwrap

    return textwrap.wrap(text, width, initial_indent=indent, subsequent_indent=indent + "  ",
                         break_long_words=False, break_on_hyphens=False) or [indent]


def wrap_command(command: str, indent: str = "  ", width: int = WIDTH) -> list[str]:
    """A shell command in lines of at most ``width`` characters joined by `` \\`` continuations (the
    words as the shell reads them: a quoted path stays whole), so it can still be pasted as printed."""
    import shlex

    words = [w if w in ("&&", "||", ";") else shlex.quote(w) for w in shlex.split(command)]
    lines, line = [], indent
    for word in words:
        if line.strip() and len(line) + 1 + len(word) + 2 > width:
            lines.append(line + " \\")
            line = indent + "    "
        line = f"{line} {word}" if line.strip() else line + word
    return [*lines, line]


def metric_lines(metrics: dict) -> list[str]:
    """The quickstart's last lines: each held-out metric of the critic, what it means and a good value."""
    n = metrics.get("n_episodes")
    held = f" ({n} held-out episodes: a rough reading)" if isinstance(n, int) else ""
    lines = [f"What the critic's held-out numbers mean{held}:"]
    for key, name, meaning, good in METRICS:
        v = metrics.get(key)
        lines += wrap(f"{name} {'n/a' if v is None else f'{v:.3f}'}: {meaning}", "  ")
        lines += wrap(good, "    ")
    return lines


def shaping_breakdown(phis: "list[float]", last_next_phi: float, terminated: bool, gamma: float,
                      scale: float = 1.0) -> dict[str, float]:
    """The terms of an episode's summed potential-based shaping (what the quickstart prints).

    With ``F_t = scale * (gamma * Phi'(s_{t+1}) - Phi(s_t))`` and ``Phi'(s_T) = 0`` when the episode
    terminates (``Phi(s_T)`` when it is truncated), the undiscounted sum telescopes to::

        sum_t F_t = scale * (gamma * Phi'(s_T) - Phi(s_0) - (1 - gamma) * sum_{t=1}^{T-1} Phi(s_t))

    so a successful (terminated) episode adds up to ``-scale * Phi(s_0)`` minus a discount leak that
    grows with its length: its shaped return can be below its env return, even negative. The
    learner's discounted sum ``sum_t gamma^t F_t = scale * (gamma^T Phi'(s_T) - Phi(s_0))`` depends on
    the start and the end only, which is why the shaping changes no optimal policy.

    Args:
        phis: ``Phi(s_0) .. Phi(s_{T-1})`` (``info["prm_phi"]`` of each step).
        last_next_phi: ``Phi(s_T)`` (``info["prm_next_phi"]`` of the last step).
        terminated: the episode ended by termination (success), not truncation.

    Returns:
        ``end`` (``gamma * Phi'(s_T)``), ``start`` (``Phi(s_0)``), ``leak``
        (``(1 - gamma) * sum_{t=1}^{T-1} Phi(s_t)``) and ``total`` (their sum times ``scale``).
    """
    if not phis:
        raise ValueError("phis: expected Phi of at least one state, got an empty episode")
    end = 0.0 if terminated else gamma * float(last_next_phi)
    start = float(phis[0])
    leak = (1.0 - gamma) * float(sum(phis[1:]))
    return {"end": end, "start": start, "leak": leak, "total": scale * (end - start - leak)}


def _explain_line(ep: int, steps: int, terminated: bool, env_return: float, b: dict[str, float], *,
                  gamma: float) -> str:
    """One line on why the shaped return differs from the env return (negative shaping on success)."""
    head = (f"episode {ep}: shaped return = env return {env_return:.2f} + shaping {b['total']:+.2f}, because the terms "
            f"gamma*Phi(s')-Phi(s) telescope to gamma*Phi(s_T) - Phi(s_0) - (1-gamma)*sum Phi(s_1..s_{steps - 1}) "
            f"= {b['end']:.2f} - {b['start']:.2f} - {b['leak']:.2f}")
    if terminated:
        return (head + " (Phi(s_T) = 0 once the episode terminates), so a success's shaped return is its env return "
                "minus Phi(s_0) and a leak of 1-gamma per step, and can be negative; the learner's discounted sum, "
                f"-Phi(s_0), depends on the start alone (gamma={gamma}), so the shaping favours no policy")
    return (head + " (a truncated episode keeps Phi(s_T)); the learner's discounted sum gamma^T*Phi(s_T) - Phi(s_0) "
            f"depends on the start and the end alone (gamma={gamma}), so the shaping favours no policy")


DESCRIPTION = """\
The whole robotics chain on PointMaze in about a minute, every stage written under OUT:

  1. collect EPISODES episodes with the spec's noisy scripted controller   -> OUT/data
  2. label their steps: subgoal progress, Monte-Carlo (K continuations every STRIDE-th step), outcome
  3. train a state critic on the Monte-Carlo labels                        -> OUT/critic_mc.safetensors / .json
  4. run five episodes in the env wrapped by the PRM reward shaper and the dead-end pruner

Every stage is resumable: re-running the same command skips what is already on disk; OUT holding a
quickstart run of other settings is refused, naming what differs (--overwrite replaces it whole).
It prints where everything went and the next commands (train a policy with the critic, export it to ONNX).
"""


def register(sub) -> None:
    p = sub.add_parser("quickstart", help="start here: collect -> label -> train-critic -> shaped, pruned env on "
                                          "PointMaze", description=DESCRIPTION)
    p.add_argument("--task", default="PointMaze_UMaze-v3", help="built-in task name or a spec .toml path")
    p.add_argument("--out", default="prm_runs/quickstart", help="output folder")
    p.add_argument("--episodes", type=int, default=60, help="episodes to collect")
    p.add_argument("--max-episode-steps", type=int, default=150, help="episode length cap, the TimeLimit")
    p.add_argument("--k", type=int, default=4, help="MC continuations per labelled state")
    p.add_argument("--stride", type=int, default=8, help="MC-label every stride-th step")
    p.add_argument("--epochs", type=int, default=25, help="critic training epochs")
    p.add_argument("--seed", type=int, default=0, help="seed of the collection, the MC rollouts and the training")
    p.add_argument("--overwrite", action="store_true",
                   help="replace a quickstart run of other settings in OUT (its data, critic and record) instead of "
                        "refusing it")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.set_defaults(func=run, interrupted=interrupted)


#: the quickstart's run record in OUT: the settings that make a run this run
RECORD = "quickstart.json"


def interrupted(args) -> str:
    """What Ctrl-C kept (the finished stages) and how to resume."""
    return f"the finished stages under {args.out} are kept; run the same command again to resume"


def _claim(out: Path, settings: dict, overwrite: bool) -> bool:
    """The output rule for OUT (resume the same run, refuse another, ``--overwrite`` replaces it whole)."""
    from prm_critic._io import claim_output, record_diffs, write_record
    from prm_critic.models.pipeline import CHECKPOINT_RUN_SUFFIXES

    if out.exists() and not out.is_dir():
        raise ValueError(f"--out: expected a folder, got {str(out)!r} (an existing file)")
    owned = [out / "data", *(out / f"critic_mc{s}" for s in CHECKPOINT_RUN_SUFFIXES)]
    resumed = claim_output(out, owned, record_diffs(out / RECORD, settings), overwrite=overwrite, what="--out",
                           held="a quickstart run")
    write_record(out / RECORD, settings)
    return resumed


def run(args) -> int:
    from prm_critic.models.pipeline import train_critic_from_data
    from prm_critic.models.train import TrainConfig
    from prm_critic.robotics.collection import collect
    from prm_critic.robotics.labels import label
    from prm_critic.robotics.spec import load_spec

    progress = not args.no_progress
    out = Path(args.out)
    data = out / "data"
    spec = load_spec(args.task)
    settings = {"command": "quickstart", "task": spec.name, "episodes": args.episodes,
                "max_episode_steps": args.max_episode_steps, "k": args.k, "stride": args.stride,
                "epochs": args.epochs, "seed": args.seed}
    if _claim(out, settings, args.overwrite):
        print(f"resuming the quickstart run in {out}: the stages on disk are kept")

    print(f"[1/4] collecting {args.episodes} episodes of {spec.name} with the noisy scripted controller -> {data}")
    collect(spec, data, episodes=args.episodes, policy="scripted", seed=args.seed,
            max_episode_steps=args.max_episode_steps, progress=progress)

    print(f"[2/4] labelling steps: subgoal progress, Monte-Carlo (k={args.k}, every {args.stride}th step), outcome")
    for family, kw in (("subgoal", {}), ("outcome", {"gamma": 0.99}),
                       ("mc", {"k": args.k, "stride": args.stride, "seed": args.seed})):
        label(data, family, progress=progress, **kw)

    ckpt = out / "critic_mc"
    print(f"[3/4] training a state critic on the MC labels -> {ckpt}.safetensors / .json")
    res = train_critic_from_data(data, "mc", ckpt, config=TrainConfig(epochs=args.epochs, seed=args.seed),
                                 split_seed=args.seed, progress_bar=progress)
    m = res["metrics"]

    def f(key):
        v = m.get(key)
        return "n/a" if v is None else f"{v:.3f}"

    print("\n".join(wrap(f"held-out success AUROC {f('auroc_success')}, early AUROC {f('auroc_success_early')}, "
                         f"Spearman(progress, t) {f('spearman_progress_time')} (read at the end)", "      ")))

    print("[4/4] shaped + pruned env: PRMRewardShaper(potential, gamma=0.99) + DeadEndPruner")
    _shaped_episodes(spec, ckpt, args)

    print("\nWhere everything went:")
    for line in (f"trajectories + labels: {data}/shards, {data}/labels/<family>",
                 f"critic checkpoint:     {res['checkpoint']} (+ {Path(res['checkpoint']).with_suffix('.json').name})",
                 f"held-out metrics:      {res['metrics_path']}",
                 f"per-step score plot:   {res['plot_path']}"):
        print("\n".join(wrap(line, "  ")))
    print("Next:")
    for line in _next_lines(spec.name, res["checkpoint"], out):
        print("\n".join(wrap_command(line)))
    print("\n".join(metric_lines(m)))
    return 0


def _shaped_episodes(spec, ckpt: Path, args) -> None:
    """Quickstart step 4: five episodes of the scripted controller in the shaped, pruned env, printed with
    why a success's shaped return can be negative and what the pruner saved."""
    import numpy as np

    from prm_critic.models.checkpoint import load_state_critic
    from prm_critic.robotics.controllers import make_controller
    from prm_critic.robotics.make import make_env
    from prm_critic.wrappers import DeadEndPruner, PRMRewardShaper

    critic = load_state_critic(ckpt)
    gamma = 0.99
    env = make_env(spec, max_episode_steps=args.max_episode_steps)
    env = PRMRewardShaper(env, critic, gamma=gamma, layout=critic.meta["layout"])
    env = DeadEndPruner(env, critic, threshold=0.05, patience=30, layout=critic.meta["layout"])
    ctrl = make_controller(spec, env)
    rng = np.random.default_rng(args.seed + 10_000)
    explain: tuple[int, tuple] | None = None
    for ep in range(5):
        obs, info = env.reset(seed=args.seed + 10_000 + ep)
        ctrl.reset(obs, rng)
        ret = shaped = 0.0
        steps = 0
        phis: list[float] = []
        while True:
            obs, r, terminated, truncated, info = env.step(ctrl.act(obs))
            ret += info["prm_original_reward"]
            shaped += r
            phis.append(float(info["prm_phi"]))
            steps += 1
            if terminated or truncated:
                break
        why = "pruned" if info.get("prm_pruned") else ("success" if terminated else "time limit")
        print(f"      episode {ep}: {steps} steps, env return {ret:.2f}, shaped return {shaped:.2f}, ended by {why}")
        # explain a success whose shaped return is negative, else any success, else the first episode
        rank = (2 if terminated and shaped < 0 else 1 if terminated else 0)
        if explain is None or rank > explain[0]:
            b = shaping_breakdown(phis, info["prm_next_phi"], terminated, gamma)
            explain = (rank, (ep, steps, bool(terminated), ret, b))
    if explain is not None:
        print("\n".join(wrap(_explain_line(*explain[1], gamma=gamma), "      ")))
    st = env.stats
    print(f"      pruner: {st['pruned_episodes']} of {st['episodes']} episodes pruned, {st['steps_saved']} steps saved")
    env.close()
