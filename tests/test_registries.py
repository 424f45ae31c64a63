"""Label-family and controller registries: registration, refusals, and the CLI and library reading them."""

import json
from pathlib import Path

import numpy as np
import pytest

from prm_critic.cli import build_parser
from prm_critic.robotics.families import (
    OPTION_DEFAULTS,
    LabelFamily,
    LabelJob,
    families_taking,
    get_label_family,
    label_families,
    register_label_family,
    unregister_label_family,
)
from prm_critic.validate import ArgumentError


def _choices(argv_prefix, dest):
    """The argparse choices of option ``dest`` of the subcommand ``argv_prefix[0]``."""
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices[argv_prefix[0]]
    return tuple(next(a for a in sub._actions if a.dest == dest).choices)


def _constant_run(job: LabelJob) -> Path:
    """A user family: every step labelled ``0.5``."""
    from prm_critic.robotics.collection import load_shard
    from prm_critic.robotics.labels import atomic_savez, atomic_write_json, shard_files

    lab_dir = job.out_dir / "labels" / job.family
    for f in shard_files(job.out_dir):
        n = len(load_shard(f, ("t",))["t"])
        atomic_savez(lab_dir / f.name, label=np.full(n, 0.5, dtype=np.float32), mask=np.ones(n, dtype=bool))
    atomic_write_json(job.out_dir / "labels" / f"{job.family}.json", {"family": job.family, "seed": job.options["seed"]})
    return lab_dir


@pytest.fixture
def constant_family():
    fam = register_label_family(LabelFamily("constant", _constant_run, ("seed",), description="0.5 everywhere"))
    try:
        yield fam
    finally:
        unregister_label_family("constant")


def test_cli_choices_are_the_registered_families(constant_family):
    names = label_families()
    assert {"subgoal", "mc", "mc_bisect", "outcome", "constant"} <= set(names)
    assert _choices(["label"], "family") == names
    assert _choices(["train-critic"], "label") == names
    for option in OPTION_DEFAULTS:  # every option is taken by some family, and the help names them
        assert families_taking(option), option
    assert families_taking("seed")[-1] == "constant"


def test_unregistered_family_leaves_the_cli():
    fam = register_label_family(LabelFamily("passing", _constant_run))
    assert "passing" in _choices(["label"], "family")
    assert unregister_label_family("passing") is fam
    assert "passing" not in _choices(["label"], "family") and "passing" not in label_families()


def test_duplicate_and_malformed_label_families_are_refused():
    with pytest.raises(ArgumentError, match=r"family: a label family named 'mc' is already registered; pass replace=True"):
        register_label_family(LabelFamily("mc", _constant_run))
    assert get_label_family("mc").snapshots  # the built-in is still there
    with pytest.raises(ArgumentError, match=r"family: expected a prm_critic.robotics.families.LabelFamily, got dict"):
        register_label_family({"name": "x", "run": _constant_run})
    with pytest.raises(ArgumentError, match=r"name: expected a non-empty string of letters, digits and '_'.*got 'a/b'"):
        LabelFamily("a/b", _constant_run)
    with pytest.raises(ArgumentError, match=r"name: .* got ''"):
        LabelFamily("", _constant_run)
    with pytest.raises(ArgumentError, match=r"run: expected a callable run\(job\) -> Path for label family 'x', got 'nope'"):
        LabelFamily("x", "nope")
    with pytest.raises(ArgumentError, match=r"options of label family 'x': expected one of .* got 'stide'; did you mean 'stride'"):
        LabelFamily("x", _constant_run, ("stide",))
    with pytest.raises(ArgumentError, match=r"options: expected a tuple of option names for label family 'x', got 'k'"):
        LabelFamily("x", _constant_run, "k")
    with pytest.raises(ArgumentError, match=r"options: label family 'x' lists an option twice"):
        LabelFamily("x", _constant_run, ("k", "k"))
    with pytest.raises(ArgumentError, match=r"snapshots: expected True or False, got 1"):
        LabelFamily("x", _constant_run, snapshots=1)
    with pytest.raises(ArgumentError, match=r"family: expected one of .* got 'mcc'; did you mean 'mc'"):
        unregister_label_family("mcc")
    assert "x" not in label_families()


def test_unknown_family_names_a_near_miss(tmp_path):
    from prm_critic.robotics.dataset import load_steps
    from prm_critic.robotics.labels import label, label_params

    pytest.importorskip("gymnasium_robotics")
    for call in (lambda: label(tmp_path, "outcom"), lambda: load_steps(tmp_path, "outcom"),
                 lambda: label_params("outcom")):
        with pytest.raises(ArgumentError, match=r"family: expected one of \[.*'outcome'.*\], got 'outcom'; "
                                                r"did you mean 'outcome'\?"):
            call()


def test_built_in_records_are_unchanged():
    from prm_critic.robotics import labels

    pytest.importorskip("gymnasium_robotics")
    assert labels.label_params("subgoal") == {"family": "subgoal"}
    assert labels.label_params("outcome", gamma=0.9) == {"family": "outcome", "gamma": 0.9}
    assert labels.label_params("mc", k=4, stride=2, seed=3) == {
        "family": "mc", "k": 4, "stride": 2, "seed": 3, "rollout_policy": "scripted"}
    assert labels.label_params("mc_bisect", k=2, resolution=3)["resolution"] == 3
    with pytest.raises(ValueError, match=r"stride: family 'mc_bisect' chooses the states"):
        labels.label_params("mc_bisect", stride=2)
    with pytest.raises(ValueError, match=r"gamma: expected a number in \(0, 1\], got 1.5"):
        labels.label_params("outcome", gamma=1.5)


def test_a_registered_family_labels_through_the_library_and_the_cli(tmp_path, constant_family, capsys):
    pytest.importorskip("gymnasium_robotics")
    from prm_critic.cli import main
    from prm_critic.robotics.collection import collect
    from prm_critic.robotics.dataset import load_steps
    from prm_critic.robotics.labels import label

    collect("PointMaze_UMaze-v3", tmp_path, episodes=2, shard_size=1, max_episode_steps=10, progress=False)
    with pytest.raises(ArgumentError, match=r"gamma: family 'constant' takes no gamma \(got 0.9\); it is an option of 'outcome'"):
        label(tmp_path, "constant", gamma=0.9)
    out = label(tmp_path, "constant", seed=7, progress=False)
    assert out == tmp_path / "labels" / "constant"
    assert json.loads((tmp_path / "labels" / "constant.json").read_text()) == {"family": "constant", "seed": 7}
    tab = load_steps(tmp_path, "constant")
    assert len(tab) == 20 and np.all(tab.success == 0.5)
    assert main(["label", "--data", str(tmp_path), "--family", "constant", "--no-progress"]) == 0
    assert "20 of 20 steps labelled, mean label 0.500" in capsys.readouterr().out


# ------------------------------------------------------------------------------------ controllers
def test_every_built_in_spec_names_a_registered_controller():
    from prm_critic.robotics import list_builtin_specs, load_spec
    from prm_critic.robotics.controllers import CONTROLLERS, Controller

    names = list_builtin_specs()
    assert names
    for name in names:
        assert load_spec(name).controller["name"] in CONTROLLERS, name
    for name, cls in CONTROLLERS.items():
        assert issubclass(cls, Controller), name


def test_controller_registration():
    pytest.importorskip("gymnasium_robotics")
    from prm_critic.robotics.controllers import (
        CONTROLLERS, Controller, FetchReachController, make_controller, register_controller, unregister_controller,
    )
    from prm_critic.robotics.make import make_env

    class Still(Controller):
        def clean_action(self, obs):
            return np.zeros(self.shape)

    env = make_env("FetchReach-v4")
    try:
        with pytest.raises(ArgumentError, match=r"controller: expected one of .* got 'still'"):
            make_controller("FetchReach-v4", env, name="still")
        assert register_controller("still", Still) is Still
        ctrl = make_controller("FetchReach-v4", env, name="still")
        obs, _ = env.reset(seed=0)
        ctrl.reset(obs, np.random.default_rng(0))
        assert isinstance(ctrl, Still) and np.all(ctrl.act(obs) == 0)
        with pytest.raises(ArgumentError, match=r"name: a controller named 'still' is already registered .*replace=True"):
            register_controller("still", FetchReachController)
        with pytest.raises(ArgumentError, match=r"name: a controller named 'fetch_reach' is already registered"):
            register_controller("fetch_reach", Still)
        assert CONTROLLERS["fetch_reach"] is FetchReachController
        with pytest.raises(ArgumentError, match=r"name: expected a non-empty controller name string, got ''"):
            register_controller("", Still)
        with pytest.raises(ArgumentError, match=r"cls: expected a controller class or factory .* got 3"):
            register_controller("three", 3)
        with pytest.raises(ArgumentError, match=r"replace: expected True or False, got 'yes'"):
            register_controller("still", Still, replace="yes")
        assert unregister_controller("still") is Still
        with pytest.raises(ArgumentError, match=r"controller: expected one of .* got 'stil'"):
            unregister_controller("stil")
    finally:
        CONTROLLERS.pop("still", None)
        env.close()
