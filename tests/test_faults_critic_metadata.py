"""Fault injection for the critic metadata the wrappers read: a critic that declares no task (the
task/env check is skipped, with a warning saying so), a critic that declares its task through the
interface, and another task's critic with other input widths (the error names both tasks)."""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest

pytest.importorskip("gymnasium_robotics")

import torch  # noqa: E402

from faults import correct, loud  # noqa: E402
from prm_critic.cli import main  # noqa: E402
from prm_critic.critic import CriticInfo, StateCritic, StepScores, as_obs_batch  # noqa: E402
from prm_critic.models.checkpoint import load_state_critic, save_state_critic  # noqa: E402
from prm_critic.models.state_critic import StateCriticNet  # noqa: E402
from prm_critic.robotics.make import CriticInputLayout, make_env  # noqa: E402
from prm_critic.robotics.spec import load_spec  # noqa: E402
from prm_critic.wrappers import DeadEndPruner, PRMRewardShaper  # noqa: E402

pytestmark = pytest.mark.fault

PUSH, PICK, REACH = "FetchPush-v4", "FetchPickAndPlace-v4", "FetchReach-v4"
SKIPPED = r"PlainCritic.*declares no task.*task/env check was skipped.*critic_info"


class PlainCritic(StateCritic):
    """A user critic that declares nothing about its task."""

    def __init__(self, obs_dim: int):
        self.obs_dim = obs_dim

    def score(self, steps) -> StepScores:
        x = as_obs_batch(steps, self.obs_dim, name="steps")
        v = np.full(len(x), 0.5, np.float32)
        return StepScores(v, v)


class DeclaredCritic(PlainCritic):
    """A user critic that declares its task and layout through the interface."""

    def __init__(self, task: str, layout: CriticInputLayout):
        super().__init__(layout.obs_dim)
        self._info = CriticInfo(task=task, layout=layout)

    def critic_info(self) -> CriticInfo:
        return self._info


def _layout(task: str) -> CriticInputLayout:
    env = make_env(task)
    try:
        return CriticInputLayout.from_space(load_spec(task), env.observation_space)
    finally:
        env.close()


def _checkpoint(tmp_path, task: str):
    layout = _layout(task)
    torch.manual_seed(0)
    net = StateCriticNet(layout.obs_dim, hidden=(8,))
    spec = load_spec(task)
    save_state_critic(tmp_path / task, net, {"layout": layout.to_dict(), "task": spec.name, "spec": spec.to_dict()})
    return tmp_path / task


def _skip_warnings(record) -> list:
    return [w for w in record if issubclass(w.category, UserWarning) and "task/env check was skipped" in str(w.message)]


# ---------------------------------------------------------------------- 31: declared critic metadata
def test_critic_without_task_warns_once_at_construction_not_per_step():
    layout = _layout(PUSH)
    for name, build in (("shaper", lambda env, c: PRMRewardShaper(env, c, gamma=0.98, layout=layout)),
                        ("pruner", lambda env, c: DeadEndPruner(env, c, threshold=0.1, patience=5, layout=layout))):
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            env = build(make_env(PUSH), PlainCritic(layout.obs_dim))
        skipped = _skip_warnings(record)
        assert len(skipped) == 1, [str(w.message) for w in record]
        assert re.search(SKIPPED, str(skipped[0].message))  # names the type, the skipped check and the fix
        assert skipped[0].filename == __file__  # points at the code that built the wrapper
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            env.reset(seed=0)
            for _ in range(3):
                env.step(env.action_space.sample())
        assert _skip_warnings(record) == []
        env.close()
        correct(31, f"critic declaring no task on FetchPush ({name})",
                f"UserWarning once at construction: {skipped[0].message}")


def test_critic_declaring_its_task_through_the_interface_is_checked():
    critic = DeclaredCritic(PUSH, _layout(PUSH))  # the same widths as FetchPickAndPlace
    match = r"'FetchPush-v4'.*'FetchPickAndPlace-v4'.*allow_task_mismatch=True"
    with loud(31, "critic declaring task FetchPush (critic_info) on FetchPickAndPlace (shaper)", ValueError, match=match):
        PRMRewardShaper(make_env(PICK), critic, gamma=0.98)
    with loud(31, "critic declaring task FetchPush (critic_info) on FetchPickAndPlace (pruner)", ValueError, match=match):
        DeadEndPruner(make_env(PICK), critic, threshold=0.1, patience=5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a declared task: no warning on its own env
        PRMRewardShaper(make_env(PUSH), critic, gamma=0.98).close()


def test_other_task_critic_with_other_widths_names_both_tasks(tmp_path):
    critic = load_state_critic(_checkpoint(tmp_path, REACH))  # FetchReach inputs are narrower than FetchPush's
    match = r"(?s)'FetchReach-v4'.*'FetchPush-v4'"
    with loud(31, "FetchReach critic (other widths) on FetchPush (shaper)", ValueError, match=match):
        PRMRewardShaper(make_env(PUSH), critic, gamma=0.98)
    with loud(31, "FetchReach critic (other widths) on FetchPush (pruner)", ValueError, match=match):
        DeadEndPruner(make_env(PUSH), critic, threshold=0.1, patience=5)
    with loud(31, "FetchReach critic (other widths) on FetchPush, deliberate transfer (shaper)", ValueError,
              match=match):
        PRMRewardShaper(make_env(PUSH), critic, gamma=0.98, allow_task_mismatch=True)


def test_train_policy_cli_with_another_task_critic_names_both_tasks(tmp_path, capsys):
    path = _checkpoint(tmp_path, REACH)
    rc = main(["train-policy", "--task", PUSH, "--critic", str(path.with_suffix(".safetensors")), "--shaping",
               "potential", "--steps", "8", "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert rc == 2
    with loud(31, "train-policy --critic FetchReach checkpoint on FetchPush", ValueError,
              match=r"(?s)'FetchReach-v4'.*'FetchPush-v4'"):
        raise ValueError(err.strip())
