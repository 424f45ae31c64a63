"""Monte-Carlo step labels on any forkable text environment (prm_critic.text.envs.labels): a user's
own environment registered by name, TextWorldExpress by name, and the TextWorld app's command line.

Real TextWorldExpress; the corridor is a user's own environment (tests/text_env_helpers.py).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from text_env_helpers import Corridor, need_twx

from prm_critic._io import OutputExistsError
from prm_critic.text.envs import register_text_env
from prm_critic.text.envs.labels import act_step_text, build_labels, label_episode, mc_label
from prm_critic.text.trl_format import read_stepwise_jsonl


def _corridor(game, seed, options, max_steps):
    return Corridor(seed, n=int(options.get("n", 4)), max_steps=max_steps)


register_text_env("corridor-labels", _corridor, describe="tests: a corridor", replace=True)


def test_labels_on_a_users_env_are_exact_at_ends_and_soft_between():
    env = Corridor(2, n=4, max_steps=12)
    ep = label_episode(env, seed=2, episode=0, k=4)
    ex = ep.example
    assert len(ex.labels) == len(ex.completions) == len(ep.commands) >= 1
    assert all(y * 4 == int(y * 4) and 0 <= y <= 1 for y in ex.labels)  # multiples of 1/k
    assert ex.completions[0] == act_step_text(ep.commands[0], env.replay(ep.commands[:1]).feedback)
    last = env.replay(ep.commands)
    if last.done:  # the terminal step's label is the game's outcome, no rollouts
        assert ep.wins[-1] == -1 and ex.labels[-1] == float(last.won)
    # a lost state is 0, the state with the key in the last room is 1 (one command wins)
    sim = Corridor(2, n=4, max_steps=12)
    sim.reset()
    pit = ["forward"] * sim.pit_room + ["jump"]
    assert mc_label(sim, pit, _uniform(), 4, np.random.default_rng(0)) == 0.0
    won = sim.winning_path()
    assert mc_label(sim, won, _uniform(), 4, np.random.default_rng(0)) == 1.0
    assert 0.0 < mc_label(sim, won[:-1], _uniform(), 8, np.random.default_rng(0)) <= 1.0


def _uniform():
    from prm_critic.text.envs import SamplingPolicy

    return SamplingPolicy()


def test_build_labels_by_name_resumes_and_refuses_other_settings(tmp_path):
    out = tmp_path / "labels"
    a = build_labels(out, "corridor-labels:plain?n=4", [0, 1, 2], k=2, max_steps=10, siblings=2,
                     show_progress=False)
    again = build_labels(out, "corridor-labels:plain?n=4", [0, 1, 2], k=2, max_steps=10, siblings=2,
                         show_progress=False)  # resumed from its units: the same labels
    assert [d.to_dict() for d in a] == [d.to_dict() for d in again]
    fresh = build_labels(tmp_path / "fresh", "corridor-labels:plain?n=4", [0, 1, 2], k=2, max_steps=10, siblings=2,
                         show_progress=False)  # seeded per unit: the same labels from scratch
    assert [d.to_dict() for d in fresh] == [d.to_dict() for d in a]
    rows = read_stepwise_jsonl(out / "labels.jsonl")
    assert len(rows) == 3 and (out / "labels_siblings.jsonl").exists()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["settings"]["env"] == "corridor-labels:plain?n=4" and summary["n_trajectories"] == 3
    with pytest.raises(OutputExistsError, match="k: 2 there, 3 in this run"):
        build_labels(out, "corridor-labels:plain?n=4", [0], k=3, max_steps=10, show_progress=False)
    with pytest.raises(OutputExistsError, match="env: 'corridor-labels:plain.n=4' there"):
        build_labels(out, "corridor-labels:plain?n=5", [0], k=2, max_steps=10, show_progress=False)
    build_labels(out, "corridor-labels:plain?n=5", [0], k=2, max_steps=10, show_progress=False, overwrite=True)
    assert len(read_stepwise_jsonl(out / "labels.jsonl")) == 1


def test_build_labels_on_textworld_express_by_name(tmp_path):
    need_twx()
    eps = build_labels(tmp_path / "coin", "twx:coin", [1], k=1, max_steps=6, show_progress=False)
    assert len(eps) == 1 and 1 <= len(eps[0].commands) <= 6
    assert all(0.0 <= y <= 1.0 for y in eps[0].example.labels)


def test_app_command_line_takes_an_env_spec(tmp_path, capsys):
    pytest.importorskip("textworld")
    from agents.textworld_agent.labels import main

    main(["--env", "corridor-labels:plain?n=3", "--env-module", "test_text_env_labels", "--out", str(tmp_path / "c"),
          "--seeds", "0-1", "--k", "1", "--max-steps", "6"])
    assert json.loads((tmp_path / "c" / "summary.json").read_text())["n_trajectories"] == 2
    with pytest.raises(SystemExit, match="--recipe/--take: apply to the default cooking games"):
        main(["--env", "twx:coin", "--recipe", "2", "--out", str(tmp_path / "x")])
    with pytest.raises(SystemExit, match="did you mean 'twx'"):
        main(["--env", "twy:coin", "--out", str(tmp_path / "y")])
