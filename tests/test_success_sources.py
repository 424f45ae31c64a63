"""Success sources are a registry the spec names: the built-ins, "survived" (reached the time limit without
terminating) on the real InvertedPendulum, a source of the user's own, and one clear error for a name that
is not registered. Real MuJoCo (gymnasium InvertedPendulum-v5); no fakes."""

from pathlib import Path

import numpy as np
import pytest

from prm_critic.robotics.spec import SpecError, load_spec
from prm_critic.robotics.success import (
    SuccessSource,
    get_success_source,
    register_success_source,
    success_sources,
    unregister_success_source,
)


def _pendulum(max_steps: int, source: str = "survived", controller: str = "random") -> dict:
    return {"task": {"name": "pendulum-survive", "env_id": "InvertedPendulum-v5", "max_episode_steps": max_steps,
                     "critic_input": ["obs"], "success": {"source": source, "rule": "final"},
                     "controller": {"name": controller}}}


def test_builtin_sources_and_the_survived_flag():
    assert set(success_sources()) >= {"info", "subgoals", "kitchen_tasks", "survived"}
    success = load_spec(_pendulum(5)).success
    assert not success.reads_state and success.info_key is None
    assert success.step_flag({}, terminated=False, truncated=True) is True      # reached the time limit
    assert success.step_flag({}, terminated=True, truncated=False) is False     # the pole fell
    assert success.step_flag({}, terminated=True, truncated=True) is False
    assert success.step_flag({}, terminated=False, truncated=False) is False    # still running
    # the dead-end pruner truncates too: an episode it cut short did not survive
    assert success.step_flag({"prm_pruned": True}, terminated=False, truncated=True) is False


def test_unknown_source_is_one_clear_error():
    with pytest.raises(SpecError, match=r"success\.source: success source 'survive' is not registered; expected one "
                                        r"of \[.*'survived'.*\]; did you mean 'survived'\?"):
        load_spec(_pendulum(5, source="survive"))
    with pytest.raises(KeyError, match="did you mean 'info'"):
        get_success_source("infos")


def test_a_source_of_your_own():
    def flag(success, info, terminated, truncated):
        return bool(info.get("balanced", False))

    register_success_source(SuccessSource("balanced_flag", flag, description="info['balanced']"))
    try:
        with pytest.raises(ValueError, match="already registered"):
            register_success_source(SuccessSource("balanced_flag", flag))
        success = load_spec(_pendulum(5, source="balanced_flag")).success
        assert success.step_flag({"balanced": True}) is True and success.step_flag({}) is False
    finally:
        unregister_success_source("balanced_flag")
    assert "balanced_flag" not in success_sources()


def test_survived_on_the_real_inverted_pendulum(tmp_path: Path):
    pytest.importorskip("mujoco")
    from prm_critic.robotics.collection import collect, load_shard
    from prm_critic.robotics.controllers import Controller, register_controller, unregister_controller

    class Hold(Controller):  # no force: the pole, started within 0.01 rad of upright, stays up for a while
        def act(self, obs):
            return np.zeros_like(self.low, dtype=np.float32)

    class Push(Controller):  # full force one way: the pole falls within a few dozen steps
        def act(self, obs):
            return np.asarray(self.high, dtype=np.float32)

    def outcomes(max_steps: int, controller: str) -> dict:
        d = tmp_path / f"{controller}{max_steps}"
        collect(_pendulum(max_steps, controller=controller), d, episodes=3, shard_size=3, seed=0, progress=False)
        return load_shard(next((d / "shards").glob("shard_*.npz")))

    register_controller("test_hold", Hold)
    register_controller("test_push", Push)
    try:
        held = outcomes(5, "test_hold")
        pushed = outcomes(1000, "test_push")
    finally:
        unregister_controller("test_hold")
        unregister_controller("test_push")
    # held: every episode reaches its time limit without terminating, and only its last (truncated) step succeeds
    assert held["ep_success"].all() and (held["ep_len"] == 5).all()
    assert not held["terminated"].any() and np.array_equal(held["success"], held["truncated"])
    # pushed: the pole falls (terminated) long before the limit, so no step and no episode succeeds
    assert not pushed["ep_success"].any() and (pushed["ep_len"] < 1000).all() and pushed["terminated"].any()
    assert not pushed["success"].any()
