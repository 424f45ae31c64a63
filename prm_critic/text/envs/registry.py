"""Text environments by name: a registry of kinds and a spec string that names a game.

A spec names a kind of environment, a game of that kind and its options; a seed picks one game::

    "twx:coin"                                    TextWorldExpress Coin (seed: the game's seed)
    "twx:cookingworld?numLocations=3"             options become the engine's game parameters
    "textworld:tw-treasure_hunter?level=5"        made by tw-make tw-treasure_hunter --level 5 --seed S
    "textworld:tw-cooking?recipe=1&take=1&cook=true&open=true&split=train"
    "textworld:/path/to/game.z8"                  one game file (seed 0 only)

A ``textworld`` spec's option ``cache_dir`` is where its games are made (default
``$PRM_CRITIC_CACHE/textworld`` or ``./.cache/textworld``), not a ``tw-make`` option.

Option values: integers and ``true`` / ``false`` are read as such, anything else is a string.

Built-in kinds: ``textworld`` (:class:`~prm_critic.text.envs.textworld.TextWorldEnv`) and ``twx``
(:class:`~prm_critic.text.envs.twx.TWXEnv`). Your own environment is a kind you register::

    register_text_env("maze", lambda game, seed, options, max_steps: MazeEnv(game, seed, max_steps=max_steps))
    env = make_text_env("maze:small", seed=3, max_steps=40)

and every tool that takes a spec (the labeller, the searches' runner, their command lines with
``--env-module your.module``) plays it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from prm_critic import validate
from prm_critic.text.envs.base import TextEnv

__all__ = ["TextEnvSpec", "register_text_env", "text_env_kinds", "make_text_env", "parse_env_spec"]

#: make(game, seed, options, max_steps) -> TextEnv
EnvMaker = Callable[[str, int, Mapping[str, Any], int], TextEnv]

_KINDS: dict[str, tuple[EnvMaker, str]] = {}
_NAME = re.compile(r"[a-z][a-z0-9_-]*")


def register_text_env(name: str, make: EnvMaker, *, describe: str = "", replace: bool = False) -> None:
    """Register a kind of text environment: ``make(game, seed, options, max_steps) -> TextEnv``.

    A name already taken is refused unless ``replace=True``.
    """
    validate.check_str("name", name)
    if not _NAME.fullmatch(name):
        raise validate.ArgumentError(f"name: expected lower-case letters, digits, '_' or '-' starting with a letter, "
                                     f"got {name!r}")
    if not callable(make):
        raise validate.ArgumentError(f"make: expected a callable make(game, seed, options, max_steps) -> TextEnv, "
                                     f"got {type(make).__name__} {make!r}")
    if name in _KINDS and not replace:
        raise validate.ArgumentError(f"name: text environment kind {name!r} is already registered "
                                     f"(pass replace=True to replace it)")
    _KINDS[name] = (make, str(describe))


def text_env_kinds() -> dict[str, str]:
    """The registered kinds and what their ``game`` names."""
    return {k: d for k, (_, d) in sorted(_KINDS.items())}


def _value(text: str) -> Any:
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    return text


@dataclass(frozen=True)
class TextEnvSpec:
    """A kind of environment, a game of that kind and its options (module doc).

    ``str(spec)`` gives the spec string back (options sorted); :attr:`tag` is a folder-safe name.
    """

    kind: str
    game: str
    options: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        validate.check_choice("kind", self.kind, sorted(_KINDS))
        if not isinstance(self.game, str) or not self.game:
            raise validate.ArgumentError(f"game: expected a non-empty game name, got {self.game!r}")
        opts = tuple(sorted((str(k), v) for k, v in dict(self.options).items()))
        object.__setattr__(self, "options", opts)

    def __str__(self) -> str:
        query = "&".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in self.options)
        return f"{self.kind}:{self.game}" + (f"?{query}" if query else "")

    @property
    def tag(self) -> str:
        """A folder-safe name of the spec (``twx-coin``, ``textworld-tw-treasure_hunter-level5``)."""
        game = Path(self.game).stem if self.kind == "textworld" and not self.game.startswith("tw-") else self.game
        parts = [self.kind, game] + [f"{k}{str(v).lower() if isinstance(v, bool) else v}" for k, v in self.options
                                     if k != "cache_dir"]
        return re.sub(r"[^A-Za-z0-9_.=-]+", "_", "-".join(parts))

    def make(self, seed: int, *, max_steps: int = 50) -> TextEnv:
        """The environment of this spec's game ``seed``."""
        seed = validate.check_int("seed", seed, minimum=0)
        env = _KINDS[self.kind][0](self.game, seed, dict(self.options), validate.check_int("max_steps", max_steps,
                                                                                            minimum=1))
        if not isinstance(env, TextEnv):
            raise TypeError(f"text environment kind {self.kind!r}: make() returned {type(env).__name__}, "
                            f"expected a TextEnv")
        return env


def parse_env_spec(spec: str | TextEnvSpec) -> TextEnvSpec:
    """``"kind:game?key=value&flag=true"`` -> :class:`TextEnvSpec` (module doc)."""
    if isinstance(spec, TextEnvSpec):
        return spec
    if not isinstance(spec, str) or ":" not in spec:
        raise validate.ArgumentError(f"env: expected 'kind:game[?key=value&...]' with kind one of "
                                     f"{sorted(_KINDS)}, got {spec!r}")
    kind, rest = spec.split(":", 1)
    game, _, query = rest.partition("?")
    options: dict[str, Any] = {}
    for part in filter(None, query.split("&")):
        key, eq, value = part.partition("=")
        if not eq or not key:
            raise validate.ArgumentError(f"env: expected options as key=value, got {part!r} in {spec!r}")
        options[key] = _value(value)
    return TextEnvSpec(kind, game, tuple(options.items()))


def make_text_env(spec: str | TextEnvSpec, seed: int = 0, *, max_steps: int = 50) -> TextEnv:
    """The environment of ``spec``'s game ``seed`` (module doc)."""
    return parse_env_spec(spec).make(seed, max_steps=max_steps)


def _make_textworld(game: str, seed: int, options: Mapping[str, Any], max_steps: int) -> TextEnv:
    from prm_critic.text.envs.textworld import TextWorldEnv, ensure_tw_game

    if game.startswith("tw-"):
        options = dict(options)
        cache_dir = options.pop("cache_dir", None)
        return TextWorldEnv(ensure_tw_game(game, seed, options, cache_dir=cache_dir), max_steps=max_steps)
    if seed != 0 or options:
        raise validate.ArgumentError(f"env: the game file {game!r} is one game: expected seed 0 and no options, got "
                                     f"seed {seed} and options {dict(options)}")
    return TextWorldEnv(game, max_steps=max_steps)


def _make_twx(game: str, seed: int, options: Mapping[str, Any], max_steps: int) -> TextEnv:
    from prm_critic.text.envs.twx import TWXEnv

    params = ",".join(f"{k}={int(v) if isinstance(v, bool) else v}" for k, v in sorted(options.items()))
    return TWXEnv(game, seed, params=params, max_steps=max_steps)


register_text_env("textworld", _make_textworld,
                  describe="a tw-make challenge ('tw-cooking', 'tw-treasure_hunter', 'tw-coin_collector', ...; "
                           "options are tw-make's) or a game file")
register_text_env("twx", _make_twx, describe="a TextWorldExpress game: cookingworld, twc, coin, mapreader, "
                                            "arithmetic, sorting, simonsays, peckingorder (options: game parameters)")
