"""The game-types section of ``docs/agents_benchmark.md``, from committed per-episode results.

Per type of ``plan.py`` (results under ``benchmarks/agents/results/types/TYPE/test``, written by
``game_types.py`` / ``run.py --type TYPE``): success with its 95 % Wilson interval and policy calls per
episode for every row; the exact McNemar test of each PRM search (``prm_beam`` / ``prm_mcts`` with
the type's PRM, rows tagged with the type's name) against the same search with the random and the
constant critic on the same episodes, Holm-adjusted over the type's tests; the dead-end AUROC of the
type's PRM on its test games (``benchmarks/agents/types/TYPE/dead_end_auroc.json``, when measured);
the verdicts against the issue's goals. The transfer table puts the rows of PRMs trained on all types
(tag ``all-types``) or on all but the type (tag ``loo``) beside the type's own PRM.

Rendering needs none of torch, the games or the PRM: every number is computed here from the files.
"""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.agents.plan import TYPES, GameType
from benchmarks.agents.report import RESULTS, fmt_p, load_results, summary, wins_by_episode
from benchmarks.stats import holm, mcnemar, wilson

HERE = Path(__file__).resolve().parent
DATA = HERE / "types"
SEARCHES = ("prm_beam", "prm_mcts")
CONTROL_CRITICS = ("random", "constant")
TRANSFER_TAGS = {"all-types": "one PRM on all types' labels", "loo": "PRM on the other types' labels"}
#: the issue's goals
GOAL_MARGIN, GOAL_ALPHA, MCTS_MARGIN, TRANSFER_MARGIN, AUROC_GOAL = 0.15, 0.05, 0.05, 0.10, 0.85
ROW_ORDER = ("base", "outcome_bon4", "prm_beam", "prm_mcts", "gold", "oracle_bon3")


def load_type(t: GameType, results: Path = RESULTS) -> dict[str, list[dict]]:
    """``{row: [episode, ...]}`` of type ``t``'s test results (only its test seeds and its games)."""
    from prm_critic.text.envs import parse_env_spec

    return load_results(Path(results) / "types" / t.name / "test", tuple(t.test), parse_env_spec(t.env).tag)


def type_tests(allres: dict[str, list[dict]], prm_tag: str) -> list[dict]:
    """Each PRM search against each control critic in the same search (exact McNemar on the episodes
    both have), with Holm's adjustment over all of them; pairs missing a row are left out."""
    tests = []
    for search, rest in search_rows(allres, prm_tag):
        prm = allres.get("+".join([search, prm_tag, *rest]))
        for control in CONTROL_CRITICS:
            ctl = allres.get("+".join([search, control, *rest]))
            if not prm or not ctl:
                continue
            t = mcnemar(wins_by_episode(prm), wins_by_episode(ctl))
            keys = set(wins_by_episode(prm)) & set(wins_by_episode(ctl))
            paired = lambda res: [r for r in res if (r["seed"], r["rep"]) in keys]  # noqa: E731
            sp, sc = _mean(paired(prm), "won"), _mean(paired(ctl), "won")
            tests.append({"search": "+".join([search, *rest]), "control": control, **t, "success_prm": sp, "success_control": sc,
                          "diff": sp - sc, "calls_prm": _mean(paired(prm), "policy_calls"),
                          "calls_control": _mean(paired(ctl), "policy_calls")})
    for t, p in zip(tests, holm([t["p"] for t in tests])):
        t["p_holm"] = p
    return tests


def search_rows(allres: dict[str, list[dict]], prm_tag: str) -> list[tuple[str, list[str]]]:
    """``[(search, settings tags), ...]`` of the PRM search rows (``prm_mcts+PRM+c2-mean-b3-puct``:
    ``("prm_mcts", ["c2-mean-b3-puct"])``), in :data:`SEARCHES` order, untagged settings first."""
    found = set()
    for name in allres:
        parts = name.split("+")
        if parts[0] in SEARCHES and len(parts) > 1 and parts[1] == prm_tag:
            found.add((parts[0], tuple(parts[2:])))
    return [(s, list(r)) for s, r in sorted(found, key=lambda x: (SEARCHES.index(x[0]), len(x[1]), x[1]))]


def _mean(res: list[dict], key: str) -> float:
    return float(sum(float(r[key]) for r in res) / len(res)) if res else float("nan")


def _order(method: str) -> tuple:
    head, _, tag = method.partition("+")
    return (ROW_ORDER.index(head) if head in ROW_ORDER else 99, tag not in ("", *CONTROL_CRITICS), tag)


def type_table(allres: dict[str, list[dict]]) -> list[str]:
    """One row per method and critic: games, success [Wilson 95 %], lost, policy calls per episode."""
    rows = sorted(summary(allres), key=lambda r: _order(r["method"]))
    out = ["| row | games | episodes | success | 95 % Wilson | lost | policy calls / episode | critic calls / episode |",
           "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lo, hi = wilson(r["wins"], r["episodes"])
        out.append(f"| `{r['method']}` | {r['games']} | {r['episodes']} | {r['success']:.2f} | {lo:.2f}-{hi:.2f} | "
                   f"{r['lost']:.2f} | {r['calls']:.1f} | {r['critic']:.1f} |")
    return out


def tests_table(tests: list[dict]) -> list[str]:
    out = ["| search | PRM vs | pairs | PRM only won | control only won | success PRM - control | "
           "policy calls PRM / control | exact p | Holm p |", "|---|---|---|---|---|---|---|---|---|"]
    for t in tests:
        out.append(f"| {t['search']} | {t['control']} critic | {t['pairs']} | {t['a_only']} | {t['b_only']} | "
                   f"{t['diff']:+.2f} | {t['calls_prm']:.1f} / {t['calls_control']:.1f} | {fmt_p(t['p'])} | "
                   f"{fmt_p(t['p_holm'])} |")
    return out


def goal_vs_random(tests: list[dict]) -> dict:
    """The issue's goal on one type: the best PRM search beats the random-critic search by at least
    ``GOAL_MARGIN`` success, Holm p < ``GOAL_ALPHA``, at no more policy calls. ``met``: ``None``
    when no PRM-vs-random pair was measured."""
    vs = [t for t in tests if t["control"] == "random"]
    if not vs:
        return {"met": None, "why": "no PRM search measured against the random critic"}
    best = max(vs, key=lambda t: (t["success_prm"], -t["calls_prm"]))
    ok = best["diff"] >= GOAL_MARGIN and best["p_holm"] < GOAL_ALPHA and best["calls_prm"] <= best["calls_control"]
    why = (f"{best['search']}: {best['success_prm']:.2f} vs {best['success_control']:.2f} random "
           f"({best['diff']:+.2f}, Holm p {fmt_p(best['p_holm'])}, {best['calls_prm']:.1f} vs "
           f"{best['calls_control']:.1f} calls)")
    return {"met": bool(ok), "why": why, "search": best["search"]}


def mcts_vs_beam(allres: dict[str, list[dict]], prm_tag: str) -> dict:
    """The issue's MCTS goal on one type: PRM MCTS success within ``MCTS_MARGIN`` of the PRM beam or
    better (its budget of policy calls, ``mcts_budget``, the beam's cap). The MCTS row with settings
    tuned on the tuning seeds (a settings tag) when there is one, else the default settings."""
    tuned = [r for s, r in search_rows(allres, prm_tag) if s == "prm_mcts" and r]
    beam = allres.get(f"prm_beam+{prm_tag}")
    mcts = allres.get("+".join(["prm_mcts", prm_tag, *tuned[0]])) if tuned else allres.get(f"prm_mcts+{prm_tag}")
    if not beam or not mcts:
        return {"met": None, "why": "PRM beam or PRM MCTS not measured"}
    keys = set(wins_by_episode(beam)) & set(wins_by_episode(mcts))  # the episodes both played
    beam, mcts = ([r for r in res if (r["seed"], r["rep"]) in keys] for res in (beam, mcts))
    sb, sm = _mean(beam, "won"), _mean(mcts, "won")
    cb, cm = _mean(beam, "policy_calls"), _mean(mcts, "policy_calls")
    budgets = sorted({r.get("mcts_budget") for r in mcts}, key=str)
    which = "+".join(tuned[0]) if tuned else "default settings"
    return {"met": sm >= sb - MCTS_MARGIN, "why": f"on the {len(keys)} games both played: MCTS ({which}) {sm:.2f} "
                                                  f"({cm:.1f} calls, budget {budgets}) vs beam {sb:.2f} ({cb:.1f} calls)"}


def load_auroc(name: str, data: Path = DATA) -> dict | None:
    f = Path(data) / name / "dead_end_auroc.json"
    return json.loads(f.read_text()) if f.is_file() else None


def _mark(met) -> str:
    return "unmeasured" if met is None else ("**met**" if met else "**not met**")


def auroc_verdict(au: dict | None) -> dict:
    if au is None:
        return {"met": None, "why": "dead-end AUROC not measured"}
    if au.get("auroc") is None:
        return {"met": None, "why": f"no dead ends among {au.get('n_states', 0)} scored steps (the games never lose)"}
    return {"met": au["auroc"] >= AUROC_GOAL, "why": f"AUROC {au['auroc']:.3f} on {au['n_dead']} dead-end and "
                                                    f"{au['n_alive']} other steps of the test games"}


def provenance_lines(t: GameType, data: Path = DATA) -> list[str]:
    """The type's labels (``labels_summary.json``) and its PRM's training (``prms/TYPE/train_stats.json``)."""
    out = []
    lab = Path(data) / t.name / "labels_summary.json"
    if lab.is_file():
        s = json.loads(lab.read_text())
        out.append(f"Labels: {s['n_trajectories']} base-policy trajectories ({s['base_won']} won, {s['base_lost']} lost), "
                   f"{s['n_steps']} steps, k = {s['settings']['k']} rollouts per step, mean label "
                   f"{s['mean_label']:.3f}, {s['frac_zero']:.2f} of steps labelled 0.")
    st = HERE / "prms" / t.name / "train_stats.json"
    if st.is_file():
        s = json.loads(st.read_text())
        v = s.get("val") or {}
        corr = v.get("corr_pred_label")
        out.append(f"PRM: head-only MiniLMStepPRM, {s['n_train']} training trajectories, {s['config']['epochs']} epochs; "
                   f"on the {s['n_val']} held-out label trajectories correlation with the MC labels "
                   f"{'unmeasured' if corr is None else f'{corr:.2f}'}, MAE {v.get('mae', float('nan')):.3f}.")
    return out + ([""] if out else [])


def type_section(t: GameType, results: Path = RESULTS, data: Path = DATA) -> tuple[list[str], dict]:
    """The markdown of one type and its verdicts (``{goal: verdict}``)."""
    allres = load_type(t, results)
    head = [f"### {t.name} (`{t.env}`)", "",
            f"Seeds: labels {t.label.start}-{t.label.stop - 1}, tuning {t.tune.start}-{t.tune.stop - 1}, "
            f"test {t.test.start}-{t.test.stop - 1} (plan.py, fixed before the runs). PRM: "
            f"`benchmarks/agents/prms/{t.name}`.", ""]
    head += provenance_lines(t, data)
    if not allres:
        return head + ["Not measured yet: no test results committed.", ""], {}
    tests = type_tests(allres, t.name)
    verdicts = {"vs random": goal_vs_random(tests), "MCTS vs beam": mcts_vs_beam(allres, t.name),
                "dead-end AUROC": auroc_verdict(load_auroc(t.name, data))}
    lines = head + type_table(allres) + [""]
    if tests:
        lines += tests_table(tests) + [""]
    lines += [f"* {goal}: {_mark(v['met'])} -- {v['why']}" for goal, v in verdicts.items()] + [""]
    return lines, verdicts


def transfer_table(results: Path = RESULTS) -> list[str]:
    """Per type and search: the type's own PRM beside the all-types and leave-one-type-out PRMs."""
    out = ["| type | search | own PRM | " + " | ".join(TRANSFER_TAGS.values()) + " | all-types within "
           f"{TRANSFER_MARGIN} of own |", "|---|---|---|" + "---|" * len(TRANSFER_TAGS) + "---|"]
    any_row = False
    for t in TYPES.values():
        allres = load_type(t, results)
        for search in SEARCHES:
            own = allres.get(f"{search}+{t.name}")
            others = [allres.get(f"{search}+{tag}") for tag in TRANSFER_TAGS]
            if not own and not any(others):
                continue
            any_row = True
            cell = lambda res: "unmeasured" if not res else f"{_mean(res, 'won'):.2f} ({len(res)})"  # noqa: E731
            allt = others[0]
            within = ("unmeasured" if not own or not allt else
                      ("yes" if _mean(allt, "won") >= _mean(own, "won") - TRANSFER_MARGIN else "no"))
            out.append(f"| {t.name} | {search} | {cell(own)} | " + " | ".join(cell(o) for o in others)
                       + f" | {within} |")
    return out if any_row else ["No transfer rows measured yet."]


def count_verdict(n_met: int, measured: int, need: int, n_types: int = len(TYPES)) -> bool | None:
    """A goal on at least ``need`` types: met once ``n_met`` reach it, not met once the unmeasured
    types could no longer make it up, else ``None`` (undecided)."""
    if n_met >= need:
        return True
    if n_met + (n_types - measured) < need:
        return False
    return None


def render_types(results: Path = RESULTS, data: Path = DATA) -> list[str]:
    """The whole game-types section."""
    lines = ["## Game types: does the PRM pay beyond the cooking games?", "",
             "Measured by `python -m benchmarks.agents.game_types --type TYPE` (labels on the type's label seeds, a",
             "per-type PRM, then the test rows) for each type below; this section is computed by",
             "`python -m benchmarks.agents.report --render` from the per-episode results under",
             "`benchmarks/agents/results/types/`. Success intervals are 95 % Wilson; the PRM searches are tested",
             "against the same search with a random and with a constant critic (same games, same policy seeds)",
             "by the exact McNemar test, Holm-adjusted over each type's tests. Goals: the best PRM search beats",
             f"the random-critic search by >= {GOAL_MARGIN} success with Holm p < {GOAL_ALPHA} at no more policy "
             f"calls; PRM MCTS within {MCTS_MARGIN} of the PRM beam; dead-end AUROC >= {AUROC_GOAL}.", ""]
    met = {}
    for t in TYPES.values():
        sec, verdicts = type_section(t, results, data)
        lines += sec
        met[t.name] = verdicts
    n_vs = sum(1 for v in met.values() if v.get("vs random", {}).get("met"))
    n_mcts = sum(1 for v in met.values() if v.get("MCTS vs beam", {}).get("met"))
    measured = sum(1 for v in met.values() if v)
    lines += ["### Verdicts over types", "",
              f"* PRM search beats the random critic (goal: on at least 3 types): {n_vs} of {measured} measured "
              f"types -- {_mark(count_verdict(n_vs, measured, 3))}.",
              f"* PRM MCTS within {MCTS_MARGIN} of the beam (goal: on at least 2 types): {n_mcts} of {measured} "
              f"measured types -- {_mark(count_verdict(n_mcts, measured, 2))}.", "",
              "### Transfer", ""]
    lines += transfer_table(results) + [""]
    return lines
