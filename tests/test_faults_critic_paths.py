"""Fault tests: every path through a state critic gives what its ``score`` gives.

* item 40: a user's critic that subclasses a critic with a fast path (``score_one``, ``score_rows``)
  and overrides only ``score``: the shaper and the pruner must use the new ``score``, and
  ``check_critic`` must catch a fast path that disagrees with ``score``;
* item 42: an ensemble member re-saved with the same weights but another architecture, and
  ``train_policy`` resumed with such a critic;
* item 43: a critic given the env's own observation (a dict) instead of a critic-input row.

Everything is real: MuJoCo envs, the spec's ``SubgoalCritic``, torch critics and their checkpoint
files, stable-baselines3 training. No fakes.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("gymnasium_robotics")

from faults import correct, loud  # noqa: E402

from prm_critic.critic import StepScores, check_critic  # noqa: E402
from prm_critic.robotics.layout import CriticInputLayout  # noqa: E402
from prm_critic.robotics.make import make_env  # noqa: E402
from prm_critic.robotics.spec import load_spec  # noqa: E402
from prm_critic.robotics.subgoals import SubgoalCritic  # noqa: E402
from prm_critic.wrappers import DeadEndPruner, PRMRewardShaper  # noqa: E402

pytestmark = pytest.mark.fault

TASK = "FetchReach-v4"


class SquaredSubgoalCritic(SubgoalCritic):
    """A user's critic: the spec's scores squared. It overrides ``score`` only, so it inherits
    ``SubgoalCritic.score_one``, which still scores the old way."""

    def score(self, steps):
        s = super().score(steps)
        return StepScores(s.progress ** 2, s.success ** 2)


def _rollout_rows(env, layout, n=30, seed=0):
    obs, _ = env.reset(seed=seed)
    env.action_space.seed(seed)
    rows = [layout.flatten(obs)]
    for _ in range(n - 1):
        obs, *_ = env.step(env.action_space.sample())
        rows.append(layout.flatten(obs))
    return np.stack(rows)


# =========================================================================== item 40
def test_shaper_and_pruner_use_the_score_a_subclass_overrides():
    env = make_env(load_spec(TASK))
    critic = SquaredSubgoalCritic(TASK, env)
    layout = CriticInputLayout.from_space(load_spec(TASK), env.observation_space)
    shaper = PRMRewardShaper(env, critic, gamma=0.99, head="progress")
    pruner = DeadEndPruner(shaper, critic, threshold=0.0, patience=1000, head="success")
    obs, _ = pruner.reset(seed=3)
    pruner.action_space.seed(3)
    phi, prune, rows = [], [], []
    for _ in range(30):
        obs, _, term, trunc, info = pruner.step(pruner.action_space.sample())
        rows.append(layout.flatten(obs))
        want = critic.score(rows[-1][None])
        phi.append((info["prm_next_phi"], float(want.progress[0])))
        prune.append((info["prm_prune_score"], float(want.success[0])))
        if term or trunc:
            break
    pruner.close()
    got, want = np.array(phi).T
    assert np.allclose(got, want, rtol=1e-6, atol=1e-7), f"Phi differs from score on {(~np.isclose(got, want)).sum()} steps"
    got_s, want_s = np.array(prune).T
    assert np.allclose(got_s, want_s, rtol=1e-6, atol=1e-7)
    inherited = np.array([critic.score_one(x)[0] for x in rows])  # the fault: the old score, on these steps
    assert (~np.isclose(inherited, want)).sum() >= len(rows) // 2
    correct(40, "SubgoalCritic subclass overriding score only, in PRMRewardShaper and DeadEndPruner",
            f"Phi(s') and the pruner's score equal the subclass's score on all {len(phi)} steps (inherited score_one not used)")


def test_check_critic_compares_the_fast_path_with_score():
    env = make_env(load_spec(TASK))
    layout = CriticInputLayout.from_space(load_spec(TASK), env.observation_space)
    xs = _rollout_rows(env, layout, n=12)
    assert check_critic(SubgoalCritic(TASK, env), xs) is not None  # the spec's own critic: fast path agrees
    with loud(40, "check_critic on a subclass whose inherited score_one disagrees with its score", AssertionError,
              match=r"score_one \(defined in SubgoalCritic\): progress .* at index \d+ differs from score's .*override "
                    r"score_one too"):
        check_critic(SquaredSubgoalCritic(TASK, env), xs)
    env.close()


# =========================================================================== item 42
def _resave_with(path, activation):
    """Re-save the checkpoint at ``path`` with the same weights (byte for byte) and another activation."""
    from prm_critic.models import StateCriticNet
    from prm_critic.models.checkpoint import load_state_critic, save_state_critic

    old = load_state_critic(path)
    cfg = {**old.net.config(), "activation": activation}
    net = StateCriticNet(**cfg)
    net.load_state_dict(old.net.state_dict())
    save_state_critic(path, net, old.meta)


def test_ensemble_member_resaved_with_another_activation_is_refused(tmp_path):
    import json
    import warnings

    import torch

    from prm_critic.integrity import CheckpointError, UnverifiedConfigWarning
    from prm_critic.models import StateCriticNet
    from prm_critic.models.checkpoint import load_state_critic, save_state_critic
    from prm_critic.models.ensemble import load_critic_ensemble, save_critic_ensemble

    members = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        save_state_critic(tmp_path / f"m{seed}", StateCriticNet(6, hidden=(16,), activation="relu"), {"task": "T"})
        members.append(tmp_path / f"m{seed}.json")
    ens = save_critic_ensemble(tmp_path / "ens.json", members)
    x = np.random.default_rng(0).normal(size=(64, 6)).astype(np.float32) * 3
    before = load_critic_ensemble(ens).score(x).success
    weights = json.loads(members[0].read_text())["weights_sha256"]
    m0 = load_state_critic(members[0]).score(x).success
    _resave_with(members[0], "tanh")
    assert json.loads(members[0].read_text())["weights_sha256"] == weights  # the same weights ...
    assert not np.allclose(load_state_critic(members[0]).score(x).success, m0)  # ... other scores
    with loud(42, "ensemble member re-saved with the same weights and another activation (relu -> tanh)", CheckpointError,
              match=r"ensemble: member 0 of .*ens.json.*, has config_sha256 '[0-9a-f]{64}', expected '[0-9a-f]{64}': its "
                    r"architecture, layout or metadata changed after the ensemble was written \(same weights_sha256\)"):
        load_critic_ensemble(ens)
    # an ensemble file written before members' configs were hashed loads, with a warning saying what is unchecked
    doc = json.loads(ens.read_text())
    doc["format_version"] = 1
    for row in doc["members"]:
        row.pop("config_sha256")
    from prm_critic.integrity import config_sha256

    doc["config_sha256"] = config_sha256(doc, "config_sha256")
    ens.write_text(json.dumps(doc))
    with pytest.warns(UnverifiedConfigWarning, match=r"records only its members' weights hashes"):
        load_critic_ensemble(ens)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        save_critic_ensemble(ens, members)
        assert not np.allclose(load_critic_ensemble(ens).score(x).success, before)  # sealed anew: the tanh member


def test_train_policy_resume_refuses_a_critic_resaved_with_another_activation(tmp_path):
    pytest.importorskip("stable_baselines3")
    import torch

    from prm_critic.models.checkpoint import save_state_critic
    from prm_critic.sb3 import train_policy
    from sb3_helpers import tiny_state_critic

    torch.set_num_threads(1)
    net, meta, _ = tiny_state_critic(TASK)
    save_state_critic(tmp_path / "critic", net, meta)
    run = dict(critic=str(tmp_path / "critic.json"), shaping="potential", scale=1.0, seed=0, log_dir=tmp_path / "run",
               algo_kwargs=dict(learning_starts=60, batch_size=32, policy_kwargs=dict(net_arch=[16, 16])))
    train_policy(TASK, total_steps=100, checkpoint_freq=100, **run)
    _resave_with(tmp_path / "critic.json", "tanh")
    with loud(42, "train_policy resumed with its critic re-saved with the same weights and another activation", ValueError,
              match=r"critic_config_sha256: the training state in .* was written with critic_config_sha256='[0-9a-f]{64}', "
                    r"this call has '[0-9a-f]{64}'"):
        train_policy(TASK, total_steps=200, resume=True, **run)


# =========================================================================== item 43
@pytest.fixture(scope="module")
def reach_critics(tmp_path_factory):
    """Every kind of state critic made for FetchReach, each declaring its layout: the spec's
    SubgoalCritic, a torch checkpoint, an ensemble of two, and one ONNX export run by onnxruntime
    (batch-1 and dynamic) and by numpy; plus the env and its layout."""
    import torch

    from prm_critic.models.checkpoint import load_state_critic, save_state_critic
    from prm_critic.models.ensemble import load_critic_ensemble, save_critic_ensemble
    from prm_critic.onnx import NumpyMLPCritic, OnnxCritic, export_state_critic
    from sb3_helpers import tiny_state_critic

    d = tmp_path_factory.mktemp("reach")
    env = make_env(load_spec(TASK))
    layout = CriticInputLayout.from_space(load_spec(TASK), env.observation_space)
    net, meta, _ = tiny_state_critic(TASK)
    save_state_critic(d / "a", net, meta)
    torch.manual_seed(1)
    net_b, _, _ = tiny_state_critic(TASK)
    with torch.no_grad():
        for p in net_b.parameters():
            p.add_(torch.randn_like(p) * 0.5)
    save_state_critic(d / "b", net_b, meta)
    onnx_path = export_state_critic(load_state_critic(d / "a.json"), d / "a.onnx", task=TASK, layout=layout.to_dict())
    onnx_b1 = export_state_critic(load_state_critic(d / "a.json"), d / "a.b1.onnx", batch=1, task=TASK,
                                  layout=layout.to_dict())
    critics = {"subgoal": SubgoalCritic(TASK, env), "torch": load_state_critic(d / "a.json"),
               "ensemble": load_critic_ensemble(save_critic_ensemble(d / "ens.json", [d / "a.json", d / "b.json"])),
               "onnx": OnnxCritic(onnx_path), "onnx_b1": OnnxCritic(onnx_b1), "numpy": NumpyMLPCritic(onnx_path)}
    yield env, layout, critics
    env.close()


@pytest.mark.parametrize("kind", ["subgoal", "torch", "ensemble", "onnx", "onnx_b1", "numpy"])
def test_critics_take_the_envs_own_observation(reach_critics, kind):
    env, layout, critics = reach_critics
    critic = critics[kind]
    obs = [env.reset(seed=s)[0] for s in range(3)]
    rows = np.stack([layout.flatten(o) for o in obs])
    want = critic.score(rows)
    for i, o in enumerate(obs):
        if hasattr(critic, "score_one"):
            assert critic.score_one(o) == critic.score_one(rows[i])
        one = critic.score(o)  # one observation: a batch of one (a batch of one may round unlike a batch of three)
        assert np.allclose(one.success, want.success[i:i + 1], atol=1e-6)
        assert np.allclose(one.progress, want.progress[i:i + 1], atol=1e-6)
    listed = critic.score(obs)  # a list of observations
    batched = critic.score({k: np.stack([o[k] for o in obs]) for k in obs[0]})  # a dict of batched arrays
    for got in (listed, batched):
        assert np.array_equal(got.progress, want.progress) and np.array_equal(got.success, want.success)
    # a dict that lacks a key of the layout, or holds a key of another width, is named
    with loud(43, f"{kind} critic given an observation dict without 'desired_goal'", KeyError, match="desired_goal"):
        critic.score({k: v for k, v in obs[0].items() if k != "desired_goal"})
    correct(43, f"{type(critic).__name__} ({kind}) given FetchReach's own observation dict (one, a list, a batch)",
            "flattened with the critic's declared layout: scores equal to those of the critic-input rows")


def test_a_dict_given_to_a_critic_without_a_layout_says_how_to_pass_it(reach_critics):
    from prm_critic.models.state_critic import TorchStateCritic

    env, layout, critics = reach_critics
    bare = TorchStateCritic(critics["torch"].net, {})  # no layout declared
    obs, _ = env.reset(seed=0)
    with loud(43, "critic without a declared layout given the env's observation dict", TypeError,
              match=r"steps: got the env's observation, a dict \(keys \['achieved_goal', 'desired_goal', 'observation'\]\), "
                    r"but TorchStateCritic declares no input layout .* CriticInputLayout.from_space\(spec, "
                    r"env.observation_space\).flatten\(obs\)"):
        bare.score(obs)
