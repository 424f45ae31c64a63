"""benchmarks/rl/run.py with a learned potential (real FetchReach, SAC, a tiny trained-critic checkpoint):
``--critic`` trains under that critic's head, records its weights hash, refuses to resume under other
weights at the same path; ``--refresh`` fine-tunes it during the run and a killed refresh run is refused,
not resumed under the critic as loaded; wrong combinations are named before any training."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

pytest.importorskip("gymnasium_robotics")
pytest.importorskip("stable_baselines3")

import torch  # noqa: E402

from prm_critic.models.checkpoint import save_state_critic  # noqa: E402
from sb3_helpers import tiny_state_critic  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
TASK = "FetchReach-v4"
TINY = dict(steps=200, eval_freq=100, eval_episodes=2, learning_starts=60)


@pytest.fixture(scope="module")
def run_mod():
    from benchmarks.rl import run

    return run


@pytest.fixture()
def critic_path(tmp_path):
    net, meta, _ = tiny_state_critic(TASK)
    return save_state_critic(tmp_path / "reach_critic", net, meta)


def _run(mod, root, *, steps=TINY["steps"], eval_freq=TINY["eval_freq"], **kw):
    args = {**TINY, "steps": steps, "eval_freq": eval_freq}
    return mod.run_one(TASK, "prm_her", 0, args["steps"], scale=10.0, root=root, eval_freq=args["eval_freq"],
                       eval_episodes=args["eval_episodes"], learning_starts=args["learning_starts"], **kw)


def test_learned_critic_run_trains_under_its_head_and_records_its_hash(run_mod, tmp_path, critic_path):
    out = _run(run_mod, tmp_path / "runs", critic=critic_path, head="success")
    assert out.name == "seed0" and out.parent.name == "prm_her_s10_critic-reach_critic-success"
    done = json.loads((out / "done.json").read_text())
    assert done["head"] == "success" and len(done["critic_sha256"]) == 64 and done["refresh"] is None
    with open(out / "eval.csv", newline="") as f:
        assert [int(r["env_steps"]) for r in csv.DictReader(f)] == [0, 100, 200]
    # the same file resumes (extends) ...
    _run(run_mod, tmp_path / "runs", steps=300, critic=critic_path, head="success")
    # ... other weights under the same path do not
    net, meta, _ = tiny_state_critic(TASK)
    with torch.no_grad():
        for p in net.parameters():
            p.mul_(1.5)
    save_state_critic(critic_path.with_suffix(""), net, meta)
    with pytest.raises(ValueError, match="critic_sha256"):
        _run(run_mod, tmp_path / "runs", steps=400, critic=critic_path, head="success")


def test_refresh_run_fine_tunes_and_a_second_start_is_refused(run_mod, tmp_path, critic_path):
    # 12 episodes of 50 steps: the refresh at 300 steps waits for 10 episodes, the one at 600 runs
    out = _run(run_mod, tmp_path / "runs", steps=600, eval_freq=300, critic=critic_path, head="success", refresh=True)
    assert out.parent.name == "prm_her_s10_critic-reach_critic-success_refresh"
    done = json.loads((out / "done.json").read_text())
    assert [r["env_steps"] for r in done["refresh"]] == [600]
    assert (out / "critic_refreshed.json").exists()
    with pytest.raises(ValueError, match="CriticRefreshCallback cannot resume"):
        _run(run_mod, tmp_path / "runs", steps=900, eval_freq=300, critic=critic_path, head="success",
             refresh=True)


@pytest.mark.parametrize("kw, match", [
    (dict(config="her", critic="c.json"), "needs a prm config"),
    (dict(critic="c.pt"), r"expected a critic checkpoint \(.json / .safetensors\) or an .onnx"),
    (dict(critic="c.json", spec="x.toml"), "--spec: expected a spec TOML file"),
    (dict(refresh=True), "expected --critic PATH.json"),
    (dict(critic="c.onnx", refresh=True), "expected --critic PATH.json"),
    (dict(critic="c.json", head="value"), "--head: expected 'success' or 'progress'"),
])
def test_wrong_combinations_are_named_before_training(run_mod, tmp_path, kw, match):
    config = kw.pop("config", "prm_her")
    with pytest.raises(ValueError, match=match):
        run_mod.run_one(TASK, config, 0, 200, root=tmp_path, **kw)
    assert not any(tmp_path.iterdir())  # nothing was created


def test_a_spec_makes_the_env_of_a_learned_potential_recorded_on_the_same_env(run_mod, tmp_path):
    """``--spec`` with ``--critic``: the spec makes the env; a critic recorded on another env is refused."""
    from prm_critic.robotics.spec import load_spec

    net, meta, _ = tiny_state_critic(TASK)
    path = save_state_critic(tmp_path / "reach_critic", net, {**meta, "spec": load_spec(TASK).to_dict()})
    text = (REPO / "envs" / "specs" / "fetch_reach.toml").read_text()
    same, other = tmp_path / "same.toml", tmp_path / "other.toml"
    same.write_text(text)
    other.write_text(text.replace('rule = "final"', 'rule = "any"'))
    out = _run(run_mod, tmp_path / "runs", critic=path, head="success", spec=same)
    assert out.parent.name == "prm_her_s10_same_critic-reach_critic-success"
    with pytest.raises(ValueError, match=r"--critic .*recorded on another env than this run's \(success .*'final'"):
        _run(run_mod, tmp_path / "runs", critic=path, head="success", spec=other)


def test_random_weights_control_keeps_normalisation_and_draws_new_weights(run_mod, critic_path):
    from prm_critic.sb3.envs import resolve_critic

    critic = resolve_critic(critic_path, TASK)
    # seeds other than 0: the tiny fixture critic is itself an untrained net initialised under seed 0
    a, b, c = (run_mod.random_weights(critic, s) for s in (5, 5, 6))
    sd, sa, sb, sc = (x.net.state_dict() for x in (critic, a, b, c))
    for k in ("obs_mean", "obs_std", "obs_clip"):
        assert torch.equal(sd[k], sa[k])  # the critic's own input normalisation
    weights = [k for k in sd if k.endswith("weight")]
    assert all(not torch.equal(sd[k], sa[k]) for k in weights)  # every layer drawn anew
    assert all(torch.equal(sa[k], sb[k]) for k in sa)  # the same seed, the same control
    assert any(not torch.equal(sa[k], sc[k]) for k in weights)  # another seed, another control
    assert all(torch.equal(sd[k], critic.net.state_dict()[k]) for k in sd)  # the critic itself untouched
    assert a.meta["random_weights_seed"] == 5 and a.meta["task"] == critic.meta["task"]


def test_random_weights_run_is_labelled_and_recorded(run_mod, tmp_path, critic_path):
    out = _run(run_mod, tmp_path / "runs", critic=critic_path, head="success", random_weights_seed=3)
    assert out.parent.name == "prm_her_s10_critic-reach_critic-success_randw3"
    done = json.loads((out / "done.json").read_text())
    assert done["random_weights"] == 3 and done["stopped_early_at"] is None and done["early_stop"]["threshold"] == 0.8
    with pytest.raises(ValueError, match="--random-weights: the control of a learned torch critic"):
        run_mod.run_one(TASK, "prm_her", 0, 200, root=tmp_path / "x", random_weights_seed=1)
    with pytest.raises(ValueError, match="--random-weights"):
        run_mod.run_one(TASK, "prm_her", 0, 200, root=tmp_path / "x", critic=critic_path, refresh=True,
                        random_weights_seed=1)


def test_sbx_backend_runs_under_its_own_label_and_extends_from_its_state(run_mod, tmp_path):
    """``--backend sbx``: the run trains with SBX, under the label suffix ``_sbx`` (never mixed with the SB3
    rows), records its backend, and a larger budget continues from its SBX training state."""
    pytest.importorskip("sbx")
    out = _run(run_mod, tmp_path / "runs", backend="sbx")
    assert out.parent.name == "prm_her_s10_sbx"
    done = json.loads((out / "done.json").read_text())
    assert done["backend"] == "sbx" and done["resumed_from"] == []
    _run(run_mod, tmp_path / "runs", steps=300, backend="sbx")
    done = json.loads((out / "done.json").read_text())
    assert done["steps"] == 300 and done["resumed_from"], done["resumed_from"]
    with open(out / "eval.csv", newline="") as f:
        assert [int(r["env_steps"]) for r in csv.DictReader(f)] == [0, 100, 200, 300]
    with pytest.raises(ValueError, match="--backend: expected 'sb3'"):
        run_mod.run_one(TASK, "her", 0, 200, root=tmp_path / "x", backend="jax")


def test_ensemble_file_runs_as_a_potential_and_a_changed_member_is_refused(run_mod, tmp_path, critic_path):
    from prm_critic.models.ensemble import load_critic_ensemble, save_critic_ensemble
    from prm_critic.sb3.envs import critic_fingerprint

    net, meta, _ = tiny_state_critic(TASK)
    with torch.no_grad():
        for p in net.parameters():
            p.mul_(-1.0)
    second = save_state_critic(tmp_path / "reach_critic_b", net, meta)
    ens = save_critic_ensemble(tmp_path / "reach_ens.json", [critic_path, second])
    out = _run(run_mod, tmp_path / "runs", critic=ens, head="progress")
    assert out.parent.name == "prm_her_s10_critic-reach_ens-progress"
    done = json.loads((out / "done.json").read_text())
    assert done["critic_sha256"] == critic_fingerprint(load_critic_ensemble(ens))
    # a member retrained in place: the ensemble file refuses it before any training
    with torch.no_grad():
        for p in net.parameters():
            p.mul_(2.0)
    save_state_critic(second.with_suffix(""), net, meta)
    from prm_critic.integrity import CheckpointError

    with pytest.raises(CheckpointError, match=r"member 1 of .*reach_ens.json.*the member changed after the ensemble"):
        _run(run_mod, tmp_path / "runs", steps=300, critic=ens, head="progress")
    with pytest.raises(ValueError, match="--random-weights: needs a torch critic checkpoint .* got EnsembleCritic"):
        _run(run_mod, tmp_path / "runs2", critic=save_critic_ensemble(tmp_path / "e2.json", [critic_path, critic_path]),
             head="progress", random_weights_seed=0)


def test_anneal_run_is_labelled_records_its_schedule_and_wrong_uses_are_refused(run_mod, tmp_path, critic_path):
    out = _run(run_mod, tmp_path / "runs", critic=critic_path, head="progress", anneal_steps=150)
    assert out.parent.name == "prm_her_s10_critic-reach_critic-progress_anneal150"
    assert json.loads((out / "done.json").read_text())["scale_schedule"] == {"end": 0.0, "steps": 150}
    assert run_mod.config_label("prm_her", 10, False, critic="c.json", head="progress", random_weights=0,
                                anneal=(50_000, 0.5)) == "prm_her_s10_critic-c-progress_anneal50kto0.5_randw0"
    for kw, match in ((dict(anneal_steps=0), "--anneal-steps: expected a positive integer"),
                      (dict(anneal_steps=10, anneal_end=-1.0), "--anneal-end: expected a finite scale >= 0"),
                      (dict(anneal_end=0.5), "--anneal-end: needs --anneal-steps")):
        with pytest.raises(ValueError, match=match):
            _run(run_mod, tmp_path / "bad", **kw)
    with pytest.raises(ValueError, match="--anneal-steps: .* needs --config prm_her, got --config 'prm'"):
        run_mod.run_one(TASK, "prm", 0, 200, scale=10.0, root=tmp_path / "bad", anneal_steps=100)
    assert not (tmp_path / "bad").exists()
