"""benchmarks/rl/buffer_diagnosis.py on a real training state (a tiny shaped HER run of FetchReach with
SAC and a tiny learned critic): each measurement is stored under the run that wrote the state, read
from the state's folders or named with ``--run`` and checked against the state's own config; the
report gives one table per state. A state copied out of its run without ``--run``, or with a run of
another seed or config, is refused with one clear error instead of being filed under a wrong run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip("gymnasium_robotics")
pytest.importorskip("stable_baselines3")

from prm_critic.models.checkpoint import save_state_critic  # noqa: E402
from sb3_helpers import tiny_state_critic  # noqa: E402

TASK = "FetchReach-v4"
LABEL = "prm_her_s10_critic-reach_critic-success"


@pytest.fixture(scope="module")
def diag():
    from benchmarks.rl import buffer_diagnosis

    return buffer_diagnosis


@pytest.fixture(scope="module")
def report():
    from benchmarks.rl import report

    return report


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A finished 200-step shaped HER run: its last training state and the critic it was shaped with."""
    root = tmp_path_factory.mktemp("runs")
    net, meta, _ = tiny_state_critic(TASK)
    critic = save_state_critic(root / "reach_critic", net, meta)
    from benchmarks.rl import run
    out = run.run_one(TASK, "prm_her", 0, 200, scale=10.0, root=root / "runs", eval_freq=100, eval_episodes=2,
                      learning_starts=60, critic=critic, head="success")
    assert out.parent.name == LABEL
    state = out / "resume" / "state-200.safetensors"
    assert state.is_file()
    return state, critic


def _args(state, critic, raw, *extra):
    return ["--task", TASK, "--state", str(state), "--critic", str(critic), "--head", "success",
            "--windows", "0:200", "--raw", str(raw), *extra]


def test_measurement_is_filed_under_the_run_read_from_the_state_folders(diag, trained, tmp_path, capsys):
    state, critic = trained
    raw = tmp_path / "diag.json"
    assert diag.main(_args(state, critic, raw)) == 0
    stored = json.loads(raw.read_text())[TASK]
    assert list(stored) == [f"{LABEL}/seed0@200"]
    entry = stored[f"{LABEL}/seed0@200"]["critic-reach_critic-success"]
    assert entry["state"] == f"`{LABEL}/seed0`, its training state at 200 env steps"
    assert f"runs/{TASK}/{LABEL}/seed0/resume/state-200.safetensors" in entry["command"]
    r = entry["windows"]["0:200"]["stored"]
    assert r["n"] == 200 and -1.0 <= r["spearman_phi"] <= 1.0 and r["dphi_spec"] >= 0.0
    assert "spearman(Phi)" in capsys.readouterr().out


def test_a_copied_state_needs_run_and_a_wrong_run_is_refused(diag, trained, tmp_path):
    state, critic = trained
    copy = tmp_path / "kept" / state.name
    copy.parent.mkdir()
    shutil.copy(state, copy)
    shutil.copy(state.with_suffix(".json"), copy.with_suffix(".json"))
    raw = tmp_path / "diag.json"
    with pytest.raises(SystemExit, match=r"not in a run's <label>/seed<N>/resume/ folder; name the run with --run"):
        diag.main(_args(copy, critic, raw))
    with pytest.raises(SystemExit, match=r"names seed 3, but the state was trained with seed 0"):
        diag.main(_args(copy, critic, raw, "--run", f"{LABEL}/seed3"))
    with pytest.raises(SystemExit, match=r"expected a label starting 'prm_her_s10'"):
        diag.main(_args(copy, critic, raw, "--run", "prm_her_s30/seed0"))
    with pytest.raises(SystemExit, match=r"expected LABEL/seedN"):
        diag.main(_args(copy, critic, raw, "--run", LABEL))
    assert not raw.exists()  # nothing filed by a refused call
    assert diag.main(_args(copy, critic, raw, "--run", f"{LABEL}/seed0")) == 0
    entry = json.loads(raw.read_text())[TASK][f"{LABEL}/seed0@200"]["critic-reach_critic-success"]
    assert "--run" not in entry["command"] and f"/{LABEL}/seed0/resume/" in entry["command"]


def test_run_of_checks_label_prefix_against_her_and_scale(diag):
    config = {"seed": 2, "her": False, "scale": 1.0}
    assert diag.run_of(Path("x/prm_s1/seed2/resume/state-10.safetensors"), config) == "prm_s1/seed2"
    assert diag.run_of(Path("elsewhere.safetensors"), config, "prm_s1_critic-a-progress/seed2") == \
        "prm_s1_critic-a-progress/seed2"
    with pytest.raises(SystemExit, match="prm_s1"):
        diag.run_of(Path("elsewhere.safetensors"), config, "prm_s10/seed2")  # scale 10 is not scale 1


def _entry(state, spearman):
    r = {"n": 10, "spearman_phi": spearman, "dphi_learned": 0.01, "dphi_spec": 0.02, "dphi_corr": None,
         "dphi_err": 0.03, "dphi_err_by_stage": {}}
    return {"windows": {"0:10": {"stored": r}}, "state": state, "command": f"cmd {state}"}


def test_report_gives_one_table_per_state_in_run_and_step_order(report):
    raw = {"FetchPush-v4": {
        "prm_her_s10/seed8@70000": {"critic-b-progress": _entry("s8 at 70k", 0.5)},
        "prm_her_s10/seed3@70000": {"critic-a-progress": _entry("s3 at 70k", 0.25),
                                    "critic-b-progress": _entry("s3 at 70k", 0.75)},
        "prm_her_s10/seed8@30000": {"critic-b-progress": _entry("s8 at 30k", 0.125)}}}
    text = "\n".join(report.buffer_diagnosis(raw))
    heads = [ln for ln in text.splitlines() if ln.startswith("### ")]
    assert heads == ["### FetchPush-v4: learned potentials on the learner's replay buffer (prm_her_s10/seed3)",
                     "### FetchPush-v4: learned potentials on the learner's replay buffer (prm_her_s10/seed8)",
                     "### FetchPush-v4: learned potentials on the learner's replay buffer (prm_her_s10/seed8)"]
    assert text.index("(s3 at 70k)") < text.index("(s8 at 30k)") < text.index("(s8 at 70k)")
    assert "| critic-a-progress | 0:10 | stored | 0.25 | 0.010 / 0.020 | - | 0.030 |" in text
    assert text.count("| critic-b-progress |") == 3


def test_an_ensemble_is_measured_and_a_critic_of_another_task_is_refused(diag, trained, tmp_path):
    """An ensemble file declares its layout through its members (``critic_info()``), as the shaper reads it;
    a critic built for another task's observations is refused before anything is filed."""
    import torch

    from prm_critic.models.ensemble import save_critic_ensemble

    state, critic = trained
    net, meta, _ = tiny_state_critic(TASK)
    with torch.no_grad():
        for p in net.parameters():
            p.mul_(-1.0)
    second = save_state_critic(tmp_path / "reach_critic_b", net, meta)
    ens = save_critic_ensemble(tmp_path / "reach_ens.json", [critic, second])
    raw = tmp_path / "diag.json"
    assert diag.main(_args(state, ens, raw)) == 0
    assert "critic-reach_ens-success" in json.loads(raw.read_text())[TASK][f"{LABEL}/seed0@200"]
    net, meta, _ = tiny_state_critic("FetchPush-v4")
    push = save_state_critic(tmp_path / "push_critic", net, meta)
    raw2 = tmp_path / "diag2.json"
    with pytest.raises(SystemExit, match="--critic: its critic-input layout is not the task.s"):
        diag.main(_args(state, push, raw2))
    assert not raw2.exists()


def _done(seed, success, budget=100_000):
    return {"seed": seed, "done": {"steps": budget}, "rows": [{"env_steps": budget, "success_rate": success}]}


def test_report_puts_each_critics_fidelity_beside_its_rl_success(report):
    """The compact table pairs a critic measured on a buffer with the run of that critic in the state's
    shaper config (``prm_her_s10_<critic>``); a critic without runs says so; a run still going is left out;
    the rank correlation over critics is given once four critics have runs."""
    def entry(corrs):
        r = {"n": 10, "spearman_phi": 0.5, "dphi_learned": 0.01, "dphi_spec": 0.02, "dphi_err": 0.03}
        return {"windows": {w: {"relabelled": {**r, "dphi_corr": c}} for w, c in zip(("0:10", "10:20"), corrs)},
                "state": "s", "command": "c", "run_config": {"her": True, "scale": 10.0, "seed": 8}}

    crits = {f"critic-c{i}-progress": entry((0.1 * i, 0.2 * i)) for i in range(4)}
    crits["critic-nothing-progress"] = entry((0.5, None))
    raw = {"FetchPush-v4": {"prm_her_s10/seed8@70000": crits}}
    # success falls as fidelity rises: the rank correlation over critics must come out -1
    data = {"FetchPush-v4": {f"prm_her_s10_critic-c{i}-progress": [_done(0, 0.9 - 0.2 * i), _done(1, 0.9 - 0.2 * i)]
                             for i in range(4)}}
    data["FetchPush-v4"]["prm_her_s10_critic-c0-progress"].append(
        {"seed": 2, "done": None, "rows": [{"env_steps": 100_000, "success_rate": 0.0}]})  # still running
    lines = report.buffer_diagnosis(raw, data)
    text = "\n".join(lines)
    assert "| config | corr dPhi 0:10 | corr dPhi 10:20 | success at 100k |" in text
    assert "The learner that stored this buffer has no finished run at 100k." in text  # no prm_her_s10 seed 8
    data["FetchPush-v4"]["prm_her_s10"] = [_done(8, 0.625), _done(3, 0.1)]
    assert "The learner that stored this buffer reached 0.62 at 100k." in "\n".join(report.buffer_diagnosis(raw, data))
    assert "| prm_her_s10_critic-c0-progress | 0.00 | 0.00 | 0.90 [0.90, 0.90] (n=2) |" in text
    assert "| prm_her_s10_critic-c3-progress | 0.30 | 0.60 | 0.30 [0.30, 0.30] (n=2) |" in text
    assert "| prm_her_s10_critic-nothing-progress | 0.50 | - | no run |" in text
    assert "over the 4 critics with runs, corr dPhi in the last window against mean success: Spearman -1.00." in text
    # fewer than four critics with runs: no rank correlation
    del data["FetchPush-v4"]["prm_her_s10_critic-c3-progress"]
    assert "Spearman" not in "\n".join(ln for ln in report.buffer_diagnosis(raw, data) if ln.startswith("Rank"))


def test_report_refuses_a_file_not_keyed_by_state(report):
    """A diagnosis file keyed by critic alone (the earlier layout) is refused, naming the key."""
    with pytest.raises(ValueError, match=r"expected training-state keys .* got 'critic-a-progress'"):
        report.buffer_diagnosis({"FetchPush-v4": {"critic-a-progress": _entry("s", 0.5)}})
