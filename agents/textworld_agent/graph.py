"""The TextWorld agent as a LangGraph ``StateGraph``.

Graph::

    START -> setup -> agent -> tools -> (agent | END)

* ``setup``: generates / opens the game (input ``{"seed": S}`` or ``{"game": path}``), resets it
  and puts the intro text in a HumanMessage (the admissible commands travel in
  ``additional_kwargs["admissible"]``).
* ``agent``: a chat model with the tools bound (``act(command)``, ``look()``, ``inventory()``)
  returns an AIMessage with one tool call. The default is :class:`OfflinePolicyModel`, which
  samples among the admissible commands with :class:`~agents.textworld_agent.policy.BasePolicy`;
  any LangChain chat model with ``bind_tools`` can replace it (``build_graph(model=...)``).
* ``tools``: runs the call on the game session for ``(game, commands)`` and appends a
  ToolMessage (content = game feedback; artifact = admissible commands).
* ends when the game is won / lost / out of steps, or ``remaining_steps`` runs low.

``graph`` (module level, compiled, offline policy) is what ``agents/langgraph.json`` points at.
"""


import itertools
from pathlib import Path
from typing import Annotated, Any, Sequence

from typing_extensions import TypedDict

if not __package__:  # loaded by file path (LangGraph CLI / server): make the repo root importable
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from prm_critic._optional import require

from agents.textworld_agent.env import DEFAULT_DIFFICULTY, ensure_game
from agents.textworld_agent.policy import BasePolicy
from agents.textworld_agent.text import tool_of
from agents.textworld_agent.tools import command_of, make_tools, session_for

_lg_graph = require("langgraph.graph")
_lg_managed = require("langgraph.managed")
_msgs = require("langchain_core.messages")
_chat = require("langchain_core.language_models.chat_models")
_outputs = require("langchain_core.outputs")

__all__ = ["TextWorldAgentState", "OfflinePolicyModel", "build_graph", "graph", "SYSTEM_PROMPT"]

SYSTEM_PROMPT = (
    "You play a text adventure cooking game. Use the tools: act(command) issues a game command, "
    "look() describes the room, inventory() lists what you carry. Read the cookbook, gather and "
    "prepare the ingredients as the recipe says, prepare the meal and eat it. One tool call per turn."
)


class TextWorldAgentState(TypedDict, total=False):
    """Graph state.

    ``messages`` (reducer: append), ``game`` (path of the .z8), ``seed``, ``commands`` (game
    commands so far: with ``game`` they determine the game state), ``won``/``lost``/``done``
    (game status, for the caller; the model never reads them), ``max_steps``.
    """

    messages: Annotated[list, _lg_graph.add_messages]
    seed: int
    game: str
    max_steps: int
    commands: list[str]
    won: bool
    lost: bool
    done: bool
    remaining_steps: _lg_managed.RemainingSteps


def _admissible(messages: Sequence[Any]) -> list[str]:
    for m in reversed(messages):
        art = getattr(m, "artifact", None)
        if isinstance(art, dict) and "admissible" in art:
            return list(art["admissible"])
        kw = getattr(m, "additional_kwargs", None) or {}
        if "admissible" in kw:
            return list(kw["admissible"])
    return []


def _issued(messages: Sequence[Any]) -> list[str]:
    out = []
    for m in messages:
        for c in getattr(m, "tool_calls", None) or []:
            try:
                out.append(command_of(c["name"], c.get("args")))
            except ValueError:
                pass
    return out


class OfflinePolicyModel(_chat.BaseChatModel):
    """A chat model that needs no LLM: it samples one admissible command with ``BasePolicy`` and
    returns it as a tool call (``act``, or ``look`` / ``inventory``). It reads the admissible
    commands from the latest message that carries them, and its own earlier tool calls.
    Deterministic given ``seed`` and the call sequence.
    """

    seed: int = 0
    repeat_penalty: float = 0.3
    uniform: bool = False

    def model_post_init(self, __context) -> None:
        import numpy as np

        self._rng = np.random.default_rng(self.seed)
        self._policy = BasePolicy(prior={} if self.uniform else BasePolicy().prior, repeat_penalty=self.repeat_penalty)
        self._ids = itertools.count()

    @property
    def _llm_type(self) -> str:
        return "textworld-offline-policy"

    def bind_tools(self, tools, **kwargs):
        return self

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        adm = _admissible(messages)
        if not adm:
            raise ValueError("messages: no admissible commands found (expected the game's intro or a tool result)")
        cmd = self._policy.sample(adm, _issued(messages), self._rng)[0]
        tool, args = tool_of(cmd)
        msg = _msgs.AIMessage(content="", tool_calls=[{"name": tool, "args": args or {}, "id": f"call_{next(self._ids)}",
                                                       "type": "tool_call"}])
        return _outputs.ChatResult(generations=[_outputs.ChatGeneration(message=msg)])


def build_graph(model: Any = None, *, max_steps: int = 50, cache_dir: str | Path | None = None):
    """Build the (uncompiled) agent graph.

    Args:
        model: a LangChain chat model supporting ``bind_tools`` (default: ``OfflinePolicyModel()``).
        max_steps: default game step limit (the input may override it with ``max_steps``).
        cache_dir: where generated games live (default: ``.cache/textworld``).
    """
    if model is None:
        model = OfflinePolicyModel()
    if not hasattr(model, "invoke"):
        raise TypeError(f"model: expected a LangChain chat model, got {type(model).__name__}")
    if not isinstance(max_steps, int) or max_steps < 1:
        raise ValueError(f"max_steps: expected an int >= 1, got {max_steps!r}")
    # tool schemas only (execution happens in the tools node, on the session for the state)
    from agents.textworld_agent.env import TextWorldGame  # noqa: F401
    schema_tools = make_tools(None)  # type: ignore[arg-type]
    bound = model.bind_tools(schema_tools) if hasattr(model, "bind_tools") else model

    def setup(state: TextWorldAgentState) -> dict:
        game = state.get("game")
        if not game:
            seed = state.get("seed")
            if seed is None:
                raise KeyError("seed: the input needs 'seed' (an int >= 0) or 'game' (a .z8 path)")
            game = str(ensure_game(int(seed), DEFAULT_DIFFICULTY, cache_dir))
        ms = int(state.get("max_steps", max_steps))
        commands = list(state.get("commands") or [])
        sess, res = session_for(game, commands, max_steps=ms)
        out: dict = {"game": str(game), "max_steps": ms, "commands": commands,
                     "won": res.won, "lost": res.lost, "done": res.done}
        if not state.get("messages"):
            out["messages"] = [_msgs.SystemMessage(SYSTEM_PROMPT),
                               _msgs.HumanMessage(sess.intro, additional_kwargs={"admissible": res.admissible})]
        return out

    def agent(state: TextWorldAgentState) -> dict:
        return {"messages": [bound.invoke(state["messages"])]}

    def tools(state: TextWorldAgentState) -> dict:
        last = state["messages"][-1]
        calls = getattr(last, "tool_calls", None) or []
        commands = list(state.get("commands") or [])
        sess, res = session_for(state["game"], commands, max_steps=int(state.get("max_steps", max_steps)))
        out_msgs = []
        for c in calls:
            if res.done:
                out_msgs.append(_msgs.ToolMessage("The game is over.", tool_call_id=c["id"], name=c["name"],
                                                  artifact={"admissible": [], "done": True}, status="error"))
                continue
            try:
                cmd = command_of(c["name"], c.get("args"))
            except ValueError as exc:
                out_msgs.append(_msgs.ToolMessage(str(exc), tool_call_id=c["id"], name=c["name"],
                                                  artifact={"admissible": res.admissible, "done": False}, status="error"))
                continue
            res = sess.step(cmd)
            commands.append(cmd)
            out_msgs.append(_msgs.ToolMessage(res.feedback, tool_call_id=c["id"], name=c["name"],
                                              artifact={"admissible": res.admissible, "done": res.done}))
        return {"messages": out_msgs, "commands": commands, "won": res.won, "lost": res.lost, "done": res.done}

    def after_agent(state: TextWorldAgentState) -> str:
        last = state["messages"][-1]
        return "tools" if getattr(last, "tool_calls", None) else _lg_graph.END

    def after_tools(state: TextWorldAgentState) -> str:
        if state.get("done"):
            return _lg_graph.END
        rem = state.get("remaining_steps")
        if rem is not None and rem < 3:
            return _lg_graph.END
        return "agent"

    b = _lg_graph.StateGraph(TextWorldAgentState)
    b.add_node("setup", setup)
    b.add_node("agent", agent)
    b.add_node("tools", tools)
    b.add_edge(_lg_graph.START, "setup")
    b.add_edge("setup", "agent")
    b.add_conditional_edges("agent", after_agent, ["tools", _lg_graph.END])
    b.add_conditional_edges("tools", after_tools, ["agent", _lg_graph.END])
    return b


#: compiled offline agent (what agents/langgraph.json serves); input {"seed": S} or {"game": path}
graph = build_graph().compile()
