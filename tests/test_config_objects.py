"""The config objects behind the long public signatures: ``TrainPolicyConfig`` (``train_policy``) and
``ShaperConfig`` (the reward shapers' ``__init__``) are public and frozen, taken whole (``config=``) or
built from keywords by ``prm_critic.validate.config_from``, check every value once in ``__post_init__``
and refuse a bad one with the very error the public call raises."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from prm_critic.critic import ConstantCritic
from prm_critic.robotics.layout import CriticInputLayout

LAYOUT = CriticInputLayout(["obs"], {"obs": 3})


def _same_error(build, call):
    """``build()`` and ``call()`` both raise, the same type with the same message; returns it."""
    with pytest.raises(Exception) as by_config:
        build()
    with pytest.raises(Exception) as by_public:
        call()
    assert type(by_config.value) is type(by_public.value)
    assert str(by_config.value) == str(by_public.value)
    return by_config.value


# --------------------------------------------------------------------------- ShaperConfig
@pytest.fixture
def shaper_mod():
    pytest.importorskip("gymnasium")
    from prm_critic.wrappers import _common

    return _common


def test_the_shapers_take_a_shaper_config_or_its_fields(shaper_mod):
    from prm_critic.validate import ArgumentError
    from prm_critic.wrappers import PRMRewardShaper, ShaperConfig

    from wrappers_helpers import ListEnv

    assert ShaperConfig is shaper_mod.ShaperConfig
    critic = ConstantCritic()
    cfg = ShaperConfig(critic=critic, gamma=0.9, scale=2.0, layout=LAYOUT)
    by_config = PRMRewardShaper(ListEnv([[0.0, 0.0, 0.0]] * 3), config=cfg)
    by_keywords = PRMRewardShaper(ListEnv([[0.0, 0.0, 0.0]] * 3), critic, gamma=0.9, scale=2.0, layout=LAYOUT)
    assert by_config.config is cfg and by_keywords.config == cfg
    for shaper in (by_config, by_keywords):  # the attributes users read come from the config
        assert (shaper.critic, shaper.gamma, shaper.mode, shaper.scale) == (critic, 0.9, "potential", 2.0)
        assert shaper.layout is shaper.config.critic_layout
    by_config.set_scale(0.5)  # the scale paid now moves; the config stays as built
    assert (by_config.scale, by_config.config.scale) == (0.5, 2.0)
    with pytest.raises(ArgumentError, match=r"^config: pass a ShaperConfig or its fields as keyword arguments, not both "
                                            r"\(got config and \['critic'\]\)"):
        PRMRewardShaper(ListEnv([[0.0, 0.0, 0.0]] * 3), critic, config=cfg)
    with pytest.raises(ArgumentError, match=r"^scael: not a setting of ShaperConfig; .*did you mean 'scale'\?$"):
        PRMRewardShaper(ListEnv([[0.0, 0.0, 0.0]] * 3), critic, gamma=0.9, scael=2.0, layout=LAYOUT)


def test_shaper_config_is_frozen_and_holds_the_checked_values(shaper_mod):
    critic = ConstantCritic()
    cfg = shaper_mod.ShaperConfig(critic=critic, gamma=1, scale=2, subgoal_bonus=np.float32(3), deadline_s=1,
                                  layout=LAYOUT.to_dict())
    assert cfg.critic is critic
    assert (type(cfg.gamma), cfg.gamma) == (float, 1.0)
    assert (type(cfg.scale), type(cfg.subgoal_bonus), type(cfg.deadline_s)) == (float, float, float)
    assert cfg.layout == LAYOUT.to_dict()  # as given; what it resolves to:
    assert isinstance(cfg.critic_layout, CriticInputLayout) and cfg.critic_layout.sizes == {"obs": 3}
    assert cfg.task_spec is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.gamma = 0.5
    with pytest.raises(TypeError):
        shaper_mod.ShaperConfig(critic, 0.99)  # keywords only, as the shapers take them


_BAD_SHAPER = [
    ("critic", dict(critic=object()), TypeError),
    ("gamma", dict(gamma=0.0), ValueError),
    ("gamma", dict(gamma=True), ValueError),
    ("mode", dict(mode="potentail"), ValueError),
    ("head", dict(head="sucess"), ValueError),
    ("scale", dict(scale=math.inf), ValueError),
    ("subgoal_bonus", dict(subgoal_bonus="1"), ValueError),
    ("deadline_s", dict(deadline_s=0), ValueError),
    ("fallback", dict(fallback="last"), ValueError),
    ("layout", dict(layout=None), ValueError),  # ConstantCritic declares no layout
    ("layout", dict(layout=[3]), TypeError),
    ("allow_task_mismatch", dict(allow_task_mismatch="yes"), ValueError),
    ("info_subgoals", dict(info_subgoals=1), ValueError),
]


@pytest.mark.parametrize("name, bad, kind", _BAD_SHAPER, ids=[f"{n}={v[n]!r}" for n, v, _ in _BAD_SHAPER])
def test_shaper_config_refuses_what_the_shaper_refuses(shaper_mod, name, bad, kind):
    from prm_critic.wrappers import PRMRewardShaper

    from wrappers_helpers import ListEnv

    kw = {"critic": ConstantCritic(), "gamma": 0.99, "layout": LAYOUT, **bad}
    critic = kw.pop("critic")
    env = ListEnv([[0.0, 0.0, 0.0]] * 3)
    err = _same_error(lambda: shaper_mod.ShaperConfig(critic=critic, **kw),
                      lambda: PRMRewardShaper(env, critic, **kw))
    assert isinstance(err, kind)
    assert str(err).startswith(f"{name}: "), str(err)


# --------------------------------------------------------------------------- TrainPolicyConfig
@pytest.fixture
def sb3_train():
    pytest.importorskip("stable_baselines3")
    from prm_critic.sb3 import train

    return train


def test_train_policy_takes_a_train_policy_config_or_its_fields(sb3_train):
    from prm_critic.sb3 import TrainPolicyConfig
    from prm_critic.validate import ArgumentError

    assert TrainPolicyConfig is sb3_train.TrainPolicyConfig
    cfg = TrainPolicyConfig(task="PointMaze_UMaze-v3", total_steps=10)
    with pytest.raises(ArgumentError, match=r"^config: pass a TrainPolicyConfig or its fields as keyword arguments, "
                                            r"not both \(got config and \['seed', 'task'\]\)"):
        sb3_train.train_policy("PointMaze_UMaze-v3", config=cfg, seed=1)
    with pytest.raises(ArgumentError, match=r"^config: expected a TrainPolicyConfig or None, got dict"):
        sb3_train.train_policy(config={"task": "PointMaze_UMaze-v3", "total_steps": 10})
    with pytest.raises(ArgumentError, match=r"^total_step: not a setting of TrainPolicyConfig; expected one of \['task', "
                                            r"'total_steps', .*did you mean 'total_steps'\?$"):
        sb3_train.train_policy("PointMaze_UMaze-v3", total_step=10)
    with pytest.raises(TypeError, match="total_steps"):
        sb3_train.train_policy("PointMaze_UMaze-v3")  # required, as before


def test_train_policy_config_is_frozen_and_holds_the_checked_values(sb3_train):
    Config = sb3_train.TrainPolicyConfig
    cfg = Config(task="PointMaze_UMaze-v3", total_steps=10, shaping="subgoal", progress=True, progress_bar=False,
                 prune=dict(threshold=0.1, patience=5), eval_freq=5, early_stop={"threshold": 0.5})
    assert cfg.critic == "subgoal"  # shaping="subgoal" without a critic uses the subgoal critic
    assert cfg.progress is False  # progress_bar, the older name, wins when given
    assert cfg.prune == {"threshold": 0.1, "patience": 5}
    assert cfg.early_stop == {"threshold": 0.5, "consecutive": 2, "min_steps": 0}
    assert cfg.task == "PointMaze_UMaze-v3"  # resolved once, by the run
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.total_steps = 20
    with pytest.raises(TypeError):
        Config("PointMaze_UMaze-v3", 10)  # keywords only, as train_policy takes them


_BAD_TRAIN = [
    ("algo", dict(algo="sca")),
    ("backend", dict(backend="jax")),
    ("total_steps", dict(total_steps=0)),
    ("n_envs", dict(n_envs=0)),
    ("eval_episodes", dict(eval_episodes=-1)),
    ("eval_freq", dict(eval_freq=0)),
    ("checkpoint_freq", dict(checkpoint_freq=1.5)),
    ("log_dir", dict(checkpoint_freq=5)),
    ("log_dir", dict(resume=True)),
    ("shaping", dict(shaping="potentail")),
    ("seed", dict(seed=-1)),
    ("scale", dict(critic="subgoal", shaping="potential", scale=math.inf)),
    ("prune", dict(critic="subgoal", prune=dict(threshold=0.5))),
    ("shaping='subgoal' with her=True", dict(shaping="subgoal", her=True)),
    ("critic", dict(shaping="potential")),
    ("shaping", dict(critic="subgoal")),
    ("progress", dict(progress="yes")),
    ("progress_bar", dict(progress_bar=1)),
    ("torch_threads", dict(torch_threads=0)),
    ("early_stop", dict(early_stop=dict(threshold=0.5))),  # needs eval_freq
    ("early_stop['consecutive']", dict(eval_freq=5, early_stop=dict(consecutive=0))),
]


@pytest.mark.parametrize("name, bad", _BAD_TRAIN, ids=[f"{n}:{sorted(b)}" for n, b in _BAD_TRAIN])
def test_train_policy_config_refuses_what_train_policy_refuses(sb3_train, name, bad):
    kw = {"total_steps": 10, **bad}
    err = _same_error(lambda: sb3_train.TrainPolicyConfig(task="PointMaze_UMaze-v3", **kw),
                      lambda: sb3_train.train_policy("PointMaze_UMaze-v3", **kw))
    assert isinstance(err, ValueError)
    assert str(err).startswith(f"{name}: " if not name.startswith("shaping=") else name), str(err)


# --------------------------------------------------------------------------- validate.config_from
def test_config_from_takes_a_config_or_its_fields_never_both():
    from prm_critic.langgraph.mcts import MCTSConfig
    from prm_critic.validate import ArgumentError, config_from

    cfg = MCTSConfig(seed=3)
    assert config_from(MCTSConfig, cfg) is cfg
    assert config_from(MCTSConfig, seed=3) == cfg and config_from(MCTSConfig) == MCTSConfig()
    with pytest.raises(ArgumentError, match=r"^config: pass an MCTSConfig or its fields as keyword arguments, not both "
                                            r"\(got config and \['seed'\]\)"):
        config_from(MCTSConfig, cfg, seed=1)
    with pytest.raises(ArgumentError, match=r"^config: expected an MCTSConfig or None, got dict"):
        config_from(MCTSConfig, {"seed": 1})
    with pytest.raises(ArgumentError, match=r"^sed: not a setting of MCTSConfig; expected one of \['branch_factor', .*"
                                            r"did you mean 'seed'\?$"):
        config_from(MCTSConfig, sed=1)
    with pytest.raises(ArgumentError, match=r"^seed: expected an integer in \[0, 2\*\*32\), got -1"):
        config_from(MCTSConfig, seed=-1)  # each value is checked by the config itself


def test_train_config_is_frozen_and_checked_by_validate():
    pytest.importorskip("torch")
    from prm_critic.models.train import TrainConfig, train_state_critic
    from prm_critic.validate import ArgumentError

    cfg = TrainConfig(hidden=[8, np.int64(4)], lr=np.float32(0.5), epochs=np.int64(2), obs_clip=3)
    assert (cfg.hidden, type(cfg.lr), type(cfg.epochs), cfg.obs_clip) == ((8, 4), float, int, 3.0)
    assert TrainConfig(hidden=16).hidden == (16,) and TrainConfig(pairwise_heads="success").pairwise_heads == ("success",)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.epochs = 3
    assert dataclasses.replace(cfg, epochs=3).epochs == 3
    with pytest.raises(ArgumentError, match=r"^epochs: expected an int >= 1, got 0"):
        dataclasses.replace(cfg, epochs=0)
    with pytest.raises(ArgumentError, match=r"^config: expected a TrainConfig or None, got dict"):
        train_state_critic(np.zeros((2, 1)), np.zeros(2), np.zeros(2), episode=np.zeros(2), t=np.arange(2),
                           ep_success=np.zeros(2, bool), config={"epochs": 1})
