"""LLM judge on TextWorld steps: how well LLMJudgeCritic's scores on a real local model separate
good from bad steps (AUROC), on games never used for labels or training.

At the first ``--states`` states along each game's walkthrough (the state after walkthrough
commands ``c_1..c_t``), three kinds of step are executed on forks of the game and judged with the
same context (the intro as the prompt, the walkthrough steps so far as the history):

* ``good``: the walkthrough's next command ``c_{t+1}``;
* ``dead_end``: an admissible command that loses the game at once (an irreversible mistake such as
  eating an ingredient), the first found in a seeded random order; absent where none exists;
* ``off_plan``: an admissible command that is not the walkthrough's and does not end the game.

The judge is :class:`prm_critic.text.LLMJudgeCritic` on SmolLM2-135M-Instruct served by
:class:`prm_critic.llm.LocalLLMServer` (one CPU thread), its score turn constrained to
``{"score": 0..10}`` (:func:`prm_critic.text.judge.score_response_format`). AUROC is the
Mann-Whitney probability that a good step outscores a bad one (ties count one half), with a 95%
bootstrap interval over steps (stratified, 2000 resamples, seed 0).

    python -m benchmarks.agents.judge_auroc --seeds 3000-3003 --states 3

The measurements go to ``benchmarks/results/judge_auroc.json`` (``--raw``); ``docs/judge_auroc.md``
(``--md``) is rendered from that file alone, and ``--render`` rewrites it without measuring.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.report_io import add_doc_arguments, machine, render_only, write_measurement
from benchmarks.stats import auroc, bootstrap_auroc

ROOT = Path(__file__).resolve().parents[2]
RAW = ROOT / "benchmarks" / "results" / "judge_auroc.json"
DOC = ROOT / "docs" / "judge_auroc.md"
KINDS = ("good", "dead_end", "off_plan")
NO_STATE_CHANGE = ("look", "inventory")


def summary(rows: list[dict]) -> dict:
    """Per-kind counts and mean scores, and the AUROCs of good vs each bad kind and vs both."""
    by = {k: np.array([r["score"] for r in rows if r["kind"] == k], float) for k in KINDS}
    out: dict = {"kinds": {k: {"n": int(len(v)), "mean": float(v.mean()) if len(v) else float("nan"),
                               "parse_failed": int(sum(r["parse_failed"] for r in rows if r["kind"] == k))}
                           for k, v in by.items()}}
    bad_all = np.concatenate([by["dead_end"], by["off_plan"]])
    for name, neg in (("dead_end", by["dead_end"]), ("off_plan", by["off_plan"]), ("all_bad", bad_all)):
        lo, hi = bootstrap_auroc(by["good"], neg)
        out[f"auroc_{name}"] = {"auroc": auroc(by["good"], neg), "ci95": [lo, hi], "n_bad": int(len(neg))}
    return out


def collect_steps(seeds: list[int], states: int, max_tries: int, seed: int) -> list[dict]:
    """The judged steps (module doc), with their context; games are generated offline if missing."""
    from agents.textworld_agent.env import TextWorldGame, ensure_game
    from agents.textworld_agent.text import step_text

    steps: list[dict] = []
    for s in seeds:
        path = ensure_game(s)
        game = TextWorldGame(path, max_steps=100)
        res = game.reset()
        intro, walk = game.intro, list(game.walkthrough)
        history: list[str] = []
        rng = np.random.default_rng([seed, s])
        for t in range(min(states, len(walk))):
            context = {"seed": s, "t": t, "prompt": intro, "history": list(history)}
            good = walk[t]
            fork = game.fork()
            r = fork.step(good)
            fork.close()
            steps.append({**context, "kind": "good", "command": good, "text": step_text(good, r.feedback)})
            others = [c for c in res.admissible if c != good and c not in NO_STATE_CHANGE]
            found: dict[str, dict] = {}
            for i in rng.permutation(len(others))[:max_tries]:
                cmd = others[int(i)]
                fork = game.fork()
                r = fork.step(cmd)
                fork.close()
                kind = "dead_end" if r.lost else ("off_plan" if not r.done else None)
                if kind is not None and kind not in found:
                    found[kind] = {**context, "kind": kind, "command": cmd, "text": step_text(cmd, r.feedback)}
                if len(found) == 2:
                    break
            steps += [found[k] for k in ("dead_end", "off_plan") if k in found]
            res = game.step(good)
            history.append(step_text(good, res.feedback))
            if res.done:
                break
        game.close()
    return steps


def measure(args) -> dict:
    from langchain_openai import ChatOpenAI

    from prm_critic.llm import LocalLLMServer, smollm2_path
    from prm_critic.llm.server import SMOLLM2
    from prm_critic.text import LLMJudgeCritic, TextStep
    from prm_critic.text.judge import score_response_format

    seeds = list(range(args.seeds[0], args.seeds[1] + 1))
    t0 = time.perf_counter()
    steps = collect_steps(seeds, args.states, args.max_tries, args.seed)
    collect_s = time.perf_counter() - t0
    print(f"{len(steps)} steps from {len(seeds)} games in {collect_s:.0f} s", flush=True)
    rows: list[dict] = []
    t1 = time.perf_counter()
    with LocalLLMServer(smollm2_path(), n_threads=args.threads, ctx_size=args.ctx_size) as server:
        llm = ChatOpenAI(base_url=server.base_url, api_key="none", model=server.model, temperature=0,
                         max_tokens=args.critique_tokens)
        judge = LLMJudgeCritic(llm, max_retries=1, max_concurrency=1,
                               score_model=llm.bind(response_format=score_response_format(10), max_tokens=32))
        for i, st in enumerate(steps):
            sc = judge.score([TextStep(st["prompt"], tuple(st["history"]), st["text"])])
            rows.append({"seed": st["seed"], "t": st["t"], "kind": st["kind"], "command": st["command"],
                         "score": float(sc.success[0]), "parse_failed": int(sc.extra["parse_failed"][0]),
                         "attempts": int(sc.extra["attempts"][0]), "answer": judge.last_answers[0]})
            print(f"[{i + 1}/{len(steps)}] seed {st['seed']} t={st['t']} {st['kind']:>8}: {rows[-1]['score']:.2f} "
                  f"({st['command']})", flush=True)
    judge_s = time.perf_counter() - t1
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return {
        "about": "Judge scores measured by benchmarks/agents/judge_auroc.py; docs/judge_auroc.md is rendered from "
                 "this file (--render).",
        "command": "python -m benchmarks.agents.judge_auroc " + " ".join(sys.argv[1:]),
        "machine": f"{machine()}, 1-min load average {load:.1f} at the end",
        "model": {"name": "SmolLM2-135M-Instruct", "file": SMOLLM2.file, "sha256": SMOLLM2.sha256,
                  "package": f"{SMOLLM2.package}=={SMOLLM2.version}"},
        "config": {"seeds": seeds, "states": args.states, "max_tries": args.max_tries, "seed": args.seed,
                   "threads": args.threads, "ctx_size": args.ctx_size, "critique_tokens": args.critique_tokens,
                   "temperature": 0},
        "collect_s": collect_s, "judge_s": judge_s, "rows": rows,
    }


def _f(x: float, nd: int = 2) -> str:
    return "n/a" if x != x else f"{x:.{nd}f}"


def render(raw: dict) -> str:
    s = summary(raw["rows"])
    cfg = raw["config"]
    n = len(raw["rows"])
    calls = sum(1 + r["attempts"] for r in raw["rows"])
    lines = [
        "# LLM judge on TextWorld steps: good vs bad (AUROC)",
        "",
        f"Generated by `python -m benchmarks.agents.judge_auroc --render` from `{RAW.relative_to(ROOT).as_posix()}`, "
        "the raw data the command below measured.",
        "",
        f"`LLMJudgeCritic` on **{raw['model']['name']}** (`{raw['model']['file']}` from "
        f"`{raw['model']['package']}`, SHA-256 `{raw['model']['sha256'][:16]}...`), served by `LocalLLMServer` on "
        f"{cfg['threads']} CPU thread(s); critique up to {cfg['critique_tokens']} tokens, score turn constrained to "
        "`{\"score\": 0..10}`, temperature 0.",
        f"Games: seeds {cfg['seeds'][0]}-{cfg['seeds'][-1]} at the current difficulty (never used for labels or "
        f"training); the first {cfg['states']} states along each walkthrough. At each state: `good` = the "
        "walkthrough's next command, `dead_end` = an admissible command that loses at once, `off_plan` = another "
        "admissible command that does not end the game (see the script's docstring).",
        "",
        "```bash",
        raw["command"],
        "```",
        "",
        f"{n} judged steps, {calls} model calls, {raw['judge_s']:.0f} s of judging "
        f"({raw['judge_s'] / max(n, 1):.1f} s per step; {raw['machine']}).",
        "",
        "| step kind | n | mean judge score | unparsed answers |",
        "|---|--:|--:|--:|",
    ]
    for k in KINDS:
        d = s["kinds"][k]
        lines.append(f"| {k} | {d['n']} | {_f(d['mean'], 3)} | {d['parse_failed']} |")
    lines += ["", "| good vs | AUROC | 95% bootstrap interval | bad steps |", "|---|--:|--:|--:|"]
    for name, label in (("dead_end", "dead_end"), ("off_plan", "off_plan"), ("all_bad", "dead_end + off_plan")):
        a = s[f"auroc_{name}"]
        lines.append(f"| {label} | {_f(a['auroc'])} | [{_f(a['ci95'][0])}, {_f(a['ci95'][1])}] | {a['n_bad']} |")
    head = s["auroc_all_bad"]
    verdict = ("separates good from bad steps better than chance"
               if head["ci95"][0] == head["ci95"][0] and head["ci95"][0] > 0.5 else
               "does not separate good from bad steps better than chance (the interval includes 0.5 or lies below it)")
    lines += [
        "",
        f"Reading: a 135M judge {verdict} here (AUROC {_f(head['auroc'])}). This measures the judge plumbing "
        "on a model that runs anywhere offline, not what an LLM judge can do; point the same script's "
        "`LLMJudgeCritic` at a larger model behind any OpenAI-compatible URL for that. The judge's prompt "
        "carries random fence nonces, so reruns differ somewhat even at temperature 0.",
    ]
    return "\n".join(lines) + "\n"


def _seed_range(text: str) -> tuple[int, int]:
    a, _, b = text.partition("-")
    lo, hi = int(a), int(b or a)
    if lo < 0 or hi < lo:
        raise argparse.ArgumentTypeError(f"--seeds: expected A-B with 0 <= A <= B, got {text!r}")
    return lo, hi


def judge_arguments(ap: argparse.ArgumentParser, *, seeds: tuple[int, int], critique_tokens: int, bad: str) -> None:
    """The options of the judge benchmarks: the games, the steps judged (``bad``: what is sought for the
    bad steps) and the local judge."""
    ap.add_argument("--seeds", type=_seed_range, default=seeds, help=f"game seeds A-B (default {seeds[0]}-{seeds[1]})")
    ap.add_argument("--states", type=int, default=3, help="states per game along the walkthrough (default 3)")
    ap.add_argument("--max-tries", type=int, default=12, help=f"admissible commands tried per state for {bad}")
    ap.add_argument("--seed", type=int, default=0, help="seed of the order in which commands are tried")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--ctx-size", type=int, default=4096)
    ap.add_argument("--critique-tokens", type=int, default=critique_tokens)


def judge_main(ap: argparse.ArgumentParser, argv, measure, render, shown: str) -> int:
    """Parse ``argv``; with ``--render`` only write the doc, else measure, write the raw data and the doc,
    and print the doc from its line ``shown`` on."""
    args = ap.parse_args(argv)
    if render_only(args, render):
        return 0
    raw = measure(args)
    write_measurement(render, raw, args.raw, args.doc)
    print(render(raw).split(shown, 1)[1])
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    judge_arguments(ap, seeds=(3000, 3003), critique_tokens=48, bad="the bad kinds")
    add_doc_arguments(ap, RAW, DOC)
    return judge_main(ap, argv, measure, render, "| step kind")


if __name__ == "__main__":
    sys.exit(main())
