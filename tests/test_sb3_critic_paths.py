"""train_policy(critic=PATH): a trained state-critic checkpoint (safetensors + JSON) and an exported
ONNX critic are loaded once and used as the potential; the shaping term the learner receives is
``scale * (gamma * Phi(s') - Phi(s))`` with that critic's progress."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("stable_baselines3")
pytest.importorskip("gymnasium_robotics")

import torch  # noqa: E402

from prm_critic.models import load_state_critic  # noqa: E402
from prm_critic.models.checkpoint import save_state_critic  # noqa: E402
from prm_critic.robotics.make import make_env  # noqa: E402
from prm_critic.robotics.spec import load_spec  # noqa: E402
from prm_critic.robotics.subgoals import SubgoalCritic  # noqa: E402
from prm_critic.sb3 import train_policy  # noqa: E402
from sb3_helpers import KeepInfos, tiny_state_critic  # noqa: E402

torch.set_num_threads(1)

TASK = "FetchReach-v4"
TINY = dict(learning_starts=60, batch_size=32, gamma=0.9, policy_kwargs=dict(net_arch=[16, 16]))
SCALE = 3.0


def _shaping_matches(infos, phi, atol):
    x = np.stack([i["prm_x"] for i in infos])
    xn = np.stack([i["prm_next_x"] for i in infos])
    term = np.array([bool(i["prm_terminated"]) for i in infos])
    expected = SCALE * (0.9 * np.where(term, 0.0, phi(xn)) - phi(x))
    got = np.array([float(i["prm_shaping"]) for i in infos])
    np.testing.assert_allclose(got, expected, atol=atol)
    assert np.abs(got).max() > 0  # the critic really shaped the reward


def test_train_policy_with_a_state_critic_checkpoint(tmp_path):
    net, meta, _ = tiny_state_critic(TASK)
    path = save_state_critic(tmp_path / "critic", net, meta)
    keep = KeepInfos()
    model = train_policy(TASK, critic=str(path), shaping="potential", scale=SCALE, total_steps=120, seed=0,
                         callbacks=[keep], algo_kwargs=TINY)
    assert model.prm_config["critic"].endswith("critic.safetensors")
    ref = load_state_critic(tmp_path / "critic")
    _shaping_matches(keep.infos, lambda x: ref.score(x).progress, atol=1e-5)


def test_train_policy_with_an_onnx_critic(tmp_path):
    pytest.importorskip("onnxruntime")
    from prm_critic.onnx import OnnxCritic, export_subgoal_critic

    spec = load_spec(TASK)
    sub = SubgoalCritic(spec, make_env(spec))
    path = export_subgoal_critic(sub, tmp_path / "subgoal.onnx")
    keep = KeepInfos()
    model = train_policy(TASK, critic=str(path), shaping="potential", scale=SCALE, total_steps=120, seed=0,
                         callbacks=[keep], algo_kwargs=TINY)
    assert isinstance(model.get_env().envs[0].get_wrapper_attr("critic"), OnnxCritic)
    # the ONNX graph computes the spec progress: same shaping as the numpy SubgoalCritic
    _shaping_matches(keep.infos, lambda x: sub.score(x).progress, atol=1e-5)


def _retrained(net, seed: int):
    """The same critic architecture with other weights (a critic retrained under the same path)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in net.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=g))
    return net


def test_critic_fingerprint_follows_the_weights_not_the_path(tmp_path):
    from prm_critic.sb3.envs import critic_fingerprint

    net, meta, _ = tiny_state_critic(TASK)
    path = save_state_critic(tmp_path / "critic", net, meta)
    a, b = load_state_critic(path), load_state_critic(path)
    assert critic_fingerprint(a) == critic_fingerprint(b) and len(critic_fingerprint(a)) == 64
    save_state_critic(tmp_path / "critic", _retrained(net, 1), meta)
    assert critic_fingerprint(load_state_critic(path)) != critic_fingerprint(a)
    assert critic_fingerprint(None) is None and critic_fingerprint("subgoal") is None


def test_resume_refuses_a_critic_checkpoint_with_other_weights_under_the_same_path(tmp_path):
    net, meta, _ = tiny_state_critic(TASK)
    path = save_state_critic(tmp_path / "critic", net, meta)
    kw = dict(critic=str(path), shaping="potential", scale=SCALE, seed=0, algo_kwargs=TINY, log_dir=tmp_path / "run",
              checkpoint_freq=100, progress=False)
    first = train_policy(TASK, total_steps=100, **kw)
    assert first.prm_config["critic_sha256"] is not None
    # the same critic resumes
    train_policy(TASK, total_steps=120, resume=True, **kw)
    # the file retrained in place: same path, other potential -> refused, naming the field
    save_state_critic(tmp_path / "critic", _retrained(net, 2), meta)
    with pytest.raises(ValueError, match="critic_sha256"):
        train_policy(TASK, total_steps=140, resume=True, **kw)


def test_resume_refuses_a_run_with_critic_refresh(tmp_path):
    from prm_critic.sb3.refresh import CriticRefreshCallback

    net, meta, _ = tiny_state_critic(TASK)
    path = save_state_critic(tmp_path / "critic", net, meta)

    def run(steps, resume):
        critic = load_state_critic(path)
        cb = CriticRefreshCallback(critic, refresh_freq=50, window=5, n_updates=2, min_episodes=1)
        return train_policy(TASK, critic=critic, shaping="potential", scale=SCALE, seed=0, algo_kwargs=TINY,
                            log_dir=tmp_path / "run", checkpoint_freq=100, progress=False, total_steps=steps,
                            resume=resume, callbacks=[cb]), cb

    _, cb = run(100, resume=False)
    assert cb.history  # the critic was refreshed, so the state no longer holds the potential trained under
    with pytest.raises(ValueError, match="CriticRefreshCallback cannot resume"):
        run(150, resume=True)
