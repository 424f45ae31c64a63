"""Deploy example: a fixed-rate control loop on FetchPush-v4 that scores every step with an exported
ONNX critic, and reports timing jitter and missed deadlines.

Each tick (period ``1 / hz``): wake at the scheduled time, flatten the observation, score it with
``OnnxCritic.score_one`` (batch-1 export, CPU, IOBinding), pick an action with the scripted
FetchPush controller, ``env.step`` it, then sleep (coarse ``time.sleep`` + a short spin) until the
next tick. A cycle whose work ends after the next tick is a missed deadline; the loop then skips
the ticks it has lost instead of bursting to catch up.

Reported: period error (wake time - scheduled time) p50/p99/max, missed deadlines, critic and step
latency p50/p99, episodes and successes, and the critic's scores. ``--plot`` writes a PNG.

Run from the repository root (a few seconds; the first run also exports a demo critic)::

    python export/deploy_loop.py
    python export/deploy_loop.py --critic export/my_critic.b1.onnx --hz 50 --steps 500 --plot export/loop.png

Without ``--critic``/``--checkpoint`` the critic is an UNTRAINED FetchPush-sized network (its
normaliser fitted on a few real observations): the timing is real, the scores are not meaningful.
Train one with ``prm-critic train-critic`` and pass ``--checkpoint`` (exported to a batch-1 file).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

TASK = "FetchPush-v4"
HERE = Path(__file__).resolve().parent
DEMO = HERE / "demo_fetchpush.b1.onnx"


def demo_critic(path: Path) -> Path:
    """Export an untrained FetchPush-sized critic (normaliser fitted on real observations) once; again
    when the file on disk does not pass the load checks (e.g. exported by an older version, no hash)."""
    if path.is_file():
        from prm_critic.onnx._meta import FORMAT, check_model_bytes
        from prm_critic.onnx.runtime import OnnxModelError

        try:
            check_model_bytes(path.read_bytes(), str(path), fmt=FORMAT, error=OnnxModelError)
            return path
        except OnnxModelError as exc:
            print(f"re-exporting the demo critic: {exc}")
    import torch

    from prm_critic.models.state_critic import StateCriticNet
    from prm_critic.onnx import export_state_critic
    from prm_critic.robotics.make import CriticInputLayout, make_env
    from prm_critic.robotics.spec import load_spec

    spec = load_spec(TASK)
    env = make_env(spec)
    layout = CriticInputLayout.from_space(spec, env.observation_space)
    obs, _ = env.reset(seed=123)
    xs = [layout.flatten(obs)]
    for _ in range(49):
        obs, *_ = env.step(env.action_space.sample())
        xs.append(layout.flatten(obs))
    env.close()
    x = np.stack(xs)
    torch.manual_seed(0)
    net = StateCriticNet(layout.obs_dim, hidden=(256, 256))
    net.set_normalization(x.mean(0), x.std(0) + 1e-2)
    print(f"exporting an untrained demo critic to {path} (timing demo only; scores are not meaningful)")
    return export_state_critic(net, path, batch=1, task=TASK, layout=layout, parity_inputs=x,
                               extra_meta={"demo": True, "trained": False})


def wait_until(t: float, spin_s: float) -> None:
    """Sleep until ``spin_s`` before ``t``, then spin (``time.sleep`` alone overshoots by ~0.1 ms+)."""
    now = time.perf_counter()
    if t - now > spin_s:
        time.sleep(t - now - spin_s)
    while time.perf_counter() < t:
        pass


def run(args) -> dict:
    from prm_critic.onnx import OnnxCritic
    from prm_critic.robotics.controllers import make_controller
    from prm_critic.robotics.make import make_env, success_from_info
    from prm_critic.robotics.spec import load_spec

    spec = load_spec(TASK)
    env = make_env(spec)
    critic = OnnxCritic(args.critic, provider=args.provider, env=env)  # checks task + observation layout
    if critic.batch != 1:
        print(f"note: {args.critic} is a dynamic-batch export; a batch-1 export (--batch 1) is the control-loop variant")
    layout = critic.layout
    ctrl = make_controller(spec, env, noise=args.noise, random_prob=0.0)
    rng = np.random.default_rng(args.seed)
    obs, _ = env.reset(seed=args.seed)
    ctrl.reset(obs, rng)

    period = 1.0 / args.hz
    spin_s = args.spin_us * 1e-6
    err, crit_t, step_t, work_t, prog, succ = [], [], [], [], [], []
    missed = skipped = episodes = successes = 0
    pc = time.perf_counter
    for _ in range(3):  # warm up the session and the env outside the timed loop
        critic.score_one(layout.flatten(obs))
    t_next = pc() + period
    for _ in range(args.steps):
        wait_until(t_next, spin_s)
        t_wake = pc()
        err.append(t_wake - t_next)
        x = layout.flatten(obs)
        t0 = pc()
        p, s = critic.score_one(x)
        t1 = pc()
        action = ctrl.act(obs)
        t2 = pc()
        obs, _, terminated, truncated, info = env.step(action)
        t3 = pc()
        crit_t.append(t1 - t0)
        step_t.append(t3 - t2)
        work_t.append(t3 - t_wake)
        prog.append(p)
        succ.append(s)
        if terminated or truncated:
            episodes += 1
            successes += bool(success_from_info(spec, info))
            obs, _ = env.reset()
            ctrl.reset(obs, rng)
        t_next += period
        now = pc()
        if now > t_next:  # this cycle's work ran past the next tick
            missed += 1
            while t_next < now:
                t_next += period
                skipped += 1
    env.close()

    def us(a, q):
        return float(np.percentile(np.asarray(a) * 1e6, q))

    return {
        "critic": critic, "hz": args.hz, "steps": args.steps, "missed": missed, "skipped": skipped,
        "episodes": episodes, "successes": successes,
        "err": err, "crit": crit_t, "step": step_t, "work": work_t, "prog": prog, "succ": succ,
        "summary": {
            "period_error_us": (us(err, 50), us(err, 99), float(np.max(err) * 1e6)),
            "critic_us": (us(crit_t, 50), us(crit_t, 99)),
            "env_step_us": (us(step_t, 50), us(step_t, 99)),
            "work_us": (us(work_t, 50), us(work_t, 99)),
        },
    }


def plot(res: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a1, a2) = plt.subplots(2, 1, figsize=(8, 5), sharex=True)
    t = np.arange(len(res["prog"])) / res["hz"]
    a1.plot(t, res["prog"], label="progress")
    a1.plot(t, res["succ"], label="success")
    a1.set_ylabel("critic score")
    a1.set_ylim(-0.05, 1.05)
    a1.legend(loc="upper right")
    a2.plot(t, np.asarray(res["err"]) * 1e6, label="period error")
    a2.plot(t, np.asarray(res["work"]) * 1e6, label="work (critic + policy + env.step)", alpha=0.7)
    a2.axhline(1e6 / res["hz"], color="r", ls="--", lw=1, label="period")
    a2.set_yscale("symlog", linthresh=100)
    a2.set_ylabel("µs")
    a2.set_xlabel("time (s)")
    a2.legend(loc="upper right", fontsize=8)
    fig.suptitle(f"{TASK} at {res['hz']:g} Hz: {res['missed']} missed deadlines in {res['steps']} ticks")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="Fixed-rate FetchPush-v4 control loop with an exported ONNX critic.")
    p.add_argument("--critic", type=Path, default=None, help="exported critic (.onnx; batch-1 export preferred)")
    p.add_argument("--checkpoint", default=None, help="state-critic checkpoint to export to a batch-1 .onnx first")
    p.add_argument("--hz", type=float, default=50.0, help="loop rate in Hz (default 50)")
    p.add_argument("--steps", type=int, default=150, help="ticks to run (default 150 = 3 s at 50 Hz)")
    p.add_argument("--provider", default="cpu", choices=["cpu", "cuda", "tensorrt", "auto"])
    p.add_argument("--spin-us", type=float, default=300.0, help="busy-wait this long before each tick (default 300)")
    p.add_argument("--noise", type=float, default=0.1, help="scripted controller noise (default 0.1)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--plot", type=Path, default=None, help="write a PNG of scores and timing here")
    args = p.parse_args(argv)
    if not args.hz > 0:
        p.error(f"--hz: expected a positive rate, got {args.hz}")
    if args.steps <= 0:
        p.error(f"--steps: expected a positive int, got {args.steps}")
    if args.spin_us < 0:
        p.error(f"--spin-us: expected >= 0, got {args.spin_us}")
    if args.checkpoint is not None:
        from prm_critic.models.checkpoint import checkpoint_paths
        from prm_critic.onnx import export_state_critic

        out = HERE / (checkpoint_paths(args.checkpoint)[0].with_suffix("").name + ".b1.onnx")
        args.critic = export_state_critic(args.checkpoint, out, batch=1)
        print(f"exported {args.checkpoint} -> {args.critic}")
    if args.critic is None:
        args.critic = demo_critic(DEMO)

    res = run(args)
    s = res["summary"]
    c = res["critic"]
    print(f"critic: {c.path.name} task={c.task} obs_dim={c.obs_dim} batch={c.batch} provider={c.provider}")
    print(f"loop: {res['steps']} ticks at {args.hz:g} Hz (period {1e6 / args.hz:.0f} µs), "
          f"{res['episodes']} episodes finished, {res['successes']} successes")
    print(f"period error (wake - scheduled): p50 {s['period_error_us'][0]:.1f} µs, p99 {s['period_error_us'][1]:.1f} µs, "
          f"max {s['period_error_us'][2]:.1f} µs")
    print(f"missed deadlines: {res['missed']} ({res['skipped']} ticks skipped)")
    print(f"critic score_one: p50 {s['critic_us'][0]:.1f} µs, p99 {s['critic_us'][1]:.1f} µs; "
          f"env.step: p50 {s['env_step_us'][0]:.1f} µs, p99 {s['env_step_us'][1]:.1f} µs; "
          f"whole cycle: p50 {s['work_us'][0]:.1f} µs, p99 {s['work_us'][1]:.1f} µs")
    print(f"critic scores: progress mean {np.mean(res['prog']):.3f}, success mean {np.mean(res['succ']):.3f}")
    if args.plot is not None:
        plot(res, args.plot)
        print(f"wrote {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
