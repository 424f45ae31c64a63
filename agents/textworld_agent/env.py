"""TextWorld cooking games: generation by seed, a small game session, and forking.

Games are generated locally with ``tw-make tw-cooking`` into a cache folder (never committed), one
file per ``(difficulty, seed)``; :func:`ensure_game` (re)generates a missing one deterministically.

:class:`TextWorldGame` wraps ``textworld.start`` and keeps the command history. Forking a game
state (needed for Monte-Carlo labels and search) is done by **replaying** the command history from
``reset()``: TextWorld games are deterministic, so ``replay(history)`` reproduces the same
observation (tested). ``env.copy()`` of the underlying Inform7 env was measured too (see
``benchmarks/agents/fork_check.py``); replay is what the package uses.

What an agent (and the learned critic) sees: the objective, the feedback text of each command, and
the admissible commands. ``intermediate_reward`` / ``score`` are privileged (an ORACLE); they are
kept in :class:`StepResult` for the oracle baseline and for labelling, never shown to the agent.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, asdict
from pathlib import Path
from typing import Sequence

from prm_critic._optional import require

__all__ = [
    "Difficulty",
    "DEFAULT_DIFFICULTY",
    "default_cache_dir",
    "game_path",
    "ensure_game",
    "StepResult",
    "TextWorldGame",
    "clean_feedback",
]


@dataclass(frozen=True)
class Difficulty:
    """``tw-make tw-cooking`` settings.

    Attributes:
        recipe: number of ingredients in the recipe (>= 1).
        take: number of ingredients to find (0 <= take <= recipe).
        go: number of rooms (1, 6, 9 or 12).
        open, cook, cut: skills needed.
        split: food/preparation split (``train``, ``valid`` or ``test``).
    """

    recipe: int = 2
    take: int = 1
    go: int = 1
    open: bool = True
    cook: bool = True
    cut: bool = True
    split: str = "train"

    def __post_init__(self):
        if not isinstance(self.recipe, int) or self.recipe < 1:
            raise ValueError(f"recipe: expected an int >= 1, got {self.recipe!r}")
        if not isinstance(self.take, int) or not 0 <= self.take <= self.recipe:
            raise ValueError(f"take: expected an int in [0, recipe={self.recipe}], got {self.take!r}")
        if self.go not in (1, 6, 9, 12):
            raise ValueError(f"go: expected one of 1, 6, 9, 12, got {self.go!r}")
        if self.split not in ("train", "valid", "test"):
            raise ValueError(f"split: expected 'train', 'valid' or 'test', got {self.split!r}")

    @property
    def tag(self) -> str:
        """Folder name for games of this difficulty, e.g. ``r2t1g1-open-cook-cut-train``."""
        skills = [s for s in ("open", "cook", "cut") if getattr(self, s)]
        return "-".join([f"r{self.recipe}t{self.take}g{self.go}", *skills, self.split])

    def tw_make_args(self) -> list[str]:
        args = ["tw-cooking", "--recipe", str(self.recipe), "--take", str(self.take), "--go", str(self.go)]
        args += [f"--{s}" for s in ("open", "cook", "cut") if getattr(self, s)]
        return args + ["--split", self.split]

    def to_dict(self) -> dict:
        return asdict(self)


DEFAULT_DIFFICULTY = Difficulty(recipe=1, take=1, go=1, open=True, cook=True, cut=False)


def default_cache_dir() -> Path:
    """``$PRM_CRITIC_CACHE/textworld`` or ``./.cache/textworld`` (git-ignored)."""
    root = os.environ.get("PRM_CRITIC_CACHE")
    return (Path(root) if root else Path.cwd() / ".cache") / "textworld"


def game_path(seed: int, difficulty: Difficulty = DEFAULT_DIFFICULTY, cache_dir: str | Path | None = None) -> Path:
    """Where the game of ``seed`` lives: ``<cache>/games/<difficulty.tag>/game_<seed>.z8``."""
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"seed: expected an int >= 0, got {seed!r}")
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    return cache / "games" / difficulty.tag / f"game_{seed}.z8"


def _tw_make() -> list[str]:
    exe = Path(sys.executable).parent / "tw-make"
    if exe.exists():
        return [str(exe)]
    found = shutil.which("tw-make")
    if found:
        return [found]
    require("textworld")
    raise ImportError('tw-make not found; install TextWorld with: pip install "prm-critic[agents]"')


def ensure_game(seed: int, difficulty: Difficulty = DEFAULT_DIFFICULTY, cache_dir: str | Path | None = None,
                *, force: bool = False) -> Path:
    """Return the path of the game of ``seed``, generating it with ``tw-make`` if missing.

    Generation is deterministic in ``(difficulty, seed)`` and offline (a few seconds). The game is
    written to a temporary folder and moved into place, so a kill never leaves half a game.
    """
    path = game_path(seed, difficulty, cache_dir)
    if path.exists() and path.with_suffix(".json").exists() and not force:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".tmp_{seed}_{os.getpid()}"
    tmp.mkdir(exist_ok=True)
    try:
        out = tmp / path.name
        cmd = _tw_make() + difficulty.tw_make_args() + ["--seed", str(seed), "--output", str(out), "-f", "--silent"]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0 or not out.exists():
            raise RuntimeError(f"tw-make failed for seed {seed} ({difficulty.tag}): {proc.stderr.strip()[-500:]}")
        for f in tmp.iterdir():  # .z8 last so its presence means the game is complete
            if f.suffix != ".z8":
                os.replace(f, path.parent / f.name)
        os.replace(out, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return path


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


@dataclass
class StepResult:
    """What one command did.

    ``feedback``, ``admissible`` and ``done`` are what the agent sees; ``score``, ``won``, ``lost``
    and ``intermediate_reward`` are game internals (ORACLE information, for labels and the oracle
    baseline only).
    """

    command: str
    feedback: str
    admissible: list[str]
    done: bool
    won: bool
    lost: bool
    score: int
    max_score: int
    intermediate_reward: float = 0.0
    moves: int = 0
    objective: str = ""


_INFOS = dict(admissible_commands=True, won=True, lost=True, objective=True, intermediate_reward=True,
              score=True, max_score=True, feedback=True, moves=True, policy_commands=True)


class TextWorldGame:
    """One TextWorld game session with a command history.

    Args:
        path: a ``.z8`` game file (see :func:`ensure_game`).
        max_steps: episode length limit (``done`` after this many commands).

    ``reset()`` -> :class:`StepResult` of the intro; ``step(command)`` -> :class:`StepResult`;
    ``history`` is the list of commands since reset; ``fork()`` returns a new session at the same
    state (by replaying the history); ``replay(commands)`` resets and plays ``commands``.
    """

    def __init__(self, path: str | Path, *, max_steps: int = 50):
        path = Path(path)
        if not path.exists():
            raise FileNotFoundError(f"path: game file {str(path)!r} does not exist (generate it with ensure_game)")
        if not isinstance(max_steps, int) or max_steps < 1:
            raise ValueError(f"max_steps: expected an int >= 1, got {max_steps!r}")
        tw = require("textworld")
        self.path = path
        self.max_steps = max_steps
        self._env = tw.start(str(path), request_infos=tw.EnvInfos(**_INFOS))
        self.history: list[str] = []
        self.objective = ""
        self.intro = ""
        #: the winning command sequence from the start (PRIVILEGED: tests and oracles only)
        self.walkthrough: list[str] = []
        self.last: StepResult | None = None
        self._started = False

    def _result(self, command: str, state, score_delta_done: bool) -> StepResult:
        done = bool(state["won"] or state["lost"] or score_delta_done or len(self.history) >= self.max_steps)
        return StepResult(
            command=command,
            feedback=clean_feedback(state["feedback"] or ""),
            admissible=sorted(state["admissible_commands"] or []),
            done=done,
            won=bool(state["won"]),
            lost=bool(state["lost"]),
            score=int(state["score"] or 0),
            max_score=int(state["max_score"] or 0),
            intermediate_reward=float(state["intermediate_reward"] or 0.0),
            moves=int(state["moves"] or 0),
            objective=str(state["objective"] or ""),
        )

    def reset(self) -> StepResult:
        state = self._env.reset()
        self.history = []
        self._started = True
        self.objective = str(state["objective"] or "")
        res = self._result("", state, False)
        self.intro = res.feedback
        self.walkthrough = list(state["policy_commands"] or [])
        self.last = res
        return res

    def step(self, command: str) -> StepResult:
        if not self._started:
            raise RuntimeError("step() called before reset()")
        if not isinstance(command, str) or not command.strip():
            raise ValueError(f"command: expected a non-empty string, got {command!r}")
        if self.last is not None and self.last.done:
            raise RuntimeError(f"command: the episode is over (won={self.last.won}, lost={self.last.lost}); call reset()")
        self.history.append(command)
        state, _, done = self._env.step(command)
        res = self._result(command, state, bool(done))
        self.last = res
        return res

    def replay(self, commands: Sequence[str]) -> StepResult:
        """Reset and play ``commands``; return the last result (the intro if ``commands`` is empty)."""
        res = self.reset()
        for c in commands:
            res = self.step(c)
        return res

    def fork(self) -> "TextWorldGame":
        """A new, independent session at the same state (replays this session's history)."""
        other = TextWorldGame(self.path, max_steps=self.max_steps)
        other.replay(list(self.history))
        return other

    def close(self) -> None:
        try:
            self._env.close()
        except Exception:  # pragma: no cover
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
