"""Critic latency: torch eager vs onnxruntime (plain ``run`` and IOBinding), and the reward shaper's
overhead on a FetchPush-v4 step, side by side in one run.

The critic is a FetchPush-sized state critic (obs_dim 31, hidden 256x256, ReLU), exported by
``prm_critic.onnx.export_state_critic``. All methods run on one thread (``torch.set_num_threads(1)``;
onnxruntime intra/inter-op threads 1, sequential execution, all graph optimisations). Methods are
measured in interleaved rounds (method A for n calls, method B for n calls, ... repeated), so a
burst of load from other processes hits every method alike; percentiles pool all rounds.

Run (1-2 minutes; ``--out docs/latency.md`` writes the raw data to ``benchmarks/results/latency.json``
and renders the doc and its plot from it; ``--render`` rewrites the doc from the raw data alone)::

    python benchmarks/latency.py --out docs/latency.md
    python benchmarks/latency.py --render
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RAW = ROOT / "benchmarks" / "results" / "latency.json"
DOC = ROOT / "docs" / "latency.md"
BATCHES = (1, 16, 64, 1024)
PCTS = (50, 99, 99.9)


def _pcts(ns: list[int] | np.ndarray) -> tuple[float, float, float]:
    a = np.asarray(ns, dtype=np.float64) / 1e3  # microseconds
    return tuple(float(v) for v in np.percentile(a, PCTS))


def _time_calls(fn, n: int, out: list[int]) -> None:
    pc = time.perf_counter_ns
    for _ in range(n):
        t0 = pc()
        fn()
        out.append(pc() - t0)


def _interleaved(methods: dict, rounds: int, per_round: int, warmup: int, bar=None) -> dict[str, list[int]]:
    for fn in methods.values():
        for _ in range(warmup):
            fn()
    times: dict[str, list[int]] = {k: [] for k in methods}
    for _ in range(rounds):
        for k, fn in methods.items():
            _time_calls(fn, per_round, times[k])
        if bar is not None:
            bar.update(1)
    return times


def _cpu_session(ort, path, spinning: bool):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.add_session_config_entry("session.intra_op.allow_spinning", "1" if spinning else "0")
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def bench_critic(args, paths, net, bar) -> list[dict]:
    import onnxruntime as ort
    import torch

    from prm_critic.onnx import OnnxCritic

    rows = []
    rng = np.random.default_rng(0)
    sess_b1 = _cpu_session(ort, paths[1], args.spinning)
    sess_dyn = _cpu_session(ort, paths["dynamic"], args.spinning)
    crit_b1 = OnnxCritic(paths[1], provider="cpu", allow_spinning=args.spinning)
    crit_dyn = OnnxCritic(paths["dynamic"], provider="cpu", allow_spinning=args.spinning)
    for b in BATCHES:
        x = rng.standard_normal((b, 31)).astype(np.float32)
        xt = torch.from_numpy(x.copy())
        sess = sess_b1 if b == 1 else sess_dyn
        xin = x.copy()
        xout = np.zeros((b, 2), np.float32)
        io = sess.io_binding()
        io.bind_cpu_input("obs", xin)
        io.bind_output("scores", "cpu", 0, np.float32, [b, 2], xout.ctypes.data)

        def torch_eager(xt=xt):
            with torch.inference_mode():
                return net(xt)

        methods = {
            "torch eager": torch_eager,
            "ORT run": lambda sess=sess, x=x: sess.run(["scores"], {"obs": x}),
            "ORT IOBinding": lambda sess=sess, io=io: sess.run_with_iobinding(io),
        }
        if b == 1:
            v = x[0].copy()
            methods["OnnxCritic.score_one"] = lambda v=v: crit_b1.score_one(v)
        else:
            methods["OnnxCritic.score"] = lambda x=x: crit_dyn.score(x)
        # same results from every path (a benchmark of wrong answers is no benchmark)
        ref = torch_eager().numpy()
        methods["ORT IOBinding"]()
        np.testing.assert_allclose(xout, ref, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(sess.run(["scores"], {"obs": x})[0], ref, rtol=1e-4, atol=1e-5)
        calls = max(args.min_calls, int(args.iters / max(1.0, b / 16)))
        per_round = max(1, calls // args.rounds)
        times = _interleaved(methods, args.rounds, per_round, args.warmup, bar)
        stats = {k: _pcts(v) for k, v in times.items()}
        t50 = stats["torch eager"][0]
        for k, (p50, p99, p999) in stats.items():
            rows.append({"batch": b, "method": k, "p50": p50, "p99": p99, "p999": p999, "n": len(times[k]),
                         "speedup": t50 / p50, "per_row": p50 / b})
    return rows


def bench_shaper(args, paths, bar) -> dict:
    from prm_critic.onnx import OnnxCritic
    from prm_critic.robotics.make import make_env
    from prm_critic.wrappers import PRMRewardShaper

    from prm_critic.critic import BaseCritic, StepScores

    raw = make_env("FetchPush-v4")
    critic = OnnxCritic(paths[1], provider="cpu", allow_spinning=args.spinning)
    critic.check_env(raw)

    class ConstantCritic(BaseCritic):
        """Scores nothing: isolates the wrapper's own cost from the critic's."""

        obs_dim = critic.obs_dim
        layout = critic.layout

        def score(self, steps):
            n = len(steps)
            return StepScores(np.zeros(n, np.float32), np.zeros(n, np.float32))

    envs = {
        "env.step (raw)": raw,
        "PRMRewardShaper(constant critic)": PRMRewardShaper(make_env("FetchPush-v4"), ConstantCritic(), gamma=0.98),
        "PRMRewardShaper(OnnxCritic)": PRMRewardShaper(make_env("FetchPush-v4"), critic, gamma=0.98),
        "PRMRewardShaper(OnnxCritic, deadline_s=0.005)": PRMRewardShaper(
            make_env("FetchPush-v4"), OnnxCritic(paths[1], provider="cpu", allow_spinning=args.spinning),
            gamma=0.98, deadline_s=0.005),
    }
    rng = np.random.default_rng(0)
    actions = rng.uniform(-1, 1, (512, 4)).astype(np.float32)
    for i, e in enumerate(envs.values()):
        e.reset(seed=i)
    times: dict[str, list[int]] = {k: [] for k in envs}
    counter = {k: 0 for k in envs}
    pc = time.perf_counter_ns
    per_round = max(1, args.shaper_steps // args.rounds)
    warm = True
    for _ in range(args.rounds + 1):
        for k, e in envs.items():
            for _ in range(per_round):
                a = actions[counter[k] % len(actions)]
                counter[k] += 1
                t0 = pc()
                _, _, term, trunc, _ = e.step(a)
                dt = pc() - t0
                if not warm:
                    times[k].append(dt)
                if term or trunc:
                    e.reset()
        if warm:
            warm = False
        elif bar is not None:
            bar.update(1)
    stats = {k: _pcts(v) for k, v in times.items()}
    means = {k: float(np.mean(v)) / 1e3 for k, v in times.items()}
    shaped = envs["PRMRewardShaper(OnnxCritic, deadline_s=0.005)"]
    fallbacks = shaped.stats["fallbacks"]
    for e in envs.values():
        e.close()
    return {"stats": stats, "means": means, "n": {k: len(v) for k, v in times.items()}, "deadline_fallbacks": fallbacks}


def bench_in_loop(args, paths, bar) -> dict:
    """The critic right after a MuJoCo step (caches cold) vs called again at once (caches hot)."""
    from prm_critic.onnx import OnnxCritic
    from prm_critic.robotics.make import make_env

    env = make_env("FetchPush-v4")
    critic = OnnxCritic(paths[1], provider="cpu", env=env, allow_spinning=args.spinning)
    layout = critic.layout
    rng = np.random.default_rng(1)
    obs, _ = env.reset(seed=0)
    pc = time.perf_counter_ns
    cold: list[int] = []
    hot: list[int] = []
    per_round = max(1, args.shaper_steps // args.rounds)
    for r in range(args.rounds + 1):
        for _ in range(per_round):
            obs, _, term, trunc, _ = env.step(rng.uniform(-1, 1, 4))
            x = layout.flatten(obs)
            t0 = pc()
            critic.score_one(x)
            t1 = pc()
            critic.score_one(x)
            t2 = pc()
            if r:  # round 0 is warm-up
                cold.append(t1 - t0)
                hot.append(t2 - t1)
            if term or trunc:
                obs, _ = env.reset()
        if r and bar is not None:
            bar.update(1)
    env.close()
    return {"after env.step (cold caches)": (_pcts(cold), len(cold)), "repeated at once (hot caches)": (_pcts(hot), len(hot))}


def bench_gpu(args, paths) -> tuple[list[dict], str]:
    import onnxruntime as ort

    if "CUDAExecutionProvider" not in ort.get_available_providers():
        return [], "skipped: no CUDA (CUDAExecutionProvider not available in this onnxruntime)"
    from prm_critic.onnx import OnnxCritic

    rows = []
    rng = np.random.default_rng(0)
    crit = OnnxCritic(paths[1], provider="cuda", strict=True, cuda_graph=True)
    v = rng.standard_normal(31).astype(np.float32)
    t = _interleaved({"cuda graph score_one": lambda: crit.score_one(v)}, args.rounds,
                     max(1, args.iters // args.rounds), args.warmup)
    p = _pcts(t["cuda graph score_one"])
    rows.append({"batch": 1, "method": "OnnxCritic CUDA EP + cuda graph + IOBinding", "p50": p[0], "p99": p[1], "p999": p[2]})
    dyn = OnnxCritic(paths["dynamic"], provider="cuda", strict=True)
    for b in BATCHES[1:]:
        x = rng.standard_normal((b, 31)).astype(np.float32)
        t = _interleaved({"s": lambda x=x: dyn.score(x)}, args.rounds, max(1, args.min_calls // args.rounds), args.warmup)
        p = _pcts(t["s"])
        rows.append({"batch": b, "method": "OnnxCritic CUDA EP (IOBinding, host buffers)", "p50": p[0], "p99": p[1], "p999": p[2]})
    return rows, "measured"


def render(raw: dict) -> str:
    """The markdown of ``docs/latency.md`` from the raw-data file's content."""
    rows, shaper, in_loop = raw["rows"], raw.get("shaper"), raw.get("in_loop")
    gpu_rows, gpu_note = raw.get("gpu_rows") or [], raw.get("gpu_note", "")
    lines = ["# Critic latency: torch eager vs onnxruntime", ""]
    lines += ["Reproduce (from the repository root, CPU, 1-2 minutes on 2 shared cores):", "", "```bash",
              raw["command"], "```", "",
              f"Generated by `python benchmarks/latency.py --render` from `{RAW.relative_to(ROOT).as_posix()}`, "
              "the raw data that command measured.", ""]
    lines += ["Measured on: " + raw["machine"], "", "![p50 latency per method and batch size](latency.png)", "",
              "Critic: `StateCriticNet(31, hidden=(256, 256), activation='relu')` (FetchPush-v4 size), exported "
              "with `export_state_critic` (opset 18; batch 1 uses the fixed batch-1 export, other batches the "
              "dynamic one). One thread everywhere; torch under `inference_mode`. Times are per call in "
              "microseconds; methods interleaved in rounds on the same inputs, outputs checked equal "
              "(rtol 1e-4, atol 1e-5). `OnnxCritic.*` includes input validation and the copy into the bound buffer.",
              "", "## CPU: per-call latency (µs)", "",
              "| batch | method | p50 | p99 | p99.9 | p50 per row | speed-up vs torch (p50) | calls |",
              "|---:|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['batch']} | {r['method']} | {r['p50']:.1f} | {r['p99']:.1f} | {r['p999']:.1f} | "
                     f"{r['per_row']:.3f} | {r['speedup']:.2f}x | {r['n']} |")
    b1 = {r["method"]: r for r in rows if r["batch"] == 1}
    io = b1["ORT IOBinding"]
    lines += ["", "Goals (batch 1):", "",
              f"- ONNX (IOBinding) p50 <= 8 µs: **{'met' if io['p50'] <= 8 else 'not met'}** ({io['p50']:.1f} µs; "
              f"`OnnxCritic.score_one` {b1['OnnxCritic.score_one']['p50']:.1f} µs)",
              f"- ONNX >= 4x faster than torch eager (p50): **{'met' if io['speedup'] >= 4 else 'not met'}** "
              f"({io['speedup']:.2f}x; `score_one` {b1['OnnxCritic.score_one']['speedup']:.2f}x)", ""]
    if shaper is not None:
        st, means = shaper["stats"], shaper["means"]
        raw50, rawm = st["env.step (raw)"][0], means["env.step (raw)"]
        lines += ["## Reward-shaper overhead on a FetchPush-v4 step (µs per `env.step`)", "",
                  "| env | p50 | p99 | p99.9 | mean | overhead vs raw (p50) | overhead vs raw (mean) | steps |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|"]
        for k, (p50, p99, p999) in st.items():
            lines.append(f"| {k} | {p50:.1f} | {p99:.1f} | {p999:.1f} | {means[k]:.1f} | "
                         f"{100 * (p50 - raw50) / raw50:+.1f}% | {100 * (means[k] - rawm) / rawm:+.1f}% | {shaper['n'][k]} |")
        ov = 100 * (st["PRMRewardShaper(OnnxCritic)"][0] - raw50) / raw50
        wrap = 100 * (st["PRMRewardShaper(constant critic)"][0] - raw50) / raw50
        lines += ["", f"Goal: shaper overhead <= 5% (p50, no deadline): **{'met' if ov <= 5 else 'not met'}** ({ov:+.1f}%; "
                  f"the wrapper alone with a constant critic: {wrap:+.1f}%). "
                  f"Deadline variant fell back {shaper['deadline_fallbacks']} times (critic later than 5 ms).",
                  "The shaper's work per step: flatten the observation dict, validate it, one critic call "
                  "(batch 1), and the info dict (critic inputs of s and s', subgoal flags).", ""]
    if in_loop is not None:
        lines += ["## The critic inside a control loop (µs per `OnnxCritic.score_one`, batch-1 export)", "",
                  "A MuJoCo step evicts the critic's weights (~290 KB) from the core's caches; the first call after "
                  "`env.step` pays for reloading them. This is the figure that matters in a control loop.", "",
                  "| call | p50 | p99 | p99.9 | calls |", "|---|---:|---:|---:|---:|"]
        for k, ((p50, p99, p999), n) in in_loop.items():
            lines.append(f"| {k} | {p50:.1f} | {p99:.1f} | {p999:.1f} | {n} |")
        lines.append("")
    lines += ["## GPU (CUDA EP, `enable_cuda_graph=1`, IOBinding, static shapes)", ""]
    if gpu_rows:
        lines += ["| batch | method | p50 | p99 | p99.9 |", "|---:|---|---:|---:|---:|"]
        for r in gpu_rows:
            lines.append(f"| {r['batch']} | {r['method']} | {r['p50']:.1f} | {r['p99']:.1f} | {r['p999']:.1f} |")
    else:
        lines += [f"unmeasured — {gpu_note}."]
    return "\n".join(lines) + "\n"


def plot(raw: dict, path: Path) -> None:
    """Grouped bars of p50 latency per batch size and method (log scale), and the shaper overhead, from the raw data."""
    rows, shaper = raw["rows"], raw.get("shaper")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    methods = list(dict.fromkeys(r["method"].replace("OnnxCritic.score_one", "OnnxCritic.score") for r in rows))
    fig, axes = plt.subplots(1, 2 if shaper else 1, figsize=(12 if shaper else 7, 4.2), squeeze=False)
    ax = axes[0, 0]
    width = 0.8 / len(methods)
    for j, m in enumerate(methods):
        ys = [next((r["p50"] for r in rows if r["batch"] == b and
                    r["method"].replace("OnnxCritic.score_one", "OnnxCritic.score") == m), np.nan) for b in BATCHES]
        label = "OnnxCritic (score_one at batch 1)" if m == "OnnxCritic.score" else m
        ax.bar(np.arange(len(BATCHES)) + (j - (len(methods) - 1) / 2) * width, ys, width, label=label)
    ax.set_yscale("log")
    ax.set_xticks(np.arange(len(BATCHES)), [f"batch {b}" for b in BATCHES])
    ax.set_ylabel("p50 per call (µs, log)")
    ax.set_title("State critic 31-256-256-2, 1 thread, CPU")
    ax.legend(fontsize=8)
    if shaper:
        ax = axes[0, 1]
        st = shaper["stats"]
        names = list(st)
        ax.barh(range(len(names)), [st[k][0] for k in names], color="tab:gray")
        ax.set_yticks(range(len(names)), [n.replace("PRMRewardShaper", "Shaper") for n in names], fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel("p50 per FetchPush-v4 env.step (µs)")
        ax.set_title("Reward-shaper overhead")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--iters", type=int, default=20000, help="timed calls per method at batch <= 16 (default 20000)")
    p.add_argument("--min-calls", type=int, default=300, help="minimum timed calls per method at large batches")
    p.add_argument("--rounds", type=int, default=20, help="interleaving rounds (default 20)")
    p.add_argument("--warmup", type=int, default=200, help="untimed warm-up calls per method (default 200)")
    p.add_argument("--shaper-steps", type=int, default=3000, help="timed env steps per shaper variant")
    p.add_argument("--no-shaper", action="store_true", help="skip the reward-shaper section")
    p.add_argument("--no-spinning", dest="spinning", action="store_false",
                   help="session.intra_op.allow_spinning=0 (kinder to shared cores)")
    p.add_argument("--out", default=None,
                   help="also write the raw data (--raw), the markdown rendered from it to this file "
                        "(e.g. docs/latency.md) and a PNG next to it")
    p.add_argument("--raw", type=Path, default=RAW, help="raw-data JSON written with --out and read by --render")
    p.add_argument("--render", action="store_true", help="only write --md from --raw (no measurement)")
    p.add_argument("--md", type=Path, default=DOC, help="markdown written by --render")
    args = p.parse_args(argv)
    if args.render:
        print(f"wrote {render_file(args.raw, args.md)}")
        return 0
    args.argv = [a for a in argv]
    for name in ("iters", "min_calls", "rounds", "warmup", "shaper_steps"):
        if getattr(args, name) <= 0:
            p.error(f"--{name.replace('_', '-')}: expected a positive int, got {getattr(args, name)}")

    import onnxruntime as ort
    import torch
    from tqdm import tqdm

    from prm_critic.models.state_critic import StateCriticNet
    from prm_critic.onnx import export_state_critic

    torch.set_num_threads(1)
    torch.manual_seed(0)
    net = StateCriticNet(31, hidden=(256, 256), activation="relu").eval()
    rng = np.random.default_rng(0)
    net.set_normalization(rng.normal(0, 1, 31), rng.uniform(0.1, 2.0, 31))
    with tempfile.TemporaryDirectory() as d:
        layout = {"keys": ["observation", "achieved_goal", "desired_goal"],
                  "sizes": {"observation": 25, "achieved_goal": 3, "desired_goal": 3}}
        paths = {1: export_state_critic(net, Path(d) / "c.b1.onnx", batch=1, task="FetchPush-v4", layout=layout),
                 "dynamic": export_state_critic(net, Path(d) / "c.onnx", task="FetchPush-v4", layout=layout)}
        total = len(BATCHES) * args.rounds + (0 if args.no_shaper else 2 * args.rounds)
        with tqdm(total=total, desc="latency rounds", file=sys.stderr) as bar:
            rows = bench_critic(args, paths, net, bar)
            shaper = None if args.no_shaper else bench_shaper(args, paths, bar)
            in_loop = None if args.no_shaper else bench_in_loop(args, paths, bar)
        gpu_rows, gpu_note = bench_gpu(args, paths)
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    env_info = (f"{platform.machine()} CPU, {os.cpu_count()} logical cores shared with other jobs "
                f"(1-min load average at the end {load[0]:.1f})" if load else f"{platform.machine()} CPU")
    env_info += (f"; Python {platform.python_version()}, torch {torch.__version__}, onnxruntime {ort.__version__}, "
                 f"allow_spinning={'1' if args.spinning else '0'}; {time.strftime('%Y-%m-%d')}")
    raw = {"about": "Latencies in microseconds measured by benchmarks/latency.py; docs/latency.md is rendered "
                    "from this file (--render).",
           "command": f"python benchmarks/latency.py {' '.join(args.argv)}".rstrip(), "machine": env_info,
           "rows": rows, "shaper": shaper,
           "in_loop": None if in_loop is None else {k: [list(p), n] for k, (p, n) in in_loop.items()},
           "gpu_rows": gpu_rows, "gpu_note": gpu_note}
    text = render(raw)
    print(text)
    if gpu_note != "measured":
        print(gpu_note, file=sys.stderr)
    if args.out:
        from prm_critic._io import atomic_write_bytes

        atomic_write_bytes(args.raw, (json.dumps(raw, indent=1) + "\n").encode())
        atomic_write_bytes(Path(args.out), text.encode())
        png = Path(args.out).with_suffix(".png")
        plot(raw, png)
        print(f"wrote {args.raw}, {args.out} and {png}", file=sys.stderr)
    return 0


def render_file(raw_path: Path = RAW, md_path: Path = DOC) -> Path:
    from prm_critic._io import atomic_write_bytes

    atomic_write_bytes(md_path, render(json.loads(Path(raw_path).read_text())).encode())
    return Path(md_path)


if __name__ == "__main__":
    sys.exit(main())
