"""Monte-Carlo step labels for the TextWorld agent: the library's labeller with this app's policy and texts.

The labeller is :mod:`prm_critic.text.envs.labels` (Math-Shepherd soft labels on any forkable text
environment, terminal siblings, resumable folders, executors); this module runs it with the app's
base policy (:class:`~agents.textworld_agent.policy.BasePolicy`) and step texts
(:func:`~agents.textworld_agent.text.step_text`: ``look()`` / ``inventory()`` / ``act(...)`` as the
agent's tools issue them), on TextWorld cooking games by seed and difficulty or on any environment
spec (``--env twx:coin``, ``--env textworld:tw-treasure_hunter?level=5``, a kind registered by
``--env-module``).

CLI::

    python -m agents.textworld_agent.labels --out .cache/textworld/labels --seeds 0-29 \
        --episodes 1 --k 8 --max-steps 40
    python -m agents.textworld_agent.labels --env twx:coin --out .cache/twx/coin_labels --seeds 0-47 --k 4
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Sequence

from prm_critic.text.envs import labels as _lib
from prm_critic.text.envs.labels import LabelledEpisode, mc_label, mc_value, rollout
from prm_critic.text.envs.registry import TextEnvSpec, parse_env_spec

from agents.textworld_agent.env import DEFAULT_DIFFICULTY, Difficulty, TextWorldGame
from agents.textworld_agent.policy import BasePolicy
from agents.textworld_agent.text import step_text

__all__ = ["rollout", "mc_value", "mc_label", "label_episode", "LabelledEpisode", "build_labels", "parse_seeds", "main"]


def label_episode(path: str | Path, *, seed: int, episode: int = 0, k: int = 8, max_steps: int = 40,
                  policy: BasePolicy | None = None, rng_seed: int | None = None,
                  max_labelled: int | None = None) -> LabelledEpisode:
    """One labelled base-policy trajectory on the TextWorld game file ``path``
    (:func:`prm_critic.text.envs.labels.label_episode` with the app's policy and step texts)."""
    with TextWorldGame(path, max_steps=max_steps) as env:
        return _lib.label_episode(env, seed=seed, episode=episode, k=k, policy=policy or BasePolicy(),
                                  rng_seed=rng_seed, max_labelled=max_labelled, step_text=step_text)


def build_labels(out: str | Path, seeds: Sequence[int], *, env: str | TextEnvSpec | None = None,
                 difficulty: Difficulty = DEFAULT_DIFFICULTY, cache_dir: str | Path | None = None,
                 policy: BasePolicy | None = None, **kwargs) -> list[LabelledEpisode]:
    """Labels of the games of ``env`` (a spec; default: the cooking games of ``difficulty``, made
    in ``cache_dir``) over ``seeds``: :func:`prm_critic.text.envs.labels.build_labels` with the app's
    policy and step texts (``kwargs``: its other arguments)."""
    if env is not None and (difficulty != DEFAULT_DIFFICULTY or cache_dir is not None):
        raise ValueError(f"env: a spec names its games; got env={str(env)!r} and difficulty / cache_dir too")
    spec = parse_env_spec(env) if env is not None else difficulty.spec(cache_dir)
    return _lib.build_labels(out, spec, seeds, policy=policy or BasePolicy(), step_text=step_text, **kwargs)


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
    ap = argparse.ArgumentParser(description="Monte-Carlo step labels for forkable text games (TextWorld cooking by "
                                             "default; any environment spec with --env)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--env", default=None,
                    help="the games: an environment spec, e.g. 'twx:coin', 'twx:cookingworld', "
                         "'textworld:tw-treasure_hunter?level=5' (default: TextWorld cooking, --recipe/--take)")
    ap.add_argument("--env-module", default=None, help="a module to import first (it registers your environment kind)")
    ap.add_argument("--seeds", default="0-29")
    ap.add_argument("--episodes", type=int, default=1)
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--max-steps", type=int, default=40)
    ap.add_argument("--max-labelled", type=int, default=None)
    ap.add_argument("--siblings", type=int, default=0, help="terminal siblings tried per state (0: none)")
    ap.add_argument("--executor", choices=["local", "ray"], default="local", help="where units are labelled")
    ap.add_argument("--workers", type=int, default=None, help="ray: worker processes (default: one per CPU)")
    ap.add_argument("--address", default=None, help="ray: address of an existing cluster")
    ap.add_argument("--overwrite", action="store_true", help="replace labels of other settings in --out")
    ap.add_argument("--recipe", type=int, default=None,
                    help=f"cooking games: ingredients in the recipe (tw-cooking --recipe; default {DEFAULT_DIFFICULTY.recipe})")
    ap.add_argument("--take", type=int, default=None,
                    help=f"cooking games: ingredients to find (tw-cooking --take; default {DEFAULT_DIFFICULTY.take})")
    a = ap.parse_args(argv)
    if a.env is not None and (a.recipe is not None or a.take is not None):
        raise SystemExit(f"--recipe/--take: apply to the default cooking games, not to --env {a.env}")
    try:
        difficulty = dataclasses.replace(DEFAULT_DIFFICULTY, recipe=DEFAULT_DIFFICULTY.recipe if a.recipe is None else a.recipe,
                                         take=DEFAULT_DIFFICULTY.take if a.take is None else a.take)
    except ValueError as exc:
        raise SystemExit(f"--recipe/--take: {exc}") from None
    try:
        if a.env_module:
            __import__(a.env_module)
        spec = parse_env_spec(a.env) if a.env is not None else difficulty.spec()
        build_labels(a.out, parse_seeds(a.seeds), env=spec, episodes=a.episodes, k=a.k, max_steps=a.max_steps,
                     max_labelled=a.max_labelled, siblings=a.siblings, executor=a.executor, workers=a.workers,
                     address=a.address, env_module=a.env_module, overwrite=a.overwrite)
    except ValueError as exc:
        raise SystemExit(f"error: {exc}") from None
    print((Path(a.out) / "summary.json").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
