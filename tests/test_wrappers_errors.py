"""Bad input to the wrappers: each gets one clear error naming the parameter and the value."""

from __future__ import annotations

import re
import gymnasium as gym
import numpy as np
import pytest

from prm_critic.robotics.make import CriticInputLayout
from prm_critic.sb3 import SB3VecPRMRewardShaper
from prm_critic.wrappers import DeadEndPruner, PRMRewardShaper
from wrappers_helpers import ListEnv, torch_critic

CRITIC = torch_critic(3)
PATH = [[0.0, 0.0, 0.0], [1.0, 1.0, 1.0], [2.0, 2.0, 2.0]]


class LyingEnv(ListEnv):
    """Declares Box(3) but returns ``bad`` from step."""

    def __init__(self, bad):
        super().__init__(PATH)
        self.bad = bad

    def step(self, action):
        _, r, te, tr, info = super().step(action)
        return self.bad, r, te, tr, info


def test_nan_or_inf_observation_names_the_observation():
    env = PRMRewardShaper(ListEnv([[0.0, np.nan, 0.0], [1.0, 1.0, 1.0]]), CRITIC, gamma=0.99)
    with pytest.raises(ValueError, match=r"observation: expected finite values, got nan at obs\[1\]"):
        env.reset()
    env = PRMRewardShaper(ListEnv([[0.0, 0.0, 0.0], [1.0, 1.0, np.inf]]), CRITIC, gamma=0.99)
    env.reset()
    with pytest.raises(ValueError, match=r"observation: expected finite values, got inf at obs\[2\]"):
        env.step(env.action_space.sample())


def test_wrong_observation_shape_or_dtype_at_runtime():
    env = PRMRewardShaper(LyingEnv(np.zeros(4)), CRITIC, gamma=0.99)
    env.reset()
    with pytest.raises(ValueError, match=r"observation: expected 3 values per step .* got 4"):
        env.step(env.action_space.sample())
    env = PRMRewardShaper(LyingEnv(np.array(["a", "b", "c"])), CRITIC, gamma=0.99)
    env.reset()
    with pytest.raises(TypeError, match=r"observation: expected a real-valued numeric array, got dtype <U1"):
        env.step(env.action_space.sample())


def test_layout_mismatch_between_critic_and_env():
    wide = torch_critic(5)
    with pytest.raises(ValueError, match=r"layout: obs_dim 5 does not match the env observation of shape \(3,\)"):
        PRMRewardShaper(ListEnv(PATH), wide, gamma=0.99)
    with pytest.raises(ValueError, match=r"critic: obs_dim 3 does not match the layout's obs_dim 4"):
        PRMRewardShaper(ListEnv(PATH), CRITIC, gamma=0.99, layout=CriticInputLayout(["obs"], {"obs": 4}))
    dict_env = ListEnv(PATH, obs_space=gym.spaces.Dict({"observation": gym.spaces.Box(-1, 1, (3,))}))
    with pytest.raises(ValueError, match=r"layout: the env observation space is a Box|layout: key 'obs' is not in"):
        PRMRewardShaper(dict_env, CRITIC, gamma=0.99)


def test_missing_layout_is_named():
    critic = torch_critic(3)
    critic.meta = {}
    with pytest.raises(ValueError, match=r"layout: the critic \(TorchStateCritic\) carries no layout"):
        PRMRewardShaper(ListEnv(PATH), critic, gamma=0.99)


def test_gamma_missing_or_invalid():
    with pytest.raises(TypeError, match="gamma"):
        PRMRewardShaper(ListEnv(PATH), CRITIC)  # type: ignore[call-arg]
    for bad in (0.0, -0.5, 1.5, float("nan"), None, True, "0.99"):
        with pytest.raises(ValueError, match=r"gamma: expected a number in \(0, 1\] equal to the learner's discount "
                                             r"\(e\.g\. model\.gamma\), got " + re.escape(repr(bad)) + "$"):
            PRMRewardShaper(ListEnv(PATH), CRITIC, gamma=bad)


def test_unknown_mode_head_fallback_scale():
    with pytest.raises(ValueError, match=r"mode: expected one of \['potential', 'subgoal', 'replace'\], got 'potentail'; "
                                         r"did you mean 'potential'\?$"):
        PRMRewardShaper(ListEnv(PATH), CRITIC, gamma=0.99, mode="potentail")
    with pytest.raises(ValueError, match=r"head: expected one of \['progress', 'success'\], got 'value'$"):
        PRMRewardShaper(ListEnv(PATH), CRITIC, gamma=0.99, head="value")
    with pytest.raises(ValueError, match=r"fallback: expected one of \['zero'\], got 'last'$"):
        PRMRewardShaper(ListEnv(PATH), CRITIC, gamma=0.99, fallback="last")
    with pytest.raises(ValueError, match=r"scale: expected a finite number, got inf$"):
        PRMRewardShaper(ListEnv(PATH), CRITIC, gamma=0.99, scale=float("inf"))
    with pytest.raises(ValueError, match=r"deadline_s: expected a finite number > 0 or None, got 0$"):
        PRMRewardShaper(ListEnv(PATH), CRITIC, gamma=0.99, deadline_s=0)
    with pytest.raises(ValueError, match=r"spec: mode 'subgoal' needs a task spec"):
        PRMRewardShaper(ListEnv(PATH), CRITIC, gamma=0.99, mode="subgoal")
    with pytest.raises(TypeError, match=r"critic: expected a prm_critic.BaseCritic"):
        PRMRewardShaper(ListEnv(PATH), lambda x: x, gamma=0.99)


def test_flags_are_bools_not_truthy_values():
    """Both a TypeError and a ValueError (prm_critic.validate.ArgumentError)."""
    for exc in (TypeError, ValueError):
        with pytest.raises(exc, match=r"info_subgoals: expected True or False, got 'yes'$"):
            PRMRewardShaper(ListEnv(PATH), CRITIC, gamma=0.99, info_subgoals="yes")
        with pytest.raises(exc, match=r"allow_task_mismatch: expected True or False, got 1$"):
            PRMRewardShaper(ListEnv(PATH), CRITIC, gamma=0.99, allow_task_mismatch=1)
        with pytest.raises(exc, match=r"allow_task_mismatch: expected True or False, got None$"):
            DeadEndPruner(ListEnv(PATH), CRITIC, threshold=0.5, patience=2, allow_task_mismatch=None)


def test_pruner_threshold_and_patience_validated():
    for bad in (-0.1, 1.5, float("nan")):
        with pytest.raises(ValueError, match=r"threshold: expected a number in \[0, 1\] \(a critic score\), got "
                                             + re.escape(repr(bad)) + "$"):
            DeadEndPruner(ListEnv(PATH), CRITIC, threshold=bad, patience=3)
    with pytest.raises(TypeError, match=r"threshold: expected a number in \[0, 1\], got NoneType None$"):
        DeadEndPruner(ListEnv(PATH), CRITIC, threshold=None, patience=3)
    for bad in (0, -2):
        with pytest.raises(ValueError, match=r"patience: expected an int >= 1 \(consecutive steps below threshold\), "
                                             rf"got {bad}$"):
            DeadEndPruner(ListEnv(PATH), CRITIC, threshold=0.5, patience=bad)
    for bad in (1.5, True, None):
        with pytest.raises(TypeError, match=r"patience: expected an int >= 1 \(consecutive steps below threshold\), "
                                            rf"got {type(bad).__name__} {bad!r}$"):
            DeadEndPruner(ListEnv(PATH), CRITIC, threshold=0.5, patience=bad)
    with pytest.raises(ValueError, match=r"max_episode_steps: expected None or a positive integer, got 0$"):
        DeadEndPruner(ListEnv(PATH), CRITIC, threshold=0.5, patience=2, max_episode_steps=0)
    with pytest.raises(ValueError, match=r"head: expected one of"):
        DeadEndPruner(ListEnv(PATH), CRITIC, threshold=0.5, patience=2, head="nope")


def test_vec_twin_argument_errors():
    from stable_baselines3.common.vec_env import DummyVecEnv

    with pytest.raises(TypeError, match=r"venv: expected a stable-baselines3 VecEnv for SB3VecPRMRewardShaper, got "
                                        r"ListEnv, a single gymnasium\.Env; wrap it with "
                                        r"prm_critic\.wrappers\.PRMRewardShaper, or vectorise it first"):
        SB3VecPRMRewardShaper(ListEnv(PATH), CRITIC, gamma=0.99)
    venv = DummyVecEnv([lambda: ListEnv(PATH)])
    with pytest.raises(ValueError, match=r"gamma: expected a number in \(0, 1\]"):
        SB3VecPRMRewardShaper(venv, CRITIC, gamma=2)
    venv = DummyVecEnv([lambda: ListEnv([[0.0, 0.0, 0.0], [np.nan, 0.0, 0.0]])])
    shaped = SB3VecPRMRewardShaper(venv, CRITIC, gamma=0.99)
    shaped.reset()
    with pytest.raises(ValueError, match=r"infos\[0\]\['terminal_observation'\]: expected finite values, got nan at obs\[0\]"):
        shaped.step(np.zeros((1, 1), np.float32))


def test_obs_flattener_paths_agree_and_still_check():
    """The wrappers' per-step flattening (one joined cast on the fast path, one copy per key for a key
    of the right size in another shape) gives the bytes of the checked path on every input form, and
    non-finite values, wrong sizes or dtypes still raise naming the key (and the batch row)."""
    from prm_critic.robotics.layout import ObsFlattener

    lay = CriticInputLayout(keys=("a", "b"), sizes={"a": 3, "b": 2})
    f = ObsFlattener(lay)
    rng = np.random.default_rng(0)
    a64, b64 = rng.standard_normal(3), rng.standard_normal(2)
    singles = [{"a": a64, "b": b64}, {"a": a64.astype(np.float32), "b": np.arange(2)},
               {"a": a64.reshape(1, 3), "b": b64}, {"a": a64.reshape(3, 1), "b": np.array([True, False])}]
    for obs in singles:
        ref = f.checked(obs)
        got = f(obs)
        assert got.dtype == np.float32 and got.shape == (5,) and got.tobytes() == ref.tobytes()
        assert got is not f(obs) and got.flags.writeable  # a fresh array per call (infos keep it)
    A, B = rng.standard_normal((4, 3)), rng.standard_normal((4, 2))
    assert f.batch({"a": A[:0], "b": B[:0]}).shape == (0, 5)
    for obs in ({"a": A, "b": B}, {"a": A.reshape(4, 1, 3), "b": B.astype(np.float32)}):
        ref = f.checked(obs, batched=True)
        got = f.batch(obs)
        assert got.dtype == np.float32 and got.shape == ref.shape and got.tobytes() == ref.tobytes()
    box = ObsFlattener(CriticInputLayout(keys=("obs",), sizes={"obs": 6}))
    for obs in (rng.standard_normal(6), rng.standard_normal((2, 3)), np.arange(6)):
        assert box(obs).tobytes() == np.asarray(obs, np.float32).reshape(-1).tobytes()
    assert box.batch(np.asfortranarray(rng.standard_normal((4, 6)))).shape == (4, 6)
    bad = {"a": a64.copy(), "b": b64}
    bad["a"][2] = np.inf
    with pytest.raises(ValueError, match=r"observation: expected finite values, got inf at a\[2\]"):
        f(bad)
    with np.errstate(over="ignore"), \
            pytest.raises(ValueError, match=r"observation: expected finite values, got inf at a\[0\]"):
        f({"a": np.array([1e39, 0.0, 0.0]), "b": b64})  # finite in float64, inf as the critic's float32
    Bn = B.copy()
    Bn[3, 1] = np.nan
    with pytest.raises(ValueError, match=r"observation: expected finite values, got nan at b\[1\] \(batch row 3\)"):
        f.batch({"a": A, "b": Bn})
    with pytest.raises(ValueError, match=r"observation\['b'\]: expected 2 values per step"):
        f({"a": a64, "b": np.zeros(3)})
    with pytest.raises(TypeError, match=r"observation\['a'\]: expected a real-valued numeric array, got dtype <U1"):
        f({"a": np.array(["x"] * 3), "b": b64})


@pytest.mark.parametrize("kind", ["gymnasium make_vec", "sb3 DummyVecEnv"])
def test_a_vector_env_where_one_env_is_expected_names_that_mistake(kind):
    """Real vector envs given to what takes one env: the error says "one env", not a spec width error."""
    pytest.importorskip("gymnasium_robotics")
    from stable_baselines3.common.vec_env import DummyVecEnv

    from prm_critic.robotics import MazeGeometry, SubgoalCritic, make_env
    from prm_critic.robotics.make import register_robotics_envs

    register_robotics_envs()
    venv = (gym.make_vec("FetchPush-v4", num_envs=2, vectorization_mode="sync") if kind.startswith("gymnasium")
            else DummyVecEnv([lambda: make_env("FetchPush-v4")] * 2))
    with pytest.raises(ValueError, match=r"env: SubgoalCritic takes one env, got \w+Vec\w*Env, a .* of 2 envs; "
                                         r"build the critic from one env") as err:
        SubgoalCritic("FetchPush-v4", venv)
    assert "width" not in str(err.value) and "fetch_push.toml" not in str(err.value)
    critic = SubgoalCritic("FetchPush-v4", make_env("FetchPush-v4"))
    shaper = "GymVectorPRMRewardShaper" if kind.startswith("gymnasium") else "SB3VecPRMRewardShaper"
    with pytest.raises(ValueError, match=rf"env: expected a single gymnasium.Env for PRMRewardShaper, .*{shaper}"):
        PRMRewardShaper(venv, critic, gamma=0.98)
    with pytest.raises(ValueError, match=r"env: DeadEndPruner takes one env, .*prune each sub-env"):
        DeadEndPruner(venv, critic, threshold=0.1, patience=3)
    with pytest.raises(ValueError, match=r"env: MazeGeometry.from_env takes one env"):
        MazeGeometry.from_env(venv)
    venv.close()
