"""Where do a benchmark run's failed evaluation episodes end? (Stuck mid-way, or hovering at the goal?)

Loads each run's final policy (``policy.safetensors`` + ``policy.json``), replays the first
``--episodes`` evaluation episodes (same seeds as the benchmark's evaluation) on the unshaped env and
prints, for the failed ones, the final straight-line distance to the goal and the spec potential
``Phi`` (``SubgoalCritic`` progress) of the last state.

    OMP_NUM_THREADS=1 python -m benchmarks.rl.diagnose_failures --task PointMaze_Medium-v3 --labels prm_s10 her prm_her_s10

Each run's figures are stored under its task in ``benchmarks/results/rl_failure_diagnosis.json``
(``--raw``; a task measured again replaces its entry, or with ``--add`` keeps its other runs and
replaces only the labels measured), and ``docs/rl_failure_diagnosis.md`` is
rendered from that file and the benchmark's committed evaluation CSVs alone (``--render``, no replay):

    python -m benchmarks.rl.diagnose_failures --render
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

import numpy as np

from benchmarks.report_io import add_doc_arguments, render_only, write_json

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
RAW = ROOT / "benchmarks" / "results" / "rl_failure_diagnosis.json"
DOC = ROOT / "docs" / "rl_failure_diagnosis.md"
RUNS = HERE / "results" / "runs"


def diagnose(task: str, label: str, seed: int, episodes: int) -> dict:
    from prm_critic.robotics.make import make_env, success_from_info
    from prm_critic.robotics.spec import load_spec
    from prm_critic.robotics.subgoals import SubgoalCritic
    from prm_critic.sb3 import load_policy, predict

    from benchmarks.rl.run import RESULTS, run_dir

    spec = load_spec(task)
    model = load_policy(run_dir(task, label, seed, RESULTS) / "policy")
    env = make_env(spec)
    critic = SubgoalCritic(spec, env)
    n_sub = len(spec.subgoals)
    ok_n, dists, phis, final_stage, best_stage = 0, [], [], [], []
    for i in range(episodes):
        obs, _ = env.reset(seed=10_000 + i)  # the benchmark's evaluation seeds
        ok_any = ok_last = False
        best = 0
        while True:
            action, _ = predict(model, obs)
            obs, _, term, trunc, info = env.step(action)
            ok_last = bool(success_from_info(spec, info, term))
            ok_any |= ok_last
            best = max(best, int(critic.score(critic.layout.flatten(obs)[None]).extra["subgoals_reached"][0]))
            if term or trunc:
                break
        if (ok_any if spec.success.rule == "any" else ok_last):
            ok_n += 1
            continue
        s = critic.score(critic.layout.flatten(obs)[None])
        dists.append(float(np.linalg.norm(obs["achieved_goal"] - obs["desired_goal"])))
        phis.append(float(s.progress[0]))
        final_stage.append(int(s.extra["subgoals_reached"][0]))
        best_stage.append(best)
    env.close()
    hist = lambda v: [v.count(k) for k in range(n_sub + 1)]  # noqa: E731
    return {"label": label, "successes": ok_n, "episodes": episodes, "failed": len(dists),
            "dist": float(np.median(dists)) if dists else None,
            "phi": float(np.median(phis)) if phis else None,
            "final_stage": hist(final_stage), "best_stage": hist(best_stage)}


def _hist(counts: list[int]) -> str:
    return " ".join(f"{k}:{n}" for k, n in enumerate(counts))


def _num(v) -> str:
    return "n/a" if v is None else f"{v:.2f}"


def table(runs: list[dict]) -> list[str]:
    lines = ["| run | successes | median final distance to goal | median final Phi | subgoals held at the end | most subgoals held |",
             "|---|---|---|---|---|---|"]
    for r in runs:
        lines.append(f"| {r['label']} | {r['successes']}/{r['episodes']} | {_num(r['dist'])} | {_num(r['phi'])} | "
                     f"{_hist(r['final_stage'])} | {_hist(r['best_stage'])} |")
    return lines


def last_eval(task: str, label: str, seed: int, runs: Path = RUNS) -> tuple[int, float]:
    """``(env_steps, success_rate)`` of the last row of a committed run's evaluation CSV."""
    path = runs / task / label / f"seed{seed}" / "eval.csv"
    rows = list(csv.DictReader(path.open()))
    if not rows:
        raise ValueError(f"{path}: expected evaluation rows, got an empty CSV")
    return int(float(rows[-1]["env_steps"])), float(rows[-1]["success_rate"])


def _fetchpush(entry: dict, seed: int, runs: Path) -> list[str]:
    by = {r["label"]: r for r in entry["runs"]}
    alone, her10, her30 = by["prm_s10"], by["prm_her_s10"], by["prm_her_s30"]
    steps30, ev30 = last_eval(entry["task"], "prm_her_s30", seed, runs)
    _, ev10 = last_eval(entry["task"], "prm_her_s10", seed, runs)
    her10_reached = her10["failed"] - her10["best_stage"][0]
    return [
        f"(counts are failed episodes per number of subgoals held.) PRM alone (no HER): in {alone['best_stage'][0]} of its "
        f"{alone['failed']}",
        "failures the gripper never reached the approach point behind the block, and in the "
        f"{alone['failed'] - alone['best_stage'][0]} where it did,",
        "the block was never brought within 5 cm of the goal — the policy climbs the first rung of the potential",
        f"at best and does not learn the push itself. With HER, {her10_reached} of `prm_her_s10`'s {her10['failed']} "
        "failures reached the",
        f"approach point, and in {her10['best_stage'][-1]} of them the block was at the goal at some moment but not at "
        "the end: the",
        "failures are pushes that miss or overshoot, not a gripper that never gets to the block.",
        "",
        f"**One gradient step matters on FetchPush.** The benchmark's eval at {steps30 // 1000}k steps of `prm_her_s30`",
        f"scored {ev30:.2f} ({ev10:.2f} for `prm_her_s10`); the saved policy — the same run one gradient step later — "
        "scores",
        f"{her30['successes']}/{her30['episodes']} = {her30['successes'] / her30['episodes']:.2f} "
        f"({her10['successes']}/{her10['episodes']} = {her10['successes'] / her10['episodes']:.2f}) on the same "
        f"{her30['episodes']} episodes. Success curves of single runs on FetchPush move",
        "by this much between neighbouring policies, so one seed's \"steps to 80%\" is a coarse figure. (The",
        "benchmark's last row of these runs was evaluated before the last gradient step; `UnshapedSuccessEval`",
        "evaluates the final row after it, so a run's last row scores its saved policy.)",
    ]


def _and(items: list[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _medium(entry: dict, seed: int, runs: Path) -> list[str]:
    evals = [last_eval(entry["task"], r["label"], seed, runs)[1] for r in entry["runs"]]
    steps = {r["label"]: last_eval(entry["task"], r["label"], seed, runs)[0] for r in entry["runs"]}
    same = all(abs(r["successes"] / r["episodes"] - e) < 1e-9 for r, e in zip(entry["runs"], evals))
    lead = ("Here the saved policies score what the benchmark's last row says" if same
            else "The benchmark's last rows read")
    return [
        f"{lead} ({_and([f'{e:.2f}' for e in evals])}). Failed episodes end",
        "far from the goal (median straight-line distance > "
        f"{int(min(r['dist'] for r in entry['runs'] if r['dist'] is not None))} m in a maze whose cells are 1 m) "
        "with the",
        "geodesic potential around half way: the failures are agents stuck mid-maze, not agents hovering",
        "next to the goal. (Where exactly they stop — walls, corners — this script does not show.)",
        *([] if len(set(steps.values())) == 1 else [
            "",
            "The runs' final policies are from different budgets: "
            + ", ".join(f"`{label}` at {n // 1000}k steps" for label, n in steps.items()) + "."]),
    ]


ANALYSIS = {"FetchPush-v4": _fetchpush, "PointMaze_Medium-v3": _medium}


def render(raw: dict, runs: Path = RUNS) -> str:
    """The markdown of ``docs/rl_failure_diagnosis.md`` from the raw data and the committed evaluation CSVs."""
    lines = [
        "# Where the RL benchmark's failed episodes end",
        "",
        f"Generated by `python -m benchmarks.rl.diagnose_failures --render` from "
        f"`{RAW.relative_to(ROOT).as_posix()}`, the raw data",
        "the commands below measured, and the benchmark's evaluation CSVs (`benchmarks/rl/results/runs`).",
        "",
        "`benchmarks/rl/diagnose_failures.py` replays a run's saved final policy (`policy.safetensors` +",
        f"`policy.json`) on the first {raw['episodes']} evaluation episodes of the benchmark (same reset seeds, "
        "unshaped env,",
        "deterministic actions) and reports, for the failed episodes, the final distance to the goal, the spec",
        "potential `Phi` of the last state, and how many of the spec's subgoals held at the end and at best",
        f"during the episode. Seed {raw['seed']} only.",
    ]
    for entry in raw["tasks"]:
        commands = entry.get("commands", [entry.get("command")])
        lines += ["", f"## {entry['task']} ({entry['spec_note']})", "", *("    " + c for c in commands), ""]
        lines += table(entry["runs"])
        lines += [""] + ANALYSIS[entry["task"]](entry, raw["seed"], runs) if entry["task"] in ANALYSIS else []
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task")
    p.add_argument("--labels", nargs="+", help="run labels, e.g. her prm_s10 prm_her_s10")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--episodes", type=int, default=20)
    p.add_argument("--spec-note", default=None, help="what the doc's section title says about the task's spec")
    p.add_argument("--add", action="store_true",
                   help="keep the task's other runs in --raw (the labels measured replace theirs)")
    add_doc_arguments(p, RAW, DOC)
    a = p.parse_args(argv)
    if render_only(a, render):
        return 0
    if not a.task or not a.labels:
        p.error(f"--task and --labels: expected a task and run labels to replay, got {a.task!r} and {a.labels!r}")

    print(f"{a.task}, seed {a.seed}, first {a.episodes} evaluation episodes of each run's final policy")
    print("Failed episodes: median final distance to the goal, median final Phi, and how many subgoals")
    print("held at the end / at best during the episode (count of failed episodes per number of subgoals).")
    runs = [diagnose(a.task, label, a.seed, a.episodes) for label in a.labels]
    print("\n".join(table(runs)))
    raw = json.loads(a.raw.read_text()) if a.raw.exists() else {
        "about": "Failed-episode figures measured by benchmarks/rl/diagnose_failures.py; docs/rl_failure_diagnosis.md "
                 "is rendered from this file (--render).", "tasks": []}
    if raw["tasks"] and (raw.get("episodes"), raw.get("seed")) != (a.episodes, a.seed):
        raise SystemExit(f"{a.raw}: holds --episodes {raw.get('episodes')} --seed {raw.get('seed')}; expected the "
                         f"same as this run's --episodes {a.episodes} --seed {a.seed} (use another --raw)")
    raw["episodes"], raw["seed"] = a.episodes, a.seed
    command = (f"OMP_NUM_THREADS=1 python -m benchmarks.rl.diagnose_failures --task {a.task} "
               f"--labels {' '.join(a.labels)} --episodes {a.episodes}" + (" --add" if a.add else ""))
    old = next((t for t in raw["tasks"] if t["task"] == a.task), None)
    if a.add and old is None:
        raise SystemExit(f"--add: expected {a.raw} to hold runs of {a.task!r} to add to, found none (leave out --add)")
    if a.add:
        kept = [r for r in old["runs"] if r["label"] not in set(a.labels)]
        entry = {**old, "commands": [*old.get("commands", [old.get("command")]), command], "runs": kept + runs}
        entry.pop("command", None)
        if a.spec_note:
            entry["spec_note"] = a.spec_note
    else:
        entry = {"task": a.task, "spec_note": a.spec_note or "spec: built-in", "command": command, "runs": runs}
    raw["tasks"] = [entry if t["task"] == a.task else t for t in raw["tasks"]] if old is not None \
        else raw["tasks"] + [entry]
    write_json(a.raw, raw, ensure_ascii=False)
    print(f"wrote {a.raw}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
