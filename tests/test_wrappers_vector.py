"""GymVectorPRMRewardShaper: gymnasium vector envs (gym.make_vec), one critic call per vector step, the
single-env shaper's rewards, and no potential difference across an autoreset."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("gymnasium_robotics")

import gymnasium as gym  # noqa: E402
from gymnasium.vector import AutoresetMode, SyncVectorEnv  # noqa: E402

from prm_critic.robotics.make import make_env, register_robotics_envs  # noqa: E402
from prm_critic.robotics.subgoals import SubgoalCritic  # noqa: E402
from prm_critic.wrappers import GymVectorPRMRewardShaper, PRMRewardShaper  # noqa: E402
from wrappers_helpers import CountingCritic, ListEnv, SlowCritic, torch_critic  # noqa: E402

TASK = "FetchReach-v4"
N = 4


def _rollout(venv, actions, seed=7):
    venv.reset(seed=seed)
    out = []
    for a in actions:
        _, r, term, trunc, info = venv.step(a)
        out.append((np.asarray(r, np.float64).copy(), term.copy(), trunc.copy(), info))
    return out


def _inner(info, key, sub=None):
    """Per sub-env values of the single-env shapers' ``info[key]`` (``[sub]`` of a nested dict) in a
    SyncVectorEnv step, and the mask of sub-envs that have it; a sub-env that reset in the same step
    has its shaper's info in ``info["final_info"]``."""
    vals, mask = [None] * N, np.zeros(N, bool)
    for src in (info, info.get("final_info", {})):
        if src.get("_" + key) is None:
            continue
        arr, m = src[key], src["_" + key]
        if sub is not None:
            arr, m = arr[sub], arr["_" + sub] & m
        for i in np.flatnonzero(m):
            vals[i], mask[i] = arr[i], True
    return vals, mask


@pytest.mark.parametrize("autoreset", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP])
@pytest.mark.parametrize("mode", ["potential", "subgoal", "replace"])
def test_make_vec_fetchreach_matches_single_env_shaper(mode, autoreset):
    register_robotics_envs()
    critic = CountingCritic(SubgoalCritic(TASK, make_env(TASK)))
    kw = dict(gamma=0.9, mode=mode, scale=1.5, info_subgoals=True)
    steps = 13
    actions = np.random.default_rng(0).uniform(-1, 1, size=(steps, N, 4)).astype(np.float32)

    venv = gym.make_vec(TASK, num_envs=N, vectorization_mode="sync", max_episode_steps=5,
                        vector_kwargs={"autoreset_mode": autoreset})
    vec = GymVectorPRMRewardShaper(venv, critic, **kw)
    critic.batches.clear()
    vec_out = _rollout(vec, actions)
    # one call at reset, then exactly one per vector step (+ one row per final obs in SAME_STEP mode)
    assert len(critic.batches) == 1 + steps
    extra = [int((t | u).sum()) if autoreset == AutoresetMode.SAME_STEP else 0 for _, t, u, _ in vec_out]
    assert critic.batches == [N] + [N + e for e in extra]

    single = SyncVectorEnv([lambda: PRMRewardShaper(make_env(TASK, max_episode_steps=5), critic, **kw)] * N,
                           autoreset_mode=autoreset)
    single_out = _rollout(single, actions)
    ends = 0
    for t, ((rv, tv, uv, iv), (rs, ts, us, is_)) in enumerate(zip(vec_out, single_out)):
        np.testing.assert_array_equal(tv, ts)
        np.testing.assert_array_equal(uv, us)
        np.testing.assert_allclose(rv, rs, rtol=0, atol=1e-6)
        shaping, live = _inner(is_, "prm_shaping")  # live: the inner shaper's step ran (not an autoreset step)
        np.testing.assert_array_equal(iv["_prm_shaping"], live, err_msg=f"step {t}")
        np.testing.assert_allclose(iv["prm_shaping"][live], np.array(shaping)[live].astype(float), rtol=0, atol=1e-9)
        phi, _ = _inner(is_, "prm_phi")
        np.testing.assert_allclose(iv["prm_phi"][live], np.array(phi)[live].astype(float), rtol=0, atol=1e-9)
        nxt, _ = _inner(is_, "prm_next_x")
        for i in np.flatnonzero(live):
            np.testing.assert_array_equal(iv["prm_next_x"][i], nxt[i])
        for name, flags in iv["prm_subgoals"].items():
            held, _ = _inner(is_, "prm_subgoals", name)
            np.testing.assert_array_equal(flags[live], np.array(held)[live].astype(bool))
        assert np.all(iv["prm_shaping"][~live] == 0.0) and np.all(rv[~live] == 0.0)
        ends += int((uv | tv).sum())
    assert ends >= 8  # episodes of 5 steps: every sub-env ended twice in 13 steps
    if autoreset == AutoresetMode.NEXT_STEP:
        assert not vec_out[5][3]["_prm_shaping"].any()  # step 6 is the no-op step that returned the reset obs
    vec.close()
    single.close()


def test_terminal_rule_and_no_potential_across_the_boundary():
    # env 0 terminates after 2 steps, env 1 truncates after 1 step; NEXT_STEP autoreset
    critic = torch_critic(3, seed=1)
    paths = [[[0.0, 0.0, 0.0], [1.0, 0.5, 0.0], [2.0, 1.0, 0.5]], [[1.0, 1.0, 1.0], [0.0, 1.0, 2.0]]]
    fns = [lambda p=p, t=t: ListEnv(p, terminate_at_end=t) for p, t in zip(paths, (True, False))]
    vec = GymVectorPRMRewardShaper(SyncVectorEnv(fns), critic, gamma=0.8, scale=3.0)
    out = _rollout(vec, np.zeros((6, 2, 1), np.float32))

    def phi(x):
        return float(critic.score(np.asarray(x, np.float32)[None]).progress[0])

    # env 0: steps 1, 2 (terminated: Phi(s') = 0), step 3 autoreset (no shaping), step 4 from the reset obs
    r0 = [o[0][0] for o in out]
    assert r0[0] == pytest.approx(0.5 + 3.0 * (0.8 * phi(paths[0][1]) - phi(paths[0][0])), abs=1e-6)
    assert r0[1] == pytest.approx(0.5 - 3.0 * phi(paths[0][1]), abs=1e-6)
    assert out[1][3]["prm_terminated"][0] and out[1][1][0]
    assert r0[2] == 0.0 and not out[2][3]["_prm_shaping"][0]
    assert r0[3] == pytest.approx(0.5 + 3.0 * (0.8 * phi(paths[0][1]) - phi(paths[0][0])), abs=1e-6)
    # env 1: truncated at step 1 (Phi(s') kept), autoreset at step 2, then a new episode from the reset obs
    r1 = [o[0][1] for o in out]
    assert r1[0] == pytest.approx(0.5 + 3.0 * (0.8 * phi(paths[1][1]) - phi(paths[1][0])), abs=1e-6)
    assert r1[1] == 0.0 and r1[3] == 0.0 and r1[5] == 0.0
    assert r1[2] == pytest.approx(r1[0], abs=1e-9) and r1[4] == pytest.approx(r1[0], abs=1e-9)


def test_deadline_fallback_zeroes_shaping_for_that_step_and_the_next():
    base = torch_critic(3, seed=2)
    critic = SlowCritic(base, fail={2})  # call 0: reset, 1: step 1, 2: step 2 fails
    path = [[float(k), 0.0, 1.0] for k in range(8)]
    vec = GymVectorPRMRewardShaper(SyncVectorEnv([lambda: ListEnv(path)] * 2), critic, gamma=0.9, deadline_s=5.0)
    out = _rollout(vec, np.zeros((4, 2, 1), np.float32))
    shaping = np.array([o[3]["prm_shaping"] for o in out])
    assert [bool(o[3]["prm_fallback"][0]) for o in out] == [False, True, False, False]
    assert np.all(shaping[1] == 0.0) and np.all(shaping[2] == 0.0) and np.all(shaping[[0, 3]] != 0.0)
    assert vec.stats == {"calls": 5, "fallbacks": 1, "timeouts": 0, "errors": 1, "busy": 0}
    assert "critic failure on call 2" in str(vec.last_error)
    vec.close()


def test_refusals():
    register_robotics_envs()
    critic = SubgoalCritic("FetchPush-v4", make_env("FetchPush-v4"))
    with pytest.raises(TypeError, match=r"env: expected a gymnasium\.vector\.VectorEnv for GymVectorPRMRewardShaper"):
        GymVectorPRMRewardShaper(make_env(TASK), critic, gamma=0.9)
    venv = gym.make_vec("FetchPickAndPlace-v4", num_envs=2, vectorization_mode="sync")
    with pytest.raises(ValueError, match=r"'FetchPush-v4'.*'FetchPickAndPlace-v4'.*allow_task_mismatch=True"):
        GymVectorPRMRewardShaper(venv, critic, gamma=0.9)
    off = gym.make_vec(TASK, num_envs=2, vectorization_mode="sync",
                       vector_kwargs={"autoreset_mode": AutoresetMode.DISABLED})
    with pytest.raises(ValueError, match=r"autoreset_mode .*DISABLED.* is not supported"):
        GymVectorPRMRewardShaper(off, SubgoalCritic(TASK, make_env(TASK)), gamma=0.9)
    with pytest.raises(ValueError, match=r"spec: info_subgoals=True needs a task spec"):
        GymVectorPRMRewardShaper(SyncVectorEnv([lambda: ListEnv([[0.0] * 3] * 2)]), torch_critic(3), gamma=0.9,
                              info_subgoals=True)
    bad = GymVectorPRMRewardShaper(SyncVectorEnv([lambda: ListEnv([[0.0] * 3, [np.nan, 0.0, 0.0]])]), torch_critic(3),
                                gamma=0.9, deadline_s=1.0)
    bad.reset(seed=0)
    with pytest.raises(ValueError, match=r"observation: expected finite values, got nan at obs\[0\] \(batch row 0\)"):
        bad.step(np.zeros((1, 1), np.float32))
