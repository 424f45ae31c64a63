"""Conventions users expect from the CLI: `specs NAME` prints the TOML and its path, no dependency
notices on stderr, a progress bar over the training budget, ONNX export phases, and the
quickstart's explanation of the shaped return."""

import logging
import os
import subprocess
import sys

import numpy as np
import pytest

from prm_critic.cli import build_parser, main

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([os.getcwd(), *sys.path])}
ADROIT = "AdroitHand"


def _cli(*args, code=None):
    cmd = [sys.executable, "-c", code] if code else [sys.executable, "-m", "prm_critic.cli", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=ENV)


def test_specs_name_prints_the_toml_and_its_path(capsys):
    from prm_critic.commands.specs import spec_file
    from prm_critic.robotics import load_spec

    assert main(["specs", "FetchReach-v4"]) == 0
    out = capsys.readouterr().out
    first, rest = out.split("\n", 1)
    path = spec_file("FetchReach-v4")
    assert first == f"# {path.resolve()}" and path.name == "fetch_reach.toml"
    assert rest == path.read_text()  # the file as users copy it
    assert load_spec(tomllib.loads(out)) == load_spec("FetchReach-v4")  # the printout is valid TOML
    # a file path is shown the same way
    assert main(["specs", str(path)]) == 0
    assert capsys.readouterr().out == out


def test_specs_unknown_name_lists_the_known_ones(capsys):
    assert main(["specs", "FetchRech-v4"]) == 2
    err = capsys.readouterr().err
    assert "unknown task 'FetchRech-v4'" in err and "'PointMaze_UMaze-v3'" in err and "did you mean 'FetchReach-v4'" in err
    assert main(["specs", "missing.toml"]) == 2
    assert "file 'missing.toml' does not exist" in capsys.readouterr().err


def test_dependency_notice_is_not_shown_by_the_cli_or_the_robotics_package(tmp_path):
    pytest.importorskip("gymnasium_robotics")
    from prm_critic._notices import known_notices

    if not any(ADROIT in n for n in known_notices()):
        pytest.skip("this gymnasium-robotics version prints no Adroit notice")
    # control: a plain import prints it
    assert ADROIT in _cli(code="import gymnasium_robotics").stderr
    r = _cli("specs")
    assert r.returncode == 0 and ADROIT not in r.stderr
    # a command that builds an env (its one import of gymnasium_robotics) writes nothing to stderr
    r = _cli("collect", "--task", "FetchReach-v4", "--episodes", "1", "--max-episode-steps", "3", "--no-progress",
             "--out", str(tmp_path / "data"))
    assert r.returncode == 0 and ADROIT not in r.stderr and r.stderr == ""
    # and through the robotics package, without the CLI
    r = _cli(code="from prm_critic.robotics.make import make_env; make_env('FetchReach-v4').close()")
    assert r.returncode == 0 and ADROIT not in r.stderr


def test_notice_filter_passes_everything_else_through(capsys):
    from prm_critic._notices import known_notices, quiet_notices

    note = known_notices()[0] if known_notices() else None
    with pytest.warns(UserWarning, match="our own warning"):
        with quiet_notices():
            if note is not None:
                print(note, file=sys.stderr)
            print("other text", file=sys.stderr)
            import warnings

            warnings.warn("our own warning", UserWarning, stacklevel=2)
    err = capsys.readouterr().err
    assert err == "other text\n"


def test_train_policy_progress_bar_total_is_the_budget(tmp_path, capsys):
    pytest.importorskip("stable_baselines3")
    from prm_critic.sb3 import train_policy

    args = build_parser().parse_args(["train-policy", "--task", "PointMaze_UMaze-v3", "--steps", "8", "--out", "x"])
    assert args.progress is True  # on by default in the CLI
    args = build_parser().parse_args(["train-policy", "--task", "PointMaze_UMaze-v3", "--steps", "8", "--out", "x",
                                      "--no-progress"])
    assert args.progress is False

    capsys.readouterr()
    model = train_policy("PointMaze_UMaze-v3", algo="ppo", total_steps=128, seed=0,  # on by default
                         algo_kwargs={"policy_kwargs": {"net_arch": [8]}})
    err = capsys.readouterr().err
    assert model.num_timesteps == 128
    assert "0/128" in err and "128/128" in err and "train-policy ppo PointMaze_UMaze-v3" in err
    model = train_policy("PointMaze_UMaze-v3", algo="ppo", total_steps=128, seed=0, progress=False,
                         algo_kwargs={"policy_kwargs": {"net_arch": [8]}})
    assert "/128" not in capsys.readouterr().err

    # through the CLI, with the default on
    rc = main(["train-policy", "--task", "PointMaze_UMaze-v3", "--algo", "ppo", "--steps", "64", "--out",
               str(tmp_path / "run"), "--algo-kwargs", '{"policy_kwargs": {"net_arch": [8]}}'])
    assert rc == 0
    err = capsys.readouterr().err
    assert "0/64" in err and "64/64" in err


def test_onnx_export_reports_its_phases(tmp_path, caplog, capsys):
    pytest.importorskip("onnxruntime")
    from prm_critic.onnx.export import export_subgoal_critic, read_onnx_metadata
    from prm_critic.robotics.make import make_env
    from prm_critic.robotics.subgoals import SubgoalCritic

    env = make_env("FetchReach-v4")
    critic = SubgoalCritic("FetchReach-v4", env)
    env.close()
    with caplog.at_level(logging.INFO, logger="prm_critic.onnx.export"):
        path = export_subgoal_critic(critic, tmp_path / "c.onnx")
    msgs = [r.getMessage() for r in caplog.records if r.name == "prm_critic.onnx.export"]
    for phase in ("tracing", "onnx.checker", "checking parity", "parity OK", "writing"):
        assert any(phase in m for m in msgs), (phase, msgs)
    sha = read_onnx_metadata(path)["prm_critic.sha256"]
    assert len(sha) == 64 and msgs[-1] == f"wrote {path}: {path.stat().st_size} bytes, sha256 {sha}"

    rc = main(["export", "--subgoal-spec", "FetchReach-v4", "--out", str(tmp_path / "d.onnx")])
    assert rc == 0
    err = capsys.readouterr().err
    assert "export: tracing" in err and "export: parity OK" in err and f"export: wrote {tmp_path / 'd.onnx'}" in err
    rc = main(["export", "--subgoal-spec", "FetchReach-v4", "--out", str(tmp_path / "e.onnx"), "--quiet"])
    assert rc == 0 and "export:" not in capsys.readouterr().err


@pytest.mark.parametrize("max_steps", [400, 6])
def test_quickstart_shaping_breakdown_matches_the_shaper(max_steps):
    """The numbers the quickstart prints add up to the shaper's own per-step terms, on a real
    PointMaze episode that terminates (success) and one cut by the time limit."""
    from prm_critic.commands.quickstart import _explain_line, shaping_breakdown
    from prm_critic.robotics.controllers import make_controller
    from prm_critic.robotics.make import make_env
    from prm_critic.robotics.subgoals import SubgoalCritic
    from prm_critic.wrappers import PRMRewardShaper

    base = make_env("PointMaze_UMaze-v3", max_episode_steps=max_steps)
    critic = SubgoalCritic("PointMaze_UMaze-v3", base)
    gamma = 0.99
    env = PRMRewardShaper(base, critic, gamma=gamma)
    ctrl = make_controller("PointMaze_UMaze-v3", env)
    obs, _ = env.reset(seed=3)
    ctrl.reset(obs, np.random.default_rng(3))
    phis, shaping, ret = [], 0.0, 0.0
    while True:
        obs, r, terminated, truncated, info = env.step(ctrl.act(obs))
        phis.append(info["prm_phi"])
        shaping += info["prm_shaping"]
        ret += info["prm_original_reward"]
        if terminated or truncated:
            break
    env.close()
    assert terminated == (max_steps == 400)
    b = shaping_breakdown(phis, info["prm_next_phi"], terminated, gamma)
    assert b["total"] == pytest.approx(shaping, abs=1e-9)
    if terminated:
        assert b["end"] == 0.0 and b["total"] < 0
    line = _explain_line(0, len(phis), terminated, ret, b, gamma=gamma)
    assert f"shaping {b['total']:+.2f}" in line and f"{b['start']:.2f}" in line
    with pytest.raises(ValueError, match="phis"):
        shaping_breakdown([], 0.0, True, gamma)
