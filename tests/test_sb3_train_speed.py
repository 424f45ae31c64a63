"""train_policy's torch thread setting and early stop (the cheap-training knobs of the RL benchmark)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("gymnasium_robotics")
torch = pytest.importorskip("torch")

from stable_baselines3.common.callbacks import BaseCallback  # noqa: E402

from prm_critic.cli import main as cli_main  # noqa: E402
from prm_critic.sb3 import train_policy  # noqa: E402
from prm_critic.sb3.callbacks import read_eval_csv  # noqa: E402

TASK = "FetchReach-v4"
TINY = dict(learning_starts=60, batch_size=32, policy_kwargs=dict(net_arch=[16, 16]))


class ThreadsSeen(BaseCallback):
    def __init__(self):
        super().__init__()
        self.seen: set[int] = set()

    def _on_step(self) -> bool:
        self.seen.add(torch.get_num_threads())
        return True


@pytest.mark.parametrize("threads", [1, 2])
def test_torch_threads_are_set_while_training_and_restored(threads):
    before = torch.get_num_threads()
    probe = ThreadsSeen()
    train_policy(TASK, total_steps=80, seed=0, algo_kwargs=TINY, callbacks=[probe], progress=False,
                 torch_threads=threads)
    assert probe.seen == {threads}
    assert torch.get_num_threads() == before


def test_torch_threads_none_keeps_torchs_setting():
    torch.set_num_threads(2)
    probe = ThreadsSeen()
    try:
        train_policy(TASK, total_steps=80, seed=0, algo_kwargs=TINY, callbacks=[probe], progress=False,
                     torch_threads=None)
    finally:
        torch.set_num_threads(1)
    assert probe.seen == {2}


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_bad_torch_threads_are_refused(bad):
    with pytest.raises(ValueError, match="torch_threads"):
        train_policy(TASK, total_steps=80, algo_kwargs=TINY, progress=False, torch_threads=bad)


def test_early_stop_stops_after_two_evaluations_and_records_the_step(tmp_path):
    # threshold 0: every evaluation meets it, so the run stops at its second evaluation (step 100)
    model = train_policy(TASK, total_steps=400, seed=0, algo_kwargs=TINY, progress=False, eval_freq=100,
                         eval_episodes=1, log_dir=tmp_path, early_stop=dict(threshold=0.0, min_steps=0))
    assert model.prm_config["stopped_early_at"] == 100 == model.num_timesteps
    assert [r["env_steps"] for r in read_eval_csv(tmp_path / "eval.csv")] == [0, 100]
    meta = json.loads((tmp_path / "policy.json").read_text())
    assert "100" in json.dumps(meta)  # the saved policy's metadata holds the run config with the stop


def test_early_stop_waits_for_min_steps():
    model = train_policy(TASK, total_steps=300, seed=0, algo_kwargs=TINY, progress=False, eval_freq=100,
                         eval_episodes=1, early_stop=dict(threshold=0.0, min_steps=250))
    assert model.prm_config["stopped_early_at"] == 300 == model.num_timesteps  # the 300 row is the first >= 250


def test_early_stop_that_never_fires_runs_the_budget():
    model = train_policy(TASK, total_steps=200, seed=0, algo_kwargs=TINY, progress=False, eval_freq=100,
                         eval_episodes=1, early_stop=dict(threshold=1.0, consecutive=3))
    # FetchReach: an untrained policy does not reach success 1.0 three times in a row
    assert model.num_timesteps == 200 and model.prm_config["stopped_early_at"] is None


@pytest.mark.parametrize("bad, match", [
    (dict(threshold=1.5), "threshold"), (dict(consecutive=0), "consecutive"), (dict(min_steps=-1), "min_steps"),
    (dict(patience=2), "keys"), ("0.8", "dict"),
])
def test_bad_early_stop_is_refused(bad, match):
    with pytest.raises(ValueError, match=match):
        train_policy(TASK, total_steps=200, algo_kwargs=TINY, progress=False, eval_freq=100, early_stop=bad)


def test_early_stop_needs_evaluations():
    with pytest.raises(ValueError, match="eval_freq"):
        train_policy(TASK, total_steps=200, algo_kwargs=TINY, progress=False, early_stop=dict(threshold=0.8))


def test_cli_flags(tmp_path, capsys):
    rc = cli_main(["train-policy", "--task", TASK, "--steps", "400", "--eval-freq", "100", "--eval-episodes", "1",
                   "--early-stop", "0", "--torch-threads", "1", "--no-progress", "--out", str(tmp_path),
                   "--algo-kwargs", json.dumps(TINY)])
    assert rc == 0
    assert "stopped early" in capsys.readouterr().out
    rc = cli_main(["train-policy", "--task", TASK, "--steps", "200", "--early-stop-min-steps", "10", "--out",
                   str(tmp_path / "b")])
    assert rc != 0
    assert "--early-stop-min-steps: needs --early-stop" in capsys.readouterr().err
