"""How smooth is a potential on the states an untrained policy visits? Prints, per potential, Phi's
mean and spread and the mean per-step change |Phi(s') - Phi(s)| over random-action episodes, beside
Phi on the scripted episodes a learned critic was trained on.

A shaping term is ``scale * (gamma * Phi(s') - Phi(s))``: a potential that jumps from step to step
on the early policy's states adds noise of about ``scale * |dPhi|`` per step to the env reward.

    python -m benchmarks.rl.potential_noise --task FetchPush-v4 --critic benchmarks/rl/critics/push_mc.json \
        --data critic_data/push

``--data`` is a ``prm-critic collect`` folder of scripted episodes of the task (the recipe in
``docs/rl_benchmark.md``). ``--head`` picks the critic's head used as the potential; ``--random-weights
SEED`` measures the uninformed control of ``run.py --random-weights SEED`` instead. Each measurement
is stored under its run label's critic part (``critic-<stem>-<head>[_randw<SEED>]``) in
``benchmarks/results/rl_potential_noise.json``, which ``benchmarks/rl/report.py`` shows beside the
learned-critic rows.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from benchmarks.report_io import write_json

RAW = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "rl_potential_noise.json"


def _load_scripted(data: Path, task: str, layout: dict) -> tuple[np.ndarray, np.ndarray]:
    """``(x, next_x)`` of every step in the collect folder ``data``, refused unless it is ``task``'s with ``layout``."""
    import json

    meta_path = data / "meta.json"
    shards = sorted((data / "shards").glob("*.npz"))
    if not meta_path.is_file() or not shards:
        raise SystemExit(f"--data: expected a `prm-critic collect` folder (meta.json, shards/*.npz), got {str(data)!r}")
    meta = json.loads(meta_path.read_text())
    if meta.get("task") != task:
        raise SystemExit(f"--data: {str(data)!r} holds {meta.get('task')!r} episodes, expected {task!r}")
    if meta.get("layout") != layout:
        raise SystemExit(f"--data: {str(data)!r} has another critic-input layout than the critic's "
                         "(it was not the critic's training data)")
    xs, nxs, eps = [], [], []
    for f in shards:
        with np.load(f) as z:
            xs.append(z["x"])
            nxs.append(z["next_x"])
            eps.append(z["episode"])
    return np.concatenate(xs), np.concatenate(nxs), np.concatenate(eps)


def her_relabel(x: np.ndarray, next_x: np.ndarray, episode: np.ndarray, layout, rng) -> tuple[np.ndarray, np.ndarray]:
    """HER's "future" relabelling of every transition: the desired goal of s and s' becomes the achieved
    goal of s' at a random later step of the same episode (the states the learner's replay buffer
    queries the potential on). Steps must be in episode order, as a collect folder stores them."""
    des, ach = layout.slices["desired_goal"], layout.slices["achieved_goal"]
    x, next_x = x.copy(), next_x.copy()
    starts = np.flatnonzero(np.r_[True, episode[1:] != episode[:-1]])
    ends = np.r_[starts[1:], len(episode)]
    for b, e in zip(starts, ends):
        future = rng.integers(np.arange(b, e), e)  # inclusive of the step itself, as SB3's HER
        g = next_x[future, ach]
        x[b:e, des] = g
        next_x[b:e, des] = g
    return x, next_x


def task_critics(task: str, critic: Path, random_weights_seed: "int | None"):
    """``(env, learned, subgoal)``: the training env of ``task``, the critic file ``critic`` (its weights
    drawn anew under ``random_weights_seed`` when given: run.py's uninformed control, the same function)
    and the task's subgoal critic."""
    from prm_critic.robotics.spec import load_spec
    from prm_critic.sb3.envs import make_train_env, resolve_critic

    spec = load_spec(task)
    env = make_train_env(spec)
    learned = resolve_critic(str(critic), spec)
    if random_weights_seed is not None:
        from benchmarks.rl.run import random_weights

        learned = random_weights(learned, random_weights_seed)
    return env, learned, resolve_critic("subgoal", spec, env)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", required=True)
    p.add_argument("--critic", type=Path, required=True, help="train-critic checkpoint (.json)")
    p.add_argument("--data", type=Path, required=True, help="the collect folder the critic was trained on")
    p.add_argument("--episodes", type=int, default=30, help="random-action episodes (default 30)")
    p.add_argument("--max-steps", type=int, default=1000, help="cap on each random-action episode (default 1000)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--head", default="success", choices=["success", "progress"], help="the potential's head")
    p.add_argument("--random-weights", type=int, default=None, metavar="SEED",
                   help="measure the critic with its weights drawn anew under SEED (run.py's control)")
    p.add_argument("--raw", type=Path, default=RAW, help="raw data file the measurement is stored in")
    a = p.parse_args(argv)
    if not a.critic.is_file():
        raise SystemExit(f"--critic: expected a critic checkpoint file, got {str(a.critic)!r} (no such file)")
    for name, v in (("--episodes", a.episodes), ("--max-steps", a.max_steps)):
        if v < 1:
            raise SystemExit(f"{name}: expected an int >= 1, got {v}")

    from prm_critic.robotics.layout import CriticInputLayout
    from prm_critic.wrappers import PRMRewardShaper

    env, learned, subgoal = task_critics(a.task, a.critic, a.random_weights)
    # the shaper refuses a critic of another task or layout than the env's; built here for that check only
    PRMRewardShaper(env, learned, gamma=0.99, head="success")
    declared = learned.critic_info().layout  # a checkpoint's, an export's or an ensemble's members'
    if declared is None:
        raise SystemExit(f"--critic: {str(a.critic)!r} declares no critic-input layout (expected a checkpoint, "
                         "an ONNX export or an ensemble file of the task)")
    layout = declared if isinstance(declared, CriticInputLayout) else CriticInputLayout.from_dict(declared)
    x_scripted, x_scripted_next, ep_scripted = _load_scripted(a.data, a.task, layout.to_dict())
    rng = np.random.default_rng(a.seed)
    x_her, x_her_next = her_relabel(x_scripted, x_scripted_next, ep_scripted, layout, np.random.default_rng(a.seed))
    xs, bounds = [], [0]
    for ep in range(a.episodes):
        obs, _ = env.reset(seed=a.seed + ep)
        for _ in range(a.max_steps):
            xs.append(layout.flatten(obs))
            obs, _, term, trunc, _ = env.step(rng.uniform(env.action_space.low, env.action_space.high))
            if term or trunc:
                break
        bounds.append(len(xs))
    x_random = np.asarray(xs, dtype=np.float32).reshape(len(xs), -1)
    print(f"{a.task}: {a.episodes} random-action episodes ({len(x_random)} states), "
          f"{len(x_scripted)} scripted states from {a.data}")
    label = f"critic-{a.critic.stem}-{a.head}" + (f"_randw{a.random_weights}" if a.random_weights is not None else "")
    rows = {}
    dphi_her = {}
    for name, phi in ((label, lambda x: getattr(learned.score(x), a.head)),
                      ("spec subgoal progress", lambda x: subgoal.score(x).progress)):
        pr, ps = phi(x_random), phi(x_scripted)
        ds = float(np.abs(phi(x_scripted_next) - ps).mean())
        steps = [np.abs(np.diff(pr[b:e])) for b, e in zip(bounds[:-1], bounds[1:]) if e - b > 1]
        dr = float(np.concatenate(steps).mean())
        dphi_her[name] = phi(x_her_next) - phi(x_her)
        rows[name] = {"random_mean": float(pr.mean()), "random_sd": float(pr.std()), "random_dphi": dr,
                      "scripted_mean": float(ps.mean()), "scripted_sd": float(ps.std()), "scripted_dphi": ds,
                      "her_dphi": float(np.abs(dphi_her[name]).mean())}
        print(f"  {name:34s} random: Phi mean {pr.mean():.3f} sd {pr.std():.3f}, mean |dPhi| per step "
              f"{dr:.4f} | scripted: Phi mean {ps.mean():.3f} sd {ps.std():.3f}, mean |dPhi| per step {ds:.4f}"
              f" | HER-relabelled scripted: mean |dPhi| {rows[name]['her_dphi']:.4f}")
    # how the learned shaping term follows the spec's on the transitions HER relabels
    d_l, d_s = dphi_her[label], dphi_her["spec subgoal progress"]
    rows[label]["her_dphi_corr_spec"] = float(np.corrcoef(d_l, d_s)[0, 1]) if d_l.std() > 0 and d_s.std() > 0 else None
    rows[label]["her_dphi_err_spec"] = float(np.abs(d_l - d_s).mean())
    print(f"  on HER-relabelled transitions: corr(dPhi learned, dPhi spec) {rows[label]['her_dphi_corr_spec']}, "
          f"mean |dPhi learned - dPhi spec| {rows[label]['her_dphi_err_spec']:.4f}")

    raw = json.loads(a.raw.read_text()) if a.raw.is_file() else {}
    raw.setdefault(a.task, {})[label] = {
        **rows[label], "spec": rows["spec subgoal progress"], "episodes": a.episodes, "seed": a.seed,
        "n_random_states": int(len(x_random)), "n_scripted_states": int(len(x_scripted)), "data": a.data.name,
        "command": "python -m benchmarks.rl.potential_noise " + " ".join(sys.argv[1:] if argv is None else argv)}
    write_json(a.raw, raw, sort_keys=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
