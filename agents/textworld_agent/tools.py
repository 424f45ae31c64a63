"""The agent's tools: game commands on a :class:`~agents.textworld_agent.env.TextWorldGame`.

``act(command)`` issues any game command; ``look()`` and ``inventory()`` are shorthands. A tool's
result (what the model sees) is the game's feedback text; the admissible commands of the new state
travel in the ToolMessage ``artifact`` (``{"admissible": [...], "done": bool}``) -- the offline
policy reads them there, and they never enter the critic's step text.

Game sessions are looked up by game path and synchronised to the graph state's command history
(replayed when they differ), so the graph state ``(game, commands)`` alone determines the game
state: LangGraph checkpoints, forks and time travel work without pickling the game.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from prm_critic._optional import require

from agents.textworld_agent.env import StepResult, TextWorldGame
from agents.textworld_agent.text import TOOL_COMMANDS

__all__ = ["TOOL_NAMES", "make_tools", "command_of", "session_for", "clear_sessions"]

TOOL_NAMES = ("act", "look", "inventory")

_SESSIONS: dict[tuple[str, int], TextWorldGame] = {}


def session_for(game: str | Path, commands: Sequence[str], *, max_steps: int = 50) -> tuple[TextWorldGame, StepResult]:
    """A game session at the state after ``commands`` (cached per process; replays if needed)."""
    key = (str(Path(game)), int(max_steps))
    sess = _SESSIONS.get(key)
    if sess is None:
        sess = _SESSIONS[key] = TextWorldGame(game, max_steps=max_steps)
    if sess.last is None or sess.history != list(commands):
        res = sess.replay(list(commands))
    else:
        res = sess.last
    return sess, res


def clear_sessions() -> None:
    """Close all cached sessions."""
    for s in _SESSIONS.values():
        s.close()
    _SESSIONS.clear()


def command_of(name: str, args: dict | None) -> str:
    """The game command a tool call issues; ValueError naming the tool / argument otherwise."""
    if name == "act":
        cmd = (args or {}).get("command")
        if not isinstance(cmd, str) or not cmd.strip():
            raise ValueError(f"act.command: expected a non-empty game command string, got {cmd!r}")
        return cmd.strip()
    if name in TOOL_COMMANDS:
        return TOOL_COMMANDS[name]
    raise ValueError(f"tool: expected one of {TOOL_NAMES}, got {name!r}")


def make_tools(game: TextWorldGame):
    """LangChain tools bound to one game session (for ``bind_tools`` and direct use)."""
    tools = require("langchain_core.tools")

    def _run(cmd: str):
        r = game.step(cmd)
        return r.feedback, {"admissible": list(r.admissible), "done": r.done}

    @tools.tool(response_format="content_and_artifact")
    def act(command: str):
        """Issue one game command, e.g. 'open fridge', 'take carrot from counter', 'cook carrot with oven'."""
        return _run(command_of("act", {"command": command}))

    @tools.tool(response_format="content_and_artifact")
    def look():
        """Describe the current room."""
        return _run("look")

    @tools.tool(response_format="content_and_artifact")
    def inventory():
        """List what you are carrying."""
        return _run("inventory")

    return [act, look, inventory]
