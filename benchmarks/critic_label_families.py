"""Which step-label family trains the best success critic? Over episode splits x training seeds.

For each task: collect one set of episodes with the spec's noisy scripted controller and label every
step once with the three families (subgoal progress from the spec, Monte-Carlo rollouts from exact
MuJoCo snapshots, discounted outcome). Then for every split seed x training seed (a *unit*) train one
state critic per family on the SAME training episodes and report the success AUROC on the SAME held-out
episodes (per-step success score vs the episode's final success; "first 25%" = first quarter of each
episode), next to the untrained spec critic (one value per split). Means with 95% intervals and paired
differences between families: ``benchmarks/critic_splits.py``.

Resumable and incremental: collection and labelling skip what is on disk; every finished unit is
written at once to the raw-data file (``--raw``), and a rerun skips the units recorded there (and reads
a critic already trained from its metrics file). ``--render`` writes ``docs/critic_label_families.md``
from the raw-data file alone:

    python -m benchmarks.critic_label_families --tasks PointMaze_UMaze-v3 --pairwise-weight 0
    python -m benchmarks.critic_label_families --render

``--out`` (default ``prm_runs/critic_quality``) is shared with ``benchmarks/mc_bisect.py``: run with the
same episodes, ``k`` and stride, the two scripts share the collected episodes and the dense ``mc`` labels.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from benchmarks.critic_splits import add_grid_arguments, data_dir, fmt_ci, paired, record_unit, summary, train_unit, update_raw
from benchmarks.report_io import add_doc_arguments, machine, measured_on, render_only

HERE = Path(__file__).resolve().parent

FAMILIES = ("subgoal", "mc", "outcome")
SPEC = "spec (untrained)"
ROOT = HERE.parent
RAW = ROOT / "benchmarks" / "results" / "critic_label_families.json"
DOC = ROOT / "docs" / "critic_label_families.md"
GOAL = 0.85
COLUMNS = ("| task | label family | success AUROC (all steps) | success AUROC (first 25%) | Spearman(progress, t) "
           "| episodes (success rate) |")


def _f(v) -> str:
    return "n/a" if v is None else f"{v:.3f}"


def run_key(run: dict) -> tuple:
    c = run["config"]
    return (run["task"], run["episodes"], c.get("spec"), c["k"], c["stride"], c["epochs"], c["holdout"],
            c["data_seed"], c["pairwise_weight"], c.get("max_episode_steps"))


# --------------------------------------------------------------------------------------------
# Rendering
# --------------------------------------------------------------------------------------------

def _units(run: dict, name: str, metric: str = "auroc") -> dict[tuple[int, int], float]:
    """``{(split seed, training seed): value}``; the untrained spec critic's per-split value stands for every
    training seed of its split (it has no training seed)."""
    if name == SPEC:
        per_split = {u["split_seed"]: u[metric] for u in run["spec_units"] if u[metric] is not None}
        return {(s, t): per_split[s] for (s, t) in _units(run, "mc") if s in per_split}
    return {(u["split_seed"], u["seed"]): u[metric] for u in run["units"] if u["family"] == name
            and u[metric] is not None}


def render_run(run: dict) -> list[str]:
    c = run["config"]
    hidden = "x".join(str(h) for h in c["hidden"])
    splits, seeds = c["splits"], c["seeds"]
    n_grid = len(splits) * len(seeds)
    title = run.get("title") or (f"{run['task']} ({run['episodes']} episodes"
                                 + (f", {c['max_episode_steps']}-step cap" if c.get("max_episode_steps") else "")
                                 + f", MC: k = {c['k']} continuations, stride {c['stride']})")
    out = ["", f"## {title}", ""]
    if run.get("spec_note"):
        out += [run["spec_note"], ""]
    out += [f"{run['episodes']} episodes (success rate {run['success_rate']:.2f}), {run['steps']} steps, collected and "
            f"rolled out with seed {c['data_seed']}. Held out: {c['holdout']:.0%} of the episodes "
            f"({run['test_episodes']}) per split; split seeds {splits}, training seeds {seeds} ({n_grid} units per "
            f"family). MC labels k = {c['k']}, stride {c['stride']}. Critics: MLP {hidden}, {c['epochs']} epochs, "
            f"pairwise ranking weight {c['pairwise_weight']}.", "", f"`{run['command']}`", ""]
    names = [SPEC, *FAMILIES]
    spec_by_split = {u["split_seed"]: u for u in run["spec_units"]}
    by_unit: dict[tuple[int, int], dict[str, dict]] = {}
    for u in run["units"]:
        by_unit.setdefault((u["split_seed"], u["seed"]), {})[u["family"]] = u
    out += ["Held-out success AUROC per unit (split seed x training seed; the untrained spec critic has one value "
            "per split):", "",
            "| split seed | training seed | held-out episodes (successful) | " + " | ".join(names) + " |",
            "|---:|---:|---:|" + "---:|" * len(names)]
    for s in splits:
        for t in seeds:
            row = by_unit.get((s, t), {})
            sp = spec_by_split.get(s)
            if not row and sp is None:
                out.append(f"| {s} | {t} | (not run) |" + " |" * len(names))
                continue
            any_u = next(iter(row.values())) if row else sp
            cells = [_f(sp["auroc"]) if sp else "(not run)"]
            cells += [_f(row[f]["auroc"]) if f in row else "(not run)" for f in FAMILIES]
            out.append(f"| {s} | {t} | {any_u['test_episodes']} ({any_u['test_success']}) | " + " | ".join(cells) + " |")
    out += ["", "Mean over the units, 95% t intervals over the units and over the split means:", "",
            "| label family | units | success AUROC (units) | success AUROC (splits) | first 25% (units) "
            "| Spearman(progress, t) (units) |", "|---|---:|---|---|---|---|"]
    means = {}
    for n in names:
        a = summary(_units(run, n))
        means[n] = a
        e, r = summary(_units(run, n, "auroc_early")), summary(_units(run, n, "spearman"))
        out.append(f"| {n} | {a['units']['n']} | {fmt_ci(a['units'])} | {fmt_ci(a['splits'])} | {fmt_ci(e['units'])} | "
                   f"{fmt_ci(r['units'])} |")
    trained = [n for n in FAMILIES if means[n]["units"]["mean"] is not None]
    if not trained:
        return out
    best = max(trained, key=lambda n: means[n]["units"]["mean"])
    out += ["", f"Paired differences to the family with the highest mean ({best}; same split, same training seed), "
            "95% t intervals:", "",
            "| difference | units | lower / higher in | success AUROC (units) | success AUROC (splits) | first 25% (units) |",
            "|---|---:|---:|---|---|---|"]
    for n in names:
        if n == best:
            continue
        d = paired(_units(run, best), _units(run, n))
        de = paired(_units(run, best, "auroc_early"), _units(run, n, "auroc_early"))
        out.append(f"| {best} - {n} | {d['units']['n']} | {d['a_lower']} / {d['a_higher']} | {fmt_ci(d['units'], True)} | "
                   f"{fmt_ci(d['splits'], True)} | {fmt_ci(de['units'], True)} |")
    b = means[best]
    complete = b["units"]["n"] == n_grid
    lows = [b[w]["lo"] for w in ("units", "splits")]
    if not complete or any(lo is None for lo in lows):
        verdict = "not assessed (grid incomplete)"
    else:
        verdict = "met" if min(lows) >= GOAL else "**not met**"
    out += ["", f"Best family: {best}, success AUROC {fmt_ci(b['units'])} over the units, {fmt_ci(b['splits'])} over "
            f"the splits; goal (lower end of both intervals >= {GOAL}): {verdict}."]
    missing = [(s, t, f) for s in splits for t in seeds for f in FAMILIES if f not in by_unit.get((s, t), {})]
    missing += [(s, None, SPEC) for s in splits if s not in spec_by_split]
    if missing:
        out += ["", f"Missing: {len(missing)} of {n_grid * len(FAMILIES) + len(splits)} critics (split seed, training "
                "seed, family): " + ", ".join(f"({s}, {'-' if t is None else t}, {f})" for s, t, f in missing)
                + ". Rerun the command above to add them."]
    return out


def render_single_split(run: dict) -> list[str]:
    """An earlier run on one split and one training seed (the format before the split x seed grid)."""
    c = run["config"]
    hidden = "x".join(str(h) for h in c["hidden"])
    out = ["", f"### {run['title']} (one split)", ""]
    if run.get("spec_note"):
        out += [run["spec_note"], ""]
    out += [f"Critics: MLP {hidden}, {c['epochs']} epochs, pairwise ranking weight {c['pairwise_weight']}; "
            f"held-out {c['holdout']:.0%} of episodes (split seed {c['seed']}, training seed {c['seed']}); MC labels "
            f"k = {c['k']}, stride {c['stride']}.", "", f"`{run['command']}`", "", COLUMNS, "|---|---|---|---|---|---|"]
    trained = [r for r in run["rows"] if r["family"] != SPEC]
    best = max(trained, key=lambda r: r["auroc"])
    best_early = max(trained, key=lambda r: r["auroc_early"])
    for r in run["rows"]:
        a = f"**{_f(r['auroc'])}**" if r is best else _f(r["auroc"])
        e = f"**{_f(r['auroc_early'])}**" if r is best_early else _f(r["auroc_early"])
        out.append(f"| {run['task']} | {r['family']} | {a} | {e} | {_f(r['spearman'])} | "
                   f"{r['episodes']} ({r['success_rate']:.2f}) |")
    out += ["", f"Best family on this split: {best['family']} ({_f(best['auroc'])})."]
    return out


def render(raw: dict) -> str:
    """The markdown of ``docs/critic_label_families.md`` from the raw-data file's content."""
    out = [
        "# Which step-label family trains the best success critic?",
        "",
        f"Generated by `python -m benchmarks.critic_label_families --render` from "
        f"`{RAW.relative_to(ROOT).as_posix()}` (written by the runs below).",
        "",
        "For each task: episodes from the spec's noisy scripted controller; every step labelled once by the",
        "three families; for every unit (a held-out split, by its split seed, and a training seed) one state",
        "critic trained per family on the SAME training episodes; metrics on the SAME held-out episodes.",
        "\"spec (untrained)\" is `SubgoalCritic`, the spec's subgoal progress used directly as the score (one",
        "value per split: it is not trained).",
        "",
        "* success AUROC (all steps): per-step success score vs the episode's final success;",
        "* success AUROC (first 25%): the same over the first quarter of each episode (early prediction,",
        "  where the outcome is not yet visible in the state);",
        "* Spearman(progress, t): rank correlation of the progress head with time inside successful",
        "  held-out episodes.",
        "",
        "Intervals are 95% Student t intervals, over the units (n = splits x seeds) and over the split means",
        "(the mean over training seeds of each split, n = splits): critics of one split share their held-out",
        "episodes, so the second is the honest one where the split dominates. Differences are paired (same",
        "split, same training seed); \"lower / higher in\": units where the first family is below / above the",
        "second. All splits are of one collected episode set (another collection seed is not varied).",
        "",
        f"Goal: >= {GOAL} success AUROC for the best family, met only if the lower end of both of its",
        "intervals is at or above it.",
    ]
    for run in raw["runs"]:
        out += render_run(run)
    if raw.get("single_split_runs"):
        out += ["", "## Earlier runs on one split", "",
                "Measured before the split x seed grid: one held-out split (split seed 0) and one training seed per",
                "family, with the script's command of the time. Kept as measured; one split is not enough to rank",
                "families whose difference is smaller than the spread between splits (see the runs above)."]
        for run in raw["single_split_runs"]:
            out += render_single_split(run)
    out += [
        "",
        "## MC labelling cost",
        "",
        "Throughput of MC rollouts vs raw env steps: [mc_throughput.md](mc_throughput.md).",
    ]
    if raw.get("machine"):
        out += ["", measured_on(raw['machine'])]
    return "\n".join(out + [""])


# --------------------------------------------------------------------------------------------
# Measuring
# --------------------------------------------------------------------------------------------

def spec_critic_metrics(data: Path, holdout: float, split_seed: int) -> dict:
    from prm_critic.models.evaluate import evaluate_state_critic
    from prm_critic.robotics.dataset import load_steps, split_episodes
    from prm_critic.robotics.make import CriticInputLayout
    from prm_critic.robotics.subgoals import MazeGeometry, SubgoalCritic

    table = load_steps(data, "subgoal")
    _, test = split_episodes(table, holdout=holdout, seed=split_seed)
    maze = MazeGeometry.from_dict(table.meta["maze"]) if table.meta.get("maze") else None
    critic = SubgoalCritic(table.spec, layout=CriticInputLayout.from_dict(table.layout.to_dict()), maze=maze)
    return evaluate_state_critic(critic, test.x, episode=test.episode, t=test.t, ep_success=test.ep_success)


def canonical_command(args, task: str) -> str:
    parts = ["python -m benchmarks.critic_label_families --tasks", task, "--episodes", str(args.episodes), "--k",
             str(args.k), "--stride", str(args.stride), "--epochs", str(args.epochs), "--pairwise-weight",
             str(args.pairwise_weight)]
    if args.spec:
        parts += ["--spec", args.spec]
    if args.max_episode_steps:
        parts += ["--max-episode-steps", str(args.max_episode_steps)]
    parts += ["--splits", " ".join(map(str, args.splits)), "--seeds", " ".join(map(str, args.seeds))]
    return " ".join(parts)


def _unit(m: dict, s: int) -> dict:
    return {"split_seed": s, "auroc": m["auroc_success"], "auroc_early": m["auroc_success_early"],
            "spearman": m["spearman_progress_time"], "test_episodes": m["n_episodes"],
            "test_success": m["n_success_episodes"]}


def main() -> None:
    from prm_critic.models.train import TrainConfig

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tasks", nargs="+", default=["PointMaze_UMaze-v3", "FetchPush-v4"])
    ap.add_argument("--out", default="prm_runs/critic_quality")
    ap.add_argument("--episodes", type=int, default=200)
    ap.add_argument("--max-episode-steps", type=int, default=None,
                    help="TimeLimit override (default: PointMaze 150, others the registered value)")
    ap.add_argument("--k", type=int, default=8, help="MC continuations per labelled state")
    ap.add_argument("--stride", type=int, default=2, help="MC-label every stride-th step")
    add_grid_arguments(ap, epochs=40, pairwise_weight=TrainConfig.pairwise_weight, data_seed="collection and MC rollout seed")
    ap.add_argument("--spec", default=None, help="spec TOML to collect with instead of the task's built-in spec")
    ap.add_argument("--title", default=None, help="section title of the run in the doc (default: from the settings)")
    ap.add_argument("--spec-note", default=None, help="a note printed under the run's title")
    add_doc_arguments(ap, RAW, DOC)
    args = ap.parse_args()
    if render_only(args, render):
        return

    from prm_critic.robotics.collection import collect
    from prm_critic.robotics.dataset import load_steps
    from prm_critic.robotics.labels import label

    empty = lambda: {"runs": []}  # noqa: E731
    for task in args.tasks:
        data = data_dir(args.out, task, args.episodes, args.spec)
        mes = args.max_episode_steps or (150 if task.startswith("PointMaze") else None)
        print(f"{task}: collecting {args.episodes} episodes into {data}", flush=True)
        collect(args.spec or task, data, episodes=args.episodes, policy="scripted", seed=args.data_seed,
                max_episode_steps=mes)
        for fam in FAMILIES:
            kw = {"k": args.k, "stride": args.stride, "seed": args.data_seed} if fam == "mc" else {}
            label(data, fam, **kw)
        table = load_steps(data, "mc")
        eps = np.unique(table.episode)
        cfg0 = TrainConfig(epochs=args.epochs, pairwise_weight=args.pairwise_weight)
        run = {
            "task": task, "episodes": args.episodes, "steps": int(len(table)),
            "success_rate": float(np.mean([table.ep_success[table.episode == e][0] for e in eps])),
            "test_episodes": max(1, int(round(args.holdout * len(eps)))),
            "command": canonical_command(args, task),
            "config": {"epochs": cfg0.epochs, "pairwise_weight": cfg0.pairwise_weight, "hidden": list(cfg0.hidden),
                       "holdout": args.holdout, "data_seed": args.data_seed, "k": args.k, "stride": args.stride,
                       "spec": args.spec, "max_episode_steps": mes,
                       "splits": list(args.splits), "seeds": list(args.seeds)},
            "units": [], "spec_units": [],
        }
        if args.title:
            run["title"] = args.title
        if args.spec_note:
            run["spec_note"] = args.spec_note

        def merge(raw: dict, run=run) -> None:
            old = next((r for r in raw["runs"] if run_key(r) == run_key(run)), None)
            if old is not None:
                run["units"], run["spec_units"] = old["units"], old["spec_units"]
                for key in ("splits", "seeds"):
                    run["config"][key] = sorted(set(run["config"][key]) | set(old["config"][key]))
                run["command"] = canonical_command(argparse.Namespace(**{**vars(args), "splits": run["config"]["splits"],
                                                                         "seeds": run["config"]["seeds"]}), task)
                if not args.title and old.get("title"):
                    run["title"] = old["title"]
                if not args.spec_note and old.get("spec_note"):
                    run["spec_note"] = old["spec_note"]
            raw["runs"] = [r for r in raw["runs"] if run_key(r) != run_key(run)] + [run]
            raw["machine"] = machine() + ", shared with other jobs, OMP_NUM_THREADS=1"

        raw = update_raw(args.raw, merge, empty)
        key = run_key(run)
        run = next(r for r in raw["runs"] if run_key(r) == key)
        spec_done = {u["split_seed"] for u in run["spec_units"]}
        for s in args.splits:
            if s not in spec_done:
                u = _unit(spec_critic_metrics(data, args.holdout, s), s)

                def add_spec(raw: dict, u=u) -> None:
                    r = next(r for r in raw["runs"] if run_key(r) == key)
                    r["spec_units"] = [x for x in r["spec_units"] if x["split_seed"] != u["split_seed"]] + [u]

                update_raw(args.raw, add_spec, empty)
        done = {(u["family"], u["split_seed"], u["seed"]) for u in run["units"]}
        todo = [(s, t, f) for s in args.splits for t in args.seeds for f in FAMILIES if (f, s, t) not in done]
        n_grid = len(args.splits) * len(args.seeds) * len(FAMILIES)
        print(f"{task}: {n_grid - len(todo)} of {n_grid} critics recorded, {len(todo)} to train", flush=True)
        cdir = data.parent / (f"critics_families_{data.name}_k{args.k}_s{args.stride}_e{args.epochs}_h{args.holdout}"
                              f"_pw{args.pairwise_weight}")
        t_start = time.perf_counter()
        for i, (s, t, fam) in enumerate(todo, 1):
            ckpt = cdir / f"{fam}_split{s}_seed{t}"
            t0 = time.perf_counter()
            m = train_unit(data, fam, ckpt, args, s, t)
            unit = {"family": fam, "seed": t, **_unit(m, s)}
            record_unit(args.raw, key, run_key, unit, "family", empty)
            el = time.perf_counter() - t_start
            print(f"[{i}/{len(todo)}] {task} {fam} split {s} seed {t}: AUROC {m['auroc_success']:.3f} "
                  f"({time.perf_counter() - t0:.0f}s; ~{el / i * (len(todo) - i) / 60:.0f} min left)", flush=True)
    print(f"wrote {args.raw}; render the doc with --render")


if __name__ == "__main__":
    main()
