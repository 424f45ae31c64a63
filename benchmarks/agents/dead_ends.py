"""Dead-end AUROC of a type's PRM on its test games: does a step that loses the game score lower?

For each base-policy episode of the type's committed test results (``run.py --type TYPE``, rows
``base``), the game is replayed along the episode's commands; at every state on the way, every valid
action is tried on a fork of the game. A *dead-end* step is one the game ends as lost (the
environment's own verdict); every other step is *alive*. Each dead-end step is scored, and up to
``--alive-per-state`` alive steps per state (drawn with a fixed seed), by the PRM's ``success`` head
on the text the searches show it (the intro as the prompt, the steps so far, the candidate step).

AUROC is the Mann-Whitney probability that an alive step outscores a dead-end one (ties count one
half): what the searches' pruning and ranking rely on. Games that never lose give no dead-end steps
(``auroc: null``; nothing is scored). One JSON goes to ``benchmarks/agents/types/TYPE/dead_end_auroc.json``;
``report.py --render`` reads it.

    python -m benchmarks.agents.dead_ends --type twx-cookingworld
"""

from __future__ import annotations

import argparse
import json
import sys
import zlib
from pathlib import Path

import numpy as np

from benchmarks.agents.plan import TYPES, game_type
from benchmarks.report_io import write_json

HERE = Path(__file__).resolve().parent


def step_candidates(env, commands: list[str], alive_per_state: int, rng: np.random.Generator) -> list[tuple]:
    """``[(history_texts, step_text, dead), ...]`` of the states along ``commands`` on ``env``."""
    from agents.textworld_agent.text import step_text

    out, texts = [], []
    r = env.reset()
    side = env.fork()  # one side copy, replayed to each state for each action tried
    try:
        for i in range(len(commands) + 1):
            if r.done:
                break
            alive, dead = [], []
            for a in r.admissible:
                side.replay(commands[:i])
                x = side.step(a)
                (dead if x.lost else alive).append(step_text(a, x.feedback))
            keep = list(rng.choice(len(alive), size=min(alive_per_state, len(alive)), replace=False)) if alive else []
            out += [(tuple(texts), t, True) for t in dead] + [(tuple(texts), alive[j], False) for j in sorted(keep)]
            if i == len(commands):
                break
            r = env.step(commands[i])
            texts.append(step_text(commands[i], r.feedback))
    finally:
        side.close()
    return out


def measure(name: str, prm_dir: Path, results: Path, alive_per_state: int, max_steps: int) -> dict:
    from prm_critic.integrity import sha256_bytes
    from prm_critic.text.envs import parse_env_spec
    from prm_critic.text.prm import MiniLMStepPRM
    from prm_critic.text.steps import TextStep
    from benchmarks.agents.report import load_results
    from benchmarks.stats import auroc

    t = game_type(name)
    spec = parse_env_spec(t.env)
    base = load_results(results / "types" / name / "test", tuple(t.test), spec.tag).get("base", [])
    if not base:
        raise SystemExit(f"--type {name}: no base-policy test results under {results}/types/{name}/test; run "
                         f"game_types.py --type {name} --stages test first")
    steps = []  # (TextStep, dead) of every episode; scored only when some step is a dead end
    for ep in sorted(base, key=lambda r: (r["seed"], r["rep"])):
        env = spec.make(ep["seed"], max_steps=max_steps)
        try:
            prompt = env.reset().feedback
            rng = np.random.default_rng(zlib.crc32(f"dead_ends:{ep['seed']}:{ep['rep']}".encode()))
            steps += [(TextStep(prompt, h, c), d) for h, c, d in step_candidates(env, list(ep["commands"]),
                                                                             alive_per_state, rng)]
        finally:
            env.close()
    dead_s, alive_s = [], []
    if any(d for _, d in steps):
        s = np.asarray(MiniLMStepPRM.load(prm_dir).score([st for st, _ in steps]).success, np.float64)
        dead_s = [float(v) for v, (_, d) in zip(s, steps) if d]
        alive_s = [float(v) for v, (_, d) in zip(s, steps) if not d]
    au = auroc(np.asarray(alive_s), np.asarray(dead_s)) if dead_s and alive_s else None
    return {"type": name, "env": t.env, "seeds": sorted({r["seed"] for r in base}), "episodes": len(base),
            "prm": str(prm_dir), "prm_sha256": sha256_bytes((prm_dir / "prm.json").read_bytes()),
            "alive_per_state": alive_per_state, "max_steps": max_steps, "n_states": len(steps),
            "n_dead": sum(1 for _, d in steps if d), "n_alive": sum(1 for _, d in steps if not d), "auroc": au,
            "mean_dead": float(np.mean(dead_s)) if dead_s else None,
            "mean_alive": float(np.mean(alive_s)) if alive_s else None}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--type", required=True, choices=sorted(TYPES))
    ap.add_argument("--prm", type=Path, default=None, help="default benchmarks/agents/prms/TYPE")
    ap.add_argument("--results", type=Path, default=HERE / "results")
    ap.add_argument("--alive-per-state", type=int, default=2)
    ap.add_argument("--max-steps", type=int, default=40)
    ap.add_argument("--out", type=Path, default=None, help="default benchmarks/agents/types/TYPE/dead_end_auroc.json")
    a = ap.parse_args(argv)
    if a.alive_per_state < 1:
        raise SystemExit(f"--alive-per-state: expected an int >= 1, got {a.alive_per_state}")
    prm = a.prm or Path("benchmarks") / "agents" / "prms" / a.type
    if not (prm / "prm.json").is_file():
        raise SystemExit(f"--prm: expected a saved MiniLMStepPRM folder (prm.json), got {prm}")
    res = measure(a.type, prm, a.results, a.alive_per_state, a.max_steps)
    res["command"] = "python -m benchmarks.agents.dead_ends " + " ".join(sys.argv[1:] if argv is None else argv)
    out = a.out or HERE / "types" / a.type / "dead_end_auroc.json"
    write_json(out, res)
    print(json.dumps({k: v for k, v in res.items() if k != "seeds"}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
