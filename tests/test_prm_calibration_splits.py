"""The TextWorld PRM calibration over game splits (benchmarks/agents/prm_calibration_splits.py): games are
held out whole with their siblings, the split seed and the training seed are independent, the doc's
verdicts follow the intervals, and a tiny grid runs, resumes and renders."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from benchmarks.agents import prm_calibration_splits as pcs
from prm_critic.text.trl_format import StepwiseExample


def synthetic(n_games: int, seed: int = 0):
    """``n_games`` games with distinct prompts: a trajectory each (lost, won or neither, MC-like labels),
    and 0-2 terminal siblings (a trajectory prefix and a step that loses)."""
    r = random.Random(seed)
    traj, sibs = [], []
    for g in range(n_games):
        prompt = f"Game {g}: cook the {r.choice(['apple', 'egg', 'carrot'])} and eat it."
        n = r.randint(2, 4)
        kind = g % 3  # 0 lost, 1 won, 2 ran out of steps
        comps = [f"take item {i} in game {g}\nresult: you take it." for i in range(n - 1)]
        comps.append("eat raw meat\nresult: You lost" if kind == 0 else
                     "eat the meal\nresult: You won" if kind == 1 else "look\nresult: nothing happens")
        labels = [round(r.random() * (0.2 if kind == 0 else 0.9), 2) for _ in range(n - 1)]
        labels.append(1.0 if kind == 1 else 0.0)
        traj.append(StepwiseExample(prompt, comps, labels))
        for k in range(g % 3):
            t = r.randint(0, n - 1)
            sibs.append(StepwiseExample(prompt, comps[:t] + [f"eat the knife {k}\nresult: You lost"], labels[:t] + [0.0]))
    return traj, sibs


def test_games_are_held_out_whole_with_their_siblings():
    traj, sibs = synthetic(12)
    pool = pcs.build_pool(traj, list(range(100, 112)), sibs)
    assert sum(map(len, pool.siblings)) == len(sibs)
    for s in range(5):
        sp = pcs.split_pool(pool, 4, s)
        assert len(sp.held) == 4 == len(sp.test_traj) and len(sp.train_traj) == 8
        test_p, train_p = {e.prompt for e in sp.test_traj}, {e.prompt for e in sp.train_traj}
        assert not test_p & train_p and len(test_p | train_p) == 12  # every game on exactly one side
        assert {e.prompt for e in sp.test_sib} <= test_p and {e.prompt for e in sp.train_sib} <= train_p
        assert len(sp.test_sib) + len(sp.train_sib) == len(sibs)  # every sibling follows its game
        assert sp.held == sorted(pool.trajectories.index(e) for e in sp.test_traj)
    # the split is a function of the split seed alone; different seeds hold out different games
    assert pcs.held_out_games(112, 40, 3) == pcs.held_out_games(112, 40, 3)
    assert len({tuple(pcs.held_out_games(112, 40, s)) for s in range(5)}) == 5
    with pytest.raises(ValueError, match=r"holdout: expected an int in \[1, 11\], got 12"):
        pcs.split_pool(pool, 12, 0)


def test_split_seed_and_training_seed_are_independent():
    import argparse

    args = argparse.Namespace(epochs=3, batch_size=2, lr=3e-3)
    traj, sibs = synthetic(10)
    pool = pcs.build_pool(traj, list(range(10)), sibs)
    # the training seed sets the critics' TextTrainConfig.seed only; the split takes no training seed
    assert [pcs.train_config(args, t).seed for t in (0, 1, 2)] == [0, 1, 2]
    assert pcs.train_config(args, 1) == pcs.train_config(args, 1)
    held = {s: pcs.split_pool(pool, 3, s).held for s in range(4)}
    assert held == {s: pcs.split_pool(pool, 3, s).held for s in range(4)}
    # both families of a unit train on the same games
    sp = pcs.split_pool(pool, 3, 0)
    mc, imp = pcs.fit_examples("mc", sp), pcs.fit_examples("implicit", sp)
    train_p = {e.prompt for e in sp.train_traj}
    assert {e.prompt for e in mc} == {e.prompt for e in imp} == train_p
    assert len(imp) == len(mc) + len(sp.train_traj)  # plus one prompt-only example per training game
    assert all(set(e.labels) <= {0.0, 1.0} for e in imp)


def test_pool_refuses_what_cannot_be_matched():
    traj, sibs = synthetic(4)
    with pytest.raises(SystemExit, match="expected one per seed"):
        pcs.build_pool(traj, [0, 1, 2], sibs)
    with pytest.raises(SystemExit, match="share one prompt"):
        pcs.build_pool(traj + [traj[0]], [0, 1, 2, 3, 4], sibs)
    with pytest.raises(SystemExit, match="sibling example 0 is not from a game"):
        pcs.build_pool(traj, [0, 1, 2, 3], [StepwiseExample("other game", ["x"], [0.0])])


def _diff(lo, hi):
    return {"units": {"lo": lo, "hi": hi}, "splits": {"lo": lo, "hi": hi}}


def test_verdicts_follow_both_intervals():
    assert pcs.verdict(_diff(0.01, 0.2), +1) == "met"
    assert pcs.verdict(_diff(-0.2, -0.01), -1) == "met"
    assert pcs.verdict({"units": {"lo": 0.01, "hi": 0.2}, "splits": {"lo": -0.01, "hi": 0.2}}, +1).startswith(
        "**not met** (an interval")
    assert pcs.verdict(_diff(-0.2, -0.01), +1) == "**not met** (the other way)"
    assert pcs.verdict(_diff(None, None), +1).startswith("not assessed")
    assert pcs.versus(_diff(0.01, 0.2), -1) == "MC PRM higher (worse)"
    assert pcs.versus(_diff(-0.3, 0.2), +1).startswith("no difference shown")


def test_tiny_grid_runs_resumes_and_renders(tmp_path, capsys):
    pytest.importorskip("torch")
    from prm_critic.text.trl_format import write_stepwise_jsonl

    traj, sibs = synthetic(8, seed=1)
    files = []
    for i, (lo, hi) in enumerate(((0, 5), (5, 8))):
        lab, ext = tmp_path / f"labels{i}.jsonl", tmp_path / f"sib{i}.jsonl"
        write_stepwise_jsonl(lab, traj[lo:hi])
        write_stepwise_jsonl(ext, [s for s in sibs if s.prompt in {e.prompt for e in traj[lo:hi]}])
        files.append((lab, ext))
    raw, md = tmp_path / "raw.json", tmp_path / "doc.md"
    base = ["--labels", *(str(f) for f, _ in files), "--extra", *(str(e) for _, e in files), "--seeds", "0-4",
            "100-102", "--holdout", "3", "--epochs", "2", "--raw", str(raw)]
    assert pcs.main([*base, "--splits", "0", "--train-seeds", "0", "1"]) == 0
    data = json.loads(raw.read_text())
    run = data["runs"][0]
    assert sorted((u["family"], u["seed"]) for u in run["units"]) == [("implicit", 0), ("implicit", 1), ("mc", 0), ("mc", 1)]
    assert sorted(u["family"] for u in run["control_units"]) == ["constant", "random"]
    # the second training seed and the second family read every trajectory from the feature cache
    enc = {(u["family"], u["seed"]): u["seconds"]["encoded"] for u in run["units"]}
    assert enc[("mc", 1)] == 0 and enc[("implicit", 1)] == 0
    assert all(u["implicit_max_abs_diff"] < 1e-4 for u in run["units"] if u["family"] == "implicit")
    held = [s for s in run["held_out_seeds"]["0"]]
    assert len(held) == 3 and set(held) <= {0, 1, 2, 3, 4, 100, 101, 102}
    # a rerun with one more split trains only that split's critics
    assert pcs.main([*base, "--splits", "0", "1", "--train-seeds", "0", "1"]) == 0
    assert "4 of 8 critics recorded, 4 to train" in capsys.readouterr().out
    assert pcs.main(["--render", "--raw", str(raw), "--md", str(md)]) == 0
    text = md.read_text()
    assert "### Verdicts" in text and "MC PRM - implicit PRM" in text and "Missing" not in text
    assert "--splits 0 1 --train-seeds 0 1" in text
    # a missing unit is marked
    run = json.loads(raw.read_text())["runs"][0]
    run["units"] = [u for u in run["units"] if not (u["family"] == "mc" and u["split_seed"] == 1 and u["seed"] == 1)]
    raw.write_text(json.dumps({"runs": [run]}))
    pcs.main(["--render", "--raw", str(raw), "--md", str(md)])
    assert "Missing: 1 of 12 measurements (split seed, training seed, critic): (1, 1, mc)" in md.read_text()
    assert np.isfinite([u["brier"] for u in run["units"]]).all()
