"""How smooth is a potential on the states an untrained policy visits? Prints, per potential, Phi's
mean and spread and the mean per-step change |Phi(s') - Phi(s)| over random-action episodes, beside
Phi on the scripted episodes a learned critic was trained on.

A shaping term is ``scale * (gamma * Phi(s') - Phi(s))``: a potential that jumps from step to step
on the early policy's states adds noise of about ``scale * |dPhi|`` per step to the env reward.

    python benchmarks/rl/potential_noise.py --task FetchPush-v4 --critic benchmarks/rl/critics/push_mc.json \
        --data critic_data/push

``--data`` is the ``prm-critic collect`` folder the critic was trained on (the recipe in
``docs/rl_benchmark.md``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", required=True)
    p.add_argument("--critic", type=Path, required=True, help="train-critic checkpoint (.json)")
    p.add_argument("--data", type=Path, required=True, help="the collect folder the critic was trained on")
    p.add_argument("--episodes", type=int, default=30, help="random-action episodes (default 30)")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    shards = sorted((a.data / "shards").glob("*.npz"))
    if not a.critic.is_file():
        raise SystemExit(f"--critic: expected a critic checkpoint file, got {str(a.critic)!r} (no such file)")
    if not shards:
        raise SystemExit(f"--data: expected a `prm-critic collect` folder with shards/*.npz, got {str(a.data)!r}")
    if a.episodes < 1:
        raise SystemExit(f"--episodes: expected an int >= 1, got {a.episodes}")

    from prm_critic.robotics.layout import CriticInputLayout
    from prm_critic.robotics.spec import load_spec
    from prm_critic.sb3.envs import make_train_env, resolve_critic

    spec = load_spec(a.task)
    env = make_train_env(spec)
    learned = resolve_critic(str(a.critic), spec)
    subgoal = resolve_critic("subgoal", spec, env)
    layout = getattr(learned, "layout", None) or CriticInputLayout.from_dict(learned.meta["layout"])
    rng = np.random.default_rng(a.seed)
    xs, lengths = [], []
    for ep in range(a.episodes):
        obs, _ = env.reset(seed=a.seed + ep)
        n = 0
        while True:
            xs.append(layout.flatten(obs))
            n += 1
            obs, _, term, trunc, _ = env.step(rng.uniform(env.action_space.low, env.action_space.high))
            if term or trunc:
                break
        lengths.append(n)
    x_random = np.asarray(xs, dtype=np.float32).reshape(len(xs), -1)
    x_scripted = np.concatenate([np.load(f)["x"] for f in shards])
    x_scripted_next = np.concatenate([np.load(f)["next_x"] for f in shards])
    bounds = np.cumsum([0] + lengths)
    print(f"{a.task}: {a.episodes} random-action episodes ({len(x_random)} states), "
          f"{len(x_scripted)} scripted states from {a.data}")
    for name, phi in (("learned success head", lambda x: learned.score(x).success),
                      ("spec subgoal progress", lambda x: subgoal.score(x).progress)):
        pr, ps = phi(x_random), phi(x_scripted)
        ds = np.abs(phi(x_scripted_next) - ps).mean()
        steps = [np.abs(np.diff(pr[b:e])) for b, e in zip(bounds[:-1], bounds[1:]) if e - b > 1]
        print(f"  {name:22s} random: Phi mean {pr.mean():.3f} sd {pr.std():.3f}, mean |dPhi| per step "
              f"{np.concatenate(steps).mean():.4f} | scripted: Phi mean {ps.mean():.3f} sd {ps.std():.3f}, "
              f"mean |dPhi| per step {ds:.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
