"""A user's own forkable text environment, written for the tests of prm_critic.text.envs (not a fake
of a real environment: it is the kind of small game a user plugs in)."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest

from prm_critic.text.envs import TextEnv, TextStepResult


def need_twx() -> None:
    """Skip without TextWorldExpress or a Java runtime, naming which; CI (``PRM_CRITIC_REQUIRE_JAVA=1``,
    ``.ci/run``) fails instead."""
    pytest.importorskip("textworld_express", reason="textworld-express is not installed (the agents extra)")
    if shutil.which("java") is None:
        why = "no Java runtime on PATH: TextWorldExpress's engine needs one (.ci/run installs it)"
        if os.environ.get("PRM_CRITIC_REQUIRE_JAVA") == "1":
            pytest.fail(why + "; PRM_CRITIC_REQUIRE_JAVA=1 asks for it")
        pytest.skip(why)


class Corridor(TextEnv):
    """A user's own environment: rooms 0..n-1 along a corridor; ``forward`` / ``back`` move, ``take
    key`` in the key's room picks it up, ``open exit`` in the last room wins with the key, ``jump``
    (into the pit in the pit's room) loses. The key's and the pit's rooms come from the seed."""

    def __init__(self, seed: int = 0, *, n: int = 5, max_steps: int = 30, copyable: bool = False):
        super().__init__(max_steps=max_steps)
        self.seed, self.n, self.copyable = seed, n, copyable
        rng = np.random.default_rng(seed)
        self.key_room, self.pit_room = (int(x) for x in rng.choice(n - 1, size=2, replace=False))
        self.room, self.has_key = 0, False

    def _obs(self, command: str, text: str, won: bool = False, lost: bool = False) -> TextStepResult:
        acts = ["forward", "back", "look"] + (["take key"] if self.room == self.key_room and not self.has_key else [])
        acts += ["jump"] if self.room == self.pit_room else []
        acts += ["open exit"] if self.room == self.n - 1 else []
        return TextStepResult(command, f"{text} You are in room {self.room}.", tuple(acts), won or lost, won, lost,
                              score=float(self.has_key) + float(won), max_score=2.0)

    def _reset(self):
        self.room, self.has_key = 0, False
        return self._obs("", "A long corridor.")

    def _step(self, command):
        if command == "forward":
            self.room = min(self.room + 1, self.n - 1)
        elif command == "back":
            self.room = max(self.room - 1, 0)
        elif command == "take key" and self.room == self.key_room:
            self.has_key = True
            return self._obs(command, "You take the key.")
        elif command == "jump" and self.room == self.pit_room:
            return self._obs(command, "You fall into the pit.", lost=True)
        elif command == "open exit" and self.room == self.n - 1:
            if self.has_key:
                return self._obs(command, "The exit opens.", won=True)
            return self._obs(command, "It is locked.")
        return self._obs(command, f"You {command}.")

    def _spawn(self):
        return Corridor(self.seed, n=self.n, max_steps=self.max_steps, copyable=self.copyable)

    def _copy_state(self, other):
        if not self.copyable:
            return False
        other.room, other.has_key = self.room, self.has_key
        return True

    def winning_path(self) -> list[str]:
        return ["forward"] * self.key_room + ["take key"] + ["forward"] * (self.n - 1 - self.key_room) + ["open exit"]
