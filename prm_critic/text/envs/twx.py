"""TextWorldExpress games as forkable text environments: any game by name.

TextWorldExpress (``pip install textworld-express``; its engine is a Java program, so it needs a
Java runtime 8+) has eight games: ``cookingworld``, ``twc``, ``coin``, ``mapreader``,
``arithmetic``, ``sorting``, ``simonsays``, ``peckingorder`` (:data:`TWX_GAMES`). Each game's seeds
come in three folds: train ``0-999``, dev ``10000-10999``, test ``20000-20999``; the fold of a seed
is read from its range (:func:`twx_fold`).

:class:`TWXEnv` plays one ``(game, seed)``. One Java process serves an environment and all its
forks: a fork is a second game object in the same process, reset to the same seed and replaying
the history (the engine is deterministic given the seed; exact, tested), a few milliseconds instead
of the seconds a new Java process takes. Close the environment you made first only when you are
done with its forks (they share its process).

What the agent sees: the observation text and the valid actions. ``score`` (in ``[0, 1]``) and
``info`` (``reward``, the score's change; ``task``, the task description) are privileged;
:attr:`TWXEnv.walkthrough` is the game's gold path (PRIVILEGED).
"""

from __future__ import annotations

import shutil
from typing import Any

from prm_critic import validate
from prm_critic._optional import require
from prm_critic.text.envs.base import TextEnv, TextStepResult

__all__ = ["TWXEnv", "TWX_GAMES", "TWX_FOLDS", "twx_fold", "JavaMissingError"]

TWX_GAMES = ("cookingworld", "twc", "coin", "mapreader", "arithmetic", "sorting", "simonsays", "peckingorder")
#: fold -> the range of its seeds
TWX_FOLDS = {"train": range(0, 1000), "dev": range(10000, 11000), "test": range(20000, 21000)}
#: the engine's own step limit, above any ``max_steps`` (the base class ends episodes)
_ENGINE_STEP_LIMIT = 100_000


class JavaMissingError(RuntimeError):
    """No Java runtime to run TextWorldExpress's engine."""


def twx_fold(seed: int) -> str:
    """The fold a TextWorldExpress seed belongs to (``"train"``, ``"dev"`` or ``"test"``)."""
    seed = validate.check_int("seed", seed, minimum=0)
    for fold, seeds in TWX_FOLDS.items():
        if seed in seeds:
            return fold
    raise validate.ArgumentError(f"seed: expected a TextWorldExpress seed in train 0-999, dev 10000-10999 or "
                                 f"test 20000-20999, got {seed}")


def _launch(max_steps: int) -> Any:
    if shutil.which("java") is None:
        raise JavaMissingError("TextWorldExpress needs a Java runtime (8 or newer) on PATH, found none; install one, "
                               "e.g. 'apt-get install default-jre-headless'")
    twx = require("textworld_express", "agents")
    return twx.TextWorldExpressEnv(envStepLimit=_ENGINE_STEP_LIMIT)


def _second_game(engine: Any) -> Any:
    """A second game object on ``engine``'s Java process: the Python side's settings, its own run
    history and game; closing or collecting it leaves the process running (the engine class's
    ``__del__`` would stop it)."""
    cls = _SECOND.get(type(engine))
    if cls is None:
        cls = _SECOND[type(engine)] = type("SecondGame", (type(engine),), {"__del__": lambda self: None,
                                                                          "close": lambda self: None})
    eng: Any = object.__new__(cls)
    eng.__dict__.update(engine.__dict__)
    eng.runHistory, eng.lastStepScore = [], 0
    eng.server = engine._gateway.jvm.textworldexpress.runtime.PythonInterface()
    return eng


_SECOND: dict[type, type] = {}


class TWXEnv(TextEnv):
    """One TextWorldExpress game and seed as a :class:`~prm_critic.text.envs.base.TextEnv`.

    Args:
        game: a name in :data:`TWX_GAMES`.
        seed: the game seed; its fold is read from its range (:func:`twx_fold`).
        params: the engine's game parameters (e.g. ``"numLocations=5,includeDoors=1"``; ``""``:
            the game's defaults).
        max_steps: commands per episode at most.
    """

    def __init__(self, game: str, seed: int, *, params: str = "", max_steps: int = 50, _engine: Any = None):
        super().__init__(max_steps=max_steps)
        self.game = validate.check_choice("game", game, TWX_GAMES)
        self.seed = validate.check_int("seed", seed, minimum=0)
        self.fold = twx_fold(self.seed)
        if not isinstance(params, str):
            raise validate.ArgumentError(f"params: expected a str of game parameters, got {type(params).__name__} "
                                         f"{params!r}")
        self.params = params
        self.walkthrough: list[str] = []
        self._owner = _engine is None
        self._loaded = False
        self._engine = _launch(self.max_steps) if _engine is None else _engine

    def __repr__(self) -> str:
        return f"TWXEnv({self.game!r}, {self.seed}, params={self.params!r}, max_steps={self.max_steps})"

    def _result(self, command: str, obs: str, info: dict) -> TextStepResult:
        return TextStepResult(
            command=command, feedback=" ".join(str(obs).split()), admissible=tuple(info["validActions"]),
            done=bool(info["tasksuccess"] or info["taskfailure"]), won=bool(info["tasksuccess"]),
            lost=bool(info["taskfailure"]) and not bool(info["tasksuccess"]), score=float(info["score"]),
            max_score=1.0, info={"reward": float(info.get("reward", 0.0)), "task": str(info.get("taskDescription", ""))})

    def _reset(self) -> TextStepResult:
        # the first reset loads the game and makes its gold path (about 90 ms); later ones regenerate
        # the same seed only (under 1 ms): forks and Monte-Carlo rollouts reset often
        first = not self._loaded
        if first:
            obs, info = self._engine.reset(seed=self.seed, gameFold=self.fold, gameName=self.game,
                                           gameParams=self.params, generateGoldPath=True)
            self.walkthrough = list(self._engine.getGoldActionSequence())
            self._loaded = True
        else:
            obs, info = self._engine.reset(seed=self.seed, gameFold=self.fold, generateGoldPath=False)
        return self._result("", obs, info)

    def _step(self, command: str) -> TextStepResult:
        obs, _, _, info = self._engine.step(command)
        return self._result(command, obs, info)

    def _spawn(self) -> "TWXEnv":
        """A second game object in the same Java process (module doc)."""
        return TWXEnv(self.game, self.seed, params=self.params, max_steps=self.max_steps,
                      _engine=_second_game(self._engine))

    def close(self) -> None:
        """Stop the Java process (only the environment that started it; a fork holds nothing)."""
        if self._owner and self._engine is not None:
            try:
                self._engine.close()
            except Exception:  # pragma: no cover - the process is already gone
                pass
            self._engine = None
