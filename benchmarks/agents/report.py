"""Tables, plot and ``docs/agents_benchmark.md`` of the TextWorld agents benchmark, from its raw data.

Raw data (all committed): one JSON per (method, game seed, rep) under ``benchmarks/agents/results``
(written by ``run.py``), the labelling summary ``labels_summary.json`` and the PRM training
statistics ``prm_train_stats_<tag>.json`` (written by ``train_prm.py``), and the few figures of the
sibling labels in ``benchmarks/results/agents_benchmark.json``. Rendering needs none of torch,
TextWorld or the PRM:

    python -m benchmarks.agents.report --render

rewrites ``docs/agents_benchmark.md`` and ``benchmarks/agents/results/table.md``
(``--md`` / ``--table`` write only the one named).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np

from agents.textworld_agent.env import DEFAULT_DIFFICULTY
from agents.textworld_agent.labels import parse_seeds
from benchmarks.report_io import save_figure, write_text
from benchmarks.stats import clopper_pearson, holm, mcnemar

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
RESULTS = HERE / "results"
TABLE = RESULTS / "table.md"
DOC = ROOT / "docs" / "agents_benchmark.md"
CAL_PNG = ROOT / "docs" / "agents_prm_calibration.png"
CONTROLS_PNG = ROOT / "docs" / "agents_controls.png"
EXTRA = ROOT / "benchmarks" / "results" / "agents_benchmark.json"
SEEDS = tuple(range(1000, 1008))

METHODS = ("base", "outcome_bon4", "prm_bon3", "prm_beam", "prm_beam_noprune", "prm_mcts", "oracle_bon3", "gold")
LABELS = {
    "base": "base policy",
    "outcome_bon4": "outcome-only best-of-4 (episodes)",
    "prm_bon3": "PRM best-of-3 at every step",
    "prm_beam": "PRM beam search (w=2, b=2, dead-end pruning)",
    "prm_beam_noprune": "PRM beam search (w=2, b=2, no pruning)",
    "prm_mcts": "PRM MCTS (PUCT, b=2, PRM values)",
    "oracle_bon3": "ORACLE best-of-3 at every step (intermediate_reward)",
    "gold": "ORACLE gold path (the game's walkthrough)",
}
#: uninformed control critics (``run.py --critic``): their rows are tagged with the name
CONTROLS = {"random": "random critic", "constant": "constant critic, random ties"}
#: the searches that take a critic (the learned PRM or a control)
CRITIC_METHODS = ("prm_bon3", "prm_beam", "prm_beam_noprune", "prm_mcts")
#: policy-call budgets of the success-vs-budget table (the beam w=2, b=2 to depth 40 stops by 158)
BUDGETS = (25, 50, 75, 100, 125, 160)
SHORT = {"base": "base policy", "outcome_bon4": "outcome-only best-of-4", "prm_bon3": "PRM best-of-3",
         "prm_beam": "PRM beam", "prm_beam_noprune": "PRM beam, no pruning", "prm_mcts": "PRM MCTS",
         "oracle_bon3": "ORACLE best-of-3", "gold": "ORACLE gold path"}
_KEYS = ("won", "lost", "policy_calls", "tool_calls", "critic_calls", "dead_ends_avoided", "wall_s", "method", "seed")


#: the games of this doc (files without a ``difficulty`` field were all measured on it)
DIFFICULTY = DEFAULT_DIFFICULTY.tag


def load_results(out: Path = RESULTS, seeds=SEEDS, difficulty: str = DIFFICULTY) -> dict[str, list[dict]]:
    """``{method: [episode result, ...]}`` of the result files for ``seeds`` on games of ``difficulty``
    (a tag such as ``r1t1g1-open-cook-train``); a file that is empty or lacks a field fails loudly
    with its name."""
    allres: dict[str, list] = {}
    for f in sorted(Path(out).glob("*__seed*.json")):
        text = f.read_text()
        if not text.strip():
            raise ValueError(f"{f}: expected one episode's result (JSON object), got an empty file")
        r = json.loads(text)
        missing = [k for k in _KEYS if k not in r]
        if missing:
            raise ValueError(f"{f}: expected fields {list(_KEYS)}, missing {missing}")
        if r["seed"] in seeds and r.get("difficulty", DIFFICULTY) == difficulty:
            allres.setdefault(r["method"], []).append(r)
    return allres


def summary(allres: dict[str, list[dict]]) -> list[dict]:
    rows = []
    order = {m: i for i, m in enumerate(METHODS)}
    for m in sorted(allres, key=lambda k: (order.get(k.split("+")[0], 99), k)):
        res = allres[m]
        games = sorted({r["seed"] for r in res})
        rows.append({
            "method": m, "episodes": len(res), "games": len(games), "wins": int(sum(r["won"] for r in res)),
            "success": float(np.mean([r["won"] for r in res])),
            "lost": float(np.mean([r["lost"] for r in res])),
            "n_lost": int(sum(r["lost"] for r in res)),
            "calls": float(np.mean([r["policy_calls"] for r in res])),
            "tools": float(np.mean([r["tool_calls"] for r in res])),
            "critic": float(np.mean([r["critic_calls"] for r in res])),
            "dead": float(np.mean([r["dead_ends_avoided"] for r in res])),
            "wall": float(np.mean([r["wall_s"] for r in res])),
        })
    return rows


def table(rows: list[dict]) -> str:
    """The summary table (``benchmarks/agents/results/table.md``)."""
    base = next((r for r in rows if r["method"] == "base"), None)
    lines = [
        "| method | games | episodes | success | lost | policy calls / episode | x base calls | tool calls / episode | critic calls / episode | dead ends avoided or pruned / episode | wall s / episode |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ratio = f"{r['calls'] / base['calls']:.1f}" if base else "unmeasured"
        lines.append(f"| {_label(r['method'])} | {r['games']} | {r['episodes']} | {r['success']:.2f} | {r['lost']:.2f} | "
                     f"{r['calls']:.1f} | {ratio} | {r['tools']:.1f} | {r['critic']:.1f} | {r['dead']:.2f} | {r['wall']:.1f} |")
    return "\n".join(lines)


def per_game(allres: dict[str, list[dict]], rows: list[dict], seeds) -> list[str]:
    lines = ["| method | " + " | ".join(str(s) for s in seeds) + " |", "|---|" + "---|" * len(seeds)]
    for row in rows:
        res = allres[row["method"]]
        name = row["method"].partition("+")[0]
        cells = []
        multi = max(sum(r["seed"] == s for r in res) for s in seeds) > 1
        for s in seeds:
            game = [r for r in res if r["seed"] == s]
            if multi:
                cells.append(str(sum(r["won"] for r in game)) if game else "-")
            elif not game:
                cells.append("-")
            else:
                cells.append("W" if game[0]["won"] else "L" if game[0]["lost"] else "T")
        label = _name(name, row["method"], SHORT)
        if multi:
            label += f" (wins / {max(sum(r['seed'] == s for r in res) for s in seeds)} episodes)"
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines


def wins_by_episode(res: list[dict]) -> dict[tuple, bool]:
    """``{(seed, rep): won}`` of episode results: the keys :func:`benchmarks.stats.mcnemar` pairs on."""
    return {(r["seed"], r["rep"]): bool(r["won"]) for r in res}


def fmt_p(p: float) -> str:
    """A p-value for the doc: three decimals, or two significant digits below 0.001 (never "0.000")."""
    return f"{p:.3f}" if p >= 0.001 else f"{p:.1e}"


def success_within(res: list[dict], budget: float) -> int:
    """Episodes won having used at most ``budget`` policy calls (a search that stops at its first
    solution would have won them under that budget too)."""
    return sum(1 for r in res if r["won"] and r["policy_calls"] <= budget)


#: settings that must agree for two rows of a critic search to be compared
_PAIR_SETTINGS = ("max_steps", "dead_end_threshold", "on_all_pruned", "mcts_budget", "difficulty", "expand_rng",
                  "lost_rule")


def _settings(res: list[dict]) -> set:
    return {tuple(r.get(k) for k in _PAIR_SETTINGS) for r in res}


def controls_lines(allres: dict[str, list[dict]], prm_tag: str) -> list[str]:
    """The PRM against each control critic in the same search: success within matched budgets of
    policy calls, and the exact paired test per search and proposer."""
    head = ["| search | critic | episodes | success | 95 % interval | policy calls / episode | "
            + " | ".join(f"won within {b} calls" for b in BUDGETS) + " |",
            "|---|---|---|---|---|---|" + "---|" * len(BUDGETS)]
    tests = ["| search | PRM vs | pairs | both won | neither | only PRM | only control | exact McNemar p (two-sided) | "
             "Holm-adjusted p (the tests of this set) | PRM's share of discordant pairs (95 % interval) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    notes, done, n_rows = [], [], 0
    for name in CRITIC_METHODS:
        for sfx in ("", "+llm"):
            prm = allres.get(f"{name}+{prm_tag}{sfx}")
            ctls = {c: allres[f"{name}+{c}{sfx}"] for c in CONTROLS if f"{name}+{c}{sfx}" in allres}
            if not ctls:
                continue
            search = LABELS[name].replace("PRM ", "", 1) + (" [llm]" if sfx else "")
            for critic, res in ([(f"PRM [{prm_tag}]", prm)] if prm else []) + [(CONTROLS[c], r) for c, r in ctls.items()]:
                k, n = sum(r["won"] for r in res), len(res)
                head.append(f"| {search} | {critic} | {n} | {k / n:.2f} | {_ci(k, n)} | "
                            f"{np.mean([r['policy_calls'] for r in res]):.1f} | "
                            + " | ".join(f"{success_within(res, b) / n:.2f}" for b in BUDGETS) + " |")
                n_rows += 1
            if not prm:
                notes.append(f"* {search}: no PRM rows [{prm_tag}] on these games: no paired test.")
                continue
            wins_prm = wins_by_episode(prm)
            for c, res in ctls.items():
                if _settings(res) != _settings(prm):
                    notes.append(f"* {search}, {CONTROLS[c]}: settings {list(_PAIR_SETTINGS)} differ from the PRM "
                                 f"rows ({sorted(map(str, _settings(res)))} vs {sorted(map(str, _settings(prm)))}): "
                                 "no paired test.")
                    continue
                t = mcnemar(wins_prm, wins_by_episode(res))
                share = "no discordant pairs" if t["share_ci"] is None else \
                    f"{t['a_only'] / (t['a_only'] + t['b_only']):.2f} ({t['share_ci'][0]:.2f}-{t['share_ci'][1]:.2f})"
                done.append((search, c, t, share))
    if not n_rows:
        return []
    words = []
    for (search, c, t, share), adj in zip(done, holm([t["p"] for _, _, t, _ in done])):
        tests.append(f"| {search} | {CONTROLS[c]} | {t['pairs']} | {t['both']} | {t['neither']} | {t['a_only']} | "
                     f"{t['b_only']} | {fmt_p(t['p'])} | {fmt_p(adj)} | {share} |")
        better = "PRM" if t["a_only"] > t["b_only"] else "control"
        verdict = (f"the {better} is better at the 5 % level, also after adjustment." if adj < 0.05 else
                   f"the {better} is better at the 5 % level before adjustment, **not after** it." if t["p"] < 0.05 else
                   "**no significant difference** at the 5 % level.")
        words.append(f"* **PRM vs {CONTROLS[c]}, {search}:** {t['both'] + t['a_only']} vs {t['both'] + t['b_only']} "
                     f"wins of {t['pairs']} paired games ({t['a_only']} won only with the PRM, {t['b_only']} only with "
                     f"the control), p = {fmt_p(t['p'])} (Holm-adjusted over the {len(done)} tests of this set: "
                     f"{fmt_p(adj)}): {verdict}")
    n_tests = len(done)
    return [*head, "", *(tests if n_tests else []), *([""] if n_tests else []), *words, *notes,
            *([""] if notes or words else [])]


def plot_controls(spec: dict, results: Path, png: Path) -> bool:
    """Success within B policy calls against B, the PRM and each control critic per critic search,
    one panel per set of unseen games; ``False`` (nothing written) when no control was run."""
    panels = []
    for st in spec.get("sets", []):
        seeds = parse_seeds(st["seeds"])
        allres = load_results(results, seeds, st["difficulty"])
        curves = [(m, res) for m, res in sorted(allres.items()) if m.split("+")[0] in CRITIC_METHODS
                  and "llm" not in m.split("+")[1:]
                  and any(f"{m.split('+')[0]}+{c}" in allres for c in CONTROLS)]
        if any(_control(m) for m, _ in curves):
            panels.append((st, seeds, curves))
    if not panels:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4.2), squeeze=False)
    budgets = np.arange(0, 161)
    for ax, (st, seeds, curves) in zip(axes[0], panels):
        for m, res in curves:
            name = m.split("+")[0]
            y = [success_within(res, b) / len(res) for b in budgets]
            who = CONTROLS.get(_control(m) or "", "PRM [" + "+".join(m.split("+")[1:]) + "]")
            ax.step(budgets, y, where="post", ls="-" if name == "prm_beam" else "--",
                    label=f"{'pruned' if name == 'prm_beam' else 'unpruned' if name == 'prm_beam_noprune' else name}: "
                          f"{who} (n={len(res)})")
        ax.set_title(f"{st['title']} (seeds {_seeds(seeds)})", fontsize=10)
        ax.set_xlabel("policy calls (budget B)")
        ax.set_ylabel("share of games won within B calls")
        ax.set_ylim(-0.02, 1.02)
        ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    save_figure(fig, png, dpi=110)
    return True


def _seeds(seeds) -> str:
    seeds = sorted(seeds)
    return f"{seeds[0]}-{seeds[-1]}" if seeds == list(range(seeds[0], seeds[-1] + 1)) else ", ".join(map(str, seeds))


def _all_pruned_note(allres: dict[str, list[dict]]) -> list[str]:
    """What the beam did when every candidate of a depth scored under the threshold in these runs
    (a result without ``on_all_pruned`` predates the option: it stopped)."""
    modes = sorted({r.get("on_all_pruned", "stop") for m, res in allres.items() if m.split("+")[0] == "prm_beam" for r in res})
    if not modes:
        return []
    if len(modes) > 1:
        return [f"  When every candidate of a depth scored under the threshold: `on_all_pruned` in {modes} (mixed runs)."]
    mode = modes[0]
    if mode == "stop":
        return ["  When every candidate of a depth scored under the threshold, these runs stopped there",
                "  (`on_all_pruned=\"stop\"`, the only behaviour when they were made; the default now keeps the best",
                "  candidate and reports it)."]
    return [f"  When every candidate of a depth scored under the threshold: `on_all_pruned={mode!r}`."]


def render(allres: dict[str, list[dict]], labels: dict, stats: dict[str, dict], extra: dict, seeds=SEEDS,
           results: Path = RESULTS) -> str:
    """The markdown of ``docs/agents_benchmark.md`` from the raw data."""
    rows = summary(allres)
    by = {r["method"]: r for r in rows}
    base, oracle, outcome = by["base"], by["oracle_bon3"], by["outcome_bon4"]
    beam_sib, beam_mc = by["prm_beam+siblings"], by["prm_beam+mc-only"]
    bon_sib, bon_mc = by["prm_bon3+siblings"], by["prm_bon3+mc-only"]
    G = len(seeds)
    x = lambda r: r["calls"] / base["calls"]  # noqa: E731
    lo, hi = clopper_pearson(beam_sib["wins"], G)
    max_steps = {r["max_steps"] for res in allres.values() for r in res}
    steps = max_steps.pop() if len(max_steps) == 1 else "up to " + str(max(max_steps))
    mc, sib = stats["mc-only"], stats["siblings"]
    sib_last = sib.get("val_sibling_last_steps") or {}
    n_branches = sib["n_train"] - mc["n_train"]
    lab_seeds = labels["seeds"]
    val_seeds = lab_seeds[-mc["n_val"]:]

    def prm_row(name, st, examples):
        v = st["val"]
        sl = st.get("val_sibling_last_steps") or {}
        lost = "unmeasured" if sl.get("mean_pred_lost") is None else f"{sl['mean_pred_lost']:.3f}"
        return (f"| {name} | {examples} | {v['corr_pred_label']:.2f} | {v['mae']:.3f} | {v['mean_pred_losing_steps']:.3f} | "
                f"{v['mean_pred_label0_not_lost']:.3f} | {v['mean_pred_label_pos']:.3f} | {lost} |")

    lines = [
        "# TextWorld cooking: PRM-guided search vs. the base policy",
        "",
        "Generated by `python -m benchmarks.agents.report --render` from the raw data the commands below",
        "measured: the per-episode results `benchmarks/agents/results/*.json`, `benchmarks/agents/labels_summary.json`,",
        "`benchmarks/agents/prm_train_stats_*.json` and `benchmarks/results/agents_benchmark.json`.",
        "",
        "Other game types (TextWorldExpress Coin, CookingWorld and TWC, TextWorld treasure hunts and cooking, each",
        "with its own PRM, 48 test seeds and random / constant critic controls): *Game types* at the end, measured",
        "by `python -m benchmarks.agents.game_types --type TYPE` (seed plan: `benchmarks/agents/plan.py`).",
        "",
        f"Held-out TextWorld cooking games (seeds {_seeds(seeds)}, never used for labels or training), difficulty",
        "`tw-make tw-cooking --recipe 1 --take 1 --go 1 --open --cook --split train` (one room; find one",
        "ingredient, possibly in a closed container, cook it the way the cookbook says -- roast in the oven",
        f"or fry on the stove -- prepare the meal, eat it). {steps} game steps per episode. Wrong cooking, eating",
        "an ingredient, or cooking after the meal is prepared ends the game as lost.",
        "",
        "## How to reproduce",
        "",
        "```bash",
        *extra["commands"],
        "```",
        "",
        f"({extra['label_note']})",
        "",
        "## Results",
        "",
        table(rows),
        "",
        f"Per game (W won, L lost, T neither within {steps} steps / beam stopped without a solution), seeds "
        f"{_seeds(seeds)}:",
        "",
        *per_game(allres, rows, seeds),
        "",
        "![success vs policy calls](agents_benchmark.png)",
        "",
        "Columns: *policy calls* = commands proposed by the base policy (one sample = one call, as one LLM",
        "call would be); *tool calls* = game commands executed, including look-ahead executions on forked",
        "states; *critic calls* = steps scored; *dead ends avoided or pruned* = candidates that had lost",
        "the game and were not taken (best-of-N at every step) or were dropped by the beam's threshold or",
        "ranking (beam: `pruned_dead_end` of `build_beam_search_graph`).",
        f"Wall time is on {extra['machine']}: compare only within this table.",
        "",
        "## Methods",
        "",
        "* **base policy** (`agents/textworld_agent/policy.py`): samples among the admissible commands;",
        "  weak verb prior (take/open/prepare/eat meal a bit more likely; examine/drop/eat less likely),",
        f"  repeated commands down-weighted. It knows nothing about the recipe. {base['episodes'] // G} episodes per game.",
        "* **outcome-only best-of-4**: up to 4 base episodes, stop at the first won one (the final game text",
        "  says so; no step critic). 1 run per game.",
        "* **PRM best-of-3 at every step**: 3 distinct base-policy proposals per step, each executed on a",
        "  forked game (replay of the command history), the step text `act({\"command\": ...})` + feedback",
        "  scored by the learned PRM (success head), best one committed.",
        "* **PRM beam search**: `prm_critic.langgraph.build_beam_search_graph` (width 2, branch 2,",
        f"  `aggregate=\"last\"`, dead-end threshold {extra['dead_end_threshold']:g} on the newest step's success "
        "score); env state =",
        "  the command history (plain data); `is_terminal` = the game is won.",
        *_all_pruned_note(allres),
        "* **ORACLE best-of-3**: as PRM best-of-3 but scored on privileged state (won 1, lost 0, else",
        "  `0.5 + 0.25 * intermediate_reward`). Upper reference only; no agent sees this.",
        "",
        "The learned PRM (`MiniLMStepPRM`, all-MiniLM-L6-v2 encoder, frozen; linear head on the step",
        "separator, trained by `train_text_prm`) sees only what the agent sees: the intro text as prompt,",
        "then per step the tool call and the game's feedback (score banner removed).",
        "",
        "## Labels",
        "",
        f"Math-Shepherd Monte-Carlo labels (`agents/textworld_agent/labels.py`): {labels['n_trajectories']} base-policy",
        f"trajectories on training seeds {_seeds(lab_seeds)}, {labels['n_steps']} steps; every step's state is forked "
        "by replay and",
        "continued k times with the base policy; soft label = fraction won (stored as floats in TRL stepwise",
        "JSONL; `labels_hard.jsonl` has the any-won variant). Terminal steps get their exact label without",
        f"rollouts. {100 * labels['frac_zero']:.0f} % of step labels are 0 (the base policy rarely wins), mean "
        f"{labels['mean_label']:.2f}.",
        "",
        f"*Terminal siblings* (`--siblings {extra['siblings']['per_state']}`): at each state of those trajectories, "
        f"{extra['siblings']['per_state']} other base-policy",
        "proposals are executed once; those that end the game get their exact label "
        f"({extra['siblings']['lost']} lost, {extra['siblings']['won']} won",
        "branch examples). They add the \"this action loses\" contrasts that plain MC labels along the",
        "base policy's own path contain only at the few steps where it lost.",
        "",
        "PRM sanity numbers (`benchmarks/agents/prm_train_stats_*.json`; predicted success, held-out",
        f"validation trajectories = training seeds {_seeds(val_seeds)}, {mc['val']['n_steps']} steps, "
        f"{extra['val_losing_steps']} of them losing steps -- tiny):",
        "",
        "| PRM | train examples | val corr(pred, MC label) | val MAE | val mean pred: losing steps | label-0 non-losing "
        f"steps | label > 0 steps | val terminal siblings that lose (n = {sib_last.get('n', 0)}) |",
        "|---|---|---|---|---|---|---|---|",
        prm_row("mc-only", mc, f"{mc['n_train']} trajectories"),
        prm_row("siblings", sib, f"{mc['n_train']} trajectories + {n_branches} sibling branches"),
        "",
        "## Analysis",
        "",
        "* **Goal (>= 60 % at <= 10x base calls):** PRM beam search with the siblings-trained PRM solved",
        f"  {beam_sib['wins']} of {G} held-out games ({beam_sib['success']:.2f}) at {beam_sib['calls']:.1f} policy "
        f"calls per game, {x(beam_sib):.1f}x the base policy's {base['calls']:.1f} calls",
        f"  per episode; it lost {'none' if beam_sib['n_lost'] == 0 else beam_sib['n_lost']}. With {G} games this is "
        f"one game above the line: the 95 % interval of",
        f"  {beam_sib['wins']}/{G} is roughly {lo:.2f}-{hi:.2f}, so the honest statement is \"reached on this sample\", "
        "not \"reliably",
        f"  >= 60 %\". The same beam with the MC-only PRM solved {beam_mc['wins']}/{G} at {x(beam_mc):.1f}x.",
        "* **The search is not the bottleneck, the critic is.** The same best-of-3 loop with the ORACLE",
        f"  (privileged `intermediate_reward`) solved {oracle['wins']}/{G} at {x(oracle):.1f}x base calls. With the "
        "learned PRM,",
        f"  best-of-3 solved {bon_mc['wins']}/{G} (mc-only) and {bon_sib['wins']}/{G} (siblings): the PRM often ranks "
        "an irreversible losing",
        "  step (e.g. `cook pork chop with oven` after `prepare meal`, or cooking with the wrong",
        "  appliance) at or above a neutral one and the loop commits it. On validation steps the MC-only",
        f"  PRM scored losing steps {mc['val']['mean_pred_losing_steps']:.3f} vs "
        f"{mc['val']['mean_pred_label0_not_lost']:.3f} for other zero-label steps: no separation.",
        "* **Why the MC labels alone don't separate dead ends:** the base policy wins rarely "
        f"({labels['base_won']}/{labels['n_trajectories']} labelled",
        f"  trajectories, {100 * base['success']:.0f} % of held-out base episodes), so "
        f"{100 * labels['frac_zero']:.0f} % of MC labels are 0, and a losing step is",
        f"  just one more 0 among many neutral 0s. Losing steps on the policy's own path are rare "
        f"({labels['base_lost']} of",
        f"  {labels['n_steps']}). Adding *terminal siblings* (exact labels of one-step alternatives that end the game, "
        f"{extra['siblings']['lost']}",
        f"  losses) dropped the PRM's validation score of losing steps from {mc['val']['mean_pred_losing_steps']:.3f} "
        f"to {sib['val']['mean_pred_losing_steps']:.3f} (siblings "
        f"{sib_last['mean_pred_lost']:.3f})" if sib_last.get("mean_pred_lost") is not None else
        f"  losses) dropped the PRM's validation score of losing steps from {mc['val']['mean_pred_losing_steps']:.3f} "
        f"to {sib['val']['mean_pred_losing_steps']:.3f}",
        f"  while neutral zero-label steps stayed at {sib['val']['mean_pred_label0_not_lost']:.3f}, and raised "
        f"best-of-3 from {bon_mc['wins']}/{G} to {bon_sib['wins']}/{G} and beam from",
        f"  {beam_mc['wins']}/{G} to {beam_sib['wins']}/{G} -- directionally right, within noise at this sample size.",
        "* **Beam vs. best-of-N:** the beam keeps two paths and compares candidates across them, so one",
        "  mis-scored step is not fatal; best-of-N commits every step. The beam's remaining failures (T)",
        f"  are games where no solution was found within depth {steps} -- it did not lose any game with the",
        "  siblings PRM." if beam_sib["n_lost"] == 0 else f"  are games where no solution was found within depth {steps}.",
        f"* **Outcome-only best-of-4** ({outcome['wins']}/{G} at {x(outcome):.1f}x) is what retrying the base policy "
        "buys; both PRM beams",
        "  beat it at similar or lower cost.",
        f"* **Tool calls saved by pruning:** the beam dropped {beam_sib['dead']:.1f} (siblings) / {beam_mc['dead']:.1f} "
        "(mc-only) candidates per",
        "  game below the dead-end threshold or out of the beam whose game was already lost; best-of-3",
        f"  avoided {bon_sib['dead']:.2f} / {bon_mc['dead']:.2f} losing look-ahead candidates per game. Each avoided "
        "losing step would have",
        "  ended the episode; for the beam, each pruned candidate saves at least its next expansion",
        f"  (branch factor 2 policy + tool calls), i.e. >= {2 * beam_sib['dead']:g} (siblings) and >= "
        f"{2 * beam_mc['dead']:g} (mc-only) calls per game.",
        "  The saving against a beam without pruning is unmeasured.",
        "* **Look-ahead cost:** the step-level methods execute every candidate on a forked game (the PRM",
        "  scores a step *with* its result), so tool calls exceed policy calls by the committed steps;",
        "  forking costs a replay of the history (not counted as tool calls: it's simulator bookkeeping,",
        "  which a real tool-using agent would not have -- there, look-ahead needs a forkable environment).",
        *(["* **Not measured here:** a fine-tuned encoder. More games and a harder setting: see *Unseen games* below."]
          if extra.get("unseen") else
          ["* **Not measured:** a fine-tuned encoder, more games / repetitions, harder game settings. These",
           "  would be the next measurements."]),
    ]
    lines += render_unseen(extra.get("unseen", {}), load_calibration(extra.get("unseen", {})), results)
    return "\n".join(lines) + "\n"


def _ci(k: int, n: int) -> str:
    lo, hi = clopper_pearson(k, n)
    return f"{lo:.2f}-{hi:.2f}"


def _policy(method: str) -> str:
    return "llm" if "llm" in method.split("+")[1:] else "hand"


def _control(method: str) -> str | None:
    """The control critic of a row (``"random"`` / ``"constant"``), or ``None`` (the PRM, no critic)."""
    tags = method.split("+")[1:]
    return next((t for t in tags if t in CONTROLS), None)


def _name(name: str, method: str, labels: dict) -> str:
    """A row's label: a control's critic replaces "PRM" in the search's name."""
    ctl = _control(method)
    tags = [t for t in method.split("+")[1:] if t != ctl]
    base = labels[name]
    if ctl:
        base = base.replace("PRM ", "", 1) + f", {CONTROLS[ctl]} (control)"
    return base + (f" [{'+'.join(tags)}]" if tags else "")


def _label(method: str) -> str:
    return _name(method.partition("+")[0], method, LABELS)


def unseen_table(rows: list[dict]) -> list[str]:
    """Success with its 95 % interval; calls relative to the base policy of the same proposer
    (the hand-weighted sampler or the LLM)."""
    bases = {_policy(r["method"]): r for r in rows if r["method"].split("+")[0] == "base"}
    lines = ["| method | games | episodes | success | 95 % interval | lost | policy calls / episode | x base calls "
             "(same policy) | critic calls / episode | pruned / episode | wall s / episode |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        b = bases.get(_policy(r["method"]))
        ratio = f"{r['calls'] / b['calls']:.1f}" if b else "unmeasured"
        lines.append(f"| {_label(r['method'])} | {r['games']} | {r['episodes']} | {r['success']:.2f} | "
                     f"{_ci(r['wins'], r['episodes'])} | {r['lost']:.2f} | {r['calls']:.1f} | {ratio} | "
                     f"{r['critic']:.1f} | {r['dead']:.2f} | {r['wall']:.1f} |")
    return lines


def _verdicts(rows: list[dict], kind: str, prm_tag: str, n_games: int) -> list[str]:
    """Pruning vs no pruning, and the set's goal, per proposer (hand-weighted sampler, LLM); a method
    not yet run on all ``n_games`` games enters no verdict."""
    out = [f"* **Incomplete:** {_label(r['method'])} has run on {r['games']} of {n_games} games so far; it enters "
           "no verdict below." for r in rows if r["games"] < n_games]
    by = {r["method"]: r for r in rows if r["games"] == n_games}
    for pol in ("hand", "llm"):
        sfx = "+llm" if pol == "llm" else ""
        who = "the LLM's proposals" if pol == "llm" else "the hand-weighted sampler's proposals"
        base = by.get("base" + sfx)
        pruned, unpruned = by.get(f"prm_beam+{prm_tag}{sfx}"), by.get(f"prm_beam_noprune+{prm_tag}{sfx}")
        if pruned and unpruned:
            lo, hi = clopper_pearson(unpruned["wins"], unpruned["episodes"])
            keeps = lo <= pruned["success"] and pruned["calls"] < unpruned["calls"]
            out.append(f"* **Pruning, over {who}:** pruned beam {pruned['success']:.2f} at {pruned['calls']:.1f} calls, "
                       f"unpruned {unpruned['success']:.2f} (95 % interval {lo:.2f}-{hi:.2f}) at "
                       f"{unpruned['calls']:.1f} calls: pruning "
                       + ("**keeps** the unpruned beam's success at fewer calls "
                          f"({100 * (1 - pruned['calls'] / unpruned['calls']):.0f} % fewer)." if keeps else
                          "does **not** keep the unpruned beam's success at fewer calls."))
        elif pruned or unpruned:
            out.append(f"* **Pruning, over {who}:** only the {'pruned' if pruned else 'unpruned'} beam was measured: "
                       "the saving is unmeasured.")
        prm = [r for m, r in by.items() if m.split("+")[0].startswith("prm_") and m.endswith(f"+{prm_tag}{sfx}")]
        if not base or not prm:
            if base or prm:
                out.append(f"* **Goal, over {who}:** unmeasured (needs the base policy and a PRM search on these games).")
            continue
        best = max(prm, key=lambda r: (r["success"], -r["calls"]))
        x = best["calls"] / base["calls"]
        lo_b, _ = clopper_pearson(best["wins"], best["episodes"])
        if kind == "current":
            met = best["success"] >= 0.6 and x <= 4.0
            out.append(f"* **Goal, over {who}: PRM search >= 60 % at <= 4x base calls:** "
                       f"{'**met**' if met else '**not met**'} (best: {_label(best['method'])}, "
                       f"{best['success']:.2f} at {x:.1f}x the base policy's {base['calls']:.1f} calls; "
                       f"base {base['success']:.2f}).")
        else:
            met = lo_b > base["success"]
            out.append(f"* **Goal, over {who}: clearly above the base policy (the 95 % interval's lower end above "
                       f"the base's success):** {'**met**' if met else '**not met**'} (best: {_label(best['method'])}, "
                       f"{best['success']:.2f}, interval from {lo_b:.2f}, at {x:.1f}x base calls; base "
                       f"{base['success']:.2f}).")
    return out


#: the goal of the PRM against the random critic in the same search, per kind of game set
GOAL_MARGIN, GOAL_P, HARD_PRM, HARD_RANDOM = 0.15, 0.05, 0.40, 0.15


def goal_vs_random(allres: dict[str, list[dict]], prm_tag: str, kind: str, n_games: int) -> list[str]:
    """The PRM-must-earn-it goal over the hand-weighted sampler's proposals: the best PRM search
    (highest success, then fewest calls) against the random critic in the same search, on the same
    episodes. ``current`` games: at least ``GOAL_MARGIN`` more success, exact McNemar p < ``GOAL_P``,
    at no more policy calls per episode. ``harder`` games: the PRM search at least ``HARD_PRM`` where
    the random search is at most ``HARD_RANDOM``. Only searches run on all ``n_games`` games by both
    critics enter."""
    pairs = []
    for name in CRITIC_METHODS:
        prm, rnd = allres.get(f"{name}+{prm_tag}"), allres.get(f"{name}+random")
        if not prm or not rnd or len({r["seed"] for r in prm}) < n_games or len({r["seed"] for r in rnd}) < n_games:
            continue
        if _settings(prm) != _settings(rnd):
            continue
        sp, sr = float(np.mean([r["won"] for r in prm])), float(np.mean([r["won"] for r in rnd]))
        cp, cr = float(np.mean([r["policy_calls"] for r in prm])), float(np.mean([r["policy_calls"] for r in rnd]))
        t = mcnemar(wins_by_episode(prm), wins_by_episode(rnd))
        pairs.append((name, sp, sr, cp, cr, t))
    if not pairs:
        return [f"* **Goal, the PRM against the random critic in the same search [{prm_tag}]:** unmeasured (needs a "
                "PRM search and the same search with the random critic on every game of the set)."]
    name, sp, sr, cp, cr, t = max(pairs, key=lambda q: (q[1], -q[3]))
    what = (f"best PRM search: {LABELS[name]} [{prm_tag}], {sp:.2f} at {cp:.1f} calls; the random critic in the same "
            f"search {sr:.2f} at {cr:.1f} calls; difference {sp - sr:+.2f}, exact McNemar p = {fmt_p(t['p'])} "
            f"({t['a_only']} games won only with the PRM, {t['b_only']} only with the random critic)")
    if kind == "current":
        met = sp - sr >= GOAL_MARGIN and t["p"] < GOAL_P and cp <= cr
        goal = (f"the PRM search at least {GOAL_MARGIN:.2f} above the random critic's, paired p < {GOAL_P}, at no "
                "more policy calls")
    else:
        met = sp >= HARD_PRM and sr <= HARD_RANDOM
        goal = f"the PRM search at least {HARD_PRM:.2f} where the random critic's is at most {HARD_RANDOM:.2f}"
    return [f"* **Goal, {goal}:** {'**met**' if met else '**not met**'} ({what})."]


def calibration_lines(cal: dict[str, dict]) -> list[str]:
    """The PRMs' calibration on unseen games (``prm_calibration_<tag>.json``); per dead-end cut, the
    share of losing steps under it (pruned rightly) and of surviving steps (pruned wrongly)."""
    if not cal:
        return []
    f = lambda v, d=3: "unmeasured" if v is None else f"{v:.{d}f}"  # noqa: E731
    cuts = sorted({c for v in cal.values() for c in v["cuts"]}, key=float)
    lines = ["| PRM | training seeds | calibration games | steps | Brier | ECE | AUROC: winnable vs not | "
             "AUROC: surviving vs losing steps | mean score: losing / surviving | "
             + " | ".join(f"under {c}: losing / surviving" for c in cuts) + " |",
             "|---|---|---|---|---|---|---|---|---|" + "---|" * len(cuts)]
    for tag, c in cal.items():
        under = [f"{f(c['cuts'].get(k, {}).get('losing_under'), 2)} / {f(c['cuts'].get(k, {}).get('surviving_under'), 2)}"
                 for k in cuts]
        lines.append(f"| {tag} | {c['train_seeds'] or 'untrained'} | {c['seeds']} | {c['n_steps']} (+{c['n_siblings']} siblings) | "
                     f"{f(c['brier'])} | {f(c['ece'])} | {f(c['auroc_label_pos'], 2)} | {f(c['auroc_dead_end'], 2)} | "
                     f"{f(c['mean_pred_losing'])} / {f(c['mean_pred_surviving'])} | " + " | ".join(under) + " |")
    return lines + step_metric_lines(cal)


def step_metric_lines(cal: dict[str, dict]) -> list[str]:
    """The field's step metrics per critic (``step_metrics`` of ``prm_calibration.py``): first-error
    accuracy and ProcessBench F1 (its two accuracies) at each dead-end cut and at the threshold tuned
    on other games, and the value-order correlation with the MC labels."""
    have = {t: c["step_metrics"] for t, c in cal.items() if "step_metrics" in c}
    if not have:
        return []
    f = lambda v, d=2: "unmeasured" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{d}f}"  # noqa: E731
    cuts = sorted({k for m in have.values() for k in m["at_cut"]}, key=float)
    lines = ["", "Step metrics on the same trajectories. A trajectory's first error is the step that loses the game "
             "(none when it is won or runs out of steps); the critic predicts it as the first step scored under the "
             "threshold. Cells: first-error accuracy / ProcessBench F1 (accuracy on trajectories with an error, "
             "without one). *Tuned*: the F1-best threshold on the critic's training games. *Value order*: mean "
             "Spearman correlation of the success score with the MC labels inside a trajectory.", "",
             "| critic | trajectories (with an error) | " + " | ".join(f"under {c}" for c in cuts)
             + " | tuned threshold | at the tuned threshold | value order (trajectories) |",
             "|---|---|" + "---|" * len(cuts) + "---|---|---|"]
    for tag, m in have.items():
        any_cut = next(iter(m["at_cut"].values()))
        cell = lambda r: (f"{f(r['first_error_accuracy'])} / {f(r['f1'])} "  # noqa: E731
                          f"({f(r['acc_error'])}, {f(r['acc_correct'])})")
        tuned = m.get("tuned")
        lines.append(f"| {tag} | {any_cut['n']} ({any_cut['n_error']}) | "
                     + " | ".join(cell(m["at_cut"][c]) if c in m["at_cut"] else "unmeasured" for c in cuts)
                     + f" | {f(tuned['threshold'], 3) if tuned else 'not tuned'} | {cell(tuned) if tuned else 'unmeasured'}"
                     f" | {f(m['value_order_mc']['mean'])} ({m['value_order_mc']['n']}) |")
    return lines


def render_unseen(spec: dict, cal: dict[str, dict], results: Path = RESULTS) -> list[str]:
    """The section on games never used for labels or training (``extra["unseen"]``)."""
    if not spec:
        return []
    prm_tag = spec["prm_tag"]
    lines = ["", "## Unseen games", "", *spec["intro"], "", "```bash", *spec["commands"], "```", ""]
    for st in spec["sets"]:
        seeds = parse_seeds(st["seeds"])
        allres = load_results(results, seeds, st["difficulty"])
        rows = summary(allres)
        set_tag = st.get("prm_tag", prm_tag)
        lines += [f"### {st['title']} (seeds {_seeds(seeds)}, `{st['difficulty']}`)", "", *st.get("intro", [])]
        if st.get("intro"):
            lines.append("")
        if not rows:
            lines += ["Not measured yet.", ""]
            continue
        lines += [*unseen_table(rows), "", f"Per game (W won, L lost, T neither), seeds {_seeds(seeds)}:", "",
                  *per_game(allres, rows, seeds), "", *_verdicts(rows, st["kind"], set_tag, len(seeds)), ""]
        ctl = controls_lines(allres, set_tag)
        if ctl:
            lines += [f"**The PRM against uninformed critics in the same search** (seeds {_seeds(seeds)}):", "",
                      *st.get("controls_intro", spec.get("controls_intro", [])), "", *ctl]
        for tag in st.get("also_tags", []):  # further critics of the set, each paired with the controls
            ctl = controls_lines(allres, tag)
            if ctl and any(m.endswith(f"+{tag}") for m in allres):
                lines += [f"**[{tag}] against uninformed critics in the same search** (seeds {_seeds(seeds)}):", "",
                          *ctl]
        if st.get("goal_vs_random"):
            lines += [*goal_vs_random(allres, set_tag, st["kind"], len(seeds)), ""]
    if any(f"+{c}" in m for st in spec["sets"] for m in
           load_results(results, parse_seeds(st["seeds"]), st["difficulty"]) for c in CONTROLS):
        lines += ["![games won within B policy calls: the PRM and the control critics in the same beam]"
                  "(agents_controls.png)", ""]
    if cal:
        lines += ["### Calibration of the PRM on unseen games", "", *spec["calibration_intro"], "",
                  *calibration_lines(cal), "", "![reliability of the PRMs' success score](agents_prm_calibration.png)",
                  ""]
    return lines


def load_calibration(spec: dict) -> dict[str, dict]:
    out = {}
    for tag in (spec or {}).get("calibration", []):
        f = HERE / f"prm_calibration_{tag}.json"
        if f.exists():
            out[tag] = json.loads(f.read_text())
    return out


def plot_calibration(cal: dict[str, dict], png: Path) -> None:
    """Reliability curves (mean MC label vs mean predicted success per bin) of the PRMs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 4.5))
    ax.plot([0, 1], [0, 1], ls=":", c="gray", lw=1)
    for tag, c in cal.items():
        xs = [b["mean_pred"] for b in c["curve"]]
        ys = [b["mean_label"] for b in c["curve"]]
        ax.plot(xs, ys, marker="o", label=f"{tag} (ECE {c['ece']:.3f})")
    ax.set_xlabel("mean predicted success (bin)")
    ax.set_ylabel("mean MC label (fraction of rollouts won)")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.legend()
    ax.set_title("PRM reliability on unseen games")
    fig.tight_layout()
    save_figure(fig, png, dpi=110)


def load_all(results: Path = RESULTS, seeds=SEEDS) -> tuple:
    allres = load_results(results, seeds)
    labels = json.loads((HERE / "labels_summary.json").read_text())
    stats = {tag: json.loads((HERE / f"prm_train_stats_{tag}.json").read_text()) for tag in ("mc-only", "siblings")}
    extra = json.loads(EXTRA.read_text())
    return allres, labels, stats, extra


def plot(rows: list[dict], seeds, png: Path, title_tag: str = "") -> None:
    """Success rate vs policy calls per method, from the summary rows."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    base = next((r for r in rows if r["method"] == "base"), None)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for i, r in enumerate(rows):
        ax.scatter(r["calls"], r["success"], s=60)
        ax.annotate(r["method"], (r["calls"], r["success"]), textcoords="offset points",
                    xytext=(6, 5 if i % 2 == 0 else -13), fontsize=9)
    if base:
        ax.axvline(10 * base["calls"], ls="--", c="gray", lw=1)
        ax.text(10 * base["calls"], 0.02, " 10x base calls", color="gray", fontsize=8)
    ax.axhline(0.6, ls=":", c="gray", lw=1)
    ax.set_xlabel("policy calls per episode (mean)")
    ax.set_ylabel("success rate (held-out games)")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(f"TextWorld cooking ({title_tag}), {len(seeds)} held-out games" if title_tag
                 else f"TextWorld cooking, {len(seeds)} held-out games")
    fig.tight_layout()
    save_figure(fig, png, dpi=110)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--render", action="store_true", help="write the doc and the table from the raw data")
    ap.add_argument("--md", type=Path, default=None, help=f"write only the doc, here (default with --render: {DOC})")
    ap.add_argument("--table", type=Path, default=None, help=f"write only the table, here (default with --render: {TABLE})")
    ap.add_argument("--results", type=Path, default=RESULTS)
    a = ap.parse_args(argv)
    if not a.render:
        ap.error("--render: expected (this script only renders; run.py measures)")
    md, tab = (a.md, a.table) if (a.md or a.table) else (DOC, TABLE)
    allres, labels, stats, extra = load_all(a.results)
    if md:
        from benchmarks.agents.types_report import render_types

        doc = render(allres, labels, stats, extra, results=a.results) + "\n" + "\n".join(render_types(a.results))
        write_text(md, doc)
        print(f"wrote {md}")
    cal = load_calibration(extra.get("unseen", {}))
    if md == DOC and cal:
        plot_calibration(cal, CAL_PNG)
        print(f"wrote {CAL_PNG}")
    if md == DOC and plot_controls(extra.get("unseen", {}), a.results, CONTROLS_PNG):
        print(f"wrote {CONTROLS_PNG}")
    if tab:
        write_text(tab, table(summary(allres)) + "\n")
        print(f"wrote {tab}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
