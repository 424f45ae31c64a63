"""Does a smaller weight format make the critic cheaper inside the control loop?

In a control loop the critic runs right after a MuJoCo step, which evicts its weights and code from
the CPU caches, so one call costs several times its tight-loop latency (docs/latency.md). This
script asks whether int8 (onnxruntime dynamic quantization) or float16 weights shrink that cold
cost: the FetchPush-size critic (``StateCriticNet(31, hidden=(256, 256))``, batch-1 export) in
three formats, each call timed right after a real ``FetchPush-v4`` step ("cold") and once more
immediately ("hot"), the formats interleaved in the same loop on one thread. It prints p50s, the
ratios to float32 side by side, and each format's largest output difference from float32.

    python -m benchmarks.critic_cold_formats [--steps 1500]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=1500, help="timed env steps per format (default 1500)")
    a = p.parse_args(argv)
    if a.steps < 10:
        p.error(f"--steps: expected an integer >= 10, got {a.steps}")
    with tempfile.TemporaryDirectory() as scratch:
        return _measure(Path(scratch), a.steps)


def _measure(tmp: Path, steps: int) -> int:
    import gymnasium as gym
    import gymnasium_robotics
    import onnx
    import onnxruntime as ort
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.transformers.float16 import convert_float_to_float16

    from prm_critic.models import StateCriticNet
    from prm_critic.onnx import export_state_critic

    gym.register_envs(gymnasium_robotics)
    fp32 = tmp / "critic.onnx"
    export_state_critic(StateCriticNet(31, hidden=(256, 256), activation="relu"), fp32, batch=1,
                        task="FetchPush-v4")
    quantize_dynamic(str(fp32), str(tmp / "int8.onnx"), weight_type=QuantType.QInt8)
    onnx.save(convert_float_to_float16(onnx.load(str(fp32)), keep_io_types=True), str(tmp / "fp16.onnx"))
    so = ort.SessionOptions()
    so.intra_op_num_threads = so.inter_op_num_threads = 1
    files = {"float32": fp32, "int8 (dynamic)": tmp / "int8.onnx", "float16 weights": tmp / "fp16.onnx"}
    sess = {k: ort.InferenceSession(str(f), so, providers=["CPUExecutionProvider"]) for k, f in files.items()}
    name = sess["float32"].get_inputs()[0].name
    env = gym.make("FetchPush-v4")
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    xs = rng.normal(size=(64, 31)).astype(np.float32)
    diff = {k: float(max(np.abs(s.run(None, {name: x[None]})[0] - sess["float32"].run(None, {name: x[None]})[0]).max()
                         for x in xs)) for k, s in sess.items()}
    cold: dict[str, list[float]] = {k: [] for k in sess}
    hot: dict[str, list[float]] = {k: [] for k in sess}
    for i in range(steps):
        x = xs[i % len(xs)][None]
        for k, s in sess.items():
            env.step(env.action_space.sample())
            t = time.perf_counter()
            s.run(None, {name: x})
            cold[k].append(time.perf_counter() - t)
            t = time.perf_counter()
            s.run(None, {name: x})
            hot[k].append(time.perf_counter() - t)
    env.close()
    c32, h32 = np.median(cold["float32"]), np.median(hot["float32"])
    print(f"onnxruntime {ort.__version__}, {steps} FetchPush-v4 steps per format, one thread")
    print(f"{'format':<16} {'cold p50 µs':>11} {'hot p50 µs':>10} {'cold / fp32':>11} {'hot / fp32':>10} "
          f"{'max |diff|':>10}")
    for k in sess:
        c, h = np.median(cold[k]), np.median(hot[k])
        print(f"{k:<16} {c * 1e6:>11.1f} {h * 1e6:>10.1f} {c / c32:>11.2f} {h / h32:>10.2f} {diff[k]:>10.2g}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
