"""Statistics of critic-quality benchmarks run over episode splits x training seeds.

A *unit* is one trained critic: a held-out episode split (its split seed) and a training seed
(weight init, batch order). ``benchmarks/mc_bisect.py`` and ``benchmarks/critic_label_families.py``
train one critic per label family and unit, on the same episodes, so two families are compared unit
by unit (paired: same training episodes, same held-out episodes, same training seed).

Two 95% intervals, both Student t:

* over the units (``n = splits x seeds`` values, ``n - 1`` degrees of freedom), the pairing asked
  for by split x seed;
* over the splits (the mean over training seeds of each split, ``splits - 1`` degrees of freedom):
  critics of the same split share their held-out episodes, so their results are not independent;
  this interval is the wider, honest one when the split, not the initialisation, dominates.

Resumable runs: :func:`update_raw` rewrites the raw-data file atomically after every unit, so a killed
run loses at most the unit in progress and a rerun skips the units already recorded.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Callable

import numpy as np

from benchmarks.report_io import write_json
from benchmarks.stats import t_interval

__all__ = ["summary", "paired", "update_raw", "fmt_ci", "data_dir", "add_grid_arguments"]


def _by_split(units: dict[tuple[int, int], float]) -> list[float]:
    splits = sorted({s for s, _ in units})
    return [float(np.mean([v for (s2, _), v in units.items() if s2 == s])) for s in splits]


def summary(units: dict[tuple[int, int], float]) -> dict[str, Any]:
    """Mean of one family's ``{(split seed, training seed): value}`` with both intervals (``units``, ``splits``)."""
    return {"units": t_interval(list(units.values())), "splits": t_interval(_by_split(units))}


def paired(a: dict[tuple[int, int], float], b: dict[tuple[int, int], float]) -> dict[str, Any]:
    """``a - b`` unit by unit over the units both hold, with both intervals (``units``, ``splits``) and the
    number of units where ``a`` is lower (``a_lower``) and higher (``a_higher``)."""
    keys = sorted(set(a) & set(b))
    d = {k: a[k] - b[k] for k in keys}
    return {"units": t_interval(list(d.values())), "splits": t_interval(_by_split(d)),
            "a_lower": sum(v < 0 for v in d.values()), "a_higher": sum(v > 0 for v in d.values())}


def fmt_ci(s: dict[str, Any], signed: bool = False) -> str:
    """``0.912 [0.901, 0.923]`` (``+0.012 [...]`` when ``signed``); ``n/a`` without a mean."""
    if s["mean"] is None:
        return "n/a"
    f = "{:+.3f}" if signed else "{:.3f}"
    if s["lo"] is None:
        return f.format(s["mean"])
    return f"{f.format(s['mean'])} [{f.format(s['lo'])}, {f.format(s['hi'])}]"


def update_raw(path: Path, change: Callable[[dict], None], empty: Callable[[], dict]) -> dict:
    """Read the raw-data file at ``path`` (``empty()`` when absent), apply ``change`` to it and write it back
    atomically; returns the new content."""

    raw = json.loads(Path(path).read_text()) if Path(path).exists() else empty()
    change(raw)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    write_json(Path(path), raw, indent=2)
    return raw


def data_dir(out: "str | Path", task: str, episodes: int, spec: "str | None" = None) -> Path:
    """The folder of one collected episode set: ``OUT/TASK/data_<episodes>`` (``_<spec file stem>`` added for
    a spec other than the task's built-in one). Both critic-quality benchmarks use it, so run with the same
    ``--out`` they share the episodes and the dense ``mc`` labels; the episode count in the name keeps a
    run with more episodes from extending (and silently changing) another run's set."""
    name = f"data_{int(episodes)}" + ("" if spec is None else f"_{Path(spec).stem}")
    return Path(out) / task / name


def add_grid_arguments(ap: argparse.ArgumentParser, *, epochs: int, pairwise_weight: float, data_seed: str) -> None:
    """The options of a grid of critics over held-out splits x training seeds: ``--splits``, ``--seeds``,
    ``--holdout`` (the share of episodes held out), the critics' ``--epochs`` and ``--pairwise-weight``,
    and ``--data-seed`` (``data_seed``: what it seeds)."""
    ap.add_argument("--splits", type=int, nargs="+", default=[0, 1, 2, 3, 4], help="split seeds (held-out episodes)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="training seeds (critic init, batches)")
    ap.add_argument("--holdout", type=float, default=0.25, help="share of the episodes held out per split")
    ap.add_argument("--epochs", type=int, default=epochs, help="critic training epochs")
    ap.add_argument("--pairwise-weight", type=float, default=pairwise_weight,
                    help=f"pairwise ranking weight of the critics (default {pairwise_weight})")
    ap.add_argument("--data-seed", type=int, default=0, help=data_seed)


def train_unit(data: "str | Path", family: str, ckpt: Path, args: Any, split_seed: int, seed: int) -> dict[str, Any]:
    """The held-out metrics of one grid unit's critic (``family`` labels of ``data``, split ``split_seed``,
    training seed ``seed``; ``args.epochs``, ``args.pairwise_weight``, ``args.holdout``): read back when
    its checkpoint and metrics are on disk (a rerun resumes), else trained now."""
    from prm_critic.models.pipeline import train_critic_from_data
    from prm_critic.models.train import TrainConfig

    mpath = ckpt.with_name(ckpt.name + ".metrics.json")
    if mpath.exists() and ckpt.with_suffix(".json").exists():
        return json.loads(mpath.read_text())["metrics"]
    cfg = TrainConfig(epochs=args.epochs, seed=seed, pairwise_weight=args.pairwise_weight, num_threads=1)
    return train_critic_from_data(data, family, ckpt, config=cfg, holdout=args.holdout, split_seed=split_seed,
                                  progress_bar=False)["metrics"]


def record_unit(raw_path: Path, key: Any, run_key: Callable[[dict], Any], unit: dict[str, Any], name_field: str,
                empty: Callable[[], dict]) -> None:
    """Store ``unit`` in the run ``key`` of the raw data at once (atomically), replacing an earlier
    record of the same ``(name_field, split_seed, seed)``."""
    ident = (unit[name_field], unit["split_seed"], unit["seed"])

    def add(raw: dict) -> None:
        r = next(r for r in raw["runs"] if run_key(r) == key)
        r["units"] = [u for u in r["units"] if (u[name_field], u["split_seed"], u["seed"]) != ident] + [unit]

    update_raw(raw_path, add, empty)
