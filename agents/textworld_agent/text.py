"""What the agent (and the learned critic) sees, rendered as text.

* prompt: the intro text of the game (the objective, then the first room's description);
* a step: the tool call and the game's feedback, ``format_tool_step(tool, args, feedback)``:
  ``act({"command": "open fridge"})``, or ``look()`` / ``inventory()`` for those two commands.

Never included: score, ``intermediate_reward``, won/lost flags, the walkthrough (privileged).
"""

from __future__ import annotations

from prm_critic.text.steps import format_tool_step

__all__ = ["tool_of", "step_text", "TOOL_COMMANDS"]

#: tools whose call is a fixed game command
TOOL_COMMANDS = {"look": "look", "inventory": "inventory"}


def tool_of(command: str) -> tuple[str, dict | None]:
    """The tool call that issues ``command``: ``("look", None)``, ``("inventory", None)`` or
    ``("act", {"command": command})``."""
    if command in TOOL_COMMANDS.values():
        return command, None
    return "act", {"command": command}


def step_text(command: str, feedback: str) -> str:
    """The critic's text of one step: the tool call and the game's feedback."""
    tool, args = tool_of(command)
    return format_tool_step(tool, args, feedback)
