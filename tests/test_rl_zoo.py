"""rl-baselines3-zoo: ``prm_critic.zoo.PRMWrapper`` / ``PRMZooCallback`` from a hyperparams YAML.

The documented YAML (``docs/rl_zoo/sac_fetch_reach.yml``) is trained by ``python -m rl_zoo3.train``
in a subprocess; the rest goes through zoo's own construction (``ExperimentManager.setup_experiment``,
``rl_zoo3.utils.get_wrapper_class`` / ``create_test_env``) on real FetchReach-v4 envs.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("gymnasium_robotics")
pytest.importorskip("stable_baselines3")
pytest.importorskip("rl_zoo3")

import gymnasium as gym  # noqa: E402
import yaml  # noqa: E402
from rl_zoo3.exp_manager import ExperimentManager  # noqa: E402
from rl_zoo3.utils import create_test_env, get_wrapper_class  # noqa: E402
from stable_baselines3 import SAC  # noqa: E402
from stable_baselines3.common.callbacks import EvalCallback  # noqa: E402
from stable_baselines3.common.monitor import Monitor  # noqa: E402
from stable_baselines3.common.vec_env import DummyVecEnv  # noqa: E402

from faults import loud  # noqa: E402
from prm_critic.robotics.make import register_robotics_envs  # noqa: E402
from prm_critic.robotics.subgoals import SubgoalCritic  # noqa: E402
from prm_critic.zoo import PRMWrapper, PRMZooCallback  # noqa: E402
from wrappers_helpers import CountingCritic  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
YAML = ROOT / "docs" / "rl_zoo" / "sac_fetch_reach.yml"
ENV_ID = "FetchReach-v4"
WRAPPER = "prm_critic.zoo.PRMWrapper"

register_robotics_envs()


def _hyperparams(**wrapper_kwargs) -> dict:
    """The documented YAML's FetchReach-v4 entry, with the wrapper's kwargs updated."""
    hyper = yaml.safe_load(YAML.read_text())[ENV_ID]
    for entry in hyper["env_wrapper"]:
        if WRAPPER in entry:
            entry[WRAPPER].update(wrapper_kwargs)
    return hyper


def _write_yaml(path: Path, hyper: dict) -> Path:
    path.write_text(yaml.safe_dump({ENV_ID: hyper}))
    return path


class _Manager(ExperimentManager):
    def objective(self, trial):
        """The start of zoo's ``objective`` (an optuna trial): sampled values over the hyperparams,
        then the trial's training env."""
        kwargs = self._hyperparams.copy()
        kwargs.update(trial)
        return self.create_envs(1, no_log=True)


def _manager(tmp_path: Path, conf: Path, **overrides) -> ExperimentManager:
    """zoo's ExperimentManager as ``rl_zoo3.train`` builds it, small buffers, evaluation every 100 steps."""
    return _Manager(argparse.Namespace(), "sac", ENV_ID, str(tmp_path / "logs"), n_timesteps=300,
                    eval_freq=100, n_eval_episodes=1, hyperparams={"buffer_size": 1000, **overrides},
                    seed=0, verbose=0, config=str(conf))


def _fetch(**monitor_kwargs):
    return Monitor(gym.make(ENV_ID), **monitor_kwargs)


def _run_episode(env, seed: int = 0):
    env.reset(seed=seed)
    env.action_space.seed(seed)
    n = 0
    while True:
        _, _, term, trunc, info = env.step(env.action_space.sample())
        n += 1
        if term or trunc:
            return n, info


@pytest.mark.slow
def test_rl_zoo_train_runs_the_documented_yaml(tmp_path):
    """``python -m rl_zoo3.train -conf docs/rl_zoo/sac_fetch_reach.yml`` (SAC + HER, 300 steps), with a
    pruning threshold that cuts every training episode that has not reached the goal after 10 steps:
    the cut episodes are rows of monitor.csv, the evaluation episodes run to the env's limit, the
    callback checked gamma and logged the prm/ statistics."""
    conf = _write_yaml(tmp_path / "sac.yml", _hyperparams(prune={"threshold": 1.0, "patience": 10}))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    cmd = [sys.executable, "-m", "rl_zoo3.train", "--algo", "sac", "--env", ENV_ID, "--gym-packages",
           "gymnasium_robotics", "-conf", str(conf), "-n", "300", "-f", str(tmp_path / "logs"), "--eval-freq", "150",
           "--eval-episodes", "2", "--seed", "0", "--num-threads", "1"]
    res = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "PRMZooCallback: 1 training env(s) checked (gamma 0.95), 1 evaluation VecEnv(s) without pruning" \
        in res.stdout
    run = tmp_path / "logs" / "sac" / f"{ENV_ID}_1"
    rows = np.genfromtxt(run / "0.monitor.csv", delimiter=",", names=True, skip_header=1)
    lengths = np.atleast_1d(rows["l"]).astype(int)
    # Fetch never ends an episode itself before 50 steps: every shorter row is a pruned episode
    assert (lengths == 10).sum() >= 5, lengths
    assert 300 - 50 < lengths.sum() <= 300  # every finished episode is a row; the last may still run
    np.testing.assert_array_equal(np.atleast_1d(rows["r"])[lengths == 10], -10.0)  # the env's own reward
    evals = np.load(run / "evaluations.npz")
    assert evals["ep_lengths"].shape == (2, 2) and (evals["ep_lengths"] == 50).all()  # evaluation: not pruned
    last = res.stdout[res.stdout.rfind("prm/"):]
    pruned = int(last.split("pruned_episodes")[1].split("|")[1])
    assert pruned == (lengths < 50).sum()  # the callback counted every cut episode monitor.csv holds
    assert "ep_return_shaped" in last and "ep_return_original" in last


def test_zoo_builds_training_env_pruned_and_eval_env_not_with_the_algorithms_gamma(tmp_path):
    """Through zoo's ExperimentManager: the wrapper reads gamma 0.95 from the hyperparams (none in
    its kwargs), prunes the training env and not the evaluation env, and ends the Monitor's episode
    at the cut (a monitor.csv row with the Monitor's info_keywords, info['episode'] with the shaped
    return added)."""
    conf = _write_yaml(tmp_path / "sac.yml", _hyperparams(prune={"threshold": 1.0, "patience": 10}))
    manager = _manager(tmp_path, conf, monitor_kwargs=dict(info_keywords=("is_success",)))
    model, _ = manager.setup_experiment()
    train_env = model.get_env()
    (settings,) = train_env.env_method("prm_zoo_settings")
    assert settings["gamma"] == 0.95 and settings["evaluation"] is False and settings["shaping"] == "potential"
    (eval_cb,) = [cb for cb in manager.callbacks if isinstance(cb, EvalCallback)]
    (eval_settings,) = eval_cb.eval_env.env_method("prm_zoo_settings")
    assert eval_settings["evaluation"] is True and eval_settings["gamma"] == 0.95

    (train,) = train_env.envs
    n, info = _run_episode(train)
    assert n == 10 and info["prm_pruned"] is True and info["prm_episode"]["pruned"] is True
    assert info["episode"]["l"] == 10 and info["episode"]["r"] == -10.0  # the Monitor's record: env reward
    assert info["episode"]["r_shaped"] == info["prm_episode"]["r"]
    assert info["prm_episode"]["r"] == pytest.approx(-10.0 + info["prm_episode"]["shaping"], abs=1e-5)
    (evaluation,) = eval_cb.eval_env.envs
    n, info = _run_episode(evaluation)
    assert n == 50 and "prm_pruned" not in info and info["episode"]["l"] == 50
    later = manager.create_envs(1, eval_env=True)  # after setup: the manager's hyperparams give gamma
    assert later.env_method("prm_zoo_settings")[0]["gamma"] == 0.95
    later.close()
    trial = manager.objective({"gamma": 0.9})  # an optuna trial's env: the trial's sampled gamma
    assert trial.env_method("prm_zoo_settings")[0]["gamma"] == 0.9
    assert trial.env_method("prm_zoo_settings")[0]["evaluation"] is False
    trial.close()
    train_env.close()
    eval_cb.eval_env.close()
    rows = (Path(manager.save_path) / "0.monitor.csv").read_text().splitlines()
    assert rows[1] == "r,l,t,is_success" and rows[2].startswith("-10.0,10,") and rows[2].endswith(",0.0")


def test_the_docs_show_the_yaml_file():
    text = (ROOT / "docs" / "rl_zoo.md").read_text()
    block = text.split("```yaml\n", 1)[1].split("```", 1)[0]
    assert yaml.safe_load(block) == yaml.safe_load(YAML.read_text())
    assert block in YAML.read_text()  # comments included


def test_enjoy_env_is_an_evaluation_env():
    """``create_test_env`` (``enjoy``, ``record_video``) builds evaluation envs: no pruning."""
    hyper = _hyperparams(prune={"threshold": 1.0, "patience": 3})
    venv = create_test_env(ENV_ID, n_envs=1, seed=0, should_render=False, hyperparams=hyper)
    (settings,) = venv.env_method("prm_zoo_settings")
    assert settings["evaluation"] is True and settings["gamma"] == 0.95
    n, _ = _run_episode(venv.envs[0])
    assert n == 50
    venv.close()


def test_shaper_and_pruner_make_one_critic_call_per_step():
    """One entry, one critic: N steps cost 1 + N critic calls (reset + one per step); the pruner
    reuses the shaper's scores."""
    base = _fetch()
    counting = CountingCritic(SubgoalCritic(ENV_ID, base))
    env = get_wrapper_class({"env_wrapper": [{WRAPPER: {"critic": counting, "gamma": 0.95,
                                                         "prune": {"threshold": 0.5, "patience": 1000}}}]})(base)
    env.reset(seed=0)
    for _ in range(20):
        env.step(env.action_space.sample())
    assert counting.batches == [1] * 21
    assert env.stats["pruner"]["critic_calls"] == 0 and env.stats["pruner"]["reused_scores"] == 20
    assert env.stats["shaper"]["calls"] == 21


def test_callback_checks_gamma_and_turns_pruning_off_on_eval_envs(tmp_path):
    """Built outside zoo (as in a SubprocVecEnv worker), the wrappers cannot see the algorithm or the
    evaluation env: the callback checks gamma and switches the EvalCallback's env at training start."""
    kw = dict(critic="subgoal", gamma=0.95, prune={"threshold": 1.0, "patience": 5})
    train = DummyVecEnv([lambda: PRMWrapper(_fetch(), **kw)])
    evaluation = DummyVecEnv([lambda: PRMWrapper(_fetch(), **kw)])
    assert evaluation.get_attr("evaluation") == [False]
    model = SAC("MultiInputPolicy", train, gamma=0.95, learning_starts=1000, buffer_size=1000,
                policy_kwargs=dict(net_arch=[8]), seed=0)
    callback = PRMZooCallback()
    model.learn(20, callback=[callback, EvalCallback(evaluation, eval_freq=10_000, verbose=0)])
    assert evaluation.get_attr("evaluation") == [True] and callback.eval_envs == [evaluation]
    assert train.get_attr("evaluation") == [False]
    assert callback.n_episodes == 4 and callback.pruned_episodes == 4  # 20 steps: four cut at 5
    n, info = _run_episode(evaluation.envs[0])
    assert n == 50 and info["prm_episode"]["pruned"] is False


@pytest.mark.fault
def test_gamma_mismatch_is_one_error_naming_both_values(tmp_path):
    conf = _write_yaml(tmp_path / "sac.yml", _hyperparams(gamma=0.9))
    with loud(35, "zoo YAML: PRMWrapper gamma 0.9, hyperparams gamma 0.95", ValueError,
              match=r"gamma: PRMWrapper's gamma=0.9 differs from the algorithm's gamma=0.95 \(the hyperparams' "
                    r"gamma\).*Remove gamma from the PRMWrapper kwargs"):
        _manager(tmp_path, conf).setup_experiment()
    train = DummyVecEnv([lambda: PRMWrapper(_fetch(), critic="subgoal", gamma=0.95)])
    model = SAC("MultiInputPolicy", train, gamma=0.98, learning_starts=1000, buffer_size=1000,
                policy_kwargs=dict(net_arch=[8]), seed=0)
    with loud(35, "PRMWrapper built outside zoo with gamma 0.95, model.gamma 0.98 (PRMZooCallback)", ValueError,
              match=r"gamma: PRMWrapper of training env 0 shapes with gamma=0.95, but SAC's model.gamma is 0.98"):
        model.learn(10, callback=PRMZooCallback())
    with loud(35, "PRMWrapper without gamma, built outside rl-baselines3-zoo", ValueError,
              match=r"gamma: not given, and the algorithm's discount is not visible here .*expected gamma:"):
        PRMWrapper(_fetch(), critic="subgoal")


@pytest.mark.fault
def test_a_bad_critic_string_is_one_error_naming_the_value_and_the_choices(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the error names the working directory a relative path is read from
    make = lambda critic: get_wrapper_class({"env_wrapper": [{WRAPPER: {"critic": critic, "gamma": 0.95}}]})
    with loud(35, "zoo YAML critic: subgol (a misspelt name)", ValueError,
              match=r"critic: expected one of \['subgoal'\] or the path of a critic file \(.onnx, or a critic "
                    r"checkpoint .json / .safetensors\), got 'subgol': not a name, and no such file .*did you mean "
                    r"'subgoal'\?"):
        make("subgol")(_fetch())
    missing = str(tmp_path / "reach_critic.onnx")
    with loud(35, "zoo YAML critic: a path to an ONNX file that does not exist", ValueError,
              match=r"critic: expected .* got '.*reach_critic.onnx': not a name, and no such file"):
        make(missing)(_fetch())
    with loud(35, "zoo YAML critic: 3 (not a string)", TypeError,
              match=r"critic: expected one of \['subgoal'\] .*, got int 3"):
        make(3)(_fetch())


def test_critic_files_are_loaded_once_and_shared(tmp_path, monkeypatch):
    """A checkpoint path (the torch state critic) and an .onnx path (OnnxCritic), relative to the
    working directory, are loaded once per process for every env naming them (per env under a deadline)."""
    from prm_critic.models.checkpoint import save_state_critic
    from sb3_helpers import tiny_state_critic

    net, meta, _ = tiny_state_critic(ENV_ID)
    ckpt = save_state_critic(tmp_path / "reach", net, meta)
    critics = {"reach.json": "TorchStateCritic"}
    if importlib.util.find_spec("onnxruntime") is not None:
        from prm_critic.onnx import export_state_critic

        export_state_critic(ckpt, tmp_path / "reach.onnx")
        critics["reach.onnx"] = "OnnxCritic"
    monkeypatch.chdir(tmp_path)
    for name, kind in critics.items():
        envs = [PRMWrapper(_fetch(), critic=name, gamma=0.95) for _ in range(2)]
        assert envs[0].critic is envs[1].critic and type(envs[0].critic).__name__ == kind
        late = PRMWrapper(_fetch(), critic=name, gamma=0.95, deadline_s=5.0)
        assert late.critic is not envs[0].critic
        late.close()
        env = envs[0]
        obs, _ = env.reset(seed=0)
        obs, _, _, _, info = env.step(env.action_space.sample())
        x = info["prm_next_x"]
        assert info["prm_next_phi"] == pytest.approx(float(env.critic.score(x[None]).progress[0]), abs=1e-6)
        assert np.isfinite(info["prm_shaping"])


def test_settings_that_would_fail_later_are_refused_at_construction(tmp_path):
    with pytest.raises(ValueError, match=r"monitor_kwargs: info_keywords \['prm_shaping'\] are PRMWrapper's info "
                                         r"keys, added above zoo's Monitor"):
        PRMWrapper(_fetch(info_keywords=("is_success", "prm_shaping")), critic="subgoal", gamma=0.95)
    with pytest.raises(ValueError, match=r"shaping: with shaping=None and prune=None"):
        PRMWrapper(_fetch(), critic="subgoal", shaping=None)
    hyper = _hyperparams()
    hyper["replay_buffer_kwargs"] = "dict(goal_selection_strategy='future', n_sampled_goal=4)"
    conf = _write_yaml(tmp_path / "sac.yml", hyper)
    with pytest.raises(ValueError, match=r"replay_buffer_kwargs: HerReplayBuffer relabels rewards through this "
                                         r"wrapper's compute_reward.*expected copy_info_dict=True"):
        _manager(tmp_path, conf).setup_experiment()


def test_her_relabels_through_the_wrapper_with_compact_rows():
    """``PRMHerReplayBuffer`` (a Python config's ``replay_buffer_class``) relabels through the
    wrapper's ``relabel_rows`` / ``compute_reward_rows``: the same rewards as ``compute_reward``."""
    import torch

    from prm_critic.sb3.her import PRMHerReplayBuffer

    venv = DummyVecEnv([lambda: PRMWrapper(_fetch(), critic="subgoal", gamma=0.95, scale=10.0)])
    model = SAC("MultiInputPolicy", venv, gamma=0.95, learning_starts=1000, buffer_size=1000,
                replay_buffer_class=PRMHerReplayBuffer, policy_kwargs=dict(net_arch=[8]), seed=0)
    model.learn(120)  # two episodes stored through the wrapper's relabel_rows
    buf = model.replay_buffer
    batch = buf.sample(32)  # relabelled through the wrapper's compute_reward_rows
    assert torch.isfinite(batch.rewards).all()
    idx = np.arange(buf.pos)
    rows = buf.prm_rows
    (wrapper,) = venv.envs
    ag = buf.next_observations["achieved_goal"][idx, 0]
    dg = buf.next_observations["desired_goal"][idx[::-1], 0]  # other goals: recomputed shaping
    from prm_critic.wrappers import RelabelRows

    got = wrapper.compute_reward_rows(ag, dg, RelabelRows(*(rows[k][idx, 0] for k in ("x", "next_x", "terminated",
                                                                                       "shaping"))))
    infos = [{"prm_x": rows["x"][i, 0], "prm_next_x": rows["next_x"][i, 0], "prm_terminated": rows["terminated"][i, 0],
              "prm_shaping": rows["shaping"][i, 0]} for i in idx]
    np.testing.assert_array_equal(got, wrapper.compute_reward(ag, dg, infos))
    assert np.isfinite(got).all() and buf.pos == 120
