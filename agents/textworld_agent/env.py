"""TextWorld cooking games by seed and difficulty: the app's names on the library's TextWorld environment.

Games are made with ``tw-make tw-cooking`` (:func:`prm_critic.text.envs.ensure_tw_game`) into a cache
folder (never committed), one file per ``(difficulty, seed)``: :func:`ensure_game`.

:class:`TextWorldGame` is :class:`prm_critic.text.envs.TextWorldEnv` (a forkable text environment:
reset, step, the admissible commands, won / lost, score, fork by replaying the history, exact for
TextWorld's deterministic games) and :class:`StepResult` is its
:class:`prm_critic.text.envs.TextStepResult`. ``score``, ``max_score`` and ``info``
(``intermediate_reward``) are privileged (an ORACLE), never shown to the agent.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from prm_critic.text.envs.base import TextStepResult as StepResult
from prm_critic.text.envs.textworld import TextWorldEnv as TextWorldGame
from prm_critic.text.envs.registry import TextEnvSpec
from prm_critic.text.envs.textworld import clean_feedback, ensure_tw_game, tw_game_path
from prm_critic.text.envs.textworld import tw_cache_dir as default_cache_dir

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

    def spec(self, cache_dir: str | Path | None = None) -> TextEnvSpec:
        """The environment spec of these games (``textworld:tw-cooking?...``; its seed picks the game)."""
        opts = self.tw_make_options() | ({"cache_dir": str(cache_dir)} if cache_dir is not None else {})
        return TextEnvSpec("textworld", "tw-cooking", tuple(opts.items()))

    def tw_make_options(self) -> dict:
        """The ``tw-make tw-cooking`` options of this difficulty (:func:`prm_critic.text.envs.ensure_tw_game`)."""
        return asdict(self)

    def to_dict(self) -> dict:
        return asdict(self)


DEFAULT_DIFFICULTY = Difficulty(recipe=1, take=1, go=1, open=True, cook=True, cut=False)


def game_path(seed: int, difficulty: Difficulty = DEFAULT_DIFFICULTY, cache_dir: str | Path | None = None) -> Path:
    """Where the game of ``seed`` lives (the library's place for ``tw-cooking`` games of these options,
    so the spec :meth:`Difficulty.spec` names the same file)."""
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"seed: expected an int >= 0, got {seed!r}")
    return tw_game_path("tw-cooking", seed, difficulty.tw_make_options(), cache_dir)


def ensure_game(seed: int, difficulty: Difficulty = DEFAULT_DIFFICULTY, cache_dir: str | Path | None = None,
                *, force: bool = False) -> Path:
    """Return the path of the cooking game of ``seed``, made with ``tw-make tw-cooking`` if missing
    (deterministic in ``(difficulty, seed)``, offline, a few seconds)."""
    game_path(seed, difficulty, cache_dir)  # checks the seed
    return ensure_tw_game("tw-cooking", seed, difficulty.tw_make_options(), cache_dir=cache_dir, force=force)
