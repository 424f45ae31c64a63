"""Calibration of the TextWorld text PRMs over game splits x training seeds, per label family.

``prm_calibration.py`` measures one trained PRM on 16 calibration games. This script asks whether its
claims hold beyond one split, and compares label families on the same splits. The pool is every
MC-labelled game (one base-policy trajectory each, ``--labels``) with its terminal siblings
(``--extra``; a sibling belongs to the game whose prompt it shares), e.g. the 96 training games and
the 16 calibration games: 112 games. A *unit* is one split seed and one training seed:

* the split seed draws ``--holdout`` games at random (``numpy.random.default_rng(split_seed)``); they
  are held out whole, with their siblings, and the critics train on the other games;
* the training seed is ``TextTrainConfig.seed`` (head init, batch order, dropout) of every critic
  trained in the unit; it does not change the split, and the split seed does not change it.

Families, trained on the unit's training games with the same training seed:

* ``mc``: the MC-labelled PRM (``train_prm.py`` recipe: ``MiniLMStepPRM``, frozen encoder,
  ``--epochs`` (150), lr 3e-3, batch 2; trajectories and siblings with their MC labels);
* ``implicit``: the outcome value model used as the implicit PRM (``train_prm.py --outcome-only``:
  ``outcome_examples`` of the trajectories and siblings, ``prompt_value_examples`` of the trajectories).
  The measurements read the success score only, and ``ImplicitPRM``'s success score is its value
  model's ``V_t``, so the value model is scored (each unit records the largest difference to
  ``ImplicitPRM(model)`` on one held-out trajectory);
* ``random`` and ``constant``: the uninformed controls (``RandomCritic(seed=0)``,
  ``ConstantCritic(0.5, seed=0)`` through ``prm_calibration.CriticScorer``); not trained, so one value
  per split, standing for every training seed of it in the paired differences.

Metrics on the held-out games: ``prm_calibration.evaluate`` (Brier and ECE against the MC labels,
AUROC winnable vs not, dead-end AUROC surviving vs losing steps, the share of losing and surviving
steps under each dead-end cut, first-error accuracy and ProcessBench F1 at each cut and at the
F1-best threshold tuned on the unit's training trajectories, value-order correlation). Means with 95%
intervals over the units and over the split means, and paired differences:
``benchmarks/critic_splits.py``.

The encoder is frozen, so its features are a function of each example's text alone: one
``FrozenFeatureCache`` serves every unit and family (each distinct trajectory is encoded once per
process); the trained heads are the same as without it. Resumable: every finished unit is written at
once (atomically) to the raw-data file (``--raw``), and a rerun skips the units recorded there.
``--render`` writes ``docs/agents_prm_calibration_splits.md`` from the raw data alone:

    python -m benchmarks.agents.prm_calibration_splits \\
        --labels .cache/textworld/labels96/labels.jsonl .cache/textworld/labels_cal/labels.jsonl \\
        --extra .cache/textworld/labels96/labels_siblings.jsonl .cache/textworld/labels_cal/labels_siblings.jsonl \\
        --seeds 0-95 500-515
    python -m benchmarks.agents.prm_calibration_splits --render
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from benchmarks.critic_splits import fmt_ci, paired, record_unit, summary, update_raw
from benchmarks.report_io import add_doc_arguments, machine, measured_on, render_only

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

RAW = ROOT / "benchmarks" / "results" / "agents_prm_calibration_splits.json"
DOC = ROOT / "docs" / "agents_prm_calibration_splits.md"
TRAINED = ("mc", "implicit")
CONTROLS = ("random", "constant")
NAMES = {"mc": "MC PRM", "implicit": "implicit PRM", "random": "random control", "constant": "constant control"}
CUT = "0.05"  # the dead-end cut shown in the per-unit table (all cuts are in the raw data and the means)

# metric -> (label, better: +1 higher, -1 lower, 0 neither)
METRICS = {
    "brier": ("Brier", -1),
    "ece": ("ECE", -1),
    "auroc_label_pos": ("AUROC winnable vs not", +1),
    "auroc_dead_end": ("dead-end AUROC", +1),
    "losing_under_0.02": ("losing under 0.02", +1),
    "surviving_under_0.02": ("surviving under 0.02", -1),
    "losing_under_0.05": ("losing under 0.05", +1),
    "surviving_under_0.05": ("surviving under 0.05", -1),
    "losing_under_0.1": ("losing under 0.1", +1),
    "surviving_under_0.1": ("surviving under 0.1", -1),
    "fe_acc_0.05": ("first-error acc. at 0.05", +1),
    "f1_0.05": ("F1 at 0.05", +1),
    "fe_acc_tuned": ("first-error acc. (tuned threshold)", +1),
    "f1_tuned": ("F1 (tuned threshold)", +1),
    "value_order": ("value order", +1),
}
UNIT_COLUMNS = ("brier", "ece", "auroc_label_pos", "auroc_dead_end", "losing_under_0.05", "surviving_under_0.05",
                "f1_tuned", "value_order")
DIFF_COLUMNS = ("brier", "ece", "auroc_label_pos", "auroc_dead_end", "losing_under_0.05", "surviving_under_0.05",
                "f1_tuned", "value_order")
#: (a, b) paired differences a - b shown in the doc
PAIRS = (("mc", "implicit"), ("mc", "random"), ("implicit", "random"), ("mc", "constant"), ("implicit", "constant"))
#: claims: (a, b, metric); met when both intervals of a - b lie on the metric's better side of 0
CLAIMS = (("mc", "random", "auroc_dead_end"), ("mc", "random", "auroc_label_pos"), ("mc", "random", "f1_tuned"),
          ("mc", "constant", "brier"),
          ("implicit", "random", "auroc_dead_end"), ("implicit", "random", "auroc_label_pos"),
          ("implicit", "random", "f1_tuned"), ("implicit", "constant", "brier"))
#: MC PRM vs implicit: which family is ahead, per metric (no side is claimed beforehand)
VERSUS = ("auroc_dead_end", "auroc_label_pos", "brier", "ece", "f1_tuned", "value_order")


# --------------------------------------------------------------------------------------------
# The pool and its splits
# --------------------------------------------------------------------------------------------

@dataclass
class Pool:
    """Every game of the pool: its seed, its trajectory and its siblings (matched by prompt)."""

    seeds: list[int]
    trajectories: list  # StepwiseExample, one per game
    siblings: list[list]  # per game, its sibling examples

    def __len__(self) -> int:
        return len(self.seeds)


def build_pool(trajectories: list, seeds: list[int], siblings: list) -> Pool:
    """The pool of games ``seeds`` (one trajectory each, in order); each sibling goes with the game of its
    prompt. Refuses a prompt shared by two games (a game must be identifiable by its prompt), a count
    mismatch, and a sibling of no game."""
    if len(trajectories) != len(seeds):
        raise SystemExit(f"--labels: {len(trajectories)} trajectories, expected one per seed of --seeds ({len(seeds)})")
    if len(set(seeds)) != len(seeds):
        raise SystemExit("--seeds: a game seed is listed twice")
    game_of: dict[str, int] = {}
    for i, ex in enumerate(trajectories):
        if ex.prompt in game_of:
            raise SystemExit(f"--labels: the games of seeds {seeds[game_of[ex.prompt]]} and {seeds[i]} share one prompt; "
                             "siblings could not be matched to their game")
        game_of[ex.prompt] = i
    sib: list[list] = [[] for _ in seeds]
    for j, ex in enumerate(siblings):
        if ex.prompt not in game_of:
            raise SystemExit(f"--extra: sibling example {j} is not from a game of --labels (its prompt matches none)")
        sib[game_of[ex.prompt]].append(ex)
    return Pool(list(seeds), list(trajectories), sib)


def held_out_games(n_games: int, holdout: int, split_seed: int) -> list[int]:
    """The indices of the ``holdout`` games held out by ``split_seed`` (sorted): a random draw without
    replacement from ``numpy.random.default_rng(split_seed)``; the training seed plays no part."""
    if not 0 < holdout < n_games:
        raise ValueError(f"holdout: expected an int in [1, {n_games - 1}], got {holdout}")
    return sorted(int(i) for i in np.random.default_rng(int(split_seed)).choice(n_games, holdout, replace=False))


@dataclass
class Split:
    held: list[int]
    train_traj: list
    train_sib: list
    test_traj: list
    test_sib: list


def split_pool(pool: Pool, holdout: int, split_seed: int) -> Split:
    """Split ``pool`` by ``split_seed``: the held-out games whole, each with its siblings."""
    held = held_out_games(len(pool), holdout, split_seed)
    hs = set(held)
    tr = [i for i in range(len(pool)) if i not in hs]
    return Split(held, [pool.trajectories[i] for i in tr], [s for i in tr for s in pool.siblings[i]],
                 [pool.trajectories[i] for i in held], [s for i in held for s in pool.siblings[i]])


def train_config(args, seed: int):
    """The training settings of every critic of a unit with training seed ``seed`` (the split plays no part)."""
    from prm_critic.text.train import TextTrainConfig

    return TextTrainConfig(epochs=args.epochs, batch_size=args.batch_size, freeze_encoder=True, lr=args.lr,
                           seed=int(seed), show_progress=False)


def fit_examples(family: str, sp: Split) -> list:
    """The examples a family trains on (``train_prm.py``'s composition): ``mc``: the training games'
    trajectories and siblings with their MC labels; ``implicit``: the same labelled with their outcomes,
    plus one prompt-only example per training game (the share of its trajectories won)."""
    from prm_critic.text.implicit import outcome_examples, prompt_value_examples

    if family == "mc":
        return sp.train_traj + sp.train_sib
    if family == "implicit":
        return outcome_examples(sp.train_traj) + outcome_examples(sp.train_sib) + prompt_value_examples(sp.train_traj)
    raise ValueError(f"family: expected one of {TRAINED}, got {family!r}")


# --------------------------------------------------------------------------------------------
# Measuring
# --------------------------------------------------------------------------------------------

def _clean(v):
    """JSON-safe: NaN / inf -> None, recursively."""
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, dict):
        return {k: _clean(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_clean(x) for x in v]
    return v


def flat_metrics(m: dict) -> dict:
    """The per-unit numbers of ``prm_calibration.evaluate``'s output (keys of :data:`METRICS`)."""
    sm = m["step_metrics"]
    out = {"brier": m["brier"], "ece": m["ece"], "auroc_label_pos": m["auroc_label_pos"],
           "auroc_dead_end": m["auroc_dead_end"]}
    for c, v in m["cuts"].items():
        out[f"losing_under_{c}"] = v["losing_under"]
        out[f"surviving_under_{c}"] = v["surviving_under"]
    for c, v in sm["at_cut"].items():
        out[f"fe_acc_{c}"] = v["first_error_accuracy"]
        out[f"f1_{c}"] = v["f1"]
    if sm.get("tuned"):
        out["fe_acc_tuned"] = sm["tuned"]["first_error_accuracy"]
        out["f1_tuned"] = sm["tuned"]["f1"]
        out["tuned_threshold"] = sm["tuned"]["threshold"]
    out["value_order"] = sm["value_order_mc"]["mean"]
    return _clean(out)


def measure(model, sp: Split) -> dict:
    from benchmarks.agents.prm_calibration import evaluate

    m = evaluate(model, sp.test_traj, sp.test_sib, tune=sp.train_traj)
    held = {k: m[k] for k in ("n_trajectories", "n_steps", "n_label_pos", "n_losing_steps", "n_siblings",
                              "n_siblings_lost", "mean_label", "mean_pred", "mean_pred_losing", "mean_pred_surviving")}
    return {**flat_metrics(m), "held_out": _clean(held), "curve": _clean(m["curve"])}


def train_family(family: str, sp: Split, args, seed: int, cache):
    from prm_critic.text.train import train_text_prm

    return train_text_prm(fit_examples(family, sp), config=train_config(args, seed), feature_cache=cache)


def implicit_check(model, sp: Split) -> float:
    """The largest difference between the value model's success scores (what is measured) and
    ``ImplicitPRM(model)``'s on the first held-out trajectory."""
    from prm_critic.text.implicit import ImplicitPRM

    ex = sp.test_traj[0]
    a = np.asarray(ImplicitPRM(model).score_trajectory(ex.prompt, ex.completions).success, np.float64)
    b = np.asarray(model.score_trajectory(ex.prompt, ex.completions).success, np.float64)
    return float(np.abs(a - b).max())


def control_scorer(name: str):
    from benchmarks.agents.prm_calibration import CriticScorer

    from prm_critic.critic import ConstantCritic, RandomCritic

    return CriticScorer(RandomCritic(seed=0) if name == "random" else ConstantCritic(0.5, seed=0))


def run_key(run: dict) -> tuple:
    c = run["config"]
    return (tuple(c["labels_sha256"]), tuple(c["extra_sha256"]), c["holdout"], c["epochs"], c["lr"], c["batch_size"])


def canonical_command(args, splits, seeds) -> str:
    return " ".join(["python -m benchmarks.agents.prm_calibration_splits", "--labels", *args.labels, "--extra",
                     *args.extra, "--seeds", *args.seeds, "--holdout", str(args.holdout), "--epochs",
                     str(args.epochs), "--lr", f"{args.lr:g}", "--batch-size", str(args.batch_size), "--splits",
                     *map(str, splits), "--train-seeds", *map(str, seeds)])


def _sha(path: str) -> str:
    from prm_critic.integrity import sha256_bytes

    return sha256_bytes(Path(path).read_bytes())


def measure_grid(args) -> None:
    from agents.textworld_agent.labels import parse_seeds
    from prm_critic.text.train import FrozenFeatureCache
    from prm_critic.text.trl_format import read_stepwise_jsonl

    if not (len(args.labels) == len(args.seeds) and len(args.extra) in (0, len(args.labels))):
        raise SystemExit("--labels, --seeds (and --extra): expected one entry per labelled game set, in the same order")
    traj, seeds, sibs = [], [], []
    for i, f in enumerate(args.labels):
        traj += read_stepwise_jsonl(f)
        seeds += parse_seeds(args.seeds[i])
        if args.extra:
            sibs += read_stepwise_jsonl(args.extra[i])
    pool = build_pool(traj, seeds, sibs)
    empty = lambda: {"runs": []}  # noqa: E731
    run = {"units": [], "control_units": [],
           "config": {"labels": list(args.labels), "extra": list(args.extra), "seeds": list(args.seeds),
                      "labels_sha256": [_sha(f) for f in args.labels], "extra_sha256": [_sha(f) for f in args.extra],
                      "holdout": args.holdout, "epochs": args.epochs, "lr": args.lr, "batch_size": args.batch_size,
                      "freeze_encoder": True, "splits": list(args.splits), "train_seeds": list(args.train_seeds)},
           "pool": {"games": len(pool), "trajectories_won": int(sum(ex.labels[-1] == 1.0 for ex in pool.trajectories)),
                    "steps": int(sum(len(ex.labels) for ex in pool.trajectories)),
                    "siblings": int(sum(len(s) for s in pool.siblings))},
           "held_out_seeds": {}, "command": ""}
    key = run_key(run)

    def merge(raw: dict) -> None:
        old = next((r for r in raw["runs"] if run_key(r) == key), None)
        if old is not None:
            run["units"], run["control_units"] = old["units"], old["control_units"]
            run["held_out_seeds"] = old.get("held_out_seeds", {})
            for k in ("splits", "train_seeds"):
                run["config"][k] = sorted(set(run["config"][k]) | set(old["config"][k]))
        run["command"] = canonical_command(args, run["config"]["splits"], run["config"]["train_seeds"])
        for s in args.splits:
            run["held_out_seeds"][str(s)] = [pool.seeds[i] for i in held_out_games(len(pool), args.holdout, s)]
        raw["runs"] = [r for r in raw["runs"] if run_key(r) != key] + [run]
        raw["machine"] = machine() + ", one of them used (nice 15), OMP_NUM_THREADS=1, torch threads 1"

    raw = update_raw(args.raw, merge, empty)
    run = next(r for r in raw["runs"] if run_key(r) == key)
    done = {(u["family"], u["split_seed"], u["seed"]) for u in run["units"]}
    cdone = {(u["family"], u["split_seed"]) for u in run["control_units"]}
    todo = [(s, t, f) for s in args.splits for t in args.train_seeds for f in TRAINED if (f, s, t) not in done]
    ctodo = [(s, f) for s in args.splits for f in CONTROLS if (f, s) not in cdone]
    n_all = len(args.splits) * len(args.train_seeds) * len(TRAINED)
    print(f"pool: {len(pool)} games, {run['pool']['siblings']} siblings; {n_all - len(todo)} of {n_all} critics "
          f"recorded, {len(todo)} to train; {len(ctodo)} control measurements to do", flush=True)
    import torch

    torch.set_num_threads(1)

    def add_control(raw: dict, u: dict) -> None:
        r = next(r for r in raw["runs"] if run_key(r) == key)
        r["control_units"] = [x for x in r["control_units"]
                              if (x["family"], x["split_seed"]) != (u["family"], u["split_seed"])] + [u]

    for s, f in ctodo:
        t0 = time.perf_counter()
        sp = split_pool(pool, args.holdout, s)
        u = {"family": f, "split_seed": s, "seed": None, **measure(control_scorer(f), sp),
             "seconds": round(time.perf_counter() - t0, 1)}
        update_raw(args.raw, lambda raw, u=u: add_control(raw, u), empty)
        print(f"control {f} split {s}: dead-end AUROC {u['auroc_dead_end']}, Brier {u['brier']:.3f}", flush=True)
    cache = FrozenFeatureCache()
    t_start = time.perf_counter()
    for i, (s, t, f) in enumerate(todo, 1):
        t0 = time.perf_counter()
        enc0 = cache.computed
        sp = split_pool(pool, args.holdout, s)
        model = train_family(f, sp, args, t, cache)
        t1 = time.perf_counter()
        m = measure(cache.bind(model), sp)
        u = {"family": f, "split_seed": s, "seed": t, **m,
             "train_examples": model.meta["training"]["examples"], "train_steps": model.meta["training"]["steps"],
             "final_loss": model.meta["training"]["epoch_loss"][-1]}
        if f == "implicit":
            u["implicit_max_abs_diff"] = implicit_check(model, sp)
        u["seconds"] = {"train": round(t1 - t0, 1), "measure": round(time.perf_counter() - t1, 1),
                        "encoded": cache.computed - enc0}
        record_unit(args.raw, key, run_key, u, "family", empty)
        el = time.perf_counter() - t_start
        print(f"[{i}/{len(todo)}] {f} split {s} seed {t}: Brier {u['brier']:.3f}, dead-end AUROC "
              f"{u['auroc_dead_end']:.3f}, AUROC winnable {u['auroc_label_pos']:.3f} (train {t1 - t0:.0f}s, "
              f"{cache.computed - enc0} trajectories encoded; measure {time.perf_counter() - t1:.0f}s; "
              f"~{el / i * (len(todo) - i) / 60:.0f} min left)", flush=True)
    print(f"wrote {args.raw}; render the doc with --render")


# --------------------------------------------------------------------------------------------
# Rendering
# --------------------------------------------------------------------------------------------

def _f(v, d: int = 3) -> str:
    return "n/a" if v is None else f"{v:.{d}f}"


def units_of(run: dict, family: str, metric: str) -> dict[tuple[int, int], float]:
    """``{(split seed, training seed): value}``; a control's per-split value stands for every training seed
    of its split that a trained critic was measured on."""
    if family in CONTROLS:
        per = {u["split_seed"]: u.get(metric) for u in run["control_units"] if u["family"] == family}
        keys = {(u["split_seed"], u["seed"]) for u in run["units"]}
        return {(s, t): per[s] for s, t in keys if per.get(s) is not None}
    return {(u["split_seed"], u["seed"]): u[metric] for u in run["units"]
            if u["family"] == family and u.get(metric) is not None}


def verdict(d: dict, better: int) -> str:
    """Met when both intervals of the paired difference lie on the better side of 0; worse when both lie
    on the other side; else not met (an interval includes 0)."""
    ends = [(d[w]["lo"], d[w]["hi"]) for w in ("units", "splits")]
    if any(lo is None for lo, _ in ends):
        return "not assessed (too few units)"
    if all((lo > 0) if better > 0 else (hi < 0) for lo, hi in ends):
        return "met"
    if all((hi < 0) if better > 0 else (lo > 0) for lo, hi in ends):
        return "**not met** (the other way)"
    return "**not met** (an interval includes 0)"


def versus(d: dict, better: int) -> str:
    ends = [(d[w]["lo"], d[w]["hi"]) for w in ("units", "splits")]
    if any(lo is None for lo, _ in ends):
        return "not assessed (too few units)"
    if all(lo > 0 for lo, _ in ends):
        side = "higher"
    elif all(hi < 0 for _, hi in ends):
        side = "lower"
    else:
        return "no difference shown (an interval includes 0)"
    good = (side == "higher") == (better > 0)
    return f"MC PRM {side} ({'better' if good else 'worse'})"


def render_run(run: dict) -> list[str]:
    c, p = run["config"], run["pool"]
    splits, seeds = c["splits"], c["train_seeds"]
    n_grid = len(splits) * len(seeds)
    out = ["", f"## {p['games']} games, {c['holdout']} held out per split", "",
           f"Pool: {p['games']} games ({p['steps']} trajectory steps, {p['trajectories_won']} trajectories won, "
           f"{p['siblings']} terminal siblings), game seeds {', '.join(c['seeds'])}. Split seeds {splits}, training "
           f"seeds {seeds} ({n_grid} units per trained family). Critics: `MiniLMStepPRM`, frozen encoder, "
           f"{c['epochs']} epochs, lr {c['lr']:g}, batch {c['batch_size']}.", "", "```bash", run["command"], "```", ""]
    out += ["Held-out games per split seed:", ""]
    for s in splits:
        hs = run["held_out_seeds"].get(str(s))
        out.append(f"* split {s}: " + (", ".join(map(str, hs)) if hs else "(not run)"))
    # per-unit rows
    by_unit: dict[tuple[int, int], dict[str, dict]] = {}
    for u in run["units"]:
        by_unit.setdefault((u["split_seed"], u["seed"]), {})[u["family"]] = u
    ctl = {(u["family"], u["split_seed"]): u for u in run["control_units"]}
    cols = " | ".join(METRICS[m][0] for m in UNIT_COLUMNS)
    out += ["", "### Per unit", "",
            f"Held-out games of each unit; the controls have one row per split. Under {CUT}: share of losing / "
            "surviving steps scored under that dead-end cut. *Tuned threshold*: the F1-best threshold on the unit's "
            "training trajectories.", "",
            f"| split seed | training seed | critic | held-out steps (losing, siblings) | {cols} |",
            "|---:|---:|---|---|" + "---:|" * len(UNIT_COLUMNS)]
    missing = []
    for s in splits:
        for f in CONTROLS:
            u = ctl.get((f, s))
            if u is None:
                missing.append((s, "-", f))
                out.append(f"| {s} | - | {NAMES[f]} | (not run) |" + " |" * len(UNIT_COLUMNS))
                continue
            h = u["held_out"]
            out.append(f"| {s} | - | {NAMES[f]} | {h['n_steps']} ({h['n_losing_steps']}, {h['n_siblings']}) | "
                       + " | ".join(_f(u.get(m)) for m in UNIT_COLUMNS) + " |")
        for t in seeds:
            for f in TRAINED:
                u = by_unit.get((s, t), {}).get(f)
                if u is None:
                    missing.append((s, t, f))
                    out.append(f"| {s} | {t} | {NAMES[f]} | (not run) |" + " |" * len(UNIT_COLUMNS))
                    continue
                h = u["held_out"]
                out.append(f"| {s} | {t} | {NAMES[f]} | {h['n_steps']} ({h['n_losing_steps']}, {h['n_siblings']}) | "
                           + " | ".join(_f(u.get(m)) for m in UNIT_COLUMNS) + " |")
    # means
    fams = (*TRAINED, *CONTROLS)
    out += ["", "### Means per family", "",
            "Each cell: the mean, its 95% t interval over the units (n = splits x training seeds), then its 95% t "
            "interval over the split means (n = splits; the mean over training seeds of each split). A control's "
            "per-split value stands for each training seed of its split.", "",
            "| metric | " + " | ".join(NAMES[f] for f in fams) + " |", "|---|" + "---|" * len(fams)]
    for m, (label, better) in METRICS.items():
        arrow = " (higher is better)" if better > 0 else " (lower is better)" if better < 0 else ""
        cells = []
        for f in fams:
            s_ = summary(units_of(run, f, m))
            sp_ = s_["splits"]
            cells.append(fmt_ci(s_["units"]) + ("" if sp_["lo"] is None else f" / [{sp_['lo']:.3f}, {sp_['hi']:.3f}]"))
        out.append(f"| {label}{arrow} | " + " | ".join(cells) + " |")
    n_mc = len(units_of(run, "mc", "brier"))
    # paired differences
    out += ["", "### Paired differences", "",
            "Same split, same training seed (a control's per-split value for each training seed of its split); "
            "mean and 95% t interval over the units, and over the split means below it. Units of one split "
            "share their held-out and training games, so the split interval is the honest one where the split "
            "dominates. \"lower / higher in\" counts the units where the first critic is below / above the second "
            "(in the dead-end AUROC column).", "",
            "| difference | units | lower / higher in | " + " | ".join(METRICS[m][0] for m in DIFF_COLUMNS) + " |",
            "|---|---:|---:|" + "---|" * len(DIFF_COLUMNS)]
    for a, b in PAIRS:
        ds = {m: paired(units_of(run, a, m), units_of(run, b, m)) for m in DIFF_COLUMNS}
        d0 = ds["auroc_dead_end"]
        out.append(f"| {NAMES[a]} - {NAMES[b]} | {d0['units']['n']} | {d0['a_lower']} / {d0['a_higher']} | "
                   + " | ".join(fmt_ci(ds[m]["units"], True) for m in DIFF_COLUMNS) + " |")
        out.append("| (over the split means) | " + f"{d0['splits']['n']} | | "
                   + " | ".join(fmt_ci(ds[m]["splits"], True) for m in DIFF_COLUMNS) + " |")
    # verdicts
    part = "" if n_mc == n_grid and not missing else f" (on the {n_mc} of {n_grid} units measured so far)"
    out += ["", "### Verdicts", "",
            f"A claim is met only if both intervals of its paired difference (over the units and over the split "
            f"means) lie on its side of 0{part}.", ""]
    for a, b, m in CLAIMS:
        label, better = METRICS[m]
        d = paired(units_of(run, a, m), units_of(run, b, m))
        side = "above" if better > 0 else "below"
        out.append(f"* {NAMES[a]}'s {label} {side} the {NAMES[b]}'s: {verdict(d, better)}; {NAMES[a]} - {NAMES[b]} "
                   f"{fmt_ci(d['units'], True)} over the units, {fmt_ci(d['splits'], True)} over the splits.")
    out += ["", "MC PRM against the implicit PRM (no side claimed beforehand):", ""]
    for m in VERSUS:
        label, better = METRICS[m]
        d = paired(units_of(run, "mc", m), units_of(run, "implicit", m))
        out.append(f"* {label}: {versus(d, better)}; MC PRM - implicit PRM {fmt_ci(d['units'], True)} over the "
                   f"units, {fmt_ci(d['splits'], True)} over the splits.")
    diffs = [u["implicit_max_abs_diff"] for u in run["units"] if u.get("implicit_max_abs_diff") is not None]
    if diffs:
        out += ["", f"The implicit PRM's success score is its value model's: largest difference between "
                f"`ImplicitPRM(value model)` and the value model on a held-out trajectory, over the units: "
                f"{max(diffs):.1e}."]
    if missing:
        out += ["", f"Missing: {len(missing)} of {n_grid * len(TRAINED) + len(splits) * len(CONTROLS)} measurements "
                "(split seed, training seed, critic): " + ", ".join(f"({s}, {t}, {f})" for s, t, f in missing)
                + ". Rerun the command above to add them (recorded units are skipped)."]
    secs = [u["seconds"] for u in run["units"] if isinstance(u.get("seconds"), dict)]
    if secs:
        enc = [x["encoded"] for x in secs]
        out += ["", f"Time per trained critic: training {np.median([x['train'] for x in secs]):.0f} s, measuring "
                f"{np.median([x['measure'] for x in secs]):.0f} s (medians over {len(secs)} critics; "
                f"{sum(enc)} trajectories encoded in all, the rest read from the feature cache); "
                f"{sum(x['train'] + x['measure'] for x in secs) / 60:.0f} min in all; the controls "
                f"{sum(u.get('seconds') or 0 for u in run['control_units']):.0f} s in all."]
    return out


def render(raw: dict) -> str:
    """The markdown of ``docs/agents_prm_calibration_splits.md`` from the raw-data file's content."""
    out = [
        "# TextWorld text PRM calibration over game splits",
        "",
        f"Generated by `python -m benchmarks.agents.prm_calibration_splits --render` from "
        f"`{RAW.relative_to(ROOT).as_posix()}`, the raw data the command below measured.",
        "",
        "The calibration of the [agents benchmark](agents_benchmark.md) scores one trained PRM on 16 games. Here",
        "every MC-labelled game (one base-policy trajectory each, with its terminal siblings) is pooled, and",
        "each unit (a split seed and a training seed) holds out games at random, whole with their siblings,",
        "trains each family on the other games with the same training seed, and measures on the held-out",
        "games with `benchmarks/agents/prm_calibration.py`'s `evaluate`:",
        "",
        "* **MC PRM**: trained on the MC labels (the agents benchmark's recipe, siblings included);",
        "* **implicit PRM**: the value model trained on trajectory outcomes only (`train_prm.py",
        "  --outcome-only`), as `ImplicitPRM`; its success score is the value `V_t`;",
        "* **random / constant control**: `RandomCritic` and `ConstantCritic(0.5)`, not trained (one value",
        "  per split).",
        "",
        "Brier and ECE (10 bins) are against the MC soft labels; *winnable* = some rollout won from the step's",
        "state; dead-end AUROC: surviving steps vs losing steps (trajectory steps that end the game lost and",
        "the lost siblings); *losing / surviving under c*: share of those steps scored under the dead-end cut",
        "c; first error: the step that loses the game, predicted as the first step under the threshold",
        "(first-error accuracy and ProcessBench F1 at the cuts, and at the F1-best threshold tuned on the",
        "unit's training trajectories); value order: mean Spearman correlation of the score with the MC labels",
        "inside a trajectory. All splits are of one labelled set of games (the labels' own rollout seed is not",
        "varied).",
    ]
    for run in raw["runs"]:
        out += render_run(run)
    if raw.get("machine"):
        out += ["", measured_on(raw['machine'])]
    return "\n".join(out + [""])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--labels", nargs="+", default=[".cache/textworld/labels96/labels.jsonl",
                                                    ".cache/textworld/labels_cal/labels.jsonl"],
                    help="labels.jsonl files of the pooled games (one trajectory per game)")
    ap.add_argument("--extra", nargs="*", default=[".cache/textworld/labels96/labels_siblings.jsonl",
                                                   ".cache/textworld/labels_cal/labels_siblings.jsonl"],
                    help="labels_siblings.jsonl of the same games, one per --labels file")
    ap.add_argument("--seeds", nargs="+", default=["0-95", "500-515"], help="the game seeds of each --labels file")
    ap.add_argument("--holdout", type=int, default=40, help="games held out per split")
    ap.add_argument("--splits", type=int, nargs="+", default=[0, 1, 2, 3, 4], help="split seeds")
    ap.add_argument("--train-seeds", type=int, nargs="+", default=[0, 1, 2], help="training seeds")
    ap.add_argument("--epochs", type=int, default=150)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--batch-size", type=int, default=2)
    add_doc_arguments(ap, RAW, DOC)
    a = ap.parse_args(argv)
    if render_only(a, render):
        return 0
    measure_grid(a)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
