"""A real chat model as the TextWorld base policy, its proposals constrained to admissible commands.

Each proposal is one chat call whose reply the server may only write as ``{"command": C}`` with
``C`` one of the admissible commands (an OpenAI ``response_format`` JSON schema with an ``enum``;
llama.cpp, vLLM, Ollama and OpenAI accept it), so a small model that cannot produce tool calls
still proposes only legal moves, and game text that tries to steer it can at worst pick another
legal command. ``distinct=True`` draws without replacement: the ``k``-th call's enum leaves out the
commands already proposed (the prompt, and so the server's prompt cache, stays the same).

The prompt holds what the agent sees: the game's intro text, the last ``max_history`` commands
with their feedback, and the admissible commands. Sampling is at ``temperature`` with a seed drawn
from the caller's ``rng`` for every call, so an episode is reproducible on the same server and model.

    from langchain_openai import ChatOpenAI
    from prm_critic.llm import LocalLLMServer

    with LocalLLMServer("smollm2", n_threads=1) as server:
        llm = ChatOpenAI(base_url=server.base_url, api_key="none", model=server.model, max_tokens=48)
        policy = LLMPolicy(llm)
        run_base(game_path, rng, policy=policy)   # or run_step_bon / run_beam (agents.textworld_agent.search)
"""

from __future__ import annotations

import json
from typing import Any, Sequence

import numpy as np

__all__ = ["LLMPolicy", "command_response_format"]

SYSTEM = (
    "You play a text adventure. The goal is stated in the game's introduction: find the recipe, "
    "gather and cook the ingredients the way the cookbook says, prepare the meal and eat it. "
    "Wrong cooking or eating an ingredient loses the game. Reply with the next command only, as "
    'JSON {"command": "..."}, choosing one of the admissible commands.'
)


def command_response_format(commands: Sequence[str]) -> dict[str, Any]:
    """An OpenAI ``response_format`` that only admits ``{"command": C}`` with ``C`` in ``commands``."""
    cmds = list(dict.fromkeys(commands))
    if not cmds or not all(isinstance(c, str) and c for c in cmds):
        raise ValueError(f"commands: expected at least one non-empty string, got {list(commands)!r:.200}")
    schema = {"type": "object", "properties": {"command": {"type": "string", "enum": cmds}},
              "required": ["command"], "additionalProperties": False}
    return {"type": "json_schema", "json_schema": {"name": "command", "schema": schema, "strict": True}}


class LLMPolicy:
    """Proposes commands with a LangChain chat model (e.g. ``ChatOpenAI`` on an OpenAI-compatible server).

    Args:
        llm: a LangChain chat model that accepts ``response_format`` and ``seed`` call arguments.
        temperature: sampling temperature of every call (> 0 for distinct proposals to differ).
        max_history: how many of the latest (command, feedback) pairs go into the prompt.
        max_chars: cap on each game text in the prompt (the intro and each feedback).
        max_attempts: calls per proposal before a reply that is not an admissible command is an error.

    Attributes:
        calls: chat calls made so far; ``last_prompt``: the user message of the last call.
    """

    def __init__(self, llm: Any, *, temperature: float = 1.0, max_history: int = 6, max_chars: int = 800,
                 max_attempts: int = 2):
        if not hasattr(llm, "invoke"):
            raise TypeError(f"llm: expected a LangChain chat model (with .invoke), got {type(llm).__name__}")
        if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not 0 <= temperature <= 2:
            raise ValueError(f"temperature: expected a number in [0, 2], got {temperature!r}")
        for name, v, lo in (("max_history", max_history, 0), ("max_chars", max_chars, 50),
                            ("max_attempts", max_attempts, 1)):
            if isinstance(v, bool) or not isinstance(v, int) or v < lo:
                raise ValueError(f"{name}: expected an int >= {lo}, got {v!r}")
        self.llm = llm
        self.temperature = float(temperature)
        self.max_history = max_history
        self.max_chars = max_chars
        self.max_attempts = max_attempts
        self.calls = 0
        self.last_prompt = ""

    def _clip(self, text: str) -> str:
        text = " ".join(str(text).split())
        return text if len(text) <= self.max_chars else text[: self.max_chars] + " [...]"

    def prompt(self, admissible: Sequence[str], history: Sequence[str], intro: str,
               feedbacks: Sequence[str]) -> str:
        """The user message: intro, the latest ``max_history`` (command, feedback) pairs, the admissible commands.

        ``feedbacks`` is empty (no game texts) or holds one answer per command of ``history``.
        """
        if feedbacks and len(feedbacks) != len(history):
            raise ValueError(f"feedbacks: expected none or one per command of history ({len(history)}), "
                             f"got {len(feedbacks)}")
        lines = ["Introduction: " + self._clip(intro)]
        k = min(self.max_history, len(feedbacks))
        if k:
            lines.append("Latest commands and what the game answered:")
            for c, f in zip(history[len(history) - k:], feedbacks[len(feedbacks) - k:]):
                lines.append(f"> {c}\n{self._clip(f)}")
        lines.append("Admissible commands: " + "; ".join(admissible))
        lines.append("Next command?")
        return "\n".join(lines)

    def sample(self, admissible: Sequence[str], history: Sequence[str], rng: np.random.Generator,
               n: int = 1, *, distinct: bool = False, intro: str = "", feedbacks: Sequence[str] = ()) -> list[str]:
        """Propose ``n`` commands among ``admissible`` (one chat call each).

        Args:
            admissible: the legal commands now.
            history: the commands issued so far this episode.
            rng: seeds every call (``rng.integers(2**31)``).
            n: proposals wanted (>= 1).
            distinct: without replacement (then at most ``len(admissible)`` proposals).
            intro: the game's intro text; feedbacks: the game's answer to each command of ``history``.
        """
        from langchain_core.messages import HumanMessage, SystemMessage

        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"n: expected an int >= 1, got {n!r}")
        adm = list(dict.fromkeys(admissible))
        if not adm:
            raise ValueError("admissible: expected at least one admissible command, got none")
        messages = [SystemMessage(content=SYSTEM),
                    HumanMessage(content=self.prompt(adm, history, intro, feedbacks))]
        self.last_prompt = messages[1].content
        out: list[str] = []
        for _ in range(min(n, len(adm)) if distinct else n):
            choices = [c for c in adm if c not in out] if distinct else adm
            out.append(self._one(messages, choices, rng))
        return out

    def _one(self, messages: list, choices: list[str], rng: np.random.Generator) -> str:
        rf = command_response_format(choices)
        text = ""
        for _ in range(self.max_attempts):
            try:
                reply = self.llm.invoke(messages, response_format=rf, temperature=self.temperature,
                                        seed=int(rng.integers(2**31)))
            except Exception as exc:  # noqa: BLE001 - only the token-limit cut is a failed attempt
                # openai's client refuses to parse a structured reply cut at max_tokens (e.g. a
                # small model padding the JSON with whitespace): a failed attempt, not a crash
                if type(exc).__name__ != "LengthFinishReasonError":
                    raise
                self.calls += 1
                text = f"<reply cut at the token limit: {exc}>"
                continue
            self.calls += 1
            text = reply.content if isinstance(reply.content, str) else str(reply.content)
            try:
                cmd = json.loads(text).get("command")
            except (ValueError, AttributeError):
                continue
            if cmd in choices:
                return cmd
        raise ValueError(f"reply: expected {{\"command\": one of {len(choices)} admissible commands}} after "
                         f"{self.max_attempts} calls, got {text!r:.200} (does the server honour response_format? "
                         "is the model's max_tokens enough for the longest command?)")
