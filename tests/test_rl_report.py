"""The RL benchmark report's goal verdicts (benchmarks/rl/report.py): the issue's two goals judged
from steps-to-80% on the mean curves, including budgets where HER never reached 80%."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from benchmarks.rl import report as rl_report, run as rl_run
from benchmarks.stats import bootstrap_mean, sign_test_p

HERE = Path(__file__).resolve().parents[1] / "benchmarks" / "rl"


def _verdicts(summary):
    return [line for line in rl_report.goals(summary) if line.startswith("- ")]


def test_steps_to_threshold_uses_first_eval_at_or_above():
    r = rl_report
    steps, mean = np.array([0, 10, 20, 30]), np.array([0.1, 0.5, 0.79, 0.8])
    assert r.steps_to(steps, mean, 0.5) == 10 and r.steps_to(steps, mean, 0.8) == 30
    assert r.steps_to(steps, mean, 0.9) is None


def test_goals_when_her_reaches_80():
    v = _verdicts({"her": (2e3, 4e3, 1e4), "prm_s10": (1e3, 4e3, 1e4), "prm_her_s10": (1e3, 2e3, 1e4)})
    assert any("PRM+HER" in x and "**met**" in x and "goal <= 2k" in x for x in v)
    assert any("PRM alone" in x and "**met**" in x for x in v)
    v = _verdicts({"her": (2e3, 4e3, 1e4), "prm_s10": (1e3, 5e3, 1e4), "prm_her_s10": (1e3, 3e3, 1e4)})
    assert all("**not met**" in x for x in v) and len(v) == 2


def test_goals_when_her_never_reaches_80():
    # PRM+HER at 40k <= half of a 100k budget that HER never met: met whatever HER's true figure is
    v = _verdicts({"her": (6e4, None, 1e5), "prm_her_s10": (2e4, 4e4, 1e5), "prm_s10": (None, None, 1e5)})
    assert any("PRM+HER" in x and "**met**" in x for x in v)
    assert any("PRM alone" in x and "**not met**" in x for x in v)
    # PRM+HER at 70k: later than half the budget, HER's true figure unknown -> undetermined
    v = _verdicts({"her": (6e4, None, 1e5), "prm_her_s10": (2e4, 7e4, 1e5)})
    assert v == ["- PRM+HER <= half of HER's steps to 80% (prm_her_s10): undetermined: HER did not reach 80% "
                 "within the budget; prm_her_s10 reached it at 70k, later than half of the budget"]
    v = _verdicts({"her": (None, None, 1e5), "prm_s10": (5e4, 9e4, 1e5)})
    assert v == ["- PRM alone <= HER's steps to 80% (prm_s10): **met**: 90k while HER did not reach 80%"]


def test_run_label_names_the_spec_file_and_bad_specs_are_refused(tmp_path):
    import pytest

    run = rl_run
    assert run.config_label("prm_her", 10, False) == "prm_her_s10"
    assert run.config_label("prm_her", 10, True, HERE / "specs" / "near_object.toml") == "prm_her_s10_prune_near_object"
    with pytest.raises(ValueError, match=r"--spec: expected a spec TOML file, got '.*nope.toml' \(no such file\)"):
        run.run_one("FetchPush-v4", "prm", 0, 10, spec=tmp_path / "nope.toml", root=tmp_path)
    with pytest.raises(ValueError, match=r"--spec: '.*near_object.toml' is a spec for 'FetchPush-v4', expected one for 'FetchReach-v4'"):
        run.run_one("FetchReach-v4", "prm", 0, 10, spec=HERE / "specs" / "near_object.toml", root=tmp_path)
    assert not any(tmp_path.iterdir())  # refused before any run folder was made


def test_goals_per_seed_when_seeds_ran_to_different_budgets():
    # seed 0 of PRM+HER reached 80% at 100k, seed 1 at 70k; HER: 150k and 160k
    per_prm = {0: (1e5, 1.5e5), 1: (7e4, 1.5e5)}
    per_her = {0: (1.5e5, 2e5), 1: (1.6e5, 2e5)}
    v = rl_report.goals({"her": (1.2e5, 1.6e5, 2e5, per_her), "prm_her_s10": (6e4, 1e5, 1.5e5, per_prm)})
    assert "- PRM+HER <= half of HER's steps to 80% (prm_her_s10): **not met**: prm_her_s10 100k vs HER 160k (goal <= 80k)" in v
    assert "  - seed 0: **not met**: prm_her_s10 100k vs HER 150k (goal <= 75k)" in v
    assert "  - seed 1: **met**: prm_her_s10 70k vs HER 160k (goal <= 80k)" in v
    # seed sets that differ: the mean-curve verdict says so, and every seed both ran gets its own
    # verdict (a seed only one of the two configs ran gets none)
    v = rl_report.goals({"her": (1e5, 1.5e5, 2e5, {0: (1.5e5, 2e5)}), "prm_her_s10": (5e4, 7e4, 1e5, per_prm)})
    assert any("(mean over seeds 0, 1 vs HER's over 0: see the per-seed verdicts)" in x for x in v)
    assert [x for x in v if x.startswith("  - seed")] == ["  - seed 0: **not met**: prm_her_s10 100k vs HER 150k (goal <= 75k)"]
    # one seed of a variant against HER's three: the variant's single seed is judged against HER's seed 0
    her3 = {0: (1.5e5, 2e5), 1: (None, 2e5), 2: (None, 2e5)}
    v = rl_report.goals({"her": (1e5, None, 2e5, her3), "prm_her_s10_x": (8e4, 1e5, 1e5, {0: (1e5, 1e5)})})
    assert any(x.startswith("- PRM+HER") and "vs HER's over 0, 1, 2" in x for x in v)
    assert "  - seed 0: **not met**: prm_her_s10_x 100k vs HER 150k (goal <= 75k)" in v
    # the same seeds: no note, and one shared seed gives no per-seed lines
    v = rl_report.goals({"her": (1e5, 1.5e5, 2e5, {0: (1.5e5, 2e5)}), "prm_her_s10": (5e4, 7e4, 1e5, {0: (7e4, 1e5)})})
    assert not any(x.startswith("  - seed") or "see the per-seed" in x for x in v)


def test_runs_in_progress_stay_out_of_the_mean_curve():
    r = rl_report
    row = lambda s, v: {"env_steps": s, "success_rate": v}  # noqa: E731
    done = {"seed": 0, "done": {"steps": 30}, "rows": [row(0, 0.0), row(10, 0.5), row(20, 0.9), row(30, 1.0)]}
    running = {"seed": 1, "done": None, "rows": [row(0, 0.0), row(10, 0.1)]}
    assert r.headline_runs([done, running]) == [done]
    assert r.headline_runs([running]) == [running]  # nothing finished: show what there is
    steps, m, _, _ = r.mean_curve(r.headline_runs([done, running]))
    assert r.steps_to(steps, m, 0.8) == 20


def _run(seed, curve, step=10_000):
    return {"seed": seed, "done": {"steps": step * (len(curve) - 1)},
            "rows": [{"env_steps": i * step, "success_rate": v} for i, v in enumerate(curve)]}


def test_bootstrap_interval_over_seeds():
    rep = rl_report
    bootstrap_steps_to, fmt_interval, mean_curve, steps_to = (rep.bootstrap_steps_to, rep.fmt_interval, rep.mean_curve,
                                                              rep.steps_to)

    same = [_run(s, [0.0, 0.3, 0.6, 0.9]) for s in range(3)]
    assert bootstrap_steps_to(same, 0.8) == (30_000.0, 30_000.0)  # no spread: the point estimate
    assert bootstrap_steps_to(same[:1], 0.8) is None and fmt_interval(None, 30_000) == ""
    spread = [_run(0, [0.0, 0.9, 0.9, 0.9]), _run(1, [0.0, 0.1, 0.9, 0.9]), _run(2, [0.0, 0.0, 0.0, 0.1])]
    lo, hi = bootstrap_steps_to(spread, 0.8)
    # the fastest resample (seed 0 only) reaches 80% at 10k; one with seed 2 in it may never
    assert lo == 10_000.0 and hi == float("inf")
    steps, m, _, _ = mean_curve(spread)
    assert steps_to(steps, m, 0.8) is None  # the point estimate is beyond the budget too
    assert fmt_interval((lo, hi), 30_000) == " [10k, > 30k]"
    # deterministic for a seed; every bound is an evaluated step or beyond the budget
    assert bootstrap_steps_to(spread, 0.5, seed=3) == bootstrap_steps_to(spread, 0.5, seed=3)
    for thr in (0.05, 0.3, 0.5, 0.8, 0.95):
        ci = bootstrap_steps_to(spread, thr)
        assert ci[0] <= ci[1] and all(v in (0, 10_000, 20_000, 30_000, float("inf")) for v in ci)


def _runs(values, budget):
    return [{"seed": i, "done": {"steps": budget}, "rows": [{"env_steps": 0, "success_rate": 0.0},
                                                           {"env_steps": budget, "success_rate": v}]}
            for i, v in enumerate(values)]


def test_learned_potential_goal_verdicts():
    rep = rl_report
    budget = rep.TASKS["FetchPush-v4"]["steps"]
    base = {"her": _runs([0.1] * 5, budget), "prm_her_s10": _runs([0.7] * 5, budget)}
    noise = {"FetchPush-v4": {"critic-c-progress": {"random_dphi": 0.02, "scripted_dphi": 0.03,
                                                    "spec": {"random_dphi": 0.021, "scripted_dphi": 0.029}}}}

    def verdicts(values):
        data = {"FetchPush-v4": {**base, "prm_her_s10_critic-c-progress": _runs(values, budget),
                                 "prm_her_s10_critic-c-progress_randw0": _runs([0.05] * 3, budget)}}
        return [line for line in rep.learned_potentials(data, noise) if line.startswith("- ") and " minus " not in line]

    assert verdicts([0.68] * 5) == ["- prm_her_s10_critic-c-progress: **met** (0.68 vs spec 0.70 - 0.05 on the same "
                                    "seeds 0-4, and HER 0.10 + 0.2)"]
    assert "**not met**" in verdicts([0.6] * 5)[0]  # below the spec's minus 0.05
    assert "undetermined (3 of 5 seeds" in verdicts([0.9] * 3)[0]
    data = {"FetchPush-v4": {**base, "prm_her_s10_critic-c-progress": _runs([0.9, 0.8, 0.7], budget),
                             "prm_her_s10_critic-c-progress_randw0": _runs([0.05, 0.9, 0.1], budget)}}
    lines = rep.learned_potentials(data, noise)
    controls = [line for line in lines if line.startswith("- ") and " minus " in line and "_randw" in line]
    vs_spec = [line for line in lines if line.startswith("- ") and "(spec potential), paired" in line]
    # the spec ran 0.7 on every seed: paired differences +0.2, +0.1, 0.0 (a tie, dropped by the sign test)
    assert vs_spec == ["- prm_her_s10_critic-c-progress minus prm_her_s10 (spec potential), paired by seed (seeds 0, 1, "
                       "2): mean +0.10 [+0.00, +0.20]; learned higher on 2, lower on 0; exact sign test p = 0.5"]
    assert controls == ["- prm_her_s10_critic-c-progress minus prm_her_s10_critic-c-progress_randw0, paired by seed "
                        "(seeds 0, 1, 2): mean +0.45; learned higher on 2, lower on 1; exact sign test p = 1"]
    assert sign_test_p(6, 6) == 2 / 64 and sign_test_p(0, 0) == 1.0
    table = "\n".join(rep.learned_potentials({"FetchPush-v4": {**base, "prm_her_s10_critic-c-progress":
                                                               _runs([0.68] * 5, budget)}}, noise))
    assert "| prm_her_s10_critic-c-progress | 0.68 [0.68, 0.68] (n=5) | 0.020 | 0.030 |" in table
    assert "| prm_her_s10 (spec potential) | 0.70 [0.70, 0.70] (n=5) | 0.021 | 0.029 |" in table


def test_bootstrap_mean_interval():
    assert bootstrap_mean([0.5]) is None
    lo, hi = bootstrap_mean([0.0, 1.0, 0.0, 1.0])
    assert 0.0 <= lo < 0.5 < hi <= 1.0


def test_critics_of_one_recipe_are_pooled_into_one_verdict():
    rep = rl_report
    budget = rep.TASKS["FetchPush-v4"]["steps"]
    base = {"her": _runs([0.1] * 5, budget), "prm_her_s10": _runs([0.7] * 5, budget)}
    a, b, other = ("prm_her_s10_critic-a-progress", "prm_her_s10_critic-a_s1-progress",
                   "prm_her_s10_critic-z-progress")
    # the same critic as a, in another run config (an annealed scale): not pooled with a and b
    annealed = "prm_her_s10_critic-a-progress_anneal50k"
    recipes = {"FetchPush-v4": {a: ("r1", 0), b: ("r1", 1), other: ("r2", 0), annealed: ("r1", 0)}}

    def lines(va, vb, vo=(0.9,) * 5):
        data = {"FetchPush-v4": {**base, a: _runs(va, budget), b: _runs(vb, budget), other: _runs(list(vo), budget),
                                 annealed: _runs([0.0], budget)}}
        out = rep.learned_potentials(data, {}, recipes)
        return out[out.index(next(x for x in out if x.startswith("The same goal for each recipe"))) + 2:], out

    # one critic meets the goal alone (0.9), its sibling does not (0.3): the recipe's mean, 0.6, does not
    verdicts, out = lines([0.9] * 5, [0.3] * 5)
    assert verdicts[0] == (f"- {a} + {b}: **not met** (0.60 vs spec 0.70 - 0.05 on the same seeds 0-4, and HER 0.10 + 0.2)")
    assert f"- {a}: **met** (0.90 vs spec 0.70 - 0.05 on the same seeds 0-4, and HER 0.10 + 0.2)" in out
    assert not any(other in v for v in verdicts if v.startswith("- "))  # a recipe of one critic is not pooled
    assert not any(annealed in v for v in out if " + " in v)
    pooled = [x for x in out if x.startswith(f"- {a} + {b} (training seeds 0, 1; 10 runs)")]
    assert pooled == [f"- {a} + {b} (training seeds 0, 1; 10 runs): mean over the critics of each critic's mean 0.60; "
                      "on the 5 seeds every critic ran, 0.60 [0.60, 0.60] (95 % bootstrap interval over seeds)"]
    paired = out[out.index(pooled[0]) + 1]
    assert paired.startswith(f"  - {a} + {b} minus prm_her_s10 (spec potential), paired by seed (seeds 0, 1, 2, 3, 4): "
                             "mean -0.10 [-0.10, -0.10]; learned higher on 0, lower on 5")
    assert lines([0.9] * 5, [0.6] * 5)[0][0].startswith(f"- {a} + {b}: **met** (0.75 vs")
    # the sibling on 2 seeds: undetermined, and pairing uses only the seeds both critics ran
    verdicts, out = lines([0.9] * 5, [0.6] * 2)
    assert verdicts[0] == f"- {a} + {b}: undetermined (seeds per critic 5, 2 of 5; spec 5, HER 5 at 100k)"
    assert any(x.startswith(f"  - {a} + {b} minus prm_her_s10 (spec potential), paired by seed (seeds 0, 1): "
                            "mean +0.05") for x in out)


def test_critic_recipes_from_the_committed_critics_and_a_changed_critic_is_refused():
    import pytest

    pytest.importorskip("torch")
    from prm_critic.models.checkpoint import load_state_critic
    from prm_critic.sb3.envs import critic_fingerprint

    rep = rl_report
    crit = "benchmarks/rl/critics/{}.json"
    fps = {c: critic_fingerprint(load_state_critic(HERE.parents[1] / crit.format(c)))
           for c in ("push_cov", "push_cov_s1", "push_cov_big", "push_mc")}

    def runs(c, sha=None):
        return [{"seed": 0, "rows": [], "done": {"critic": crit.format(c), "critic_sha256": sha or fps[c]}}]

    data = {"FetchPush-v4": {f"prm_her_s10_critic-{c}-progress": runs(c) for c in fps}}
    data["FetchPush-v4"]["prm_her_s10_critic-push_cov-progress_randw0"] = runs("push_cov", "0" * 64)  # control: skipped
    rec = rep.critic_recipes(data)["FetchPush-v4"]
    # push_cov and push_cov_s1 differ only in --seed; push_cov_big in data and learning rate; push_mc was
    # not written by train_potential.py and has no recipe
    assert sorted(rec) == [f"prm_her_s10_critic-{c}-progress" for c in ("push_cov", "push_cov_big", "push_cov_s1")]
    key = {c: rec[f"prm_her_s10_critic-{c}-progress"] for c in ("push_cov", "push_cov_s1", "push_cov_big")}
    assert key["push_cov"][0] == key["push_cov_s1"][0] != key["push_cov_big"][0]
    assert (key["push_cov"][1], key["push_cov_s1"][1]) == (0, 1)
    data = {"FetchPush-v4": {"prm_her_s10_critic-push_cov-progress": runs("push_cov", "f" * 64)}}
    with pytest.raises(ValueError, match=r"prm_her_s10_critic-push_cov-progress seed 0: the run recorded critic "
                                         r"weights sha256 f{64}, expected [0-9a-f]{64} of .*push_cov.json "
                                         r"\(the critic file changed after the run\)"):
        rep.critic_recipes(data)


def test_an_annealed_learned_potential_shows_its_potential_noise_and_is_paired_with_the_spec():
    rep = rl_report
    budget = rep.TASKS["FetchPush-v4"]["steps"]
    noise = {"FetchPush-v4": {"critic-c-progress": {"random_dphi": 0.02, "scripted_dphi": 0.03,
                                                    "spec": {"random_dphi": 0.021, "scripted_dphi": 0.029}}}}
    label = "prm_her_s10_critic-c-progress_anneal50k"
    data = {"FetchPush-v4": {"her": _runs([0.1] * 5, budget), "prm_her_s10": _runs([0.7] * 5, budget),
                             label: _runs([0.8] * 5, budget)}}
    out = "\n".join(rep.learned_potentials(data, noise))
    assert f"| {label} | 0.80 [0.80, 0.80] (n=5) | 0.020 | 0.030 |" in out  # the same potential, annealed
    assert f"- {label} minus prm_her_s10 (spec potential), paired by seed" in out


def test_a_config_without_its_own_control_is_paired_with_its_shaper_configs_control(monkeypatch):
    rep = rl_report
    budget = rep.TASKS["FetchPush-v4"]["steps"]
    own, other, ctrl = ("prm_her_s10_critic-c-progress", "prm_her_s10_critic-e-progress",
                        "prm_her_s10_critic-c-progress_randw0")
    data = {"FetchPush-v4": {"her": _runs([0.1] * 5, budget), "prm_her_s10": _runs([0.7] * 5, budget),
                             own: _runs([0.9, 0.8, 0.7], budget), other: _runs([0.6, 0.6, 0.6], budget),
                             ctrl: _runs([0.05, 0.9, 0.1], budget),
                             # another shaper config's control is not paired with these
                             "prm_s10_critic-c-progress_randw0": _runs([0.5] * 3, budget)}}
    lines = [x for x in rep.learned_potentials(data, {}) if x.startswith("- ") and "_randw" in x]
    assert lines == [f"- {own} minus {ctrl}, paired by seed (seeds 0, 1, 2): mean +0.45; learned higher on 2, "
                     "lower on 1; exact sign test p = 1",
                     f"- {other} minus {ctrl} (the shaper config's control), paired by seed (seeds 0, 1, 2): "
                     "mean +0.25; learned higher on 2, lower on 1; exact sign test p = 1"]


def test_a_screened_config_is_also_compared_on_its_untouched_seeds(monkeypatch):
    rep = rl_report
    budget = rep.TASKS["FetchPush-v4"]["steps"]
    label = "prm_her_s10_critic-c-progress"
    monkeypatch.setattr(rep, "SCREENED_ON", {"FetchPush-v4": {label: (3,)}})
    data = {"FetchPush-v4": {"her": _runs([0.1] * 5, budget), "prm_her_s10": _runs([0.7] * 5, budget),
                             label: _runs([0.8, 0.8, 0.6, 0.1, 0.8], budget)}}
    out = rep.learned_potentials(data, {})
    i = out.index(next(x for x in out if x.startswith(f"- {label} minus prm_her_s10 (spec potential)")))
    assert "(seeds 0, 1, 2, 3, 4): mean -0.08" in out[i]
    # seed 3 (-0.6) dropped: +0.1, +0.1, -0.1, +0.1
    assert out[i + 1].startswith("  - on the seeds it was not screened on (screened on seed 3): (seeds 0, 1, 2, 4): "
                                 "mean +0.05 [")
    assert out[i + 1].endswith("learned higher on 3, lower on 1; exact sign test p = 0.625")
    assert f"- {label}: **not met** (0.62 vs spec 0.70 - 0.05 on the same seeds 0-4, and HER 0.10 + 0.2); screened on seed 3 first" in out
    monkeypatch.setattr(rep, "SCREENED_ON", {})
    assert not any("screened" in x for x in rep.learned_potentials(data, {}))


def test_a_config_is_confirmed_on_its_fresh_seeds_alone(monkeypatch):
    rep = rl_report
    budget = rep.TASKS["FetchPush-v4"]["steps"]
    label = "prm_her_s10_critic-c-progress"
    monkeypatch.setattr(rep, "CONFIRM_ON", {"FetchPush-v4": {label: (5, 6, 7)}})
    # seeds 0-4 (where the config was chosen) look great; the fresh seeds 5-7 do not
    mine = _runs([0.9] * 5 + [0.5, 0.6, 0.4], budget)
    spec = _runs([0.7] * 5 + [0.7, 0.7, 0.8], budget)
    data = {"FetchPush-v4": {"her": _runs([0.1] * 5, budget), "prm_her_s10": spec, label: mine[:7]}}
    out = rep.learned_potentials(data, {})
    i = out.index(next(x for x in out if x.startswith(f"- {label} on seeds 5, 6, 7:")))
    assert "2 of 3 finished (0.55 [" in out[i] and "spec potential 3 of 3 (0.73 [" in out[i]
    assert out[i + 1].startswith(f"  - {label} minus prm_her_s10 (spec potential), paired by seed (seeds 5, 6): "
                                 "mean -0.15 [")
    assert out[i + 2] == "  - verdict: pending (2 of 3 seeds finished for both; HER 5 of 5)"
    data["FetchPush-v4"][label] = mine
    out = rep.learned_potentials(data, {})
    # pooled over all 8 seeds the goal is met; on the fresh seeds alone it is not
    assert f"- {label}: **met** (0.75 vs spec 0.71 - 0.05 on the same seeds 0-7, and HER 0.10 + 0.2)" in out
    assert "  - verdict: **not confirmed** (0.50 vs spec 0.73 - 0.05 on the same seeds 5-7, and HER 0.10 + 0.2)" in out
    mine[5]["rows"][-1]["success_rate"] = 0.8
    mine[7]["rows"][-1]["success_rate"] = 0.8
    out = rep.learned_potentials(data, {})
    assert any(x.startswith("  - verdict: **confirmed** (0.73 vs spec 0.73") for x in out)
    monkeypatch.setattr(rep, "CONFIRM_ON", {})
    assert not any("fresh seeds" in x for x in rep.learned_potentials(data, {}))


def test_headline_gives_every_seed_at_the_budget_and_at_a_longer_budget(monkeypatch):
    rep = rl_report
    budget = rep.TASKS["FetchPush-v4"]["steps"]
    monkeypatch.setattr(rep, "HEADLINE", {"FetchPush-v4": ("her", "prm_her_s10", "missing")})
    her = _runs([0.1, 0.0, 0.2], budget)
    for r, v in zip(her, (1.0, 0.7, 0.04)):  # HER's runs went on to twice the budget
        r["done"] = {"steps": 2 * budget}
        r["rows"].append({"env_steps": 2 * budget, "success_rate": v})
    spec = _runs([0.8, 0.4], budget)
    spec.append({"seed": 2, "done": None, "rows": [{"env_steps": budget, "success_rate": 1.0}]})  # unfinished
    out = rep.headline({"FetchPush-v4": {"her": her, "prm_her_s10": spec}})
    rows = [x for x in out if x.startswith("| her") or x.startswith("| prm")]
    assert rows[0].startswith(f"| her | {budget / 1000:g}k | 3 | 0.10 [") and rows[0].endswith(
        "| 0: 0.10, 1: 0.00, 2: 0.20 |")
    assert rows[1].startswith(f"| her | {2 * budget / 1000:g}k | 3 | 0.58 [")
    assert rows[2].startswith(f"| prm_her_s10 | {budget / 1000:g}k | 2 | 0.60 [") and rows[2].endswith(
        "| 0: 0.80, 1: 0.40 |")
    assert len(rows) == 3  # the unfinished seed and the config without runs are left out
    assert rep.headline({"PointMaze_UMaze-v3": {}}) == []


def test_summary_cells_at_the_budget_and_beyond_and_short_runs(monkeypatch):
    rep = rl_report
    budget = rep.TASKS["FetchPush-v4"]["steps"]
    monkeypatch.setattr(rep, "HEADLINE", {"FetchPush-v4": ("her", "prm_her_s10_critic-c-progress_randw0",
                                                           "prm_her_s10_critic-c-progress")})
    her = _runs([0.1, 0.0, 0.2], budget)
    for r, v in zip(her, (1.0, 0.7, 0.04)):
        r["done"] = {"steps": 2 * budget}
        r["rows"].append({"env_steps": 2 * budget, "success_rate": v})
    short = [{"seed": 0, "done": {"steps": budget // 2}, "rows": [{"env_steps": budget // 2, "success_rate": 0.3}]}]
    data = {"FetchPush-v4": {"her": her, "prm_her_s10": _runs([0.8, 0.4], budget), "sparse": short,
                             "prm_her_s10_critic-c-progress": _runs([0.9], budget),
                             "prm_her_s10_critic-c-progress_randw0": _runs([0.0], budget)}}
    table = rep.summary(data)
    assert table[0] == ("| task, budget | HER | PRM+HER, spec potential | PRM+HER, learned potential | PRM alone "
                        "| sparse |")
    assert table[2] == (f"| FetchPush-v4, {budget / 1000:g}k | 0.10 (0.58 at {2 * budget / 1000:g}k) (n=3) | "
                        f"0.60 (n=2) | 0.90 (n=1) | - | 0.30 at {budget / 2000:g}k (n=1) |")


def test_write_guide_replaces_only_the_marked_table_and_refuses_missing_markers(tmp_path):
    rep = rl_report
    guide = tmp_path / "guide.md"
    guide.write_text(f"intro\n{rep.GUIDE_START}\n| old |\n{rep.GUIDE_END}\nafter\n")
    rep.write_guide(guide, ["| a |", "|---|"])
    assert guide.read_text() == f"intro\n{rep.GUIDE_START}\n| a |\n|---|\n{rep.GUIDE_END}\nafter\n"
    guide.write_text("no markers\n")
    with pytest.raises(ValueError, match="guide.md: expected one"):
        rep.write_guide(guide, ["| a |"])
    guide.write_text(f"{rep.GUIDE_END}\n{rep.GUIDE_START}\n")
    with pytest.raises(ValueError, match="expected one"):
        rep.write_guide(guide, ["| a |"])


def test_the_user_guides_summary_table_matches_the_committed_runs():
    """docs/readme/train_policy.md's figures are the report's, from the committed runs: a run committed
    without rewriting the guide fails here."""
    rep = rl_report
    text = rep.GUIDE.read_text()
    assert text.count(rep.GUIDE_START) == 1 and text.count(rep.GUIDE_END) == 1
    committed = text.split(rep.GUIDE_START, 1)[1].split(rep.GUIDE_END, 1)[0].strip().splitlines()
    fresh = rep.summary(rep.load_runs())
    assert committed == fresh, ("docs/readme/train_policy.md's summary differs from the runs; rewrite it with "
                                "`python -m benchmarks.rl.report --guide docs/readme/train_policy.md`")


def test_paired_plot_is_written_only_with_a_common_seed(monkeypatch, tmp_path):
    rep = rl_report
    budget = rep.TASKS["FetchPush-v4"]["steps"]
    label = "prm_her_s10_critic-c-progress"
    monkeypatch.setattr(rep, "HEADLINE", {"FetchPush-v4": ("her", "prm_her_s10", label)})
    monkeypatch.setattr(rep, "CONFIRM_ON", {"FetchPush-v4": {label: (1,)}})
    mine = _runs([0.9, 0.5], budget)
    data = {"FetchPush-v4": {"prm_her_s10": _runs([0.8], budget)[:1], label: mine[1:]}}  # seeds 0 and 1: none common
    assert rep.plot_paired(data, tmp_path / "p.png") is False and not (tmp_path / "p.png").exists()
    data["FetchPush-v4"][label] = mine
    assert rep.plot_paired(data, tmp_path / "p.png") is True
    assert (tmp_path / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_goal_compares_with_the_spec_on_the_same_seeds_only():
    """A seed the spec potential ran and the learned one did not (or the other way round) stays out of
    the goal: the spec's extra seed 5 at 1.0 would otherwise raise its mean from 0.70 to 0.75 and turn
    the verdict to not met."""
    rep = rl_report
    budget = rep.TASKS["FetchPush-v4"]["steps"]
    label = "prm_her_s10_critic-c-progress"
    data = {"FetchPush-v4": {"her": _runs([0.1] * 5, budget), "prm_her_s10": _runs([0.7] * 5 + [1.0], budget),
                             label: _runs([0.67] * 5, budget)}}
    out = rep.learned_potentials(data, {})
    assert f"- {label}: **met** (0.67 vs spec 0.70 - 0.05 on the same seeds 0-4, and HER 0.10 + 0.2)" in out
    data["FetchPush-v4"][label] = _runs([0.67] * 4, budget) + [{"seed": 7, "done": {"steps": budget}, "rows": [
        {"env_steps": budget, "success_rate": 0.0}]}]  # four common seeds only
    assert any(x.startswith(f"- {label}: undetermined (4 of 5 seeds finished by it and the spec; it 5, spec 6") for x in rep.learned_potentials(data, {}))
    assert rep.seed_list([4, 0, 1, 2, 7, 9, 8]) == "0-2, 4, 7-9" and rep.seed_list([3]) == "3"


def test_the_demonstration_goal_waits_for_every_declared_run_then_judges_all_three_conditions():
    r = rl_report
    plan = {"potential": "pot", "random": "rand", "her": "her", "spec": "spec", "controls": ("buf", "starts"),
            "screen": (0,), "declared": (10, 11, 12)}

    def vals(pot, rand, her, buf, starts):
        return {"pot": dict(zip((10, 11, 12), pot)), "rand": dict(zip((10, 11, 12), rand)),
                "her": dict(zip((10, 11, 12), her)), "buf": dict(zip((10, 11, 12), buf)),
                "starts": dict(zip((10, 11, 12), starts)), "spec": {}}

    good = vals([0.9, 0.8, 0.85], [0.05, 0.04, 0.06], [0.04, 0.06, 0.05], [0.5, 0.5, 0.55], [0.3, 0.2, 0.3])
    text = "\n".join(r.demo_goal(good, plan))
    assert "Verdict: **met**" in text and "over the best control `buf`" in text
    pending = {k: dict(v) for k, v in good.items()}
    del pending["starts"][12]
    assert "**pending** (not finished: `starts` seeds 12)" in "\n".join(r.demo_goal(pending, plan))
    # below 0.60; not 0.15 over the best control; the random control off HER by more than 0.05: each fails alone
    low = vals([0.55, 0.5, 0.55], [0.05] * 3, [0.05] * 3, [0.2] * 3, [0.1] * 3)
    assert "**not met**" in "\n".join(r.demo_goal(low, plan)) and "fails: mean 0.53" in "\n".join(r.demo_goal(low, plan))
    close = vals([0.9, 0.8, 0.85], [0.05] * 3, [0.05] * 3, [0.8, 0.7, 0.75], [0.1] * 3)
    assert "fails: +0.10 over the best control `buf`" in "\n".join(r.demo_goal(close, plan))
    lucky = vals([0.9, 0.8, 0.85], [0.3, 0.2, 0.25], [0.05] * 3, [0.2] * 3, [0.1] * 3)
    assert "fails: random-weights control +0.20 from HER" in "\n".join(r.demo_goal(lucky, plan))
    # decided before every run finished: even success 1 on the unfinished seeds cannot reach the goal
    hopeless = {k: dict(v) for k, v in low.items()}
    hopeless["pot"] = {10: 0.1, 11: 0.2}
    text = "\n".join(r.demo_goal(hopeless, plan))
    assert "Verdict: **not met**, decided before every run finished (the potential's mean is at most 0.43" in text
    assert "not finished: `pot` seeds 12" in text
    beaten = {k: dict(v) for k, v in good.items()}
    beaten["pot"], beaten["buf"] = {10: 0.9, 11: 0.8}, {10: 1.0, 11: 0.96, 12: 1.0}
    assert "the potential minus `buf` is at most -0.09 < +0.15" in "\n".join(r.demo_goal(beaten, plan))
    beaten["buf"] = {10: 1.0, 11: 0.96}  # the control unfinished on seed 12 too: +0.25 still possible
    assert "**pending**" in "\n".join(r.demo_goal(beaten, plan))
    # one seed short of deciding: still pending
    assert "**pending**" in "\n".join(r.demo_goal({**good, "pot": {10: 0.9}}, plan))
