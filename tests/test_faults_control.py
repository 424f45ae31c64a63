"""Fault injection for the env wrappers: a critic for another task or with a reordered layout, a slow
or failing critic under a shaper + pruner stack, and HER relabelling in subgoal mode."""

from __future__ import annotations


import numpy as np
import pytest

pytest.importorskip("gymnasium_robotics")

import torch  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from stable_baselines3.common.vec_env import DummyVecEnv  # noqa: E402

from faults import correct, loud  # noqa: E402
from prm_critic.models.checkpoint import load_state_critic, save_state_critic  # noqa: E402
from prm_critic.models.state_critic import StateCriticNet, TorchStateCritic  # noqa: E402
from prm_critic.robotics.make import CriticInputLayout, make_env  # noqa: E402
from prm_critic.robotics.spec import load_spec  # noqa: E402
from prm_critic.robotics.subgoals import SubgoalCritic  # noqa: E402
from prm_critic.sb3 import SB3VecPRMRewardShaper  # noqa: E402
from prm_critic.wrappers import DeadEndPruner, PRMRewardShaper  # noqa: E402
from wrappers_helpers import BlockingCritic, SlowCritic, wait_for_handover  # noqa: E402

pytestmark = pytest.mark.fault

PUSH, PICK, REACH = "FetchPush-v4", "FetchPickAndPlace-v4", "FetchReach-v4"


def _checkpoint_critic(tmp_path, task: str, *, layout_keys=None, with_spec=True, seed=0) -> TorchStateCritic:
    """A real state-critic checkpoint for ``task`` (random weights), saved and loaded back."""
    spec = load_spec(task)
    env = make_env(spec)
    layout = CriticInputLayout.from_space(spec, env.observation_space)
    env.close()
    if layout_keys is not None:  # the metadata's layout lists the same keys in another order
        layout = CriticInputLayout(layout_keys, layout.sizes)
    torch.manual_seed(seed)
    net = StateCriticNet(layout.obs_dim, hidden=(16, 16))
    meta = {"layout": layout.to_dict(), "label_family": "subgoal"}
    if with_spec:  # what train-critic writes; without it, a bare layout-only checkpoint
        meta.update(task=spec.name, spec=spec.to_dict())
    save_state_critic(tmp_path / f"{task}-{seed}", net, meta)
    return load_state_critic(tmp_path / f"{task}-{seed}")


# ---------------------------------------------------------------------- 6: critic/env match
def test_critic_for_another_task_is_refused_by_all_three_wrappers(tmp_path):
    critic = _checkpoint_critic(tmp_path, PUSH)  # same input width (31) as FetchPickAndPlace
    env = make_env(PICK)
    match = r"'FetchPush-v4'.*'FetchPickAndPlace-v4'.*allow_task_mismatch=True"
    with loud(6, "FetchPush critic checkpoint on FetchPickAndPlace (shaper)", ValueError, match=match):
        PRMRewardShaper(env, critic, gamma=0.98)
    with loud(6, "FetchPush critic checkpoint on FetchPickAndPlace (pruner)", ValueError, match=match):
        DeadEndPruner(env, critic, threshold=0.1, patience=5)
    venv = DummyVecEnv([lambda: make_env(PICK)])
    with loud(6, "FetchPush critic checkpoint on FetchPickAndPlace (vector shaper)", ValueError, match=match):
        SB3VecPRMRewardShaper(venv, critic, gamma=0.98)
    venv.close()
    with loud(6, "SubgoalCritic of FetchPush on FetchPickAndPlace", ValueError, match=match):
        PRMRewardShaper(env, SubgoalCritic(PUSH, make_env(PUSH)), gamma=0.98)


def test_deliberate_transfer_with_the_flag_runs(tmp_path):
    critic = _checkpoint_critic(tmp_path, PUSH)
    env = DeadEndPruner(PRMRewardShaper(make_env(PICK), critic, gamma=0.98, allow_task_mismatch=True), critic,
                        threshold=0.0, patience=1, allow_task_mismatch=True)
    obs, _ = env.reset(seed=0)
    obs, r, term, trunc, info = env.step(env.action_space.sample())
    x = np.concatenate([info["prm_x"], info["prm_next_x"]]).reshape(2, -1)
    phi = critic.score(x).progress.astype(np.float64)
    assert info["prm_shaping"] == pytest.approx(0.98 * phi[1] - phi[0], abs=1e-6)
    assert r == pytest.approx(info["prm_original_reward"] + info["prm_shaping"], abs=1e-12)
    venv = SB3VecPRMRewardShaper(DummyVecEnv([lambda: make_env(PICK)]), critic, gamma=0.98, allow_task_mismatch=True)
    venv.reset()
    venv.close()
    correct(6, "FetchPush critic on FetchPickAndPlace with allow_task_mismatch=True",
            "shaper, pruner and vector shaper accept the deliberate transfer and shape with the critic's scores")


def test_reordered_layout_in_checkpoint_meta_names_first_differing_field(tmp_path):
    critic = _checkpoint_critic(tmp_path, PUSH, layout_keys=["achieved_goal", "observation", "desired_goal"])
    env = make_env(PUSH)
    # the fault matters: read with the reordered layout the critic sees other numbers than it was trained on
    obs, _ = env.reset(seed=0)
    right = CriticInputLayout.from_space(load_spec(PUSH), env.observation_space).flatten(obs)
    wrong = CriticInputLayout.from_dict(critic.meta["layout"]).flatten(obs)
    assert wrong.shape == right.shape and not np.array_equal(wrong, right)
    match = r"field 0 is 'achieved_goal' \(width 3\) where 'observation' \(width 25\) was expected"
    with loud(6, "checkpoint meta layout reordered (achieved_goal first) on FetchPush (shaper)", ValueError,
              match=match):
        PRMRewardShaper(env, critic, gamma=0.98)
    with loud(6, "checkpoint meta layout reordered on FetchPush (pruner)", ValueError, match=match):
        DeadEndPruner(env, critic, threshold=0.1, patience=5)
    venv = DummyVecEnv([lambda: make_env(PUSH)])
    with loud(6, "checkpoint meta layout reordered on FetchPush (vector shaper)", ValueError, match=match):
        SB3VecPRMRewardShaper(venv, critic, gamma=0.98)
    venv.close()
    # no task or spec in the metadata: the env's built-in spec gives the order of the same keys
    bare = _checkpoint_critic(tmp_path, PUSH, layout_keys=["observation", "desired_goal", "achieved_goal"],
                              with_spec=False, seed=1)
    with loud(6, "reordered layout, checkpoint without spec, on FetchPush", ValueError,
              match=r"built-in spec 'FetchPush-v4'.*field 1 is 'desired_goal' \(width 3\) where 'achieved_goal'"):
        PRMRewardShaper(env, bare, gamma=0.98)


def test_explicit_layout_that_contradicts_the_critic_is_refused(tmp_path):
    critic = _checkpoint_critic(tmp_path, PUSH)
    env = make_env(PUSH)
    swapped = CriticInputLayout(["observation", "desired_goal", "achieved_goal"],
                                {"observation": 25, "desired_goal": 3, "achieved_goal": 3})
    with loud(6, "layout= with goals swapped against the critic's own layout", ValueError,
              match=r"does not match the critic's own layout: field 1 is 'desired_goal'"):
        PRMRewardShaper(env, critic, gamma=0.98, layout=swapped)


def test_onnx_critic_for_another_task_is_refused(tmp_path):
    pytest.importorskip("onnxruntime")
    from prm_critic.onnx import OnnxCritic, export_state_critic

    critic = _checkpoint_critic(tmp_path, PUSH)
    path = export_state_critic(tmp_path / f"{PUSH}-0", tmp_path / "push.onnx")
    onnx = OnnxCritic(path)
    with loud(6, "exported FetchPush ONNX critic on FetchPickAndPlace (shaper)", ValueError,
              match=r"'FetchPush-v4'.*'FetchPickAndPlace-v4'.*allow_task_mismatch=True"):
        PRMRewardShaper(make_env(PICK), onnx, gamma=0.98)
    env = PRMRewardShaper(make_env(PUSH), onnx, gamma=0.98)  # the right task passes
    env.reset(seed=0)
    assert critic.obs_dim == onnx.obs_dim


_PUSH_ENV = None


def _push_env():
    global _PUSH_ENV
    if _PUSH_ENV is None:
        _PUSH_ENV = make_env(PUSH)
    return _PUSH_ENV


@pytest.mark.fault_outcome(6, "a FetchPush critic whose metadata layout is any reordering of the spec's (property)",
                           "refused naming the first differing field; the spec's own order accepted")
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(order=st.permutations(["observation", "achieved_goal", "desired_goal"]))
def test_property_any_reordered_layout_is_refused_naming_first_difference(order):
    env = _push_env()
    spec = load_spec(PUSH)
    sizes = {"observation": 25, "achieved_goal": 3, "desired_goal": 3}
    torch.manual_seed(0)
    net = StateCriticNet(31, hidden=(8,))
    critic = TorchStateCritic(net, {"task": PUSH, "spec": spec.to_dict(),
                                    "layout": CriticInputLayout(order, sizes).to_dict()})
    expected = list(spec.critic_input)
    if list(order) == expected:
        PRMRewardShaper(env, critic, gamma=0.98)  # the spec's own order is accepted
        return
    i = next(k for k in range(3) if order[k] != expected[k])
    with pytest.raises(ValueError, match=rf"field {i} is '{order[i]}' \(width {sizes[order[i]]}\) "
                                         rf"where '{expected[i]}' \(width {sizes[expected[i]]}\) was expected"):
        PRMRewardShaper(env, critic, gamma=0.98)


# ---------------------------------------------------------------------- 10: one call per step, one deadline
def _reach_critic() -> TorchStateCritic:
    spec = load_spec(REACH)
    env = make_env(spec)
    layout = CriticInputLayout.from_space(spec, env.observation_space)
    env.close()
    torch.manual_seed(0)
    return TorchStateCritic(StateCriticNet(layout.obs_dim, hidden=(16, 16)),
                            {"task": spec.name, "spec": spec.to_dict(), "layout": layout.to_dict()})


def _stack(critic, deadline_s):
    shaped = PRMRewardShaper(make_env(REACH, max_episode_steps=50), critic, gamma=0.98, deadline_s=deadline_s)
    return shaped, DeadEndPruner(shaped, critic, threshold=0.0, patience=1)


def test_slow_critic_under_deadline_stack_makes_one_call_per_step_and_no_pruner_call():
    # the critic's call 2 (step 2) blocks until the test releases it: the shaper's deadline must
    # return the step without it, and the pruner must not call the critic in its place
    critic = BlockingCritic(_reach_critic(), block={2})
    shaped, pruner = _stack(critic, deadline_s=2.0)  # only the blocked call is late
    pruner.reset(seed=0)
    fallbacks, scores = [], []
    for t in range(1, 11):
        if t == 4:  # the late call has been left behind for two steps: let it finish
            critic.release.set()
            assert critic.finished.wait(30)
            wait_for_handover(shaped)  # or step 4 may still see the worker busy
        n_before = critic.n
        _, _, _, _, info = pruner.step(pruner.action_space.sample())
        assert critic.n - n_before <= 1
        fallbacks.append(info["prm_fallback"])
        scores.append(info["prm_prune_score"])
    assert fallbacks == [False, True, True] + [False] * 7  # 2: late, 3: worker still busy
    assert np.isnan(scores[1]) and np.isnan(scores[2]) and np.isfinite(scores[3:]).all()
    assert shaped.stats["calls"] == 11 and shaped.stats["timeouts"] == 1 and shaped.stats["busy"] == 1
    assert pruner.stats["critic_calls"] == 0 and pruner.stats["unknown_scores"] == 2
    assert pruner.stats["reused_scores"] == 8
    assert critic.n == 10  # reset + 9 steps; the busy step made no call
    pruner.close()
    correct(10, "critic blocks past the shaper's deadline in a shaper + pruner stack (FetchReach)",
            "one critic call per step at most, the pruner made none; the late and busy steps have unknown "
            "scores (no shaping, no pruning) and the loop went on")


def test_failing_critic_under_deadline_stack_falls_back_in_both_wrappers():
    critic = SlowCritic(_reach_critic(), fail={2, 3})  # steps 2 and 3 raise
    shaped, pruner = _stack(critic, deadline_s=5.0)
    pruner.reset(seed=0)
    infos = [pruner.step(pruner.action_space.sample())[4] for _ in range(6)]
    assert [i["prm_fallback"] for i in infos] == [False, True, True, False, False, False]
    assert [bool(np.isnan(i["prm_prune_score"])) for i in infos] == [False, True, True, False, False, False]
    assert shaped.stats["errors"] == 2 and "critic failure on call 3" in str(shaped.last_error)
    assert pruner.stats["critic_calls"] == 0 and pruner.stats["unknown_scores"] == 2
    assert critic.n == 7  # reset + one call per step
    correct(10, "critic raises on two steps under the shaper's deadline in a shaper + pruner stack",
            "both wrappers fall back (no shaping, score unknown, counted in stats); no exception escapes, "
            "no second critic call")


def test_standalone_pruner_deadline_falls_back_and_without_deadline_raises():
    critic = SlowCritic(_reach_critic(), fail={1})
    pruner = DeadEndPruner(make_env(REACH), critic, threshold=0.0, patience=1, deadline_s=5.0)
    pruner.reset(seed=0)
    infos = [pruner.step(pruner.action_space.sample())[4] for _ in range(3)]
    assert [bool(np.isnan(i["prm_prune_score"])) for i in infos] == [False, True, False]
    assert pruner.stats["errors"] == 1 and pruner.stats["unknown_scores"] == 1 and pruner.stats["critic_calls"] == 3
    pruner.close()
    correct(10, "critic raises under a standalone pruner with deadline_s",
            "the pruner falls back like the shaper: score unknown, no pruning, counted in stats")
    strict = DeadEndPruner(make_env(REACH), SlowCritic(_reach_critic(), fail={0}), threshold=0.0, patience=1)
    strict.reset(seed=0)
    with loud(10, "critic raises under a standalone pruner without deadline", RuntimeError,
              match="critic failure on call 0"):
        strict.step(strict.action_space.sample())


# ---------------------------------------------------------------------- 11: subgoal mode and HER
def test_her_relabelling_in_subgoal_mode_is_refused():
    from stable_baselines3 import SAC, HerReplayBuffer

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        env = make_env(REACH, max_episode_steps=20)
        shaped = PRMRewardShaper(env, SubgoalCritic(REACH, env), gamma=0.95, mode="subgoal")
        model = SAC("MultiInputPolicy", shaped, replay_buffer_class=HerReplayBuffer,
                    replay_buffer_kwargs=dict(n_sampled_goal=4, goal_selection_strategy="future",
                                              copy_info_dict=True),
                    learning_starts=41, batch_size=16, gamma=0.95, policy_kwargs=dict(net_arch=[16]),
                    buffer_size=500, seed=0, device="cpu")
        with loud(11, "SAC + HerReplayBuffer relabels goals through a subgoal-mode shaper", ValueError,
                  match=r"mode='subgoal' cannot relabel goals .*mode='potential'"):
            model.learn(60)
    finally:
        torch.set_num_threads(n)


def test_subgoal_mode_compute_reward_for_stored_goals_is_exact():
    env = make_env(REACH, max_episode_steps=20)
    shaped = PRMRewardShaper(env, SubgoalCritic(REACH, env), gamma=0.95, mode="subgoal", subgoal_bonus=3.0)
    obs, _ = shaped.reset(seed=1)
    ags, dgs, infos, rewards = [], [], [], []
    for _ in range(20):
        obs, r, term, trunc, info = shaped.step(shaped.action_space.sample())
        ags.append(obs["achieved_goal"])
        dgs.append(obs["desired_goal"])
        infos.append(info)
        rewards.append(r)
    out = shaped.compute_reward(np.stack(ags), np.stack(dgs), np.array(infos))
    np.testing.assert_array_equal(out, np.asarray(rewards))
    with pytest.raises(ValueError, match=r"mode='subgoal' cannot relabel goals \(1 of 20"):
        moved = np.stack(dgs)
        moved[5] = moved[5] + 0.3
        shaped.compute_reward(np.stack(ags), moved, np.array(infos))
    correct(11, "compute_reward in subgoal mode with the stored (unrelabelled) goals",
            "returns the step rewards exactly; any relabelled goal raises")


def test_train_policy_refuses_subgoal_shaping_with_her():
    from prm_critic.sb3.train import train_policy

    with loud(11, "train_policy(shaping='subgoal', her=True)", ValueError,
              match=r"shaping='subgoal' with her=True.*shaping='potential'"):
        train_policy(REACH, algo="sac", shaping="subgoal", her=True, total_steps=30)
