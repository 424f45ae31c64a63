"""Trained state critic: soft-label training, pairwise ranking, evaluation metrics, checkpoints,
input validation, resume, a real PointMaze case and the ``train-critic`` CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from prm_critic.critic import BaseCritic, StepScores, check_critic
from prm_critic.models.checkpoint import CheckpointError, load_state_critic, save_state_critic
from prm_critic.models.evaluate import (
    _early_mask,
    auroc,
    evaluate_state_critic,
    plot_episode_scores,
    rankdata,
    spearman,
)
from prm_critic.models.state_critic import TorchStateCritic
from prm_critic.models.train import TrainConfig, sample_pairs, train_state_critic

SMALL = dict(hidden=(32, 32), batch_size=128)


def _episodes(n_ep: int, length: int, rng):
    ep = np.repeat(np.arange(n_ep), length)
    t = np.tile(np.arange(length), n_ep)
    return ep, t


def _separable(n_ep: int, length: int, seed: int):
    """Episodes whose outcome is visible in feature 0 at every step."""
    rng = np.random.default_rng(seed)
    ep, t = _episodes(n_ep, length, rng)
    ys = rng.random(n_ep) < 0.5
    x = rng.normal(size=(n_ep * length, 4)).astype(np.float32)
    x[:, 0] += np.where(ys[ep], 1.5, -1.5)
    return x, ep, t, ys[ep]


# --------------------------------------------------------------------------- training behaviour


def test_separable_problem_reaches_high_auroc_and_shuffled_labels_do_not():
    x, ep, t, y = _separable(240, 10, seed=0)
    xv, epv, tv, yv = _separable(120, 10, seed=1)
    cfg = TrainConfig(epochs=8, lr=3e-3, seed=0, **SMALL)
    net, hist = train_state_critic(x, t / 9, y.astype(float), episode=ep, t=t, ep_success=y, config=cfg,
                                   progress_bar=False)
    m = evaluate_state_critic(TorchStateCritic(net), xv, episode=epv, t=tv, ep_success=yv)
    assert m["auroc_success"] > 0.9, m
    assert m["auroc_success_early"] > 0.9, m
    assert hist["epochs_run"] == 8 and hist["loss"][-1] < hist["loss"][0]

    # control: episode outcomes shuffled across episodes (train and held-out alike), so the labels
    # carry no information about x: the same training must not reach a high held-out AUROC
    def shuffle(lab, n_ep, seed):
        return lab.reshape(n_ep, 10)[np.random.default_rng(seed).permutation(n_ep)].reshape(-1)

    y_shuf, yv_shuf = shuffle(y, 240, 5), shuffle(yv, 120, 6)
    net_c, _ = train_state_critic(x, t / 9, y_shuf.astype(float), episode=ep, t=t, ep_success=y_shuf, config=cfg,
                                  progress_bar=False)
    mc = evaluate_state_critic(TorchStateCritic(net_c), xv, episode=epv, t=tv, ep_success=yv_shuf)
    assert abs(mc["auroc_success"] - 0.5) < 0.15, mc


def test_soft_labels_are_not_rounded():
    rng = np.random.default_rng(0)
    ep, t = _episodes(50, 20, rng)
    x = rng.normal(size=(1000, 3)).astype(np.float32)
    lab = np.full(1000, 0.7)
    net, _ = train_state_critic(x, lab, lab, episode=ep, t=t, ep_success=np.ones(1000, bool),
                                config=TrainConfig(epochs=10, lr=3e-3, **SMALL), progress_bar=False)
    sc = TorchStateCritic(net).score(rng.normal(size=(200, 3)))
    assert abs(sc.progress.mean() - 0.7) < 0.05, sc.progress.mean()
    assert abs(sc.success.mean() - 0.7) < 0.05, sc.success.mean()
    assert sc.progress.max() < 0.9 and sc.progress.min() > 0.5


def test_masked_success_labels_are_ignored():
    """Success labels outside the mask (NaN, or a wrong value) do not affect training."""
    rng = np.random.default_rng(0)
    ep, t = _episodes(50, 20, rng)
    x = rng.normal(size=(1000, 3)).astype(np.float32)
    succ = np.full(1000, 0.2)
    mask = rng.random(1000) < 0.5
    s_nan = np.where(mask, succ, np.nan)
    s_bad = np.where(mask, succ, 1.0)
    cfg = TrainConfig(epochs=3, **SMALL)
    kw = dict(episode=ep, t=t, ep_success=np.ones(1000, bool), mask=mask, config=cfg, progress_bar=False)
    n1, _ = train_state_critic(x, np.full(1000, 0.5), s_nan, **kw)
    n2, _ = train_state_critic(x, np.full(1000, 0.5), s_bad, **kw)
    for a, b in zip(n1.state_dict().values(), n2.state_dict().values()):
        assert torch.equal(a, b)
    n3, _ = train_state_critic(x, np.full(1000, 0.5), np.where(mask, succ, 1.0), **{**kw, "mask": None})
    assert not torch.equal(n1.head.bias, n3.head.bias)


def test_pairwise_loss_orders_steps_when_pointwise_labels_are_uninformative():
    """Progress label constant (uninformative about time); feature 0 drifts with time.
    Only the pairwise loss can make progress increase along successful episodes."""
    rng = np.random.default_rng(0)
    n_ep, L = 60, 20
    ep, t = _episodes(n_ep, L, rng)
    x = rng.normal(size=(n_ep * L, 3)).astype(np.float32)
    x[:, 0] = t / L + rng.normal(0, 0.05, n_ep * L)
    ok = np.ones(n_ep * L, bool)
    lab = np.full(n_ep * L, 0.5)
    res = {}
    for w in (0.0, 1.0):
        cfg = TrainConfig(epochs=6, lr=3e-3, pairwise_weight=w, **SMALL)
        net, hist = train_state_critic(x, lab, lab, episode=ep, t=t, ep_success=ok, config=cfg, progress_bar=False)
        res[w] = evaluate_state_critic(TorchStateCritic(net), x, episode=ep, t=t, ep_success=ok)
        assert (hist["n_pair_episodes"] > 0) == (w > 0)
    assert res[1.0]["spearman_progress_time"] > 0.8, res
    assert res[1.0]["spearman_progress_time"] > res[0.0]["spearman_progress_time"] + 0.3, res
    assert res[1.0]["spearman_success_time"] > 0.8, res


def test_sample_pairs_are_ordered_within_successful_episodes():
    ep = np.array([0, 0, 0, 1, 1, 2, 2, 2, 3])
    t = np.array([2, 0, 1, 0, 1, 5, 3, 4, 0])
    ok = np.array([1, 1, 1, 0, 0, 1, 1, 1, 1], bool)  # episode 3 has one step: no pair
    i, j = sample_pairs(ep, t, ok, 500, seed=0)
    assert len(i) == 500
    assert np.all(ep[i] == ep[j]) and np.all(t[i] < t[j]) and np.all(ok[i])
    assert set(np.unique(ep[i])) == {0, 2}
    assert len(sample_pairs(ep, t, np.zeros(9, bool), 5)[0]) == 0


def test_training_is_deterministic_and_resumes_after_a_kill(tmp_path):
    x, ep, t, y = _separable(40, 10, seed=0)
    cfg = TrainConfig(epochs=4, pairwise_weight=0.5, val_fraction=0.25, **SMALL)
    kw = dict(episode=ep, t=t, ep_success=y, config=cfg, progress_bar=False)
    ref, href = train_state_critic(x, t / 9, y.astype(float), **kw)
    again, _ = train_state_critic(x, t / 9, y.astype(float), **kw)
    assert all(torch.equal(a, b) for a, b in zip(ref.state_dict().values(), again.state_dict().values()))

    class Kill(Exception):
        pass

    def kill_at_2(epoch, hist):
        if epoch == 2:
            raise Kill

    stem = tmp_path / "run"
    with pytest.raises(Kill):
        train_state_critic(x, t / 9, y.astype(float), state_path=stem, on_epoch_end=kill_at_2, **kw)
    assert (tmp_path / "run.train-state.json").is_file()
    net, hist = train_state_critic(x, t / 9, y.astype(float), state_path=stem, **kw)
    assert hist["resumed_from_epoch"] == 2 and hist["epochs_run"] == 4
    assert hist["loss"] == href["loss"]
    assert all(torch.equal(a, b) for a, b in zip(ref.state_dict().values(), net.state_dict().values()))
    assert not (tmp_path / "run.train-state.json").exists()  # cleaned up when done


def test_early_stopping_restores_best_epoch():
    x, ep, t, y = _separable(60, 10, seed=0)
    cfg = TrainConfig(epochs=40, lr=3e-2, val_fraction=0.3, patience=2, **SMALL)
    net, hist = train_state_critic(x, t / 9, y.astype(float), episode=ep, t=t, ep_success=y, config=cfg,
                                   progress_bar=False)
    assert hist["n_val_steps"] == 180
    vl = hist["val_loss"]
    assert hist["best_epoch"] == int(np.argmin(vl)) + 1
    if hist["early_stopped"]:
        assert hist["epochs_run"] - hist["best_epoch"] >= 2


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_trains_on_cuda():
    x, ep, t, y = _separable(240, 10, seed=0)
    cfg = TrainConfig(epochs=8, lr=3e-3, pairwise_weight=0.5, device="cuda", **SMALL)
    net, _ = train_state_critic(x, t / 9, y.astype(float), episode=ep, t=t, ep_success=y, config=cfg,
                                progress_bar=False)
    assert next(net.parameters()).device.type == "cpu"  # returned on CPU, ready to save / export
    m = evaluate_state_critic(TorchStateCritic(net), x, episode=ep, t=t, ep_success=y)
    assert m["auroc_success"] > 0.9


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error raised without CUDA")
def test_cuda_device_without_cuda_is_a_clear_error():
    with pytest.raises(ValueError, match="^device: 'cuda' requested but CUDA is not available"):
        _call_cfg(TrainConfig(epochs=1, hidden=(4,), device="cuda"))


# --------------------------------------------------------------------------- input validation


def _ok_arrays(n=20):
    rng = np.random.default_rng(0)
    return dict(x=rng.normal(size=(n, 3)), progress=np.linspace(0, 1, n), success=np.zeros(n),
                episode=np.repeat([0, 1], n // 2), t=np.tile(np.arange(n // 2), 2), ep_success=np.zeros(n, bool))


def _call(**over):
    return _call_cfg(TrainConfig(epochs=1, hidden=(4,)), **over)


def _call_cfg(cfg, **over):
    a = {**_ok_arrays(), **over}
    return train_state_critic(a["x"], a["progress"], a["success"], episode=a["episode"], t=a["t"],
                              ep_success=a["ep_success"], mask=a.get("mask"), config=cfg, progress_bar=False)


@pytest.mark.parametrize("over, name, match", [
    (dict(x=np.where(np.eye(20, 3) > 0, np.nan, 0.0)), "x", "finite"),
    (dict(x=np.where(np.eye(20, 3) > 0, np.inf, 0.0)), "x", "finite"),
    (dict(progress=np.r_[np.inf, np.zeros(19)]), "progress", "finite"),
    (dict(success=np.r_[np.nan, np.zeros(19)]), "success", "finite"),
    (dict(progress=np.r_[1.5, np.zeros(19)]), "progress", r"\[0, 1\]"),
    (dict(success=np.zeros(19)), "success", r"expected shape \(20,\)"),
    (dict(progress=np.zeros((20, 1))), "progress", r"expected shape \(20,\)"),
    (dict(episode=np.zeros(21, int)), "episode", r"expected shape \(20,\)"),
    (dict(t=np.zeros(20, int)), "t", "unique"),
    (dict(ep_success=np.r_[True, np.zeros(19, bool)]), "ep_success", "one value per episode"),
    (dict(mask=np.ones(20)), "mask", "bool"),
    (dict(x=np.zeros(20)), "x", "2-D"),
])
def test_bad_training_inputs_raise_one_clear_error(over, name, match):
    with pytest.raises((ValueError, TypeError), match=rf"^{name}: .*{match}"):
        _call(**over)


@pytest.mark.parametrize("field, value", [
    ("lr", -1.0), ("lr", float("nan")), ("batch_size", 0), ("epochs", 1.5), ("hidden", ()), ("hidden", (8, -1)),
    ("activation", "gelu"), ("pairwise_weight", -0.1), ("pairwise_loss", "square"), ("pairwise_heads", ("value",)),
    ("val_fraction", 1.0), ("patience", 3), ("device", "tpu"), ("seed", -1), ("weight_decay", "0.1"),
])
def test_bad_config_names_the_field(field, value):
    with pytest.raises(ValueError, match=rf"^{field}: expected ") as exc:
        TrainConfig(**{field: value})
    assert "got" in str(exc.value)


def test_config_round_trips_through_json():
    cfg = TrainConfig(hidden=(8, 4), pairwise_weight=0.3, pairwise_heads=("progress",), val_fraction=0.2, patience=3)
    assert TrainConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
    with pytest.raises(ValueError, match="^config: unknown field"):
        TrainConfig.from_dict({"lr_rate": 1})


# --------------------------------------------------------------------------- metrics


def test_rankdata_auroc_spearman_hand_computed():
    assert rankdata([3, 1, 3, 2]).tolist() == [3.5, 1.0, 3.5, 2.0]
    assert auroc([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1]) == pytest.approx(0.75)
    # ties between a positive and negatives count 1/2: (0.5 + 0.5 + 1 + 1) / 4
    assert auroc([0.5, 0.5, 0.5, 0.9], [0, 1, 0, 1]) == pytest.approx(0.75)
    assert auroc([0.2, 0.9], [False, True]) == 1.0 and auroc([0.9, 0.2], [False, True]) == 0.0
    assert np.isnan(auroc([0.1, 0.2], [1, 1]))
    # ranks b = [1, 2, 3.5, 5, 3.5]; r = 8 / sqrt(10 * 9.5)
    assert spearman([1, 2, 3, 4, 5], [5, 6, 7, 8, 7]) == pytest.approx(8 / np.sqrt(95))
    assert spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert np.isnan(spearman([1, 1, 1], [1, 2, 3]))
    with pytest.raises(ValueError, match="^labels: "):
        auroc([0.1, 0.2], [0, 2])


def test_metrics_match_scipy():
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(0)
    for _ in range(5):
        a = rng.integers(0, 6, 50).astype(float)  # many ties
        b = a + rng.integers(0, 4, 50)
        assert spearman(a, b) == pytest.approx(stats.spearmanr(a, b).statistic)
        y = rng.random(50) < 0.4
        u = stats.mannwhitneyu(a[y], a[~y]).statistic
        assert auroc(a, y) == pytest.approx(u / (y.sum() * (~y).sum()))
        assert rankdata(a) == pytest.approx(stats.rankdata(a))


class _Oracle(BaseCritic):
    """Success score = feature 0, progress = feature 1 (a fixed function: tests the metrics)."""

    obs_dim = 2

    def score(self, steps):
        x = np.asarray(steps, np.float32)
        return StepScores(x[:, 1], x[:, 0])


def test_evaluate_metrics_on_a_known_critic(tmp_path):
    ep = np.array([0, 0, 0, 0, 1, 1, 1, 1])
    t = np.array([3, 2, 1, 0, 0, 1, 2, 3])
    y = np.array([1, 1, 1, 1, 0, 0, 0, 0], bool)
    # success score 0.8 on episode 0 except its last step; 0.3 on episode 1 except its first step (0.9)
    s = np.array([1.0, 0.8, 0.8, 0.8, 0.9, 0.3, 0.3, 0.3])
    p = t / 3.0
    x = np.stack([s, p], 1)
    assert _early_mask(ep, t, 0.25).tolist() == [False, False, False, True, True, False, False, False]
    m = evaluate_state_critic(_Oracle(), x, episode=ep, t=t, ep_success=y)
    # all steps: positives {1, .8, .8, .8}, negatives {.9, .3, .3, .3}: (4*3 + 1*1) / 16 = 13/16
    assert m["auroc_success"] == pytest.approx(13 / 16)
    assert m["auroc_success_early"] == pytest.approx(0.0)  # first steps: 0.8 (success) vs 0.9 (failure)
    assert m["spearman_progress_time"] == pytest.approx(1.0)
    assert m["spearman_success_time"] == pytest.approx(spearman(s[:4], t[:4]))
    assert m["brier_success"] == pytest.approx(np.mean((s - y) ** 2))
    assert m["n_episodes"] == 2 and m["n_success_episodes"] == 1
    with pytest.raises(ValueError, match=r"^t: expected shape \(8,\)"):
        evaluate_state_critic(_Oracle(), x, episode=ep, t=t[:7], ep_success=y)
    with pytest.raises(ValueError, match=r"^early_fraction: "):
        evaluate_state_critic(_Oracle(), x, episode=ep, t=t, ep_success=y, early_fraction=0)
    out = plot_episode_scores(_Oracle(), x, ep, t, y, tmp_path / "s.png", n=2, progress_label=p)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 5000


# --------------------------------------------------------------------------- checkpoints


def test_checkpoint_round_trip_and_errors(tmp_path):
    x, ep, t, y = _separable(20, 10, seed=0)
    net, _ = train_state_critic(x, t / 9, y.astype(float), episode=ep, t=t, ep_success=y,
                                config=TrainConfig(epochs=2, **SMALL), progress_bar=False)
    before = TorchStateCritic(net).score(x)
    save_state_critic(tmp_path / "c", net, {"label": "outcome", "train_config": TrainConfig().to_dict()})
    crit = load_state_critic(tmp_path / "c.safetensors")
    after = crit.score(x)
    assert np.array_equal(before.progress, after.progress) and np.array_equal(before.success, after.success)
    assert crit.meta["label"] == "outcome"
    assert torch.equal(crit.net.obs_mean, net.obs_mean)  # normalisation travels with the weights

    with pytest.raises(FileNotFoundError, match="missing.json"):
        load_state_critic(tmp_path / "missing")
    (tmp_path / "bad.json").write_text((tmp_path / "c.json").read_text())
    (tmp_path / "bad.safetensors").write_bytes(b"not a safetensors file at all")
    with pytest.raises(CheckpointError, match="corrupt"):
        load_state_critic(tmp_path / "bad")
    (tmp_path / "c.json").write_text("{ not json")
    with pytest.raises(CheckpointError, match="not valid JSON"):
        load_state_critic(tmp_path / "c")


# --------------------------------------------------------------------------- a real MuJoCo case


def _collect_pointmaze(n_episodes=40, max_steps=60, seed=0):
    """Short PointMaze_UMaze episodes from a noisy straight-to-goal policy (it gets stuck on the
    U's wall for goals across it, so both outcomes occur)."""
    pytest.importorskip("gymnasium_robotics")
    from prm_critic.robotics.make import CriticInputLayout, make_env
    from prm_critic.robotics.spec import load_spec
    from prm_critic.robotics.subgoals import MazeGeometry, SubgoalEvaluator

    spec = load_spec("PointMaze_UMaze-v3")
    env = make_env(spec, max_episode_steps=max_steps)
    layout = CriticInputLayout.from_space(spec, env.observation_space)
    rng = np.random.default_rng(seed)
    xs, eps, ts, oks = [], [], [], []
    for e in range(n_episodes):
        obs, _ = env.reset(seed=seed + e)
        rows = []
        while True:
            rows.append(layout.flatten(obs))
            a = np.clip(3 * (obs["desired_goal"] - obs["achieved_goal"]) + rng.normal(0, 0.5, 2), -1, 1)
            obs, _, term, trunc, info = env.step(a.astype(np.float32))
            if term or trunc:
                break
        xs += rows
        eps += [e] * len(rows)
        ts += list(range(len(rows)))
        oks += [bool(info["success"])] * len(rows)
    ev = SubgoalEvaluator(spec, layout, MazeGeometry.from_env(env))
    env.close()
    x = np.asarray(xs, np.float32)
    return x, np.asarray(eps), np.asarray(ts), np.asarray(oks), ev.progress(x)


def test_real_pointmaze_critic_learns_spec_progress():
    x, ep, t, ok, prog = _collect_pointmaze()
    assert 0 < len(np.unique(ep[ok])) < 40  # both outcomes present
    train = ep < 32  # 8 held-out episodes (with new goals and starts)
    cfg = TrainConfig(epochs=15, lr=3e-3, hidden=(64, 64), batch_size=64, pairwise_weight=0.2, seed=0)
    net, _ = train_state_critic(x[train], prog[train], ok[train].astype(float), episode=ep[train], t=t[train],
                                ep_success=ok[train], config=cfg, progress_bar=False)
    critic = TorchStateCritic(net)
    check_critic(critic, x[~train][:16])
    sc = critic.score(x[~train])
    # held-out Spearman was 0.84-0.95 over 5 collection seeds (an untrained net: unrelated)
    assert spearman(sc.progress, prog[~train]) > 0.7
    assert np.mean(np.abs(sc.progress - prog[~train])) < 0.12


# --------------------------------------------------------------------------- CLI


@pytest.fixture(scope="module")
def pointmaze_data(tmp_path_factory):
    pytest.importorskip("gymnasium_robotics")
    from prm_critic.robotics.collection import collect
    from prm_critic.robotics.labels import label

    out = tmp_path_factory.mktemp("pm") / "data"
    collect("PointMaze_UMaze-v3", out, episodes=16, max_episode_steps=50, seed=0, progress=False)
    label(out, "outcome", progress=False)
    return out


def test_cli_train_critic_writes_checkpoint_metrics_and_plot(pointmaze_data, tmp_path, capsys):
    from prm_critic.cli import main

    out = tmp_path / "crit" / "pm"
    rc = main(["train-critic", "--data", str(pointmaze_data), "--label", "outcome", "--out", str(out),
               "--epochs", "3", "--hidden", "32,32", "--holdout", "0.25", "--no-progress"])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "AUROC success" in printed and "held-out (4 episodes" in printed
    crit = load_state_critic(out)
    meta = crit.meta
    assert meta["task"] == "PointMaze_UMaze-v3" and meta["label_family"] == "outcome"
    assert meta["layout"]["obs_dim"] == crit.obs_dim == 8
    assert meta["maze"]["maze_map"] and meta["spec"]["task"]["env_id"] == "PointMaze_UMaze-v3"
    assert meta["train_config"]["epochs"] == 3 and meta["train_config"]["hidden"] == [32, 32]
    assert len(meta["data"]["test_episodes"]) == 4
    doc = json.loads((tmp_path / "crit" / "pm.metrics.json").read_text())
    assert set(doc["metrics"]) >= {"auroc_success", "auroc_success_early", "spearman_progress_time", "brier_success"}
    assert doc["history"]["epochs_run"] == 3
    assert (tmp_path / "crit" / "pm.scores.png").read_bytes()[:4] == b"\x89PNG"
    assert not list((tmp_path / "crit").glob("*.train-state.*"))  # resume state removed when done

    # the saved metadata rebuilds the critic against the env: layout and spec progress agree
    from prm_critic.robotics.make import CriticInputLayout, make_env
    from prm_critic.robotics.spec import load_spec
    from prm_critic.robotics.subgoals import MazeGeometry, SubgoalEvaluator

    spec = load_spec(meta["spec"])
    env = make_env(spec)
    layout = CriticInputLayout.from_space(spec, env.observation_space)
    assert layout.to_dict() == meta["layout"]
    obs, _ = env.reset(seed=123)
    x = layout.flatten(obs)[None]
    check_critic(crit, np.repeat(x, 3, axis=0))
    SubgoalEvaluator(spec, layout, MazeGeometry.from_dict(meta["maze"])).progress(x)
    env.close()


def test_cli_train_critic_bad_input_is_one_line(pointmaze_data, tmp_path, capsys):
    from prm_critic.cli import main

    rc = main(["train-critic", "--data", str(pointmaze_data), "--label", "mc", "--out", str(tmp_path / "c")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "labels:" in err and "prm-critic label" in err
    rc = main(["train-critic", "--data", str(pointmaze_data), "--label", "outcome", "--out", str(tmp_path / "c"),
               "--hidden", "32,x"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "--hidden: expected integers, space- or comma-separated" in err and "'32,x'" in err
    rc = main(["train-critic", "--data", str(pointmaze_data), "--label", "outcome", "--out", str(tmp_path / "c"),
               "--epochs", "0"])
    assert rc == 2 and "epochs: expected an int >= 1, got 0" in capsys.readouterr().err
    rc = main(["train-critic", "--data", str(tmp_path / "nowhere"), "--label", "outcome", "--out", str(tmp_path / "c")])
    assert rc == 2 and capsys.readouterr().err.count("\n") == 1


def test_split_seed_and_training_seed_are_independent(pointmaze_data, tmp_path, capsys):
    """The held-out split follows --split-seed only, the weights follow --seed; without --split-seed
    the split seed is the training seed (as before the option existed)."""
    from prm_critic.cli import main
    from prm_critic.models.pipeline import train_critic_from_data
    from prm_critic.models.train import TrainConfig
    from prm_critic.validate import ArgumentError

    def run(name, *extra):
        out = tmp_path / name
        rc = main(["train-critic", "--data", str(pointmaze_data), "--label", "outcome", "--out", str(out),
                   "--epochs", "1", "--hidden", "8", "--holdout", "0.25", "--no-progress", *extra])
        assert rc == 0
        crit = load_state_critic(out)
        doc = json.loads((tmp_path / f"{name}.metrics.json").read_text())
        weights = np.concatenate([p.detach().numpy().ravel() for p in crit.net.parameters()])
        return crit.meta, doc, weights

    default, default_doc, _ = run("default", "--seed", "3")
    assert default["data"]["split_seed"] == 3 and default["train_config"]["seed"] == 3
    assert default_doc["split_seed"] == 3 and default_doc["train_config"]["seed"] == 3
    assert "split seed 3, training seed 3" in capsys.readouterr().out
    a, a_doc, wa = run("a", "--seed", "3", "--split-seed", "5")
    b, _, wb = run("b", "--seed", "4", "--split-seed", "5")
    assert a["data"]["split_seed"] == b["data"]["split_seed"] == a_doc["split_seed"] == 5
    assert (a["train_config"]["seed"], b["train_config"]["seed"]) == (3, 4)
    # same split seed, other training seed: the same held-out episodes, other weights
    assert a["data"]["test_episodes"] == b["data"]["test_episodes"]
    assert not np.array_equal(wa, wb)
    # same training seed, other split seed: other held-out episodes
    assert a["data"]["test_episodes"] != default["data"]["test_episodes"]

    # library: split_seed is checked
    cfg = TrainConfig(epochs=1, hidden=(8,), seed=3)
    for bad in (-1, True, 1.5):
        with pytest.raises(ArgumentError, match=r"split_seed: expected an int >= 0"):
            train_critic_from_data(pointmaze_data, "outcome", tmp_path / "bad", config=cfg, split_seed=bad)
    old = train_critic_from_data(pointmaze_data, "outcome", tmp_path / "old", config=cfg, holdout=0.25, split_seed=5,
                                 progress_bar=False)
    assert old["meta"]["data"]["test_episodes"] == a["data"]["test_episodes"]
    assert not list(tmp_path.glob("bad*"))
