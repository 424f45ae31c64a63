"""PRMHerReplayBuffer: relabelled rewards identical to SB3's HerReplayBuffer(copy_info_dict=True) path."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("gymnasium_robotics")
torch = pytest.importorskip("torch")

from stable_baselines3 import HerReplayBuffer  # noqa: E402

from prm_critic.sb3.envs import make_vec_train_env, resolve_critic  # noqa: E402
from prm_critic.sb3.her import PRMHerReplayBuffer  # noqa: E402
from prm_critic.sb3.train import build_model  # noqa: E402
from sb3_helpers import one_torch_thread  # noqa: E402, F401  (the fixture, used by every test here)

pytestmark = pytest.mark.usefixtures("one_torch_thread")

PUSH_CRITIC = Path(__file__).resolve().parents[1] / "benchmarks" / "rl" / "critics" / "push_mc.json"
KW = dict(learning_starts=120, batch_size=64, gamma=0.95, buffer_size=2000, policy_kwargs=dict(net_arch=[16, 16]),
          device="cpu")


def _model(critic, *, shaped: bool, n_envs: int = 1, seed: int = 0):
    venv = make_vec_train_env("FetchPush-v4", n_envs, seed=seed, critic=critic, shaping="potential", scale=10.0,
                              gamma=0.95, head="success", max_episode_steps=20)
    return build_model("sac", venv, her=True, algo_kwargs=dict(KW), seed=seed, shaped=shaped)


@pytest.mark.parametrize("n_envs", [1, 2])
def test_rows_buffer_gives_bit_identical_rewards_and_training(n_envs):
    critic = resolve_critic(PUSH_CRITIC, "FetchPush-v4")  # a learned critic: relabelled goals are re-scored
    old = _model(critic, shaped=False, n_envs=n_envs)  # seeds the global RNGs: learn before building the next
    old.learn(200)
    new = _model(critic, shaped=True, n_envs=n_envs)
    new.learn(200)
    assert type(old.replay_buffer) is HerReplayBuffer and old.replay_buffer.copy_info_dict
    assert type(new.replay_buffer) is PRMHerReplayBuffer
    # training on the same samples with the same rewards: the same weights, bit for bit
    for (k, a), (_, b) in zip(old.policy.state_dict().items(), new.policy.state_dict().items()):
        assert torch.equal(a, b), k
    for seed in range(4):
        np.random.seed(seed)
        a = old.replay_buffer.sample(256)
        np.random.seed(seed)
        b = new.replay_buffer.sample(256)
        assert torch.equal(a.rewards, b.rewards)
        for key in a.observations:
            assert torch.equal(a.observations[key], b.observations[key])
    # the relabelled part really was re-scored: shaping varies beyond the sparse -1/0 reward
    r = b.rewards.numpy().reshape(-1)
    assert len(np.unique(r)) > 10
    assert not new.replay_buffer.copy_info_dict
    assert not any(k.startswith("prm_") for k in new.replay_buffer.infos[0, 0])


def test_rows_buffer_refuses_an_env_without_the_shaper():
    venv = make_vec_train_env("FetchPush-v4", 1, seed=0, max_episode_steps=20)
    with pytest.raises(AttributeError, match="relabel_width"):
        build_model("sac", venv, her=True, algo_kwargs=dict(KW), seed=0, shaped=True)


def test_scale_schedule_rescales_every_sampled_reward_to_the_current_scale():
    from prm_critic.sb3.callbacks import ShapingScaleSchedule
    from prm_critic.sb3.her import SCALE_ROW
    from prm_critic.wrappers.prm_reward_shaper import RelabelRows

    critic = resolve_critic(PUSH_CRITIC, "FetchPush-v4")
    model = _model(critic, shaped=True)
    sched = ShapingScaleSchedule(10.0, 2.0, 200)
    model.learn(300, callback=sched)
    rb, env = model.replay_buffer, model.get_env()
    assert rb.shaping_scale == 2.0 and env.get_attr("scale") == [2.0] and sched.value(100) == 6.0
    n = rb.pos
    paid = rb.prm_rows[SCALE_ROW][:n, 0]
    # every step recorded the scale it was paid at: 10 at the start, 2 from step 200 on, in between on the way
    assert paid[0] == 10.0 and paid[-1] == 2.0 and np.all(np.diff(paid) <= 0) and len(np.unique(paid)) > 100
    valid = np.flatnonzero(rb.ep_length[:n, 0] > 0)
    b = np.random.default_rng(0).choice(valid, 256)
    e = np.zeros_like(b)
    rows_nan = RelabelRows(rb.prm_rows["x"][b, 0], rb.prm_rows["next_x"][b, 0], rb.prm_rows["terminated"][b, 0],
                           np.full(len(b), np.nan))  # NaN: the shaper recomputes every term, at its scale (2)
    # real transitions: stored at their own scale, sampled at 2
    real = rb._get_real_samples(b, e).rewards.numpy().reshape(-1)
    obs = {k: v[b, 0] for k, v in rb.observations.items()}
    nxt = {k: v[b, 0] for k, v in rb.next_observations.items()}
    infos = [dict(d) for d in rb.infos[b, 0]]
    want = env.env_method("compute_reward_rows", nxt["achieved_goal"], obs["desired_goal"], rows_nan, infos,
                          indices=[0])[0]
    np.testing.assert_allclose(real, want, rtol=0, atol=2e-5)
    assert not np.allclose(real, rb.rewards[b, 0], atol=1e-3)  # the stored rewards were paid at other scales
    # relabelled transitions: the same goals drawn twice, once through the rescaled rows, once recomputed
    np.random.seed(1)
    virt = rb._get_virtual_samples(b, e).rewards.numpy().reshape(-1)
    saved = {k: rb.prm_rows[k].copy() for k in ("shaping", SCALE_ROW)}
    rb.prm_rows["shaping"][:] = np.nan
    rb.prm_rows[SCALE_ROW][:] = np.nan
    rb.shaping_scale, rb._built_scale = None, 2.0  # as a buffer built at 2 with no schedule
    np.random.seed(1)
    ref = rb._get_virtual_samples(b, e).rewards.numpy().reshape(-1)
    np.testing.assert_allclose(virt, ref, rtol=0, atol=2e-5)
    rb.prm_rows.update(saved)
    rb.shaping_scale, rb._built_scale = 2.0, 10.0
    # the goal "relabelled" to the stored one: the shaper reuses the paid term, which must be rescaled too
    rb._sample_goals = lambda bi, ei: rb.observations["desired_goal"][bi, ei]
    same = rb._get_virtual_samples(b, e).rewards.numpy().reshape(-1)
    np.testing.assert_allclose(same, want, rtol=0, atol=2e-5)
    # the shaper's scale changed behind the buffer's back: sampling refuses to mix two scales
    env.env_method("set_scale", 3.0)
    with pytest.raises(RuntimeError, match="the shaper pays scale 3.0, this replay buffer 2.0"):
        rb.sample(8)
    env.env_method("set_scale", 2.0)
    unscheduled = _model(critic, shaped=True)
    unscheduled.learn(150)
    unscheduled.get_env().env_method("set_scale", 5.0)
    with pytest.raises(RuntimeError, match="the shaper pays scale 5.0, this replay buffer 10.0; change the scale"):
        unscheduled.replay_buffer.sample(8)
    # a schedule on a buffer that cannot rescale is refused
    plain = _model(critic, shaped=False)
    with pytest.raises(ValueError, match="needs the model's replay buffer to be a PRMHerReplayBuffer .* got "
                                         "HerReplayBuffer"):
        plain.learn(10, callback=ShapingScaleSchedule(10.0, 0.0, 100))


def test_scale_schedule_arguments_are_checked():
    from prm_critic.sb3 import train_policy
    from prm_critic.sb3.callbacks import ShapingScaleSchedule
    from prm_critic.sb3.her import SCALE_ROW
    from prm_critic.sb3.resume import _SCALE_ROW

    assert SCALE_ROW == _SCALE_ROW
    kw = dict(critic="subgoal", shaping="potential", scale=10.0, total_steps=100)
    with pytest.raises(ValueError, match=r"scale_schedule: rescales stored rewards .* got shaping='potential', her=False"):
        train_policy("FetchReach-v4", scale_schedule=dict(end=0.0, steps=10), **kw)
    with pytest.raises(ValueError, match=r"scale_schedule: expected None or a dict with keys end, steps, got \{'end': 0\}"):
        train_policy("FetchReach-v4", her=True, scale_schedule={"end": 0}, **kw)
    with pytest.raises(ValueError, match=r"scale_schedule\['end'\]"):
        train_policy("FetchReach-v4", her=True, scale_schedule=dict(end=-1.0, steps=10), **kw)
    with pytest.raises(ValueError, match=r"scale_schedule\['steps'\]"):
        train_policy("FetchReach-v4", her=True, scale_schedule=dict(end=0.0, steps=0), **kw)
    for bad in (dict(start=0.0, end=0.0, steps=1), dict(start=1.0, end=float("nan"), steps=1),
                dict(start=1.0, end=0.0, steps=-5)):
        with pytest.raises(ValueError):
            ShapingScaleSchedule(**bad)
    venv = make_vec_train_env("FetchPush-v4", 1, seed=0, critic="subgoal", shaping="potential", scale=1.0,
                              gamma=0.95, max_episode_steps=20)
    with pytest.raises(ValueError, match="scale"):
        venv.env_method("set_scale", -0.5)
    venv.env_method("set_scale", 0.0)  # a schedule may end at 0
    assert venv.get_attr("scale") == [0.0]


def test_scale_schedule_resumes_where_it_stopped_and_old_states_restore(tmp_path):
    from prm_critic.sb3 import train_policy
    from prm_critic.sb3.her import SCALE_ROW
    from prm_critic.sb3.resume import _buffer_state, _restore_buffer

    tiny = dict(learning_starts=60, batch_size=32, policy_kwargs=dict(net_arch=[16, 16]))
    kw = dict(critic="subgoal", shaping="potential", scale=10.0, her=True, seed=0, algo_kwargs=tiny,
              log_dir=tmp_path / "run", checkpoint_freq=100, progress=False,
              scale_schedule=dict(end=2.0, steps=150))
    first = train_policy("FetchReach-v4", total_steps=100, **kw)
    before = first.replay_buffer.prm_rows[SCALE_ROW][:100, 0].copy()
    assert first.prm_config["scale_schedule"] == {"end": 2.0, "steps": 150}
    with pytest.raises(ValueError, match=r"scale_schedule: the training state .* was written with "
                                         r"scale_schedule=\{'end': 2.0, 'steps': 150\}, this call has None"):
        train_policy("FetchReach-v4", total_steps=200, resume=True, **{**kw, "scale_schedule": None})
    resumed = train_policy("FetchReach-v4", total_steps=200, resume=True, **kw)
    rb = resumed.replay_buffer
    scales = rb.prm_rows[SCALE_ROW][:rb.pos, 0]
    # the first 100 steps come back as stored; the schedule goes on from step 100 (10 - 8 * 100/150)
    np.testing.assert_array_equal(scales[:100], before)
    assert abs(scales[100] - (10.0 - 8.0 * 100 / 150)) < 8.0 / 150 + 1e-9 and scales[-1] == 2.0
    assert rb.shaping_scale == 2.0
    # a training state written before the scale row existed (no such tensor) restores with NaN rows
    tensors, meta = {}, {}
    _buffer_state(rb, tensors, meta)
    del tensors[f"buffer.prm_rows.{SCALE_ROW}"]
    rb.prm_rows[SCALE_ROW][:] = np.nan
    _restore_buffer(rb, tensors, meta["buffer"])
    assert np.isnan(rb.prm_rows[SCALE_ROW]).all()
    np.testing.assert_array_equal(rb.prm_rows["shaping"][:100, 0], first.replay_buffer.prm_rows["shaping"][:100, 0])
