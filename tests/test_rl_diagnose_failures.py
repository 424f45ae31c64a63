"""`benchmarks/rl/diagnose_failures.py --add`: a run measured later joins its task's entry without
dropping the runs measured before (whose policies may no longer exist)."""

from __future__ import annotations

import json

import pytest

from benchmarks.rl import diagnose_failures as df


def _run(label: str, ok: int) -> dict:
    return {"label": label, "successes": ok, "episodes": 4, "failed": 4 - ok, "dist": 3.0, "phi": 0.5,
            "final_stage": [4 - ok, 0], "best_stage": [4 - ok, 0]}


@pytest.fixture
def fake_replay(monkeypatch):
    # FAKE: stands in for replaying a saved policy (covered by the doc's own measurement); returns
    # fixed figures per label so that only the merging is under test
    monkeypatch.setattr(df, "diagnose", lambda task, label, seed, episodes: _run(label, {"her": 1, "a": 3}.get(label, 0)))


def test_add_keeps_the_task_s_other_runs_and_lists_both_commands(tmp_path, fake_replay):
    raw = tmp_path / "raw.json"
    assert df.main(["--task", "T-v0", "--labels", "a", "b", "--episodes", "4", "--raw", str(raw)]) == 0
    assert df.main(["--task", "T-v0", "--labels", "her", "a", "--episodes", "4", "--raw", str(raw), "--add"]) == 0
    (entry,) = json.loads(raw.read_text())["tasks"]
    assert [r["label"] for r in entry["runs"]] == ["b", "her", "a"]  # "a" measured again replaces its row
    assert len(entry["commands"]) == 2 and entry["commands"][1].endswith("--labels her a --episodes 4 --add")
    md = df.render(json.loads(raw.read_text()), runs=tmp_path)
    assert md.count("benchmarks.rl.diagnose_failures --task T-v0") == 2 and "| her | 1/4 |" in md


def test_without_add_the_task_is_replaced(tmp_path, fake_replay):
    raw = tmp_path / "raw.json"
    df.main(["--task", "T-v0", "--labels", "a", "b", "--episodes", "4", "--raw", str(raw)])
    df.main(["--task", "T-v0", "--labels", "her", "--episodes", "4", "--raw", str(raw)])
    (entry,) = json.loads(raw.read_text())["tasks"]
    assert [r["label"] for r in entry["runs"]] == ["her"]


def test_add_to_a_task_never_measured_is_refused(tmp_path, fake_replay):
    raw = tmp_path / "raw.json"
    df.main(["--task", "T-v0", "--labels", "a", "--episodes", "4", "--raw", str(raw)])
    with pytest.raises(SystemExit, match="U-v0"):
        df.main(["--task", "U-v0", "--labels", "her", "--episodes", "4", "--raw", str(raw), "--add"])
