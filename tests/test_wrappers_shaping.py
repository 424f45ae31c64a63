"""Potential-based shaping: invariance over closed loops, the terminal rule, modes, deadline; the per-step
path against a plain reference (rewards, infos, potentials, errors) on a dict-observation env of random layouts."""

from __future__ import annotations


import gymnasium as gym
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from prm_critic.wrappers import PRMRewardShaper
from wrappers_helpers import ListEnv, SlowCritic, torch_critic, wait_for_handover

D = 3
_state = st.lists(st.floats(-5, 5, allow_nan=False, width=32), min_size=D, max_size=D)
CRITIC = torch_critic(D, seed=0)


def _phi(x) -> float:
    return float(CRITIC.score(np.asarray(x, np.float32).reshape(1, -1)).progress[0])


def _run(env):
    env.reset(seed=0)
    infos, rewards = [], []
    while True:
        _, r, term, trunc, info = env.step(env.action_space.sample())
        infos.append(info)
        rewards.append(r)
        if term or trunc:
            return rewards, infos


@settings(max_examples=40, deadline=None)
@given(loop=st.lists(_state, min_size=1, max_size=8), scale=st.floats(0.1, 10.0))
def test_closed_loop_earns_zero_net_shaping_with_gamma_one(loop, scale):
    # s0, s1, ..., sn = s0, ending by truncation (so Phi(sn) is kept). With gamma = 1 the shaping
    # telescopes: sum_k (Phi(s_{k+1}) - Phi(s_k)) = Phi(sn) - Phi(s0) = 0. Phi values are float32
    # critic outputs; each difference is exact in float64 and the float64 sum of <= 8 terms of
    # size <= 10 rounds by at most ~1e-14, so 1e-9 is a tolerance only rounding can meet.
    states = loop + [loop[0]]
    env = PRMRewardShaper(ListEnv(states), CRITIC, gamma=1.0, scale=scale)
    rewards, infos = _run(env)
    assert len(infos) == len(states) - 1
    net = sum(i["prm_shaping"] for i in infos)
    assert abs(net) < 1e-9
    assert abs(sum(rewards) - 0.5 * len(infos)) < 1e-9


@settings(max_examples=40, deadline=None)
@given(path=st.lists(_state, min_size=2, max_size=6), scale=st.floats(0.1, 10.0),
       gamma=st.floats(0.5, 1.0), terminate=st.booleans())
def test_terminal_rule(path, scale, gamma, terminate):
    env = PRMRewardShaper(ListEnv(path, terminate_at_end=terminate), CRITIC, gamma=gamma, scale=scale)
    _, infos = _run(env)
    for k, info in enumerate(infos):
        phi_s, phi_n = _phi(path[k]), _phi(path[k + 1])
        assert info["prm_phi"] == pytest.approx(phi_s, abs=1e-7)
        assert info["prm_next_phi"] == pytest.approx(phi_n, abs=1e-7)
        last = k == len(infos) - 1
        if last and terminate:
            expected = -scale * phi_s                        # terminated: Phi(s') = 0
        else:
            expected = scale * (gamma * phi_n - phi_s)       # truncated or mid-episode: Phi(s') kept
        assert info["prm_shaping"] == pytest.approx(expected, abs=1e-6)
        assert info["prm_terminated"] == (last and terminate)
        np.testing.assert_array_equal(info["prm_x"], np.asarray(path[k], np.float32))
        np.testing.assert_array_equal(info["prm_next_x"], np.asarray(path[k + 1], np.float32))


def test_replace_mode_and_subgoal_mode():
    path = [[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [2.0, 1.0, 0.0], [2.0, 1.0, 0.0]]
    env = PRMRewardShaper(ListEnv(path), CRITIC, gamma=0.9, mode="replace", scale=2.0)
    rewards, infos = _run(env)
    for k, r in enumerate(rewards):
        assert r == pytest.approx(2.0 * _phi(path[k + 1]), abs=1e-6)
        assert infos[k]["prm_original_reward"] == 0.5

    spec = {"task": {"name": "toy", "env_id": "toy", "critic_input": ["obs"],
                     "success": {"source": "subgoals"}},
            "subgoals": [{"name": "x_at_1", "a": "obs[0:1]", "b": "obs[2:3]", "threshold": 0.5},
                         {"name": "y_at_0", "a": "obs[1:2]", "b": "obs[2:3]", "threshold": 0.5}]}
    # obs = (x, y, 0): x_at_1 holds when |x| < 0.5, y_at_0 when |y| < 0.5; neither holds at reset.
    path = [[3.0, 3.0, 0.0], [0.2, 3.0, 0.0], [3.0, 3.0, 0.0], [0.1, 0.1, 0.0], [0.0, 0.0, 0.0]]
    env = PRMRewardShaper(ListEnv(path), CRITIC, gamma=0.9, mode="subgoal", subgoal_bonus=5.0, spec=spec,
                          info_subgoals=True)
    _, infos = _run(env)
    # x_at_1 first holds at step 1 (bonus), again at 3 and 4 (already claimed); y_at_0 first at step 3
    assert [i["prm_shaping"] for i in infos] == [5.0, 0.0, 5.0, 0.0]
    assert infos[3]["prm_subgoals"] == {"x_at_1": True, "y_at_0": True}
    # the subgoal flags are opt-in: the same bonus without them in the info
    env = PRMRewardShaper(ListEnv(path), CRITIC, gamma=0.9, mode="subgoal", subgoal_bonus=5.0, spec=spec)
    _, infos = _run(env)
    assert [i["prm_shaping"] for i in infos] == [5.0, 0.0, 5.0, 0.0]
    assert all("prm_subgoals" not in i for i in infos)


def test_deadline_timeout_falls_back_without_blocking():
    path = [[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [2.0, 0.0, 0.0], [3.0, 0.0, 0.0], [4.0, 0.0, 0.0], [5.0, 0.0, 0.0]]
    critic = SlowCritic(CRITIC, delay=3.0, slow={1})  # call 0 = reset, call 1 = first step
    env = PRMRewardShaper(ListEnv(path), critic, gamma=0.9, deadline_s=0.3)
    env.reset(seed=0)
    _, r, _, _, info = env.step(env.action_space.sample())
    assert not critic.finished.is_set()  # the step returned without waiting for the 3 s call
    assert info["prm_fallback"] is True and info["prm_shaping"] == 0.0 and r == 0.5
    assert np.isnan(info["prm_next_phi"])
    # the late call is still running: the next step does not queue behind it (busy -> fallback)
    _, r, _, _, info = env.step(env.action_space.sample())
    assert info["prm_fallback"] is True and r == 0.5
    assert critic.finished.wait(10.0)
    wait_for_handover(env)
    # critic is back: Phi(s') known again, but Phi(s) was unknown -> shaping still 0 this step
    _, r, _, _, info = env.step(env.action_space.sample())
    assert info["prm_fallback"] is False and info["prm_shaping"] == 0.0 and np.isnan(info["prm_phi"])
    _, r, _, _, info = env.step(env.action_space.sample())
    assert info["prm_shaping"] == pytest.approx(0.9 * _phi(path[4]) - _phi(path[3]), abs=1e-6)
    s = env.stats
    assert s["timeouts"] == 1 and s["busy"] == 1 and s["fallbacks"] == 2 and s["errors"] == 0
    assert s["calls"] == 5
    env.close()


def test_deadline_exception_falls_back_and_counts():
    path = [[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [2.0, 0.0, 0.0], [3.0, 0.0, 0.0]]
    critic = SlowCritic(CRITIC, fail={2})
    env = PRMRewardShaper(ListEnv(path), critic, gamma=0.9, deadline_s=1.0)
    _, infos = _run(env)
    assert [i["prm_fallback"] for i in infos] == [False, True, False]
    assert infos[0]["prm_shaping"] == pytest.approx(0.9 * _phi(path[1]) - _phi(path[0]), abs=1e-6)
    assert infos[1]["prm_shaping"] == 0.0 and infos[2]["prm_shaping"] == 0.0  # Phi(s) unknown at step 3
    assert env.stats == {"calls": 4, "fallbacks": 1, "timeouts": 0, "errors": 1, "busy": 0}
    assert isinstance(env.last_error, RuntimeError)


def test_without_deadline_critic_errors_propagate():
    critic = SlowCritic(CRITIC, fail={1})
    env = PRMRewardShaper(ListEnv([[0.0] * 3, [1.0] * 3, [2.0] * 3]), critic, gamma=0.9)
    env.reset()
    with pytest.raises(RuntimeError, match="critic failure"):
        env.step(env.action_space.sample())


# ---------------------------------------------------------------------------------------------------
# The per-step path against a plain reference, on an env outside the built-ins (a dict observation)

KEY_NAMES = ["observation", "achieved_goal", "desired_goal", "joints", "velocity", "sensor"]
OBS_DTYPES = ["float64", "float32", "float16", "int64", "int32", "uint8"]


class DictObsEnv(gym.Env):
    """An env of no built-in task: a ``Dict`` observation of the keys, sizes and dtypes a test draws,
    plus a key no critic reads; observations, rewards (NumPy and Python scalars), terminations and
    truncations (NumPy and Python bools) and info dicts from a seeded generator; ``nan_at``: the step whose observation has a
    NaN in ``nan_key``."""

    metadata = {"render_modes": []}

    def __init__(self, fields: dict[str, tuple[int, str]], *, seed: int, p_end: float = 0.08,
                 nan_at: int | None = None, nan_key: str | None = None, info_prm_key: bool = False):
        self.fields = fields
        spaces = {k: gym.spaces.Box(*((-np.inf, np.inf) if np.dtype(dt).kind == "f" else (0, 200)), shape=(n,),
                                    dtype=np.dtype(dt)) for k, (n, dt) in fields.items()}
        spaces["unread"] = gym.spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float64)
        self.observation_space = gym.spaces.Dict(spaces)
        self.action_space = gym.spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32)
        self.rng = np.random.default_rng(seed)
        self.p_end, self.nan_at, self.nan_key, self.info_prm_key = p_end, nan_at, nan_key, info_prm_key
        self.t = 0

    def _obs(self):
        obs = {}
        for k, (n, dt) in self.fields.items():
            if np.dtype(dt).kind == "f":
                a = (self.rng.standard_normal(n) * 10).astype(dt)
            else:
                a = self.rng.integers(0, 200, n).astype(dt)
            obs[k] = a
        obs["unread"] = self.rng.uniform(-1, 1, 2)
        if self.nan_at is not None and self.t == self.nan_at:
            obs[self.nan_key] = obs[self.nan_key].astype(np.float64)
            obs[self.nan_key][-1] = np.nan
        return obs

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self._obs(), {"episode_start": True}

    def step(self, action):
        self.t += 1
        u = self.rng.random()
        r = [np.float32(u), np.float64(-u), float(u) * 3, int(u * 10)][self.t % 4]
        info = {"t": self.t, "u": u}
        if self.info_prm_key:  # an inner wrapper's key of the same name: replaced in place
            info["prm_phi"] = -1.0
        flag = bool if self.t % 3 else np.bool_  # some envs return NumPy bools
        return self._obs(), r, flag(self.rng.random() < self.p_end), flag(self.rng.random() < self.p_end), info


@st.composite
def dict_envs(draw):
    keys = draw(st.lists(st.sampled_from(KEY_NAMES), min_size=1, max_size=4, unique=True))
    fields = {k: (draw(st.integers(1, 7)), draw(st.sampled_from(OBS_DTYPES))) for k in keys}
    return fields, draw(st.integers(0, 2**32 - 1))


def _dict_critic(kind: str, fields, layout):
    from prm_critic.models.state_critic import StateCriticNet, TorchStateCritic
    from prm_critic.robotics.subgoals import SubgoalCritic

    k0, (n0, _) = next(iter(fields.items()))
    kl, (nl, _) = list(fields.items())[-1]
    if kind == "torch":  # no batch-1 path: the shaper calls score(x[None])
        torch.manual_seed(0)
        return TorchStateCritic(StateCriticNet(layout.obs_dim, hidden=(8,)), {"layout": layout.to_dict()})
    spec = {"task": {"name": "dict_env", "env_id": "DictObs-v0", "critic_input": list(fields),
                     "success": {"source": "subgoals"}},
            "subgoals": [{"name": "first_small", "a": f"{k0}[0:1]", "b": [0.0], "threshold": 6.0, "scale": 20.0},
                         {"name": "last_near", "a": f"{kl}[{nl - 1}:{nl}]", "b": f"{k0}[0:1]", "threshold": 9.0,
                          "scale": 30.0}]}
    return SubgoalCritic(spec, layout=layout)


@settings(max_examples=60, deadline=None)
@given(env_fields=dict_envs(), mode=st.sampled_from(["potential", "potential", "replace", "subgoal"]),
       kind=st.sampled_from(["subgoal", "torch"]), head=st.sampled_from(["progress", "success"]),
       gamma=st.floats(0.5, 1.0), scale=st.floats(-3.0, 3.0), info_subgoals=st.booleans(),
       info_prm_key=st.booleans(), nan=st.booleans(), data=st.data())
def test_shaper_per_step_path_equals_the_reference_on_a_dict_env(env_fields, mode, kind, head, gamma, scale,
                                                                 info_subgoals, info_prm_key, nan, data):
    """Random layouts (1 to 4 keys of any size and numeric dtype) and observations: the shaper's
    rewards, infos (every key, in order, bit for bit) and potentials are the reference's; a NaN in an
    observation raises the error the checked flattening raises, naming the key."""
    from prm_critic.robotics.make import CriticInputLayout
    from prm_critic.robotics.layout import ObsFlattener
    from wrappers_helpers import Recorder, assert_same_info, reference_shaper

    fields, seed = env_fields
    if kind == "torch":
        mode, info_subgoals = ("potential" if mode == "subgoal" else mode), False
    layout = CriticInputLayout(list(fields), {k: n for k, (n, _) in fields.items()})
    critic = _dict_critic(kind, fields, layout)
    nan_at = data.draw(st.integers(1, 30)) if nan else None
    env = Recorder(DictObsEnv(fields, seed=seed, nan_at=nan_at, nan_key=list(fields)[-1], info_prm_key=info_prm_key))
    shaper = PRMRewardShaper(env, critic, gamma=gamma, scale=scale, mode=mode, head=head, info_subgoals=info_subgoals,
                             allow_task_mismatch=kind == "torch")
    got: list = [("reset", shaper.reset(seed=seed)[1])]
    error = None
    for _ in range(40):
        try:
            _, r, term, trunc, info = shaper.step(shaper.action_space.sample())
        except ValueError as exc:
            error = exc
            break
        got.append(("step", (r, info)))
        if term or trunc:
            got.append(("reset", shaper.reset()[1]))
    events = env.events
    if error is not None:  # the observation of the last step event had the NaN
        bad_obs = events[-1][1][0]
        with pytest.raises(ValueError) as ref:
            ObsFlattener(layout).checked(bad_obs)
        assert str(error) == str(ref.value) and f" at {list(fields)[-1]}[" in str(error)
        events = events[:-1]
    else:
        assert nan_at is None or nan_at > 40
    want = reference_shaper(events, critic, layout, gamma=gamma, scale=scale, mode=mode, head=head,
                            info_subgoals=info_subgoals)
    assert [k for k, _ in got] == [k for k, _ in want]
    for (kind_, g), (_, w) in zip(got, want):
        if kind_ == "reset":
            assert_same_info(g, w)
        else:
            assert type(g[0]) is float and g[0] == w[0]
            assert_same_info(g[1], w[1])
