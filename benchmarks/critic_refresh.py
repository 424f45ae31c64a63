"""Does refreshing a learned critic on the policy's own episodes fix its staleness? Over episode splits x
training seeds.

A success critic is trained on the behaviour data it starts from (the spec's noisy scripted
controller, outcome labels). An RL policy then visits other states. This script measures the
critic's success prediction on the *policy's* held-out episodes before and after offline refreshes
with :class:`prm_critic.sb3.CriticRefreshCallback` (the same update the callback runs during
training: BCE on outcome labels of recent episodes), and on held-out *scripted* episodes (does the
refresh make it forget the behaviour data?). The spec's untrained ``SubgoalCritic`` is the reference.

Episodes are collected once (scripted ones, and the policy's with its stochastic actions) and re-split
by a *split seed*: the scripted episodes into the critic's training and held-out episodes
(``--holdout``), the policy episodes into ``--refresh-episodes`` refresh episodes and
``--heldout-episodes`` held-out ones that are never trained on. A *unit* is one split seed x one
training seed (the critic's weight init and batch order, and the refresh's batch sampling): one critic
trained on the unit's scripted training episodes, measured, then refreshed on the unit's refresh
episodes and measured after each of ``--rounds``. Means with 95% intervals and the paired differences
(after - before the refresh, refreshed - spec critic) per metric: ``benchmarks/critic_splits.py``.

    OMP_NUM_THREADS=1 python -m benchmarks.critic_refresh --policy benchmarks/rl/results/runs/FetchPush-v4/prm_her_s10/seed3/policy.json

``--policy`` is a ``train-policy`` checkpoint for the task (the one above comes from
``python benchmarks/rl/run.py --task FetchPush-v4 --config prm_her --scale 10 --seed 3``); it is copied
beside the data (``OUT/TASK/policy_<sha>``), so a later retrain of the run does not change this
benchmark, and its weights' SHA-256 is recorded. Resumable and incremental: collection, labels and the
critics' training skip what is on disk; every finished unit is written at once to the raw-data file
(``--raw``) and a rerun skips the units recorded there (the refreshes themselves take seconds).
``--render`` rewrites ``docs/critic_refresh.md`` (``--md``) and its plot (``--plot``) from the raw data
alone, without measuring:

    python -m benchmarks.critic_refresh --render
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import time
from pathlib import Path

import numpy as np

from benchmarks.critic_splits import add_grid_arguments, fmt_ci, paired, record_unit, summary, train_unit, update_raw
from benchmarks.report_io import machine, measured_on, save_figure, write_text

HERE = Path(__file__).resolve().parent

ROOT = HERE.parent
RAW = ROOT / "benchmarks" / "results" / "critic_refresh.json"
DOC = ROOT / "docs" / "critic_refresh.md"
CRITIC = "outcome critic"
SPEC = "spec (untrained SubgoalCritic)"
SINGLE_SPLIT_NOTE = (
    "Measured before the split x seed grid, with the script's command of the time: one split (the first 100 "
    "policy episodes refresh, the next 100 held out), one training seed, the policy of RL seed 0 (its checkpoint "
    "is not kept, so the grid above uses seed 3 of the same configuration). Values recorded to 3 decimals. Kept "
    "as measured; the grid above shows how far one split is from the mean.")
#: metric -> (where, key, label in the doc, better: +1 higher, -1 lower)
METRICS = {
    "policy_auroc": ("policy", "auroc", "policy held-out AUROC", +1),
    "policy_auroc_early": ("policy", "auroc_early", "policy held-out AUROC (first 25%)", +1),
    "policy_brier": ("policy", "brier", "policy held-out Brier", -1),
    "policy_calib": ("policy", "calib", "policy held-out abs(mean score - success rate)", -1),
    "scripted_auroc": ("scripted", "auroc", "scripted held-out AUROC", +1),
    "scripted_brier": ("scripted", "brier", "scripted held-out Brier", -1),
}


# --------------------------------------------------------------------------------------------
# Measuring helpers
# --------------------------------------------------------------------------------------------

def episodes_of(table, ids) -> list[tuple[np.ndarray, bool]]:
    """``[(x_0 .. x_T, success)]`` of the given episode ids (states in time order plus the last next state)."""
    out = []
    for e in ids:
        rows = np.nonzero(table.episode == e)[0]
        rows = rows[np.argsort(table.t[rows])]
        out.append((np.concatenate([table.x[rows], table.next_x[rows[-1:]]]), bool(table.ep_success[rows[0]])))
    return out


def subset(table, ids):
    keep = np.isin(table.episode, np.asarray(list(ids)))
    return {"x": table.x[keep], "episode": table.episode[keep], "t": table.t[keep], "ep_success": table.ep_success[keep]}


def policy_split(ids, n_refresh: int, n_heldout: int, split_seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``(refresh ids, held-out ids)``: a random permutation of the policy episodes ``ids`` by ``split_seed``,
    the first ``n_refresh`` for the refresh, the next ``n_heldout`` held out."""
    ids = np.sort(np.asarray(ids))
    if n_refresh + n_heldout > len(ids):
        raise ValueError(f"episodes: {n_refresh} refresh + {n_heldout} held-out episodes need {n_refresh + n_heldout}, "
                         f"got {len(ids)}")
    perm = np.random.default_rng(split_seed).permutation(ids)
    return np.sort(perm[:n_refresh]), np.sort(perm[n_refresh:n_refresh + n_heldout])


def metrics(critic, part) -> dict:
    from prm_critic.models.evaluate import evaluate_state_critic, score_in_batches

    m = evaluate_state_critic(critic, part["x"], episode=part["episode"], t=part["t"], ep_success=part["ep_success"])
    _, s = score_in_batches(critic, part["x"])
    y = part["ep_success"].astype(np.float64)
    mean = float(np.mean(s))
    return {"auroc": m["auroc_success"], "auroc_early": m["auroc_success_early"],
            "brier": float(np.mean((np.asarray(s, np.float64) - y) ** 2)), "mean_score": mean,
            "success_rate": float(y.mean()), "calib": abs(mean - float(y.mean())),
            "episodes": int(m["n_episodes"]), "success_episodes": int(m["n_success_episodes"])}


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# --------------------------------------------------------------------------------------------
# Rendering
# --------------------------------------------------------------------------------------------

def _f(v) -> str:
    return "n/a" if v is None or not np.isfinite(v) else f"{v:.3f}"


def run_key(run: dict) -> tuple:
    c = run["config"]
    return (run["task"], run["policy"]["sha256"], c["scripted_episodes"], c["refresh_episodes"], c["heldout_episodes"],
            c["epochs"], c["holdout"], c["pairwise_weight"], c["data_seed"], c["n_updates"], c["lr"], c["batch_size"],
            tuple(c["rounds"]))


def _value(row: dict, metric: str):
    where, key, _, _ = METRICS[metric]
    v = row[where].get(key)
    return None if v is None or not np.isfinite(v) else float(v)


def _units(run: dict, name: str, metric: str, rnd: int | None = None) -> dict[tuple[int, int], float]:
    """``{(split seed, training seed): value}`` of the outcome critic after ``rnd`` refreshes, or of the spec
    critic (``name == SPEC``): its per-split value stands for every training seed of its split (it has no
    training seed)."""
    if name == SPEC:
        per_split = {u["split_seed"]: _value(u, metric) for u in run["spec_units"]}
        return {(s, t): per_split[s] for (s, t) in _units(run, CRITIC, metric, 0)
                if per_split.get(s) is not None}
    out = {}
    for u in run["units"]:
        row = next((r for r in u["rounds"] if r["round"] == rnd), None)
        if row is not None and _value(row, metric) is not None:
            out[(u["split_seed"], u["seed"])] = _value(row, metric)
    return out


def _verdict(d: dict, better: int, complete: bool) -> str:
    """Met when both intervals of the paired difference lie on the better side of 0; worse when both lie on
    the other side; else not met (an interval includes 0)."""
    ends = [(d[w]["lo"], d[w]["hi"]) for w in ("units", "splits")]
    if not complete or any(lo is None for lo, _ in ends):
        return "not assessed (grid incomplete)"
    if all((lo > 0) if better > 0 else (hi < 0) for lo, hi in ends):
        return "met"
    if all((hi < 0) if better > 0 else (lo > 0) for lo, hi in ends):
        return "**not met** (worse)"
    return "**not met** (an interval includes 0)"


def render_run(run: dict) -> list[str]:
    c, pol = run["config"], run["policy"]
    splits, seeds, rounds = c["splits"], c["seeds"], c["rounds"]
    last = max(rounds)
    n_grid = len(splits) * len(seeds)
    hidden = "x".join(str(h) for h in c["hidden"])
    out = ["", f"## {run['task']}: {pol['algo']} policy at {pol['num_timesteps']:,} env steps", "",
           f"Scripted episodes: {c['scripted_episodes']} (success rate {run['scripted_success_rate']:.2f}), collected "
           f"with seed {c['data_seed']}; per split {c['holdout']:.0%} of them ({run['scripted_heldout']}) are held out and "
           f"the critic (MLP {hidden}, {c['epochs']} epochs, outcome labels, pairwise ranking weight "
           f"{c['pairwise_weight']}) trains on the rest. Policy: `{pol['path']}` (RL seed {pol['seed']}, weights "
           f"SHA-256 `{pol['sha256'][:12]}`), stochastic actions, {run['policy_episodes']} episodes collected with seed "
           f"{run['policy_collect_seed']} (success rate {run['policy_success_rate']:.2f}); per split "
           f"{c['refresh_episodes']} are the refresh data and {c['heldout_episodes']} others are held out. One refresh = "
           f"{c['n_updates']} Adam steps (lr {c['lr']:g}, batch {c['batch_size']}) of BCE on the refresh episodes' "
           f"outcome labels; measured after {', '.join(map(str, rounds))} refreshes. Split seeds {splits}, training "
           f"seeds {seeds} ({n_grid} units).", "", "```bash", run["command"], "```"]
    if run.get("reduced"):
        out += ["", f"Reduced to fit the time budget: {run['reduced']}"]

    # per unit
    by_unit = {(u["split_seed"], u["seed"]): u for u in run["units"]}
    spec_by_split = {u["split_seed"]: u for u in run["spec_units"]}
    out += ["", f"### Per split and training seed (before = 0 refreshes, after = {last})", "",
            "Policy held-out episodes (the spec critic has one value per split, repeated on its rows):", "",
            "| split seed | training seed | held-out episodes (successful) | AUROC spec | AUROC before | AUROC after "
            "| first 25% before | first 25% after | Brier spec | Brier before | Brier after | mean score before / after "
            "(true rate) |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    missing = []
    for s in splits:
        sp = spec_by_split.get(s)
        for t in seeds:
            u = by_unit.get((s, t))
            if u is None:
                missing.append((s, t))
                out.append(f"| {s} | {t} | (not run) |" + " |" * 9)
                continue
            r0 = next(r for r in u["rounds"] if r["round"] == 0)["policy"]
            r1 = next(r for r in u["rounds"] if r["round"] == last)["policy"]
            spp = sp["policy"] if sp else {}
            out.append(f"| {s} | {t} | {r0['episodes']} ({r0['success_episodes']}) | {_f(spp.get('auroc'))} | "
                       f"{_f(r0['auroc'])} | {_f(r1['auroc'])} | {_f(r0['auroc_early'])} | {_f(r1['auroc_early'])} | "
                       f"{_f(spp.get('brier'))} | {_f(r0['brier'])} | {_f(r1['brier'])} | "
                       f"{_f(r0['mean_score'])} / {_f(r1['mean_score'])} ({r0['success_rate']:.2f}) |")
    out += ["", "Scripted held-out episodes (the critic's own held-out split):", "",
            "| split seed | training seed | held-out episodes (successful) | AUROC spec | AUROC before | AUROC after "
            "| Brier spec | Brier before | Brier after |", "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for s in splits:
        sp = spec_by_split.get(s)
        for t in seeds:
            u = by_unit.get((s, t))
            if u is None:
                out.append(f"| {s} | {t} | (not run) |" + " |" * 6)
                continue
            r0 = next(r for r in u["rounds"] if r["round"] == 0)["scripted"]
            r1 = next(r for r in u["rounds"] if r["round"] == last)["scripted"]
            sps = sp["scripted"] if sp else {}
            out.append(f"| {s} | {t} | {r0['episodes']} ({r0['success_episodes']}) | {_f(sps.get('auroc'))} | "
                       f"{_f(r0['auroc'])} | {_f(r1['auroc'])} | {_f(sps.get('brier'))} | {_f(r0['brier'])} | "
                       f"{_f(r1['brier'])} |")

    # means per round
    cols = list(METRICS)
    out += ["", "### Means over the units", "",
            "Mean, 95% t interval over the units (n = splits x seeds); the spec critic's per-split value stands "
            "for each training seed of its split:", "",
            "| critic | refreshes | units | " + " | ".join(METRICS[m][2] for m in cols) + " |",
            "|---|---:|---:|" + "---|" * len(cols)]
    rows = [(SPEC, None, "-")] + [(CRITIC, r, str(r)) for r in [0, *rounds]]
    for name, rnd, label in rows:
        cells = [fmt_ci(summary(_units(run, name, m, rnd))["units"]) for m in cols]
        n = len(_units(run, name, "policy_brier", rnd))  # defined with one outcome class too
        shown = name if name == SPEC else (f"{CRITIC} (scripted data)" if rnd == 0 else f"{CRITIC}, refreshed")
        out.append(f"| {shown} | {label} | {n} | " + " | ".join(cells) + " |")

    # paired differences and verdicts
    out += ["", f"### Paired differences ({last} refreshes; same split, same training seed)", "",
            "95% t intervals over the units and over the split means (the mean over training seeds of each split): "
            "units of one split share their held-out episodes and the critic's training episodes, so the second "
            "is the honest one where the split dominates. A claim is met only if both intervals lie on its side "
            "of 0.", "",
            "| claim | difference | units | lower / higher in | units interval | splits interval | verdict |",
            "|---|---|---:|---:|---|---|---|"]
    verdicts = []
    for ref, ref_label, ref_rnd in ((CRITIC, "before the refresh", 0), (SPEC, "the spec critic", None)):
        for m in cols:
            _, _, label, better = METRICS[m]
            d = paired(_units(run, CRITIC, m, last), _units(run, ref, m, ref_rnd))
            complete = d["units"]["n"] == n_grid
            v = _verdict(d, better, complete)
            word = "improves" if ref_rnd == 0 else "beats the spec critic on"
            claim = (f"refresh {word} {label}" if ref_rnd == 0 else f"refreshed critic {word} {label}") \
                + (" (higher)" if better > 0 else " (lower)")
            short = "after - before" if ref_rnd == 0 else "refreshed - spec"
            out.append(f"| {claim} | {short} | {d['units']['n']} | {d['a_lower']} / {d['a_higher']} | "
                       f"{fmt_ci(d['units'], True)} | {fmt_ci(d['splits'], True)} | {v} |")
            verdicts.append(f"{claim}: {v.replace('**', '')}, paired difference {fmt_ci(d['units'], True)} "
                            f"(splits {fmt_ci(d['splits'], True)})")
    out += ["", "Verdicts:", ""] + [f"* {v}." for v in verdicts]
    if missing:
        out += ["", f"Missing: {len(missing)} of {n_grid} units (split seed, training seed): "
                + ", ".join(f"({s}, {t})" for s, t in missing) + ". Rerun the command above to add them."]
    sec = run.get("seconds", {})
    if sec:
        per = [u["seconds"] for u in run["units"] if u.get("seconds")]
        train = [p["train"] for p in per if p.get("train") is not None]
        out += ["", f"Time: collection and labels {sec.get('data', 0):.0f} s (skipped when on disk); per unit "
                f"critic training {np.median(train) if train else 0:.0f} s (median; read back when on disk), "
                f"{last} refreshes and the metrics {np.median([p['refresh'] for p in per]) if per else 0:.0f} s "
                "(median)."]
    return out


def render_single_split(old: dict) -> list[str]:
    """The run before the split x seed grid: one split, one training seed (its own table format)."""
    pol = old["policy"]
    out = ["", "## Earlier run on one split", "",
           old.get("note", ""), "",
           f"Task {old['task']}. Critic: MLP trained {old['epochs']} epochs on {old['scripted_episodes']} "
           f"scripted-controller episodes with outcome labels. Policy: `{pol['algo']}` checkpoint at "
           f"{pol['num_timesteps']} env steps (stochastic actions), {pol['episodes']} episodes, success rate "
           f"{pol['success_rate']:.2f}: the first {old['refresh_episodes']} are the refresh data, the other "
           f"{old['heldout_episodes']} are held out. One refresh = {old['n_updates']} Adam steps (lr {old['lr']:g}, "
           f"batch {old['batch_size']}).", "",
           "| critic | refreshes | policy held-out AUROC | policy held-out AUROC (first 25%) | policy held-out Brier | "
           "policy held-out mean score (true rate) | scripted held-out AUROC | scripted held-out Brier |",
           "|---|---|---|---|---|---|---|---|"]
    for r in old["rows"]:
        p, s = r["policy"], r["scripted"]
        out.append(f"| {r['critic']} | {'-' if r['round'] is None else r['round']} | {_f(p['auroc'])} | "
                   f"{_f(p['auroc_early'])} | {_f(p['brier'])} | {_f(p['mean_score'])} ({p['success_rate']:.2f}) | "
                   f"{_f(s['auroc'])} | {_f(s['brier'])} |")
    out += ["", "```bash", old["command"], "```"]
    return out


def render(raw: dict) -> str:
    """The markdown of ``docs/critic_refresh.md`` from the raw-data file's content."""
    out = [
        "# Critic refresh on the policy's own episodes",
        "",
        f"Generated by `python -m benchmarks.critic_refresh --render` from `{RAW.relative_to(ROOT).as_posix()}`, "
        "the raw data the command below measured.",
        "",
        "A success critic trained on the spec's noisy scripted controller (outcome labels) meets an RL policy's",
        "states. It is refreshed offline on the policy's own episodes with `CriticRefreshCallback` (the update",
        "the callback runs in training) and measured on the policy's held-out episodes, and on held-out",
        "scripted episodes (does the refresh make it forget its behaviour data?). The spec's untrained",
        "`SubgoalCritic` is the reference.",
        "",
        "Episodes are collected once and re-split per split seed. A unit is one split seed (which scripted",
        "episodes the critic trains on and which are held out; which policy episodes are refresh data and which",
        "are held out) and one training seed (the critic's weight init and batch order, the refresh's batch",
        "sampling). All splits are of one collected episode set per source, and of one policy (another",
        "collection seed or policy is not varied).",
        "",
        "* success AUROC: per-step success score vs the episode's final success; first 25%: over the first",
        "  quarter of each held-out episode;",
        "* Brier: mean squared error of the per-step success score against that outcome;",
        "* abs(mean score - success rate): calibration in the large, the per-step mean score against the",
        "  held-out steps' success rate.",
    ]
    for run in raw["runs"]:
        out += render_run(run)
    if raw.get("single_split_runs"):
        for old in raw["single_split_runs"]:
            out += render_single_split(old)
    if raw.get("machine"):
        out += ["", measured_on(raw['machine'])]
    return "\n".join(out + [""])


def plot(raw: dict, path: Path) -> None:
    """Held-out AUROC and Brier score vs refresh rounds (mean over the units with its 95% interval), from the
    raw data (its last run)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    run = raw["runs"][-1]
    rr = [0, *run["config"]["rounds"]]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for ax, kind, name in ((axes[0], "auroc", "success AUROC (all steps)"),
                           (axes[1], "brier", "Brier score (lower is better)")):
        for where, marker, lab in (("policy", "o-", "policy episodes (held out)"),
                                   ("scripted", "s-", "scripted episodes (held out)")):
            m = f"{where}_{kind}"
            st = [summary(_units(run, CRITIC, m, r))["units"] for r in rr]
            ok = [i for i, s in enumerate(st) if s["mean"] is not None]
            if not ok:
                continue
            x = [rr[i] for i in ok]
            mean = [st[i]["mean"] for i in ok]
            lo = [st[i]["lo"] if st[i]["lo"] is not None else st[i]["mean"] for i in ok]
            hi = [st[i]["hi"] if st[i]["hi"] is not None else st[i]["mean"] for i in ok]
            line, = ax.plot(x, mean, marker, label=lab)
            ax.fill_between(x, lo, hi, color=line.get_color(), alpha=0.2)
        sp = summary(_units(run, SPEC, f"policy_{kind}"))["units"]
        if sp["mean"] is not None:
            ax.axhline(sp["mean"], color="grey", ls=":", label="spec critic, policy episodes")
        ax.set_xlabel(f"refreshes ({run['config']['n_updates']} Adam steps each)")
        ax.set_ylabel(name)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    n = len(run["units"])
    fig.suptitle(f"{run['task']}: outcome critic refreshed on the policy's episodes (mean and 95% interval over "
                 f"{n} units)", fontsize=10)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)


def render_file(raw_path: Path = RAW, md_path: Path = DOC, plot_path: "Path | None" = None) -> Path:
    raw = json.loads(Path(raw_path).read_text())
    write_text(md_path, render(raw))
    if plot_path and raw.get("runs"):
        plot(raw, Path(plot_path))
    return Path(md_path)


# --------------------------------------------------------------------------------------------
# Measuring
# --------------------------------------------------------------------------------------------

def canonical_command(a, policy: str) -> str:
    parts = ["OMP_NUM_THREADS=1 python -m benchmarks.critic_refresh --task", a.task, "--policy", policy,
             "--scripted-episodes", str(a.scripted_episodes), "--refresh-episodes", str(a.refresh_episodes),
             "--heldout-episodes", str(a.heldout_episodes), "--epochs", str(a.epochs), "--rounds",
             " ".join(map(str, a.rounds)), "--n-updates", str(a.n_updates), "--splits", " ".join(map(str, a.splits)),
             "--seeds", " ".join(map(str, a.seeds))]
    for flag, value, default in (("--holdout", a.holdout, 0.25), ("--pairwise-weight", a.pairwise_weight, None),
                                 ("--lr", a.lr, 1e-4), ("--batch-size", a.batch_size, 256),
                                 ("--data-seed", a.data_seed, 0)):
        if default is None:
            from prm_critic.models.train import TrainConfig

            default = TrainConfig.pairwise_weight
        if value != default:
            parts += [flag, f"{value:g}" if isinstance(value, float) else str(value)]
    return " ".join(parts)


def measure(a) -> dict:
    """Run (or resume) the grid; every finished unit is written to ``a.raw`` at once. Returns the raw data."""
    from prm_critic.models import load_state_critic
    from prm_critic.models.train import TrainConfig
    from prm_critic.robotics.collection import collect
    from prm_critic.robotics.dataset import load_steps, split_episodes
    from prm_critic.robotics.labels import label
    from prm_critic.robotics.make import CriticInputLayout
    from prm_critic.robotics.subgoals import SubgoalCritic
    from prm_critic.sb3 import CriticRefreshCallback, load_policy

    out = Path(a.out) / a.task
    t0 = time.perf_counter()
    # the policy is copied beside the data, so that a later retrain of the run does not change this benchmark
    src = Path(a.policy)
    sha = sha256_of(src.with_suffix(".safetensors"))
    pol_dir = out / f"policy_{sha[:12]}"
    pol_dir.mkdir(parents=True, exist_ok=True)
    for suffix in (".json", ".safetensors"):
        if not (pol_dir / f"policy{suffix}").exists():
            shutil.copyfile(src.with_suffix(suffix), pol_dir / f"policy{suffix}")
    pol_meta = json.loads((pol_dir / "policy.json").read_text())
    scripted = out / f"scripted_{a.scripted_episodes}_d{a.data_seed}"
    print(f"{a.task}: collecting {a.scripted_episodes} scripted episodes into {scripted}", flush=True)
    collect(a.task, scripted, episodes=a.scripted_episodes, policy="scripted", seed=a.data_seed, progress=a.progress)
    label(scripted, "outcome")
    n_pol = a.refresh_episodes + a.heldout_episodes
    pol_seed = 100_000 + a.data_seed
    polic = pol_dir / f"episodes_{n_pol}_d{pol_seed}"
    print(f"{a.task}: collecting {n_pol} policy episodes into {polic}", flush=True)
    collect(a.task, polic, episodes=n_pol, policy=str(pol_dir / "policy.json"), seed=pol_seed,
            policy_loader=load_policy, progress=a.progress)
    label(polic, "outcome")
    t_data = time.perf_counter() - t0

    s_table = load_steps(scripted, "outcome")
    p_table = load_steps(polic, "outcome")
    p_ids = np.unique(p_table.episode)
    s_ids = np.unique(s_table.episode)
    layout = CriticInputLayout.from_dict(p_table.layout.to_dict())
    spec_critic = SubgoalCritic(p_table.spec, layout=layout)
    cfg0 = TrainConfig(epochs=a.epochs, pairwise_weight=a.pairwise_weight)

    def rate(table, ids):
        return float(np.mean([table.ep_success[table.episode == e][0] for e in ids]))

    policy_arg = Path(a.policy).as_posix()
    try:
        policy_arg = Path(a.policy).resolve().relative_to(ROOT).as_posix()
    except ValueError:
        pass
    run = {
        "task": a.task,
        "command": canonical_command(a, policy_arg),
        "policy": {"path": policy_arg, "sha256": sha, "algo": pol_meta.get("algo"),
                   "num_timesteps": pol_meta.get("num_timesteps"), "seed": (pol_meta.get("extra") or {}).get("seed")},
        "scripted_success_rate": rate(s_table, s_ids), "scripted_heldout": min(len(s_ids) - 1, max(1, int(round(
            a.holdout * len(s_ids))))),
        "policy_episodes": int(len(p_ids)), "policy_collect_seed": pol_seed,
        "policy_success_rate": rate(p_table, p_ids),
        "config": {"scripted_episodes": a.scripted_episodes, "refresh_episodes": a.refresh_episodes,
                   "heldout_episodes": a.heldout_episodes, "epochs": cfg0.epochs, "hidden": list(cfg0.hidden),
                   "pairwise_weight": cfg0.pairwise_weight, "holdout": a.holdout, "data_seed": a.data_seed,
                   "n_updates": a.n_updates, "lr": a.lr, "batch_size": a.batch_size, "rounds": sorted(a.rounds),
                   "splits": list(a.splits), "seeds": list(a.seeds)},
        "seconds": {"data": t_data},
        "units": [], "spec_units": [],
    }
    if a.reduced:
        run["reduced"] = a.reduced
    empty = lambda: {"runs": []}  # noqa: E731

    def merge(raw: dict, run=run) -> None:
        """Record the run's settings, keeping the units already recorded (a grid that grows keeps its old units)."""
        if "runs" not in raw:  # the one-split format before the grid: kept as an earlier run
            first = dict(raw)
            first.pop("about", None)
            first["note"] = SINGLE_SPLIT_NOTE
            raw.clear()
            raw.update({"runs": [], "single_split_runs": [first]})
        old = next((r for r in raw["runs"] if run_key(r) == run_key(run)), None)
        if old is not None:
            run["units"], run["spec_units"] = old["units"], old["spec_units"]
            for key in ("splits", "seeds"):
                run["config"][key] = sorted(set(run["config"][key]) | set(old["config"][key]))
            run["command"] = canonical_command(argparse.Namespace(**{**vars(a), "splits": run["config"]["splits"],
                                                                     "seeds": run["config"]["seeds"]}), policy_arg)
            if not a.reduced and old.get("reduced"):
                run["reduced"] = old["reduced"]
            run["seconds"]["data"] = max(run["seconds"]["data"], old.get("seconds", {}).get("data", 0.0))
        raw["runs"] = [r for r in raw["runs"] if run_key(r) != run_key(run)] + [run]
        raw["about"] = ("Held-out metrics measured by benchmarks/critic_refresh.py over episode splits x training "
                        "seeds; docs/critic_refresh.md is rendered from this file (--render).")
        raw["machine"] = machine() + ", shared with other jobs, OMP_NUM_THREADS=1"

    raw = update_raw(a.raw, merge, empty)
    key = run_key(run)
    run = next(r for r in raw["runs"] if run_key(r) == key)

    def splits_of(s: int):
        _, s_test = split_episodes(s_table, holdout=a.holdout, seed=s)
        s_held = {"x": s_test.x, "episode": s_test.episode, "t": s_test.t, "ep_success": s_test.ep_success}
        refresh_ids, held_ids = policy_split(p_ids, a.refresh_episodes, a.heldout_episodes, s)
        return s_held, refresh_ids, subset(p_table, held_ids)

    spec_done = {u["split_seed"] for u in run["spec_units"]}
    for s in a.splits:
        if s in spec_done:
            continue
        s_held, _, p_held = splits_of(s)
        u = {"split_seed": s, "policy": metrics(spec_critic, p_held), "scripted": metrics(spec_critic, s_held)}

        def add_spec(raw: dict, u=u) -> None:
            r = next(r for r in raw["runs"] if run_key(r) == key)
            r["spec_units"] = [x for x in r["spec_units"] if x["split_seed"] != u["split_seed"]] + [u]

        update_raw(a.raw, add_spec, empty)
    done = {(u["split_seed"], u["seed"]) for u in run["units"]}
    todo = [(s, t) for s in a.splits for t in a.seeds if (s, t) not in done]
    n_grid = len(a.splits) * len(a.seeds)
    print(f"{a.task}: {n_grid - len(todo)} of {n_grid} units recorded, {len(todo)} to run", flush=True)
    cdir = out / (f"critics_{scripted.name}_e{a.epochs}_h{a.holdout}_pw{cfg0.pairwise_weight}")
    t_start = time.perf_counter()
    last = max(a.rounds)
    for i, (s, t) in enumerate(todo, 1):
        tu = time.perf_counter()
        ckpt = cdir / f"outcome_split{s}_seed{t}"
        cached = ckpt.with_suffix(".json").exists() and ckpt.with_name(ckpt.name + ".metrics.json").exists()
        train_unit(scripted, "outcome", ckpt, argparse.Namespace(epochs=a.epochs, pairwise_weight=cfg0.pairwise_weight,
                                                                 holdout=a.holdout), s, t)
        t_train = None if cached else time.perf_counter() - tu
        t1 = time.perf_counter()
        s_held, refresh_ids, p_held = splits_of(s)
        critic = load_state_critic(ckpt)
        cb = CriticRefreshCallback(critic, head="success", n_updates=a.n_updates, lr=a.lr, batch_size=a.batch_size,
                                   window=len(refresh_ids), seed=t)
        for x, ok in episodes_of(p_table, refresh_ids):
            cb.add_episode(x, ok)
        rows = [{"round": 0, "policy": metrics(critic, p_held), "scripted": metrics(critic, s_held)}]
        for r in range(1, last + 1):
            cb.refresh()
            if r in a.rounds:
                rows.append({"round": r, "policy": metrics(critic, p_held), "scripted": metrics(critic, s_held)})
        unit = {"critic": CRITIC, "split_seed": s, "seed": t,
                "refresh_success_rate": rate(p_table, refresh_ids), "rounds": rows,
                "seconds": {"train": t_train, "refresh": time.perf_counter() - t1}}
        record_unit(a.raw, key, run_key, unit, "critic", empty)
        el = time.perf_counter() - t_start
        p0, p1 = rows[0]["policy"], rows[-1]["policy"]
        print(f"[{i}/{len(todo)}] split {s} seed {t}: policy held-out Brier {p0['brier']:.3f} -> {p1['brier']:.3f}, "
              f"AUROC {p0['auroc']:.3f} -> {p1['auroc']:.3f} ({time.perf_counter() - tu:.0f}s; "
              f"~{el / i * (len(todo) - i) / 60:.0f} min left)", flush=True)
    return json.loads(Path(a.raw).read_text())


def main(argv=None) -> int:
    from prm_critic.models.train import TrainConfig

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", default="FetchPush-v4")
    ap.add_argument("--policy", help="train-policy checkpoint (policy.json) for --task (required unless --render)")
    ap.add_argument("--out", default="prm_runs/refresh")
    ap.add_argument("--scripted-episodes", type=int, default=300)
    ap.add_argument("--refresh-episodes", type=int, default=100)
    ap.add_argument("--heldout-episodes", type=int, default=100)
    ap.add_argument("--rounds", type=int, nargs="+", default=[1, 2, 5, 10, 20],
                    help="report after this many refreshes (each: --n-updates Adam steps)")
    ap.add_argument("--n-updates", type=int, default=50)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--batch-size", type=int, default=256)
    add_grid_arguments(ap, epochs=40, pairwise_weight=TrainConfig.pairwise_weight,
                       data_seed="collection seed (policy episodes: 100000 + it)")
    ap.add_argument("--reduced", default=None, help="a sentence in the doc on what was cut to fit a time budget")
    ap.add_argument("--no-progress", dest="progress", action="store_false", help="no collection progress bars")
    ap.add_argument("--raw", type=Path, default=RAW, help="raw-data JSON the measurement is written to")
    ap.add_argument("--render", action="store_true", help="only write --md (and --plot) from --raw (no measurement)")
    ap.add_argument("--md", "--table", type=Path, default=DOC, help="markdown written from the raw data")
    ap.add_argument("--plot", default=None,
                    help=f"PNG drawn from the raw data (default: {DOC.with_suffix('.png').relative_to(ROOT)} when "
                         "measuring or rendering the default doc; '' for none)")
    a = ap.parse_args(argv)
    if a.plot is None:
        a.plot = str(DOC.with_suffix(".png")) if (not a.render or Path(a.md).resolve() == DOC) else ""
    if a.render:
        print(f"wrote {render_file(a.raw, a.md, a.plot or None)}")
        return 0
    if not a.policy:
        ap.error("--policy: expected a train-policy checkpoint (policy.json), got none")
    measure(a)
    render_file(a.raw, a.md, a.plot or None)
    print(f"wrote {a.raw} and {a.md}" + (f" and {a.plot}" if a.plot else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
