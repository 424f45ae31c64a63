"""A distilled deploy critic against its teacher: held-out accuracy, and the cost of one call in a
control loop.

Teacher: ``benchmarks/rl/critics/push_mc`` (FetchPush-v4, 31-256-256-2, ``mc`` labels). Student:
``benchmarks/rl/critics/push_mc_small``, written by ``prm-critic distill`` from the teacher and the
teacher's own training episodes (the command is in the doc).

(a) Accuracy: both critics on the teacher's held-out episodes of its data folder (the split its
checkpoint records, checked), with ``prm_critic.models.evaluate.evaluate_state_critic``, and a paired
bootstrap over episodes of the success-AUROC difference (student - teacher): each resample draws the
held-out episodes with replacement and scores both critics on the same draw.

(b) In-loop latency: one real ``FetchPush-v4`` env steps with random actions; after each
``env.step`` one ``OnnxCritic.score_one(x, check=False)`` call (the shaper's call, batch-1 export)
right after the MuJoCo step ("cold"), then the same call again at once ("hot"). The critic rotates
from step to step between the teacher, the student, a *floor* critic (``StateCriticNet(31,
hidden=(1, 1))``: the same graph with 36 weights, untrained) and no call at all (what the timers
cost). Each call is timed by the thread's CPU clock (the primary figure: other processes' time
slices are not in it) and by the wall clock. Then, interleaved in the same rounds, three blocks of
steps without the hot repeat: ``env.step`` alone, ``env.step`` + the teacher, ``env.step`` + the
student; the CPU time per step of each block over the ``env.step``-alone block of the same round
gives the cost ratio (median of the rounds). Block order rotates from round to round; round 0 is
warm-up. One thread everywhere.

Run (about 3 minutes; ``--out`` writes the raw data to ``benchmarks/results/critic_distill.json`` and
renders the doc from it; ``--render`` rewrites the doc from the raw data alone)::

    python -m benchmarks.critic_distill --data critic_data/push --out docs/critic_distill.md
    python -m benchmarks.critic_distill --render
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.report_io import add_doc_arguments, machine, measured_on, render_only, write_json, write_text
from benchmarks.stats import resample_indices

ROOT = Path(__file__).resolve().parents[1]
RAW = ROOT / "benchmarks" / "results" / "critic_distill.json"
DOC = ROOT / "docs" / "critic_distill.md"
TEACHER = "benchmarks/rl/critics/push_mc"
STUDENT = "benchmarks/rl/critics/push_mc_small"
#: the goals: held-out success AUROC within this of the teacher's; in-loop student p50 (CPU) at most this (µs)
AUROC_TOL = 0.01
LOOP_P50_US = 20.0
CALLS = ("teacher", "student", "floor", "none")
BLOCKS = ("env.step alone", "env.step + teacher", "env.step + student")


# --------------------------------------------------------------------------- (a) accuracy


def paired_bootstrap(s_teacher, s_student, y, episode, *, n: int, seed: int) -> np.ndarray:
    """``n`` resampled AUROC differences (student - teacher), episodes drawn with replacement."""
    from prm_critic.models.evaluate import auroc

    eps = np.unique(episode)
    rows = [np.nonzero(episode == e)[0] for e in eps]
    out = np.empty(n)
    for b, draw in enumerate(resample_indices(len(eps), n=n, seed=seed)):
        idx = np.concatenate([rows[i] for i in draw])
        out[b] = auroc(s_student[idx], y[idx]) - auroc(s_teacher[idx], y[idx])
    return out


def bench_accuracy(data: str, teacher, student, *, n_boot: int) -> dict:
    from prm_critic.models.distill import heldout_metrics, load_teacher_split
    from prm_critic.models.evaluate import score_in_batches

    _, test = load_teacher_split([data], teacher.meta, TEACHER)
    rows = []
    for name, critic, path in (("teacher", teacher, TEACHER), ("student", student, STUDENT)):
        m = heldout_metrics(critic, test, teacher=None if critic is teacher else teacher)
        rows.append({"critic": name, "file": path, "hidden": list(critic.net.hidden), **m})
    _, s_t = score_in_batches(teacher, test.x)
    _, s_s = score_in_batches(student, test.x)
    diffs = paired_bootstrap(s_t, s_s, test.ep_success, test.episode, n=n_boot, seed=0)
    lo, hi = np.percentile(diffs, [2.5, 97.5])
    return {"rows": rows, "bootstrap": {"resamples": n_boot, "ci95": [float(lo), float(hi)],
                                        "p_within": float(np.mean(np.abs(diffs) <= AUROC_TOL)),
                                        "p_not_worse": float(np.mean(diffs >= -AUROC_TOL))},
            "holdout": teacher.meta["data"]["holdout"], "split_seed": teacher.meta["data"]["split_seed"]}


# --------------------------------------------------------------------------- (b) latency


def _floor_net():
    import torch

    from prm_critic.models.state_critic import StateCriticNet

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return StateCriticNet(31, hidden=(1, 1)).eval()


def _critics(tmp: Path, teacher, student, env):
    """The three batch-1 exports as OnnxCritic (teacher, student, floor) and the student's ONNX-vs-torch
    difference on realistic inputs."""
    from prm_critic.onnx import OnnxCritic, export_state_critic

    paths = {"teacher": export_state_critic(teacher, tmp / "teacher.b1.onnx", batch=1),
             "student": export_state_critic(student, tmp / "student.b1.onnx", batch=1),
             "floor": export_state_critic(_floor_net(), tmp / "floor.b1.onnx", batch=1, task=teacher.meta["task"],
                                          layout=teacher.meta["layout"])}
    return {k: OnnxCritic(p, provider="cpu", env=env) for k, p in paths.items()}


def _step(env, rng, state):
    """One random-action step; the env is reset (untimed) when its episode ends. Returns the observation."""
    obs, _, term, trunc, _ = env.step(rng.uniform(-1, 1, 4))
    if term or trunc:
        state["reset"] = True
    return obs


def _no_call(x, check=False):
    """The "no call" target: what the timers around a call cost."""


def _alternating(env, rng, critics, layout, per_round: int, r: int, out: dict) -> None:
    """Steps whose critic call rotates over :data:`CALLS`: cold then hot, by CPU and wall clock."""
    pc, tt = time.perf_counter_ns, time.thread_time_ns
    state = {"reset": False}
    for i in range(per_round):
        k = CALLS[(i + r) % len(CALLS)]
        x = layout.flatten(_step(env, rng, state))
        fn = critics[k].score_one if k != "none" else _no_call
        times = []
        for _ in range(2):  # cold (right after env.step), then hot
            c0 = tt()
            w0 = pc()
            fn(x, check=False)
            w1 = pc()
            c1 = tt()
            times.append((c1 - c0, w1 - w0))
        if r:
            d = out[k]
            for (cpu, wall), when in zip(times, ("cold", "hot")):
                d[f"{when}_cpu"].append(cpu)
                d[f"{when}_wall"].append(wall)
        if state["reset"]:
            env.reset()
            state["reset"] = False


def _block(env, rng, critic, layout, per_round: int) -> tuple[float, float]:
    """``per_round`` steps, each ``env.step`` and (with a critic) one cold ``score_one``; returns the mean
    CPU µs per step of ``env.step`` and of the critic call."""
    tt = time.thread_time_ns
    env_ns = crit_ns = 0
    state = {"reset": False}
    for _ in range(per_round):
        c0 = tt()
        obs = _step(env, rng, state)
        c1 = tt()
        if critic is not None:
            critic.score_one(layout.flatten(obs), check=False)
        c2 = tt()
        env_ns += c1 - c0
        crit_ns += c2 - c1
        if state["reset"]:
            env.reset()
            state["reset"] = False
    return env_ns / per_round / 1e3, crit_ns / per_round / 1e3


def bench_loop(teacher, student, *, rounds: int, steps: int, bar=None) -> dict:
    from prm_critic.robotics.make import make_env

    from benchmarks import latency as lat

    env = make_env("FetchPush-v4")
    with tempfile.TemporaryDirectory() as d:
        critics = _critics(Path(d), teacher, student, env)
        layout = critics["teacher"].layout
        x_probe = np.random.default_rng(1).normal(size=(64, 31)).astype(np.float32)
        onnx_diff = float(np.max(np.abs(np.stack([critics["student"].score_one(x) for x in x_probe])
                                        - np.stack([student.score(x_probe).progress, student.score(x_probe).success], 1))))
        rng = np.random.default_rng(0)
        env.reset(seed=0)
        calls = {k: {f: [] for f in ("cold_cpu", "cold_wall", "hot_cpu", "hot_wall")} for k in CALLS}
        blocks: dict[str, list[tuple[float, float]]] = {b: [] for b in BLOCKS}
        by_block = dict(zip(BLOCKS, (None, critics["teacher"], critics["student"])))
        for r in range(rounds + 1):
            order = list(BLOCKS[r % 3:] + BLOCKS[:r % 3])
            _alternating(env, rng, critics, layout, steps, r, calls)
            for b in order:
                res = _block(env, rng, by_block[b], layout, steps)
                if r:
                    blocks[b].append(res)
            if r and bar is not None:
                bar.update(1)
        env.close()
    rows = []
    for k in CALLS:
        row = {"call": k, "n": len(calls[k]["cold_cpu"])}
        for f, v in calls[k].items():
            row[f] = list(lat._pcts(v)[:2])  # [p50, p99] µs
        rows.append(row)
    base = np.asarray([e + c for e, c in blocks[BLOCKS[0]]])
    ratios = []
    for b in BLOCKS:
        tot = np.asarray([e + c for e, c in blocks[b]])
        rel = tot / base
        ratios.append({"block": b, "cpu_per_step": float(np.median(tot)),
                       "env_per_step": float(np.median([e for e, _ in blocks[b]])),
                       "critic_per_step": float(np.median([c for _, c in blocks[b]])),
                       "ratio": float(np.median(rel)), "ratio_q25": float(np.percentile(rel, 25)),
                       "ratio_q75": float(np.percentile(rel, 75)), "rounds": len(tot)})
    return {"rows": rows, "cpu_ratio": ratios, "steps_per_block": steps, "rounds": rounds,
            "student_onnx_vs_torch_max_abs": onnx_diff,
            "weight_bytes": {k: int(sum(p.numel() * 4 for p in n.parameters())) for k, n in
                             (("teacher", teacher.net), ("student", student.net), ("floor", _floor_net()))}}


# --------------------------------------------------------------------------- render


def _f(v, digits=3) -> str:
    return "n/a" if v is None else f"{v:.{digits}f}"


METRICS = (("auroc_success", "success AUROC"), ("auroc_success_early", "success AUROC, first 25% of each episode"),
           ("spearman_progress_time", "Spearman(progress, t), successful episodes"),
           ("spearman_success_time", "Spearman(success, t), successful episodes"),
           ("brier_success", "Brier score of success"), ("progress_mae", "progress MAE against the spec's progress"),
           ("teacher_mae_progress", "mean absolute difference from the teacher's progress"),
           ("teacher_mae_success", "mean absolute difference from the teacher's success"))


def _render_accuracy(acc: dict) -> list[str]:
    t, s = acc["rows"]
    bs = acc["bootstrap"]
    d = s["auroc_success"] - t["auroc_success"]
    lo, hi = bs["ci95"]
    lines = ["## (a) Held-out accuracy", "",
             f"The teacher's held-out episodes of its data folder (holdout {acc['holdout']}, split seed "
             f"{acc['split_seed']}: {t['n_episodes']} episodes, {t['n_success_episodes']} successful, {t['n_steps']} "
             "steps), scored by both checkpoints.", "",
             f"| metric | teacher ({'-'.join(map(str, t['hidden']))}) | student ({'-'.join(map(str, s['hidden']))}) "
             "| student - teacher |", "|---|---:|---:|---:|"]
    for key, name in METRICS:
        tv, sv = t.get(key), s.get(key)
        diff = "" if tv is None or sv is None else f"{sv - tv:+.3f}"
        tv = tv if key in t else "-"
        lines.append(f"| {name} | {tv if tv == '-' else _f(tv)} | {_f(sv)} | {diff} |")
    lines.append(f"| weights (float32 bytes) | {t['weight_bytes']} | {s['weight_bytes']} | "
                 f"{s['weight_bytes'] / t['weight_bytes']:.3f}x |")
    met = abs(d) <= AUROC_TOL
    lines += ["", f"Paired bootstrap over episodes ({bs['resamples']} resamples): success-AUROC difference "
              f"{d:+.4f}, 95% interval [{lo:+.4f}, {hi:+.4f}]; {100 * bs['p_within']:.1f}% of the resamples are "
              f"within ±{AUROC_TOL}, {100 * bs['p_not_worse']:.1f}% have the student no more than {AUROC_TOL} below "
              "the teacher.", "",
              f"Goal: held-out success AUROC within {AUROC_TOL} of the teacher's: **{'met' if met else 'not met'}** "
              f"({_f(s['auroc_success'], 4)} against {_f(t['auroc_success'], 4)}, {d:+.4f}"
              + ("; the interval's lower end is above "
                 f"-{AUROC_TOL}" if lo > -AUROC_TOL else f"; the interval reaches below -{AUROC_TOL}, so on other "
                 "held-out episodes the student may fall further behind") + ").", ""]
    return lines


CALL_NAMES = {"teacher": "teacher (31-256-256-2)", "student": "student", "floor": "floor critic (31-1-1-2, untrained)",
              "none": "no call (the timers alone)"}


def _render_loop(loop: dict) -> list[str]:
    wb = loop["weight_bytes"]
    rows = {r["call"]: r for r in loop["rows"]}
    lines = ["## (b) One critic call in the control loop (µs per `OnnxCritic.score_one`, batch-1 export)", "",
             f"{loop['rounds']} interleaved rounds; in each, {loop['steps_per_block']} FetchPush-v4 steps whose call "
             "rotates over the critics (cold: right after `env.step`; hot: the same call again at once), then a "
             "block of steps per row of the second table. CPU: the thread's CPU clock (the primary figure); wall: "
             "the wall clock.", "",
             "| call | weights (bytes) | cold p50 CPU | cold p99 CPU | hot p50 CPU | hot p99 CPU | cold p50 wall | "
             "hot p50 wall | calls |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for k in CALLS:
        r = rows[k]
        lines.append(f"| {CALL_NAMES[k]} | {wb.get(k, 0)} | {r['cold_cpu'][0]:.1f} | {r['cold_cpu'][1]:.1f} | "
                     f"{r['hot_cpu'][0]:.1f} | {r['hot_cpu'][1]:.1f} | {r['cold_wall'][0]:.1f} | {r['hot_wall'][0]:.1f} | "
                     f"{r['n']} |")
    lines += ["", "| steps | CPU µs per step (median of rounds) | of which env.step | of which the critic | "
              "CPU / env.step alone (median of rounds) | interquartile range of the ratio | 1 + critic / env.step "
              "(same steps) | rounds |",
              "|---|---:|---:|---:|---:|---:|---:|---:|"]
    base_critic = loop["cpu_ratio"][0]["critic_per_step"]
    for b in loop["cpu_ratio"]:
        split = 1 + (b["critic_per_step"] - base_critic) / b["env_per_step"]
        lines.append(f"| {b['block']} | {b['cpu_per_step']:.1f} | {b['env_per_step']:.1f} | {b['critic_per_step']:.1f} | "
                     f"{b['ratio']:.3f}x | {b['ratio_q25']:.3f}-{b['ratio_q75']:.3f} | {split:.3f}x | {b['rounds']} |")
    lines += ["", "*of which the critic*: the CPU time between the clock reads after `env.step` and after the call "
              "(flattening the observation and `score_one`; in the *env.step alone* row, the clock reads alone). "
              "The ratio to the *env.step alone* block compares different steps and carries their spread; "
              "*1 + critic / env.step* divides within the same steps (the clock reads' own time taken off)."]
    t, s, fl, none = (rows[k]["cold_cpu"][0] for k in CALLS)
    met = s <= LOOP_P50_US
    lines += ["", f"Goal: the student's in-loop call at most {LOOP_P50_US:.0f} µs p50 (CPU, cold): "
              f"**{'met' if met else 'not met'}** ({s:.1f} µs; the teacher {t:.1f} µs).", "",
              f"Where the cold cost goes: the floor critic, the same graph with {wb['floor']} bytes of weights, costs "
              f"{fl:.1f} µs cold against the student's {s:.1f} µs ({wb['student']} bytes) and the teacher's {t:.1f} µs "
              f"({wb['teacher']} bytes); the timers alone {none:.1f} µs. Shrinking the weights from the teacher's to the "
              f"floor's removes {t - fl:.1f} µs of the teacher's {t:.1f} µs "
              f"({100 * (t - fl) / t:.0f}%); the remaining {fl:.1f} µs is the cost of running the call at all right "
              "after a MuJoCo step (onnxruntime's and the interpreter's code and data, out of the caches)"
              + (f", already above the {LOOP_P50_US:.0f} µs goal: no smaller critic of this graph reaches it."
                 if fl > LOOP_P50_US else f", within the {LOOP_P50_US:.0f} µs goal.") + "", "",
              f"The student's ONNX export agrees with its torch checkpoint to {loop['student_onnx_vs_torch_max_abs']:.1e} "
              "(largest absolute difference over 64 inputs).", ""]
    return lines


def render(raw: dict) -> str:
    """The markdown of ``docs/critic_distill.md`` from the raw-data file's content."""
    lines = ["# A distilled deploy critic: accuracy and in-loop cost against its teacher", "",
             "Reproduce (from the repository root, CPU; the data folder is the teacher's, 300 scripted FetchPush-v4 "
             "episodes, seed 0):", "", "```bash", raw["distill_command"], raw["command"], "```", "",
             f"Generated by `python -m benchmarks.critic_distill --render` from "
             f"`{RAW.relative_to(ROOT).as_posix()}`, the raw data that command measured.", "",
             measured_on(raw["machine"], ""), ""]
    lines += _render_accuracy(raw["accuracy"])
    lines += _render_loop(raw["loop"])
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default="critic_data/push", help="the teacher's data folder (default critic_data/push)")
    p.add_argument("--rounds", type=int, default=20, help="interleaved rounds (default 20)")
    p.add_argument("--steps", type=int, default=300, help="env steps per block per round (default 300)")
    p.add_argument("--boot", type=int, default=2000, help="bootstrap resamples (default 2000)")
    p.add_argument("--out", default=None, help="also write the raw data (--raw) and the doc rendered from it to this file")
    add_doc_arguments(p, RAW, DOC)
    args = p.parse_args(argv)
    if render_only(args, render):
        return 0
    for name in ("rounds", "steps", "boot"):
        if getattr(args, name) <= 0:
            p.error(f"--{name}: expected a positive int, got {getattr(args, name)}")
    raw = measure(args, argv)
    text = render(raw)
    print(text)
    if args.out:
        write_json(args.raw, raw)
        write_text(Path(args.out), text)
        print(f"wrote {args.raw} and {args.out}", file=sys.stderr)
    return 0


def measure(args, argv: list[str]) -> dict:
    import onnxruntime as ort
    import torch
    from tqdm import tqdm

    from prm_critic.models import load_state_critic

    torch.set_num_threads(1)
    teacher, student = load_state_critic(ROOT / TEACHER), load_state_critic(ROOT / STUDENT)
    if student.meta.get("distilled_from") is None:
        raise SystemExit(f"{STUDENT}: records no 'distilled_from'; write it with `prm-critic distill`")
    load0 = os.getloadavg()
    acc = bench_accuracy(args.data, teacher, student, n_boot=args.boot)
    with tqdm(total=args.rounds, desc="in-loop rounds", file=sys.stderr) as bar:
        loop = bench_loop(teacher, student, rounds=args.rounds, steps=args.steps, bar=bar)
    load = os.getloadavg()
    cfg = student.meta["distill_config"]
    return {"about": "Measured by benchmarks/critic_distill.py; docs/critic_distill.md is rendered from this file "
                     "(--render). Latencies in microseconds.",
            "command": f"python -m benchmarks.critic_distill {' '.join(argv)}".rstrip(),
            "distill_command": f"prm-critic distill --critic {TEACHER}.json --data {args.data} --hidden "
                               f"{' '.join(map(str, cfg['hidden']))} --out {STUDENT}",
            "machine": f"{machine()}, shared with other jobs (1-min load average {load0[0]:.1f} at the start, "
                       f"{load[0]:.1f} at the end); torch {torch.__version__}, onnxruntime {ort.__version__}; "
                       f"{time.strftime('%Y-%m-%d')}",
            "accuracy": acc, "loop": loop}


if __name__ == "__main__":
    sys.exit(main())
