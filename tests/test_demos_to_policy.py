"""The guide's demonstrations-to-policy path (docs/readme/train_policy.md) runs as written, with its
sizes scaled down (episodes, demonstrations, branches, steps): the same three commands."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

pytest.importorskip("stable_baselines3")
pytest.importorskip("gymnasium_robotics")

from prm_critic.cli import main as cli_main  # noqa: E402

DOC = Path(__file__).resolve().parents[1] / "docs" / "readme" / "train_policy.md"
SMALLER = {"--episodes": "12", "--demos": "3", "--branches": "10", "--steps": "300", "--eval-freq": "300",
           "--relabel": "1"}


def _commands() -> list[list[str]]:
    block = re.search(r"<!-- demos-to-policy -->\n```bash\n(.*?)```\n<!-- /demos-to-policy -->", DOC.read_text(), re.S)
    assert block, "the guide's demonstrations-to-policy block is missing"
    cmds = [shlex.split(line) for line in block.group(1).strip().splitlines()]
    assert [c[:2] for c in cmds] == [["prm-critic", "collect"], ["prm-critic", "train-critic"],
                                    ["prm-critic", "train-policy"]]
    out = []
    for c in cmds:
        args = c[1:]
        for i, a in enumerate(args[:-1]):
            if a in SMALLER:
                args[i + 1] = SMALLER[a]
        out.append(args)
    return out


@pytest.mark.slow
def test_demonstrations_to_policy_in_three_commands(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cmds = _commands()
    # learning_starts fits the scaled-down budget; a few evaluation episodes
    i = cmds[2].index("--algo-kwargs")
    kw = json.loads(cmds[2][i + 1])
    cmds[2][i + 1] = json.dumps({**kw, "learning_starts": 100, "policy_kwargs": {"net_arch": [16, 16]}})
    cmds[2] += ["--eval-episodes", "3"]
    for c in cmds:
        assert cli_main(c + ["--no-progress"]) == 0, c
    critic = json.loads((tmp_path / "runs/push_demo.json").read_text())["meta"]
    assert critic["label_family"] == "demo_progress" and critic["demonstrations"]["count"] == 3
    assert (tmp_path / "runs/push_demo_policy/policy.json").is_file()
    rows = (tmp_path / "runs/push_demo_policy/eval.csv").read_text().splitlines()
    assert rows[-1].split(",")[0] == "300"
