"""The deploy install without torch: the ``onnx`` and ``robotics`` extras.

* A real control loop (FetchPush-v4 in MuJoCo, an exported critic run by onnxruntime in the reward
  shaper, the spec's SubgoalCritic in the dead-end pruner) runs in a subprocess in which importing
  torch, safetensors, matplotlib or tqdm raises ImportError. That blocker is a SIMULATION of a
  torch-free environment for machines where torch is installed; CI also runs these tests in a
  second environment that really has only the ``onnx`` and ``robotics`` extras.
* The README's "on the robot" example (docs/readme/deploy.md) runs the same way.
* The learned-critic modules, imported without torch, fail with the exact ``pip install`` to run.
* The core dependencies and the deploy extras pull no torch (read from ``pyproject.toml``).

The ONNX file is exported with torch. Where torch is installed the test exports it itself; in the
torch-free environment it reads the folder named by ``PRM_CRITIC_DEPLOY_ARTIFACTS``, written by
``python tests/test_deploy_torch_free.py FOLDER`` in an environment with the ``torch`` and ``onnx``
extras (``.ci/run`` does both).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from prm_critic._optional import install_hint

pytestmark = pytest.mark.deploy

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS_VAR = "PRM_CRITIC_DEPLOY_ARTIFACTS"
TASK = "FetchPush-v4"
ONNX_NAME = "fetchpush_critic.b1.onnx"
BLOCKED = ("torch", "safetensors", "matplotlib", "tqdm")
GAMMA = 0.98
PATIENCE = 6
STEPS = 20

# Prepended to every child script: SIMULATION of an environment without torch and the other
# packages that left the core install. Any import of them raises ImportError, as it would there;
# the attempts are recorded so that a failure can say who tried.
BLOCKER = textwrap.dedent(f"""
    import importlib.abc, sys
    BLOCKED = {BLOCKED!r}
    ATTEMPTS = []

    class _NotInstalled(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                ATTEMPTS.append(name)
                raise ImportError(f"No module named {{name!r}} (blocked: simulated torch-free install)")
            return None

    for _m in [m for m in sys.modules if m.split(".")[0] in BLOCKED]:
        del sys.modules[_m]
    sys.meta_path.insert(0, _NotInstalled())
""")


def write_deploy_artifacts(folder: str | os.PathLike) -> Path:
    """Export a small FetchPush-v4 state critic to ``folder/ONNX_NAME`` (batch 1). Needs torch + onnx."""
    import torch

    from prm_critic.models.checkpoint import save_state_critic
    from prm_critic.models.state_critic import StateCriticNet
    from prm_critic.onnx import export_state_critic
    from prm_critic.robotics.make import CriticInputLayout, make_env
    from prm_critic.robotics.spec import load_spec

    folder = Path(folder)
    spec = load_spec(TASK)
    env = make_env(spec)
    layout = CriticInputLayout.from_space(spec, env.observation_space)
    env.close()
    torch.manual_seed(0)
    net = StateCriticNet(layout.obs_dim, hidden=(32, 32))
    with torch.no_grad():
        net.head.weight.mul_(5.0)  # spread the untrained scores so that the shaping terms are not ~0
    meta = {"task": spec.name, "spec": spec.to_dict(), "layout": layout.to_dict(), "label_family": "subgoal"}
    ckpt = save_state_critic(folder / "fetchpush_critic", net, meta)
    return Path(export_state_critic(ckpt, folder / ONNX_NAME, batch=1))


@pytest.fixture(scope="module")
def onnx_file(tmp_path_factory) -> Path:
    folder = os.environ.get(ARTIFACTS_VAR)
    if folder:
        path = Path(folder) / ONNX_NAME
        if not path.is_file():
            pytest.fail(f"{ARTIFACTS_VAR}={folder!r} has no {ONNX_NAME}; write it with "
                        f"`python tests/test_deploy_torch_free.py {folder}` where torch is installed")
        return path
    if importlib.util.find_spec("torch") is None:
        pytest.skip(f"torch is not installed to export the critic and {ARTIFACTS_VAR} is not set")
    pytest.importorskip("onnxruntime")
    pytest.importorskip("gymnasium_robotics")
    return write_deploy_artifacts(tmp_path_factory.mktemp("deploy"))


def _run_blocked(body: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """Run ``BLOCKER + body`` in a fresh interpreter that imports this prm_critic (the one under test)."""
    import prm_critic

    here = str(Path(prm_critic.__file__).parents[1])
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join([here, os.environ.get("PYTHONPATH", "")]))
    script = tmp_path / "child.py"
    script.write_text(BLOCKER + textwrap.dedent(body))
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path, env=env,
                          timeout=600)


CONTROL_LOOP = f"""
    import json
    import numpy as np

    from prm_critic.onnx import OnnxCritic
    from prm_critic.robotics.make import make_env
    from prm_critic.robotics.subgoals import SubgoalCritic
    from prm_critic.wrappers import DeadEndPruner, PRMRewardShaper

    env = make_env({TASK!r}, max_episode_steps=50)
    critic = OnnxCritic(ONNX, provider="cpu", env=env)
    subgoals = SubgoalCritic({TASK!r}, env)
    shaped = PRMRewardShaper(env, critic, gamma={GAMMA})        # layout from the ONNX metadata
    # success < 1 until the object is at the goal: random actions are pruned after PATIENCE steps
    loop = DeadEndPruner(shaped, subgoals, threshold=1.0, patience={PATIENCE})
    loop.action_space.seed(0)
    obs, info = loop.reset(seed=0)
    steps, episode_lengths, n = [], [], 0
    for _ in range({STEPS}):
        obs, reward, terminated, truncated, info = loop.step(loop.action_space.sample())
        n += 1
        pair = np.stack([info["prm_x"], info["prm_next_x"]]).astype(np.float32)
        ref = critic.score(pair).progress                       # the critic called directly
        steps.append({{
            "reward": float(reward), "original": float(info["prm_original_reward"]),
            "phi": float(info["prm_phi"]), "next_phi": float(info["prm_next_phi"]),
            "ref_phi": float(ref[0]), "ref_next_phi": float(ref[1]),
            "prune_score": float(info["prm_prune_score"]),
            "ref_prune_score": float(subgoals.score(pair[1:]).success[0]),
            "fallback": bool(info["prm_fallback"]), "pruned": bool(info.get("prm_pruned", False)),
        }})
        if terminated or truncated:
            episode_lengths.append(n)
            n = 0
            obs, info = loop.reset()
    loop.close()
    print("RESULT " + json.dumps({{
        "steps": steps, "episode_lengths": episode_lengths, "stats": loop.stats,
        "blocked_loaded": sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED),
        "blocked_attempts": sorted(set(ATTEMPTS)), "provider": critic.provider,
    }}))
"""


def _result(proc: subprocess.CompletedProcess) -> dict:
    assert proc.returncode == 0, f"child failed (rc {proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert len(lines) == 1, proc.stdout + proc.stderr
    return json.loads(lines[0][len("RESULT "):])


def test_control_loop_runs_without_torch(onnx_file, tmp_path):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("gymnasium_robotics")
    proc = _run_blocked(f"ONNX = {str(onnx_file)!r}\n" + textwrap.dedent(CONTROL_LOOP), tmp_path)
    res = _result(proc)
    assert res["blocked_loaded"] == [], res["blocked_attempts"]
    assert res["provider"] == "CPUExecutionProvider"
    steps = res["steps"]
    assert len(steps) == STEPS
    for s in steps:
        assert not s["fallback"]
        # F = gamma * Phi(s') - Phi(s) with Phi = the exported critic's progress (not terminal: pruning truncates)
        assert s["phi"] == pytest.approx(s["ref_phi"], abs=1e-6)
        assert s["next_phi"] == pytest.approx(s["ref_next_phi"], abs=1e-6)
        assert s["reward"] == pytest.approx(s["original"] + GAMMA * s["ref_next_phi"] - s["ref_phi"], abs=1e-5)
        assert s["prune_score"] == pytest.approx(s["ref_prune_score"], abs=1e-12)
    assert len({round(s["phi"], 6) for s in steps}) > 1  # the critic's scores move along the episode
    # every episode is a dead end at threshold 1 and is truncated after exactly PATIENCE steps
    assert res["episode_lengths"] == [PATIENCE] * (STEPS // PATIENCE)
    assert [s["pruned"] for s in steps[:PATIENCE]] == [False] * (PATIENCE - 1) + [True]
    assert res["stats"]["pruned_episodes"] == STEPS // PATIENCE


def test_readme_robot_example_runs_without_torch(onnx_file, tmp_path):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("gymnasium_robotics")
    text = (ROOT / "docs" / "readme" / "deploy.md").read_text()
    blocks = [b for b in re.findall(r"```python\n(.*?)```", text, re.S) if "models" not in b]
    assert len(blocks) == 1 and "DeadEndPruner" in blocks[0]
    shutil.copyfile(onnx_file, tmp_path / "critic.b1.onnx")  # the name the example reads
    proc = _run_blocked(blocks[0] + textwrap.dedent("""
        import json
        print("RESULT " + json.dumps({"blocked_loaded": sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED),
                                      "stats": loop.stats, "phi": info["prm_phi"]}))
    """), tmp_path)
    res = _result(proc)
    assert res["blocked_loaded"] == []
    assert 0.0 <= res["phi"] <= 1.0 and res["stats"]["episodes"] >= 1


def test_learned_critic_modules_name_the_torch_extra(tmp_path):
    """Without torch, the modules that need it fail with the install command; the robotics code
    that only names checkpoint files does not need torch."""
    proc = _run_blocked("""
        import json
        out = {}
        for stmt in ("import prm_critic.models", "from prm_critic.models.state_critic import StateCriticNet",
                     "from prm_critic.onnx import export_state_critic"):
            try:
                exec(stmt)
                out[stmt] = "imported"
            except ImportError as exc:
                out[stmt] = str(exc)
        from prm_critic.robotics.collection import policy_id
        try:
            policy_id("no_such_folder/policy")
        except Exception as exc:
            out["policy"] = f"{type(exc).__name__}: {exc}"
        print("RESULT " + json.dumps(out))
    """, tmp_path)
    res = _result(proc)
    policy = res.pop("policy")
    for stmt, msg in res.items():
        assert msg == ("prm-critic needs the optional dependency 'torch' for this feature (the 'torch' extra); "
                       f"install it with: {install_hint('torch')}"), (stmt, msg)
    assert policy.startswith("ValueError: policy: expected 'scripted', 'random'"), policy


def _extras() -> tuple[list[str], dict[str, list[str]]]:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return project["dependencies"], project["optional-dependencies"]


def _name(req: str) -> str:
    return re.split(r"[\s\[<>=!~;]", req, maxsplit=1)[0].lower().replace("_", "-")


def _resolve(extras: dict[str, list[str]], names: list[str]) -> set[str]:
    """Package names the extras ``names`` list, following ``prm-critic[...]`` references."""
    out: set[str] = set()
    todo, seen = list(names), set()
    while todo:
        extra = todo.pop()
        if extra in seen:
            continue
        seen.add(extra)
        for req in extras[extra]:
            m = re.fullmatch(r"prm-critic\[([a-z0-9_,-]+)\]", req)
            if m:
                todo += m.group(1).split(",")
            else:
                out.add(_name(req))
    return out


#: packages that are (or pull) torch, or that left the core install with it
TORCH_SIDE = {"torch", "safetensors", "matplotlib", "stable-baselines3", "sb3-contrib", "transformers"}


def test_core_and_deploy_extras_pull_no_torch():
    core, extras = _extras()
    assert {_name(r) for r in core} == {"numpy", "tomli"}
    deploy = _resolve(extras, ["onnx", "robotics"])
    assert deploy & TORCH_SIDE == set(), deploy & TORCH_SIDE
    assert {"onnxruntime", "gymnasium", "gymnasium-robotics", "mujoco"} <= deploy
    # the torch extra carries what left the core; `all` still installs every package but the GPU runtime and Ray
    assert {"torch", "safetensors", "matplotlib", "tqdm"} <= _resolve(extras, ["torch"])
    assert {"torch", "stable-baselines3", "gymnasium"} <= _resolve(extras, ["train"])
    # `ray` (a cluster runtime, chosen per run with --executor ray) is installed on its own or by `dev`
    everything = set().union(*(_resolve(extras, [e]) for e in extras if e not in ("gpu", "dev", "docs", "all", "ray")))
    assert _resolve(extras, ["all"]) == everything


if __name__ == "__main__":  # write the ONNX file the torch-free environment's tests read
    if len(sys.argv) != 2:
        sys.exit(f"usage: python {sys.argv[0]} FOLDER  (then set {ARTIFACTS_VAR}=FOLDER)")
    print(write_deploy_artifacts(sys.argv[1]))
