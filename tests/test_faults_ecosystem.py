"""Fitting the ecosystem (reliability item 38): an install hint that works where prm-critic is
installed, the wrong kind of env given to a vector shaper, a collect run into a folder of other
settings, and Ctrl-C during a command. Each is met with one clear answer.

The distribution metadata in the install test is FAKE (``install_helpers.FakeDistribution``): an editable install
of a checkout folder made for the test.
"""

from __future__ import annotations

import re
import sys

import numpy as np
import pytest
from install_helpers import fake_checkout, fake_install

from faults import correct, loud
from prm_critic import ConstantCritic
from prm_critic._optional import install_hint, require

pytestmark = pytest.mark.fault

ITEM = 38


def test_missing_extra_names_the_install_of_this_checkout(monkeypatch, tmp_path):
    root = fake_checkout(tmp_path)
    fake_install(monkeypatch, {"url": root.as_uri(), "dir_info": {"editable": True}})
    monkeypatch.setitem(sys.modules, "sbx", None)  # as if sbx were not installed
    hint = install_hint("sbx")
    assert hint.startswith(f"pip install -c '{root}/constraints-cpu.txt' -e '{root}[sbx]'")
    with loud(ITEM, "a missing optional dependency (sbx) in an editable install of a checkout (fake metadata)",
              ImportError, match=r"optional dependency 'sbx' for this feature \(the 'sbx' extra\); install it with: "
                                 + re.escape(hint)):
        require("sbx")


def test_install_command_without_extras_is_refused():
    from prm_critic._optional import install_command

    with loud(ITEM, "install_command() with an empty list of extras", ValueError,
              match=r"extras: expected an extra name or a non-empty list of them, got \[\]"):
        install_command([])


# --------------------------------------------------------------------------------------------
# The vector shapers refuse the other kind of env, naming the shaper that wraps it
# --------------------------------------------------------------------------------------------


def _single_env():
    from wrappers_helpers import ListEnv

    return ListEnv([[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]])


def test_gym_vector_shaper_refuses_an_sb3_vecenv_and_a_single_env():
    pytest.importorskip("stable_baselines3")
    from stable_baselines3.common.vec_env import DummyVecEnv

    from prm_critic.wrappers import GymVectorPRMRewardShaper

    with loud(ITEM, "GymVectorPRMRewardShaper given a stable-baselines3 DummyVecEnv", TypeError,
              match=r"env: expected a gymnasium\.vector\.VectorEnv for GymVectorPRMRewardShaper, got DummyVecEnv, a "
                    r"stable-baselines3 VecEnv; wrap it with prm_critic\.sb3\.SB3VecPRMRewardShaper$"):
        GymVectorPRMRewardShaper(DummyVecEnv([_single_env]), ConstantCritic(), gamma=0.99)
    with loud(ITEM, "GymVectorPRMRewardShaper given a single gymnasium env", TypeError,
              match=r"env: expected a gymnasium\.vector\.VectorEnv for GymVectorPRMRewardShaper, got ListEnv, a single "
                    r"gymnasium\.Env; wrap it with prm_critic\.wrappers\.PRMRewardShaper, or make a vector env with "
                    r"gym\.make_vec"):
        GymVectorPRMRewardShaper(_single_env(), ConstantCritic(), gamma=0.99)


def test_sb3_vec_shaper_refuses_a_gymnasium_vector_env_and_a_single_env():
    pytest.importorskip("stable_baselines3")
    from gymnasium.vector import SyncVectorEnv

    from prm_critic.sb3 import SB3VecPRMRewardShaper

    venv = SyncVectorEnv([_single_env, _single_env])
    with loud(ITEM, "SB3VecPRMRewardShaper given a gymnasium SyncVectorEnv", TypeError,
              match=r"venv: expected a stable-baselines3 VecEnv for SB3VecPRMRewardShaper, got SyncVectorEnv, a "
                    r"gymnasium\.vector\.VectorEnv; wrap it with prm_critic\.wrappers\.GymVectorPRMRewardShaper$"):
        SB3VecPRMRewardShaper(venv, ConstantCritic(), gamma=0.99)
    venv.close()
    with loud(ITEM, "SB3VecPRMRewardShaper given a single gymnasium env", TypeError,
              match=r"venv: expected a stable-baselines3 VecEnv for SB3VecPRMRewardShaper, got ListEnv, a single "
                    r"gymnasium\.Env; wrap it with prm_critic\.wrappers\.PRMRewardShaper, or vectorise it first: "
                    r"DummyVecEnv\(\[lambda: env\]\)"):
        SB3VecPRMRewardShaper(_single_env(), ConstantCritic(), gamma=0.99)
    with loud(ITEM, "SB3VecPRMRewardShaper given something that is no env", TypeError,
              match=r"venv: expected a stable-baselines3 VecEnv for SB3VecPRMRewardShaper, got ndarray$"):
        SB3VecPRMRewardShaper(np.zeros(3), ConstantCritic(), gamma=0.99)


# --------------------------------------------------------------------------------------------
# collect into a folder that holds data of other settings
# --------------------------------------------------------------------------------------------


def test_collect_into_a_folder_of_other_settings_names_each_difference(tmp_path, capsys):
    pytest.importorskip("gymnasium_robotics")
    from prm_critic.cli import main
    from prm_critic.robotics.collection import collect

    out = tmp_path / "data"
    collect("PointMaze_UMaze-v3", out, episodes=1, max_episode_steps=5, seed=0, progress=False)
    meta = (out / "meta.json").read_text()
    with loud(ITEM, "collect into a folder of data collected with another seed and TimeLimit", ValueError,
              match=r"already holds data collected with other settings \(2 differ: "
                    r"spec\.task\.max_episode_steps: 5 there, 7 in this run; seed: 0 there, 3 in this run\); "
                    r"re-run with its settings to resume it, use another folder, or pass --overwrite"):
        collect("PointMaze_UMaze-v3", out, episodes=1, max_episode_steps=7, seed=3, progress=False)
    assert (out / "meta.json").read_text() == meta  # the folder is left as it was
    # the command line: the same refusal on one line, exit status 2
    capsys.readouterr()  # (a dependency's import-time notice from the library calls above)
    rc = main(["collect", "--task", "PointMaze_UMaze-v3", "--out", str(out), "--episodes", "1",
               "--max-episode-steps", "5", "--policy", "random", "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1
    assert "(1 differ: policy: 'scripted' there, 'random' in this run)" in err[0], err
    # the same settings resume
    collect("PointMaze_UMaze-v3", out, episodes=1, max_episode_steps=5, seed=0, progress=False)
    correct(ITEM, "collect again with the same settings after the refusals", "resumes: the folder is kept")


def test_setting_differences_name_nested_fields_and_list_items():
    from prm_critic.robotics.collection import setting_diffs

    old = {"task": {"name": "a", "steps": 5}, "subgoals": [{"t": 0.1}, {"t": 0.2}], "only_old": 1}
    new = {"task": {"name": "a", "steps": 6}, "subgoals": [{"t": 0.1}, {"t": 0.3}], "only_new": 2}
    got = [(n, repr(o), repr(v)) for n, o, v in setting_diffs("spec", old, new)]
    assert got == [("spec.task.steps", "5", "6"), ("spec.subgoals[1].t", "0.2", "0.3"),
                   ("spec.only_old", "1", "(not recorded)"), ("spec.only_new", "(not recorded)", "2")]
    assert setting_diffs("spec", old, dict(old)) == []
    correct(ITEM, "two recorded specs that differ in a nested field, a list item and a key",
            "each difference named by its dotted path with both values")


def test_ctrl_c_during_a_command(monkeypatch, capsys):
    import prm_critic.commands.specs as specs
    from prm_critic.cli import main

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(specs, "run", interrupted)
    rc = main(["specs"])
    err = capsys.readouterr().err
    assert rc == 130 and err == "prm-critic specs: interrupted\n", (rc, err)
    correct(ITEM, "Ctrl-C (KeyboardInterrupt) during a command", "one line 'prm-critic specs: interrupted', "
            "exit status 130, no traceback")
