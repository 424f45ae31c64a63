"""The agents benchmark over game types: its seed plan, the driver's seed checks, the gold-path row,
the dead-end candidates and the report's computations on small fixtures."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from text_env_helpers import Corridor

from benchmarks.agents import plan, types_report as tr
from benchmarks.stats import wilson


def test_the_committed_plan_passes_its_checks_and_keeps_twx_dev_seeds_out():
    plan.check_plan()
    for t in plan.TYPES.values():
        assert len(t.test) == 48 and len(t.label) == 96 and len(t.tune) == 48
        if t.env.startswith("twx:"):
            every = set(t.label) | set(t.tune) | set(t.test)
            assert not every & set(range(10000, 11000)), t.name


@pytest.mark.parametrize("bad, match", [
    (dict(tune=range(90, 138)), "label and tune seeds overlap"),
    (dict(test=range(10000, 10048)), "outside TextWorldExpress's test fold"),
    (dict(tune=range(20100, 20148)), "outside TextWorldExpress's train fold"),
    (dict(test=range(20000, 20010)), "at least 48 test seeds"),
])
def test_a_plan_breaking_its_rules_is_refused(bad, match):
    t = plan.TYPES["twx-coin"]
    broken = plan.GameType(t.name, t.env, **{**dict(label=t.label, tune=t.tune, test=t.test), **bad})
    with pytest.raises(ValueError, match=match):
        plan.check_plan({t.name: broken})


def test_split_seeds_refuses_seeds_outside_the_split():
    assert plan.split_seeds("twx-coin", "test") == list(range(20000, 20048))
    assert plan.split_seeds("tw-cooking", "tune", [500, 547]) == [500, 547]
    with pytest.raises(ValueError, match="twx-coin test seeds are 20000-20047, got \\[5\\]"):
        plan.split_seeds("twx-coin", "test", [5])
    with pytest.raises(ValueError, match="split: expected one of"):
        plan.split_seeds("twx-coin", "dev")
    with pytest.raises(ValueError, match="type: expected one of"):
        plan.game_type("twx-sorting")


def test_run_refuses_type_seeds_outside_the_split_before_playing(tmp_path):
    run = pytest.importorskip("benchmarks.agents.run")
    with pytest.raises(SystemExit, match="twx-coin tune seeds are 100-147"):
        run.main(["--type", "twx-coin", "--split", "tune", "--seeds", "0-3", "--methods", "base", "--out",
                  str(tmp_path)])
    with pytest.raises(SystemExit, match="names its games"):
        run.main(["--type", "twx-coin", "--env", "twx:twc", "--methods", "base", "--out", str(tmp_path)])
    assert not list(tmp_path.iterdir())


class GoldCorridor(Corridor):
    """The corridor with its winning path as the gold path (``walkthrough``), as TextWorld's and
    TextWorldExpress's environments give theirs."""

    def _reset(self):
        self.walkthrough = self.winning_path()
        return super()._reset()

    def _spawn(self):
        return GoldCorridor(self.seed, n=self.n, max_steps=self.max_steps)


def test_the_gold_row_plays_the_walkthrough_without_policy_calls():
    from agents.textworld_agent.search import run_gold

    r = run_gold(lambda max_steps: GoldCorridor(3, max_steps=max_steps), max_steps=30)
    assert r.won and not r.lost and r.policy_calls == 0
    assert r.commands == GoldCorridor(3).winning_path() and r.tool_calls == len(r.commands)
    with pytest.raises(ValueError, match="has none"):
        run_gold(lambda max_steps: Corridor(3, max_steps=max_steps), max_steps=30)


def test_dead_end_candidates_mark_the_steps_that_lose():
    from benchmarks.agents.dead_ends import step_candidates

    env = Corridor(1, max_steps=30)
    path = ["forward"] * (env.n - 1)
    cands = step_candidates(env, path, alive_per_state=10, rng=np.random.default_rng(0))
    dead = [(h, t) for h, t, d in cands if d]
    assert len(dead) == 1 and "pit" in dead[0][1] and len(dead[0][0]) == env.pit_room
    assert all(len(h) <= len(path) for h, _, _ in cands)
    few = step_candidates(Corridor(1, max_steps=30), path, alive_per_state=1, rng=np.random.default_rng(0))
    assert sum(not d for _, _, d in few) == len(path) + 1  # one alive step per state


def test_wilson_interval_matches_known_values():
    assert wilson(5, 10) == pytest.approx((0.2366, 0.7634), abs=1e-4)
    lo, hi = wilson(0, 10)
    assert lo == 0.0 and hi == pytest.approx(0.2775, abs=1e-4)
    assert wilson(48, 48)[1] == 1.0
    with pytest.raises(ValueError):
        wilson(3, 0)


def _episodes(method: str, wins: list[bool], calls: int, tag: str = "twx-coin") -> list[dict]:
    return [{"method": method, "seed": 20000 + i, "rep": 0, "won": w, "lost": False, "policy_calls": calls,
             "tool_calls": calls, "critic_calls": calls, "dead_ends_avoided": 0, "wall_s": 1.0, "difficulty": tag}
            for i, w in enumerate(wins)]


def _fixture(prm_wins: int, rand_wins: int, n: int = 20) -> dict[str, list[dict]]:
    return {"prm_beam+twx-coin": _episodes("prm_beam+twx-coin", [i < prm_wins for i in range(n)], 50),
            "prm_beam+random": _episodes("prm_beam+random", [i < rand_wins for i in range(n)], 60),
            "prm_beam+constant": _episodes("prm_beam+constant", [i < rand_wins for i in range(n)], 60),
            "prm_mcts+twx-coin": _episodes("prm_mcts+twx-coin", [i < prm_wins - 2 for i in range(n)], 55)}


def test_type_tests_pair_each_search_with_each_control_and_holm_adjust():
    tests = tr.type_tests(_fixture(18, 6), "twx-coin")
    assert [(t["search"], t["control"]) for t in tests] == [("prm_beam", "random"), ("prm_beam", "constant")]
    t = tests[0]
    assert (t["a_only"], t["b_only"]) == (12, 0) and t["diff"] == pytest.approx(0.6)
    assert t["p"] == pytest.approx(2 / 2 ** 12) and t["p_holm"] == pytest.approx(2 * t["p"])
    v = tr.goal_vs_random(tests)
    assert v["met"] is True and v["search"] == "prm_beam"
    assert tr.goal_vs_random(tr.type_tests(_fixture(8, 6), "twx-coin"))["met"] is False
    assert tr.goal_vs_random([])["met"] is None


def test_mcts_goal_and_counting_verdicts():
    assert tr.mcts_vs_beam(_fixture(18, 6), "twx-coin")["met"] is False  # 0.80 vs 0.90
    near = _fixture(18, 6)
    near["prm_mcts+twx-coin"] = _episodes("prm_mcts+twx-coin", [i < 17 for i in range(20)], 55)
    assert tr.mcts_vs_beam(near, "twx-coin")["met"] is True  # 0.85 vs 0.90
    assert tr.count_verdict(3, 3, 3, n_types=5) is True
    assert tr.count_verdict(1, 3, 3, n_types=5) is None  # two unmeasured types could still make it up
    assert tr.count_verdict(0, 3, 3, n_types=5) is False


def test_the_section_is_computed_from_result_files(tmp_path):
    folder = tmp_path / "types" / "twx-coin" / "test"
    folder.mkdir(parents=True)
    for method, res in _fixture(18, 6).items():
        for r in res:
            (folder / f"{method}__seed{r['seed']}_rep0.json").write_text(json.dumps(r))
    data = tmp_path / "data"
    (data / "twx-coin").mkdir(parents=True)
    (data / "twx-coin" / "dead_end_auroc.json").write_text(json.dumps(
        {"auroc": 0.9, "n_dead": 10, "n_alive": 40, "n_states": 50}))
    text = "\n".join(tr.render_types(tmp_path, data))
    assert "| `prm_beam+twx-coin` | 20 | 20 | 0.90 | 0.70-0.97 |" in text
    assert "* vs random: **met**" in text and "* dead-end AUROC: **met** -- AUROC 0.900" in text
    assert "### twx-twc" in text and "Not measured yet" in text


def test_mcts_settings_tag_their_rows_and_the_report_pairs_them():
    run = pytest.importorskip("benchmarks.agents.run")
    assert run.MCTSSettings().tag == ""
    assert run.MCTSSettings(3, 2.0, "mean", "uct").tag == "c2-mean-b3-uct"
    fx = _fixture(18, 6)
    for critic in ("twx-coin", "random"):
        name = f"prm_mcts+{critic}+c2-mean-b3-uct"
        fx[name] = _episodes(name, [i < 17 for i in range(20)], 55)
    assert tr.search_rows(fx, "twx-coin") == [("prm_beam", []), ("prm_mcts", []), ("prm_mcts", ["c2-mean-b3-uct"])]
    tests = tr.type_tests(fx, "twx-coin")
    assert [(t["search"], t["control"]) for t in tests][-1] == ("prm_mcts+c2-mean-b3-uct", "random")
    v = tr.mcts_vs_beam(fx, "twx-coin")  # the tuned row: 0.85 vs the beam's 0.90
    assert v["met"] is True and "c2-mean-b3-uct" in v["why"]


def test_the_driver_refuses_a_prm_folder_trained_on_other_labels(tmp_path, monkeypatch):
    from benchmarks.agents import game_types as drv

    lab = tmp_path / "cache" / "twx-coin" / "labels"
    lab.mkdir(parents=True)
    (lab / "labels.jsonl").write_text("{}\n")
    monkeypatch.setattr(drv, "CACHE", tmp_path / "cache")
    out = tmp_path / "prm"
    out.mkdir()
    (out / "train_stats.json").write_text(json.dumps({"labels_sha256": {"labels": "0" * 64}}))
    with pytest.raises(SystemExit, match="trained on other labels"):
        drv.stage_train(out, ["twx-coin"], epochs=1, lr=1e-3)
    with pytest.raises(SystemExit, match="no labels of type twx-cookingworld"):
        drv.stage_train(out, ["twx-cookingworld"], epochs=1, lr=1e-3)


def test_provenance_lines_read_the_label_summary(tmp_path):
    (tmp_path / "twx-twc").mkdir()
    (tmp_path / "twx-twc" / "labels_summary.json").write_text(json.dumps(
        {"n_trajectories": 96, "base_won": 40, "base_lost": 3, "n_steps": 1000, "settings": {"k": 4},
         "mean_label": 0.25, "frac_zero": 0.5}))
    lines = tr.provenance_lines(plan.TYPES["twx-twc"], tmp_path)
    assert lines[0].startswith("Labels: 96 base-policy trajectories (40 won, 3 lost), 1000 steps, k = 4")


def test_mcts_goal_compares_the_games_both_searches_played():
    fx = _fixture(10, 6)  # the beam wins games 0-9 of 20
    fx["prm_mcts+twx-coin"] = _episodes("prm_mcts+twx-coin", [True] * 10, 55)  # MCTS played games 0-9 only
    v = tr.mcts_vs_beam(fx, "twx-coin")
    assert v["met"] is True and "on the 10 games both played" in v["why"] and "vs beam 1.00" in v["why"]


def test_the_labels_stage_keeps_its_units_and_a_later_run_resumes_from_them(tmp_path, monkeypatch):
    """A fake labeller (it writes what the real one writes, without playing games) stands in for
    ``agents.textworld_agent.labels.main``: the stage's own bookkeeping is what is tested."""
    from agents.textworld_agent import labels
    from benchmarks.agents import game_types as drv

    monkeypatch.setattr(drv, "CACHE", tmp_path / "cache")
    monkeypatch.setattr(drv, "DATA", tmp_path / "data")
    seen = []

    def fake_labeller(argv):
        out = Path(argv[argv.index("--out") + 1])
        seen.append(sorted(p.name for p in (out / "units").glob("*.json")) if (out / "units").is_dir() else None)
        (out / "units").mkdir(parents=True, exist_ok=True)
        (out / "units" / "seed0_ep0.json").write_text("{}")
        for name in ("run.json", "summary.json", "labels.jsonl"):
            (out / name).write_text("{}")
        return 0

    monkeypatch.setattr(labels, "main", fake_labeller)
    drv.stage_labels("twx-coin", k=4, siblings=0, max_steps=40)
    kept = tmp_path / "data" / "twx-coin" / "label_units"
    assert sorted(p.name for p in kept.iterdir()) == ["run.json", "summary.json", "units"]  # no JSONL kept
    shutil.rmtree(tmp_path / "cache")
    drv.stage_labels("twx-coin", k=4, siblings=0, max_steps=40)
    assert seen == [None, ["seed0_ep0.json"]]  # the second run found the committed units in its cache
