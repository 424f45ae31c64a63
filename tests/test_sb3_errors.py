"""Bad input to the SB3 training helpers gets one clear error naming the parameter and value;
the unshaped evaluation normalises success keys across task families."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("stable_baselines3")
pytest.importorskip("gymnasium_robotics")

from prm_critic.cli import main  # noqa: E402
from prm_critic.robotics.make import make_env  # noqa: E402
from prm_critic.robotics.spec import load_spec  # noqa: E402
from prm_critic.sb3 import PolicyCheckpointError, UnshapedSuccessEval, load_policy, train_policy  # noqa: E402
from prm_critic.sb3.envs import make_train_env, resolve_critic  # noqa: E402
from prm_critic.sb3.monitor import step_success  # noqa: E402


@pytest.mark.parametrize("kwargs,match", [
    (dict(algo="ddpg"), r"algo: expected one of \['sac', 'tqc', 'ppo', 'crossq'\], got 'ddpg'"),
    (dict(total_steps=0), r"total_steps: expected a positive integer, got 0"),
    (dict(shaping="potentail", critic="subgoal"), r"shaping: expected one of .*got 'potentail'"),
    (dict(shaping="potential"), r"critic: shaping='potential' / prune=None need a critic"),
    (dict(critic="subgoal"), r"shaping: a critic \(subgoal\) was given but shaping=None"),
    (dict(scale=0, critic="subgoal", shaping="potential"), r"scale: expected a finite number > 0, got 0"),
    (dict(prune={"threshold": 0.1}, critic="subgoal"), r"prune: expected keys threshold, patience"),
    (dict(algo="ppo", her=True), r"her: HER needs an off-policy algorithm .* got algo='ppo'"),
    (dict(eval_freq=-5), r"eval_freq: expected None or a positive integer, got -5"),
    (dict(n_envs=0), r"n_envs: expected a positive integer, got 0"),
    (dict(seed=-3), r"seed: expected an integer in \[0, 2\*\*32\), got -3"),
    (dict(algo_kwargs=dict(gama=0.9)), r"algo_kwargs: 'gama' is not an argument of SAC; did you mean 'gamma'\?"),
    (dict(algo="ppo", algo_kwargs=dict(tau=0.05)), r"algo_kwargs: 'tau' is not an argument of PPO"),
    (dict(algo_kwargs=dict(seed=1)), r"algo_kwargs\['seed'\]: set by train_policy itself \(use seed=\)"),
    (dict(algo_kwargs=dict(gamma=1.5)), r"algo_kwargs\['gamma'\]: expected a number in \(0, 1\], got 1.5"),
    (dict(algo_kwargs=[("gamma", 0.9)]), r"algo_kwargs: expected None or a dict of sac constructor arguments"),
    (dict(prune=dict(threshold=2.0, patience=5), critic="subgoal"),
     r"prune\['threshold'\]: expected a number in \[0, 1\] \(a critic score\), got 2.0"),
    (dict(prune=dict(threshold=0.1, patience=0.5), critic="subgoal"),
     r"prune\['patience'\]: expected a positive integer \(env steps\), got 0.5"),
])
def test_train_policy_rejects_bad_arguments(kwargs, match):
    base = dict(total_steps=10)
    base.update(kwargs)
    with pytest.raises(ValueError, match=match):
        train_policy("FetchReach-v4", **base)


def test_her_needs_a_goal_env():
    with pytest.raises(ValueError, match=r"her: HER needs a goal-conditioned env"):
        train_policy("Pusher-v5", her=True, total_steps=10)


def test_unknown_task_and_missing_critic_file(tmp_path):
    with pytest.raises(ValueError, match=r"task: unknown task 'FetchRech-v4'.*did you mean 'FetchReach-v4'"):
        train_policy("FetchRech-v4", total_steps=10)
    with pytest.raises(FileNotFoundError, match=r"critic: expected 'subgoal'.*no_such_critic.*no such file"):
        resolve_critic(str(tmp_path / "no_such_critic.json"), "FetchReach-v4")
    with pytest.raises(ValueError, match=r"critic: expected None, 'subgoal', a BaseCritic or a checkpoint path, got 3"):
        resolve_critic(3, "FetchReach-v4")


def test_load_policy_errors(tmp_path):
    with pytest.raises(PolicyCheckpointError, match=r"path: expected a policy checkpoint policy.safetensors \+ policy.json"):
        load_policy(tmp_path / "policy")
    (tmp_path / "policy.safetensors").write_bytes(b"x")
    (tmp_path / "policy.json").write_text(json.dumps({"format": "something-else"}))
    with pytest.raises(PolicyCheckpointError, match=r"is not a prm-critic SB3 policy \(format 'something-else'"):
        load_policy(tmp_path / "policy")
    (tmp_path / "policy.json").write_text("{not json")
    with pytest.raises(PolicyCheckpointError, match=r"is not valid JSON"):
        load_policy(tmp_path / "policy.json")


def test_cli_bad_input_is_one_line(capsys, tmp_path):
    rc = main(["train-policy", "--task", "FetchReach-v4", "--steps", "0", "--out", str(tmp_path)])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err.count("\n") == 0
    assert "total_steps: expected a positive integer, got 0" in err
    rc = main(["train-policy", "--task", "FetchReach-v4", "--steps", "10", "--prune-threshold", "0.1",
               "--critic", "subgoal", "--out", str(tmp_path)])
    assert rc == 2 and "--prune-threshold/--prune-patience: give both or neither" in capsys.readouterr().err


def test_cli_trains_and_writes_checkpoint(tmp_path, capsys):
    out = tmp_path / "run"
    rc = main(["train-policy", "--task", "FetchReach-v4", "--algo", "sac", "--critic", "subgoal", "--her",
               "--steps", "120", "--seed", "0", "--eval-freq", "120", "--eval-episodes", "2", "--out", str(out), "--progress",
               "--algo-kwargs", '{"learning_starts": 60, "batch_size": 16, "policy_kwargs": {"net_arch": [8, 8]}}'])
    assert rc == 0, capsys.readouterr().err
    meta = json.loads((out / "policy.json").read_text())
    assert meta["her"] is True and meta["extra"]["shaping"] == "potential" and meta["extra"]["critic"] == "subgoal"
    assert meta["policy_kwargs"]["net_arch"] == [8, 8]
    assert (out / "eval.csv").read_text().count("\n") == 3  # header + steps 0 and 120
    model = load_policy(out / "policy.json")
    obs, _ = make_env("FetchReach-v4").reset(seed=0)
    assert model.predict(obs, deterministic=True)[0].shape == (4,)


def test_cli_normalize_obs_keeps_the_statistics_in_the_checkpoint(tmp_path, capsys):
    out = tmp_path / "run"
    rc = main(["train-policy", "--task", "FetchReach-v4", "--steps", "80", "--seed", "0", "--normalize-obs",
               "--out", str(out), "--algo-kwargs", '{"learning_starts": 40, "batch_size": 16, "policy_kwargs": {"net_arch": [8]}}'])
    assert rc == 0, capsys.readouterr().err
    model = load_policy(out / "policy.json")
    vn = model.get_env()  # VecNormalize with the training statistics, not a fresh one
    assert type(vn).__name__ == "VecNormalize" and vn.training is False
    assert vn.obs_rms["observation"].count > 1 and np.any(vn.obs_rms["observation"].var != 1.0)


def test_step_success_normalises_keys():
    fetch, maze, kitchen = (load_spec(n) for n in ("FetchReach-v4", "PointMaze_UMaze-v3", "FrankaKitchen-v1"))
    assert step_success(fetch, {"is_success": 1.0}, None, False) is True
    assert step_success(fetch, {"is_success": 0.0}, None, False) is False
    assert step_success(maze, {"success": True}, None, True) is True
    assert step_success(kitchen, {"tasks_to_complete": []}, None, False) is True
    assert step_success(kitchen, {"tasks_to_complete": ["kettle"]}, None, False) is False
    with pytest.raises(KeyError, match="is_success"):
        step_success(fetch, {}, None, False)


class _Policy:
    """A fixed controller standing in for a model in the evaluation loop (predict API only)."""

    def __init__(self, fn):
        self.fn = fn

    def predict(self, obs, deterministic=True):
        return self.fn(obs), None


def test_unshaped_eval_pointmaze_any_rule_and_unshaped_env():
    ev = UnshapedSuccessEval("PointMaze_UMaze-v3", eval_freq=10, n_episodes=3)
    # the eval env carries no PRM wrapper
    e = ev.eval_env
    while hasattr(e, "env"):
        assert "PRM" not in type(e).__name__ and "Pruner" not in type(e).__name__
        e = e.env
    # a greedy controller toward the goal (straight line) vs. one that never moves
    still = ev.evaluate(_Policy(lambda o: np.zeros(2, np.float32)))
    assert still["success_rate"] == 0.0 and still["mean_length"] == 300.0 and still["mean_return"] == 0.0
    # same seeds -> same result: evaluation is reproducible across calls
    assert ev.evaluate(_Policy(lambda o: np.zeros(2, np.float32))) == still


def test_unshaped_eval_fetch_reaches_with_a_controller():
    ev = UnshapedSuccessEval("FetchReach-v4", eval_freq=10, n_episodes=3)

    def ctrl(o):
        d = (o["desired_goal"] - o["achieved_goal"]) * 10
        return np.clip(np.concatenate([d, [0.0]]), -1, 1).astype(np.float32)

    good = ev.evaluate(_Policy(ctrl))
    bad = ev.evaluate(_Policy(lambda o: np.zeros(4, np.float32)))
    assert good["success_rate"] == 1.0 and good["mean_return"] > bad["mean_return"]
    assert bad["mean_length"] == 50.0


def test_unshaped_eval_rejects_bad_arguments():
    with pytest.raises(ValueError, match=r"eval_freq: expected a positive integer, got 0"):
        UnshapedSuccessEval("FetchReach-v4", eval_freq=0)
    with pytest.raises(ValueError, match=r"n_episodes: expected a positive integer, got -1"):
        UnshapedSuccessEval("FetchReach-v4", eval_freq=10, n_episodes=-1)


def test_make_train_env_chain_order():
    env = make_train_env("FetchReach-v4", critic="subgoal", shaping="potential", gamma=0.9,
                         prune=dict(threshold=0.1, patience=3))
    names = []
    e = env
    while hasattr(e, "env"):
        names.append(type(e).__name__)
        e = e.env
    assert names[:3] == ["PRMMonitor", "DeadEndPruner", "PRMRewardShaper"]
    shaper = env.env.env
    assert shaper.gamma == 0.9
