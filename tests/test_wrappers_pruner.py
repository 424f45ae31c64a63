"""DeadEndPruner: truncates (never terminates), counts pruned episodes and steps saved; on FetchPush and
PointMaze the shaper's and the pruner's per-step results (alone and stacked) equal a plain reference."""

from __future__ import annotations

import pytest

pytest.importorskip("gymnasium_robotics")

from prm_critic.robotics.make import make_env  # noqa: E402
from prm_critic.robotics.subgoals import SubgoalCritic  # noqa: E402
from prm_critic.wrappers import DeadEndPruner, PRMRewardShaper  # noqa: E402


def _episode(env, seed):
    env.reset(seed=seed)
    n = 0
    while True:
        _, _, term, trunc, info = env.step(env.action_space.sample())
        n += 1
        if term or trunc:
            return n, term, trunc, info


def test_pruner_truncates_and_counts_steps_saved():
    env = make_env("FetchReach-v4", max_episode_steps=20)
    critic = SubgoalCritic("FetchReach-v4", env)
    # success < 1 until the gripper reaches the goal: with threshold 1 every random episode is a
    # "dead end" and is pruned after exactly `patience` steps
    shaped = PRMRewardShaper(env, critic, gamma=0.98)
    pruner = DeadEndPruner(shaped, critic, threshold=1.0, patience=4)
    assert pruner.max_episode_steps == 20
    for ep in range(3):
        n, term, trunc, info = _episode(pruner, ep)
        assert (n, term, trunc) == (4, False, True)
        assert info["prm_pruned"] is True and info["prm_prune_score"] < 1.0
        # the shaper saw a non-terminal transition: Phi(s') kept
        assert info["prm_terminated"] is False
        assert info["prm_shaping"] == pytest.approx(0.98 * info["prm_next_phi"] - info["prm_phi"], abs=1e-12)
    # the shaper below uses the same critic: the pruner reuses its scores (one critic call per step)
    assert pruner.stats == {"episodes": 3, "pruned_episodes": 3, "steps_saved": 3 * (20 - 4),
                            "prune_rate": 1.0, "critic_calls": 0, "reused_scores": 12, "unknown_scores": 0,
                            "fallbacks": 0, "timeouts": 0, "errors": 0}
    assert shaped.stats["calls"] == 3 * (1 + 4)


def test_pruner_with_low_threshold_lets_episodes_run_out():
    env = make_env("FetchReach-v4", max_episode_steps=10)
    critic = SubgoalCritic("FetchReach-v4", env)
    pruner = DeadEndPruner(env, critic, threshold=0.0, patience=1)
    n, term, trunc, info = _episode(pruner, 0)
    assert (n, term, trunc, info["prm_pruned"]) == (10, False, True, False)
    n, term, trunc, info = _episode(pruner, 1)
    assert n == 10 and pruner.stats["episodes"] == 2 and pruner.stats["pruned_episodes"] == 0
    assert pruner.stats["steps_saved"] == 0 and pruner.stats["prune_rate"] == 0.0
    assert pruner.stats["critic_calls"] == 20 and pruner.stats["reused_scores"] == 0  # no shaper below


def test_pruner_needs_patience_consecutive_low_steps():
    from prm_critic.robotics.make import CriticInputLayout
    from wrappers_helpers import ListEnv

    spec = {"task": {"name": "line", "env_id": "line", "critic_input": ["obs"], "success": {"source": "subgoals"}},
            "subgoals": [{"name": "at_0", "a": "obs[0:1]", "b": "obs[1:2]", "threshold": 0.01, "scale": 1.0}]}
    critic = SubgoalCritic(spec, layout=CriticInputLayout(["obs"], {"obs": 2}))
    # success = 1 - |x|: high, low, low, high, low, low, low -> pruned at step 7 (patience 3)
    xs = [0.0, 0.1, 0.8, 0.8, 0.1, 0.8, 0.8, 0.8, 0.8, 0.8]
    env = ListEnv([[x, 0.0] for x in xs])
    pruner = DeadEndPruner(env, critic, threshold=0.5, patience=3, max_episode_steps=9)
    n, term, trunc, info = _episode(pruner, 0)
    assert (n, term, trunc, info["prm_pruned"]) == (7, False, True, True)
    assert info["prm_prune_score"] == pytest.approx(0.2)
    assert pruner.stats["steps_saved"] == 9 - 7


def test_pruner_never_calls_critic_under_shaper_and_calls_it_when_critic_differs():
    from wrappers_helpers import ListEnv, SlowCritic, torch_critic

    base = torch_critic(3)
    path = [[float(k)] * 3 for k in range(6)]
    critic = SlowCritic(base, fail={2})  # call 0: shaper reset, 1: step 1, 2: step 2 fails
    shaped = PRMRewardShaper(ListEnv(path), critic, gamma=0.9, deadline_s=1.0)
    pruner = DeadEndPruner(shaped, critic, threshold=0.0, patience=1, head="progress")
    assert pruner.shares_shaper
    n, *_ = _episode(pruner, 0)
    assert n == 5
    assert shaped.stats["errors"] == 1 and critic.n == 1 + 5  # one critic call per step in all
    # the step whose shaper call failed has an unknown score: no second call
    assert pruner.stats["critic_calls"] == 0 and pruner.stats["reused_scores"] == 4
    assert pruner.stats["unknown_scores"] == 1
    other = DeadEndPruner(PRMRewardShaper(ListEnv(path), base, gamma=0.9), torch_critic(3, seed=5),
                          threshold=0.0, patience=1)
    assert not other.shares_shaper
    _episode(other, 0)
    assert other.stats["critic_calls"] == 5 and other.stats["reused_scores"] == 0


# ---------------------------------------------------------------------------------------------------
# The per-step paths against a plain reference on real MuJoCo envs: the shaper's rewards, infos and
# potentials, and the pruner's decisions, alone and stacked on the shaper (sharing its critic, or with
# another critic reading the shaper's prm_next_x)

import functools  # noqa: E402

import numpy as np  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@functools.lru_cache(maxsize=None)
def _real(task: str):
    """The env and two SubgoalCritic objects of ``task`` (two objects: a pruner with the second one does
    not share the shaper's critic)."""
    env = make_env(task)
    return env, SubgoalCritic(task, env), SubgoalCritic(task, env)


def _run(env, seed: int, actions: np.ndarray) -> list:
    out = [("reset", env.reset(seed=seed)[1])]
    for a in actions:
        _, r, term, trunc, info = env.step(a)
        out.append(("step", (r, term, trunc, info)))
        if term or trunc:
            out.append(("reset", env.reset()[1]))
    return out


@pytest.mark.parametrize("task", ["FetchPush-v4", "PointMaze_UMaze-v3"])
@settings(max_examples=5, deadline=None)
@given(seed=st.integers(0, 2**16), n=st.integers(1, 60), gamma=st.floats(0.8, 1.0), scale=st.floats(0.1, 5.0),
       threshold=st.floats(0.0, 1.0), patience=st.integers(1, 6), info_subgoals=st.booleans())
def test_per_step_paths_equal_the_reference_on_real_envs(task, seed, n, gamma, scale, threshold, patience,
                                                         info_subgoals):
    from prm_critic.robotics.layout import ObsFlattener
    from wrappers_helpers import Recorder, assert_same_info, reference_heads, reference_pruner, reference_shaper

    base, critic, other = _real(task)
    layout = critic.layout
    actions = np.random.default_rng(seed).uniform(-1, 1, (n, base.action_space.shape[0])).astype(np.float32)

    def shaper(env):
        return PRMRewardShaper(env, critic, gamma=gamma, scale=scale, info_subgoals=info_subgoals)

    def score(c):  # the pruner's score of s' computed the plain way
        return lambda obs, info: reference_heads(c, ObsFlattener(layout).checked(obs))["success"]

    stacks = {  # name: (wrapper, its recorder, the pruner's critic or None)
        "shaper": (shaper(rec := Recorder(base)), rec, None),
        "pruner sharing the shaper's critic": (DeadEndPruner(shaper(rec := Recorder(base)), critic,
                                                             threshold=threshold, patience=patience), rec, critic),
        "pruner with another critic over the shaper": (DeadEndPruner(shaper(rec := Recorder(base)), other,
                                                                     threshold=threshold, patience=patience), rec, other),
        "pruner alone": (DeadEndPruner(rec := Recorder(base), other, threshold=threshold, patience=patience), rec, other),
    }
    assert stacks["pruner sharing the shaper's critic"][0].shares_shaper
    assert stacks["pruner with another critic over the shaper"][0]._reads_shaper_x
    for name, (env, rec, prune_critic) in stacks.items():
        got = _run(env, seed, actions)
        events = rec.events
        assert len(got) == len(events), name
        # what the pruner sees below it, per event: the reset info, or (reward, info) of the step
        if name == "pruner alone":
            below = [(k, d[1] if k == "reset" else (d[1], d[4])) for k, d in events]
        else:
            below = reference_shaper(events, critic, layout, gamma=gamma, scale=scale, info_subgoals=info_subgoals)
        if prune_critic is None:
            want = [(k, d if k == "reset" else (*d, False)) for k, d in below]
        else:
            pruned = iter(reference_pruner(events, [d[1] for k, d in below if k == "step"], score(prune_critic),
                                           threshold=threshold, patience=patience))
            want = [(k, d if k == "reset" else (d[0], *reversed(next(pruned)))) for k, d in below]
        for (kind, g), (_, w), (_, ev) in zip(got, want, events):
            if kind == "reset":
                assert_same_info(g, w)
                continue
            r, term, trunc, info = g
            w_r, w_info, w_pruned = w
            assert r == w_r and type(r) is type(w_r), name
            assert term == ev[2] and trunc == (bool(ev[3]) or w_pruned), name
            assert_same_info(info, w_info)
