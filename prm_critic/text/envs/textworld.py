"""TextWorld games as forkable text environments: any game file ``tw-make`` writes.

:class:`TextWorldEnv` plays one game file (``.z8`` / ``.ulx``) through ``textworld.start``. TextWorld
games are deterministic, so a fork is a fresh session of the same file replaying the history
(:meth:`~prm_critic.text.envs.base.TextEnv.fork`; exact, tested). :func:`ensure_tw_game` makes a
game with ``tw-make <challenge> --seed S`` into a cache folder, offline, deterministically in its
arguments (``tw-cooking``, ``tw-treasure_hunter``, ``tw-coin_collector``, ``tw-simple``, ...).

What the agent sees: the feedback (:func:`clean_feedback`: no score banner, no title art) and the
admissible commands. ``score``, ``max_score`` and ``info`` (``intermediate_reward``, ``moves``,
``objective``) are privileged; :attr:`TextWorldEnv.walkthrough` (the winning commands from the
start) too.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Mapping

from prm_critic import validate
from prm_critic._optional import require
from prm_critic.text.envs.base import TextEnv, TextStepResult

__all__ = ["TextWorldEnv", "clean_feedback", "ensure_tw_game", "tw_game_path", "tw_make_args", "tw_cache_dir"]

_LETTERS = re.compile(r"[A-Za-z]{2,}")
_BANNER = re.compile(r"(-=\s*[^=]*?=-)\s*-?\d+/\d+")


def clean_feedback(text: str) -> str:
    """Game feedback as plain text on one line.

    Drops the ``>`` prompt, the status banner (``-= Kitchen =-1/12``: room, score and moves -- the
    score is privileged, so it never reaches the agent or critic) and the ASCII-art title of the
    intro; collapses whitespace.
    """
    text = _BANNER.sub(r"\1", text)
    lines = []
    for line in text.splitlines():
        s = line.strip().lstrip(">").strip()
        if not s:
            continue
        if "$$" in s or len(_LETTERS.findall(s)) == 0:
            continue  # the intro's ASCII-art title (no words)
        lines.append(s)
    words = " ".join(lines).split()
    while words and not any(ch.isalnum() for ch in words[0]):
        words.pop(0)  # leftovers of the title art
    return " ".join(words)


_INFOS = dict(admissible_commands=True, won=True, lost=True, objective=True, intermediate_reward=True,
              score=True, max_score=True, feedback=True, moves=True, policy_commands=True)


class TextWorldEnv(TextEnv):
    """One TextWorld game file as a :class:`~prm_critic.text.envs.base.TextEnv`.

    Args:
        path: a game file written by ``tw-make`` (see :func:`ensure_tw_game`).
        max_steps: commands per episode at most.

    Besides the protocol: ``objective`` (the goal text) and ``walkthrough`` (PRIVILEGED: the
    winning commands from the start, for tests and oracles), set by :meth:`reset`.
    """

    def __init__(self, path: str | os.PathLike, *, max_steps: int = 50):
        super().__init__(max_steps=max_steps)
        self.path = validate.check_file("path", path, what="TextWorld game file (make one with ensure_tw_game)")
        tw = require("textworld")
        self._env = tw.start(str(self.path), request_infos=tw.EnvInfos(**_INFOS))
        self.objective = ""
        self.walkthrough: list[str] = []

    def __repr__(self) -> str:
        return f"TextWorldEnv({str(self.path)!r}, max_steps={self.max_steps})"

    def _result(self, command: str, state: Mapping[str, Any], done: bool) -> TextStepResult:
        return TextStepResult(
            command=command, feedback=clean_feedback(state["feedback"] or ""),
            admissible=tuple(state["admissible_commands"] or ()), done=bool(done),
            won=bool(state["won"]), lost=bool(state["lost"]), score=float(state["score"] or 0),
            max_score=float(state["max_score"] or 0),
            info={"intermediate_reward": float(state["intermediate_reward"] or 0.0),
                  "moves": int(state["moves"] or 0), "objective": str(state["objective"] or "")})

    def _reset(self) -> TextStepResult:
        state = self._env.reset()
        self.objective = str(state["objective"] or "")
        self.walkthrough = list(state["policy_commands"] or [])
        return self._result("", state, False)

    def _step(self, command: str) -> TextStepResult:
        state, _, done = self._env.step(command)
        return self._result(command, state, bool(done))

    def _spawn(self) -> "TextWorldEnv":
        return TextWorldEnv(self.path, max_steps=self.max_steps)

    def close(self) -> None:
        try:
            self._env.close()
        except Exception:  # pragma: no cover - closing twice
            pass


def tw_cache_dir() -> Path:
    """``$PRM_CRITIC_CACHE/textworld`` or ``./.cache/textworld``."""
    root = os.environ.get("PRM_CRITIC_CACHE")
    return (Path(root) if root else Path.cwd() / ".cache") / "textworld"


def tw_make_args(challenge: str, options: Mapping[str, Any]) -> list[str]:
    """``tw-make`` arguments of a challenge: ``{"recipe": 2, "cook": True, "cut": False}`` ->
    ``[challenge, "--recipe", "2", "--cook"]`` (``True``: a flag; ``False`` / ``None``: left out)."""
    validate.check_str("challenge", challenge)
    if not challenge.startswith("tw-"):
        raise validate.ArgumentError(f"challenge: expected a tw-make challenge name such as 'tw-cooking', "
                                     f"'tw-treasure_hunter' or 'tw-coin_collector', got {challenge!r}")
    args = [challenge]
    for key in sorted(options):
        value = options[key]
        if not re.fullmatch(r"[a-z][a-z0-9_-]*", str(key)):
            raise validate.ArgumentError(f"options: expected tw-make option names like 'recipe', got {key!r}")
        if key in ("seed", "output"):
            raise validate.ArgumentError(f"options: {key!r} is set by ensure_tw_game, not an option")
        if value is True:
            args.append(f"--{key}")
        elif value is not False and value is not None:
            args += [f"--{key}", str(value)]
    return args


def _tw_make() -> list[str]:
    exe = Path(sys.executable).parent / "tw-make"
    if exe.exists():
        return [str(exe)]
    found = shutil.which("tw-make")
    if found:
        return [found]
    require("textworld")
    raise ImportError('tw-make not found; install TextWorld with: pip install "prm-critic[agents]"')


def tw_game_path(challenge: str, seed: int, options: Mapping[str, Any] | None = None,
                 cache_dir: str | os.PathLike | None = None) -> Path:
    """Where :func:`ensure_tw_game` keeps a game: ``<cache>/games/<challenge and options>/game_<seed>.z8``."""
    options = dict(options or {})
    tag = "-".join([challenge[3:]] + [f"{k}{'' if v is True else v}" for k, v in sorted(options.items())
                                      if v is not False and v is not None])
    cache = Path(cache_dir) if cache_dir is not None else tw_cache_dir()
    return cache / "games" / tag / f"game_{seed}.z8"


def ensure_tw_game(challenge: str, seed: int, options: Mapping[str, Any] | None = None, *,
                   path: str | os.PathLike | None = None, cache_dir: str | os.PathLike | None = None,
                   force: bool = False) -> Path:
    """The game file of ``tw-make <challenge> <options> --seed <seed>``, made if missing.

    Args:
        challenge: a ``tw-make`` challenge (``"tw-cooking"``, ``"tw-treasure_hunter"``, ...).
        seed: the game seed (``>= 0``).
        options: the challenge's options (:func:`tw_make_args`), e.g. ``{"level": 5}``.
        path: where the game goes (default: ``<cache>/games/<challenge+options>/game_<seed>.z8``).
        force: make it again even when it is there.

    Offline, a few seconds; written to a temporary folder and moved into place, so a kill never
    leaves half a game. A challenge that cannot make this game fails with ``tw-make``'s message.
    """
    seed = validate.check_int("seed", seed, minimum=0)
    options = dict(options or {})
    args = tw_make_args(challenge, options)
    out_path = Path(path) if path is not None else tw_game_path(challenge, seed, options, cache_dir)
    if out_path.exists() and out_path.with_suffix(".json").exists() and not force:
        return out_path
    out_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_path.parent / f".tmp_{seed}_{os.getpid()}"
    tmp.mkdir(exist_ok=True)
    try:
        out = tmp / out_path.name
        cmd = _tw_make() + args + ["--seed", str(seed), "--output", str(out), "-f", "--silent"]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0 or not out.exists():
            raise RuntimeError(f"tw-make {' '.join(args)} --seed {seed} failed: {proc.stderr.strip()[-500:]}")
        for f in tmp.iterdir():  # the game file last, so its presence means the game is complete
            if f.suffix != out_path.suffix:
                os.replace(f, out_path.parent / f.name)
        os.replace(out, out_path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out_path
