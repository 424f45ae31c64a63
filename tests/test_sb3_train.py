"""Smoke tests of SB3 training with PRM rewards: every algorithm path trains a few hundred steps on
a real MuJoCo env wrapped with the shaper and the pruner, saves safetensors + JSON, loads, and
predicts the same deterministic actions; the learner stores the *shaped* reward; logs carry both
the shaped and the original return."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

pytest.importorskip("stable_baselines3")
pytest.importorskip("sb3_contrib")
pytest.importorskip("gymnasium_robotics")

import torch  # noqa: E402

from prm_critic.robotics.make import make_env  # noqa: E402
from prm_critic.sb3 import load_policy, predict, read_eval_csv, train_policy  # noqa: E402

torch.set_num_threads(1)

BaseCallback = pytest.importorskip("stable_baselines3.common.callbacks").BaseCallback

TASK = "FetchReach-v4"
TINY_OFF = dict(learning_starts=60, batch_size=32, policy_kwargs=dict(net_arch=[16, 16]))
TINY_PPO = dict(n_steps=64, batch_size=32, n_epochs=1, policy_kwargs=dict(net_arch=[16, 16]))
SCALE = 5.0
PRUNE = dict(threshold=0.2, patience=10)


class RecordInfos(BaseCallback):
    """Keeps what the vec env returned at each step: the reward and the shaper's info keys."""

    def __init__(self):
        super().__init__()
        self.rewards, self.original, self.shaping, self.truncated = [], [], [], []

    def _on_step(self) -> bool:
        info = self.locals["infos"][0]
        self.rewards.append(float(self.locals["rewards"][0]))
        self.original.append(float(info["prm_original_reward"]))
        self.shaping.append(float(info["prm_shaping"]))
        self.truncated.append(bool(self.locals["dones"][0] and info.get("TimeLimit.truncated", False)))
        return True


def _obs_batch(n=8):
    env = make_env(TASK)
    out = []
    for i in range(n):
        o, _ = env.reset(seed=100 + i)
        out.append(o)
    env.close()
    return out


@pytest.mark.parametrize("algo,her,steps,norm", [
    ("sac", False, 160, False), ("tqc", False, 160, False), ("ppo", False, 128, True), ("sac", True, 160, True),
    ("tqc", True, 160, False),
])
def test_algorithm_paths_train_save_load_predict(tmp_path, algo, her, steps, norm):
    rec = RecordInfos()
    model = train_policy(TASK, algo=algo, critic="subgoal", shaping="potential", scale=SCALE, her=her,
                         prune=PRUNE, total_steps=steps, seed=0, log_dir=tmp_path, normalize_obs=norm,
                         algo_kwargs=TINY_PPO if algo == "ppo" else TINY_OFF, callbacks=[rec])
    # the learner received the shaped reward, not the original one
    shaped = np.asarray(rec.rewards)
    np.testing.assert_allclose(shaped, np.asarray(rec.original) + np.asarray(rec.shaping), rtol=1e-5, atol=1e-5)
    assert np.abs(shaped - np.asarray(rec.original)).max() > 1e-3
    if algo == "ppo":
        # PPO adds gamma * V(s') to the reward of truncated steps (bootstrap): compare the others
        stored = model.rollout_buffer.rewards[:, 0]
        keep = ~np.asarray(rec.truncated[-len(stored):])
        assert keep.sum() > len(stored) // 2
        np.testing.assert_allclose(stored[keep], shaped[-len(stored):][keep], rtol=1e-5, atol=1e-5)
    else:
        n = model.replay_buffer.pos
        stored = model.replay_buffer.rewards[:n, 0]
        np.testing.assert_allclose(stored, shaped[:n], rtol=1e-5, atol=1e-5)
        assert not np.allclose(stored, np.asarray(rec.original)[:n])
    # one source of truth for gamma: the shaper inside the vec env uses the algorithm's gamma
    assert model.get_env().get_attr("gamma") == [model.gamma]
    # pruning happened (threshold 0.2 on a random policy) and was counted
    assert model.prm_stats.pruned_episodes > 0
    # checkpoint: safetensors + JSON, no pickle; load -> same deterministic actions
    assert (tmp_path / "policy.safetensors").is_file() and (tmp_path / "policy.json").is_file()
    meta = json.loads((tmp_path / "policy.json").read_text())
    assert meta["algo"] == algo and meta["her"] is her and meta["gamma"] == pytest.approx(model.gamma)
    assert meta["extra"]["shaping"] == "potential" and meta["extra"]["critic"] == "subgoal"
    assert not list(tmp_path.glob("*.zip")) and not list(tmp_path.glob("*.pkl"))
    loaded = load_policy(tmp_path / "policy")
    assert type(loaded).__name__ == type(model).__name__
    assert (meta["vec_normalize"] is not None) is norm
    assert (loaded.get_vec_normalize_env() is not None) is norm
    for obs in _obs_batch():
        a, _ = predict(model, obs, deterministic=True)
        b, _ = predict(loaded, obs, deterministic=True)
        np.testing.assert_array_equal(a, b)
    if norm:  # the statistics matter: raw observations give other actions
        obs = _obs_batch(1)[0]
        assert not np.allclose(predict(loaded, obs)[0], loaded.predict(obs, deterministic=True)[0])


def test_her_relabelled_rewards_include_shaping(tmp_path):
    model = train_policy(TASK, algo="sac", critic="subgoal", shaping="potential", scale=SCALE, her=True,
                         total_steps=160, seed=1, algo_kwargs=TINY_OFF)
    rb = model.replay_buffer
    assert type(rb).__name__ == "PRMHerReplayBuffer"  # relabels from compact rows, not copied info dicts
    batch = rb.sample(256, env=None)
    r = batch.rewards.numpy().reshape(-1)
    # Fetch's own reward is 0 or -1; the relabelled rewards carry the potential term
    assert np.mean(np.isclose(r, 0.0) | np.isclose(r, -1.0)) < 0.5
    # relabelled rewards equal the shaper's compute_reward (base reward + shaping for the new goal)
    env = model.get_env()
    idx = np.arange(min(rb.pos, 40))
    from prm_critic.wrappers import RelabelRows

    rows = RelabelRows(*(rb.prm_rows[k][idx, 0] for k in ("x", "next_x", "terminated", "shaping")))
    g = np.tile(rb.next_observations["achieved_goal"][idx[-1], 0], (len(idx), 1))
    via_env = np.asarray(env.env_method("compute_reward_rows", rb.next_observations["achieved_goal"][idx, 0], g,
                                        rows)[0])
    base = -(np.linalg.norm(rb.next_observations["achieved_goal"][idx, 0] - g, axis=-1) > 0.05).astype(np.float64)
    assert np.abs(via_env - base).max() > 1e-3


def test_logs_show_shaped_and_original_returns(tmp_path):
    model = train_policy(TASK, algo="sac", critic="subgoal", shaping="potential", scale=SCALE,
                         total_steps=250, seed=0, eval_freq=125, eval_episodes=2, log_dir=tmp_path,
                         algo_kwargs=TINY_OFF)
    with open(tmp_path / "logs" / "progress.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f)]
    last = [r for r in rows if r.get("prm/ep_return_original")][-1]
    shaped, original = float(last["rollout/ep_rew_mean"]), float(last["prm/ep_return_original"])
    assert float(last["prm/ep_return_shaped"]) == pytest.approx(shaped, abs=1e-3)
    assert original <= 0 and original == pytest.approx(round(original))  # Fetch: -1 per unsolved step
    assert abs(shaped - original) > 1e-3
    for key in ("prm/phi_mean", "prm/shaping_mean", "prm/pruned_episodes", "prm/subgoal_hit/gripper_at_goal",
                "prm/train_success", "eval/unshaped_success_rate"):
        assert key in last, key
    # the unshaped evaluation: rows at 0, 125, 250 with the env's own returns (-1 per step, 50 steps)
    ev = read_eval_csv(tmp_path / "eval.csv")
    assert [r["env_steps"] for r in ev] == [0, 125, 250]
    for r in ev:
        assert -50 <= r["mean_return"] <= 0 and r["mean_length"] == 50 and r["n_episodes"] == 2
        assert 0 <= r["success_rate"] <= 1
    hist = model.prm_stats.history
    assert hist and all(h["r_original"] == pytest.approx(round(h["r_original"])) for h in hist)


@pytest.mark.parametrize("algo", ["sac", "ppo"])
def test_final_eval_row_describes_the_saved_policy(tmp_path, algo, monkeypatch):
    """SB3 calls callbacks before a step's gradient updates: the evaluation due at the last step is
    re-run after them, so the last row (memory and CSV) scores the saved policy, once per step."""
    from prm_critic.sb3 import UnshapedSuccessEval, read_eval_csv

    def fingerprint(model):
        return float(sum(p.detach().double().abs().sum() for p in model.policy.parameters()))

    seen = []  # the weights each evaluation ran with
    original = UnshapedSuccessEval.evaluate
    monkeypatch.setattr(UnshapedSuccessEval, "evaluate", lambda self, m: seen.append(fingerprint(m)) or original(self, m))
    steps = 128 if algo == "ppo" else 300
    model = train_policy(TASK, algo=algo, total_steps=steps, seed=0, eval_freq=steps // 2, eval_episodes=3,
                         log_dir=tmp_path, normalize_obs=True, algo_kwargs=TINY_PPO if algo == "ppo" else TINY_OFF)
    rows = read_eval_csv(tmp_path / "eval.csv")
    assert [r["env_steps"] for r in rows] == [0, steps // 2, steps]
    assert [r["mean_return"] for r in rows] == pytest.approx([r["mean_return"] for r in model.prm_eval.rows])
    assert seen[-1] == fingerprint(model)                       # the last row used the final weights ...
    assert seen[-2] != seen[-1]                                 # ... not those from before the last updates
    assert fingerprint(load_policy(tmp_path / "policy")) == pytest.approx(seen[-1], rel=1e-6)  # = the saved policy
