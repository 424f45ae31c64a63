"""Summarise the RL benchmark: PNG of unshaped eval success vs env steps (mean over seeds, min-max
band; per task and config), and a markdown table (steps to 50% / 80% success, final success,
wall-clock) written to ``docs/rl_benchmark.md``; ``--guide`` also rewrites the summary table of the
user guide ``docs/readme/train_policy.md``.

    python -m benchmarks.rl.report --guide docs/readme/train_policy.md

"success AUC" is the mean of the mean-over-seeds success over the evaluations from 0 to the task's
budget (also for a run given a larger budget, so that it compares across configs): higher means
earlier and steadier success. Steps to 50% / 80% use every evaluation a run has; the per-seed
column and the per-seed goal verdicts use each seed's own curve (seeds may have different budgets). Runs without a ``done.json`` marker (killed or still running) are shown dashed and marked
"partial"; steps-to-threshold use the mean-over-seeds curve on the steps every seed reached.
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

from benchmarks.report_io import save_figure, write_text
from benchmarks.rl.run import RESULTS, TASKS, config_label
from benchmarks.stats import bootstrap_mean, resample_indices, sign_test_p

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

ORDER = ["sparse", "her", "prm", "prm_her"]
COMMANDS = """\
# FetchReach-v4 and PointMaze_UMaze-v3, resumable: finished runs are skipped
OMP_NUM_THREADS=1 python -m benchmarks.rl.sweep --plan core more
# PointMaze_Medium-v3 and FetchPush-v4: two sweeps share two cores (per-run lock)
OMP_NUM_THREADS=1 python -m benchmarks.rl.sweep --plan push medium lever seeds &
OMP_NUM_THREADS=1 python -m benchmarks.rl.sweep --plan medium push lever seeds &
# more seeds at the task budgets (two sweeps share the two cores, per-run lock)
OMP_NUM_THREADS=1 python -m benchmarks.rl.sweep --plan seeds5 &
OMP_NUM_THREADS=1 python -m benchmarks.rl.sweep --plan seeds5 &
# the spec-free potential from demonstrations, its controls (DEMO_PLAN: screening seeds 0-2, declared seeds 10-19)
prm-critic collect --task FetchPush-v4 --out critic_data/push_demo --episodes 300 --seed 50000
python -m benchmarks.rl.train_potential --data critic_data/push_demo --label demo_progress --demos 100 --relabel 4 \
    --branches 3000 --branch-steps 10 --epochs 30 --out benchmarks/rl/critics/push_demo
for s in 0 1 2 10 11 12 13 14 15 16 17 18 19; do
  R="OMP_NUM_THREADS=1 python benchmarks/rl/run.py --task FetchPush-v4 --seed $s"
  eval $R --config her; eval $R --config her --demos-of benchmarks/rl/critics/push_demo.json --demo-buffer
  eval $R --config her --demos-of benchmarks/rl/critics/push_demo.json --demo-starts 0.5
  eval $R --config prm_her --scale 10 --critic benchmarks/rl/critics/push_demo.json --head progress
  eval $R --config prm_her --scale 10 --critic benchmarks/rl/critics/push_demo.json --head progress --random-weights 0
done
# the second task, PointMaze_Medium-v3 as a continuing task, the same recipe, declared seeds 10-14
prm-critic collect --task benchmarks/rl/specs/continuing.toml --out critic_data/maze_demo --episodes 300 --seed 50000
python -m benchmarks.rl.train_potential --data critic_data/maze_demo --label demo_progress --demos 100 --relabel 4 \\
    --branches 3000 --branch-steps 10 --epochs 30 --out benchmarks/rl/critics/maze_demo
for s in 10 11 12 13 14; do
  R="OMP_NUM_THREADS=1 python benchmarks/rl/run.py --task PointMaze_Medium-v3 --spec benchmarks/rl/specs/continuing.toml --seed $s"
  eval $R --config her; eval $R --config her --demos-of benchmarks/rl/critics/maze_demo.json --demo-buffer
  eval $R --config her --demos-of benchmarks/rl/critics/maze_demo.json --demo-starts 0.5
  eval $R --config prm_her --scale 10 --critic benchmarks/rl/critics/maze_demo.json --head progress
  eval $R --config prm_her --scale 10 --critic benchmarks/rl/critics/maze_demo.json --head progress --random-weights 0
done
python -m benchmarks.rl.critic_order                                             # value order and AUROC of every critic
python -m benchmarks.rl.report --guide docs/readme/train_policy.md               # this file, the plot, the guide's summary
# one run:
OMP_NUM_THREADS=1 python benchmarks/rl/run.py --task FetchReach-v4 --config prm_her --scale 10 --seed 0"""


def load_runs(root: Path = RESULTS) -> dict[str, dict[str, list[dict]]]:
    from prm_critic.sb3 import read_eval_csv

    out: dict[str, dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for ev in sorted(root.glob("*/*/seed*/eval.csv")):
        d = ev.parent
        rows = read_eval_csv(ev)
        if not rows:
            continue
        done = d / "done.json"
        out[d.parents[1].name][d.parent.name].append({
            "seed": int(d.name[4:]), "rows": rows, "done": json.loads(done.read_text()) if done.exists() else None,
        })
    return out


def mean_curve(runs: list[dict]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Steps every run reached, and mean / min / max success there."""
    common = set.intersection(*[{r["env_steps"] for r in run["rows"]} for run in runs])
    steps = np.array(sorted(common))
    vals = np.array([[success_by_step(run)[s] for s in steps] for run in runs])
    return steps, vals.mean(0), vals.min(0), vals.max(0)


def success_by_step(run: dict) -> dict[int, float]:
    """A run's eval success rate by env step."""
    return {r["env_steps"]: r["success_rate"] for r in run["rows"]}


def success_at(runs: list[dict], steps: int) -> dict[int, float]:
    """Success at ``steps`` by seed, over the finished runs that evaluated there."""
    return {r["seed"]: v for r in runs if r["done"] and (v := success_by_step(r).get(steps)) is not None}


def headline_runs(runs: list[dict]) -> list[dict]:
    """The runs the mean curve is taken over: the finished ones (a run still in progress would cut
    every seed's curve to its own length), or all of them when none has finished."""
    done = [r for r in runs if r["done"] is not None]
    return done or runs


def steps_to(steps: np.ndarray, mean: np.ndarray, thr: float) -> float | None:
    hit = np.nonzero(mean >= thr)[0]
    return float(steps[hit[0]]) if hit.size else None


def bootstrap_steps_to(runs: list[dict], thr: float, *, n: int = 2000, seed: int = 0) -> tuple[float, float] | None:
    """95% bootstrap interval over seeds of the steps to ``thr`` on the mean curve.

    Each of ``n`` resamples draws ``len(runs)`` seeds with replacement and takes the first step at
    which their mean curve (on the steps every run reached) is at or above ``thr``; a resample that
    never gets there counts as ``inf`` (beyond the budget). Returns the 2.5th and 97.5th percentiles
    (``inf`` when more than 2.5% of the resamples do not reach ``thr``), or ``None`` with fewer than
    two runs (no spread to resample). Deterministic for a given ``seed``."""
    if len(runs) < 2:
        return None
    common = sorted(set.intersection(*[{r["env_steps"] for r in run["rows"]} for run in runs]))
    steps = np.array(common, dtype=float)
    vals = np.array([[success_by_step(run)[s] for s in common] for run in runs])  # (seeds, steps)
    means = vals[resample_indices(len(runs), n=n, seed=seed)].mean(1)  # (n, steps)
    hit = means >= thr
    first = np.where(hit.any(1), steps[hit.argmax(1)], np.inf)
    lo, hi = np.percentile(first, [2.5, 97.5], method="inverted_cdf")
    return float(lo), float(hi)


def fmt_interval(ci: tuple[float, float] | None, budget: int) -> str:
    if ci is None:
        return ""
    lo, hi = (f"{v / 1000:g}k" if np.isfinite(v) else f"> {budget / 1000:g}k" for v in ci)
    return f" [{lo}, {hi}]"


def _sort_key(label: str):
    base = label.split("_s")[0]
    return (ORDER.index(base) if base in ORDER else 99, label)


def fmt_steps(v: float | None, budget: int) -> str:
    return f"{v / 1000:g}k" if v is not None else f"not reached (> {budget / 1000:g}k)"


def plot(data, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = sorted(data)
    # one task per row, its legend under it in large type: legible at the docs page's width (about 570 px)
    heights = [4.2 + 0.3 * len(data[t]) for t in tasks]
    fig, axes = plt.subplots(len(tasks), 1, figsize=(8, sum(heights)), squeeze=False,
                             gridspec_kw={"height_ratios": heights})
    # one colour per config label on every panel
    labels = sorted({label for task in tasks for label in data[task]}, key=_sort_key)
    fixed = {"sparse": "black", "her": "tab:blue", "prm_s10": "tab:green", "prm_her_s10": "tab:red"}
    # a colour and marker pair of its own for every other label (20 colours x 4 markers before one repeats)
    taken = {matplotlib.colors.to_rgb(c) for c in fixed.values()}
    spare = itertools.cycle([(c, m) for m in ("o", "s", "^", "D") for c in plt.get_cmap("tab20").colors
                             if tuple(c) not in taken])
    style = {label: (fixed[label], "o") if label in fixed else next(spare) for label in labels}
    colour = {label: st[0] for label, st in style.items()}
    for ax in axes.flat[len(tasks):]:
        ax.set_visible(False)
    for ax, task in zip(axes.flat, tasks):
        for label in sorted(data[task], key=_sort_key):
            runs = headline_runs(data[task][label])
            steps, m, lo, hi = mean_curve(runs)
            partial = any(r["done"] is None for r in runs)
            ls = "--" if partial else "-"
            line, = ax.plot(steps, m, ls, marker=style[label][1], ms=3.5, color=colour[label],
                            label=f"{label} (n={len(runs)}{', partial' if partial else ''})")
            if len(runs) > 1:
                ax.fill_between(steps, lo, hi, alpha=0.15, color=line.get_color())
            for r in data[task][label]:
                if r not in runs:  # still running: its own curve, dashed, not in the mean
                    ax.plot([row["env_steps"] for row in r["rows"]], [row["success_rate"] for row in r["rows"]],
                            "--", color=line.get_color(), lw=0.8, label=f"{label} seed {r['seed']} (partial)")
        ax.axhline(0.8, color="grey", lw=0.6, ls=":")
        ax.axhline(0.5, color="grey", lw=0.6, ls=":")
        ax.set_title(f"{task} (SAC; unshaped eval, {TASKS[task]['eval_episodes']} episodes)", fontsize=15)
        ax.set_xlabel("env steps", fontsize=13)
        ax.set_ylabel("success rate", fontsize=13)
        ax.tick_params(labelsize=12)
        ax.set_ylim(-0.02, 1.02)
        ax.legend(fontsize=11, loc="upper left", bbox_to_anchor=(0.0, -0.16), ncol=1, frameon=False)
    fig.tight_layout()
    save_figure(fig, path, dpi=110, bbox_inches="tight")


def table(data) -> str:
    lines = []
    for task in sorted(data):
        cfg = TASKS[task]
        budget = cfg.get("steps")
        lines += [f"### {task}", "",
                  f"SAC, {json.dumps(cfg['algo_kwargs'])}, observation normalisation "
                  f"{'on' if cfg.get('normalize_obs') else 'off'} (VecNormalize, obs only); budget {budget} env steps; eval every "
                  f"{cfg['eval_freq']} steps, {cfg['eval_episodes']} deterministic episodes on the unshaped env "
                  "(same eval seeds for every config).", "",
                  f"| config | seeds | steps to 50% [95% CI] | steps to 80% [95% CI] | steps to 80% per seed | success AUC | success at {budget / 1000:g}k (mean; per seed) | final success (mean; per seed) | wall-clock per run (train + eval) | pruned episodes / env steps saved |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        summary = {}
        for label in sorted(data[task], key=_sort_key):
            all_runs = data[task][label]
            runs = headline_runs(all_runs)
            steps, m, _, _ = mean_curve(runs)
            s50, s80 = steps_to(steps, m, 0.5), steps_to(steps, m, 0.8)
            last_step = int(steps[-1])
            finals = [r["rows"][-1]["success_rate"] for r in runs]
            def seed_note(r):
                if not r["done"]:
                    return f" (partial, {int(r['rows'][-1]['env_steps'])} steps)"
                return "" if r["done"].get("steps") == budget else f" ({r['done'].get('steps')} steps)"

            seeds = ", ".join(f"{r['seed']}{seed_note(r)}" + ("" if r in runs else " (not in the mean)") for r in all_runs)
            walls = [r["rows"][-1]["train_wall_s"] + r["rows"][-1]["eval_wall_s"] for r in runs]
            tw = np.mean([r["rows"][-1]["train_wall_s"] for r in runs])
            ew = np.mean([r["rows"][-1]["eval_wall_s"] for r in runs])
            prune = "-"
            dones = [r["done"] for r in runs if r["done"]]
            if "prune" in label and dones:
                prune = "; ".join(
                    f"{d['pruned_episodes']}/{d['episodes']} episodes pruned, "
                    f"{d.get('pruner_stats', {}).get('steps_saved', 'unmeasured')} env steps saved" for d in dones)
            per_seed = {}
            for r in all_runs:
                rs = np.array([row["env_steps"] for row in r["rows"]])
                per_seed[r["seed"]] = (steps_to(rs, np.array([row["success_rate"] for row in r["rows"]]), 0.8), int(rs[-1]))
            seed80 = "; ".join(f"{sd}: {fmt_steps(v, last)}" for sd, (v, last) in per_seed.items())
            summary[label] = (s50, s80, last_step, {r["seed"]: per_seed[r["seed"]] for r in runs})
            auc = float(np.mean(m[steps <= budget]))  # over the task's budget: comparable across configs
            at_b = [success_by_step(r).get(budget) for r in runs]
            at_budget = (f"{np.mean(at_b):.2f}; {', '.join(f'{v:.2f}' for v in at_b)}" if None not in at_b
                         else "-")  # equal-budget comparison (runs given a larger budget included)
            ci50, ci80 = (fmt_interval(bootstrap_steps_to(runs, t), last_step) for t in (0.5, 0.8))
            lines.append(f"| {label} | {seeds} | {fmt_steps(s50, last_step)}{ci50} | {fmt_steps(s80, last_step)}{ci80} | {seed80} | {auc:.2f} | {at_budget} | "
                         f"{np.mean(finals):.2f}; {', '.join(f'{f:.2f}' for f in finals)} | "
                         f"{np.mean(walls) / 60:.1f} min ({tw / 60:.1f} + {ew / 60:.1f}) | {prune} |")
        total = sum(r["rows"][-1]["train_wall_s"] + r["rows"][-1]["eval_wall_s"]
                    for label in data[task] for r in data[task][label])
        lines += ["", f"Wall-clock used for {task}: {total / 60:.0f} min (all runs above, train + eval).", "",
                  *goals(summary), ""]
    return "\n".join(lines)


def _prm_her_verdict(label: str, s80, h80, h_last) -> str:
    """PRM+HER reaches 80% in at most half of HER's steps (``None`` = not reached by the last eval)."""
    if h80 is None and s80 is not None and s80 <= h_last / 2:
        # HER needs more than its last evaluated step, so half of HER's is more than half of that
        return (f"**met**: {label} {s80 / 1000:g}k while HER did not reach 80% by {h_last / 1000:g}k "
                f"(goal <= half of HER's, i.e. more than {h_last / 2000:g}k)")
    if h80 is None:
        return ("undetermined: HER did not reach 80% within the budget"
                + (f"; {label} reached it at {s80 / 1000:g}k, later than half of the budget"
                   if s80 is not None else "; neither did PRM+HER"))
    if s80 is None:
        return f"**not met**: {label} did not reach 80% (HER: {h80 / 1000:g}k)"
    return ("**met**" if s80 <= h80 / 2 else "**not met**") + f": {label} {s80 / 1000:g}k vs HER {h80 / 1000:g}k (goal <= {h80 / 2000:g}k)"


def _prm_verdict(s80, h80) -> str:
    """PRM alone reaches 80% in no more steps than HER."""
    if s80 is None:
        return "**not met**: did not reach 80%" + ("" if h80 is None else f" (HER: {h80 / 1000:g}k)")
    if h80 is None:
        return f"**met**: {s80 / 1000:g}k while HER did not reach 80%"
    return ("**met**" if s80 <= h80 else "**not met**") + f": {s80 / 1000:g}k vs HER {h80 / 1000:g}k"


def goals(summary) -> list[str]:
    """Goal verdicts from ``summary[label] = (s50, s80, last_step[, per_seed])`` where ``per_seed``
    maps seed -> (s80, last_step) of that seed's own curve. The headline verdict uses the mean
    curve (on the steps every seed reached); seeds run to different budgets also get a verdict
    each, for every seed both HER and the PRM config ran."""
    out = ["Goals (steps to 80% on the mean curve):", ""]
    her = summary.get("her")
    if her is None:
        return out + ["- HER baseline not run: goals undetermined."]
    h80 = her[1]
    her_seeds = her[3] if len(her) > 3 else {}
    for label, (s50, s80, last, *rest) in summary.items():
        per_seed = rest[0] if rest else {}
        both = sorted(set(per_seed) & set(her_seeds))
        # seeds that differ from HER's: the mean-curve verdict compares different seed sets, so say so
        # and give the verdict of every seed both ran
        differ = bool(per_seed) and bool(her_seeds) and set(per_seed) != set(her_seeds)
        note = (f" (mean over seeds {', '.join(map(str, sorted(per_seed)))} vs HER's over "
                f"{', '.join(map(str, sorted(her_seeds)))}: see the per-seed verdicts)") if differ else ""
        per_seed_lines = len(both) > 1 or (differ and both)
        if label.startswith("prm_her") and "prune" not in label:
            out.append(f"- PRM+HER <= half of HER's steps to 80% ({label}): {_prm_her_verdict(label, s80, h80, her[2])}{note}")
            if per_seed_lines:
                out += [f"  - seed {sd}: {_prm_her_verdict(label, per_seed[sd][0], her_seeds[sd][0], her_seeds[sd][1])}"
                        for sd in both]
        elif label.startswith("prm_s") and "prune" not in label:
            out.append(f"- PRM alone <= HER's steps to 80% ({label}): {_prm_verdict(s80, h80)}{note}")
            if per_seed_lines:
                out += [f"  - seed {sd}: {_prm_verdict(per_seed[sd][0], her_seeds[sd][0])}" for sd in both]
    return out


NOISE = ROOT / "benchmarks" / "results" / "rl_potential_noise.json"
#: per task, the seeds on which a learned-potential config was screened before it was run on the
#: others (the report adds its comparison with the spec on the untouched seeds alone)
SCREENED_ON = {"FetchPush-v4": {"prm_her_s10_critic-push_cov_ens-progress": (3,),
                                "prm_her_s10_critic-push_cov-progress_anneal100k": (3,),
                                "prm_her_s10_critic-push_sts-success": (3,)}}
#: per task, seeds declared for a config after it was chosen and before any of its runs on them: its
#: confirmation (the report compares it with the spec potential on these seeds alone and gives the goal's
#: verdict there, since the seeds it was chosen on are not untouched)
CONFIRM_ON = {"FetchPush-v4": {"prm_her_s10_critic-push_cov_ens-progress": (5, 6, 7, 8, 9)}}
#: learned-potential goal: mean success at the budget >= the spec's - 0.05 and >= HER's + 0.20, on 5 seeds
GOAL_VS_SPEC, GOAL_VS_HER, GOAL_SEEDS = 0.05, 0.20, 5


def seed_list(seeds) -> str:
    """``0-4, 7``: sorted seeds with consecutive runs collapsed."""
    out, run = [], []
    for k in sorted(seeds):
        if run and k != run[-1] + 1:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
            run = []
        run.append(k)
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ", ".join(out)


def goal_verdict(mine: dict[int, float], spec: dict[int, float], her: list[float],
                 words: tuple[str, str] = ("met", "not met")) -> str:
    """The learned-potential goal on the seeds both the learned potential and the spec potential
    finished (their means on the same seeds, so that a seed only one of them ran does not tilt the
    comparison), against HER's mean over its own seeds."""
    common = sorted(set(mine) & set(spec))
    m, ms, mh = np.mean([mine[k] for k in common]), np.mean([spec[k] for k in common]), np.mean(her)
    ok = m >= ms - GOAL_VS_SPEC and m >= mh + GOAL_VS_HER
    return (f"**{words[0] if ok else words[1]}** ({m:.2f} vs spec {ms:.2f} - {GOAL_VS_SPEC:g} on the same seeds "
            f"{seed_list(common)}, and HER {mh:.2f} + {GOAL_VS_HER:g})")


def fmt_mean(vals) -> str:
    """``0.76 [0.66, 0.84] (n=10)``: mean, 95 % bootstrap interval (2 or more values) and count; ``-`` for none."""
    if not vals:
        return "-"
    ci = bootstrap_mean(vals)
    return f"{np.mean(vals):.2f}" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "") + f" (n={len(vals)})"


def critic_recipes(data) -> dict[str, dict[str, tuple[str, int]]]:
    """Per task, ``label -> (recipe key, training seed)`` for every learned-critic config whose finished
    runs name a critic written by ``train_potential.py`` (see its ``recipe``); other labels (other
    checkpoints, ensembles) are left out.

    The critic file is loaded (its own hashes checked) and its weights' fingerprint compared with the
    ``critic_sha256`` each run recorded: a critic file that changed after its runs is refused, since
    the runs would then be pooled under a recipe they were not trained with."""
    from prm_critic.models.state_critic import TorchStateCritic
    from prm_critic.sb3.envs import critic_fingerprint, resolve_critic

    from benchmarks.rl.train_potential import recipe

    out: dict[str, dict[str, tuple[str, int]]] = {}
    for task, configs in data.items():
        for label, runs in configs.items():
            done = [r for r in runs if r["done"]]
            if "_critic-" not in label or "_randw" in label or not done:
                continue
            paths = {r["done"].get("critic") for r in done}
            if None in paths:
                continue
            if len(paths) != 1:
                raise ValueError(f"{task}/{label}: expected one critic file for all its runs, got {sorted(paths)}")
            path = ROOT / paths.pop()
            critic = resolve_critic(str(path), None)  # a checkpoint or an ensemble file, hashes checked
            fp = critic_fingerprint(critic)
            for r in done:
                if r["done"].get("critic_sha256") != fp:
                    raise ValueError(f"{task}/{label} seed {r['seed']}: the run recorded critic weights sha256 "
                                     f"{r['done'].get('critic_sha256')}, expected {fp} of {path} (the critic file "
                                     "changed after the run)")
            rec = recipe(critic.meta) if isinstance(critic, TorchStateCritic) else None  # an ensemble has none
            if rec is not None:
                key = json.dumps(rec, sort_keys=True)
                out.setdefault(task, {})[label] = (key, int(critic.meta["train_config"]["seed"]))
    return out


ORDER_RAW = ROOT / "benchmarks" / "results" / "rl_critic_order.json"


def order_cells(label: str, order: dict) -> str:
    """``value order | AUROC`` of the run's critic and head (``critic_order.py``), ``- | -`` unmeasured."""
    m = re.search(r"_critic-(.+)-(progress|success)", label)
    if "_randw" in label:  # another critic: the same architecture with its weights drawn anew (unmeasured)
        return "- | - |"
    row = order.get("critics", {}).get(m.group(1), {}).get(m.group(2)) if m else None
    return f"{row['value_order']:.2f} | {row['auroc']:.2f} |" if row else "- | - |"


def learned_potentials(data, noise: dict, recipes: dict | None = None) -> list[str]:
    """Per task: every learned-critic config (``_critic-`` in its label) beside the spec potential, HER
    and its random-weights control, with success at the budget (mean, 95 % bootstrap interval over
    seeds), the potential's noise (mean |dPhi| per step on random-action and scripted states, from
    ``potential_noise.py``) and the goal's verdict. ``recipes`` (from :func:`critic_recipes`) pools the
    critics of one recipe trained with different seeds into one line and one verdict."""
    out = []
    recipes = recipes or {}
    order = json.loads(ORDER_RAW.read_text()) if ORDER_RAW.is_file() else {}
    for task in sorted(data):
        labels = [lb for lb in sorted(data[task], key=_sort_key) if "_critic-" in lb]
        if not labels:
            continue
        budget = TASKS[task]["steps"]

        def by_seed(label) -> dict[int, float]:
            return success_at(data[task].get(label, []), budget)

        def at_budget(label):
            return list(by_seed(label).values())

        her = at_budget("her")
        tn = noise.get(task, {})
        screened_on = SCREENED_ON.get(task, {})
        out += [f"### {task}: learned potentials", "",
                f"Success at {budget / 1000:g}k (mean over finished seeds, 95 % bootstrap interval, n seeds) and "
                "the potential's noise: mean |Phi(s') - Phi(s)| per step on random-action episodes (what an untrained "
                "policy visits) and on scripted episodes (`benchmarks/rl/potential_noise.py`); the potential's value "
                "order (Spearman of the value with time along successful held-out scripted episodes) and its AUROC "
                "against episode success, on one evaluation set per task that no critic was trained on "
                "(`benchmarks/rl/critic_order.py`).", "",
                "| config | success | mean \\|dPhi\\| random-action | mean \\|dPhi\\| scripted | value order | AUROC |",
                "|---|---|---|---|---|---|"]
        spec_noise = next((v["spec"] for v in tn.values()), None)
        out.append(f"| her | {fmt_mean(her)} | - | - | - | - |")
        for base in sorted({lb.split("_critic-")[0] for lb in labels}, key=_sort_key):
            out.append(f"| {base} (spec potential) | {fmt_mean(at_budget(base))} | "
                       + (f"{spec_noise['random_dphi']:.3f} | {spec_noise['scripted_dphi']:.3f} |" if spec_noise
                          else "- | - |") + " - | - |")
        verdicts = []
        for label in labels:
            vals = at_budget(label)
            spec = at_budget(label.split("_critic-")[0])
            key = re.sub(r"_anneal[0-9a-z.]+", "", label[label.index("critic-"):])  # annealing: the same potential
            nz = tn.get(key)
            out.append(f"| {label} | {fmt_mean(vals)} | " + (f"{nz['random_dphi']:.3f} | {nz['scripted_dphi']:.3f} |"
                                                         if nz else "unmeasured | unmeasured |")
                       + " " + order_cells(label, order))
            if "_randw" in label or not vals:
                continue
            mine, spec_seeds = by_seed(label), by_seed(label.split("_critic-")[0])
            if (n := len(set(mine) & set(spec_seeds))) < GOAL_SEEDS or len(her) < GOAL_SEEDS:
                verdicts.append(f"- {label}: undetermined ({n} of {GOAL_SEEDS} seeds finished by it and the spec; "
                                f"it {len(vals)}, spec {len(spec)}, HER {len(her)} at {budget / 1000:g}k)")
                continue
            screened = screened_on.get(label, ())
            verdicts.append(f"- {label}: {goal_verdict(mine, spec_seeds, her)}"
                            + (f"; screened on seed {', '.join(map(str, screened))} first" if screened else ""))
        def paired(label, other, name, interval, a=None):
            """``label`` minus ``other`` paired by seed: mean difference (with its bootstrap interval if
            ``interval``), wins and losses, exact sign test; ``None`` without a common seed. ``a``: the
            per-seed values standing for ``label`` (default: its runs')."""
            a, b = by_seed(label) if a is None else a, by_seed(other)
            common = sorted(set(a) & set(b))
            if not common:
                return None
            diffs = [a[k] - b[k] for k in common]
            pos, neg = sum(d > 0 for d in diffs), sum(d < 0 for d in diffs)
            ci = bootstrap_mean(diffs) if interval else None
            return (f"- {label} minus {name}, paired by seed (seeds {', '.join(map(str, common))}): "
                    f"mean {np.mean(diffs):+.2f}" + (f" [{ci[0]:+.2f}, {ci[1]:+.2f}]" if ci else "")
                    + f"; learned higher on {pos}, lower on {neg}; exact sign test p = {sign_test_p(pos, pos + neg):.3g}")

        learned = [lb for lb in labels if "_randw" not in lb]
        controls = []
        for label in learned:
            own = [ctrl for ctrl in labels if ctrl.startswith(label + "_randw")]
            # a config without its own control is paired with the uninformed controls of its shaper config
            # (random weights of a critic of the same task, in the same shaper, scale and gamma)
            shared = [] if own else [ctrl for ctrl in labels if "_randw" in ctrl
                                     and ctrl.split("_critic-")[0] == label.split("_critic-")[0]]
            controls += [line for ctrl in own if (line := paired(label, ctrl, ctrl, False))]
            controls += [line for ctrl in shared
                         if (line := paired(label, ctrl, f"{ctrl} (the shaper config's control)", False))]
        vs_spec = []
        for label in learned:
            base = label.split("_critic-")[0]
            if line := paired(label, base, f"{base} (spec potential)", True):
                vs_spec.append(line)
            screened = screened_on.get(label, ())
            untouched = {k: v for k, v in by_seed(label).items() if k not in screened}
            if screened and len(untouched) >= 2 and (
                    line := paired(label, base, f"{base} (spec potential)", True, a=untouched)):
                vs_spec.append(f"  - on the seeds it was not screened on (screened on seed "
                               f"{', '.join(map(str, screened))}): " + line.split(", paired by seed ", 1)[1])
        confirm = []
        for label, seeds in CONFIRM_ON.get(task, {}).items():
            if label not in data[task]:
                continue
            base = label.split("_critic-")[0]
            mine = {k: v for k, v in by_seed(label).items() if k in seeds}
            spec = {k: v for k, v in by_seed(base).items() if k in seeds}
            both = sorted(set(mine) & set(spec))
            head = (f"- {label} on seeds {', '.join(map(str, seeds))}: {len(mine)} of {len(seeds)} finished "
                    f"({fmt_mean(list(mine.values()))}); spec potential {len(spec)} of {len(seeds)} "
                    f"({fmt_mean(list(spec.values()))})")
            confirm.append(head)
            if line := paired(label, base, f"{base} (spec potential)", True, a=mine):
                confirm.append("  - " + line[2:])
            if len(both) < len(seeds) or len(her) < GOAL_SEEDS:
                confirm.append(f"  - verdict: pending ({len(both)} of {len(seeds)} seeds finished for both; "
                               f"HER {len(her)} of {GOAL_SEEDS})")
                continue
            confirm.append(f"  - verdict: {goal_verdict(mine, spec, her, ('confirmed', 'not confirmed'))}")
        if vs_spec:
            out += ["", f"Learned potential against the spec potential, paired by seed (same seed: same initial "
                    f"networks and env seeds), success at {budget / 1000:g}k, with the 95 % bootstrap interval of the "
                    "mean paired difference:", "", *vs_spec]
        if confirm:
            out += ["", "Confirmation on fresh seeds: seeds declared for a config after it was chosen (its seeds "
                    "above were seen while choosing it) and before any of its runs on them. The same goal, on "
                    f"these seeds alone, against the spec potential on the same seeds (success at "
                    f"{budget / 1000:g}k, 95 % bootstrap intervals):", "", *confirm]
        pooled, pooled_verdicts = [], []
        groups: dict[tuple[str, str], list[str]] = defaultdict(list)
        for label, (key, _) in recipes.get(task, {}).items():
            # pooled: one recipe in one run config (a run with another schedule or refresh is another config)
            groups[(key, re.sub(r"_critic-[^-]+-", "_critic-*-", label))].append(label)
        for members in groups.values():
            if len(members) < 2:
                continue
            members.sort(key=lambda lb: recipes[task][lb][1])
            base = members[0].split("_critic-")[0]
            per = {lb: by_seed(lb) for lb in members}
            seeds_all = sorted(set.intersection(*(set(v) for v in per.values())))
            seed_means = {k: float(np.mean([per[lb][k] for lb in members])) for k in seeds_all}
            name = " + ".join(members)
            tseeds = ", ".join(str(recipes[task][lb][1]) for lb in members)
            n_runs = sum(len(v) for v in per.values())
            ci = bootstrap_mean(list(seed_means.values()))
            pooled.append(f"- {name} (training seeds {tseeds}; {n_runs} runs): mean over the critics of each "
                          f"critic's mean {np.mean([np.mean(list(v.values())) for v in per.values()]):.2f}; on the "
                          f"{len(seeds_all)} seeds every critic ran, {np.mean(list(seed_means.values())):.2f}"
                          + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "") + " (95 % bootstrap interval over seeds)")
            if line := paired(name, base, f"{base} (spec potential)", True, a=seed_means):
                pooled.append(line.replace("- ", "  - ", 1))
            spec, counts = by_seed(base), [len(v) for v in per.values()]
            if len(set(seed_means) & set(spec)) < GOAL_SEEDS or len(her) < GOAL_SEEDS:
                pooled_verdicts.append(f"- {name}: undetermined (seeds per critic {', '.join(map(str, counts))} of "
                                       f"{GOAL_SEEDS}; spec {len(spec)}, HER {len(her)} at {budget / 1000:g}k)")
                continue
            pooled_verdicts.append(f"- {name}: {goal_verdict(seed_means, spec, her)}")
        if pooled:
            out += ["", "One recipe, several training seeds: critics trained by `train_potential.py` with the same "
                    "data, labels and settings, differing only in `--seed` (initial weights and batch order), pooled "
                    "so that no training seed is picked after its RL results are seen. Paired against the spec by RL "
                    "seed, each seed's value is the mean over the critics:", "", *pooled]
        if controls:
            out += ["", "Learned potential against its uninformed control (the same critic, weights drawn anew; a "
                    "config without its own is paired with its shaper config's control, a critic of the same task "
                    f"and width with random weights in the same shaper, scale and gamma), success at "
                    f"{budget / 1000:g}k:", "", *controls]
        out += ["", f"Goal: a learned potential's mean success at {budget / 1000:g}k at least the spec potential's (same "
                "config and scale: the label before `_critic-`) "
                f"minus {GOAL_VS_SPEC:g}, both on the seeds both finished (at least {GOAL_SEEDS}), and at least "
                f"HER's plus {GOAL_VS_HER:g} (HER on its {GOAL_SEEDS} or more seeds); "
                "`_randw<SEED>` rows are the uninformed control (the same critic with its weights drawn anew).", "",
                *(verdicts or ["- no learned potential has a finished run"]), ""]
        if pooled_verdicts:
            out += ["The same goal for each recipe with several training seeds (the mean of its critics' means; "
                    "every critic on the goal's seeds). This is the verdict on the recipe: a single training "
                    "seed's verdict above could have been picked by luck of its initial weights.", "",
                    *pooled_verdicts, ""]
    return out


BUFFER = ROOT / "benchmarks" / "results" / "rl_buffer_diagnosis.json"


def state_key(key: str) -> tuple[str, int, int]:
    """``(label, seed, env steps)`` of a buffer-diagnosis state key ``<label>/seed<N>@<env steps>``."""
    run, _, steps = key.rpartition("@")
    label, _, seed = run.rpartition("/seed")
    if not (label and seed.isdigit() and steps.isdigit()):
        raise ValueError(f"{BUFFER.name}: expected training-state keys '<label>/seed<N>@<env steps>' under each "
                         f"task, got {key!r} (a file written before measurements were filed by state: "
                         "rerun buffer_diagnosis.py)")
    return label, int(seed), int(steps)


def buffer_diagnosis(raw: dict, data: dict | None = None) -> list[str]:
    """The learned potentials against the spec's on a learner's own replay buffer (``buffer_diagnosis.py``):
    one table per training state (``raw[task]["<run>@<steps>"][critic]``), states in run, then step order.

    With ``data`` (the runs), each state first gets a compact table: per critic, how closely its
    shaping term follows the spec's (correlation of the two dPhi on relabelled transitions, by window)
    beside the RL success of that critic as the potential in the state's shaper config
    (``prm_her_s<scale>_<critic>``) at the task's budget, and the rank correlation of the two over the
    critics that ran."""
    from scipy.stats import spearmanr

    out = []
    for task, states in sorted(raw.items()):
        budget = TASKS[task]["steps"] if task in TASKS else None
        for key in sorted(states, key=state_key):
            crits = states[key]
            run_label, run_seed, _ = state_key(key)
            first = next(iter(crits.values()))
            out += [f"### {task}: learned potentials on the learner's replay buffer ({run_label}/seed{run_seed})", ""]
            if data is not None and budget is not None:
                windows = list(first["windows"])
                rows, pairs = [], []
                for crit, d in sorted(crits.items()):
                    rc = d["run_config"]
                    label = f"{config_label('prm_her' if rc['her'] else 'prm', rc['scale'], False)}_{crit}"
                    vals = list(success_at(data.get(task, {}).get(label, []), budget).values())
                    corr = [d["windows"].get(w, {}).get("relabelled", {}).get("dphi_corr") for w in windows]
                    cells = ["-" if c is None else f"{c:.2f}" for c in corr]
                    if vals and corr[-1] is not None:
                        pairs.append((corr[-1], float(np.mean(vals))))
                    rows.append(f"| {label} | " + " | ".join(cells) + f" | {fmt_mean(vals) if vals else 'no run'} |")
                own = success_at(data.get(task, {}).get(run_label, []), budget).get(run_seed)
                out += [(f"The learner that stored this buffer reached {own:.2f} at {budget / 1000:g}k. " if own is not None
                         else f"The learner that stored this buffer has no finished run at {budget / 1000:g}k. ") +
                        f"How closely each learned shaping term follows the spec's on this buffer (correlation of the "
                        f"learned dPhi with the spec's on relabelled transitions, by window of env steps) beside the "
                        f"success of that critic as the potential at {budget / 1000:g}k (mean over finished seeds, "
                        "95 % bootstrap interval):", "",
                        "| config | " + " | ".join(f"corr dPhi {w}" for w in windows) + f" | success at {budget / 1000:g}k |",
                        "|---|" + "---|" * len(windows) + "---|", *rows, ""]
                if len(pairs) >= 4:
                    rho = spearmanr([c for c, _ in pairs], [v for _, v in pairs]).statistic
                    out += [f"Rank correlation over the {len(pairs)} critics with runs, corr dPhi in the last window "
                            f"against mean success: Spearman {rho:.2f}.", ""]
            out += [f"Transitions stored by a learner ({first['state']}), in windows of env steps, as stored and as "
                    "HER relabels them (four of every five the learner samples): Spearman correlation of Phi with "
                    "the spec's progress, mean |dPhi| per step (learned / spec), the correlation of the learned dPhi "
                    "with the spec's (how well the learned shaping term follows the one that works) and the mean "
                    f"|dPhi learned - dPhi spec|. Command per row: `{first['command']}` (with that row's critic).", "",
                    "| critic | window | transitions | Spearman Phi | \\|dPhi\\| learned / spec | corr dPhi | \\|dPhi error\\| |",
                    "|---|---|---|---|---|---|---|"]
            for crit, d in sorted(crits.items()):
                for w, kinds in d["windows"].items():
                    for kind, r in kinds.items():
                        corr = "-" if r["dphi_corr"] is None else f"{r['dphi_corr']:.2f}"
                        out.append(f"| {crit} | {w} | {kind} | {r['spearman_phi']:.2f} | {r['dphi_learned']:.3f} / "
                                   f"{r['dphi_spec']:.3f} | {corr} | {r['dphi_err']:.3f} |")
            out.append("")
    return out


#: per task, the configs the headline compares: HER, the spec potential, the uninformed control (a
#: critic with random weights in the same shaper) and the chosen learned potential
#: spec-free potentials learned from demonstrations: per task, the potential's run label, its uninformed
#: control, HER, the spec potential, the demonstrations-only controls, the seeds the recipe was screened
#: on and the seeds declared for the goal before any run of the potential on them
DEMO_PLAN = {"FetchPush-v4": {
    "potential": "prm_her_s10_critic-push_demo-progress", "random": "prm_her_s10_critic-push_demo-progress_randw0",
    "her": "her", "spec": "prm_her_s10",
    "controls": ("her_demos-push_demo-buffer", "her_demos-push_demo-starts0.5"),
    "combined": ("prm_her_s10_critic-push_demo-progress_demos-push_demo-buffer",),
    "critic": "push_demo", "screen": (0, 1, 2), "declared": tuple(range(10, 20))},
    # the second task, declared before any run of the recipe on it: the FetchPush recipe unchanged (300 scripted
    # episodes, the first 100 successful training ones, relabel 4, branches 3000 x 10, 30 epochs, scale 10)
    "PointMaze_Medium-v3": {
    "potential": "prm_her_s10_continuing_critic-maze_demo-progress",
    "random": "prm_her_s10_continuing_critic-maze_demo-progress_randw0",
    "her": "her_continuing", "spec": "prm_her_s10_continuing",
    "controls": ("her_continuing_demos-maze_demo-buffer", "her_continuing_demos-maze_demo-starts0.5"),
    "critic": "maze_demo", "screen": (), "declared": tuple(range(10, 15))}}
#: the goal: mean success >= 0.60, >= the best demonstrations-only control + 0.15 (paired, interval excluding 0),
#: and the potential's random-weights control within 0.05 of HER
DEMO_GOAL_MIN, DEMO_GOAL_OVER_CONTROL, DEMO_GOAL_RANDOM_TOL = 0.60, 0.15, 0.05


def paired_diff(a: dict[int, float], b: dict[int, float]) -> tuple[list[int], float, tuple[float, float] | None, int, int]:
    """Seeds both finished, the mean of ``a - b`` over them, its 95 % bootstrap interval, wins and losses."""
    common = sorted(set(a) & set(b))
    d = [a[k] - b[k] for k in common]
    return common, float(np.mean(d)) if d else float("nan"), bootstrap_mean(d), sum(x > 0 for x in d), sum(x < 0 for x in d)


def demo_potentials(data) -> list[str]:
    """The spec-free potential of :data:`DEMO_PLAN` beside its controls, per seed, with the goal's verdict on
    the declared seeds (pending until every declared run of every config has finished)."""
    out: list[str] = []
    for task, plan in DEMO_PLAN.items():
        if task not in data:
            continue
        budget = TASKS[task]["steps"]
        cols = [("HER", plan["her"]), *[(c.split("_demos-")[1], c) for c in plan["controls"]],
                ("random-weights control", plan["random"]), ("learned potential", plan["potential"]),
                *[("learned potential + " + c.split("_demos-")[1], c) for c in plan.get("combined", ())],
                ("spec potential", plan["spec"])]
        vals = {label: success_at(data[task].get(label, []), budget) for _, label in cols}
        crit = HERE / "critics" / f"{plan['critic']}.json"
        rec = json.loads(crit.read_text())["meta"] if crit.is_file() else {}
        out += [f"## Spec-free potential from demonstrations: {task}", "",
                f"`{plan['potential']}`: PRM+HER (scale 10) with the potential `{plan['critic']}`, trained by "
                "`train_potential.py --label demo_progress` on the time progress along successful demonstrations "
                "(hindsight goals, random-action branches as negatives); it reads nothing of the task spec. Its "
                "controls use the same demonstrations without a reward model: in the replay buffer (`buffer`) and as "
                "episode starts (`starts`)" + ("; `learned potential + buffer` uses both" if plan.get("combined") else "")
                + ". Success at "
                f"{budget / 1000:g}k steps, 50 evaluation episodes, per seed.", ""]
        if rec.get("demonstrations"):
            d = rec["demonstrations"]
            m = rec.get("metrics", {}).get("heldout", {})
            out += [f"Demonstrations: {d['count']} successful episodes of `{d['folder']}` (policy {d['policy']}, "
                    f"SHA-256 `{d['sha256'][:12]}`). Held-out value order (Spearman of the value with time along "
                    f"successful episodes) {m.get('spearman_success_time', float('nan')):.2f}, AUROC of the value "
                    f"against episode success {m.get('auroc_success', float('nan')):.2f}.", ""]
        for name, seeds in (("screening seeds (the recipe was chosen on them)", plan["screen"]),
                            ("declared seeds (fixed before the potential's runs)", plan["declared"])):
            if not seeds:
                continue
            head = "| seed | " + " | ".join(c for c, _ in cols) + " |"
            rows = [f"| {k} | " + " | ".join(f"{vals[label][k]:.2f}" if k in vals[label] else "-" for _, label in cols)
                    + " |" for k in seeds]
            means = "| mean | " + " | ".join(fmt_mean([vals[label][k] for k in seeds if k in vals[label]])
                                             for _, label in cols) + " |"
            out += [f"**{name.capitalize()}: {seed_list(seeds)}**", "", head, "|" + "---|" * (len(cols) + 1), *rows,
                    means, ""]
        out += demo_goal(vals, plan)
    return out


def plot_demo(data, path: Path) -> bool:
    """Per :data:`DEMO_PLAN` task, success vs env steps of the spec-free potential and its controls, per seed
    (thin) and their mean over the seeds each finished (thick); ``False`` when nothing ran."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = [t for t in DEMO_PLAN if t in data and data[t].get(DEMO_PLAN[t]["potential"])]
    if not tasks:
        return False
    fig, axes = plt.subplots(len(tasks), 1, figsize=(8, 6.5 * len(tasks)), squeeze=False)
    for ax, task in zip(axes.flat, tasks):
        plan = DEMO_PLAN[task]
        budget = TASKS[task]["steps"]
        spare = iter(["tab:green", "tab:olive", "tab:cyan", "tab:brown"])
        colours = {plan["her"]: "tab:blue", **{c: next(spare) for c in (*plan["controls"], *plan.get("combined", ()))},
                   plan["random"]: "tab:gray", plan["potential"]: "tab:orange", plan["spec"]: "tab:red"}
        seeds = set(plan["screen"]) | set(plan["declared"])
        for label, colour in colours.items():
            runs = [r for r in data[task].get(label, []) if r["seed"] in seeds and r["done"]]
            if not runs:
                continue
            runs = [{**r, "rows": [row for row in r["rows"] if row["env_steps"] <= budget]} for r in runs]
            for r in runs:
                ax.plot([row["env_steps"] for row in r["rows"]], [row["success_rate"] for row in r["rows"]], "-",
                        color=colour, lw=0.6, alpha=0.5)
            steps, m, _, _ = mean_curve(runs)
            ax.plot(steps, m, "-", color=colour, lw=2.2, label=f"{label} (n={len(runs)})")
        ax.set_title(f"{task}: spec-free potential vs controls", fontsize=15)
        ax.set_xlabel("env steps", fontsize=13)
        ax.set_ylabel("success rate (unshaped eval)", fontsize=13)
        ax.tick_params(labelsize=12)
        ax.set_ylim(-0.02, 1.02)
        ax.legend(fontsize=11, loc="upper left", bbox_to_anchor=(0.0, -0.14), frameon=False)
    fig.tight_layout()
    save_figure(fig, path, dpi=110, bbox_inches="tight")
    return True


def demo_goal_bound(on: dict[str, dict[int, float]], plan: dict) -> str:
    """Why the goal fails whatever the unfinished declared runs give, or ``""``: the learned potential's
    mean with success 1 on each of its unfinished seeds is under :data:`DEMO_GOAL_MIN`, or its mean minus a
    demonstrations-only control's with 1 for the potential and 0 for the control on each seed either has
    not finished is under :data:`DEMO_GOAL_OVER_CONTROL` (the best control's mean is at least that
    control's). The estimates themselves are only ever taken over finished runs."""
    seeds, mine = plan["declared"], on[plan["potential"]]
    top = float(np.mean([mine.get(k, 1.0) for k in seeds]))
    if top < DEMO_GOAL_MIN:
        return f"the potential's mean is at most {top:.2f} < {DEMO_GOAL_MIN:.2f} with success 1 on its unfinished seeds"
    for ctrl in plan["controls"]:
        gap = float(np.mean([mine.get(k, 1.0) - on[ctrl].get(k, 0.0) for k in seeds]))
        if gap < DEMO_GOAL_OVER_CONTROL:
            return (f"the potential minus `{ctrl}` is at most {gap:+.2f} < {DEMO_GOAL_OVER_CONTROL:+.2f} with 1 for "
                    f"the potential and 0 for the control on every unfinished seed")
    return ""


def demo_goal(vals: dict[str, dict[int, float]], plan: dict) -> list[str]:
    """The goal's verdict on the declared seeds."""
    seeds = plan["declared"]
    on = {label: {k: v for k, v in d.items() if k in seeds} for label, d in vals.items()}
    missing = {label: [k for k in seeds if k not in on[label]]
               for label in (plan["potential"], plan["random"], plan["her"], *plan["controls"])}
    mine = on[plan["potential"]]
    lines = ["**Goal** (declared seeds): mean success at least "
             f"{DEMO_GOAL_MIN:.2f}, at least the best demonstrations-only control + {DEMO_GOAL_OVER_CONTROL:g} "
             f"(paired by seed, 95 % interval excluding 0), and the random-weights control within "
             f"{DEMO_GOAL_RANDOM_TOL:g} of HER.", ""]
    for ctrl in plan["controls"]:
        common, mean, ci, w, lo = paired_diff(mine, on[ctrl])
        if common:
            lines.append(f"- learned potential minus `{ctrl}`: {mean:+.2f}"
                         + (f" [{ci[0]:+.2f}, {ci[1]:+.2f}]" if ci else "")
                         + f" on seeds {seed_list(common)}; higher on {w}, lower on {lo}, sign test p = "
                         f"{sign_test_p(w, w + lo):.3g}")
    common, mean, ci, w, lo = paired_diff(on[plan["random"]], on[plan["her"]])
    if common:
        lines.append(f"- random-weights control minus HER: {mean:+.2f}" + (f" [{ci[0]:+.2f}, {ci[1]:+.2f}]" if ci else "")
                     + f" on seeds {seed_list(common)}")
    if any(missing.values()):
        todo = "; ".join(f"`{label}` seeds {seed_list(ks)}" for label, ks in missing.items() if ks)
        decided = demo_goal_bound(on, plan)
        if decided:
            return lines + ["", f"Verdict: **not met**, decided before every run finished ({decided}; "
                                f"not finished: {todo}).", ""]
        return lines + ["", f"Verdict: **pending** (not finished: {todo}).", ""]
    best = max(plan["controls"], key=lambda c: np.mean(list(on[c].values())))
    _, over, ci, _, _ = paired_diff(mine, on[best])
    _, rand_gap, _, _, _ = paired_diff(on[plan["random"]], on[plan["her"]])
    m = float(np.mean(list(mine.values())))
    checks = [(m >= DEMO_GOAL_MIN, f"mean {m:.2f} vs {DEMO_GOAL_MIN:.2f}"),
              (over >= DEMO_GOAL_OVER_CONTROL and ci is not None and ci[0] > 0,
               f"{over:+.2f} over the best control `{best}`, interval {ci}"),
              (abs(rand_gap) <= DEMO_GOAL_RANDOM_TOL, f"random-weights control {rand_gap:+.2f} from HER")]
    ok = all(c for c, _ in checks)
    return lines + ["", f"Verdict: **{'met' if ok else 'not met'}** (" + "; ".join(
        f"{'ok' if c else 'fails'}: {why}" for c, why in checks) + ").", ""]


HEADLINE = {"FetchPush-v4": ("her", "prm_her_s10", "prm_her_s10_critic-push_cov-progress_randw0",
                             "prm_her_s10_critic-push_cov_ens-progress")}


def headline(data) -> list[str]:
    """Success of the :data:`HEADLINE` configs at the task's budget (mean, 95 % bootstrap interval over
    finished seeds, every seed's value), and of a config whose runs went further at its own budget."""
    out = []
    for task, labels in HEADLINE.items():
        if task not in data:
            continue
        budget = TASKS[task]["steps"]
        lines = []
        for label in labels:
            runs = data[task].get(label, [])
            for steps in sorted({budget} | {int(r["done"]["steps"]) for r in runs if r["done"]}):
                vals = success_at(runs, steps)
                if not vals or (steps != budget and len(vals) < 2):
                    continue
                ci = bootstrap_mean(list(vals.values()))
                lines.append(f"| {label} | {steps / 1000:g}k | {len(vals)} | {np.mean(list(vals.values())):.2f}"
                             + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "") + " | "
                             + ", ".join(f"{k}: {v:.2f}" for k, v in sorted(vals.items())) + " |")
        if lines:
            out += [f"## Headline: {task}", "",
                    "Success (deterministic policy, 50 evaluation episodes) of HER, PRM+HER with the spec's "
                    "potential, PRM+HER with an uninformed potential (`_randw`: a critic with random weights) and "
                    "PRM+HER with the chosen learned potential; mean over finished seeds with its "
                    "95 % bootstrap interval, and every seed. The learned potential's verdicts, paired comparisons "
                    "and fresh-seed confirmation are under *Learned potentials*.", "",
                    "| config | steps | seeds | mean success [95% CI] | per seed |", "|---|---|---|---|---|",
                    *lines, ""]
    return out


GUIDE = ROOT / "docs" / "readme" / "train_policy.md"
#: the markers around the summary table that ``--guide`` rewrites in the user guide
GUIDE_START, GUIDE_END = "<!-- rl-summary: written by benchmarks/rl/report.py --guide -->", "<!-- rl-summary end -->"
#: the summary's columns: (heading, label in a task's runs; ``None``: the task's HEADLINE learned potential)
SUMMARY_COLUMNS = (("HER", "her"), ("PRM+HER, spec potential", "prm_her_s10"),
                   ("PRM+HER, learned potential", None), ("PRM alone", "prm_s10"), ("sparse", "sparse"))


def summary(data) -> list[str]:
    """One row per task: mean success of each :data:`SUMMARY_COLUMNS` config at the task's budget over
    its finished seeds (``n``), or at the last step every finished seed reached when that is short of
    the budget; a config whose runs went on gets its mean there too (HER on FetchPush at 200k)."""
    def cell(runs) -> str:
        runs = [r for r in runs if r["done"]]
        if not runs:
            return "-"
        budget_ = TASKS[task]["steps"]
        ends = sorted({int(r["done"]["steps"]) for r in runs})
        parts = []
        for steps in ([budget_] if ends[0] >= budget_ else [ends[0]]) + [e for e in ends if e > budget_][-1:]:
            vals = list(success_at(runs, steps).values())
            if len(vals) == len(runs):
                parts.append(f"{np.mean(vals):.2f}" + ("" if steps == budget_ else f" at {steps / 1000:g}k"))
        return (parts[0] + (f" ({parts[1]})" if len(parts) > 1 else "") + f" (n={len(runs)})") if parts else "-"

    out = ["| task, budget | " + " | ".join(h for h, _ in SUMMARY_COLUMNS) + " |",
           "|---" * (len(SUMMARY_COLUMNS) + 1) + "|"]
    for task in sorted(data, key=lambda t: list(TASKS).index(t) if t in TASKS else len(TASKS)):
        learned = next((lb for lb in HEADLINE.get(task, ()) if "_critic-" in lb and "_randw" not in lb), None)
        cells = [cell(data[task].get(label or learned or "", [])) for _, label in SUMMARY_COLUMNS]
        out.append(f"| {task}, {TASKS[task]['steps'] / 1000:g}k | " + " | ".join(cells) + " |")
    return out


def plot_paired(data, path: Path) -> bool:
    """Per :data:`HEADLINE` task, each seed's success at the budget: the learned potential (and the
    uninformed control) against the spec potential on the same seed, with the diagonal; seeds of
    :data:`CONFIRM_ON` filled, the others open. ``False`` (nothing written) without a common seed."""
    pairs = []
    for task, labels in HEADLINE.items():
        if task not in data or "prm_her_s10" not in labels:
            continue
        budget = TASKS[task]["steps"]

        spec = success_at(data[task].get("prm_her_s10", []), budget)
        for label in labels:
            if "_critic-" in label:
                mine = success_at(data[task].get(label, []), budget)
                common = sorted(set(mine) & set(spec))
                if common:
                    pairs.append((task, label, [(k, spec[k], mine[k]) for k in common],
                                  set(CONFIRM_ON.get(task, {}).get(label, ()))))
    if not pairs:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = sorted({p[0] for p in pairs})
    fig, axes = plt.subplots(1, len(tasks), figsize=(6.4 * len(tasks), 6.4), squeeze=False)
    for ax, task in zip(axes.flat, tasks):
        ax.plot([0, 1], [0, 1], color="grey", lw=0.8, ls=":")
        for (_, label, pts, fresh), colour in zip([p for p in pairs if p[0] == task],
                                                  itertools.cycle(["tab:gray", "tab:red", "tab:blue", "tab:green"])):
            control = "_randw" in label
            for k, x, y in pts:
                ax.scatter([x], [y], s=36, color=colour, marker="s" if control else "o",
                           facecolors=colour if k in fresh else "none")
                ax.annotate(str(k), (x, y), textcoords="offset points", xytext=(4, 3), fontsize=7, color=colour)
            ax.scatter([], [], color=colour, marker="s" if control else "o", facecolors="none",
                       label=f"{label} (n={len(pts)})" + (", filled: seeds declared after it was chosen" if fresh else ""))
        ax.set_xlim(-0.02, 1.02)
        ax.set_ylim(-0.02, 1.02)
        ax.set_xlabel(f"spec potential (prm_her_s10): success at {TASKS[task]['steps'] / 1000:g}k")
        ax.set_ylabel("other potential, same seed")
        ax.set_title(f"{task}: success paired by seed\n(above the diagonal: better than the spec potential)",
                     fontsize=9)
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.12))
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    return True


def write_guide(path: Path, table: list[str]) -> None:
    """Replace the summary table between :data:`GUIDE_START` and :data:`GUIDE_END` in ``path``."""
    text = path.read_text()
    if text.count(GUIDE_START) != 1 or text.count(GUIDE_END) != 1 or text.index(GUIDE_START) > text.index(GUIDE_END):
        raise ValueError(f"{path}: expected one {GUIDE_START!r} line followed by one {GUIDE_END!r} line")
    head, rest = text.split(GUIDE_START, 1)
    tail = rest.split(GUIDE_END, 1)[1]
    write_text(path, head + GUIDE_START + "\n" + "\n".join(table) + "\n" + GUIDE_END + tail)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out-md", type=Path, default=ROOT / "docs" / "rl_benchmark.md")
    p.add_argument("--out-png", type=Path, default=HERE / "results" / "success_vs_steps.png")
    p.add_argument("--no-plot", action="store_true", help="write the markdown only (it links to --out-png)")
    p.add_argument("--guide", type=Path, default=None, metavar="MD",
                   help=f"also rewrite the summary table of this user guide (between its markers), e.g. "
                        f"{GUIDE.relative_to(ROOT).as_posix()}")
    p.add_argument("--committed", action="store_true",
                   help="read only the run files committed to git (HEAD), not runs in progress in the working tree")
    a = p.parse_args(argv)
    if a.committed:
        import io
        import subprocess
        import tarfile
        import tempfile

        tmp = Path(tempfile.mkdtemp(prefix="rl-runs-"))
        rel = RESULTS.relative_to(ROOT).as_posix()
        blob = subprocess.run(["git", "-C", str(ROOT), "archive", "HEAD", rel], check=True, capture_output=True).stdout
        with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
            tar.extractall(tmp, filter="data")
        data = load_runs(tmp / rel)
    else:
        data = load_runs()
    if not data:
        print("no runs found under", RESULTS)
        return 1
    paired_png = a.out_png.with_name("learned_vs_spec.png")
    demo_png = a.out_png.with_name("demo_potential.png")
    if not a.no_plot:
        plot(data, a.out_png)
        plot_paired(data, paired_png)
        plot_demo(data, demo_png)
    rel_png = Path("..") / a.out_png.relative_to(ROOT) if a.out_png.is_relative_to(ROOT) else a.out_png
    rel_paired = Path("..") / paired_png.relative_to(ROOT) if paired_png.is_relative_to(ROOT) else paired_png
    intro = Path(HERE / "report_intro.md").read_text() if (HERE / "report_intro.md").exists() else ""
    md = "\n".join([
        "# RL benchmark: PRM subgoal shaping vs sparse reward vs HER", "",
        "Generated by `benchmarks/rl/report.py` from the eval CSVs under `benchmarks/rl/results/runs/`.", "",
        intro,
        "Summary: mean success over finished seeds (n) at each task's budget; the tables below give "
        "every seed, interval and verdict.", "",
        *summary(data), "",
        *headline(data),
        *([f"![learned vs spec potential, paired by seed]({rel_paired.as_posix()})", ""]
          if any(t in data for t in HEADLINE) else []),
        "## Every run", "",
        f"![unshaped success vs env steps]({rel_png.as_posix()})", "",
        table(data), "",
        *demo_potentials(data),
        *([f"![spec-free potential vs controls](../{demo_png.relative_to(ROOT).as_posix()})", ""]
          if demo_png.is_file() and demo_png.is_relative_to(ROOT) else []),
        "## Learned potentials", "",
        *learned_potentials(data, json.loads(NOISE.read_text()) if NOISE.is_file() else {}, critic_recipes(data)),
        *buffer_diagnosis(json.loads(BUFFER.read_text()) if BUFFER.is_file() else {}, data),
        "## Reproduce", "", "```bash", COMMANDS, "```", "",
    ])
    write_text(a.out_md, md)
    print(f"wrote {a.out_md}")
    if a.guide is not None:
        write_guide(a.guide, summary(data))
        print(f"rewrote the summary table in {a.guide}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
