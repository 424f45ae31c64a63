"""Binary-search MC labels (``mc_bisect``) vs dense MC labels (``mc``): rollout steps and held-out AUROC
over episode splits x training seeds.

For each task: collect one set of episodes with the spec's noisy scripted controller and label it once
per label variant: dense ``mc`` (``k`` continuations every ``stride``-th step) and ``mc_bisect`` (``k``
continuations at the states a binary search for the drop of the success estimate needs, the rest
interpolated; same ``k`` and rollout seed) with each ``--min-estimates`` (states estimated before the
search, spread over the episode; 2 = the two ends). Labels are computed once and reused by every split.
Then for every split seed x training seed (a *unit*) train one state critic per variant on the SAME
training episodes and evaluate it on the SAME held-out episodes; report each variant's mean success
AUROC with 95% intervals and the paired difference to dense ``mc`` (``benchmarks/critic_splits.py``).

Goal: ``mc_bisect`` not more than 0.01 below dense ``mc``'s held-out success AUROC with >= 3x fewer
rollout steps: met only if the lower end of both 95% intervals of the paired difference (bisect -
dense) is at or above -0.01 and the rollout steps are >= 3x fewer.

Resumable and incremental: collection and labelling skip what is on disk; every finished unit is
written at once to the raw-data file (``--raw``), and a rerun skips the units recorded there (and
reads a critic already trained from its metrics file). ``--render`` writes ``docs/mc_bisect.md`` from
the raw-data file alone:

    python -m benchmarks.mc_bisect --tasks PointMaze_UMaze-v3
    python -m benchmarks.mc_bisect --render

``--out`` (default ``prm_runs/critic_quality``) is shared with ``benchmarks/critic_label_families.py``:
run with the same episodes, ``k`` and stride, the two scripts share the collected episodes and the
dense ``mc`` labels (``OUT/TASK/data_<episodes>``).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np

from benchmarks.critic_splits import add_grid_arguments, data_dir, fmt_ci, paired, record_unit, summary, train_unit, update_raw
from benchmarks.report_io import add_doc_arguments, machine, measured_on, render_only

HERE = Path(__file__).resolve().parent

ROOT = HERE.parent
RAW = ROOT / "benchmarks" / "results" / "mc_bisect.json"
DOC = ROOT / "docs" / "mc_bisect.md"
DEFAULTS = {  # task -> (episodes, TimeLimit, dense stride)
    "PointMaze_UMaze-v3": (200, 150, 2),
    "FetchPush-v4": (160, 50, 5),
}
GOAL_GAP, GOAL_RATIO = 0.01, 3.0


def variant_name(min_estimates: int | None) -> str:
    """``mc`` for dense labels; ``mc_bisect`` (``min_estimates`` 2) or ``mc_bisect min M``."""
    if min_estimates is None:
        return "mc"
    return "mc_bisect" if min_estimates == 2 else f"mc_bisect min {min_estimates}"


def run_key(run: dict) -> tuple:
    c = run["config"]
    return (run["task"], run["episodes"], c["k"], c["stride"], c["resolution"], c["threshold"], c["epochs"],
            c["holdout"], c["data_seed"], c["pairwise_weight"])


# --------------------------------------------------------------------------------------------
# Rendering
# --------------------------------------------------------------------------------------------

def _units(run: dict, name: str, metric: str = "auroc") -> dict[tuple[int, int], float]:
    return {(u["split_seed"], u["seed"]): u[metric] for u in run["units"] if u["labels"] == name
            and u[metric] is not None}


def _verdict(d: dict, ratio: float, complete: bool) -> tuple[str, str]:
    """(AUROC verdict, goal verdict) of one bisect variant's paired difference to dense."""
    lows = [d[w]["lo"] for w in ("units", "splits")]
    if not complete or any(lo is None for lo in lows):
        return "not assessed (grid incomplete)", "not assessed"
    auc_ok = all(lo >= -GOAL_GAP for lo in lows)
    auc = "met" if auc_ok else "**not met**"
    return auc, "met" if auc_ok and ratio >= GOAL_RATIO else "**not met**"


def render_run(run: dict) -> list[str]:
    c = run["config"]
    hidden = "x".join(str(h) for h in c["hidden"])
    names = [variant_name(None)] + [variant_name(m) for m in c["min_estimates"]]
    labels = run["labels"]
    names = [n for n in names if n in labels]
    splits, seeds = c["splits"], c["seeds"]
    n_grid = len(splits) * len(seeds)
    out = ["", f"## {run['task']}, k = {c['k']}", "",
           f"{run['episodes']} episodes (success rate {run['success_rate']:.2f}), TimeLimit {run['max_episode_steps']}, "
           f"{run['steps']} steps, collected and rolled out with seed {c['data_seed']}. Held out: "
           f"{c['holdout']:.0%} of the episodes ({run['test_episodes']}) per split; split seeds {splits}, training "
           f"seeds {seeds} ({n_grid} units per variant). MC: k = {c['k']}; dense stride {c['stride']}; bisect "
           f"resolution {c['resolution']}, threshold {c['threshold']}, min estimates {c['min_estimates']}. Critics: "
           f"MLP {hidden}, {c['epochs']} epochs, pairwise ranking weight {c['pairwise_weight']}.",
           "", f"`{run['command']}`", "",
           "| labels | estimated states | rollouts | rollout steps | steps vs dense | episodes labelled 0 throughout "
           "(dense > 0 somewhere) | mean abs. difference to dense labels |",
           "|---|---:|---:|---:|---:|---:|---:|"]
    dense_steps = labels["mc"]["rollout_steps"]
    for n in names:
        r = labels[n]
        ratio = dense_steps / r["rollout_steps"]
        zero = f"{r['zero_episodes']}" + ("" if n == "mc" else f" ({r['zero_episodes_dense_positive']})")
        mae = "0" if n == "mc" else f"{r['mae_vs_dense']:.3f}"
        out.append(f"| {n} | {r['estimated_states']:,} | {r['rollouts']:,} | {r['rollout_steps']:,} | "
                   f"{'1' if n == 'mc' else f'1/{ratio:.1f}'} | {zero} | {mae} |")
    # per unit
    heads = " | ".join(names)
    diffs = [n for n in names if n != "mc"]
    out += ["", "Held-out success AUROC per unit (split seed x training seed):", "",
            f"| split seed | training seed | held-out episodes (successful) | {heads} | "
            + " | ".join(f"{n} - mc" for n in diffs) + " |",
            "|---:|---:|---:|" + "---:|" * (len(names) + len(diffs))]
    by_unit: dict[tuple[int, int], dict[str, dict]] = {}
    for u in run["units"]:
        by_unit.setdefault((u["split_seed"], u["seed"]), {})[u["labels"]] = u
    for s in splits:
        for t in seeds:
            row = by_unit.get((s, t), {})
            if not row:
                out.append(f"| {s} | {t} | (not run) |" + " |" * (len(names) + len(diffs)))
                continue
            any_u = next(iter(row.values()))
            cells = [f"{row[n]['auroc']:.3f}" if n in row else "(not run)" for n in names]
            dcells = [f"{row[n]['auroc'] - row['mc']['auroc']:+.3f}" if n in row and "mc" in row else "" for n in diffs]
            out.append(f"| {s} | {t} | {any_u['test_episodes']} ({any_u['test_success']}) | " + " | ".join(cells)
                       + " | " + " | ".join(dcells) + " |")
    # summary
    out += ["", "Mean over the units, 95% t intervals over the units and over the split means:", "",
            "| labels | units | success AUROC (units) | success AUROC (splits) | first 25% (units) | first 25% (splits) |",
            "|---|---:|---|---|---|---|"]
    for n in names:
        a, e = summary(_units(run, n)), summary(_units(run, n, "auroc_early"))
        out.append(f"| {n} | {a['units']['n']} | {fmt_ci(a['units'])} | {fmt_ci(a['splits'])} | "
                   f"{fmt_ci(e['units'])} | {fmt_ci(e['splits'])} |")
    out += ["", "Paired differences (same split, same training seed), 95% t intervals:", "",
            "| difference | units | lower / higher in | success AUROC (units) | success AUROC (splits) "
            "| first 25% (units) | rollout steps vs dense | goal: AUROC | goal |",
            "|---|---:|---:|---|---|---|---:|---|---|"]
    verdicts = []
    for n in diffs:
        d = paired(_units(run, n), _units(run, "mc"))
        de = paired(_units(run, n, "auroc_early"), _units(run, "mc", "auroc_early"))
        ratio = dense_steps / labels[n]["rollout_steps"]
        complete = d["units"]["n"] == n_grid
        auc_v, goal_v = _verdict(d, ratio, complete)
        verdicts.append((n, d, ratio, auc_v, goal_v))
        out.append(f"| {n} - mc | {d['units']['n']} | {d['a_lower']} / {d['a_higher']} | {fmt_ci(d['units'], True)} | "
                   f"{fmt_ci(d['splits'], True)} | {fmt_ci(de['units'], True)} | {ratio:.1f}x fewer | {auc_v} | {goal_v} |")
    others = [n for n in diffs if n != "mc_bisect"]
    if "mc_bisect" in diffs and others:
        out += ["", "The floor on estimates per episode against the ends-only search (same units):", "",
                "| difference | units | lower / higher in | success AUROC (units) | success AUROC (splits) "
                "| first 25% (units) | rollout steps vs ends-only |", "|---|---:|---:|---|---|---|---:|"]
        for n in others:
            d = paired(_units(run, n), _units(run, "mc_bisect"))
            de = paired(_units(run, n, "auroc_early"), _units(run, "mc_bisect", "auroc_early"))
            cost = labels[n]["rollout_steps"] / labels["mc_bisect"]["rollout_steps"]
            out.append(f"| {n} - mc_bisect | {d['units']['n']} | {d['a_lower']} / {d['a_higher']} | "
                       f"{fmt_ci(d['units'], True)} | {fmt_ci(d['splits'], True)} | {fmt_ci(de['units'], True)} | "
                       f"{cost:.2f}x |")
    out.append("")
    for n, d, ratio, auc_v, goal_v in verdicts:
        lo = min(d[w]["lo"] for w in ("units", "splits")) if d["units"]["lo"] is not None and d["splits"]["lo"] is not None else None
        gap = "n/a" if lo is None else f"{lo:+.3f}"
        out.append(f"* {n}: AUROC - dense {fmt_ci(d['units'], True)} over the units, {fmt_ci(d['splits'], True)} "
                   f"over the splits (lowest end {gap}; goal: at or above {-GOAL_GAP:+.3f}: {auc_v}); rollout steps "
                   f"{ratio:.1f}x fewer (goal >= {GOAL_RATIO:.0f}x: {'met' if ratio >= GOAL_RATIO else '**not met**'}). "
                   f"Goal {goal_v}.")
    missing = [(s, t, n) for s in splits for t in seeds for n in names if n not in by_unit.get((s, t), {})]
    if missing:
        out += ["", f"Missing: {len(missing)} of {n_grid * len(names)} critics (split seed, training seed, labels): "
                + ", ".join(f"({s}, {t}, {n})" for s, t, n in missing) + ". Rerun the command above to add them."]
    return out


def render_single_split(run: dict) -> list[str]:
    """An earlier run on one split (the format before the split x seed grid)."""
    c = run["config"]
    hidden = "x".join(str(h) for h in c["hidden"])
    out = ["", f"### {run['task']}, bisect resolution {c['resolution']} (one split)", "",
           f"{run['episodes']} episodes (success rate {run['success_rate']:.2f}), TimeLimit {run['max_episode_steps']}, "
           f"{run['steps']} steps; held-out {c['holdout']:.0%} of episodes ({run['test_episodes']}, split seed "
           f"{c['split_seed']}). MC: k = {c['k']}; dense stride {c['stride']}; bisect resolution {c['resolution']}, "
           f"threshold {c['threshold']}. Critics: MLP {hidden}, {c['epochs']} epochs, pairwise ranking weight "
           f"{c['pairwise_weight']}, init seeds {c['seeds']}.", "", f"`{run['command']}`", "",
           "| labels | estimated states | rollouts | rollout steps | steps vs dense "
           "| success AUROC | success AUROC (first 25%) |",
           "|---|---:|---:|---:|---:|---|---|"]
    rows = {r["family"]: r for r in run["rows"]}
    dense_steps = rows["mc"]["rollout_steps"]
    for fam in ("mc", "mc_bisect"):
        r = rows[fam]
        a, e = np.asarray(r["auroc"], dtype=float), np.asarray(r["auroc_early"], dtype=float)
        ratio = dense_steps / r["rollout_steps"]
        out.append(f"| {fam} | {r['estimated_states']:,} | {r['rollouts']:,} | {r['rollout_steps']:,} | "
                   f"{'1' if fam == 'mc' else f'1/{ratio:.1f}'} | "
                   f"{a.mean():.3f} ({a.min():.3f} - {a.max():.3f}) | {e.mean():.3f} ({e.min():.3f} - {e.max():.3f}) |")
    d_auc = float(np.mean(rows["mc_bisect"]["auroc"]) - np.mean(rows["mc"]["auroc"]))
    out += ["", f"Mean success AUROC, bisect - dense: {d_auc:+.3f} on this one split "
            f"(min - max over init seeds in brackets above)."]
    return out


def render(raw: dict) -> str:
    """The markdown of ``docs/mc_bisect.md`` from the raw-data file's content."""
    out = [
        "# Binary-search MC labels vs dense MC labels",
        "",
        f"Generated by `python -m benchmarks.mc_bisect --render` from `{RAW.relative_to(ROOT).as_posix()}` "
        "(written by the runs below).",
        "",
        "Same episodes (the spec's noisy scripted controller), labelled once per variant with the same `k` and",
        "rollout seed:",
        "",
        "* `mc`: `k` continuations from every `stride`-th step (unlabelled steps masked out of training);",
        "* `mc_bisect`: `k` continuations from both ends of each episode and, where the estimate drops to",
        "  `threshold` or below between them, from the midpoints of a binary search for the drop (down to",
        "  `resolution` steps); every other step interpolated between the estimates and used in training;",
        "* `mc_bisect min M` (`label --family mc_bisect --min-estimates M`): the same search, started from `M`",
        "  estimated states spread evenly over the episode (both ends included) instead of the ends only, and",
        "  run between every pair of neighbouring ones where the estimate drops. With the ends only, an",
        "  episode whose first and last estimates are 0 (likely at small `k`) is labelled 0 throughout.",
        "",
        "Rollout steps: env steps taken in continuations (replay checks not included), from",
        "`labels/<family>.stats.json`; exact (the labels are deterministic). \"Episodes labelled 0",
        "throughout\": episodes whose every label is 0, in brackets those of them where a dense label is",
        "above 0. The labels are made once; the splits reuse them.",
        "",
        "A unit is one held-out split (split seed) and one training seed: one state critic per label variant",
        "and unit, same config, the SAME training episodes; success AUROC (per-step score vs the episode's",
        "final success) on the SAME held-out episodes; \"first 25%\": over the first quarter of each held-out",
        "episode. Intervals are 95% Student t intervals, over the units (n = splits x seeds) and over the",
        "split means (the mean over training seeds of each split, n = splits): critics of one split share",
        "their held-out episodes, so the second is the honest one where the split dominates. Differences",
        "are paired (same split, same training seed); \"lower / higher in\": units where the variant is below",
        "/ above dense. All splits are of one collected episode set (another collection seed is not varied).",
        "",
        f"Goal: `mc_bisect` success AUROC not more than {GOAL_GAP} below `mc` with >= {GOAL_RATIO:.0f}x fewer "
        f"rollout steps; met only if the lower end of both intervals of the paired difference is at or above "
        f"-{GOAL_GAP} (a difference measured within +-{GOAL_GAP} is not enough).",
    ]
    for run in raw["runs"]:
        out += render_run(run)
    if raw.get("single_split_runs"):
        out += ["", "## Earlier runs on one split", "",
                "Measured before the split x seed grid: one held-out split of 8 or 15 episodes, three init seeds,",
                "with the script's command of the time (one split per run). Kept as measured: the runs above show",
                "the bisect - dense difference moving between splits by more than the 0.01 of the goal, so one",
                "split supports no parity claim either way. Their rollout-step counts are exact."]
        for run in raw["single_split_runs"]:
            out += render_single_split(run)
    out += ["", measured_on(raw.get('machine', 'n/a')), ""]
    return "\n".join(out)


# --------------------------------------------------------------------------------------------
# Measuring
# --------------------------------------------------------------------------------------------

def label_dir(data: Path, k: int, min_estimates: int | None) -> Path:
    """Folder of one label variant: ``data`` (the collected episodes) for dense labels at k = 8 (shared with
    critic_label_families.py), else a sibling folder that links the episodes of ``data`` and holds its own
    labels (a label family has one parameter set per folder)."""
    if min_estimates is None and k == 8:
        return data
    d = data.with_name(data.name + f"_k{k}" + ("" if min_estimates is None else f"_bisect_min{min_estimates}"))
    d.mkdir(parents=True, exist_ok=True)
    for name in ("shards", "meta.json"):
        if not (d / name).is_symlink():
            os.symlink(Path("..") / data.name / name, d / name)
    return d


def label_record(d: Path, family: str, dense: Path, stride: int) -> dict:
    """Rollout cost and label diagnostics of one labelled variant."""
    from prm_critic.robotics.bisect_labels import read_stats
    from prm_critic.robotics.dataset import load_steps

    total = read_stats(d, family)["total"]
    tab, ref = load_steps(d, family), load_steps(dense, "mc")
    zero, zero_pos = 0, 0
    for e in np.unique(tab.episode):
        m = tab.episode == e
        lab = tab.success[m & tab.mask]
        if lab.size and not np.any(lab > 0):
            zero += 1
            rm = (ref.episode == e) & ref.mask
            zero_pos += int(np.any(ref.success[rm] > 0))
    both = ref.mask & tab.mask
    rec = {k: int(total[k]) for k in ("estimated_states", "rollouts", "rollout_steps")}
    rec.update({"zero_episodes": zero, "zero_episodes_dense_positive": zero_pos,
                "mae_vs_dense": float(np.mean(np.abs(tab.success[both] - ref.success[both])))})
    return rec


def canonical_command(args, task: str, episodes: int, stride: int) -> str:
    parts = ["python -m benchmarks.mc_bisect --tasks", task, "--episodes", str(episodes), "--k", str(args.k),
             "--stride", str(stride), "--epochs", str(args.epochs), "--min-estimates",
             " ".join(map(str, args.min_estimates)), "--splits", " ".join(map(str, args.splits)), "--seeds",
             " ".join(map(str, args.seeds))]
    if args.resolution != 1:
        parts += ["--resolution", str(args.resolution)]
    if args.threshold != 0.0:
        parts += ["--threshold", str(args.threshold)]
    return " ".join(parts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tasks", nargs="+", default=["PointMaze_UMaze-v3"])
    ap.add_argument("--out", default="prm_runs/critic_quality")
    ap.add_argument("--episodes", type=int, default=None, help="episodes per task (default: per task, see DEFAULTS)")
    ap.add_argument("--k", type=int, default=8, help="continuations per estimated state (every variant)")
    ap.add_argument("--stride", type=int, default=None, help="dense MC stride (default: per task)")
    ap.add_argument("--resolution", type=int, default=1, help="mc_bisect resolution")
    ap.add_argument("--threshold", type=float, default=0.0, help="mc_bisect threshold")
    ap.add_argument("--min-estimates", type=int, nargs="+", default=[2, 8],
                    help="mc_bisect variants: states estimated before the search (2: the ends only)")
    add_grid_arguments(ap, epochs=20, pairwise_weight=0.0, data_seed="collection and rollout seed")
    add_doc_arguments(ap, RAW, DOC)
    args = ap.parse_args()
    if render_only(args, render):
        return

    from prm_critic.models.train import TrainConfig
    from prm_critic.robotics.collection import collect
    from prm_critic.robotics.dataset import load_steps
    from prm_critic.robotics.labels import label

    empty = lambda: {"runs": []}  # noqa: E731
    for task in args.tasks:
        episodes, mes, stride = DEFAULTS.get(task, (160, None, 2))
        episodes = args.episodes or episodes
        stride = args.stride or stride
        root = Path(args.out) / task
        data = data_dir(args.out, task, episodes)
        print(f"{task}: collecting {episodes} episodes", flush=True)
        collect(task, data, episodes=episodes, policy="scripted", seed=args.data_seed, max_episode_steps=mes,
                progress=True)
        variants: list[int | None] = [None, *args.min_estimates]
        dense = label_dir(data, args.k, None)
        labels = {}
        for m in variants:
            d = label_dir(data, args.k, m)
            fam = "mc" if m is None else "mc_bisect"
            kw = {"stride": stride} if m is None else {"resolution": args.resolution, "threshold": args.threshold,
                                                        "min_estimates": m}
            print(f"{task}: labelling {variant_name(m)} in {d}", flush=True)
            label(d, fam, k=args.k, seed=args.data_seed, progress=True, **kw)
            labels[variant_name(m)] = {"dir": d, "family": fam, **label_record(d, fam, dense, stride)}
        table = load_steps(dense, "mc")
        eps = np.unique(table.episode)
        cfg0 = TrainConfig(epochs=args.epochs, pairwise_weight=args.pairwise_weight)
        run = {
            "task": task, "episodes": episodes, "max_episode_steps": mes, "steps": int(len(table)),
            "success_rate": float(np.mean([table.ep_success[table.episode == e][0] for e in eps])),
            "test_episodes": max(1, int(round(args.holdout * len(eps)))),
            "command": canonical_command(args, task, episodes, stride),
            "config": {"k": args.k, "stride": stride, "resolution": args.resolution, "threshold": args.threshold,
                       "min_estimates": list(args.min_estimates), "epochs": cfg0.epochs, "hidden": list(cfg0.hidden),
                       "pairwise_weight": cfg0.pairwise_weight, "holdout": args.holdout, "data_seed": args.data_seed,
                       "splits": list(args.splits), "seeds": list(args.seeds)},
            "labels": {n: {k: v for k, v in r.items() if k not in ("dir", "family")} for n, r in labels.items()},
            "units": [],
        }

        def merge(raw: dict, run=run) -> None:
            """Record the run's settings and labels, keeping the units already recorded (a grid that grows
            keeps its old units)."""
            old = next((r for r in raw["runs"] if run_key(r) == run_key(run)), None)
            if old is not None:
                run["units"] = old["units"]
                c, oc = run["config"], old["config"]
                for key in ("min_estimates", "splits", "seeds"):
                    c[key] = sorted(set(c[key]) | set(oc[key]))
                run["labels"] = {**old["labels"], **run["labels"]}
                run["command"] = canonical_command(argparse.Namespace(**{**vars(args), **{
                    "min_estimates": c["min_estimates"], "splits": c["splits"], "seeds": c["seeds"]}}),
                    task, episodes, stride)
            raw["runs"] = [r for r in raw["runs"] if run_key(r) != run_key(run)] + [run]
            raw["machine"] = machine() + ", shared with other jobs, OMP_NUM_THREADS=1"

        raw = update_raw(args.raw, merge, empty)
        key = run_key(run)
        run = next(r for r in raw["runs"] if run_key(r) == key)
        done = {(u["labels"], u["split_seed"], u["seed"]) for u in run["units"]}
        grid = [(s, t, variant_name(m)) for s in args.splits for t in args.seeds for m in variants]
        todo = [g for g in grid if (g[2], g[0], g[1]) not in done]
        print(f"{task}: {len(grid) - len(todo)} of {len(grid)} critics recorded, {len(todo)} to train", flush=True)
        cdir = root / f"critics_mc_bisect_{data.name}_k{args.k}_e{args.epochs}_h{args.holdout}_pw{args.pairwise_weight}"
        t_start = time.perf_counter()
        for i, (s, t, name) in enumerate(todo, 1):
            lab = labels[name]
            ckpt = cdir / f"{name.replace(' ', '_')}_split{s}_seed{t}"
            t0 = time.perf_counter()
            m = train_unit(lab["dir"], lab["family"], ckpt, args, s, t)
            unit = {"labels": name, "split_seed": s, "seed": t, "auroc": m["auroc_success"],
                    "auroc_early": m["auroc_success_early"], "test_episodes": m["n_episodes"],
                    "test_success": m["n_success_episodes"]}
            record_unit(args.raw, key, run_key, unit, "labels", empty)
            el = time.perf_counter() - t_start
            print(f"[{i}/{len(todo)}] {task} {name} split {s} seed {t}: AUROC {m['auroc_success']:.3f} "
                  f"({time.perf_counter() - t0:.0f}s; ~{el / i * (len(todo) - i) / 60:.0f} min left)", flush=True)
    print(f"wrote {args.raw}; render the doc with --render")


if __name__ == "__main__":
    main()
