"""The statistics of the critic-quality benchmarks (``benchmarks/critic_splits.py``) and the goal verdicts
of ``benchmarks/mc_bisect.py``: intervals from the paired differences, both over the units and over the
split means, and a parity goal met only when both intervals clear it."""

import json

import numpy as np
import pytest

pytest.importorskip("scipy")

from benchmarks import critic_splits, mc_bisect
from benchmarks.report_io import render_file
from benchmarks.stats import t_interval


def test_t_interval_matches_scipy():
    from scipy import stats

    v = [0.91, 0.93, 0.88, 0.9, 0.95]
    s = t_interval(v)
    lo, hi = stats.t.interval(0.95, len(v) - 1, loc=np.mean(v), scale=stats.sem(v))
    assert s["n"] == 5 and s["mean"] == pytest.approx(np.mean(v))
    assert (s["lo"], s["hi"]) == (pytest.approx(lo), pytest.approx(hi))
    assert t_interval([0.5])["lo"] is None and t_interval([])["mean"] is None
    assert critic_splits.fmt_ci(t_interval([0.1, 0.3]), signed=True).startswith("+0.200 [")


def test_paired_differences_are_per_unit_and_per_split():
    a = {(s, t): 0.9 + 0.01 * s + 0.001 * t for s in range(5) for t in range(3)}
    b = {k: v - 0.02 for k, v in a.items()}
    b[(4, 2)] = a[(4, 2)] + 0.01  # one unit where a is lower
    del b[(0, 0)]  # a unit missing on one side is left out of the pairs
    d = critic_splits.paired(a, b)
    assert d["units"]["n"] == 14 and d["splits"]["n"] == 5
    assert (d["a_lower"], d["a_higher"]) == (1, 13)
    diffs = [a[k] - b[k] for k in sorted(set(a) & set(b))]
    assert d["units"]["mean"] == pytest.approx(np.mean(diffs))
    # the split interval is over the 5 split means, so it is wider than the 14-unit one here
    assert d["splits"]["hi"] - d["splits"]["lo"] > d["units"]["hi"] - d["units"]["lo"]


def _run(gap: float, spread: float, units_missing: int = 0) -> dict:
    rng = np.random.default_rng(0)
    units = []
    for s in range(5):
        split_effect = rng.normal(0, 0.03)
        for t in range(3):
            base = 0.85 + split_effect + rng.normal(0, 0.005)
            units.append({"labels": "mc", "split_seed": s, "seed": t, "auroc": base, "auroc_early": base,
                          "test_episodes": 50, "test_success": 23})
            d = gap + rng.normal(0, spread)
            units.append({"labels": "mc_bisect", "split_seed": s, "seed": t, "auroc": base + d, "auroc_early": base,
                          "test_episodes": 50, "test_success": 23})
    units = units[: len(units) - 2 * units_missing]
    lab = {"estimated_states": 10, "rollouts": 80, "zero_episodes": 0, "zero_episodes_dense_positive": 0,
           "mae_vs_dense": 0.1}
    return {"task": "T", "episodes": 200, "max_episode_steps": 150, "steps": 1000, "success_rate": 0.5,
            "test_episodes": 50, "command": "python -m benchmarks.mc_bisect",
            "config": {"k": 8, "stride": 2, "resolution": 1, "threshold": 0.0, "min_estimates": [2], "epochs": 20,
                       "hidden": [256, 256], "pairwise_weight": 0.0, "holdout": 0.25, "data_seed": 0,
                       "splits": [0, 1, 2, 3, 4], "seeds": [0, 1, 2]},
            "labels": {"mc": {**lab, "rollout_steps": 1000}, "mc_bisect": {**lab, "rollout_steps": 100}},
            "units": units}


@pytest.mark.parametrize("gap,spread,verdict", [
    (0.0, 0.001, "Goal met"),  # both intervals within -0.01
    (-0.03, 0.001, "Goal **not met**"),  # clearly lower
    (0.0, 0.05, "Goal **not met**"),  # a mean difference of about 0 whose interval reaches below -0.01
])
def test_mc_bisect_parity_verdict_follows_the_intervals(gap, spread, verdict):
    text = mc_bisect.render({"runs": [_run(gap, spread)], "machine": "test"})
    line = next(x for x in text.splitlines() if x.startswith("* mc_bisect:"))
    assert verdict in line, line
    assert "| 4 | 2 | 50 (23) |" in text  # one row per unit


def test_an_incomplete_grid_is_not_assessed_and_names_what_is_missing(tmp_path):
    text = mc_bisect.render({"runs": [_run(0.0, 0.001, units_missing=2)], "machine": "test"})
    assert "not assessed (grid incomplete)" in text
    assert "Missing: 4 of 30 critics" in text and "(4, 2, mc_bisect)" in text
    raw = tmp_path / "raw.json"
    raw.write_text(json.dumps({"runs": [_run(0.0, 0.001)]}))
    out = render_file(mc_bisect.render, raw, tmp_path / "doc.md")
    assert "Goal met" in out.read_text()


def test_a_recorded_unit_replaces_its_earlier_record_and_a_finished_critic_is_read_back(tmp_path):
    raw = tmp_path / "raw.json"
    empty = lambda: {"runs": [{"task": "T", "units": []}]}  # noqa: E731
    key_of = lambda r: r["task"]  # noqa: E731
    for auroc in (0.5, 0.7):  # the same unit twice: the second record replaces the first
        critic_splits.record_unit(raw, "T", key_of, {"labels": "mc", "split_seed": 1, "seed": 2, "auroc": auroc},
                                  "labels", empty)
    critic_splits.record_unit(raw, "T", key_of, {"labels": "mc", "split_seed": 1, "seed": 0, "auroc": 0.6},
                              "labels", empty)
    units = json.loads(raw.read_text())["runs"][0]["units"]
    assert sorted((u["seed"], u["auroc"]) for u in units) == [(0, 0.6), (2, 0.7)]
    # a critic whose checkpoint and metrics are on disk is read back, not trained again (no data needed)
    ckpt = tmp_path / "mc_split1_seed2"
    ckpt.with_suffix(".json").write_text("{}")
    ckpt.with_name(ckpt.name + ".metrics.json").write_text(json.dumps({"metrics": {"auroc_success": 0.8}}))
    args = type("A", (), {"epochs": 1, "pairwise_weight": 0.0, "holdout": 0.2})()
    assert critic_splits.train_unit(tmp_path / "no_data", "mc", ckpt, args, 1, 2) == {"auroc_success": 0.8}
