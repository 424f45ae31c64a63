"""One source of truth: the task spec is resolved once at the entry point and passed down."""

from __future__ import annotations

import collections

import pytest

from prm_critic.robotics import spec as spec_mod

pytest.importorskip("stable_baselines3")


@pytest.fixture
def spec_parses(monkeypatch):
    """Counts every spec built from data (a TOML file, a name or a dict), by caller."""
    calls: collections.Counter[str] = collections.Counter()
    original = spec_mod.TaskSpec.from_dict.__func__

    def counting(cls, data, *args, **kwargs):
        import traceback

        calls[" <- ".join(f"{f.name}" for f in reversed(traceback.extract_stack()[-6:-1]))] += 1
        return original(cls, data, *args, **kwargs)

    monkeypatch.setattr(spec_mod.TaskSpec, "from_dict", classmethod(counting))
    return calls


def _all_specs(model):
    """Every TaskSpec the training run holds: the monitors, the shapers' critics, the evaluator."""
    found = []
    for env in model.get_env().envs:
        e = env
        while e is not None:
            for attr in ("task_spec", "spec"):
                v = getattr(e, attr, None)
                if isinstance(v, spec_mod.TaskSpec):
                    found.append((type(e).__name__, v))
            crit = getattr(e, "critic", None)
            if isinstance(getattr(crit, "spec", None), spec_mod.TaskSpec):
                found.append((type(crit).__name__, crit.spec))
            e = getattr(e, "env", None)
    if model.prm_eval is not None:
        found.append(("UnshapedSuccessEval", model.prm_eval.spec))
    return found


def test_train_policy_resolves_the_task_once_and_passes_it_down(spec_parses, tmp_path):
    from prm_critic.sb3 import train_policy

    model = train_policy("PointMaze_UMaze-v3", algo="ppo", critic="subgoal", shaping="potential",
                         prune=dict(threshold=0.0, patience=50), total_steps=64, n_envs=2, eval_freq=64,
                         eval_episodes=1, progress=False, log_dir=tmp_path)
    assert sum(spec_parses.values()) == 1, dict(spec_parses)
    specs = _all_specs(model)
    owners = {name for name, _ in specs}
    assert {"PRMMonitor", "SubgoalCritic", "UnshapedSuccessEval"} <= owners, owners
    first = specs[0][1]
    assert all(s is first for _, s in specs), [(n, id(s)) for n, s in specs]


def test_train_policy_cli_resolves_the_task_once(spec_parses, tmp_path):
    from prm_critic.cli import main

    rc = main(["train-policy", "--task", "PointMaze_UMaze-v3", "--algo", "ppo", "--critic", "subgoal",
               "--shaping", "potential", "--steps", "64", "--n-envs", "2", "--no-progress", "--out", str(tmp_path)])
    assert rc == 0
    # the task once, and the saved policy's spec once when the CLI reads the checkpoint back (none here)
    assert sum(spec_parses.values()) == 1, dict(spec_parses)
