"""One-pass vs per-prefix scoring of a text trajectory with MiniLMStepPRM.

One pass: ``prm.score_trajectory(prompt, steps)``: the whole trajectory is encoded once and every
step's score is read at its separator (block-causal attention keeps step t blind to later steps).
Per-prefix: what a PRM without the contract has to do: encode ``(prompt, steps[:t+1])`` for every
t and read the last separator; either one forward call per prefix (sequential) or all prefixes
padded into one batch (batched). All three give the same scores (checked below).

Prints the median wall time of each method and the median per-round ratio (methods interleaved
in every round, so load on a shared machine hits them alike) side by side in one run. ``tokens``
is what the one pass feeds the encoder (all windows).

    python benchmarks/text_one_pass.py --steps 10 --repeats 7 --threads 1
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from prm_critic.text import TextStep, format_tool_step  # noqa: E402
from prm_critic.text.contract import Encoded  # noqa: E402
from prm_critic.text.prm import MiniLMStepPRM  # noqa: E402

ROOMS = "kitchen pantry corridor bedroom bathroom garden shed livingroom cellar attic study garage".split()


def trajectory(n: int) -> tuple[str, list[str]]:
    prompt = "You are hungry! Let's cook a delicious meal. Check the cookbook in the kitchen for the recipe."
    steps = [
        format_tool_step("act", {"command": f"go {d}"},
                         f"-= {ROOMS[i % len(ROOMS)].title()} =- You arrive in the {ROOMS[i % len(ROOMS)]}. "
                         f"You see a closed door and a table. On the table is a {ROOMS[(i + 3) % len(ROOMS)]} key.")
        for i, d in zip(range(n), ["north", "east", "south", "west"] * n)
    ]
    return prompt, steps


def last_only(w: Encoded) -> Encoded:
    return Encoded(w.input_ids, w.attention_mask, w.segment_ids, w.step_positions[-1:], w.step_indices[-1:],
                   w.first_step, w.dropped_steps, w.prompt_tokens_dropped, w.step_tokens_dropped)


def interleaved(fns: dict, repeats: int) -> tuple[dict, dict, dict]:
    """Run every method once per round (warm-up round first), so load changes on a shared machine
    hit all methods alike. Returns median seconds, median per-round ratio to the first method, and
    each method's last output."""
    outs = {k: f() for k, f in fns.items()}  # warm-up
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for k, f in fns.items():
            t0 = time.perf_counter()
            outs[k] = f()
            times[k].append(time.perf_counter() - t0)
    base = next(iter(fns))
    med = {k: statistics.median(v) for k, v in times.items()}
    ratio = {k: statistics.median(a / b for a, b in zip(times[k], times[base])) for k in fns}
    return med, ratio, outs


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, nargs="+", default=[10], help="trajectory lengths to measure")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (1 on shared CPUs)")
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    prm = MiniLMStepPRM.from_pretrained_encoder(device=args.device)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"device={args.device} threads={args.threads} repeats={args.repeats} torch={torch.__version__} "
          f"contract max_length={prm.contract.max_length} refill={prm.contract.refill} load1={load:.1f} cpus={os.cpu_count()}")
    print(f"{'T':>3} {'tokens':>6} | {'one pass ms':>11} | {'per-prefix seq ms':>17} {'ratio':>6} | "
          f"{'per-prefix batch ms':>19} {'ratio':>6} | {'max |diff|':>10}")
    for n in args.steps:
        prompt, steps = trajectory(n)
        windows = prm.encode(prompt, steps)
        prefixes = [last_only(prm.contract.encode(prm.tokenizer, prompt, steps[:t + 1], layout=prm.layout)) for t in range(n)]

        med, ratio, out = interleaved({
            "one": lambda: prm.score_trajectory(prompt, steps).success,
            "seq": lambda: np.concatenate([prm.score([TextStep(prompt, tuple(steps[:t]), steps[t])]).success
                                           for t in range(n)]),
            "bat": lambda: prm._run(prefixes)[:, 1],
        }, args.repeats)
        diff = max(float(np.abs(out["one"] - out["seq"]).max()), float(np.abs(out["one"] - out["bat"]).max()))
        tokens = sum(len(w) for w in windows)
        print(f"{n:>3} {tokens:>6} | {med['one'] * 1e3:>11.1f} | {med['seq'] * 1e3:>17.1f} {ratio['seq']:>5.1f}x | "
              f"{med['bat'] * 1e3:>19.1f} {ratio['bat']:>5.1f}x | {diff:>10.2e}")


if __name__ == "__main__":
    main()
