"""The SBX backend's whole training state: saved and resumed like stable-baselines3's (JAX train
states with their optimiser states, PRNG keys, replay buffer with HER bookkeeping and relabelling
rows, VecNormalize statistics, RNGs), and refused across backends."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

pytest.importorskip("gymnasium_robotics")
pytestmark = pytest.mark.skipif(importlib.util.find_spec("sbx") is None,
                                reason='sbx is not installed (pip install "prm-critic[sbx]")')

from prm_critic.sb3 import TrainingStateError, load_training_state, train_policy  # noqa: E402
from prm_critic.sb3.callbacks import read_eval_csv  # noqa: E402
from prm_critic.sb3.resume import latest_training_state  # noqa: E402
from sb3_helpers import Killed, KillAt  # noqa: E402

TASK = "FetchPush-v4"  # 50-step episodes
TINY = dict(learning_starts=60, batch_size=16, policy_kwargs=dict(net_arch=[16, 16]))
RUN = dict(critic="subgoal", shaping="potential", scale=5.0, seed=0, normalize_obs=True, backend="sbx",
           progress=False)


def _arrays(model):
    from prm_critic.sb3.backends import sbx_training_arrays

    return sbx_training_arrays(model)


def _continue(model, steps=3):
    np.random.seed(123)  # the replay buffer samples with numpy; JAX draws from the model's own keys
    model.train(gradient_steps=steps, batch_size=16)
    return _arrays(model)


def _same(a, b):
    assert set(a) == set(b)
    for k in a:
        assert a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k]), k


@pytest.mark.parametrize("algo, her", [("sac", True), ("crossq", True), ("tqc", False)])
def test_sbx_state_round_trip_continues_bit_identically(tmp_path, algo, her):
    model = train_policy(TASK, algo=algo, her=her, total_steps=200, log_dir=tmp_path, checkpoint_freq=100,
                         algo_kwargs=TINY, **RUN)
    assert latest_training_state(tmp_path / "resume")["num_timesteps"] == 200
    loaded = train_policy(TASK, algo=algo, her=her, total_steps=200, log_dir=tmp_path, resume=True,
                          algo_kwargs=TINY, **RUN)
    assert loaded.num_timesteps == 200 and loaded._n_updates == model._n_updates
    a, b = _arrays(model), _arrays(loaded)
    _same(a, b)  # train states, optimiser moments and step counts, PRNG keys
    assert any("opt_state" in k for k in a) and any(k.startswith("rng/") for k in a)
    rb0, rb1 = model.replay_buffer, loaded.replay_buffer
    assert rb1.pos == rb0.pos == 200
    for k in rb0.observations:
        np.testing.assert_array_equal(rb0.observations[k][:200], rb1.observations[k][:200])
    if her:
        for k in rb0.prm_rows:
            np.testing.assert_array_equal(rb0.prm_rows[k][:200], rb1.prm_rows[k][:200])
    vn0, vn1 = model.get_vec_normalize_env(), loaded.get_vec_normalize_env()
    for k in vn0.obs_rms:
        np.testing.assert_array_equal(vn0.obs_rms[k].var, vn1.obs_rms[k].var)
    # the next gradient steps on the same samples give the same train states, bit for bit
    _same(_continue(model), _continue(loaded))


def test_killed_sbx_run_resumes_from_its_last_checkpoint(tmp_path):
    kw = dict(her=True, log_dir=tmp_path, checkpoint_freq=100, eval_freq=100, eval_episodes=2, algo_kwargs=TINY,
              **RUN)
    with pytest.raises(Killed):
        train_policy(TASK, algo="sac", total_steps=300, callbacks=[KillAt(250)], **kw)
    assert latest_training_state(tmp_path / "resume")["num_timesteps"] == 200
    model = train_policy(TASK, algo="sac", total_steps=300, resume=True, **kw)
    assert model.num_timesteps == 300 and model.prm_resumed_from == [200]
    assert [r["env_steps"] for r in read_eval_csv(tmp_path / "eval.csv")] == [0, 100, 200, 300]


def test_training_states_are_refused_across_backends(tmp_path):
    sbx_model = train_policy(TASK, algo="sac", her=True, total_steps=100, log_dir=tmp_path / "sbx",
                             checkpoint_freq=100, algo_kwargs=TINY, **RUN)
    sb3_model = train_policy(TASK, algo="sac", her=True, total_steps=100, log_dir=tmp_path / "sb3",
                             checkpoint_freq=100, algo_kwargs=TINY, **{**RUN, "backend": "sb3"})
    with pytest.raises(TrainingStateError, match=r"written by an SBX SAC, got the stable-baselines3 model"):
        load_training_state(tmp_path / "sbx" / "resume", sb3_model)
    with pytest.raises(TrainingStateError, match=r"written by a stable-baselines3 SAC, got the SBX model"):
        load_training_state(tmp_path / "sb3" / "resume", sbx_model)
    # resume=True under the other backend: refused by the run's configuration before anything loads
    with pytest.raises(ValueError, match=r"backend: the training state .* was written with backend='sbx'"):
        train_policy(TASK, algo="sac", her=True, total_steps=200, log_dir=tmp_path / "sbx", resume=True,
                     algo_kwargs=TINY, **{**RUN, "backend": "sb3"})
