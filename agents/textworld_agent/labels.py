"""Monte-Carlo step labels for TextWorld trajectories (Math-Shepherd style).

For each training game (seed) and episode ``e``, a base-policy trajectory ``c_1..c_T`` is sampled;
for each step ``t`` the state after ``c_t`` is forked (by replaying ``c_1..c_t``) and continued
``K`` times with the same base policy until the episode ends (``max_steps`` in total)::

    soft label  y_t = (1/K) * #{k : rollout k wins}      in [0, 1]
    hard label  h_t = [y_t > 0]
    terminal steps: y_t = 1 if the step wins, 0 if it loses or ends the episode unwon (no rollouts)
    progress    p_t = score_t / max_score               (privileged, a TRAINING target only)

The critic's input is only what the agent sees (:mod:`agents.textworld_agent.text`): the intro
text as the prompt, then ``act({"command": c_t})`` + feedback per step. Examples are written in
TRL stepwise format with float labels (:func:`prm_critic.text.write_stepwise_jsonl`).

Optional terminal siblings (``--siblings m``): at each state of a labelled trajectory, ``m`` other
base-policy proposals are executed once; those that end the game (mostly irreversible losses such
as eating or mis-cooking an ingredient) are added as branch examples with their exact label (0 or 1,
no rollouts). This adds the dead-end contrasts a step-level best-of-N must see.

Resumable: every (seed, episode) unit is written atomically to ``<out>/units/`` when done and
skipped when present; the JSONL files are (re)assembled from the units at the end.

Scale out: each unit is one task of the chosen executor (``--executor ray --workers N``,
:mod:`prm_critic.executor`); a unit draws only from ``default_rng([seed, episode])``, so the labels
are identical whatever the executor, worker count or order. Workers return units, the driver writes
them. Ray workers need this repository's ``agents`` package importable (e.g. ``PYTHONPATH``) and
generate (or find in ``cache_dir``) the games themselves.

CLI::

    python -m agents.textworld_agent.labels --out .cache/textworld/labels --seeds 0-29 \
        --episodes 1 --k 8 --max-steps 40
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from prm_critic._optional import require
from prm_critic.text.trl_format import StepwiseExample, write_stepwise_jsonl

from agents.textworld_agent.env import DEFAULT_DIFFICULTY, Difficulty, TextWorldGame, ensure_game
from agents.textworld_agent.policy import BasePolicy
from agents.textworld_agent.text import step_text

__all__ = ["rollout", "mc_value", "mc_label", "label_episode", "LabelledEpisode", "build_labels", "parse_seeds", "render_episode", "terminal_siblings", "sibling_examples", "main"]


def rollout(game: TextWorldGame, policy: BasePolicy, rng: np.random.Generator) -> bool:
    """Continue ``game`` from its current state with ``policy`` until done; True if won."""
    r = game.last
    while not r.done:
        r = game.step(policy.sample(r.admissible, game.history, rng)[0])
    return r.won


def mc_value(game: TextWorldGame, commands: Sequence[str], policy: BasePolicy, k: int,
             rng: np.random.Generator) -> int:
    """Number of wins among ``k`` base-policy continuations from the state after ``commands``.

    ``game`` is used as the rollout env (its state is replaced: replay from reset each time).
    """
    if k < 1:
        raise ValueError(f"k: expected an int >= 1, got {k!r}")
    wins = 0
    for _ in range(k):
        game.replay(commands)
        wins += rollout(game, policy, rng)
    return wins


def mc_label(game: TextWorldGame, commands: Sequence[str], policy: BasePolicy, k: int,
             rng: np.random.Generator) -> float:
    """Soft MC label of the state after ``commands``: 1 / 0 if that state won / ended unwon,
    else the fraction of ``k`` base-policy continuations that win."""
    r = game.replay(commands)
    if r.done:
        return 1.0 if r.won else 0.0
    return mc_value(game, commands, policy, k, rng) / k


@dataclass
class LabelledEpisode:
    """One labelled trajectory: the TRL example plus what produced it."""

    seed: int
    episode: int
    example: StepwiseExample
    commands: list[str]
    wins: list[int]          # per step, wins among k (-1 for terminal steps, labelled directly)
    k: int
    won: bool
    lost: bool

    def to_dict(self) -> dict:
        return {"seed": self.seed, "episode": self.episode, "example": self.example.to_dict(),
                "commands": self.commands, "wins": self.wins, "k": self.k, "won": self.won, "lost": self.lost}

    @classmethod
    def from_dict(cls, d: dict) -> "LabelledEpisode":
        return cls(d["seed"], d["episode"], StepwiseExample.from_dict(d["example"]), d["commands"], d["wins"],
                   d["k"], d["won"], d["lost"])


def label_episode(path: str | Path, *, seed: int, episode: int = 0, k: int = 8, max_steps: int = 40,
                  policy: BasePolicy | None = None, rng_seed: int | None = None,
                  max_labelled: int | None = None) -> LabelledEpisode:
    """Sample one base-policy trajectory on the game at ``path`` and label every step by MC.

    Args:
        k: continuations per step.
        max_steps: episode length limit (of the trajectory and of every continuation).
        max_labelled: if set and the trajectory is longer, the trajectory is cut after this many
            steps (keeps labelling cost bounded; the cut trajectory is still a valid prefix).
    """
    policy = policy or BasePolicy()
    rng = np.random.default_rng([seed, episode] if rng_seed is None else rng_seed)
    game = TextWorldGame(path, max_steps=max_steps)
    sim = TextWorldGame(path, max_steps=max_steps)
    try:
        r = game.reset()
        prompt = r.feedback
        results = []
        while not r.done:
            r = game.step(policy.sample(r.admissible, game.history, rng)[0])
            results.append(r)
        if max_labelled is not None and len(results) > max_labelled:
            results = results[:max_labelled]
        cmds = [x.command for x in results]
        labels, wins, progress = [], [], []
        for t, x in enumerate(results):
            if x.done:
                labels.append(1.0 if x.won else 0.0)
                wins.append(-1)
            else:
                w = mc_value(sim, cmds[: t + 1], policy, k, rng)
                labels.append(w / k)
                wins.append(w)
            progress.append(x.score / x.max_score if x.max_score else 0.0)
        ex = StepwiseExample(prompt, [step_text(x.command, x.feedback) for x in results], labels, progress)
        last = results[-1]
        return LabelledEpisode(seed, episode, ex, cmds, wins, k, bool(last.won), bool(last.lost))
    finally:
        game.close()
        sim.close()


def render_episode(path: str | Path, commands: Sequence[str], *, max_steps: int = 40) -> tuple[str, list[str]]:
    """The critic's view of a command sequence: ``(prompt, step texts)``, by replaying it."""
    g = TextWorldGame(path, max_steps=max(max_steps, len(commands)))
    try:
        prompt = g.reset().feedback
        return prompt, [step_text(c, g.step(c).feedback) for c in commands]
    finally:
        g.close()


def terminal_siblings(path: str | Path, commands: Sequence[str], *, m: int = 3, max_steps: int = 40,
                      policy: BasePolicy | None = None, rng: np.random.Generator | None = None) -> list[dict]:
    """One-step siblings with exact labels: at every state ``s_{t-1}`` of the trajectory, ``m``
    other base-policy proposals are executed; those that end the game get their exact label (won ->
    1, lost or out of steps -> 0, no rollouts needed). Non-terminal siblings are dropped (they would
    need rollouts). Returns ``[{"t": t, "command": c, "label": y}]`` (``t`` = 0-based step index).
    """
    policy = policy or BasePolicy()
    rng = rng or np.random.default_rng(0)
    sim = TextWorldGame(path, max_steps=max_steps)
    out = []
    try:
        for t in range(len(commands)):
            r = sim.replay(commands[:t])
            others = [c for c in r.admissible if c != commands[t]]
            if not others:
                continue
            alts = policy.sample(others, list(commands[:t]), rng, n=m, distinct=True)
            for c in alts:
                if sim.history != list(commands[:t]) or sim.last.done:
                    sim.replay(commands[:t])
                x = sim.step(c)
                if x.done:
                    out.append({"t": t, "command": c, "label": 1.0 if x.won else 0.0})
    finally:
        sim.close()
    return out


def sibling_examples(ep: "LabelledEpisode", siblings: list[dict], path: str | Path, *,
                     max_steps: int = 40) -> list[StepwiseExample]:
    """Branch examples: the trajectory's first ``t`` steps (their MC labels) + the sibling step."""
    out = []
    for sb in siblings:
        t = sb["t"]
        cmds = list(ep.commands[:t]) + [sb["command"]]
        prompt, texts = render_episode(path, cmds, max_steps=max_steps)
        prog = list(ep.example.progress[:t]) + [1.0 if sb["label"] == 1.0 else (ep.example.progress[t - 1] if t else 0.0)]
        out.append(StepwiseExample(prompt, texts, list(ep.example.labels[:t]) + [sb["label"]], prog))
    return out


def _atomic_json(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(obj, f)
    os.replace(tmp, path)


def _label_unit(ctx, unit: dict) -> dict:
    """Executor task: one (seed, episode) unit, labelled on the worker (which generates its game if missing)."""
    path = ensure_game(unit["seed"], unit["difficulty"], unit["cache_dir"])
    return label_episode(path, seed=unit["seed"], episode=unit["episode"], k=unit["k"], max_steps=unit["max_steps"],
                         max_labelled=unit["max_labelled"]).to_dict()


def build_labels(out: str | Path, seeds: Sequence[int], *, episodes: int = 1, k: int = 8, max_steps: int = 40,
                 max_labelled: int | None = None, difficulty: Difficulty = DEFAULT_DIFFICULTY,
                 cache_dir: str | Path | None = None, show_progress: bool = True,
                 siblings: int = 0, executor="local", workers: int | None = None,
                 address: str | None = None) -> list[LabelledEpisode]:
    """Label ``episodes`` trajectories per seed; resumable; writes ``labels.jsonl`` (soft float
    labels), ``labels_hard.jsonl`` (0/1) and ``summary.json`` under ``out``; with ``siblings=m``
    also ``labels_siblings.jsonl`` (branch examples ending in a terminal sibling step, see
    :func:`terminal_siblings`). ``executor`` / ``workers`` / ``address``: where the units are
    labelled (:func:`prm_critic.executor.make_executor`; the siblings pass runs here)."""
    from prm_critic.executor import Task, make_executor

    tqdm = require("tqdm").tqdm
    ex = make_executor(executor, workers=workers, address=address)
    out = Path(out)
    units = out / "units"
    prev = out / "summary.json"
    if prev.exists():  # units are named by seed only: never mix two difficulties in one folder
        had = json.loads(prev.read_text()).get("difficulty")
        if had is not None and had != difficulty.to_dict():
            raise ValueError(f"{out}: labels of difficulty {had} are already there; expected "
                             f"{difficulty.to_dict()} (use another --out)")
    units.mkdir(parents=True, exist_ok=True)
    todo = [(s, e) for s in seeds for e in range(episodes)]
    t0 = time.time()
    got: dict[tuple[int, int], LabelledEpisode] = {}
    tasks = []
    for s, e in todo:
        f = units / f"seed{s}_ep{e}.json"
        if f.exists():
            got[s, e] = LabelledEpisode.from_dict(json.loads(f.read_text()))
        else:
            tasks.append(Task(key=(s, e), desc=f"seed {s}, episode {e}",
                              payload={"seed": s, "episode": e, "difficulty": difficulty, "cache_dir": cache_dir,
                                       "k": k, "max_steps": max_steps, "max_labelled": max_labelled}))
    bar = tqdm(total=len(todo), initial=len(got), desc="MC labels", unit="episode", disable=not show_progress)
    if tasks:
        with ex.start(dict) as pool:
            for (s, e), unit in pool.map(_label_unit, tasks):
                _atomic_json(units / f"seed{s}_ep{e}.json", unit)
                got[s, e] = LabelledEpisode.from_dict(unit)
                bar.update(1)
                bar.set_postfix(steps=sum(len(d.example) for d in got.values()))
    bar.close()
    done = [got[u] for u in todo]
    # texts are re-rendered from the stored commands, so the JSONL always follows the current
    # rendering (text.py / clean_feedback) without redoing the rollouts
    for d in done:
        prompt, texts = render_episode(ensure_game(d.seed, difficulty, cache_dir), d.commands, max_steps=max_steps)
        d.example = StepwiseExample(prompt, texts, d.example.labels, d.example.progress)
    write_stepwise_jsonl(out / "labels.jsonl", [d.example for d in done])
    if siblings:
        aug = []
        for d in tqdm(done, desc="terminal siblings", unit="episode", disable=not show_progress):
            f = units / f"seed{d.seed}_ep{d.episode}_sib{siblings}.json"
            path = ensure_game(d.seed, difficulty, cache_dir)
            if f.exists():
                sib = json.loads(f.read_text())
            else:
                sib = terminal_siblings(path, d.commands, m=siblings, max_steps=max_steps,
                                        rng=np.random.default_rng([d.seed, d.episode, 99]))
                _atomic_json(f, sib)
            aug += sibling_examples(d, sib, path, max_steps=max_steps)
        write_stepwise_jsonl(out / "labels_siblings.jsonl", aug)
    hard = [StepwiseExample(d.example.prompt, d.example.completions, [float(y > 0) for y in d.example.labels],
                            d.example.progress) for d in done]
    write_stepwise_jsonl(out / "labels_hard.jsonl", hard)
    ys = np.concatenate([np.asarray(d.example.labels) for d in done]) if done else np.zeros(0)
    summary = {"difficulty": difficulty.to_dict(), "seeds": list(seeds), "episodes": episodes, "k": k,
               "max_steps": max_steps, "max_labelled": max_labelled, "n_trajectories": len(done),
               "n_steps": int(ys.size), "mean_label": float(ys.mean()) if ys.size else None,
               "frac_zero": float((ys == 0).mean()) if ys.size else None,
               "base_won": int(sum(d.won for d in done)), "base_lost": int(sum(d.lost for d in done)),
               "wall_s_this_run": round(time.time() - t0, 1)}
    _atomic_json(out / "summary.json", summary)
    return done


def parse_seeds(text: str) -> list[int]:
    """``"0-9,20,22"`` -> ``[0, ..., 9, 20, 22]``."""
    seeds: list[int] = []
    try:
        for part in str(text).split(","):
            part = part.strip()
            if "-" in part:
                a, b = part.split("-")
                seeds.extend(range(int(a), int(b) + 1))
            elif part:
                seeds.append(int(part))
    except ValueError:
        raise ValueError(f"seeds: expected a list like '0-9,20', got {text!r}") from None
    if not seeds or min(seeds) < 0:
        raise ValueError(f"seeds: expected at least one seed >= 0, got {text!r}")
    return seeds


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Monte-Carlo step labels for TextWorld cooking games")
    ap.add_argument("--out", required=True)
    ap.add_argument("--seeds", default="0-29")
    ap.add_argument("--episodes", type=int, default=1)
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--max-steps", type=int, default=40)
    ap.add_argument("--max-labelled", type=int, default=None)
    ap.add_argument("--siblings", type=int, default=0, help="terminal siblings tried per state (0: none)")
    ap.add_argument("--executor", choices=["local", "ray"], default="local", help="where units are labelled")
    ap.add_argument("--workers", type=int, default=None, help="ray: worker processes (default: one per CPU)")
    ap.add_argument("--address", default=None, help="ray: address of an existing cluster")
    ap.add_argument("--recipe", type=int, default=DEFAULT_DIFFICULTY.recipe,
                    help="games: ingredients in the recipe (tw-cooking --recipe; default %(default)s)")
    ap.add_argument("--take", type=int, default=DEFAULT_DIFFICULTY.take,
                    help="games: ingredients to find (tw-cooking --take; default %(default)s)")
    a = ap.parse_args(argv)
    try:
        difficulty = dataclasses.replace(DEFAULT_DIFFICULTY, recipe=a.recipe, take=a.take)
    except ValueError as exc:
        raise SystemExit(f"--recipe/--take: {exc}") from None
    build_labels(a.out, parse_seeds(a.seeds), episodes=a.episodes, k=a.k, max_steps=a.max_steps,
                 max_labelled=a.max_labelled, siblings=a.siblings, executor=a.executor, workers=a.workers,
                 address=a.address, difficulty=difficulty)
    print((Path(a.out) / "summary.json").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
