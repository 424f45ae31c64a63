"""Resumable SB3 training (prm_critic.sb3.resume): the whole training state round-trips through
safetensors + JSON so that training continues exactly where it stopped; a killed run resumes from
its last checkpoint; a finished run can be extended; mismatched settings are refused."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("stable_baselines3")
pytest.importorskip("sb3_contrib")
pytest.importorskip("gymnasium_robotics")

import torch  # noqa: E402

from prm_critic.sb3 import read_eval_csv, train_policy  # noqa: E402
from sb3_helpers import Killed, KillAt  # noqa: E402
from prm_critic.sb3.resume import (  # noqa: E402
    TrainingStateError,
    latest_training_state,
    load_training_state,
)

torch.set_num_threads(1)

TASK = "FetchReach-v4"  # 50-step episodes
TINY = dict(learning_starts=60, batch_size=32, policy_kwargs=dict(net_arch=[16, 16]))
RUN = dict(critic="subgoal", shaping="potential", scale=5.0, seed=0, normalize_obs=True)


def _params(model):
    out = {f"p.{k}": v.detach().clone() for k, v in model.policy.state_dict().items()}
    if getattr(model, "log_ent_coef", None) is not None:
        out["log_ent_coef"] = model.log_ent_coef.detach().clone()
    return out


def _continue(model, steps=3):
    torch.manual_seed(123)
    np.random.seed(123)
    model.train(gradient_steps=steps, batch_size=32)
    return _params(model)


@pytest.mark.parametrize("algo,her", [("sac", True), ("tqc", False)])
def test_state_round_trip_continues_identically(tmp_path, algo, her):
    model = train_policy(TASK, algo=algo, her=her, total_steps=200, log_dir=tmp_path, checkpoint_freq=100,
                         algo_kwargs=TINY, **RUN)
    assert sorted(p.name for p in (tmp_path / "resume").iterdir()) == [
        "latest.json", "state-200.json", "state-200.safetensors"]  # older states are dropped
    assert latest_training_state(tmp_path / "resume")["num_timesteps"] == 200
    # same recipe, same budget, resume=True: nothing left to train, the state is loaded
    loaded = train_policy(TASK, algo=algo, her=her, total_steps=200, log_dir=tmp_path, resume=True,
                          algo_kwargs=TINY, **RUN)
    assert loaded.num_timesteps == 200 and loaded._n_updates == model._n_updates
    a, b = _params(model), _params(loaded)
    assert all(torch.equal(a[k], b[k]) for k in a)
    rb0, rb1 = model.replay_buffer, loaded.replay_buffer
    assert rb1.pos == rb0.pos == 200
    obs0 = rb0.observations if isinstance(rb0.observations, dict) else {"": rb0.observations}
    obs1 = rb1.observations if isinstance(rb1.observations, dict) else {"": rb1.observations}
    for k in obs0:
        np.testing.assert_array_equal(obs0[k][:200], obs1[k][:200])
    np.testing.assert_array_equal(rb0.rewards[:200], rb1.rewards[:200])
    vn0, vn1 = model.get_vec_normalize_env(), loaded.get_vec_normalize_env()
    for k in vn0.obs_rms:
        np.testing.assert_array_equal(vn0.obs_rms[k].mean, vn1.obs_rms[k].mean)
    if her:  # HER bookkeeping and the shaper's relabelling rows (PRMHerReplayBuffer) came back
        np.testing.assert_array_equal(rb0.ep_length[:200], rb1.ep_length[:200])
        assert set(rb1.prm_rows) == {"x", "next_x", "terminated", "shaping", "scale"}
        for k in rb0.prm_rows:
            np.testing.assert_array_equal(rb0.prm_rows[k][:200], rb1.prm_rows[k][:200])
        assert not np.isnan(rb1.prm_rows["shaping"][:200]).any()
        assert "is_success" in rb1.infos[17, 0]
    # optimiser moments, entropy coefficient, buffer and normalisation all restored: the next gradient
    # steps (same sampling seed) give the same weights
    a, b = _continue(model), _continue(loaded)
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.slow
def test_killed_run_resumes_from_its_last_checkpoint(tmp_path):
    kw = dict(her=True, log_dir=tmp_path, checkpoint_freq=100, eval_freq=100, eval_episodes=2, algo_kwargs=TINY, **RUN)
    with pytest.raises(Killed):
        train_policy(TASK, total_steps=400, callbacks=[KillAt(300)], **kw)
    assert latest_training_state(tmp_path / "resume")["num_timesteps"] == 200
    # the evaluation at 300 was logged after the last checkpoint
    assert [r["env_steps"] for r in read_eval_csv(tmp_path / "eval.csv")] == [0, 100, 200, 300]
    model = train_policy(TASK, total_steps=400, resume=True, **kw)
    assert model.num_timesteps == 400 and model.prm_resumed_from == [200]
    rows = read_eval_csv(tmp_path / "eval.csv")
    assert [r["env_steps"] for r in rows] == [0, 100, 200, 300, 400]  # 300 evaluated again, once
    walls = [r["train_wall_s"] for r in rows]
    assert walls == sorted(walls) and walls[-1] > walls[2]  # wall-clock continues across the resume
    assert model.prm_stats.n_episodes == 8 and len(model.prm_stats.history) == 8  # 4 restored + 4 new
    assert (tmp_path / "logs" / "progress.until-200.csv").is_file()
    assert json.loads((tmp_path / "policy.json").read_text())["num_timesteps"] == 400


def test_finished_run_is_extended_and_the_buffer_may_grow(tmp_path):
    kw = dict(her=True, log_dir=tmp_path, checkpoint_freq=100, **RUN)
    train_policy(TASK, total_steps=200, algo_kwargs=TINY, **kw)
    bigger = dict(TINY, buffer_size=3000)  # buffer_size is not part of the run's identity
    model = train_policy(TASK, total_steps=300, resume=True, algo_kwargs=bigger, **kw)
    assert model.num_timesteps == 300 and model.replay_buffer.buffer_size == 3000
    assert model.replay_buffer.pos == 300 and model.prm_stats.n_episodes == 6


def test_ppo_resumes(tmp_path):
    kw = dict(algo="ppo", log_dir=tmp_path, checkpoint_freq=64, **RUN,
              algo_kwargs=dict(n_steps=64, batch_size=32, n_epochs=1, policy_kwargs=dict(net_arch=[16, 16])))
    train_policy(TASK, total_steps=128, **kw)
    meta = latest_training_state(tmp_path / "resume")
    assert meta["num_timesteps"] == 128 and set(meta["optimizers"]) == {"policy"} and "buffer" not in meta
    model = train_policy(TASK, total_steps=256, resume=True, **kw)
    assert model.num_timesteps == 256 and model.prm_resumed_from == [128]


def test_resume_refuses_other_settings_and_bad_arguments(tmp_path):
    train_policy(TASK, total_steps=100, log_dir=tmp_path, checkpoint_freq=100, algo_kwargs=TINY, **RUN)
    with pytest.raises(ValueError, match=r"scale: the training state in .* was written with scale=5\.0, this call has 2\.0"):
        train_policy(TASK, total_steps=200, log_dir=tmp_path, resume=True, algo_kwargs=TINY, **{**RUN, "scale": 2.0})
    with pytest.raises(ValueError, match=r"log_dir: checkpoint_freq=10 / resume=False need a log_dir, got None"):
        train_policy(TASK, total_steps=100, checkpoint_freq=10, **RUN)
    with pytest.raises(ValueError, match=r"checkpoint_freq: expected None or a positive integer, got 0"):
        train_policy(TASK, total_steps=100, log_dir=tmp_path, checkpoint_freq=0, **RUN)
    with pytest.raises(TrainingStateError, match="no training state"):
        load_training_state(tmp_path / "nowhere", None)


def test_a_training_state_without_a_backend_resumes_as_sb3(tmp_path):
    """States written before train_policy had a backend hold no ``backend`` in their config: they are sb3's."""
    train_policy(TASK, total_steps=100, log_dir=tmp_path, checkpoint_freq=100, algo_kwargs=TINY, **RUN)
    meta_path = tmp_path / "resume" / json.loads((tmp_path / "resume" / "latest.json").read_text())["meta"]
    meta = json.loads(meta_path.read_text())
    assert meta["extra"]["config"].pop("backend") == "sb3"
    meta_path.write_text(json.dumps(meta))
    model = train_policy(TASK, total_steps=200, log_dir=tmp_path, resume=True, algo_kwargs=TINY, **RUN)
    assert model.num_timesteps == 200 and model.prm_resumed_from == [100]


def test_cli_checkpoints_and_resumes(tmp_path, capsys):
    from prm_critic.cli import main

    args = ["train-policy", "--task", TASK, "--critic", "subgoal", "--her", "--seed", "0", "--out", str(tmp_path),
            "--checkpoint-freq", "100", "--algo-kwargs", json.dumps(TINY)]
    assert main([*args, "--steps", "100"]) == 0, capsys.readouterr().err
    assert latest_training_state(tmp_path / "resume")["num_timesteps"] == 100
    assert main([*args, "--steps", "200", "--resume"]) == 0, capsys.readouterr().err
    assert "for 200 steps" in capsys.readouterr().out
    assert latest_training_state(tmp_path / "resume")["extra"]["resumed_from"] == [100]


@pytest.mark.slow
def test_episode_in_progress_at_the_checkpoint_is_never_relabelled(tmp_path):
    """PointMaze episodes last up to 300 steps: the checkpoint at 450 cuts the second one in the
    middle. After the resume its transitions keep ep_length 0 (HER never samples them) and new
    episodes start at the checkpoint's buffer position."""
    kw = dict(her=True, log_dir=tmp_path, checkpoint_freq=450, algo_kwargs=dict(TINY, learning_starts=301), **RUN)
    with pytest.raises(Killed):
        train_policy("PointMaze_UMaze-v3", total_steps=700, callbacks=[KillAt(500)], **kw)
    model = train_policy("PointMaze_UMaze-v3", total_steps=700, resume=True, **kw)
    rb = model.replay_buffer
    assert model.num_timesteps == 700 and model.prm_resumed_from == [450]
    cut = int(rb.ep_start[449, 0])
    assert cut < 450 and (rb.ep_length[cut:450, 0] == 0).all()  # the cut episode: never sampled
    assert (rb.ep_length[:cut, 0] > 0).all()                      # complete ones before it: sampled
    assert (rb.ep_start[450:700, 0] >= 450).all()                 # episodes after the resume start anew
