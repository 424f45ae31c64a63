"""The searches' ``expand`` over a forkable text environment (:mod:`prm_critic.text.envs`).

:class:`TextEnvExpand` turns a :class:`~prm_critic.text.envs.TextEnv` and a policy
(:class:`~prm_critic.text.envs.TextPolicy`) into what :func:`~prm_critic.langgraph.build_beam_search_graph`
and :class:`~prm_critic.langgraph.MCTSSearch` take::

    ex = TextEnvExpand(make_text_env("twx:coin", seed=3, max_steps=40), policy, seed=0)
    graph = build_beam_search_graph(ex, critic, is_terminal=ex.is_won, is_lost=ex.is_lost, ...)
    graph.compile().invoke({"prompt": ex.prompt, "root": ex.root})

An env state is plain data (``{"commands", "feedbacks", "admissible", "won", "lost", "done"}``), so
checkpointers can store it. ``expand(state, history, k)`` asks the policy for ``k`` distinct
commands and runs each on the simulator (a replay of ``state["commands"]``, then the command); a
finished game proposes nothing.

Determinism: the beam runs its ``expand`` calls in parallel threads, in an order that changes from
run to run. Each call therefore draws from its own generator, seeded by ``(seed, the state's
commands)``, never from a shared one: under one ``seed`` (with a deterministic policy, environment
and critic) a search takes the same path however its threads interleave. The simulator is used by
one call at a time (a lock).

Counts: ``tool_calls`` (commands executed, look-ahead included; replays are bookkeeping) and
``lost`` (proposals that lost the game).
"""

from __future__ import annotations

import hashlib
import threading
from typing import Any, Callable

import numpy as np

from prm_critic import validate
from prm_critic.text.envs.base import TextEnv, TextPolicy
from prm_critic.text.envs.labels import act_step_text

__all__ = ["TextEnvExpand"]


def _state_seed(seed: int, commands: list[str]) -> list[int]:
    digest = hashlib.sha256("\x1f".join(commands).encode()).digest()
    return [seed, int.from_bytes(digest[:8], "little")]


class TextEnvExpand:
    """``expand(env_state, history, k)`` over a text environment (module doc).

    Args:
        env: the simulator (reset here; its ``max_steps`` ends every path).
        policy: proposes commands (``policy.sample(admissible, history, rng, n=k, distinct=True, ...)``).
        seed: seeds every call's generator with the state's commands (an int in ``[0, 2**63)``).
        step_text: ``step_text(command, feedback)``, the critic's text of a step.

    Attributes:
        prompt: the intro (the search's ``prompt``); root: the initial env state.
    """

    def __init__(self, env: TextEnv, policy: TextPolicy, seed: int, *,
                 step_text: Callable[[str, str], str] = act_step_text):
        if not isinstance(env, TextEnv):
            raise validate.ArgumentError(f"env: expected a TextEnv, got {type(env).__name__} {env!r}")
        if not isinstance(policy, TextPolicy):
            raise validate.ArgumentError(f"policy: expected an object with sample(admissible, history, rng, n, ...), "
                                         f"got {type(policy).__name__} {policy!r}")
        self.seed = validate.check_int("seed", seed, minimum=0)
        self.env, self.policy, self.step_text = env, policy, step_text
        self._lock = threading.Lock()
        intro = env.reset()
        self.prompt = intro.feedback
        self.root = {"commands": [], "feedbacks": [], "admissible": list(intro.admissible), "won": intro.won,
                     "lost": intro.lost, "done": intro.done}
        self.tool_calls = 0
        self.lost = 0

    def rng(self, commands: list[str]) -> np.random.Generator:
        """The generator of the call that expands the state after ``commands``."""
        return np.random.default_rng(_state_seed(self.seed, list(commands)))

    def __call__(self, state: dict, history: tuple, k: int) -> list[tuple[str, dict]]:
        if state["done"] or not state["admissible"]:
            return []
        cands = self.policy.sample(state["admissible"], state["commands"], self.rng(state["commands"]), n=k,
                                   distinct=True, intro=self.prompt, feedbacks=state["feedbacks"])
        out = []
        for c in cands:
            with self._lock:
                self.env.replay(state["commands"])
                x = self.env.step(c)
                self.tool_calls += 1
                self.lost += int(x.lost)
            out.append((self.step_text(c, x.feedback),
                        {"commands": state["commands"] + [c], "feedbacks": state["feedbacks"] + [x.feedback],
                         "admissible": list(x.admissible), "won": x.won, "lost": x.lost, "done": x.done}))
        return out

    @staticmethod
    def is_won(state: Any) -> bool:
        """The game is won in ``state`` (the searches' ``is_terminal``)."""
        return bool(state["won"])

    @staticmethod
    def is_lost(state: Any) -> bool:
        """The game is over in ``state`` without a win: lost, or out of steps (the searches' ``is_lost``)."""
        return bool(state["done"] and not state["won"])
