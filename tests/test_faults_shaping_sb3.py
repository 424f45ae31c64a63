"""Shaping under plain stable-baselines3 (reliability items 61 and 62): a shaper gamma unlike the
algorithm's, a shaper wrapped twice, a task made with plain ``gym.make`` without its spec's
``make_kwargs``, and ``PRMStatsCallback`` without ``PRMMonitor`` (SB3's own ``Monitor`` after the
shaper, or before it); and a policy checkpoint on another task's env (item 63). Real MuJoCo envs,
real SB3 (SAC collecting, no gradient step needed), the spec's subgoal critic.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from faults import correct, loud

pytestmark = pytest.mark.fault

pytest.importorskip("gymnasium_robotics")
pytest.importorskip("stable_baselines3")

REACH = "FetchReach-v4"


def _shaped_reach(gamma: float):
    from prm_critic.robotics.make import make_env
    from prm_critic.robotics.subgoals import SubgoalCritic
    from prm_critic.wrappers import PRMRewardShaper

    env = make_env(REACH)
    return PRMRewardShaper(env, SubgoalCritic(REACH, env), gamma=gamma, scale=10.0)


def _sac(venv, gamma: float):
    from stable_baselines3 import SAC

    return SAC("MultiInputPolicy", venv, gamma=gamma, learning_starts=10_000, buffer_size=1000, seed=0,
               policy_kwargs={"net_arch": [8]}, device="cpu")


def test_shaper_gamma_unlike_the_algorithms_is_refused_at_training_start():
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    from prm_critic.sb3 import PRMStatsCallback

    venv = VecNormalize(DummyVecEnv([lambda: Monitor(_shaped_reach(gamma=0.95))]), norm_reward=False)
    model = _sac(venv, gamma=0.99)
    with loud(61, "PRMRewardShaper gamma 0.95 under SAC gamma 0.99 (plain SB3, VecNormalize, PRMStatsCallback)",
              ValueError, match=r"gamma: the PRMRewardShaper shapes with gamma=0\.95, but SAC's model\.gamma is 0\.99"):
        model.learn(total_timesteps=10, callback=PRMStatsCallback())
    venv.close()


def test_a_shaper_wrapped_twice_is_refused():
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.vec_env import DummyVecEnv

    from prm_critic.robotics.subgoals import SubgoalCritic
    from prm_critic.sb3 import SB3VecPRMRewardShaper
    from prm_critic.wrappers import PRMRewardShaper

    shaped = _shaped_reach(gamma=0.99)
    with loud(61, "PRMRewardShaper around an env already wrapped by a PRMRewardShaper (a Monitor between them)",
              ValueError, match=r"env: already wrapped by a PRMRewardShaper \(gamma=0\.99, mode='potential', critic "
                                r"SubgoalCritic\); a second PRMRewardShaper"):
        PRMRewardShaper(Monitor(shaped), SubgoalCritic(REACH, shaped), gamma=0.99)
    with loud(61, "SB3VecPRMRewardShaper around a DummyVecEnv of shaped envs", ValueError,
              match=r"venv: already wrapped by a PRMRewardShaper .* a second SB3VecPRMRewardShaper"):
        SB3VecPRMRewardShaper(DummyVecEnv([lambda: Monitor(_shaped_reach(gamma=0.99))]),
                              SubgoalCritic(REACH, shaped), gamma=0.99)
    shaped.close()


def test_a_task_made_without_its_specs_make_kwargs_warns_naming_both_values():
    import gymnasium as gym

    from prm_critic.robotics.make import make_env, register_robotics_envs
    from prm_critic.robotics.subgoals import SubgoalCritic
    from prm_critic.wrappers import PRMRewardShaper

    register_robotics_envs()
    task = "PointMaze_UMaze-v3"
    env = gym.make(task)  # plain gym.make: continuing_task keeps its default, True
    critic = SubgoalCritic(task, env)
    with pytest.warns(UserWarning, match=r"'PointMaze_UMaze-v3' was made without the make_kwargs of task spec "
                                         r"'PointMaze_UMaze-v3' \(continuing_task=True in the env, False in the spec\)"
                      ) as rec:
        PRMRewardShaper(env, critic, gamma=0.99)
    msg = next(str(w.message) for w in rec if "make_kwargs" in str(w.message))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once: the same mismatch again, and the spec's own env, warn no more
        PRMRewardShaper(gym.make(task), critic, gamma=0.99)
        good = make_env(task)
        PRMRewardShaper(good, SubgoalCritic(task, good), gamma=0.99)
    correct(61, "PRMRewardShaper on PointMaze made by plain gym.make (no continuing_task=False)",
            f"warned once: {msg}")


def _collect(venv, n_steps: int):
    from prm_critic.sb3 import PRMStatsCallback

    stats = PRMStatsCallback()
    _sac(venv, gamma=0.99).learn(total_timesteps=n_steps, callback=stats)
    return stats


def test_stats_callback_under_sb3_monitor_after_the_shaper_logs_the_envs_own_return():
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.vec_env import DummyVecEnv

    venv = DummyVecEnv([lambda: Monitor(_shaped_reach(gamma=0.99))])  # Monitor sums the shaped reward
    stats = _collect(venv, 100)
    assert len(stats.history) == 2
    for ep, monitored in zip(stats.history, venv.envs[0].get_episode_rewards()):
        assert ep["r_original"] == pytest.approx(-50.0)  # FetchReach: -1 per step until reached, 50 steps
        assert ep["r"] == pytest.approx(monitored, abs=1e-4) and abs(ep["r"] - ep["r_original"]) > 0.1
    correct(62, "PRMStatsCallback with SB3's Monitor after the shaper (no PRMMonitor)",
            f"ep_return_original {stats.history[0]['r_original']:.2f} (the env's), ep_return_shaped "
            f"{stats.history[0]['r']:.2f} (Monitor's)")
    venv.close()


def test_stats_callback_under_sb3_monitor_before_the_shaper_logs_the_shaped_return():
    from stable_baselines3.common.env_util import make_vec_env

    from prm_critic.robotics.make import make_env
    from prm_critic.robotics.subgoals import SubgoalCritic
    from prm_critic.wrappers import PRMRewardShaper

    def shape(env):
        return PRMRewardShaper(env, SubgoalCritic(REACH, env), gamma=0.99, scale=10.0)

    venv = make_vec_env(lambda: make_env(REACH), n_envs=1, wrapper_class=shape)  # Monitor under the shaper
    stats = _collect(venv, 100)
    assert len(stats.history) == 2
    for ep in stats.history:
        assert ep["r_original"] == pytest.approx(-50.0) and abs(ep["r"] + 50.0) > 0.1
    assert np.isfinite([e["r"] for e in stats.history]).all()
    correct(62, "PRMStatsCallback with make_vec_env's Monitor before the shaper (no PRMMonitor)",
            f"ep_return_original {stats.history[0]['r_original']:.2f}, ep_return_shaped {stats.history[0]['r']:.2f} "
            "(the learner's reward, not Monitor's)")
    venv.close()


# --------------------------------------------------------------------------------------------
# a policy checkpoint on another task's env (reliability item 63)
# --------------------------------------------------------------------------------------------


def _saved_policy(tmp_path, task: str):
    from stable_baselines3.common.vec_env import DummyVecEnv

    from prm_critic.robotics.make import make_env
    from prm_critic.sb3 import save_policy
    from prm_critic.sb3.train import build_model

    kw = dict(buffer_size=100, learning_starts=0, batch_size=8, policy_kwargs=dict(net_arch=[8]))
    model = build_model("sac", DummyVecEnv([lambda: make_env(task)]), algo_kwargs=kw, seed=0)
    save_policy(tmp_path / task / "policy", model, spec=task, algo="sac", algo_kwargs=kw)
    return tmp_path / task / "policy.json"


def test_a_policy_on_another_tasks_env_is_refused(tmp_path):
    from prm_critic.robotics.make import make_env
    from prm_critic.sb3 import load_policy, predict
    from prm_critic.sb3.checkpoint import PolicyCheckpointError

    umaze = _saved_policy(tmp_path, "PointMaze_UMaze-v3")
    with loud(63, "a PointMaze_UMaze-v3 policy loaded with a PointMaze_Medium-v3 env (same spaces)",
              PolicyCheckpointError, match=r"is a policy for task 'PointMaze_UMaze-v3' \(env id 'PointMaze_UMaze-v3'\), "
                                           r"but the env given is 'PointMaze_Medium-v3'"):
        load_policy(umaze, make_env("PointMaze_Medium-v3"), device="cpu")
    reach = _saved_policy(tmp_path, "FetchReach-v4")
    push_obs = make_env("FetchPush-v4").reset(seed=0)[0]
    with loud(63, "predict() of a FetchReach-v4 policy on a FetchPush-v4 observation", ValueError,
              match=r"obs\['observation'\]: the policy \(task 'FetchReach-v4'\) takes shape \(10,\) \(or a batch of it\), "
                    r"got \(25,\); is it an observation of another task\?"):
        predict(load_policy(reach, device="cpu"), push_obs)
    with loud(63, "a FetchReach-v4 policy loaded with a FetchPush-v4 env", PolicyCheckpointError,
              match=r"but the env given is 'FetchPush-v4'"):
        load_policy(reach, make_env("FetchPush-v4"), device="cpu")
    own = make_env("FetchReach-v4").reset(seed=0)[0]
    action, _ = predict(load_policy(reach, make_env("FetchReach-v4"), device="cpu"), own)
    assert action.shape == (4,)
