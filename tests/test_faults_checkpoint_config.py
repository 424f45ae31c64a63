"""A state-critic checkpoint's JSON is sealed as a whole: an edited architecture or metadata is refused.

Real checkpoints written by ``save_state_critic`` (and the ones committed under ``benchmarks/``), real
safetensors; the JSON is edited the way a person would edit it.
"""

from __future__ import annotations

import json
import subprocess
import warnings
from pathlib import Path

import numpy as np
import pytest

from faults import correct, loud
from prm_critic.integrity import UnverifiedConfigWarning
from prm_critic.models.checkpoint import CheckpointError, load_state_critic, save_state_critic
from prm_critic.models.state_critic import StateCriticNet

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.fault

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture()
def saved(tmp_path):
    torch.manual_seed(3)
    net = StateCriticNet(6, hidden=(16, 16), activation="relu")
    with torch.no_grad():
        net.head.weight.mul_(4.0)
    net.set_normalization(np.linspace(-1, 1, 6), np.linspace(0.5, 2, 6))
    save_state_critic(tmp_path / "c", net, {"task": "PointMaze_UMaze-v3", "layout": {"keys": ["obs"], "obs_dim": 6}})
    x = np.random.default_rng(0).standard_normal((32, 6)).astype(np.float32)
    return tmp_path / "c", x


def _edit(stem: Path, change) -> None:
    j = stem.with_suffix(".json")
    doc = json.loads(j.read_text())
    change(doc)
    j.write_text(json.dumps(doc, indent=2, sort_keys=True))


def test_edited_activation_is_refused(saved):
    stem, x = saved
    ref = load_state_critic(stem).score(x)
    _edit(stem, lambda d: d["net"].update(activation="tanh"))
    # the edit would change the scores: the same weights under tanh
    net = StateCriticNet(6, hidden=(16, 16), activation="tanh")
    from safetensors.torch import load_file

    net.load_state_dict(load_file(str(stem.with_suffix(".safetensors"))))
    with torch.no_grad():
        edited = net(torch.from_numpy(x)).numpy()
    assert not np.allclose(edited[:, 1], ref.success)
    with loud(20, "state-critic JSON with net.activation edited from relu to tanh", CheckpointError,
              match=r"c\.json' was changed after saving: .*'config_sha256' records"):
        load_state_critic(stem)


@pytest.mark.parametrize("what,change", [
    ("meta.layout edited", lambda d: d["meta"]["layout"].update(keys=["observation"])),
    ("config_sha256 removed", lambda d: d.pop("config_sha256")),
    ("config_sha256 not a hash", lambda d: d.update(config_sha256="relu")),
])
def test_other_config_edits_are_refused(saved, what, change):
    stem, _ = saved
    _edit(stem, change)
    with loud(20, f"state-critic JSON: {what}", CheckpointError, match=r"config_sha256"):
        load_state_critic(stem)


def test_checkpoint_from_before_config_hashes_loads_with_a_warning(saved):
    """format_version 2 (weights hash only): loads, scores as saved, and says that its config is unchecked."""
    stem, x = saved
    ref = load_state_critic(stem).score(x)
    _edit(stem, lambda d: (d.pop("config_sha256"), d.update(format_version=2)))
    with pytest.warns(UnverifiedConfigWarning, match=r"c\.json' \(format_version 2\) records no 'config_sha256'"):
        crit = load_state_critic(stem)
    assert np.array_equal(crit.score(x).success, ref.success)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_state_critic(stem, allow_unverified=True)  # the caller accepted an unchecked checkpoint
    correct(20, "state-critic checkpoint without a config hash (format_version 2)",
            "loads with an UnverifiedConfigWarning naming the file and how to seal it")


def test_committed_state_critic_checkpoints_are_sealed():
    files = subprocess.run(["git", "ls-files", "*.json"], cwd=REPO, capture_output=True, text=True,
                           check=True).stdout.split()
    found = []
    for name in files:
        p = REPO / name
        try:
            doc = json.loads(p.read_text())
        except (ValueError, UnicodeDecodeError):
            continue
        if isinstance(doc, dict) and doc.get("format") == "prm-critic/state-critic":
            found.append(name)
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                load_state_critic(p)
    assert found, "the repository commits state-critic checkpoints under benchmarks/"
