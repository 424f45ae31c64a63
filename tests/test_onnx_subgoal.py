"""ONNX export of the no-training SubgoalCritic (spec progress): exact parity with the numpy critic on
real scripted FetchPush-v4 rollouts (every subgoal stage visited), both batch variants; Box-obs
Pusher-v5; maze_path specs refused clearly."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("gymnasium_robotics")

from prm_critic.onnx import OnnxCritic, OnnxExportError, read_onnx_metadata  # noqa: E402
from prm_critic.onnx.export import export_subgoal_critic  # noqa: E402
from prm_critic.robotics.controllers import make_controller  # noqa: E402
from prm_critic.robotics.make import make_env  # noqa: E402
from prm_critic.robotics.subgoals import SubgoalCritic  # noqa: E402


def _scripted_inputs(critic, env, episodes=2):
    ctrl = make_controller("FetchPush-v4", env, noise=0.05, random_prob=0.0)
    rng = np.random.default_rng(0)
    xs = []
    for ep in range(episodes):
        obs, _ = env.reset(seed=ep)
        ctrl.reset(obs, rng)
        for _ in range(50):
            xs.append(critic.layout.flatten(obs))
            obs, _, term, trunc, _ = env.step(ctrl.act(obs))
            if term or trunc:
                break
    return np.stack(xs).astype(np.float32)


def test_subgoal_critic_export_parity_on_real_rollouts(tmp_path):
    env = make_env("FetchPush-v4")
    critic = SubgoalCritic("FetchPush-v4", env)
    x = _scripted_inputs(critic, env)
    ref = critic.score(x)
    assert set(np.unique(ref.extra["subgoals_reached"])) >= {0.0, 1.0}  # several stages visited
    for batch in ("dynamic", 1):
        p = export_subgoal_critic(critic, tmp_path / f"sg_{batch}.onnx", batch=batch, parity_inputs=x)
        oc = OnnxCritic(p, provider="cpu", env=env)
        got = oc.score(x)
        np.testing.assert_allclose(got.progress, ref.progress, rtol=0, atol=1e-6)
        np.testing.assert_allclose(got.success, ref.success, rtol=0, atol=1e-6)
        assert oc.score_one(x[10]) == pytest.approx((ref.progress[10], ref.success[10]), abs=1e-6)
        meta = read_onnx_metadata(p)
        assert meta["label_family"] == "subgoal" and meta["task"] == "FetchPush-v4"
        assert meta["net"]["subgoals"] == ["gripper_behind_object", "object_at_goal"]
        assert oc.spec.name == "FetchPush-v4" and oc.layout.to_dict() == critic.layout.to_dict()
    assert sorted(f.name for f in tmp_path.iterdir()) == ["sg_1.onnx", "sg_dynamic.onnx"]
    env.close()


def test_subgoal_export_box_env_and_maze_refused(tmp_path):
    env = make_env("Pusher-v5")
    critic = SubgoalCritic("Pusher-v5", env)
    p = export_subgoal_critic(critic, tmp_path / "pusher.onnx")
    x = np.random.default_rng(1).uniform(-1, 1, (64, critic.obs_dim)).astype(np.float32)
    np.testing.assert_allclose(OnnxCritic(p, env=env).score(x).progress, critic.score(x).progress, atol=1e-6)
    env.close()
    maze = make_env("PointMaze_UMaze-v3")
    with pytest.raises(OnnxExportError, match=r"subgoals \['follow_shortest_path'\] .* kind \['maze_path'\]; ONNX export supports 'distance' subgoals only"):
        export_subgoal_critic(SubgoalCritic("PointMaze_UMaze-v3", maze), tmp_path / "maze.onnx")
    maze.close()
    with pytest.raises(TypeError, match=r"critic: expected a SubgoalCritic, got str"):
        export_subgoal_critic("FetchPush-v4", tmp_path / "x.onnx")


def test_cli_exports_subgoal_critic(tmp_path, capsys):
    from prm_critic.cli import main as cli_main

    out = tmp_path / "push_sg.b1.onnx"
    assert cli_main(["export", "--subgoal-spec", "FetchPush-v4", "--out", str(out), "--batch", "1"]) == 0
    assert "label_family='subgoal'" in capsys.readouterr().out
    assert OnnxCritic(out).batch == 1
    rc = cli_main(["export", "--subgoal-spec", "FetchPsh-v4", "--out", str(tmp_path / "x.onnx")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "FetchPsh-v4" in err[0]


def test_mean_progress_spec_exports_with_parity(tmp_path):
    """A spec with ``progress = "mean"`` exports its own formula (not the ladder's): parity on real rollouts."""
    from prm_critic.robotics.spec import load_spec

    d = load_spec("FetchPush-v4").to_dict()
    d["task"]["progress"] = "mean"
    spec = load_spec(d)
    env = make_env(spec)
    critic = SubgoalCritic(spec, env)
    ladder = SubgoalCritic("FetchPush-v4", env)
    x = _scripted_inputs(critic, env)
    ref = critic.score(x)
    assert np.abs(ref.progress - ladder.score(x).progress).max() > 0.05  # a different potential
    p = export_subgoal_critic(critic, tmp_path / "mean.onnx", parity_inputs=x)
    oc = OnnxCritic(p, provider="cpu", env=env)
    got = oc.score(x)
    np.testing.assert_allclose(got.progress, ref.progress, rtol=0, atol=1e-6)
    np.testing.assert_allclose(got.success, ref.success, rtol=0, atol=1e-6)
    assert oc.spec.progress == "mean"
    env.close()


def test_expression_spec_exports_with_parity(tmp_path):
    """Subgoal points with constants and offsets (a real Reacher-v5 spec, ``b = 0`` and affine
    expressions, an approach point with a constant ``behind``): the ONNX graph computes the same
    progress and success as the numpy critic on real reaching rollouts and on random inputs."""
    from prm_critic.robotics.spec import load_spec
    from test_faults_spec import reacher_ik_action

    spec = load_spec({
        "task": {"name": "ReacherExpr", "env_id": "Reacher-v5", "critic_input": ["obs"],
                 "success": {"source": "subgoals"}},
        "subgoals": [
            {"name": "near_target", "a": "(obs[8:10] + obs[4:6]) * 2 - [0.1, 0]", "b": "2 * obs[4:6] - [0.1, 0]",
             "threshold": 0.1, "scale": 0.8},
            {"name": "beside_target", "a": "obs[8:10] + obs[4:6]", "b": "obs[4:6] / 1", "behind": [0, 0],
             "offset": 0.005, "threshold": 0.02, "scale": 0.4},
            {"name": "at_target", "a": "obs[8:10]", "b": 0, "threshold": 0.01, "scale": 0.4},
        ],
    })
    env = make_env(spec)
    critic = SubgoalCritic(spec, env)
    xs = []
    for seed in range(3):
        obs, _ = env.reset(seed=seed)
        for _ in range(50):
            xs.append(critic.layout.flatten(obs))
            obs, *_ = env.step(reacher_ik_action(obs))
    x = np.stack(xs).astype(np.float32)
    ref = critic.score(x)
    assert set(np.unique(ref.extra["subgoals_reached"])) >= {0.0, 1.0, 3.0}  # every stage visited
    p = export_subgoal_critic(critic, tmp_path / "reacher_expr.onnx", parity_inputs=x)
    oc = OnnxCritic(p, provider="cpu", env=env)
    rnd = np.random.default_rng(2).uniform(-0.3, 0.3, (128, critic.obs_dim)).astype(np.float32)
    for batch in (x, rnd):
        want, got = critic.score(batch), oc.score(batch)
        np.testing.assert_allclose(got.progress, want.progress, rtol=0, atol=1e-6)
        np.testing.assert_allclose(got.success, want.success, rtol=0, atol=1e-6)
    assert oc.spec == spec
    env.close()
