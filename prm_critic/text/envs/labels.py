"""Monte-Carlo step labels on any forkable text environment (Math-Shepherd style).

For each game seed and episode ``e``, a base-policy trajectory ``c_1..c_T`` is sampled; for each step
``t`` the state after ``c_t`` is forked (a replay of ``c_1..c_t`` on a second environment) and
continued ``K`` times with the same policy until the episode ends::

    soft label  y_t = (1/K) * #{k : rollout k wins}      in [0, 1]
    hard label  h_t = [y_t > 0]
    terminal steps: y_t = 1 if the step wins, 0 if it loses or ends the episode unwon (no rollouts)
    progress    p_t = score_t / max_score                (privileged, a TRAINING target only; 0 without a score)

The critic's input is only what the agent sees: the intro as the prompt, then ``step_text(c_t,
feedback_t)`` per step (default :func:`act_step_text`: ``act({"command": c_t})`` and the feedback).
Examples are written in TRL stepwise format with float labels (:func:`~prm_critic.text.write_stepwise_jsonl`).

Terminal siblings (``siblings=m``): at each state of a labelled trajectory, ``m`` other policy
proposals are executed once; those that end the game get their exact label (won 1, lost or out of
steps 0) and become branch examples: the dead-end contrasts a step-level search must see.

:func:`build_labels` labels the games of an environment spec (:mod:`prm_critic.text.envs.registry`:
``"twx:coin"``, ``"textworld:tw-treasure_hunter?level=5"``, a kind you registered) over seeds.
Resumable: each ``(seed, episode)`` unit is written atomically to ``<out>/units/`` and skipped when
present; the JSONL files are assembled from the units at the end; a folder holding labels of other
settings (environment, ``k``, ``max_steps``, policy, step text, ...) is refused, naming the
difference. Each unit draws only from ``default_rng([seed, episode])``, so the labels are the same
whatever the executor (:mod:`prm_critic.parallel`), worker count or order; a worker imports
``env_module`` (where your environment kind is registered) before making the environment.
"""

from __future__ import annotations

import importlib
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from prm_critic import validate
from prm_critic._io import atomic_write_bytes, claim_output, record_diffs, write_record
from prm_critic._optional import require
from prm_critic.text.envs.base import SamplingPolicy, TextEnv, TextPolicy
from prm_critic.text.envs.registry import TextEnvSpec, parse_env_spec
from prm_critic.text.steps import format_tool_step
from prm_critic.text.trl_format import StepwiseExample, write_stepwise_jsonl

__all__ = ["act_step_text", "rollout", "mc_value", "mc_label", "LabelledEpisode", "label_episode", "render_episode",
           "terminal_siblings", "sibling_examples", "build_labels"]

#: step_text(command, feedback) -> the critic's text of one step
StepText = Callable[[str, str], str]


def act_step_text(command: str, feedback: str) -> str:
    """The critic's text of one step: the call ``act({"command": command})`` and the game's feedback."""
    return format_tool_step("act", {"command": command}, feedback)


def _policy(policy: TextPolicy | None) -> TextPolicy:
    if policy is None:
        return SamplingPolicy()
    if not isinstance(policy, TextPolicy):
        raise validate.ArgumentError(f"policy: expected an object with sample(admissible, history, rng, n, ...), got "
                                     f"{type(policy).__name__} {policy!r}")
    return policy


def rollout(env: TextEnv, policy: TextPolicy, rng: np.random.Generator) -> bool:
    """Continue ``env`` from its current state with ``policy`` until the episode ends; True if won."""
    r = env.last
    if r is None:
        raise RuntimeError("rollout: the environment was not reset")
    while not r.done:
        r = env.step(policy.sample(r.admissible, env.history, rng)[0])
    return r.won


def mc_value(env: TextEnv, commands: Sequence[str], policy: TextPolicy, k: int, rng: np.random.Generator) -> int:
    """Wins among ``k`` policy continuations from the state after ``commands`` (``env`` is the
    simulator: it replays ``commands`` from reset before each continuation)."""
    k = validate.check_int("k", k, minimum=1)
    wins = 0
    for _ in range(k):
        env.replay(commands)
        wins += rollout(env, policy, rng)
    return wins


def mc_label(env: TextEnv, commands: Sequence[str], policy: TextPolicy, k: int, rng: np.random.Generator) -> float:
    """Soft label of the state after ``commands``: 1 / 0 when that state won / ended unwon, else the
    fraction of ``k`` policy continuations that win."""
    r = env.replay(commands)
    if r.done:
        return 1.0 if r.won else 0.0
    return mc_value(env, commands, policy, k, rng) / k


@dataclass
class LabelledEpisode:
    """One labelled trajectory: the TRL example plus what produced it (``wins[t]``: wins among
    ``k``, ``-1`` for a terminal step, labelled directly)."""

    seed: int
    episode: int
    example: StepwiseExample
    commands: list[str]
    wins: list[int]
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


def label_episode(env: TextEnv, *, seed: int, episode: int = 0, k: int = 8, policy: TextPolicy | None = None,
                  rng_seed: int | None = None, max_labelled: int | None = None,
                  step_text: StepText = act_step_text) -> LabelledEpisode:
    """Sample one policy trajectory on ``env`` (reset here; its ``max_steps`` bounds the trajectory
    and every continuation) and label every step by Monte-Carlo continuations on a fork.

    Args:
        seed, episode: recorded, and the random stream ``default_rng([seed, episode])`` (or ``rng_seed``).
        k: continuations per step.
        max_labelled: cut a longer trajectory after this many steps (a valid prefix, bounded cost).
    """
    if not isinstance(env, TextEnv):
        raise validate.ArgumentError(f"env: expected a TextEnv, got {type(env).__name__} {env!r}")
    k = validate.check_int("k", k, minimum=1)
    validate.check_int("max_labelled", max_labelled, minimum=1, allow_none=True)
    policy = _policy(policy)
    rng = np.random.default_rng([seed, episode] if rng_seed is None else rng_seed)
    r = env.reset()
    prompt = r.feedback
    sim = env.fork()
    try:
        results = []
        while not r.done:
            r = env.step(policy.sample(r.admissible, env.history, rng)[0])
            results.append(r)
        if max_labelled is not None:
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
            progress.append(float(x.score) / float(x.max_score) if x.max_score else 0.0)
        ex = StepwiseExample(prompt, [step_text(x.command, x.feedback) for x in results], labels, progress)
        last = results[-1] if results else r
        return LabelledEpisode(seed, episode, ex, cmds, wins, k, bool(last.won), bool(last.lost))
    finally:
        sim.close()


def render_episode(env: TextEnv, commands: Sequence[str], *,
                   step_text: StepText = act_step_text) -> tuple[str, list[str]]:
    """The critic's view of a command sequence, ``(prompt, step texts)``, by replaying it on ``env``."""
    prompt = env.reset().feedback
    return prompt, [step_text(c, env.step(c).feedback) for c in commands]


def terminal_siblings(env: TextEnv, commands: Sequence[str], *, m: int = 3, policy: TextPolicy | None = None,
                      rng: np.random.Generator | None = None) -> list[dict]:
    """One-step siblings with exact labels (module doc) on the simulator ``env``:
    ``[{"t": t, "command": c, "label": y}]`` (``t`` = 0-based step index)."""
    m = validate.check_int("m", m, minimum=1)
    policy = _policy(policy)
    rng = rng or np.random.default_rng(0)
    out = []
    for t in range(len(commands)):
        r = env.replay(commands[:t])
        others = [c for c in r.admissible if c != commands[t]]
        if not others:
            continue
        for c in policy.sample(others, list(commands[:t]), rng, n=m, distinct=True):
            if env.history != list(commands[:t]) or env.done:
                env.replay(commands[:t])
            x = env.step(c)
            if x.done:
                out.append({"t": t, "command": c, "label": 1.0 if x.won else 0.0})
    return out


def sibling_examples(ep: LabelledEpisode, siblings: list[dict], env: TextEnv, *,
                     step_text: StepText = act_step_text) -> list[StepwiseExample]:
    """Branch examples: the trajectory's first ``t`` steps (their MC labels) and the sibling step."""
    out = []
    for sb in siblings:
        t = sb["t"]
        prompt, texts = render_episode(env, list(ep.commands[:t]) + [sb["command"]], step_text=step_text)
        progress = list(ep.example.progress or [0.0] * len(ep.commands))
        prog = progress[:t] + [1.0 if sb["label"] == 1.0 else (progress[t - 1] if t else 0.0)]
        out.append(StepwiseExample(prompt, texts, list(ep.example.labels[:t]) + [sb["label"]], prog))
    return out


def _make(payload: dict) -> TextEnv:
    if payload.get("env_module"):
        importlib.import_module(payload["env_module"])
    return parse_env_spec(payload["env"]).make(payload["seed"], max_steps=payload["max_steps"])


def _label_unit(ctx: Any, payload: dict) -> dict:
    """Executor task: one (seed, episode) unit, on the worker (which makes its game)."""
    env = _make(payload)
    try:
        return label_episode(env, seed=payload["seed"], episode=payload["episode"], k=payload["k"],
                             policy=payload["policy"], max_labelled=payload["max_labelled"],
                             step_text=payload["step_text"]).to_dict()
    finally:
        env.close()


def _settings(spec: TextEnvSpec, k: int, max_steps: int, max_labelled: int | None, policy: TextPolicy,
              step_text: StepText) -> dict:
    """What changes a unit's labels (a folder holding other settings is refused)."""
    return {"env": str(spec), "k": k, "max_steps": max_steps, "max_labelled": max_labelled, "policy": repr(policy),
            "step_text": f"{getattr(step_text, '__module__', '?')}.{getattr(step_text, '__qualname__', repr(step_text))}"}


def _render(done: list[LabelledEpisode], base: dict, units: Path, siblings: int, policy: TextPolicy,
            step_text: StepText) -> list[StepwiseExample]:
    """Re-render each episode's texts from its stored commands (the JSONL follows the current rendering) and
    return the terminal-sibling examples (``siblings`` per episode, kept in ``units`` for resuming)."""
    aug: list[StepwiseExample] = []
    for d in done:
        sim = _make({**base, "seed": d.seed})
        try:
            prompt, texts = render_episode(sim, d.commands, step_text=step_text)
            d.example = StepwiseExample(prompt, texts, d.example.labels, d.example.progress)
            if siblings:
                f = units / f"seed{d.seed}_ep{d.episode}_sib{siblings}.json"
                if f.exists():
                    sib = json.loads(f.read_text())
                else:
                    sib = terminal_siblings(sim, d.commands, m=siblings, policy=policy,
                                            rng=np.random.default_rng([d.seed, d.episode, 99]))
                    atomic_write_bytes(f, json.dumps(sib).encode())
                aug += sibling_examples(d, sib, sim, step_text=step_text)
        finally:
            sim.close()
    return aug


def build_labels(out: str | Path, env: str | TextEnvSpec, seeds: Sequence[int], *, episodes: int = 1, k: int = 8,
                 max_steps: int = 40, max_labelled: int | None = None, policy: TextPolicy | None = None,
                 step_text: StepText = act_step_text, siblings: int = 0, env_module: str | None = None,
                 executor: Any = "local", workers: int | None = None, address: str | None = None,
                 show_progress: bool = True, overwrite: bool = False) -> list[LabelledEpisode]:
    """Label ``episodes`` trajectories per game seed of ``env`` (module doc); resumable.

    Writes under ``out``: ``labels.jsonl`` (soft labels), ``labels_hard.jsonl`` (0/1),
    ``labels_siblings.jsonl`` with ``siblings=m`` (branch examples ending in a terminal sibling), and
    ``summary.json`` (the counts), ``run.json`` (the settings: a folder holding another run's labels
    is refused, naming what differs, unless ``overwrite`` replaces it whole). ``executor`` / ``workers`` / ``address``: where the
    units are labelled (:func:`prm_critic.parallel.make_executor`); the siblings pass runs here.
    """
    from prm_critic.parallel import Task, make_executor

    spec = parse_env_spec(env)
    if env_module:
        importlib.import_module(env_module)
    seeds = [validate.check_int("seeds", s, minimum=0) for s in seeds]
    if not seeds:
        raise validate.ArgumentError("seeds: expected at least one game seed, got none")
    episodes = validate.check_int("episodes", episodes, minimum=1)
    k = validate.check_int("k", k, minimum=1)
    max_steps = validate.check_int("max_steps", max_steps, minimum=1)
    siblings = validate.check_int("siblings", siblings, minimum=0)
    policy = _policy(policy)
    settings = _settings(spec, k, max_steps, max_labelled, policy, step_text)
    out = Path(out)
    owned = [out / n for n in ("units", "labels.jsonl", "labels_hard.jsonl", "labels_siblings.jsonl", "summary.json")]
    claim_output(out, owned, record_diffs(out / "run.json", settings), overwrite=validate.check_flag("overwrite", overwrite),
                 what="out", held="labels")
    write_record(out / "run.json", settings)
    tqdm = require("tqdm").tqdm
    ex = make_executor(executor, workers=workers, address=address)
    units = out / "units"
    units.mkdir(parents=True, exist_ok=True)
    todo = [(s, e) for s in seeds for e in range(episodes)]
    t0 = time.time()
    got: dict[tuple[int, int], LabelledEpisode] = {}
    tasks = []
    base = {"env": str(spec), "env_module": env_module, "k": k, "max_steps": max_steps,
            "max_labelled": max_labelled, "policy": policy, "step_text": step_text}
    for s, e in todo:
        f = units / f"seed{s}_ep{e}.json"
        if f.exists():
            got[s, e] = LabelledEpisode.from_dict(json.loads(f.read_text()))
        else:
            tasks.append(Task(key=(s, e), desc=f"{spec} seed {s}, episode {e}", payload={**base, "seed": s, "episode": e}))
    bar = tqdm(total=len(todo), initial=len(got), desc="MC labels", unit="episode", disable=not show_progress)
    if tasks:
        with ex.start(dict) as pool:
            for (s, e), unit in pool.map(_label_unit, tasks):
                atomic_write_bytes(units / f"seed{s}_ep{e}.json", json.dumps(unit).encode())
                got[s, e] = LabelledEpisode.from_dict(unit)
                bar.update(1)
    bar.close()
    done = [got[u] for u in todo]
    aug = _render(done, base, units, siblings, policy, step_text)
    write_stepwise_jsonl(out / "labels.jsonl", [d.example for d in done])
    if siblings:
        write_stepwise_jsonl(out / "labels_siblings.jsonl", aug)
    hard = [StepwiseExample(d.example.prompt, d.example.completions, [float(y > 0) for y in d.example.labels],
                            d.example.progress) for d in done]
    write_stepwise_jsonl(out / "labels_hard.jsonl", hard)
    ys = np.concatenate([np.asarray(d.example.labels) for d in done]) if done else np.zeros(0)
    summary = {"settings": settings, "seeds": list(seeds), "episodes": episodes, "siblings": siblings,
               "n_trajectories": len(done), "n_steps": int(ys.size),
               "mean_label": float(ys.mean()) if ys.size else None,
               "frac_zero": float((ys == 0).mean()) if ys.size else None,
               "base_won": int(sum(d.won for d in done)), "base_lost": int(sum(d.lost for d in done)),
               "wall_s_this_run": round(time.time() - t0, 1)}
    atomic_write_bytes(out / "summary.json", json.dumps(summary, indent=1).encode())
    return done
