"""Online critic refresh: a learned critic shared with the shaper is fine-tuned during SB3 training
on the policy's own episodes, and the shaper sees the new weights."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("stable_baselines3")
pytest.importorskip("gymnasium_robotics")

import torch  # noqa: E402

from prm_critic.models import TorchStateCritic, load_state_critic  # noqa: E402
from prm_critic.robotics.make import make_env  # noqa: E402
from prm_critic.robotics.subgoals import SubgoalCritic  # noqa: E402
from prm_critic.sb3 import train_policy  # noqa: E402
from prm_critic.sb3.refresh import CriticRefreshCallback  # noqa: E402
from sb3_helpers import tiny_state_critic  # noqa: E402

torch.set_num_threads(1)


def _fresh_critic():
    net, meta, xs = tiny_state_critic("FetchReach-v4")
    return TorchStateCritic(net, meta), xs


def test_refresh_updates_the_shared_critic(tmp_path):
    critic, xs = _fresh_critic()
    before = critic.score(xs).success.copy()
    w0 = [p.detach().clone() for p in critic.net.parameters()]
    cb = CriticRefreshCallback(critic, refresh_freq=100, window=10, n_updates=20, batch_size=64, lr=1e-2,
                               min_episodes=1, save_path=tmp_path / "critic")
    model = train_policy("FetchReach-v4", algo="sac", critic=critic, shaping="potential", head="success",
                         total_steps=200, seed=0, callbacks=[cb],
                         algo_kwargs=dict(learning_starts=60, batch_size=32, policy_kwargs=dict(net_arch=[16, 16])))
    assert len(cb.history) == 2 and [h["env_steps"] for h in cb.history] == [100, 200]
    for h in cb.history:
        assert np.isfinite(h["loss_before"]) and np.isfinite(h["loss_after"]) and h["n_steps"] >= 51
    # random actions rarely reach the goal: the loss on these episodes goes down with the refresh
    assert cb.history[0]["loss_after"] < cb.history[0]["loss_before"]
    assert any(not torch.equal(a, b) for a, b in zip(w0, critic.net.parameters()))
    # the shaper holds the same critic object, so its potential changed too
    shaper_critic = model.get_env().envs[0].get_wrapper_attr("critic")
    assert shaper_critic is critic
    assert not np.allclose(critic.score(xs).success, before)
    assert critic.net.training is False
    # the refreshed critic was checkpointed (safetensors + JSON) and loads back with the same scores
    reloaded = load_state_critic(tmp_path / "critic")
    np.testing.assert_allclose(reloaded.score(xs).success, critic.score(xs).success, rtol=1e-6)


def test_refresh_rejects_bad_arguments():
    critic, _ = _fresh_critic()
    with pytest.raises(TypeError, match=r"critic: expected a TorchStateCritic.*got SubgoalCritic"):
        CriticRefreshCallback(SubgoalCritic("FetchReach-v4", make_env("FetchReach-v4")))
    with pytest.raises(ValueError, match=r"refresh_freq: expected a positive integer, got 0"):
        CriticRefreshCallback(critic, refresh_freq=0)
    with pytest.raises(ValueError, match=r"label_gamma: expected a number in \(0, 1\], got 1.5"):
        CriticRefreshCallback(critic, label_gamma=1.5)
    with pytest.raises(ValueError, match=r"head: expected 'progress' or 'success', got 'value'"):
        CriticRefreshCallback(critic, head="value")


def test_refresh_outside_training_on_added_episodes():
    """add_episode + refresh work without model.learn: episodes all failed -> success scores drop."""
    critic, xs = _fresh_critic()
    before = critic.score(xs).success.mean()
    cb = CriticRefreshCallback(critic, n_updates=30, batch_size=20, lr=1e-2)
    with pytest.raises(ValueError, match=r"episodes: no finished episode to refresh on"):
        cb.refresh()
    for i in range(4):
        cb.add_episode(xs[i * 5:(i + 1) * 5], success=False)
    row = cb.refresh()
    assert row["n_steps"] == 20 and row["positive_frac"] == 0.0 and row["loss_after"] < row["loss_before"]
    assert critic.score(xs).success.mean() < before
    with pytest.raises(ValueError, match=r"x: expected shape \(T \+ 1, %d\) with T \+ 1 >= 1, got \(3,\)" % critic.obs_dim):
        cb.add_episode(xs[0, :3], success=True)


def test_refresh_benchmark_script_runs_end_to_end(tmp_path):
    """benchmarks/critic_refresh.py on a tiny budget, over 2 splits x 2 training seeds: scripted data ->
    critics -> policy episodes re-split per split seed -> refreshes; the doc has a row per unit and per
    refresh round, the paired differences, and the plot is written; a rerun resumes (adds a seed)."""
    import json

    from benchmarks import critic_refresh as mod

    pol = tmp_path / "pol"
    train_policy("FetchReach-v4", algo="sac", total_steps=100, seed=0, log_dir=pol,
                 algo_kwargs=dict(learning_starts=50, batch_size=32, policy_kwargs=dict(net_arch=[16, 16])))
    table, plot, raw = tmp_path / "t.md", tmp_path / "p.png", tmp_path / "raw.json"
    args = ["--task", "FetchReach-v4", "--policy", str(pol / "policy.json"), "--out", str(tmp_path / "out"),
            "--scripted-episodes", "8", "--refresh-episodes", "3", "--heldout-episodes", "3", "--epochs", "1",
            "--rounds", "1", "3", "--splits", "0", "1", "--table", str(table), "--plot", str(plot), "--raw", str(raw),
            "--no-progress"]
    assert mod.main(args + ["--seeds", "0"]) == 0
    text = table.read_text()
    assert "Missing: 2 of 4 units" not in text and "Split seeds [0, 1], training seeds [0] (2 units)" in text
    assert mod.main(args + ["--seeds", "1"]) == 0  # resumes: the seed-0 units are kept, seed 1 added
    text = table.read_text()
    data = json.loads(raw.read_text())
    (run,) = data["runs"]
    assert sorted((u["split_seed"], u["seed"]) for u in run["units"]) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert sorted(u["split_seed"] for u in run["spec_units"]) == [0, 1]
    for u in run["units"]:
        assert [r["round"] for r in u["rounds"]] == [0, 1, 3]
        assert u["rounds"][0]["policy"]["episodes"] == 3
    assert "Split seeds [0, 1], training seeds [0, 1] (4 units)" in text
    assert "| outcome critic (scripted data) | 0 | 4 |" in text
    assert "| outcome critic, refreshed | 1 | 4 |" in text and "| outcome critic, refreshed | 3 | 4 |" in text
    assert "| refresh improves policy held-out Brier (lower) | after - before | 4 |" in text
    assert "refreshed critic beats the spec critic on policy held-out Brier (lower)" in text
    assert plot.stat().st_size > 0
    assert text == mod.render(data)  # the doc is its raw data


def test_refresh_with_demonstration_positives_and_balanced_batches():
    """success_contrast's refresh: demonstration states seed the success side, batches are half and half."""
    critic, xs = _fresh_critic()
    positives = xs[:4]
    cb = CriticRefreshCallback(critic, n_updates=1, batch_size=10, lr=1e-2, positives=positives, balanced=True)
    for i in range(4):
        cb.add_episode(xs[4 + i * 3:4 + (i + 1) * 3], success=False)
    x, y = cb._dataset()
    assert len(x) == 16 and y.sum() == 4 and np.array_equal(x[-4:], positives)
    seen = []
    orig = critic.net.logits
    critic.net.logits = lambda t: (seen.append(t.detach().numpy().copy()), orig(t))[1]
    cb.refresh()
    batch = seen[1]  # seen[0]: the loss before, on every step
    assert len(batch) == 10 and sum(any(np.array_equal(r, p) for p in positives) for r in batch) == 5
    critic.net.logits = orig
    with pytest.raises(ValueError, match=r"positives: expected critic inputs of shape \(N, %d\)" % critic.obs_dim):
        CriticRefreshCallback(critic, positives=xs[:2, :3])
