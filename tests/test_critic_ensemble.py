"""EnsembleCritic and its file (prm_critic.models.ensemble): the mean of its members' scores, the
file checked on load (its own hash, each member's weights hash), members that cannot be averaged
refused, and an ensemble file used as train_policy's potential with real SB3 and MuJoCo."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("stable_baselines3")
pytest.importorskip("gymnasium_robotics")

import torch  # noqa: E402

from prm_critic.critic import StepScores, check_critic  # noqa: E402
from prm_critic.integrity import CheckpointError  # noqa: E402
from prm_critic.models import load_state_critic  # noqa: E402
from prm_critic.models.checkpoint import save_state_critic  # noqa: E402
from prm_critic.models.ensemble import EnsembleCritic, load_critic_ensemble, save_critic_ensemble  # noqa: E402
from prm_critic.sb3.envs import critic_fingerprint, resolve_critic  # noqa: E402
from sb3_helpers import KeepInfos, tiny_state_critic  # noqa: E402

torch.set_num_threads(1)
TASK = "FetchReach-v4"


def _members(tmp_path, n=2):
    paths = []
    for i in range(n):
        net, meta, xs = tiny_state_critic(TASK)
        g = torch.Generator().manual_seed(i + 1)
        with torch.no_grad():
            for p in net.parameters():
                p.add_(0.5 * torch.randn(p.shape, generator=g))
        paths.append(save_state_critic(tmp_path / f"m{i}", net, meta).with_suffix(".json"))
    return paths, xs


def test_scores_are_the_members_mean_and_the_file_round_trips(tmp_path):
    paths, xs = _members(tmp_path, 3)
    ens_path = save_critic_ensemble(tmp_path / "ens.json", paths)
    ens = load_critic_ensemble(ens_path)
    members = [load_state_critic(p) for p in paths]
    got = ens.score(xs)
    for head in ("progress", "success"):
        want = np.mean([m.score(xs).get(head) for m in members], axis=0)
        np.testing.assert_allclose(got.get(head), want, rtol=0, atol=1e-7)
    assert not np.allclose(members[0].score(xs).progress, members[1].score(xs).progress)  # members differ
    check_critic(ens, xs[:5])  # batch and single-step scores agree, values in [0, 1]
    assert isinstance(got, StepScores) and ens.critic_info().task == TASK
    # the file names its members relative to its folder; resolve_critic loads it as any critic path
    doc = json.loads(ens_path.read_text())
    assert [m["path"] for m in doc["members"]] == [p.name for p in paths]
    again = resolve_critic(str(ens_path), None)
    assert isinstance(again, EnsembleCritic)
    # the fingerprint follows the members' weights, in order
    fp = critic_fingerprint(again)
    assert fp == critic_fingerprint(ens) and len(fp) == 64
    swapped = EnsembleCritic([members[1], members[0], members[2]])
    assert critic_fingerprint(swapped) != fp


def test_a_member_changed_after_the_ensemble_was_written_is_refused(tmp_path):
    paths, _ = _members(tmp_path)
    ens_path = save_critic_ensemble(tmp_path / "ens.json", paths)
    net, meta, _ = tiny_state_critic(TASK)
    save_state_critic(paths[1], net, meta)  # retrained in place: its own hashes are valid
    with pytest.raises(CheckpointError, match=r"member 1 of .*ens.json.*m1.json.*has weights_sha256 '[0-9a-f]{64}', "
                                              r"expected '[0-9a-f]{64}' \(the member changed after the ensemble"):
        load_critic_ensemble(ens_path)
    paths[1].unlink()
    with pytest.raises(FileNotFoundError, match=r"member 1 of .*ens.json.*m1.json.*does not exist"):
        load_critic_ensemble(ens_path)


def test_an_edited_or_corrupt_ensemble_file_is_refused(tmp_path):
    paths, _ = _members(tmp_path)
    ens_path = save_critic_ensemble(tmp_path / "ens.json", paths)
    doc = json.loads(ens_path.read_text())
    doc["members"] = doc["members"][:1] * 2  # the first member twice: the hash no longer matches
    ens_path.write_text(json.dumps(doc))
    with pytest.raises(CheckpointError, match="config_sha256"):
        load_critic_ensemble(ens_path)
    ens_path.write_bytes(b"\xff\xfe{not json")
    with pytest.raises(CheckpointError, match=r"ens.json' is not valid JSON"):
        load_critic_ensemble(ens_path)
    ens_path.write_text(json.dumps({"format": "prm-critic/state-critic"}))
    with pytest.raises(CheckpointError, match=r"is not a critic ensemble \(format 'prm-critic/state-critic', expected "
                                              r"'prm-critic/critic-ensemble'\)"):
        load_critic_ensemble(ens_path)
    with pytest.raises(FileNotFoundError, match="nope.json' does not exist"):
        load_critic_ensemble(tmp_path / "nope.json")


def test_members_that_cannot_be_averaged_are_refused(tmp_path):
    paths, _ = _members(tmp_path)
    one = load_state_critic(paths[0])
    with pytest.raises(ValueError, match="at least 2 critics, got 1"):
        EnsembleCritic([one])
    with pytest.raises(ValueError, match=r"members\[1\]: expected a StateCritic, got str"):
        EnsembleCritic([one, "subgoal"])
    net, meta, _ = tiny_state_critic("FetchPush-v4")
    push = save_state_critic(tmp_path / "push", net, meta)
    with pytest.raises(ValueError, match=r"expected critics of one input width, got obs_dim \[16, 31\]"):
        save_critic_ensemble(tmp_path / "bad.json", [paths[0], push])
    net, meta, _ = tiny_state_critic(TASK)
    other = save_state_critic(tmp_path / "other", net, {**meta, "task": "FetchPush-v4"})
    with pytest.raises(ValueError, match=r"members\[1\]: declares task 'FetchPush-v4', expected 'FetchReach-v4'"):
        save_critic_ensemble(tmp_path / "bad.json", [paths[0], other])
    with pytest.raises(ValueError, match=r"path: expected an ensemble file name ending in .json, got '.*ens.txt'"):
        save_critic_ensemble(tmp_path / "ens.txt", paths)
    assert not (tmp_path / "bad.json").exists()


def test_train_policy_shapes_with_the_ensemble_mean(tmp_path):
    from prm_critic.sb3 import train_policy

    paths, _ = _members(tmp_path)
    ens_path = save_critic_ensemble(tmp_path / "ens.json", paths)
    keep = KeepInfos()
    model = train_policy(TASK, critic=str(ens_path), shaping="potential", scale=3.0, total_steps=120, seed=0,
                         callbacks=[keep], algo_kwargs=dict(learning_starts=60, batch_size=32, gamma=0.9,
                                                            policy_kwargs=dict(net_arch=[16, 16])))
    assert model.prm_config["critic_sha256"] == critic_fingerprint(load_critic_ensemble(ens_path))
    members = [load_state_critic(p) for p in paths]

    def phi(x):
        return np.mean([m.score(x).progress for m in members], axis=0)

    x = np.stack([i["prm_x"] for i in keep.infos])
    xn = np.stack([i["prm_next_x"] for i in keep.infos])
    term = np.array([bool(i["prm_terminated"]) for i in keep.infos])
    got = np.array([float(i["prm_shaping"]) for i in keep.infos])
    np.testing.assert_allclose(got, 3.0 * (0.9 * np.where(term, 0.0, phi(xn)) - phi(x)), atol=1e-5)
    assert np.abs(got).max() > 0


def test_cli_ensemble_writes_a_file_train_policy_loads(tmp_path, capsys):
    from prm_critic.cli import main as cli_main

    paths, xs = _members(tmp_path)
    out = tmp_path / "ens.json"
    assert cli_main(["ensemble", str(paths[0]), str(paths[1].with_suffix(".safetensors")), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "member m0.json  weights sha256 " in printed and f"wrote {out}: the mean of 2 critics (FetchReach-v4)" in printed
    ens = resolve_critic(str(out), None)
    np.testing.assert_allclose(ens.score(xs).progress, load_critic_ensemble(out).score(xs).progress, rtol=0, atol=0)
    assert cli_main(["ensemble", str(paths[0]), "--out", str(tmp_path / "one.json")]) != 0
    assert "at least 2 checkpoints, got 1" in capsys.readouterr().err and not (tmp_path / "one.json").exists()
    # train-policy: --scale-steps anneals; --scale-end alone is refused
    assert cli_main(["train-policy", "--task", TASK, "--critic", str(out), "--her", "--steps", "100", "--scale-end",
                     "1", "--out", str(tmp_path / "run")]) != 0
    assert "--scale-end: needs --scale-steps" in capsys.readouterr().err
    assert cli_main(["train-policy", "--task", TASK, "--critic", str(out), "--her", "--scale", "4", "--steps", "120",
                     "--scale-steps", "100", "--no-progress", "--algo-kwargs",
                     '{"learning_starts": 60, "batch_size": 32, "policy_kwargs": {"net_arch": [16]}}',
                     "--out", str(tmp_path / "run")]) == 0
    assert '"scale_schedule": {"end": 0.0, "steps": 100}' in json.dumps(json.loads((tmp_path / "run" / "policy.json")
                                                                              .read_text()))
