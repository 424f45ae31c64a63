"""benchmarks/rl/train_potential.py on real FetchPush episodes (scripted and random-action folders):
the checkpoint records the training settings it was given, the held-out metrics per folder and
its own command, HER-relabelled copies are labelled with the spec's progress of the relabelled
state, and arguments it cannot honour are refused with one clear error each."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("gymnasium_robotics")
pytest.importorskip("torch")

from prm_critic.robotics.collection import collect  # noqa: E402


@pytest.fixture(scope="module")
def mod():
    from benchmarks.rl import train_potential

    return train_potential


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    from prm_critic.robotics.labels import label

    root = tmp_path_factory.mktemp("push")
    scripted, rand = root / "push", root / "push_random"
    collect("FetchPush-v4", scripted, episodes=4, seed=0, progress=False)
    collect("FetchPush-v4", rand, episodes=3, seed=100, policy="random", progress=False)
    for f in (scripted, rand):
        label(f, "subgoal", progress=False)
        label(f, "steps_to_success", gamma=0.95, progress=False)
    return scripted, rand


def test_checkpoint_records_its_settings_metrics_and_command(mod, folders, tmp_path, capsys):
    from prm_critic.models.checkpoint import load_state_critic

    out = tmp_path / "crit"
    argv = ["--data", *map(str, folders), "--label", "subgoal", "--relabel", "1", "--epochs", "1", "--lr", "5e-4",
            "--batch-size", "64", "--activation", "tanh", "--hidden", "16,8", "--holdout", "0.5", "--split-seed", "1"]
    assert mod.main(argv + ["--out", str(out)]) == 0
    critic = load_state_critic(out.with_suffix(".json"))
    cfg = critic.meta["train_config"]
    assert (cfg["lr"], cfg["batch_size"], cfg["activation"], list(cfg["hidden"])) == (5e-4, 64, "tanh", [16, 8])
    metrics = json.loads(out.with_name("crit.metrics.json").read_text())
    assert metrics["command"] == "python -m benchmarks.rl.train_potential " + " ".join(argv + ["--out", str(out)])
    per = metrics["metrics"]["per_folder"]
    assert set(per) == {"push", "push_random"} and all(0 <= r["progress_mae"] <= 1 for r in per.values())
    assert critic.meta["data"]["policies"] == ["scripted", "random"]
    # one relabelled copy: twice the training steps of the held-in episodes
    n_train = metrics["metrics"]["n_train_steps"]
    assert n_train % 2 == 0 and n_train + metrics["metrics"]["n_test_steps"] > n_train // 2
    scores = critic.score(np.zeros((3, critic.meta["layout"]["obs_dim"]), np.float32)).progress
    assert scores.shape == (3,) and np.isfinite(scores).all()


def test_relabelled_copies_carry_the_specs_progress_of_the_relabelled_state(mod, folders):
    from prm_critic.robotics.labels import subgoal_evaluator

    table, _, _ = mod.load_union(list(folders), "subgoal")
    out = mod.relabelled_copies(table, 2, seed=0)
    assert len(out) == 3 * len(table)
    copies = out.select(np.arange(len(table), len(out)))
    np.testing.assert_allclose(copies.progress, subgoal_evaluator(table.meta).progress(copies.x), atol=1e-6)
    # the relabelled goal is an achieved goal of a later step of the same episode, so labels change
    base = table.select(np.lexsort((table.t, table.episode)))
    assert np.any(np.abs(copies.progress[:len(table)] - base.progress) > 1e-3)


def test_relabelled_steps_to_success_labels_follow_the_relabelled_goal(mod, folders):
    table, _, _ = mod.load_union(list(folders), "steps_to_success")
    out = mod.relabelled_copies(table, 2, seed=0, gamma=0.95)
    assert len(out) == 3 * len(table)
    base = table.select(np.lexsort((table.t, table.episode)))
    assert np.array_equal(out.success[:len(table)], base.success)  # the stored labels, untouched
    lay = table.layout
    ach, des = lay.slices["achieved_goal"], lay.slices["desired_goal"]
    thr = table.spec.subgoals[-1].threshold
    copies = out.select(np.arange(len(table), len(out)))
    rng = np.random.default_rng(1)
    for i in rng.choice(len(copies), 60, replace=False):  # an independent scan: distance to the new goal
        ep, t = i % len(table), copies.t[i]
        rows = np.flatnonzero((base.episode == base.episode[ep]) & (base.t >= t))
        met = np.linalg.norm(base.next_x[rows][:, ach] - copies.x[i, des], axis=1) < thr
        want = 0.95 ** (base.t[rows][np.argmax(met)] - t) if met.any() else 0.0
        assert copies.success[i] == pytest.approx(want, rel=1e-6), (i, t)
        # HER's goal is an achieved goal at or after the step: some later step meets it
        assert copies.success[i] > 0
    assert np.all((copies.success > 0) & (copies.success <= 1))


def test_relabelling_is_refused_when_the_last_subgoal_is_not_the_tasks_success(mod, folders):
    table, _, _ = mod.load_union(list(folders), "steps_to_success")
    flags = table.extra["step_success"].copy()
    flags[np.argmax(~flags)] = True  # one step flagged as a success the spec's last subgoal does not see
    table.extra["step_success"] = flags
    with pytest.raises(SystemExit, match=r"the spec's last subgoal 'object_at_goal' disagrees with the stored success "
                                         r"flag on 1 of \d+ steps"):
        mod.relabelled_copies(table, 1, seed=0, gamma=0.95)


def test_steps_to_success_critic_records_its_label_discount(mod, folders, tmp_path):
    out = tmp_path / "sts"
    assert mod.main(["--data", *map(str, folders), "--label", "steps_to_success", "--relabel", "1", "--epochs", "1",
                     "--hidden", "8", "--holdout", "0.5", "--split-seed", "1", "--out", str(out)]) == 0
    metrics = json.loads(out.with_name("sts.metrics.json").read_text())["metrics"]
    assert metrics["label_gamma"] == 0.95 and metrics["relabel"] == 1
    assert all(0 <= r["label_mae"] <= 1 for r in metrics["per_folder"].values())


def test_folders_labelled_with_different_discounts_are_refused(mod, folders, tmp_path):
    import shutil

    from prm_critic.robotics.labels import label

    other = tmp_path / "push_random"
    shutil.copytree(folders[1], other)
    shutil.rmtree(other / "labels")
    label(other, "steps_to_success", gamma=0.9, progress=False)
    with pytest.raises(SystemExit, match=r"--data: the steps_to_success labels were written with different discounts"):
        mod.main(["--data", str(folders[0]), str(other), "--label", "steps_to_success", "--relabel", "1",
                  "--out", str(tmp_path / "c"), "--epochs", "1", "--holdout", "0.5", "--split-seed", "1"])


@pytest.mark.parametrize("extra, match", [
    (["--label", "mc", "--relabel", "2"], r"--relabel: expected an integer >= 0, with --label subgoal or steps_to_success"),
    (["--delta-weight", "-1"], r"--delta-weight: expected a number >= 0"),
    (["--lr", "0"], r"lr: expected"),
])
def test_arguments_it_cannot_honour_are_refused(mod, folders, tmp_path, extra, match):
    with pytest.raises((SystemExit, ValueError), match=match):
        mod.main(["--data", *map(str, folders), "--out", str(tmp_path / "c"), "--epochs", "1", *extra])


def test_a_folder_without_held_out_episodes_is_refused_not_scored_nan(mod, folders, tmp_path):
    # 0.34 of 7 episodes, drawn over both folders, holds out none of the scripted folder's under split seed 0
    with pytest.raises(SystemExit, match=r"--holdout 0.34 \(--split-seed 0\): no held-out episode of \[.*push'\]"):
        mod.main(["--data", *map(str, folders), "--out", str(tmp_path / "c"), "--epochs", "1", "--holdout", "0.34"])
    assert not (tmp_path / "c.json").exists()


def test_a_folder_that_is_not_collect_data_is_refused(mod, tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(SystemExit, match=r"expected a `prm-critic collect` folder, got .*empty.* \(no meta.json\)"):
        mod.main(["--data", str(tmp_path / "empty"), "--out", str(tmp_path / "c")])


def test_recipe_leaves_out_the_training_seed_and_the_measured_metrics(mod):
    meta = {"task": "FetchPush-v4", "spec": {"name": "x"}, "layout": {}, "label_family": "subgoal", "maze": None,
            "data": {"folders": ["push"], "seeds": [0]},
            "train_config": {"seed": 0, "lr": 1e-3, "epochs": 20},
            "metrics": {"relabel": 4, "per_folder": {"push": {"progress_mae": 0.02}}, "n_test_steps": 10}}

    def with_(**changes):
        m = json.loads(json.dumps(meta))
        for path, v in changes.items():
            *head, last = path.split("__")
            d = m
            for k in head:
                d = d[k]
            d[last] = v
        return mod.recipe(m)

    r = mod.recipe(meta)
    assert r == with_(train_config__seed=7) == with_(metrics__per_folder={}) == with_(metrics__n_test_steps=3)
    # a checkpoint from before --delta-weight was trained without the smoothness term
    assert r == with_(metrics__delta_weight=0.0) == with_(metrics__delta_weight=0, metrics__delta_epochs=99)
    for change in ({"train_config__lr": 3e-4}, {"metrics__relabel": 8}, {"metrics__delta_weight": 1.0},
                   {"data__seeds": [1]}, {"label_family": "mc"}, {"metrics__label_gamma": 0.9}):
        if change == {"metrics__delta_weight": 1.0}:
            change = {**change, "metrics__delta_epochs": 10}
        assert with_(**change) != r, change
    assert mod.recipe({"train_config": {"seed": 0}, "metrics": {"auroc_success": 0.9}}) is None  # not this script's
