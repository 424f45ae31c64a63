"""One-row cost of the spec critic's subgoal rule: generated code against the rule run directly on the row.

``SubgoalCritic.score_one`` (the env wrappers' control loop) scores one critic-input row as Python
floats. The subgoal rule is written once (``prm_critic.robotics.subgoals``: ``_rule_distances``,
``_rule_holds``, ``_rule_progress``, ``_rule_success``); this compares, per row, in µs of CPU time:

* ``generated``: the rule traced once into straight-line Python and compiled (what the library runs);
* ``generated at REV`` (with ``--against REV``): the same critic's one-row function of the library as it
  was at git revision ``REV`` (checked out by ``benchmarks.against_rev``, timed in a subprocess), the
  before/after;
* ``rule, no exec``: the rule itself run on the row's floats (operations on Python lists and floats,
  no generated code), the derived alternative to generating code.

All give the same floats on every row (checked before timing). The library keeps the generated
code unless ``rule, no exec`` is within 1 µs of it. Rows: states of random-action episodes of each
task. Variants run in interleaved rounds (A over all rows, B over all rows, ...; round 0 is warm-up),
so load from other processes hits all alike; CPU time is the thread's (``time.thread_time_ns``); the
table shows the median over rounds; the load average is taken before and after.

Run (about a minute; ``--md`` writes the raw data to ``benchmarks/results/subgoal_one_row.json`` and
renders the doc from it; ``--render`` rewrites the doc from the raw data alone)::

    python -m benchmarks.subgoal_one_row --against 2fa91dc --md docs/subgoal_one_row.md
    python -m benchmarks.subgoal_one_row --render --md docs/subgoal_one_row.md
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.against_rev import Worker, add_arguments, checkout, serve

ROOT = Path(__file__).resolve().parents[1]
RAW = ROOT / "benchmarks" / "results" / "subgoal_one_row.json"
DOC = ROOT / "docs" / "subgoal_one_row.md"
TASKS = ("Reacher-v5", "Pusher-v5", "FetchPush-v4", "FetchPickAndPlace-v4", "PointMaze_UMaze-v3")
KEEP_WITHIN_US = 1.0


class FloatOps:
    """The subgoal rule's operations on one row of Python floats: a point is a list, a number a float;
    every operation in numpy's order (squares added left to right), so the floats are the batch's."""

    def __init__(self, ev):
        from prm_critic.robotics.subgoals import map_consts

        def as_list(a):
            return a.reshape(-1).tolist()

        self.nodes = {id(n): map_consts(n, as_list) for trio in ev.exprs for n in trio if n is not None}
        self.geo = ev.maze.geodesic_fn() if ev.maze is not None else None
        self.v: list[float] = []

    def _eval(self, node, width):
        kind = node[0]
        if kind == "const":
            c = node[1]
            if isinstance(c, float):
                return [c] * width
            return c * width if len(c) == 1 else c
        if kind == "slice":
            return self.v[node[1]:node[2]]
        if kind == "neg":
            return [-e for e in self._eval(node[1], width)]
        a, b = self._eval(node[1], width), self._eval(node[2], width)
        if kind == "add":
            return [x + y for x, y in zip(a, b)]
        if kind == "sub":
            return [x - y for x, y in zip(a, b)]
        if kind == "mul":
            return [x * y for x, y in zip(a, b)]
        return [x / y for x, y in zip(a, b)]

    def expr(self, node, width):
        return self._eval(self.nodes[id(node)], width)

    def sub(self, a, b):
        return [x - y for x, y in zip(a, b)]

    def add(self, a, b):
        return [x + y for x, y in zip(a, b)]

    def scale(self, c, v):
        return [c * e for e in v]

    def norm(self, v):
        s = 0.0
        for c in v:
            s += c * c
        return math.sqrt(s)

    def unit(self, v, n):
        return [e / n for e in v] if n > 0 else [0.0] * len(v)

    def less(self, d, threshold):
        return d < threshold

    def closeness(self, dist, scale):
        i = 1.0 - dist / scale
        return 0.0 if i < 0.0 else (1.0 if i > 1.0 else i)

    def geodesic(self, a, b):
        return self.geo(*a, *b)

    def where(self, cond, then, other):
        return then if cond else other()

    def all(self, h):
        return all(h)

    def stage(self, h):
        for k in range(len(h) - 1, -1, -1):
            if h[k]:
                return k + 1
        return 0

    def select(self, m, values):
        return values[m]() if m < len(values) else 0.0

    def ladder(self, m, inside, n):
        p = (m + inside) / n
        return 0.0 if p < 0.0 else (1.0 if p > 1.0 else p)

    def mean(self, values):
        return sum(values) / len(values)


def rule_score(ev):
    """``score(v) -> (progress, success)``: the rule run directly on the row (no generated code)."""
    from prm_critic.robotics.subgoals import _rule_distances, _rule_holds, _rule_progress, _rule_success

    ops = FloatOps(ev)

    def score(v):
        ops.v = v
        d = _rule_distances(ev, ops)
        h = _rule_holds(ev, ops, d)
        p = _rule_progress(ev, ops, h, d)
        return p, _rule_success(ops, h, p)

    return score


def _time_round(fn, rows) -> float:
    """µs of the thread's CPU time per row over one pass of ``fn`` over ``rows``."""
    t0 = time.thread_time_ns()
    for row in rows:
        fn(row)
    return (time.thread_time_ns() - t0) / 1e3 / len(rows)


def _scores(fn, rows) -> list[list[float]]:
    return [[float(v) for v in fn(r)] for r in rows]


def _worker(config: dict):
    """``--worker``: each task's generated one-row function, of the library this process imports."""
    from prm_critic.robotics.make import make_env
    from prm_critic.robotics.subgoals import SubgoalCritic

    fns = {task: SubgoalCritic(task, make_env(task))._score_row for task in config["tasks"]}
    rows: dict = {}

    def step(req: dict) -> dict:  # {"task", "rows"}: their scores; {"task"}: one timed pass over them
        task = req["task"]
        rows[task] = req.get("rows") or rows[task]
        return {"out": _scores(fns[task], rows[task])} if "rows" in req else {"us": _time_round(fns[task], rows[task])}

    return {}, step


def rows_of(env, layout, n: int, seed: int) -> list[list[float]]:
    rows, rng = [], np.random.default_rng(seed)
    obs, _ = env.reset(seed=seed)
    while len(rows) < n:
        obs, _, term, trunc, _ = env.step(rng.uniform(env.action_space.low, env.action_space.high))
        rows.append(layout.flatten(obs).astype(np.float32).tolist())
        if term or trunc:
            obs, _ = env.reset(seed=seed + len(rows))
    return rows


def measure(args, worker: Worker | None = None, commit: str | None = None) -> dict:
    from prm_critic.robotics.make import make_env
    from prm_critic.robotics.subgoals import SubgoalCritic

    before = f"generated at {args.against}"
    out = []
    load0 = os.getloadavg()
    for task in TASKS:
        env = make_env(task)
        critic = SubgoalCritic(task, env)
        variants = {"generated": critic._score_row, "rule, no exec": rule_score(critic.evaluator)}
        rows = rows_of(env, critic.layout, args.rows, seed=0)
        env.close()
        got = {name: _scores(fn, rows) for name, fn in variants.items()}
        timed = {name: functools.partial(_time_round, fn) for name, fn in variants.items()}
        if worker is not None:
            got[before] = worker({"task": task, "rows": rows})["out"]
            timed[before] = lambda rows: worker({"task": task})["us"]
        for name, g in got.items():
            if g != got["generated"]:
                raise AssertionError(f"{task}: {name} gives other floats than the generated code")
        rounds = [{name: fn(rows) for name, fn in timed.items()} for _ in range(args.rounds + 1)][1:]  # 0: warm-up
        per_round = {name: [r[name] for r in rounds] for name in timed}
        out.append({"task": task, "subgoals": len(critic.spec.subgoals), "progress": critic.spec.progress,
                    "us": {name: statistics.median(v) for name, v in per_round.items()},
                    "rounds_us": per_round})
    load1 = os.getloadavg()
    return {"command": " ".join(["python -m benchmarks.subgoal_one_row", *args.argv]), "before": args.against,
            "commit": commit, "rows": args.rows, "rounds": args.rounds, "load_before": load0[0],
            "load_after": load1[0],
            "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
            "tasks": out}


def render(raw: dict) -> str:
    cols = ["generated", *([f"generated at {raw['before']}"] if raw.get("before") else []), "rule, no exec"]
    commit = f" `{raw['before']}` is commit {raw['commit']}." if raw.get("commit") else ""
    lines = ["# One-row cost of the subgoal rule", "",
             f"Measured by `{raw['command']}` on {raw['machine']}; load average {raw['load_before']:.2f} before, "
             f"{raw['load_after']:.2f} after (other processes share the CPUs). {raw['rows']} rows per task, "
             f"median over {raw['rounds']} interleaved rounds, µs of CPU time per row. Raw data: "
             "`benchmarks/results/subgoal_one_row.json` (`python -m benchmarks.subgoal_one_row --render` renders this doc "
             f"from it).{commit}", "",
             "| task | subgoals | " + " | ".join(cols) + " | no exec - generated |", "|---" * (len(cols) + 3) + "|"]
    worst = -math.inf
    for r in raw["tasks"]:
        us = r["us"]
        diff = us["rule, no exec"] - us["generated"]
        worst = max(worst, diff)
        lines.append(f"| {r['task']} | {r['subgoals']} ({r['progress']}) | "
                     + "".join(f"{us[c]:.2f} | " for c in cols) + f"{diff:+.2f} |")
    keep = "the rule run directly" if worst <= KEEP_WITHIN_US else "the generated code"
    lines += ["", f"Running the rule directly on the row costs up to {worst:+.2f} µs per row against the generated code; "
              f"the library keeps {keep} (the rule: keep the direct one when within {KEEP_WITHIN_US:g} µs).", ""]
    return "\n".join(lines)


def _write(path: Path, text: str) -> None:
    from prm_critic._io import atomic_write_bytes

    atomic_write_bytes(path, text.encode())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(p, "the generated code")
    p.add_argument("--rows", type=int, default=400)
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--md", type=Path, help="write the raw data and render this doc from it")
    p.add_argument("--render", action="store_true", help="render --md (default the doc) from the raw data alone")
    p.add_argument("--raw", type=Path, default=RAW, help="with --render: the raw data (default %(default)s)")
    args = p.parse_args(argv)
    if args.worker:
        return serve(args.worker, _worker)
    if args.render:
        _write(args.md or DOC, render(json.loads(args.raw.read_text(encoding="utf-8"))))
        return 0
    if args.rows < 1 or args.rounds < 1:
        p.error(f"--rows and --rounds: expected at least 1, got {args.rows} and {args.rounds}")
    args.argv = list(argv) if argv is not None else sys.argv[1:]
    if args.against:
        with checkout(args.against) as (path, commit), Worker("benchmarks.subgoal_one_row", path, {"tasks": TASKS}) as worker:
            raw = measure(args, worker, commit)
    else:
        raw = measure(args)
    print(render(raw))
    if args.md:
        _write(RAW, json.dumps(raw, indent=1) + "\n")
        _write(args.md, render(raw))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
